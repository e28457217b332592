"""Compaction: what a compacted topic must still show after the cleaner ran.

Sends carry record keys (``["send", key, [offset, value], record_key]``; a tombstone has
the value null) and so do poll results (``[offset, value, record_key]``).

* ``phantom-value``: a poll read a value nobody ever sent to that partition;
* ``compaction-lost-latest``: the final read from the beginning (after healing) ends with a
  state for some record key that is not its newest acknowledged write: an older value, or
  nothing where a value is due. A newest write that is a tombstone may be read or may be
  gone (after ``delete.retention.ms``); a value from a send whose outcome was unknown may
  stand in for the newest only if it sits at a later offset.

* ``scan-missed-latest``: a reader that went back to the beginning (an ``assign`` with
  ``seek_to_beginning``) read past a value that was then the newest record of its key
  (acknowledged before that poll began, and no other send of the key that could have landed
  after it begun before the poll ended), without returning it: the cleaner removes only
  records a newer one of their record key replaced;
* ``tombstone-missing``: the same, for a delete marker (a tombstone) less than
  ``delete.retention.ms`` after it was sent: a consumer reading from the beginning sees every
  delete marker younger than that (the cleaner keeps a marker at least that long after it
  first cleans past it); an older marker may be gone. Not judged under clock faults.

Neither is judged with acks 0 or 1 or unclean elections, where an acknowledged record may be
lost and its offset reused.

Offsets of kept records never change: a value read at another offset than it was written
at is ``duplicate`` or ``inconsistent-offsets`` in the queue checker. Acknowledged values
nobody read because a newer write of the same record key replaced them are counted under
``allowed: compacted-away``, and skips over removed records under ``allowed``.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from typing import Any

INF = float("inf")


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


class _Replacements:
    """Whether a send of a record key could have replaced the record at an offset by a time:
    one begun before then that landed at a later offset, or whose offset is unknown. Per
    (partition, record key), its sends sorted by when they began and the highest offset
    (unknown counting as highest) among the first n of them: a bisection, not a scan."""

    def __init__(self, sends: dict[tuple[str, str], list[tuple[float, int | None]]]) -> None:
        self._began: dict[tuple[str, str], list[float]] = {}
        self._highest: dict[tuple[str, str], list[float]] = {}
        for k, items in sends.items():
            items = sorted(items, key=lambda x: x[0])
            self._began[k] = [t for t, _off in items]
            highest, top = [], -INF
            for _t, off in items:
                top = max(top, INF if off is None else off)
                highest.append(top)
            self._highest[k] = highest

    def by(self, key: str, rk: str, offset: int, before: float) -> bool:
        began = self._began.get((key, rk))
        if not began:
            return False
        n = bisect.bisect_left(began, before)  # the sends begun before ``before``
        return n > 0 and self._highest[(key, rk)][n - 1] > offset


def _sent(o: dict):
    """The keyed sends of a send op: (position, partition, value, offset or None, record key)."""
    for i, mop in enumerate(o["value"]):
        if not isinstance(mop, list) or len(mop) < 4 or mop[0] != "send":
            continue
        v = mop[2]
        off, v = v if isinstance(v, list) and len(v) == 2 else (None, v)
        yield i, str(mop[1]), v, off, str(mop[3])


def _polled(o: dict):
    """What a poll op returned: (partition, offset, value, record key or None) in order."""
    for mop in o.get("value") or []:
        if not (isinstance(mop, list) and len(mop) == 2 and isinstance(mop[1], dict)):
            continue
        for key, pairs in mop[1].items():
            for r in pairs:
                if isinstance(r, list) and len(r) >= 2 and isinstance(r[0], int):
                    yield str(key), r[0], _hashable(r[1]), (str(r[2]) if len(r) >= 3 and r[2] is not None else None)


class Compaction:
    def __init__(self, ops: list[dict]) -> None:
        self.ops = ops
        # partition -> record key -> [(offset, value, op)] of acknowledged writes
        self.acked: dict[str, dict[str, list[tuple[int, Any, int]]]] = defaultdict(lambda: defaultdict(list))
        self.record_key_of: dict[tuple[str, Any], str] = {}  # (partition, value) -> record key
        self.sent_values: dict[str, set] = defaultdict(set)
        self.write_offset: dict[tuple[str, Any], int] = {}  # any known offset of a written value
        for o in ops:
            if o["process"] == "nemesis" or o["f"] != "send" or not isinstance(o.get("value"), list):
                continue
            for _i, key, v, off, rk in _sent(o):
                hv = _hashable(v)
                if o["type"] == "invoke":
                    if v is not None:
                        self.sent_values[key].add(hv)
                        self.record_key_of[(key, hv)] = rk
                    continue
                if isinstance(off, int):
                    self.write_offset[(key, hv) if v is not None else (key, ("tombstone", off))] = off
                    if o["type"] == "ok":
                        self.acked[key][rk].append((off, v, o["index"]))
        self.reads: list[tuple[str, int, Any, str | None, dict]] = []
        self.newest_read: dict[tuple[str, str], int] = {}  # (partition, record key) -> offset
        for o in ops:
            if o["process"] == "nemesis" or o["type"] == "invoke" or o["f"] != "poll":
                continue
            for key, off, v, rk in _polled(o):
                self.reads.append((key, off, v, rk, o))
                if rk is not None:
                    self.newest_read[(key, rk)] = max(off, self.newest_read.get((key, rk), -1))
                if v is not None:
                    self.write_offset.setdefault((key, v), off)

    def superseded(self, key: str, value: Any, offset: int | None) -> bool:
        """An acknowledged value that a newer record of its record key replaced: an
        acknowledged write at a later offset, or a record of that key some poll read at a
        later offset (a send whose outcome was unknown, read, committed as surely)."""
        rk = self.record_key_of.get((key, value))
        if rk is None or not isinstance(offset, int):
            return False
        return (any(off > offset for off, _v, _op in self.acked[key][rk])
                or self.newest_read.get((key, rk), -1) > offset)

    def scans(self) -> list[dict[str, list[tuple[int, Any, str | None, dict]]]]:
        """Each reading from the beginning: per partition, what its polls returned in order
        (offset, value, record key, poll op), from a seek to the beginning to the reader's next
        seek or its last poll."""
        out: list[dict[str, list]] = []
        current: dict[Any, dict[str, list]] = {}
        for o in self.ops:
            p = o["process"]
            if p == "nemesis" or o["type"] != "ok":
                continue
            if o["f"] == "assign":
                current[p] = defaultdict(list)
                if o.get("seek_to_beginning"):
                    out.append(current[p])
                else:
                    current.pop(p)
            elif o["f"] == "poll" and p in current:
                for key, off, v, rk in _polled(o):
                    current[p][key].append((off, v, rk, o))
        return out

    def _check_scans(self, config: dict, add) -> None:
        """``scan-missed-latest`` and ``tombstone-missing`` (see the module's docstring): a
        reading from the beginning passes a record, acknowledged before the poll that passed
        it began, that no other send of its record key could have replaced by the time that
        poll ended (none was sent by then, or it landed at an earlier offset); such a record
        was the newest of its key while the poll read, so the cleaner could not remove it,
        unless it is a delete marker older than ``delete.retention.ms``."""
        if str(config.get("acks", "all")) in ("0", "1") or config.get("unclean_leader_election_enable"):
            return  # an acknowledged record may be lost and its offset reused
        retention_ms = int((config.get("topic_configs") or {}).get("delete.retention.ms", 86_400_000))
        skewed = any(o["process"] == "nemesis" and o["f"] == "clock-skew" for o in self.ops)
        invoked, sends, records = self._sends_and_records()
        replaced = _Replacements(sends)
        for scan in self.scans():
            for key, read in scan.items():
                returned = {r[0] for r in read}
                top = max(returned, default=-1)
                for off, v, rk, op, acked in records.get(key, ()):
                    if off >= top or off in returned:
                        continue
                    by = next(o for roff, _v, _rk, o in read if roff > off)
                    began, ended = invoked.get(by["index"], by["time"]), by["time"]
                    if acked >= began or replaced.by(key, rk, off, ended):
                        continue  # not yet acknowledged, or maybe replaced, when that poll read
                    if v is not None:
                        add("scan-missed-latest", key=key, record_key=rk, value=v, offset=off,
                            ops=[op, by["index"]],
                            explanation=f"op {by['index']} read {key} from the beginning past offset {off} "
                                        f"without returning {v}, the newest record of key {rk} (acknowledged "
                                        f"by op {op} before that poll; nothing of {rk} sent by its end could "
                                        f"have replaced it)")
                        continue
                    age_ms = (ended - invoked.get(op, acked)) / 1e6
                    if skewed or age_ms >= retention_ms:
                        continue  # older than delete.retention.ms: it may be gone
                    add("tombstone-missing", key=key, record_key=rk, offset=off, ops=[op, by["index"]],
                        explanation=f"op {by['index']} read {key} from the beginning past offset {off} without "
                                    f"the delete marker of key {rk} there (op {op}; nothing of {rk} sent by then "
                                    f"could have replaced it), {age_ms:.0f} ms after it was sent, within "
                                    f"delete.retention.ms ({retention_ms} ms)")

    def _sends_and_records(self) -> tuple[dict[int, float], dict, dict[str, list]]:
        """When each op was invoked; each (partition, record key)'s sends as (invoked, offset
        or None when unknown); each partition's acknowledged records in the order sent, as
        (offset, value, record key, op, acknowledged), the last at an offset standing."""
        invoked: dict[int, float] = {}  # op -> the time it was invoked
        open_invoke: dict[Any, dict] = {}
        sends: dict[tuple[str, str], list[tuple[float, int | None]]] = defaultdict(list)
        record: dict[tuple[str, int], tuple[Any, str, int, float]] = {}  # (partition, offset) -> (value, rk, op, acked)
        for o in self.ops:
            if o["process"] == "nemesis":
                continue
            if o["type"] == "invoke":
                open_invoke[o["process"]] = o
                continue
            inv = open_invoke.pop(o["process"], o)
            invoked[o["index"]] = inv["time"]
            if o["f"] != "send" or o["type"] == "fail" or not isinstance(o.get("value"), list):
                continue
            for _i, key, v, off, rk in _sent(o):
                off = off if o["type"] == "ok" else None
                sends[(key, rk)].append((inv["time"], off))
                if off is not None:
                    record[(key, off)] = (_hashable(v), rk, o["index"], o["time"])
        for o in open_invoke.values():  # never completed: unknown
            if o["f"] == "send" and isinstance(o.get("value"), list):
                for _i, key, _v, _off, rk in _sent(o):
                    sends[(key, rk)].append((o["time"], None))
        records: dict[str, list] = defaultdict(list)
        for (key, off), (v, rk, op, acked) in record.items():
            records[key].append((off, v, rk, op, acked))
        return invoked, sends, records

    def check(self, config: dict, add, allowed) -> None:
        for key, off, v, _rk, o in self.reads:
            if v is not None and v not in self.sent_values[key]:
                add("phantom-value", key=key, value=v, offset=off, ops=[o["index"]],
                    explanation=f"op {o['index']} read {v} at offset {off} of {key}, a value "
                                f"nobody ever sent there")
        self._check_scans(config, add)
        final = config.get("final_read") or {}
        if not final.get("performed") or not final.get("reached_end"):
            return
        start = final.get("start_ns", 0)
        # the final reader's state: its polls from the beginning, in offset order
        state: dict[str, dict[str, tuple[int, Any, int]]] = defaultdict(dict)
        for key, off, v, rk, o in sorted(self.reads, key=lambda x: (x[0], x[1])):
            if o["time"] < start or rk is None:
                continue
            state[key][rk] = (off, v, o["index"])
        for key in sorted(self.acked):
            for rk, writes in sorted(self.acked[key].items()):
                off, v, op = max(writes, key=lambda w: w[0])
                got = state[key].get(rk)
                if got is not None and got[0] > off:
                    continue  # a later write (an unknown outcome, or the tombstone's successor)
                if v is None:
                    if got is not None and got[1] is not None:
                        add("compaction-lost-latest", key=key, record_key=rk, value=got[1],
                            ops=[op, got[2]],
                            explanation=f"record key {rk} of {key} was deleted (tombstone at "
                                        f"offset {off}, op {op}), yet the final read from the "
                                        f"beginning ended with its older value {got[1]}")
                    continue
                if got is None or got[0] != off or got[1] != _hashable(v):
                    seen = "nothing" if got is None else f"{got[1]} (offset {got[0]})"
                    add("compaction-lost-latest", key=key, record_key=rk, value=v, offset=off,
                        ops=[op] + ([got[2]] if got is not None else []),
                        explanation=f"the newest write of record key {rk} of {key} is {v} at "
                                    f"offset {off} (op {op}), but the final read from the "
                                    f"beginning ended with {seen}")
