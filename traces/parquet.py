"""Parquet corpora of docs/reference/trace-format.md: many runs flattened into the tables ``runs``, ``ops``,
``mops``, ``events`` and ``verdicts``, each a folder of files that hold many runs each.

Layout of a corpus directory::

    corpus.json                     what made it (options, counts), written last
    runs/part-00003-1a2b3c4d.parquet
    ops/part-00003-1a2b3c4d.parquet   (same part name in every table: one batch of runs)
    mops/...  events/...  verdicts/...

A batch is written table by table and ``runs`` last, so a run is in the corpus exactly when
its ``runs`` row is; :func:`open_corpus` deletes the parts of a batch that was cut short (no
``runs`` part), so an interrupted generation resumes cleanly. Rows are sorted by run and
time (ops by index) inside every file.

Beyond docs/reference/trace-format.md's columns the tables carry what the analysis needs without joins
(the op's process, time and function on every micro-op; flattened configuration on runs) and
what converting back needs: ``ops.value`` and ``ops.extra`` hold the op's value and its other
fields as JSON, and ``runs.meta`` the whole run.json, so :func:`read_run` gives back the same
operations.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from traces.history import CorpusError, HistoryError, RunRecord, dumps

TABLES = ("runs", "ops", "mops", "events", "verdicts")
OP_FIELDS = ("index", "time", "process", "type", "f", "value", "error", "node")
EVENT_FIELDS = ("time", "node", "kind", "key")

SCHEMAS = {
    "runs": pa.schema([
        ("run_id", pa.string()), ("seed", pa.int64()), ("target", pa.string()),
        ("workload", pa.string()), ("config", pa.string()), ("faults", pa.list_(pa.string())),
        ("fault_mix", pa.string()), ("bugs", pa.list_(pa.string())), ("bug", pa.string()),
        ("acks", pa.string()), ("idempotence", pa.bool_()), ("isolation_level", pa.string()),
        ("txn", pa.bool_()), ("replication_factor", pa.int64()), ("min_insync_replicas", pa.int64()),
        ("sub_via", pa.string()), ("compacted", pa.bool_()),
        ("final_read", pa.bool_()), ("final_read_start", pa.int64()),
        ("final_end_offsets", pa.map_(pa.string(), pa.int64())),
        ("valid", pa.string()), ("ops_count", pa.int64()), ("meta", pa.string()),
    ]),
    "ops": pa.schema([
        ("run_id", pa.string()), ("index", pa.int64()), ("time", pa.int64()),
        ("process", pa.string()), ("type", pa.string()), ("f", pa.string()),
        ("error", pa.string()), ("node", pa.int64()), ("value", pa.string()), ("extra", pa.string()),
    ]),
    "mops": pa.schema([
        ("run_id", pa.string()), ("op_index", pa.int64()), ("mop_index", pa.int32()),
        ("pos", pa.int32()), ("kind", pa.string()), ("key", pa.string()), ("offset", pa.int64()),
        ("value", pa.int64()), ("record_key", pa.string()), ("type", pa.string()),
        ("process", pa.string()), ("time", pa.int64()), ("f", pa.string()),
    ]),
    "events": pa.schema([
        ("run_id", pa.string()), ("time", pa.int64()), ("node", pa.int64()), ("kind", pa.string()),
        ("key", pa.string()), ("leader_epoch", pa.int64()), ("high_watermark", pa.int64()),
        ("follower", pa.bool_()), ("attrs", pa.string()),
    ]),
    "verdicts": pa.schema([
        ("run_id", pa.string()), ("anomaly", pa.string()), ("count", pa.int64()),
        ("allowed", pa.bool_()),
    ]),
}


# ------------------------------------------------------------------ flattening


def _int(x: Any, what: str) -> int | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, int):
        raise CorpusError(f"{what}: expected an integer, got {x!r}")
    return x


def _str(x: Any) -> str | None:
    return None if x is None else str(x)


def run_rows(run: RunRecord) -> dict[str, list[dict]]:
    """The rows of every table for one run."""
    meta = run.meta
    run_id = str(meta.get("run_id") or "")
    if not run_id:
        raise CorpusError("run.json has no run_id")
    config = meta.get("config") or {}
    faults = [str(f) for f in meta.get("faults") or []]
    bugs = [str(b) for b in config.get("bugs") or []]
    final = config.get("final_read") or {}
    results = run.results or {}
    valid = results.get("valid")
    rows: dict[str, list[dict]] = {t: [] for t in TABLES}
    rows["runs"].append({
        "run_id": run_id, "seed": _int(meta.get("seed"), f"{run_id}: seed"),
        "target": _str(meta.get("target")), "workload": _str(meta.get("workload")),
        "config": dumps(config), "faults": faults, "fault_mix": "+".join(sorted(faults)) or "none",
        "bugs": bugs, "bug": "+".join(sorted(bugs)) or "none",
        "acks": _str(config.get("acks")), "idempotence": config.get("idempotence"),
        "isolation_level": _str(config.get("isolation_level")), "txn": config.get("txn"),
        "replication_factor": config.get("replication_factor"),
        "min_insync_replicas": config.get("min_insync_replicas"),
        "sub_via": ",".join(config.get("sub_via") or []) or None,
        "compacted": bool(config.get("compacted")),
        "final_read": bool(final.get("performed") and final.get("reached_end")),
        "final_read_start": final.get("start_ns") if final.get("performed") else None,
        "final_end_offsets": sorted((final.get("end_offsets") or {}).items()) or None,
        "valid": None if valid is None else json.dumps(valid),
        "ops_count": len(run.ops), "meta": dumps(meta),
    })
    completions: dict[Any, dict] = {}
    for op in run.ops:
        extra = {k: v for k, v in op.items() if k not in OP_FIELDS}
        node = op.get("node")
        if node is not None and (isinstance(node, bool) or not isinstance(node, int)):
            extra["node"], node = node, None  # a node named otherwise stays in extra
        process = op.get("process")
        rows["ops"].append({
            "run_id": run_id, "index": op["index"], "time": op["time"], "process": _str(process),
            "type": op["type"], "f": op["f"], "error": _str(op.get("error")), "node": node,
            "value": dumps(op.get("value")), "extra": dumps(extra) if extra else None,
        })
        if op["type"] != "invoke" and op["f"] in ("send", "poll", "txn") and process != "nemesis":
            completions[op["index"]] = op
    for index, op in completions.items():
        rows["mops"].extend(_mop_rows(run_id, op, index))
    for e in run.events:
        attrs = {k: v for k, v in e.items() if k not in EVENT_FIELDS}
        node = e.get("node")
        rows["events"].append({
            "run_id": run_id, "time": e.get("time"), "node": node if isinstance(node, int) else None,
            "kind": _str(e.get("kind")), "key": _str(e.get("key")),
            "leader_epoch": attrs.get("leader_epoch") if isinstance(attrs.get("leader_epoch"), int) else None,
            "high_watermark": _event_hw(e), "follower": bool(attrs.get("follower")),
            "attrs": dumps(attrs),
        })
    rows["events"].sort(key=lambda r: (r["time"] or 0))
    # "counts" holds what the checks reported as anomalies (some later judged allowed);
    # "allowed" also holds what was allowed when reported (cycles over write-write edges...)
    counts = dict(results.get("allowed") or {})
    for kind, n in (results.get("counts") or {}).items():
        counts[kind] = max(n, counts.get(kind, 0))
    bad = set(results.get("anomaly_types") or [])
    for kind in sorted(counts):
        rows["verdicts"].append({"run_id": run_id, "anomaly": kind, "count": int(counts[kind]),
                                 "allowed": kind not in bad})
    return rows


def _event_hw(e: dict) -> int | None:
    hw = e.get("to") if e.get("kind") == "hw-advance" else e.get("high_watermark")
    return hw if isinstance(hw, int) and not isinstance(hw, bool) else None


def _mop_rows(run_id: str, op: dict, index: int) -> Iterable[dict]:
    base = {"run_id": run_id, "op_index": index, "type": op["type"], "process": _str(op["process"]),
            "time": op["time"], "f": op["f"]}
    for m, mop in enumerate(op.get("value") or []):
        if not isinstance(mop, list) or not mop:
            continue
        where = f"{run_id} op {index} micro-op {m}"
        if mop[0] == "send" and len(mop) >= 3:
            ov = mop[2]
            offset, value = (ov[0], ov[1]) if isinstance(ov, list) and len(ov) == 2 else (None, ov)
            yield {**base, "mop_index": m, "pos": -1, "kind": "send", "key": _str(mop[1]),
                   "offset": _int(offset, where), "value": _int(value, where),
                   "record_key": _str(mop[3]) if len(mop) > 3 else None}
        elif mop[0] == "poll":
            reads = mop[1] if len(mop) > 1 and isinstance(mop[1], dict) else {}
            if not reads:  # an empty poll stays visible
                yield {**base, "mop_index": m, "pos": -1, "kind": "poll", "key": None, "offset": None,
                       "value": None, "record_key": None}
            for key in sorted(reads):
                for pos, rec in enumerate(reads[key]):
                    yield {**base, "mop_index": m, "pos": pos, "kind": "poll", "key": str(key),
                           "offset": _int(rec[0], where), "value": _int(rec[1], where),
                           "record_key": _str(rec[2]) if len(rec) > 2 else None}


def to_tables(records: Iterable[dict[str, list[dict]]]) -> dict[str, pa.Table]:
    """Arrow tables from the rows of several runs, sorted by run and time."""
    merged: dict[str, list[dict]] = {t: [] for t in TABLES}
    for rows in records:
        for t in TABLES:
            merged[t].extend(rows[t])
    order = {"runs": ("run_id",), "ops": ("run_id", "index"),
             "mops": ("run_id", "time", "op_index", "mop_index", "pos"),
             "events": ("run_id", "time"), "verdicts": ("run_id", "anomaly")}
    out = {}
    for t in TABLES:
        rows = merged[t]
        rows.sort(key=lambda r, cols=order[t]: tuple((r[c] is not None, r[c] or 0) if c != "run_id"
                                                      else r[c] for c in cols))
        out[t] = pa.Table.from_pylist(rows, schema=SCHEMAS[t])
    return out


# ------------------------------------------------------------------ the corpus directory


def part_name(run_ids: list[str], number: int) -> str:
    digest = hashlib.sha1("\n".join(sorted(run_ids)).encode()).hexdigest()[:8]
    return f"part-{number:05d}-{digest}"


def write_part(corpus: Path, name: str, tables: dict[str, pa.Table]) -> None:
    """Write one batch: every table but ``runs`` first, ``runs`` last (that makes it count);
    each file written under a temporary name and renamed."""
    for t in (*[t for t in TABLES if t != "runs"], "runs"):
        d = corpus / t
        d.mkdir(parents=True, exist_ok=True)
        tmp = d / f".{name}.parquet.tmp"
        pq.write_table(tables[t], tmp, compression="zstd", row_group_size=1 << 20)
        tmp.replace(d / f"{name}.parquet")


def write_runs(corpus: Path, number: int, rows: list[dict[str, list[dict]]]) -> None:
    """Write the rows of several runs (:func:`run_rows`) as part ``number`` of the corpus."""
    write_part(corpus, part_name([r["runs"][0]["run_id"] for r in rows], number), to_tables(rows))


def open_corpus(corpus: Path) -> set[str]:
    """Prepare ``corpus`` for adding runs: drop parts of unfinished batches and temporary
    files; return the run ids it already holds."""
    if corpus.exists() and not corpus.is_dir():
        raise CorpusError(f"{corpus} is not a directory")
    complete = {p.stem for p in (corpus / "runs").glob("part-*.parquet")}
    for t in TABLES:
        for p in (corpus / t).glob(".*.tmp"):
            p.unlink()
        for p in (corpus / t).glob("part-*.parquet"):
            if p.stem not in complete:
                p.unlink()
    return existing_runs(corpus)


def existing_runs(corpus: Path) -> set[str]:
    ids: set[str] = set()
    for p in sorted((corpus / "runs").glob("part-*.parquet")):
        try:
            ids.update(pq.read_table(p, columns=["run_id"]).column("run_id").to_pylist())
        except (pa.ArrowException, OSError) as e:
            raise CorpusError(f"{p}: not a readable Parquet file ({e})") from None
    return ids


def next_part_number(corpus: Path) -> int:
    numbers = [int(p.stem.split("-")[1]) for p in (corpus / "runs").glob("part-*.parquet")]
    return max(numbers, default=-1) + 1


def read_run(corpus: Path, run_id: str) -> RunRecord:
    """One run back out of a corpus: run.json, the ops and events as they were."""
    if not (corpus / "runs").is_dir():
        raise CorpusError(f"{corpus} is not a corpus (no runs/ table)")
    flt = [("run_id", "=", run_id)]

    def rows(t: str) -> list[dict]:
        if not (corpus / t).is_dir():
            return []
        files = sorted(str(p) for p in (corpus / t).glob("part-*.parquet"))
        if not files:
            return []
        return pq.read_table(files, filters=flt).to_pylist()

    runs = rows("runs")
    if not runs:
        raise CorpusError(f"run {run_id!r} is not in {corpus}")
    meta = json.loads(runs[0]["meta"])
    ops = []
    for r in sorted(rows("ops"), key=lambda r: r["index"]):
        op = {"index": r["index"], "time": r["time"], "process": _process(r["process"]),
              "type": r["type"], "f": r["f"], "value": json.loads(r["value"])}
        if r["error"] is not None:
            op["error"] = r["error"]
        if r["node"] is not None:
            op["node"] = r["node"]
        if r["extra"]:
            op.update(json.loads(r["extra"]))
        ops.append(op)
    events = []
    for r in rows("events"):
        e = {"time": r["time"], "node": r["node"], "kind": r["kind"]}
        if r["key"] is not None:
            e["key"] = r["key"]
        e.update(json.loads(r["attrs"]))
        events.append(e)
    verdict_rows = rows("verdicts")
    results = {"valid": json.loads(runs[0]["valid"]) if runs[0]["valid"] else None,
               "counts": {v["anomaly"]: v["count"] for v in verdict_rows},
               "anomaly_types": sorted(v["anomaly"] for v in verdict_rows if not v["allowed"])}
    return RunRecord(meta, ops, events, results)


def _process(p: str | None) -> int | str | None:
    if p is None or p == "nemesis":
        return p
    try:
        return int(p)
    except ValueError:
        return p


def load_run_dir(path: Path) -> RunRecord:
    """A run directory of docs/reference/trace-format.md (results.json and events.jsonl when present)."""
    from traces.history import load_run

    meta, ops, directory = load_run(path)
    events: list[dict] = []
    ev = directory / "events.jsonl"
    if ev.exists():
        for n, line in enumerate(ev.read_text().splitlines(), 1):
            if line.strip():
                try:
                    events.append(json.loads(line))
                except ValueError:
                    raise HistoryError(f"{ev}:{n}: not valid JSON") from None
    results = None
    res = directory / "results.json"
    if res.exists():
        try:
            results = json.loads(res.read_text())
        except ValueError:
            raise HistoryError(f"{res}: not valid JSON") from None
    return RunRecord(meta, ops, events, results)
