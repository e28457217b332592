"""A history compiled for checking: ops folded from invocation and completion, and the
analysis every check of :mod:`properties.jepsen_checks` reads (docs/explanation/protocol-notes.md section 4).

* :func:`compile_ops` folds each invocation with its completion into a compact :class:`Op`
  (sends and polls parsed once, values hashable); an op that never completed counts as
  ``info``; with ``weak_acks`` (acks 0 or 1) an ok send is evidence only through a read;
* :func:`analyse` builds the **version order** of each key from every poll result (ok, info
  and fail: pollers always see real offsets) and from the sends of ops that *must have
  committed* (``ok``, or ``info`` with at least one value read by an ok poll); offsets are
  numbered densely. It also knows each value's writer, the values ok polls read, the failed
  writes and the ops that must have committed. Values must be unique per key
  (:class:`HistoryShapeError` otherwise).
"""

from __future__ import annotations

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
    error: str | None = None  # what a send or txn that did not succeed was told
    transactional_id: str | None = None  # the producer's, where the history names it
    aborted: bool = False  # a failed txn whose abort the client was told succeeded (the history says so)

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


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


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
        completed=comp is not None, raw_value=None if f in CLIENT_TXN_FS else value,
        error=comp.get("error") if comp is not None and comp["type"] != "ok" and f in ("send", "txn") else None,
        transactional_id=_text(src.get("transactional_id")) if f == "txn" else None,
        aborted=f == "txn" and comp is not None and comp["type"] == "fail" and comp.get("aborted") is True)


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


