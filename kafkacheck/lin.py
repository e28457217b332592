"""``kafkacheck lin``: the linearizability checker on a history file.

Reads a run directory of ours (or its history.jsonl), a Jepsen etcd log as porcupine's tests
use them, or a porcupine kv file; picks the model the format implies unless ``--model`` names
one; prints the verdict per partition, and for an illegal one the operation where the search
got stuck; optionally writes the HTML page.
"""

from __future__ import annotations

import json
from pathlib import Path

from linearizability import CheckResult, HistoryError, check_operations, get_model
from linearizability.formats import read_etcd_log, read_kv_edn
from linearizability.kafka_histories import KAFKA_MODELS, read_run

FORMAT_MODELS = {"run": KAFKA_MODELS, "etcd": ("register",), "kv": ("kv", "kv-map")}
ROWS_SHOWN = 20


class NothingChecked(Exception):
    """The history is well formed but holds nothing the model checks: never "ok"."""


def detect_format(path: Path) -> str:
    if path.is_dir() or path.suffix == ".jsonl":
        return "run"
    if not path.exists():
        raise HistoryError(f"{path}: no such file or directory")
    with path.open(errors="replace") as f:
        for line in f:
            if not line.strip():
                continue
            if "jepsen.util" in line:
                return "etcd"
            if line.lstrip().startswith("{:process"):
                return "kv"
            break
    raise HistoryError(f"{path}: not a run directory, history.jsonl, Jepsen etcd log or porcupine kv file")


def load(path: Path, model_name: str | None):
    fmt = detect_format(path)
    allowed = FORMAT_MODELS[fmt]
    model = get_model(model_name or allowed[0])
    name = model.name
    if name not in allowed:
        raise HistoryError(f"a {fmt} history is checked with --model {' or '.join(allowed)}, not {name}")
    if fmt == "run":
        _meta, ops = read_run(path, name)
    elif fmt == "etcd":
        ops = read_etcd_log(path)
    else:
        ops = read_kv_edn(path)
    return model, ops


def result_json(result: CheckResult) -> dict:
    parts = []
    for n, p in enumerate(result.partitions):
        stuck = p.stuck
        parts.append({
            "partition": n, "verdict": p.verdict, "reason": p.reason, "operations": len(p.operations),
            "linearized": len(p.longest), "iterations": p.iterations, "cache_entries": p.cache_entries,
            "stuck_at": None if stuck is None else {
                "operation": get_model(result.model).describe_operation(stuck.input, stuck.output),
                "client": stuck.client_id, "index": stuck.index},
        })
    return {"verdict": result.verdict, "model": result.model, "engine": result.engine,
            "elapsed_s": round(result.elapsed_s, 6), "partitions": parts}


def print_result(result: CheckResult, path: Path) -> None:
    from rich.table import Table

    from kafkacheck.console import stdout_console

    console = stdout_console()
    model = get_model(result.model)
    table = Table(title=f"{path} ({result.model})")
    for col in ("partition", "verdict", "ops", "linearized", "stuck at"):
        table.add_column(col)
    order = sorted(range(len(result.partitions)), key=lambda n: (result.partitions[n].verdict != "illegal", n))
    for n in order[:ROWS_SHOWN]:
        p = result.partitions[n]
        stuck = ""
        if (op := p.stuck) is not None:
            stuck = f"client {op.client_id}: {model.describe_operation(op.input, op.output)}"
            if op.index is not None:
                stuck += f" (history index {op.index})"
        key = p.operations[0].input[1] if result.model in ("kv", "partition-log", "committed-offsets") else n
        verdict = p.verdict + (f" ({p.reason})" if p.reason else "")
        table.add_row(str(key), verdict, str(len(p.operations)), str(len(p.longest)) if p.longest else "", stuck)
    if len(order) > ROWS_SHOWN:
        table.caption = f"{len(order) - ROWS_SHOWN} more partitions not shown"
    console.print(table)
    console.print(result.summary())


def run(path: str, model_name: str | None, timeout_s: float | None, memory_max_mb: float, engine: str,
        html: str | None, output: str, iterations_max: int | None = None) -> CheckResult:
    from rich.console import Console

    source = Path(path)
    model, ops = load(source, model_name)
    if not ops:
        fmt = detect_format(source)
        if fmt != "run":  # the detector saw one telltale line, but nothing parsed as an operation
            raise HistoryError(f"{source}: no {fmt} operation in it: not a history")
        raise NothingChecked(f"{source}: nothing to check: no operation the {model.name} model reads "
                             f"(empty-history); a history without operations cannot be judged linearizable")
    with Console(stderr=True).status(f"checking {len(ops)} operations with {model.name}..."):
        result = check_operations(model, ops, timeout_s=timeout_s, memory_max_mb=memory_max_mb, engine=engine,
                                  partial=True, iterations_max=iterations_max)
    if output == "json":
        print(json.dumps(result_json(result), indent=2))
    else:
        print_result(result, source)
    if html:
        from linearizability.visualize import render_html

        written = render_html(result, model, html, title=f"{source} ({model.name})")
        if output != "json":
            print(f"HTML page: {written}")
    return result
