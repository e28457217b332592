"""History files of TRACE_FORMAT.md: recording, validation, JSONL reading and writing.

An operation is a plain dict with the fields of TRACE_FORMAT.md. :class:`Recorder` assigns
dense indices as ops happen; :func:`read_history` validates every line and raises
:class:`HistoryError` naming the line and the problem, which commands turn into a one-line
message and exit code 3. JSON is written with sorted keys and no spaces so that the same
run gives the same bytes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
TYPES = ("invoke", "ok", "fail", "info")
CLIENT_FS = ("send", "poll", "txn", "assign", "subscribe", "commit", "crash", "committed")
NEMESIS = "nemesis"


class HistoryError(ValueError):
    """Unusable input: a one-line message naming the file, line and problem."""


class CorpusError(ValueError):
    """An unusable Parquet corpus (traces/parquet.py): a one-line message."""


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


class Recorder:
    """Collects ops (and node events) with dense indices, in the order they happen."""

    def __init__(self) -> None:
        self.ops: list[dict] = []
        self.events: list[dict] = []

    def op(self, time_ns: int, process: int | str, type_: str, f: str, value: Any,
           **extra: Any) -> dict:
        op = {"index": len(self.ops), "time": time_ns, "process": process, "type": type_,
              "f": f, "value": value}
        for k, v in extra.items():
            if v is not None:
                op[k] = v
        self.ops.append(op)
        return op

    def event(self, time_ns: int, node: int, kind: str, fields: dict) -> None:
        e = {"time": time_ns, "node": node, "kind": kind}
        e.update(fields)
        self.events.append(e)


# ------------------------------------------------------------------ validation


def _check_mop(mop: Any, where: str) -> None:
    if not isinstance(mop, list) or not mop or mop[0] not in ("send", "poll"):
        raise HistoryError(f"{where}: a micro-op must be a list starting with \"send\" or \"poll\"")
    if mop[0] == "send":
        if len(mop) < 3 or not isinstance(mop[1], (str, int)):
            raise HistoryError(f"{where}: a send micro-op is [\"send\", key, value]")
    elif len(mop) > 2 or (len(mop) == 2 and not isinstance(mop[1], dict)):
        raise HistoryError(f"{where}: a poll micro-op is [\"poll\"] or [\"poll\", {{key: [...]}}]")


def validate_op(op: Any, where: str) -> dict:
    if not isinstance(op, dict):
        raise HistoryError(f"{where}: an operation must be a JSON object")
    for field in ("index", "time", "process", "type", "f"):
        if field not in op:
            raise HistoryError(f"{where}: missing field {field!r}")
    if not isinstance(op["index"], int) or isinstance(op["index"], bool):
        raise HistoryError(f"{where}: index must be an integer")
    if not isinstance(op["time"], int) or isinstance(op["time"], bool):
        raise HistoryError(f"{where}: time must be an integer (nanoseconds)")
    if op["type"] not in TYPES:
        raise HistoryError(f"{where}: type {op['type']!r} is not one of {', '.join(TYPES)}")
    p = op["process"]
    if not (p == NEMESIS or (isinstance(p, int) and not isinstance(p, bool))):
        raise HistoryError(f"{where}: process must be an integer or \"nemesis\"")
    f = op["f"]
    if not isinstance(f, str):
        raise HistoryError(f"{where}: f must be a string")
    if p != NEMESIS and f not in CLIENT_FS:
        raise HistoryError(f"{where}: unknown client function {f!r}")
    if f in ("send", "poll", "txn") and p != NEMESIS:
        value = op.get("value")
        if not isinstance(value, list):
            raise HistoryError(f"{where}: the value of a {f} op must be a list of micro-ops")
        for mop in value:
            _check_mop(mop, where)
    return op


class SequenceCheck:
    """Dense indices, and each process alternates invoke and completion: fed one op at a time,
    so that a history can be checked while it streams."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.n = 0
        self.open_by_process: dict[Any, dict] = {}

    def feed(self, op: dict, line: int | None = None) -> None:
        i = self.n
        self.n += 1
        where = f"{self.source}:{line if line is not None else i + 1}"
        if op["index"] != i:
            raise HistoryError(f"{where}: index {op['index']} where {i} was expected (indices are dense)")
        p = op["process"]
        if op["type"] == "invoke":
            if p in self.open_by_process and p != NEMESIS:
                raise HistoryError(f"{where}: process {p} invokes again before its op at index "
                                   f"{self.open_by_process[p]['index']} completed")
            self.open_by_process[p] = op
        else:
            inv = self.open_by_process.pop(p, None)
            if inv is None:
                raise HistoryError(f"{where}: a {op['type']} completion with no open invoke for process {p}")
            if inv["f"] != op["f"]:
                raise HistoryError(f"{where}: completion f {op['f']!r} does not match invoke f {inv['f']!r}")


def check_sequence(ops: list[dict], source: str) -> None:
    seq = SequenceCheck(source)
    for op in ops:
        seq.feed(op)


# ------------------------------------------------------------------ files


def write_jsonl(path: str | os.PathLike, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(dumps(row))
            fh.write("\n")


def iter_history(path: str | os.PathLike) -> Iterator[dict]:
    """Stream a history.jsonl, validating every line as it is read (a million-op history
    never sits in memory as dicts); raises HistoryError on the first problem."""
    p = Path(path)
    try:
        fh = open(p, encoding="utf-8")  # noqa: SIM115 -- closed in the finally below
    except FileNotFoundError:
        raise HistoryError(f"{p}: no such file") from None
    except OSError as e:
        raise HistoryError(f"{p}: cannot read: {e.strerror or e}") from None
    seq = SequenceCheck(str(p))
    try:
        n = 0
        while True:
            try:
                line = fh.readline()
            except (OSError, UnicodeDecodeError) as e:
                raise HistoryError(f"{p}:{n + 1}: cannot read: {e}") from None
            if not line:
                return
            n += 1
            if not line.strip():
                continue
            try:
                op = json.loads(line)
            except json.JSONDecodeError as e:
                raise HistoryError(f"{p}:{n}: not valid JSON ({e.msg} at column {e.colno})") from None
            seq.feed(validate_op(op, f"{p}:{n}"), n)
            yield op
    finally:
        fh.close()


def read_history(path: str | os.PathLike) -> list[dict]:
    """Read and validate a whole history.jsonl; raise HistoryError on any problem."""
    return list(iter_history(path))


def read_run_json(path: str | os.PathLike) -> dict:
    p = Path(path)
    try:
        meta = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise HistoryError(f"{p}: not a valid run.json ({e})") from None
    if not isinstance(meta, dict):
        raise HistoryError(f"{p}: run.json must hold one JSON object")
    return meta


def locate_run(path: str | os.PathLike) -> tuple[dict, Path, Path]:
    """A run directory or a history.jsonl: (run metadata, history file, directory)."""
    p = Path(path)
    if p.is_dir():
        hist = p / "history.jsonl"
        if not hist.exists():
            raise HistoryError(f"{p}: no history.jsonl in this directory")
        return read_run_json(p / "run.json"), hist, p
    if not p.exists():
        raise HistoryError(f"{p}: no such file or directory")
    return read_run_json(p.parent / "run.json"), p, p.parent


def load_run(path: str | os.PathLike) -> tuple[dict, list[dict], Path]:
    """A run directory or a history.jsonl: (run metadata, ops, directory)."""
    meta, hist, directory = locate_run(path)
    return meta, read_history(hist), directory
