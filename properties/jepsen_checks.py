"""The Jepsen-parity core of the history checker (docs/explanation/protocol-notes.md section 4).

Works on any history of docs/reference/trace-format.md, recorded by us or imported from Jepsen. It follows
the meaning of ``jepsen.tests.kafka``'s analysis, written anew for compact in-memory ops so
that a million-op history fits in a few hundred megabytes:

* the **version order** of each key (:mod:`properties.analysis`, which compiles the ops)
  comes from every poll result and from the sends of ops that *must have committed*;
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
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from properties.analysis import (
    CLIENT_TXN_FS,
    Analysis,
    Op,
    Report,
    is_tombstone,
)


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
