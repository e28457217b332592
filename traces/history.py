"""History files of docs/reference/trace-format.md: recording, validation, JSONL reading and writing.

An operation is a plain dict with the fields of docs/reference/trace-format.md. :class:`Recorder` assigns
dense indices as ops happen; :func:`read_history` validates every line and raises
:class:`HistoryError` naming the line and the problem, which commands turn into a one-line
message and exit code 3. JSON is written with sorted keys and no spaces so that the same
run gives the same bytes.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
TYPES = ("invoke", "ok", "fail", "info")
CLIENT_FS = ("send", "poll", "txn", "assign", "subscribe", "commit", "crash", "committed", "acquire", "ack")
SHARE_ACK_TYPES = ("accept", "release", "reject")  # a share consumer's acknowledgements (KIP-932)
NEMESIS = "nemesis"


@dataclasses.dataclass
class RunRecord:
    """One run, as read from a run directory or produced by a simulation."""
    meta: dict
    ops: list[dict]
    events: list[dict] = dataclasses.field(default_factory=list)
    results: dict | None = None


class HistoryError(ValueError):
    """Unusable input: a one-line message naming the file, line and problem."""


class CorpusError(ValueError):
    """An unusable Parquet corpus (traces/parquet.py): a one-line message."""


# one encoder for every line (json.dumps with options builds a new one each call)
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def dumps(obj: Any) -> str:
    return _ENCODER.encode(obj)


def _in_key_order(x: Any) -> Any:
    """``x`` with the keys of every dict in it sorted (what a JSON round trip with sorted
    keys gives)."""
    t = type(x)
    if t is dict:
        return {k: _in_key_order(v) if type(v) is dict or type(v) is list else v
                for k, v in sorted(x.items())}
    if t is list and not _flat(x):
        return [_in_key_order(v) for v in x]
    return x


def _flat(x: list) -> bool:
    """True when no dict lies in ``x`` or in its lists (looked at two levels deep, beyond
    that by :func:`_in_key_order`): the common micro-ops and polled records, at no call."""
    for v in x:
        t = type(v)
        if t is dict:
            return False
        if t is list:
            for w in v:
                if type(w) is dict or type(w) is list:
                    return False
    return True


class Recorder:
    """Collects ops (and node events) with dense indices, in the order they happen."""

    def __init__(self) -> None:
        self.ops: list[dict] = []
        self.events: list[dict] = []

    def op(self, time_ns: int, process: int | str, type_: str, f: str, value: Any,
           **extra: Any) -> dict:
        """Record an op. Its dicts get their keys in sorted order, as history.jsonl has them,
        so that the ops in memory are exactly what reading the file back gives."""
        fields = {"index": len(self.ops), "time": time_ns, "process": process, "type": type_,
                  "f": f, "value": value}
        for k, v in extra.items():
            if v is not None:
                fields[k] = v
        op = _in_key_order(fields)
        self.ops.append(op)
        return op

    def event(self, time_ns: int, node: int, kind: str, fields: dict) -> None:
        self.events.append({"time": time_ns, "node": node, "kind": kind, **fields})


# ------------------------------------------------------------------ validation


def _is_int(x: Any) -> bool:
    return type(x) is int  # not bool, not float


def _check_value(v: Any, where: str, named_values: bool) -> None:
    """Values are integers (docs/reference/trace-format.md), or null for a tombstone; a Jepsen import may
    carry Jepsen's keyword values as their names (``named_values``)."""
    if v is None or _is_int(v) or (named_values and isinstance(v, str)):
        return
    raise HistoryError(f"{where}: a value must be an integer{' or a name' if named_values else ''} "
                       f"(or null for a tombstone), not {json.dumps(v)[:40]}")


def _check_key(k: Any, where: str) -> None:
    if not (isinstance(k, str) or _is_int(k)):
        raise HistoryError(f"{where}: a key must be a string \"topic:partition\", not {json.dumps(k)[:40]}")


def _check_record_key(k: Any, where: str) -> None:
    if not (k is None or isinstance(k, str) or _is_int(k)):
        raise HistoryError(f"{where}: a record key must be a string, an integer or null, not {json.dumps(k)[:40]}")


def _check_mop(mop: Any, where: str, named_values: bool = False) -> None:
    if not isinstance(mop, list) or not mop or mop[0] not in ("send", "poll"):
        raise HistoryError(f"{where}: a micro-op must be a list starting with \"send\" or \"poll\"")
    if mop[0] == "send":
        if len(mop) not in (3, 4):
            raise HistoryError(f"{where}: a send micro-op is [\"send\", key, value] (+ record key)")
        _check_key(mop[1], where)
        v = mop[2]
        if isinstance(v, list) and len(v) == 2:  # a completion: [offset, value]
            if not (v[0] is None or _is_int(v[0])):
                raise HistoryError(f"{where}: a completed send is [\"send\", key, [offset, value]] with an "
                                   f"integer (or null) offset, not {json.dumps(v)[:40]}")
            v = v[1]
        _check_value(v, where, named_values)
        if len(mop) == 4:
            _check_record_key(mop[3], where)
        return
    if len(mop) > 2 or (len(mop) == 2 and not isinstance(mop[1], dict)):
        raise HistoryError(f"{where}: a poll micro-op is [\"poll\"] or [\"poll\", {{key: [...]}}]")
    for key, records in (mop[1] if len(mop) == 2 else {}).items():
        if not isinstance(records, list):
            raise HistoryError(f"{where}: a poll's records of {key} must be a list of [offset, value]")
        for rec in records:
            if not isinstance(rec, list) or len(rec) not in (2, 3) or not _is_int(rec[0]):
                raise HistoryError(f"{where}: a polled record is [offset, value] (+ record key) with an "
                                   f"integer offset, not {json.dumps(rec)[:40]}")
            _check_value(rec[1], where, named_values)
            if len(rec) == 3:
                _check_record_key(rec[2], where)


def named_values(meta: dict) -> bool:
    """Whether a run's values may be names (Jepsen's keyword values, as ``import-jepsen`` writes
    them) instead of integers."""
    return meta.get("target") == "jepsen"


def validate_op(op: Any, where: str, named_values: bool = False) -> dict:
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
            _check_mop(mop, where, named_values)
    elif f in ("acquire", "ack") and p != NEMESIS:
        check_share_op(op, where, named_values)
    return op


def _json(x: Any) -> str:
    return json.dumps(x, default=repr)[:40]


def check_share_op(op: dict, where: str, named_values: bool = False) -> None:
    """The value of a share consumer's ``acquire`` or ``ack`` op (KIP-932; docs/reference/trace-format.md):
    HistoryError naming ``where`` and the problem otherwise."""
    f, t, value = op["f"], op["type"], op.get("value")
    if f == "acquire":
        if t != "ok":
            if value is not None:
                raise HistoryError(f"{where}: an acquire's {t} value must be null, not {_json(value)}")
            return
        if op.get("fetch_time") is not None and not _is_int(op["fetch_time"]):
            raise HistoryError(f"{where}: an acquire's fetch_time must be an integer (nanoseconds), "
                               f"not {_json(op['fetch_time'])}")
        if not isinstance(value, dict):
            raise HistoryError(f"{where}: an ok acquire's value must be {{key: [[offset, value, delivery count], "
                               f"...]}}, not {_json(value)}")
        for key, records in value.items():
            if not isinstance(records, list):
                raise HistoryError(f"{where}: an acquire's records of {key} must be a list, not {_json(records)}")
            for rec in records:
                if not (isinstance(rec, list) and len(rec) == 3 and _is_int(rec[0]) and _is_int(rec[2])):
                    raise HistoryError(f"{where}: an acquired record is [offset, value, delivery count] with an "
                                       f"integer offset and count, not {_json(rec)}")
                _check_value(rec[1], where, named_values)
        return
    if value is None and t in ("fail", "info"):
        return
    if not isinstance(value, dict):
        raise HistoryError(f"{where}: an ack's value must be {{key: [[offset, \"accept\" | \"release\" | "
                           f"\"reject\"], ...]}}, not {_json(value)}")
    errors = value.get("errors")
    if t == "ok" and not isinstance(errors, dict):
        raise HistoryError(f"{where}: an ok ack's value must carry \"errors\": {{key: \"NONE\" or an error "
                           f"name}}, not {_json(errors)}")
    if errors is not None and not (isinstance(errors, dict) and all(isinstance(e, str) for e in errors.values())):
        raise HistoryError(f"{where}: an ack's errors must be {{key: \"NONE\" or an error name}}, not {_json(errors)}")
    for key, acks in value.items():
        if key == "errors":
            continue
        if not isinstance(acks, list):
            raise HistoryError(f"{where}: an ack's offsets of {key} must be a list, not {_json(acks)}")
        for a in acks:
            if not (isinstance(a, list) and len(a) == 2 and _is_int(a[0]) and a[1] in SHARE_ACK_TYPES):
                raise HistoryError(f"{where}: an acknowledgement is [offset, \"accept\" | \"release\" | "
                                   f"\"reject\"], not {_json(a)}")


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
    encode = _ENCODER.encode
    with open(path, "w", encoding="utf-8") as fh:
        for start in range(0, len(rows), 4096):
            fh.write("".join([encode(row) + "\n" for row in rows[start:start + 4096]]))


class HistoryStream:
    """The ops of a history.jsonl, read and validated line by line each time it is iterated
    (:func:`iter_history`). It keeps the file's path, so that the checker's compiled engine
    (properties/checker.py, ``engine="fast"``) can read the file itself."""

    def __init__(self, path: str | os.PathLike, named_values: bool = False) -> None:
        self.path = Path(path)
        self.named_values = named_values

    def __iter__(self) -> Iterator[dict]:
        return _stream(self.path, self.named_values)


def iter_history(path: str | os.PathLike, named_values: bool = False) -> HistoryStream:
    """Stream a history.jsonl, validating every line as it is read (a million-op history
    never sits in memory as dicts); iterating raises HistoryError on the first problem.
    ``named_values`` admits string values (a Jepsen import, see :func:`named_values`)."""
    return HistoryStream(path, named_values)


def _stream(path: Path, named_values: bool) -> Iterator[dict]:
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
            op = loads_line(line, f"{p}:{n}")
            seq.feed(validate_op(op, f"{p}:{n}", named_values), n)
            yield op
    finally:
        fh.close()


def loads_line(line: str, where: str) -> Any:
    """One JSON line; HistoryError (naming ``where``) for anything that is not JSON, nests too
    deeply for the parser, or holds a number no JSON reader should accept (NaN, Infinity)."""
    try:
        return json.loads(line, parse_constant=_refuse_constant)
    except json.JSONDecodeError as e:
        raise HistoryError(f"{where}: not valid JSON ({e.msg} at column {e.colno})") from None
    except RecursionError:
        raise HistoryError(f"{where}: JSON nested too deeply") from None
    except ValueError as e:
        raise HistoryError(f"{where}: {e}") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_history(path: str | os.PathLike, named_values: bool = False) -> list[dict]:
    """Read and validate a whole history.jsonl; raise HistoryError on any problem."""
    return list(iter_history(path, named_values))


def read_run_json(path: str | os.PathLike) -> dict:
    p = Path(path)
    try:
        meta = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as e:
        raise HistoryError(f"{p}: not a valid run.json ({str(e)[:120] or 'nested too deeply'})") from None
    if not isinstance(meta, dict):
        raise HistoryError(f"{p}: run.json must hold one JSON object")
    config = meta.get("config")
    if config is not None and not isinstance(config, dict):
        raise HistoryError(f"{p}: run.json's \"config\" must be a JSON object")
    for field in ("final_read", "share"):
        if config is not None and config.get(field) is not None and not isinstance(config[field], dict):
            raise HistoryError(f"{p}: run.json's config.{field} must be a JSON object")
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
    return meta, read_history(hist, named_values(meta)), directory
