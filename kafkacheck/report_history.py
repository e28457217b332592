"""What a run directory holds, read for its report (:mod:`kafkacheck.report`): run.json and
results.json, history.jsonl as client ops (an invoke and its completion paired, :class:`Op`)
and nemesis ops, the values of the ops the page shows, events.jsonl's node events, and the
fault windows the nemesis ops make (from a fault to the op that ends it).

Only the standard library is imported: ``kafkacheck check`` writes the report and has to start
fast.
"""

from __future__ import annotations

import json
from pathlib import Path

# node events not drawn: too many and too fine for a timeline (the run directory keeps them)
_QUIET_EVENTS = frozenset({"hw-advance", "log-append", "fsync", "txn-marker", "registered", "broker-registered",
                           "partition-change", "compaction"})


# a fault that ends another: the ops it ends (None: any still open but a node's own state)
_ENDS: dict[str, frozenset[str] | None] = {
    "resume": frozenset({"pause", "offline-partition"}),
    "restart": frozenset({"kill", "sigkill", "disk-fault", "lose-unflushed", "crash", "offline-partition"}),
    "start": frozenset({"kill", "sigkill", "stop"}),
    "disk-heal": frozenset({"disk-fault"}),
    "release": frozenset({"straggle"}),
    "heal": None,
}


_NODE_STATE = frozenset({"pause", "kill", "sigkill", "disk-fault", "lose-unflushed", "clock-skew", "crash", "stop",
                         "offline-partition"})


_INSTANT = frozenset({"client-drop", "elect"})  # done at once: windows of no length


_LEVELS = ("skew_ms", "ms", "p")  # a fault set to 0 on every level it has (delay ms 0, loss p 0) ends it


_DECODER = json.JSONDecoder()


def _loads(line: str):
    """``json.loads`` of a history line, without its Python wrapper's cost (a third of reading
    a million-op history); a line that does not start with its value goes to ``json.loads``."""
    try:
        return _DECODER.scan_once(line, 0)[0]
    except StopIteration:
        return json.loads(line)


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def summary(value, limit: int = 90) -> str:
    text = json.dumps(value, separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


class Op:
    __slots__ = ("comp", "error", "f", "inv", "line", "process", "t0", "t1", "type", "value")

    def __init__(self, inv: int, process, f: str, t0: int, line: int) -> None:
        self.inv, self.process, self.f, self.t0 = inv, process, f, t0
        self.comp: int | None = None
        self.t1: int | None = None
        self.type = "invoke"
        self.error: str | None = None
        self.line = line  # history.jsonl's line whose value the op shows: its completion's, else its invoke's
        self.value = ""  # that value, short: read by read_values for the ops drawn only

    @property
    def index(self) -> int:
        return self.comp if self.comp is not None else self.inv


def read_history(path: Path) -> tuple[list[Op], list[dict]]:
    """Client ops paired invoke-completion (in invoke order) and the nemesis's ops, as recorded;
    the client ops' values are left to :func:`read_values` (summarising a million values
    took most of a large run's report)."""
    ops: list[Op] = []
    nemesis: list[dict] = []
    pending: dict = {}
    names: dict[str, str] = {}  # one string per op name and type, not one per op
    if not path.is_file():
        return ops, nemesis
    with open(path) as fh:
        for n, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                o = _loads(line)
                index, process, kind, t = int(o["index"]), o["process"], o["type"], int(o["time"])
            except (ValueError, KeyError, TypeError):
                continue
            if process == "nemesis":
                nemesis.append({"index": index, "time": t, "type": kind, "f": str(o.get("f")), "value": o.get("value")})
                continue
            f = str(o.get("f"))
            f = names.setdefault(f, f)
            if kind == "invoke":
                op = Op(index, process, f, t, n)
                pending[process] = op
                ops.append(op)
                continue
            op = pending.pop(process, None)
            if op is None:  # a completion without its invoke
                op = Op(index, process, f, t, n)
                ops.append(op)
            kind = str(kind)
            op.comp, op.t1, op.type, op.line = index, t, names.setdefault(kind, kind), n
            if o.get("error") is not None:
                op.error = str(o.get("error"))
    return ops, nemesis


def read_values(path: Path, ops: list[Op]) -> None:
    """The values of ``ops`` (the ones drawn), kept short: a second pass over the history that
    parses only their lines."""
    wanted = {op.line: op for op in ops}
    if not wanted:
        return
    last = max(wanted)
    with open(path) as fh:
        for n, line in enumerate(fh):
            op = wanted.get(n)
            if op is not None:
                op.value = summary(_loads(line).get("value"), 90 if op.comp is not None else 60)
            elif n > last:
                break


def read_events(path: Path) -> tuple[list[tuple[int, dict]], dict[str, int]]:
    """The node events worth drawing, with their line number in events.jsonl; counts of all."""
    events: list[tuple[int, dict]] = []
    counts: dict[str, int] = {}
    if not path.is_file():
        return events, counts
    with open(path) as fh:
        for n, line in enumerate(fh):
            try:
                e = json.loads(line)
                kind = str(e["kind"])
                int(e["time"])
            except (ValueError, KeyError, TypeError):
                continue
            counts[kind] = counts.get(kind, 0) + 1
            if kind not in _QUIET_EVENTS:
                events.append((n, e))
    return events, counts


def _nodes_of(value) -> list[str]:
    if not isinstance(value, dict):
        return []
    if isinstance(value.get("nodes"), list):
        return [str(n) for n in value["nodes"]]
    if value.get("node") is not None:
        return [str(value["node"])]
    return []


def fault_windows(nemesis: list[dict], end_ns: int) -> list[dict]:
    """The faults as windows ``{"f", "start", "end", "nodes", "value", "index"}``: a fault from
    its completion (or its invoke, without one) until the op that undoes it begins (resume ends
    a pause of the same node, restart a kill, heal the network faults, the same fault set to 0
    (a clock skew of 0, a delay of 0 ms, a loss of p 0) that fault); one never undone lasts to
    ``end_ns``; a hold-back lasts its ``ms``. Faults done at once (a connection reset, a forced
    election) are windows of no length."""
    windows: list[dict] = []
    open_: list[dict] = []
    last_invoke: dict[str, int] = {}
    for op in nemesis:
        f, value = op["f"], op["value"]
        if op["type"] == "invoke":
            last_invoke[f] = op["time"]
            continue
        started = last_invoke.pop(f, op["time"])
        nodes = _nodes_of(value)
        levels = [value.get(k) for k in _LEVELS if k in value] if isinstance(value, dict) else []
        is_end = f in _ENDS or (f != "hold-back" and bool(levels) and not any(levels))
        if is_end:
            ends = _ENDS.get(f, frozenset({f}))
            candidates = [w for w in open_ if (w["f"] not in _NODE_STATE if ends is None else w["f"] in ends)]
            if nodes:
                same = [w for w in candidates if set(w["nodes"]) & set(nodes)]
                candidates = same or ([candidates[0]] if candidates and ends is not None else candidates)
            for w in candidates:
                w["end"] = started
                open_.remove(w)
            continue
        end = op["time"] if f in _INSTANT else None
        if f == "hold-back" and isinstance(value, dict) and isinstance(value.get("ms"), (int, float)):
            end = op["time"] + int(value["ms"] * 1e6)  # it lasts what it says
        w = {"f": f, "start": op["time"], "end": end, "nodes": nodes, "value": summary(value, 120),
             "index": op["index"]}
        windows.append(w)
        if w["end"] is None:
            open_.append(w)
    for w in open_:
        w["end"] = max(end_ns, w["start"])
    return windows
