"""Import a Jepsen Kafka-workload history (EDN) into docs/reference/trace-format.md.

Jepsen writes ``history.edn`` as one EDN map per line (a whole vector of maps is accepted
too); ``edn_format`` parses it. The mapping:

* keywords become their names (``:x`` -> ``"x"``, ``:ok`` -> ``"ok"``), integer keys their
  decimal string, so a key names one partition as in our format;
* ``[:send k v]`` / ``[:send k [offset v]]`` / ``[:poll]`` / ``[:poll {k [[o v] ...]}]`` map
  one to one; keyword values become strings (the checker only needs values to be unique;
  run.json's ``target: jepsen`` admits such names where our own histories hold integers);
* ``:process :nemesis`` stays ``"nemesis"``; ``:time`` is already in nanoseconds;
* ``:rebalance-log`` becomes ``rebalance_log``; ``:error`` becomes a short string;
* a completion with no invocation gets one synthesised just before it, and an op with no
  process gets a fresh one (Jepsen's own unit tests contain both);
* ops are re-indexed densely in file order.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import edn_format
from edn_format import Keyword
from edn_format.immutable_list import ImmutableList

from traces.history import FORMAT_VERSION, HistoryError, dumps, validate_op

SEQS = (list, tuple, frozenset, set, ImmutableList)


def _name(x: Any) -> Any:
    if isinstance(x, Keyword):
        return x.name
    if isinstance(x, edn_format.Symbol):
        return str(x)
    return x


def _plain(x: Any) -> Any:
    """EDN data -> JSON data (keywords to names, maps to dicts, vectors/lists/sets to lists)."""
    x = _name(x)
    if hasattr(x, "items") and not isinstance(x, (str, bytes)):
        return {str(_plain(k)): _plain(v) for k, v in x.items()}
    if isinstance(x, SEQS):
        return [_plain(v) for v in x]
    return x


def _mop(m: Any, where: str) -> list:
    if not isinstance(m, SEQS) or not m:
        raise HistoryError(f"{where}: an empty micro-op")
    m = list(m)
    kind = _name(m[0])
    if kind == "send":
        if len(m) < 3:
            raise HistoryError(f"{where}: a send micro-op needs a key and a value")
        return ["send", str(_plain(m[1])), _plain(m[2])]
    if kind == "poll":
        if len(m) < 2 or m[1] is None:
            return ["poll"]
        res = _plain(m[1])
        if not isinstance(res, dict):
            raise HistoryError(f"{where}: a poll result must be a map of keys to [offset value] pairs")
        return ["poll", {str(k): v if isinstance(v, list) else [] for k, v in res.items()}]
    raise HistoryError(f"{where}: unknown micro-op {kind!r}")


def _records(text: str, source: str) -> list[dict]:
    text = text.strip()
    if not text:
        return []
    try:
        if text.startswith("["):
            data = edn_format.loads(text)
            return [dict(m) for m in data]
        out = []
        for line in text.splitlines():
            if line.strip():
                out.append(dict(edn_format.loads(line)))
        return out
    except RecursionError:
        raise HistoryError(f"{source}: not a Jepsen EDN history (nested too deeply)") from None
    except (edn_format.EDNDecodeError, ValueError, TypeError, AttributeError, KeyError,
            NotImplementedError, OverflowError) as e:
        # edn_format raises NotImplementedError for an unknown #tag, among others
        first = (str(e).splitlines() or [type(e).__name__])[0][:120]
        raise HistoryError(f"{source}: not a Jepsen EDN history ({first})") from None


def convert(text: str, source: str = "history.edn") -> list[dict]:
    """Jepsen EDN history text -> our ops (dicts of docs/reference/trace-format.md), densely indexed."""
    try:
        return _convert(text, source)
    except RecursionError:  # parsed, but too deep to convert (or even to print)
        raise HistoryError(f"{source}: not a Jepsen EDN history (nested too deeply)") from None


def _convert(text: str, source: str) -> list[dict]:
    out: list[dict] = []
    open_by_process: dict[Any, dict] = {}
    raw = _records(text, source)
    procs = [m.get(Keyword("process")) for m in raw]
    next_process = 1 + max((p for p in procs if isinstance(p, int)), default=-1)
    for n, m in enumerate(raw, 1):
        where = f"{source}: op {n}"
        get = lambda k, m=m: m.get(Keyword(k))  # noqa: E731
        type_ = _name(get("type"))
        if type_ not in ("invoke", "ok", "fail", "info"):
            raise HistoryError(f"{where}: :type must be :invoke, :ok, :fail or :info")
        f = _name(get("f"))
        process = _name(get("process"))
        if process is None:
            process = next_process
            next_process += 1
        elif not (isinstance(process, int) or process == "nemesis"):
            process = str(process)
            if process != "nemesis":
                raise HistoryError(f"{where}: :process must be an integer or :nemesis")
        time = get("time")
        if isinstance(time, bool) or (time is not None and not isinstance(time, (int, float))):
            raise HistoryError(f"{where}: :time must be a number of nanoseconds")
        if isinstance(time, float) and not math.isfinite(time):
            raise HistoryError(f"{where}: :time {time} is not a finite number")
        time = int(time) if time is not None else (out[-1]["time"] if out else 0)
        value = get("value")
        op: dict[str, Any] = {"time": time, "process": process, "type": type_, "f": str(f)}
        if process != "nemesis" and f in ("send", "poll", "txn"):
            if not isinstance(value, SEQS):
                raise HistoryError(f"{where}: the value of a {f} op must be a vector of micro-ops")
            op["value"] = [_mop(x, where) for x in value]
        elif f in ("assign", "subscribe"):
            op["value"] = [str(_plain(k)) for k in (value or [])]
        else:
            op["value"] = _plain(value)
        if get("error") is not None:
            err = _plain(get("error"))
            op["error"] = err if isinstance(err, str) else json.dumps(err)[:200]
        if get("rebalance-log") is not None:
            op["rebalance_log"] = [{"type": str(e.get("type", "")), "keys": [str(k) for k in e.get("keys", [])]}
                                   for e in _plain(get("rebalance-log")) if isinstance(e, dict)]
        if process == "nemesis":
            out.append(op)
            continue
        if type_ == "invoke":
            if process in open_by_process:  # Jepsen would never; keep the earlier one open as info
                prev = open_by_process.pop(process)
                out.append({**prev, "type": "info", "time": time, "error": "no-completion"})
            open_by_process[process] = op
            out.append(op)
            continue
        if open_by_process.pop(process, None) is None:
            inv_value = op["value"]
            if f in ("send", "poll", "txn"):
                inv_value = [["poll"] if mop[0] == "poll" else
                             ["send", mop[1], mop[2][1] if isinstance(mop[2], list) and len(mop[2]) == 2
                              else mop[2]] for mop in op["value"]]
            out.append({"time": time, "process": process, "type": "invoke", "f": op["f"], "value": inv_value})
        out.append(op)
    for i, op in enumerate(out):
        op["index"] = i
        validate_op(op, f"{source}: op {i}", named_values=True)  # what we write obeys docs/reference/trace-format.md
    return out


def import_history(path: str | Path, out_dir: str | Path) -> tuple[Path, int]:
    """Convert ``path`` into a run directory ``out_dir`` (run.json + history.jsonl)."""
    path = Path(path)
    if not path.is_file():
        raise HistoryError(f"{path}: no such file")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise HistoryError(f"{path}: not a text file") from None
    ops = convert(text, str(path))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sub_via = sorted({op["f"] for op in ops if op["f"] in ("assign", "subscribe")}) or ["assign"]
    meta = {"format": FORMAT_VERSION, "run_id": f"jepsen-{path.stem}", "seed": None, "target": "jepsen",
            "workload": "jepsen-kafka", "started_at": None,
            "config": {"sub_via": sub_via, "ww_deps": True, "imported_from": str(path)},
            "faults": sorted({op["f"] for op in ops if op["process"] == "nemesis"}),
            "versions": {}}
    (out / "run.json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    with open(out / "history.jsonl", "w") as fh:
        for op in ops:
            fh.write(dumps(op) + "\n")
    return out, len(ops)
