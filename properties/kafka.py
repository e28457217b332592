"""The Jepsen-parity core of the history checker (PROTOCOL_NOTES.md section 4).

Works on any history of TRACE_FORMAT.md, recorded by us or imported from Jepsen. It follows
the meaning of ``jepsen.tests.kafka``'s analysis, written anew for compact in-memory ops so
that a million-op history fits in a few hundred megabytes:

* the **version order** of each key comes from every poll result (ok, info and fail: pollers
  always see real offsets) and from the sends of ops that *must have committed* (``ok``, or
  ``info`` with at least one value read by an ok poll); offsets are numbered densely;
* ``inconsistent-offsets``, ``duplicate``, ``lost-write``, ``G1a``, ``precommitted-read``;
* ``int-poll-skip`` / ``int-nonmonotonic-poll`` inside an op (not for keys its rebalance log
  touched), ``int-send-skip`` / ``int-nonmonotonic-send`` inside an op;
* ``poll-skip`` / ``nonmonotonic-poll``: per process, each op's first read of a key against
  the last read of the last *ok* op (a failed or crashed op rolls the consumer back), with
  assign and subscribe keeping only the keys they still cover;
* ``nonmonotonic-send``: per process, over ok and info ops.

Beyond Jepsen: ``G1b`` (an op's last read of a key is a value its writer later overwrote in
that key) and ``stale-read`` (a bounded-staleness check after the faults end, instead of
Jepsen's ``unseen``, which cannot tell loss from lag). Dependency cycles are in
:mod:`properties.cycles`.
"""

from __future__ import annotations

import bisect
import itertools
import sys
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

CLIENT_TXN_FS = ("send", "poll", "txn")


class HistoryShapeError(ValueError):
    """The history breaks an assumption the checker needs (for example unique values)."""


def hashable(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((str(k), hashable(x)) for k, x in v.items()))
    return v


@dataclass(slots=True)
class Op:
    """One client operation: its invocation and completion folded together."""

    index: int  # the completion's index (the invocation's if it never completed)
    process: Any
    type: str  # ok, fail, info; an op that never completed counts as info
    f: str
    invoke_time: int
    time: int  # completion time
    sends: list  # [(key, offset or None, value)] in op order
    polls: list  # [[(key, [(offset, value), ...]), ...]] one list per poll micro-op
    keys: list | None = None  # assign/subscribe: the keys it covers
    seek_to_beginning: bool = False
    touched: frozenset = frozenset()  # keys the rebalance log touched
    completed: bool = True
    raw_value: Any = None  # the completion's value, for ops other than send, poll and txn
    weak: bool = False  # an ok send with acks 0 or 1, counted as info

    def reads(self) -> dict[str, list]:
        """key -> values read, in read order, over all poll micro-ops."""
        out: dict[str, list] = {}
        for res in self.polls:
            for key, pairs in res:
                out.setdefault(key, []).extend(v for _o, v in pairs)
        return out

    def writes(self) -> dict[str, list]:
        out: dict[str, list] = {}
        for key, _o, v in self.sends:
            out.setdefault(key, []).append(v)
        return out


_intern = sys.intern


def _key(k: Any) -> str:
    return _intern(str(k))


def tombstone(offset: int | None) -> Any:
    """A tombstone's value (null) made unique per offset, so that it names one record."""
    return None if offset is None else ("tombstone", offset)


def is_tombstone(v: Any) -> bool:
    return v is None or (isinstance(v, tuple) and len(v) == 2 and v[0] == "tombstone")


def _parse_sends(value: Any) -> list:
    out = []
    if not isinstance(value, list):
        return out
    for mop in value:
        if not isinstance(mop, list) or len(mop) < 3 or mop[0] != "send":
            continue
        v = mop[2]
        if isinstance(v, list) and len(v) == 2:
            off = v[0] if isinstance(v[0], int) and not isinstance(v[0], bool) else None
            out.append((_key(mop[1]), off, hashable(v[1]) if v[1] is not None else tombstone(off)))
        else:
            out.append((_key(mop[1]), None, hashable(v)))
    return out


def _parse_polls(value: Any) -> list:
    out = []
    if not isinstance(value, list):
        return out
    for mop in value:
        if not (isinstance(mop, list) and len(mop) == 2 and mop[0] == "poll" and isinstance(mop[1], dict)):
            continue
        res = []
        for key, pairs in mop[1].items():
            if not isinstance(pairs, list):
                continue
            got = []
            for p in pairs:
                if isinstance(p, list) and len(p) >= 2:
                    off = p[0] if isinstance(p[0], int) and not isinstance(p[0], bool) else None
                    got.append((off, hashable(p[1]) if p[1] is not None else tombstone(off)))
                else:  # a plain value with no offset (seen in hand-written histories)
                    got.append((None, hashable(p)))
            res.append((_key(key), got))
        out.append(res)
    return out


def compile_ops(ops: Iterable[dict], weak_acks: bool = False) -> tuple[list[Op], list[tuple[int, int]]]:
    """Fold invocations and completions into :class:`Op` s (in completion order), and return
    the nemesis ops' (invoke time, completion time) spans. With ``weak_acks`` (producers with
    acks=0 or 1, whose acknowledgement promises nothing durable) an ok send op counts as
    ``info``: it may or may not have happened, and only a read proves it did."""
    open_ops: dict[Any, dict] = {}
    out: list[Op] = []
    nemesis: list[tuple[int, int]] = []
    nemesis_open: int | None = None
    last_time = 0
    for raw in ops:
        last_time = max(last_time, raw["time"])
        process = raw["process"]
        if process == "nemesis":
            if raw["type"] == "invoke":
                nemesis_open = raw["time"]
            else:
                nemesis.append((nemesis_open if nemesis_open is not None else raw["time"], raw["time"]))
                nemesis_open = None
            continue
        if raw["type"] == "invoke":
            if process in open_ops:  # an invocation without a completion: it may have happened
                out.append(_fold(open_ops[process], None, raw["time"]))
            open_ops[process] = raw
            continue
        inv = open_ops.pop(process, None)
        op = _fold(inv, raw, raw["time"])
        if weak_acks and op.type == "ok" and op.f == "send":
            op.type = "info"
            op.weak = True  # its offsets are the leader's word only: they may be reused
            op.sends = [(k, None, v) for k, _o, v in op.sends]
        out.append(op)
    for inv in open_ops.values():
        out.append(_fold(inv, None, last_time))
    if nemesis_open is not None:
        nemesis.append((nemesis_open, last_time))
    out.sort(key=lambda o: o.index)
    return out, nemesis


def _fold(inv: dict | None, comp: dict | None, end_time: int) -> Op:
    src = comp if comp is not None else inv
    assert src is not None
    f = src["f"]
    value = src.get("value")
    keys = None
    if f in ("assign", "subscribe"):
        keys = [_key(k) for k in value] if isinstance(value, list) else []
    touched: frozenset = frozenset()
    if comp is not None and comp.get("rebalance_log"):
        touched = frozenset(_key(k) for e in comp["rebalance_log"] if isinstance(e, dict)
                            for k in e.get("keys") or [])
    sends = _parse_sends(value)
    if comp is not None and inv is not None and not sends and f in ("send", "txn"):
        sends = _parse_sends(inv.get("value"))  # a completion that dropped its value
    return Op(
        index=src["index"], process=src["process"],
        type=comp["type"] if comp is not None else "info", f=f,
        invoke_time=inv["time"] if inv is not None else src["time"],
        time=comp["time"] if comp is not None else end_time,
        sends=sends, polls=_parse_polls(value) if comp is not None else [],
        keys=keys, seek_to_beginning=bool(src.get("seek_to_beginning")), touched=touched,
        completed=comp is not None, raw_value=None if f in CLIENT_TXN_FS else value)


# ---------------------------------------------------------------------------- analysis


@dataclass(slots=True)
class VersionOrder:
    by_index: list  # dense index -> the value first seen at that offset
    first: dict  # value -> first dense index
    last: dict  # value -> last dense index
    offsets: dict  # offset -> values seen there (insertion order)
    offset_list: list  # sorted offsets with values


@dataclass
class Analysis:
    ops: list[Op]
    nemesis: list[tuple[int, int]]
    orders: dict[str, VersionOrder] = field(default_factory=dict)
    writer: dict = field(default_factory=dict)  # (key, value) -> Op that sent it
    ok_reads: dict = field(default_factory=lambda: defaultdict(set))  # key -> values read by ok ops
    failed_writes: dict = field(default_factory=lambda: defaultdict(set))
    committed: set = field(default_factory=set)  # indices of ops that must have committed

    def index_of(self, key: str, value: Any) -> int | None:
        o = self.orders.get(key)
        return None if o is None else o.first.get(value)


Report = Callable[..., None]


def analyse(ops: list[Op], nemesis: list[tuple[int, int]]) -> Analysis:
    a = Analysis(ops, nemesis)
    seen_send: dict = {}
    for op in ops:
        for key, _o, v in op.sends:
            prev = seen_send.get((key, v))
            if prev is not None and prev != op.index and not is_tombstone(v):
                raise HistoryShapeError(
                    f"value {v!r} is sent to {key} by two operations (ops {prev} and {op.index}); "
                    "values must be unique per key so that every read names one write")
            seen_send[(key, v)] = op.index
            a.writer[(key, v)] = op
            if op.type == "fail":
                a.failed_writes[key].add(v)
        if op.type == "ok":
            for res in op.polls:
                for key, pairs in res:
                    s = a.ok_reads[key]
                    for _o, v in pairs:
                        s.add(v)
    for op in ops:
        # Jepsen's rule: a crashed op with a value that was read committed in full; a weakly
        # acknowledged send (acks 0 or 1) stands only for the values that were read
        if op.type == "ok" or (op.type == "info" and not op.weak
                               and any(v in a.ok_reads.get(k, ()) for k, _o, v in op.sends)):
            a.committed.add(op.index)
    logs: dict[str, dict[int, list]] = defaultdict(dict)
    for op in ops:
        if op.f not in CLIENT_TXN_FS:
            continue
        if op.index in a.committed:
            for key, off, v in op.sends:
                if off is not None:
                    vals = logs[key].setdefault(off, [])
                    if v not in vals:
                        vals.append(v)
        for res in op.polls:
            for key, pairs in res:
                log = logs[key]
                for off, v in pairs:
                    if off is not None:
                        vals = log.setdefault(off, [])
                        if v not in vals:
                            vals.append(v)
    for key, log in logs.items():
        offs = sorted(log)
        by_index, first, last = [], {}, {}
        for i, off in enumerate(offs):
            vals = log[off]
            by_index.append(vals[0])
            for v in vals:
                if v not in first:
                    first[v] = i
                last[v] = i
        a.orders[key] = VersionOrder(by_index, first, last, log, offs)
    return a


def check_version_orders(a: Analysis, add: Report) -> None:
    found = []  # (kind, key, offset or value, values or offsets)
    for key in sorted(a.orders):
        o = a.orders[key]
        positions: dict[Any, list[int]] = defaultdict(list)
        for off in o.offset_list:
            vals = o.offsets[off]
            if len(vals) > 1:
                found.append(("inconsistent-offsets", key, off, sorted(vals, key=repr)))
            for v in vals:
                positions[v].append(off)
        for v, offs in positions.items():
            if len(offs) > 1 and not is_tombstone(v):
                found.append(("duplicate", key, v, offs))
    if not found:
        return
    wanted = {(key, off) for kind, key, off, _x in found[:400] if kind == "inconsistent-offsets"}
    wanted_v = {(key, v) for kind, key, v, _x in found[:400] if kind == "duplicate"}
    seen: dict[tuple, set] = defaultdict(set)
    for op in a.ops:
        if not op.completed:
            continue
        for key, off, v in op.sends:
            if (key, off) in wanted and op.index in a.committed:
                seen[(key, off)].add(op.index)
            if (key, v) in wanted_v:
                seen[("v", key, v)].add(op.index)
        for res in op.polls:
            for key, pairs in res:
                for off, v in pairs:
                    if (key, off) in wanted:
                        seen[(key, off)].add(op.index)
                    if (key, v) in wanted_v:
                        seen[("v", key, v)].add(op.index)
    for kind, key, x, vals in found:
        if kind == "inconsistent-offsets":
            add(kind, key=key, offset=x, values=vals, ops=sorted(seen.get((key, x), ())),
                explanation=f"offset {x} of {key} holds {len(vals)} different values {vals}: "
                            f"writers or readers disagree about the log")
        else:
            add(kind, key=key, value=x, offsets=vals, count=len(vals),
                ops=sorted(seen.get(("v", key, x), ())),
                explanation=f"value {x} appears at {len(vals)} offsets {vals} of {key}; "
                            f"it was written once")


def readers_of(a: Analysis, wanted: set[tuple[str, Any]]) -> dict[tuple[str, Any], list[int]]:
    """ok ops that read each wanted (key, value), first few."""
    out: dict[tuple[str, Any], list[int]] = defaultdict(list)
    if not wanted:
        return out
    for op in a.ops:
        if op.type != "ok":
            continue
        for res in op.polls:
            for key, pairs in res:
                for _o, v in pairs:
                    kv = (key, v)
                    if kv in wanted and len(out[kv]) < 5:
                        out[kv].append(op.index)
    return out


def check_reads(a: Analysis, add: Report, precommitted_allowed: bool) -> None:
    """G1a (an ok op read a failed write) and precommitted-read (an op read its own write)."""
    for op in a.ops:
        if op.f not in ("poll", "txn") or not op.polls:
            continue
        own = {(k, v) for k, _o, v in op.sends} if op.sends else ()
        for res in op.polls:
            for key, pairs in res:
                failed = a.failed_writes.get(key)
                for _o, v in pairs:
                    if op.type == "ok" and failed and v in failed:
                        w = a.writer[(key, v)]
                        add("G1a", key=key, value=v, writer=w.index, ops=[w.index, op.index],
                            explanation=f"op {op.index} read {v} from {key} although the op that "
                                        f"wrote it (op {w.index}) failed: an aborted read")
                    if own and (key, v) in own:
                        add("precommitted-read", key=key, value=v, ops=[op.index],
                            allowed=precommitted_allowed,
                            explanation=f"op {op.index} read {v} from {key}, which it sent itself "
                                        f"in the same, still open, transaction: a consumer saw "
                                        f"uncommitted data")


def check_lost_writes(a: Analysis, add: Report, superseded: Callable | None = None) -> list:
    """Jepsen's lost-write: below the highest position an ok poll read in a key, every value
    of a must-have-committed write must have been read by some ok poll. Returns the ok
    writes nobody read that are not lost by this rule (for the staleness checks)."""
    found: list[tuple[str, Any, int, Op, int]] = []  # (key, value, offset, writer, bound)
    for key in sorted(a.ok_reads):
        o = a.orders.get(key)
        if o is None:
            continue
        vs = a.ok_reads[key]
        bound = max((o.first[v] for v in vs if v in o.first), default=-1)
        if bound < 0:
            continue
        offset_of = None
        for v, li in o.last.items():
            if li > bound or v in vs or is_tombstone(v):
                continue
            w = a.writer.get((key, v))
            if w is None or w.index not in a.committed:
                continue
            if offset_of is None:
                offset_of = {x: off for off in reversed(o.offset_list) for x in o.offsets[off]}
            found.append((key, v, offset_of[v], w, bound))
    max_readers = readers_of(a, {(key, a.orders[key].by_index[bound]) for key, _v, _o, _w, bound in found})
    lost_seen = set()
    for key, v, off, w, bound in found:
        lost_seen.add((key, v))
        if superseded is not None and superseded(key, v, off):
            add("compacted-away", allowed=True, key=key, value=v, ops=[w.index],
                explanation=f"value {v} of {key} was replaced by a newer write of its record "
                            f"key and removed by the cleaner")
            continue
        top = a.orders[key].by_index[bound]
        max_read = (max_readers.get((key, top)) or [None])[0]
        add("lost-write", key=key, value=v, offset=off, index=a.orders[key].first.get(v),
            max_read_index=bound, writer=w.index,
            ops=[w.index, *([max_read] if max_read is not None else [])],
            explanation=f"value {v} was "
                        f"{'acknowledged' if w.type == 'ok' else 'written (by a crashed op, read elsewhere)'} "
                        f"at offset {off} of {key} (op {w.index}) but no ok poll ever read it, "
                        f"although op {max_read} read {top}, at a later position of {key}")
    unread = []
    for op in a.ops:
        if op.type != "ok":
            continue
        for key, off, v in op.sends:
            if is_tombstone(v) or v in a.ok_reads.get(key, ()) or (key, v) in lost_seen:
                continue
            unread.append((key, v, off, op))
    return unread


def check_internal(a: Analysis, add: Report) -> None:
    """Skips and reversals inside one op, for its polls and for its sends."""
    for op in a.ops:
        if not op.completed or op.f not in CLIENT_TXN_FS:
            continue
        if op.polls:
            for key, vs in op.reads().items():
                if key in op.touched:
                    continue
                _pairs_in_op(a, op, key, vs, add, "int-poll-skip", "int-nonmonotonic-poll", "read")
        if len(op.sends) > 1:
            for key, vs in op.writes().items():
                _pairs_in_op(a, op, key, vs, add, "int-send-skip", "int-nonmonotonic-send", "sent")


def _pairs_in_op(a: Analysis, op: Op, key: str, vs: list, add: Report, skip: str, nonmono: str,
                 verb: str) -> None:
    o = a.orders.get(key)
    if o is None or len(vs) < 2:
        return
    first = o.first
    for v1, v2 in itertools.pairwise(vs):
        i1, i2 = first.get(v1), first.get(v2)
        if i1 is None or i2 is None:
            continue
        delta = i2 - i1
        if delta > 1:
            skipped = o.by_index[i1 + 1:i2]
            add(skip, key=key, values=[v1, v2], delta=delta, skipped=skipped[:20], ops=[op.index],
                allowed=skip == "int-send-skip",
                explanation=f"op {op.index} {verb} {v1} then {v2} in {key}, but {len(skipped)} "
                            f"other record(s) {skipped[:5]} lie between them"
                            + (" (allowed: transactions do not isolate writes)" if skip == "int-send-skip"
                               else ""))
        elif delta < 1:
            add(nonmono, key=key, values=[v1, v2], delta=delta, ops=[op.index],
                explanation=f"op {op.index} {verb} {v1} then {v2} in {key}, but {v2} is "
                            f"{'at the same position' if delta == 0 else 'earlier in the log'}")


def check_process_order(a: Analysis, add: Report) -> None:
    """poll-skip / nonmonotonic-poll and nonmonotonic-send, per process, across ops."""
    by_process: dict[Any, list[Op]] = defaultdict(list)
    for op in a.ops:
        if op.completed:
            by_process[op.process].append(op)
    for process in sorted(by_process, key=repr):
        last_read: dict[str, tuple[Op, Any]] = {}
        last_send: dict[str, tuple[Op, Any]] = {}
        for op in by_process[process]:
            if op.f in ("assign", "subscribe"):
                if op.type in ("ok", "info"):
                    keep = set(op.keys or ())
                    if op.seek_to_beginning:
                        keep = set()
                    last_read = {k: x for k, x in last_read.items() if k in keep}
                    last_send = {k: x for k, x in last_send.items() if k in set(op.keys or ())}
                continue
            if op.f not in CLIENT_TXN_FS:
                continue
            if op.polls and op.f in ("poll", "txn"):
                reads = op.reads()
                for key, vs in reads.items():
                    prev = last_read.get(key)
                    if prev is None or not vs:
                        continue
                    _across(a, key, prev, op, vs[0], add, "poll-skip", "nonmonotonic-poll", "read")
                if op.type == "ok":
                    for key, vs in reads.items():
                        last_read[key] = (op, vs[-1] if vs else None)
            if op.sends and op.type in ("ok", "info"):
                writes = op.writes()
                for key, vs in writes.items():
                    prev = last_send.get(key)
                    if prev is not None:
                        _across(a, key, prev, op, vs[0], add, None, "nonmonotonic-send", "sent")
                    last_send[key] = (op, vs[-1])


def _across(a: Analysis, key: str, prev: tuple[Op, Any], op: Op, v2: Any, add: Report,
            skip: str | None, nonmono: str, verb: str) -> None:
    o = a.orders.get(key)
    prev_op, v1 = prev
    if o is None or v1 is None:
        return
    i1, i2 = o.first.get(v1), o.first.get(v2)
    if i1 is None or i2 is None:
        return
    delta = i2 - i1
    if delta > 1 and skip is not None:
        skipped = o.by_index[i1 + 1:i2]
        add(skip, key=key, values=[v1, v2], delta=delta, skipped=skipped[:20], ops=[prev_op.index, op.index],
            explanation=f"process {op.process} {verb} {v1} from {key} (op {prev_op.index}) and next "
                        f"{v2} (op {op.index}), skipping {len(skipped)} record(s) {skipped[:5]}")
    elif delta < 1:
        add(nonmono, key=key, values=[v1, v2], delta=delta, ops=[prev_op.index, op.index],
            explanation=f"process {op.process} {verb} {v1} to/from {key} (op {prev_op.index}) and "
                        f"next {v2} (op {op.index}), which is "
                        f"{'at the same position' if delta == 0 else 'earlier in the log'}")


def check_intermediate_reads(a: Analysis, add: Report) -> None:
    """G1b: an ok op's last read of a key is a value whose writer wrote a later value to that
    key, so the reader observed the writer's intermediate state. Kafka allows it: a fetch may
    stop inside a transaction."""
    last_write: dict[tuple[int, str], int] = {}
    for op in a.ops:
        if op.index in a.committed and len(op.sends) > 1:
            for key, _o, v in op.sends:
                i = a.index_of(key, v)
                if i is not None:
                    last_write[(op.index, key)] = max(i, last_write.get((op.index, key), -1))
    if not last_write:
        return
    for op in a.ops:
        if op.type != "ok" or not op.polls:
            continue
        for key, vs in op.reads().items():
            o = a.orders.get(key)
            if o is None or not vs:
                continue
            v = max(vs, key=lambda x: o.first.get(x, -1))
            i = o.first.get(v)
            w = a.writer.get((key, v))
            if i is None or w is None or w.index == op.index:
                continue
            top = last_write.get((w.index, key))
            if top is not None and top > i:
                add("G1b", key=key, value=v, later=o.by_index[top], ops=[w.index, op.index], allowed=True,
                    explanation=f"op {op.index} read {key} up to {v}, written by op {w.index}, which "
                                f"also wrote the later {o.by_index[top]} there: it saw that "
                                f"transaction's intermediate state (Kafka allows it: a fetch may "
                                f"end inside a transaction)")


def check_staleness(a: Analysis, add: Report, bound_ms: int) -> None:
    """After the faults end: an ok poll that returns nothing at all although its process sits
    before a value of an assigned key acknowledged at least ``bound_ms`` earlier shows a
    consumer that cannot see acknowledged data within the bound (lost, or stale reads). A
    process's first poll after an assignment is not counted: it returns before the
    consumer's first fetch can answer."""
    end = max((t for _s, t in a.nemesis), default=0)
    bound = bound_ms * 1_000_000
    acked: dict[str, list[tuple[int, int]]] = defaultdict(list)  # key -> [(index, ack time)]
    for op in a.ops:
        if op.type != "ok":
            continue
        for key, _o, v in op.sends:
            i = a.index_of(key, v)
            if i is not None and not is_tombstone(v):
                acked[key].append((i, op.time))
    suffix: dict[str, tuple[list[int], list[int], list[Any]]] = {}
    for key, items in acked.items():
        items.sort()
        idx = [i for i, _t in items]
        best = [0] * len(items)
        m = None
        for j in range(len(items) - 1, -1, -1):
            if m is None or items[j][1] < items[m][1]:
                m = j
            best[j] = m
        suffix[key] = (idx, [items[best[j]][1] for j in range(len(items))], [items[best[j]][0] for j in range(len(items))])
    reported = set()
    assigned: dict[Any, set] = defaultdict(set)
    position: dict[tuple[Any, str], int] = {}
    # a process's first poll after it was assigned returns before its first fetch can: an
    # empty answer then says nothing about what it can read
    fresh: set[Any] = set()
    for op in a.ops:
        if not op.completed:
            continue
        if op.f == "assign" and op.type in ("ok", "info"):
            fresh.add(op.process)
            assigned[op.process] = set(op.keys or ())
            for k in list(position):
                if k[0] == op.process and (k[1] not in assigned[op.process] or op.seek_to_beginning):
                    del position[k]
            if op.seek_to_beginning:
                for k in assigned[op.process]:
                    position[(op.process, k)] = -1
            continue
        if op.f == "subscribe":
            assigned[op.process] = set()  # partitions move: no position is known
            continue
        if op.f not in ("poll", "txn") or not op.polls or op.type != "ok":
            continue
        reads = op.reads()
        first_poll = op.process in fresh
        fresh.discard(op.process)
        if any(reads.values()):
            for key, vs in reads.items():
                o = a.orders.get(key)
                top = max((o.first.get(v, -1) for v in vs), default=-1) if o else -1
                if top >= 0:
                    position[(op.process, key)] = top
            continue
        if op.invoke_time < end + bound or first_poll:
            continue
        for key in sorted(assigned[op.process]):
            pos = position.get((op.process, key))
            s = suffix.get(key)
            if pos is None or s is None or (op.process, key) in reported:
                continue
            j = bisect.bisect_right(s[0], pos)
            if j < len(s[0]) and s[1][j] <= op.invoke_time - bound:
                reported.add((op.process, key))
                i = s[2][j]
                v = a.orders[key].by_index[i]
                w = a.writer.get((key, v))
                add("stale-read", key=key, value=v, ops=[*([w.index] if w else []), op.index],
                    explanation=f"op {op.index} (process {op.process}) polled {key} "
                                f"{(op.invoke_time - end) / 1e9:.1f} s after the faults ended and got "
                                f"nothing, although {v}, acknowledged {(op.invoke_time - s[1][j]) / 1e9:.1f} s "
                                f"earlier, lies beyond its position: acknowledged data was not "
                                f"readable within the {bound_ms} ms staleness bound")
