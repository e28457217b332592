"""Which checks of the table a history put to work: for each, whether the situation it judges
arose in the run (a check that never meets its situation passes every run, and tells nothing).

:data:`SITUATIONS` names, for each check of :data:`properties.check_table.CHECKS`, the
situation that makes it judge something, and a test of a history for it: an offset of a key
read by two ops (``version-orders``), a read of a key after a transaction that wrote there
aborted (``aborted-reads``), a committed transaction that wrote a key twice, read by another
process (``nonatomic-reads``), a partition that the group moved from one member to another
(``groups``), a record a share group delivered again (``share``)... The hunt
(:mod:`kafkacheck.swarm_hunt`) records which checks each run exercised and reports the ones
none did, as it reports the marks no run reached. ``linearizability`` is not run by hunts
(``kafkacheck check --lin`` asks for it).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from properties.analysis import Op, compile_ops, is_tombstone

NOT_IN_HUNTS = ("linearizability",)


@dataclass
class Seen:
    """What the situations are read from: a history's ops (folded), its nemesis intervals, its
    raw completions by index, and its run's config."""

    ops: list[Op]
    nemesis: list[tuple[int, int]]
    raw: dict[int, dict]
    config: dict
    writer: dict = field(default_factory=dict)  # (key, value) -> the op that sent it

    def ok(self, f: str | None = None) -> list[Op]:
        return [o for o in self.ops if o.type == "ok" and (f is None or o.f == f)]


def _reads(o: Op) -> Iterable[tuple[str, int, object]]:
    for res in o.polls:
        for key, pairs in res:
            for offset, v in pairs:
                yield key, offset, v


def _offset_read_twice(s: Seen) -> bool:
    seen = Counter((k, off) for o in s.ok() for k, off in {(k, off) for k, off, _v in _reads(o)})
    return any(n >= 2 for n in seen.values())


def _read_after_abort(s: Seen) -> bool:
    aborted: dict[str, int] = {}  # key -> the first time a transaction that wrote there aborted
    for o in s.ops:
        if o.f == "txn" and o.type == "fail":
            for k, _off, _v in o.sends:
                aborted[k] = min(aborted.get(k, o.time), o.time)
    return any(p.invoke_time > aborted.get(k, p.invoke_time) for p in s.ok() for k, _off, _v in _reads(p))


def _write_then_fault(s: Seen) -> bool:
    first_fault = min((start for start, _end in s.nemesis), default=None)
    return first_fault is not None and any(o.sends and o.time < first_fault for o in s.ok())


def _key_twice_in_an_op(s: Seen) -> bool:
    for o in s.ok():
        sent = Counter(k for k, _off, _v in o.sends)
        polled = Counter(k for res in o.polls for k, _pairs in res)
        if any(n >= 2 for n in (*sent.values(), *polled.values())):
            return True
    return False


def _process_read_key_twice(s: Seen) -> bool:
    reads = Counter((o.process, k) for o in s.ok() for k in {k for k, _off, _v in _reads(o)})
    return any(n >= 2 for n in reads.values())


def _committed_key_twice(s: Seen, other_reader: bool) -> bool:
    written: dict = {}  # (key, value) of a committed transaction that wrote its key twice -> its process
    for o in s.ok("txn"):
        twice = {k for k, n in Counter(k for k, _off, _v in o.sends).items() if n >= 2}
        written |= {(k, v): o.process for k, _off, v in o.sends if k in twice}
    return any((k, v) in written and (not other_reader or written[(k, v)] != p.process)
               for p in s.ok() for k, _off, v in _reads(p))


def _read_after_others_write(s: Seen) -> bool:
    acked: dict = defaultdict(list)  # key -> [(acknowledged at, process)]
    for o in s.ok():
        if o.f in ("send", "txn"):
            for k, _off, _v in o.sends:
                acked[k].append((o.time, o.process))
    first_by: dict = {k: {} for k in acked}  # key -> process -> its first acknowledgement there
    for k, acks in acked.items():
        for t, proc in acks:
            first_by[k][proc] = min(first_by[k].get(proc, t), t)
    return any(t < p.invoke_time for p in s.ok() for k, _off, _v in _reads(p)
               for proc, t in first_by.get(k, {}).items() if proc != p.process)


def _mutual_reads(s: Seen) -> bool:
    read_from: dict = defaultdict(set)  # reader process -> writer processes
    for p in s.ok():
        for k, _off, v in _reads(p):
            w = s.writer.get((k, v))
            if w is not None and w.process != p.process:
                read_from[p.process].add(w.process)
    return any(a in read_from.get(b, ()) for a, bs in read_from.items() for b in bs)


def _tombstone_read(s: Seen) -> bool:
    return bool(s.config.get("compacted")) and any(is_tombstone(v) for o in s.ok() for _k, _off, v in _reads(o))


def _processor_rewound(s: Seen) -> bool:
    return bool(s.config.get("eos")) and any(o.f == "txn" and o.type in ("fail", "info") for o in s.ops)


def _partition_moved(s: Seen) -> bool:
    if not s.config.get("groups"):
        return False
    owners: dict = defaultdict(set)
    for raw in s.raw.values():
        for entry in raw.get("rebalance_log") or ():
            if entry.get("type") == "assigned":
                for k in entry.get("keys", ()):
                    owners[k].add(raw.get("process"))
    return any(len(p) >= 2 for p in owners.values())


def _redelivered(s: Seen) -> bool:
    if not s.config.get("share"):
        return False
    acquired = (raw["value"] for raw in s.raw.values()
                if raw.get("f") == "acquire" and raw.get("type") == "ok" and isinstance(raw.get("value"), dict))
    return any(len(r) >= 3 and r[2] >= 2 for value in acquired for records in value.values() for r in records)


def _open_transaction_judged(s: Seen) -> bool:
    final = s.config.get("final_read") or {}
    return bool(final.get("stable_offsets") or s.config.get("txn_probe")) and any(
        o.f == "txn" and o.type in ("fail", "info") for o in s.ops)


def _final_read_reached_end(s: Seen) -> bool:
    final = s.config.get("final_read") or {}
    return bool(final.get("performed") and final.get("reached_end"))


def _idempotent_send_retried(s: Seen) -> bool:
    if not s.config.get("idempotence") or s.config.get("txn") or s.config.get("eos"):
        return False
    return bool(s.nemesis) and any(o.f == "send" and o.type in ("fail", "info") for o in s.ops)


def _watchdog(s: Seen) -> bool:
    return "stalled" in s.config


# check name -> (the situation it judges, whether a history shows it)
SITUATIONS: dict[str, tuple[str, Callable[[Seen], bool]]] = {
    "empty-history": ("a client op completed", lambda s: bool(s.ok())),
    "version-orders": ("an offset of a key read by two ops", _offset_read_twice),
    "aborted-reads": ("a read of a key after a transaction that wrote there aborted", _read_after_abort),
    "lost-writes": ("an acknowledged write, then a fault", _write_then_fault),
    "within-an-op": ("an op that sent to or polled one key twice", _key_twice_in_an_op),
    "process-order": ("a process that read one key in two ops", _process_read_key_twice),
    "intermediate-reads": ("a committed transaction that wrote a key twice, read back",
                           lambda s: _committed_key_twice(s, other_reader=False)),
    "staleness": ("a read of a key begun after another process's write there was acknowledged",
                  _read_after_others_write),
    "cycles": ("two processes that each read what the other wrote", _mutual_reads),
    "compaction": ("a tombstone read on a compacted topic", _tombstone_read),
    "nonatomic-reads": ("a committed transaction that wrote a key twice, read by another process",
                        lambda s: _committed_key_twice(s, other_reader=True)),
    "exactly-once": ("a processor's transaction aborted or unknown (it rewound)", _processor_rewound),
    "groups": ("a partition the group moved from one member to another", _partition_moved),
    "share": ("a record the share group delivered again", _redelivered),
    "hanging-transactions": ("a transaction that aborted or ended unknown, with the broker's word on open ones",
                             _open_transaction_judged),
    "final-read": ("a final read after healing that reached the end", _final_read_reached_end),
    "idempotence": ("an idempotent producer's send that failed or ended unknown under faults",
                    _idempotent_send_retried),
    "stall": ("the run's progress watched (config.stalled recorded)", _watchdog),
}


def exercised(ops: Iterable[dict], config: dict) -> dict[str, bool]:
    """For each check of :data:`SITUATIONS`, whether the history shows its situation."""
    raw_ops = list(ops)
    folded, nemesis = compile_ops(raw_ops)
    raw = {o["index"]: o for o in raw_ops if o.get("type") != "invoke" and "index" in o}
    seen = Seen(folded, nemesis, raw, config)
    seen.writer = {(k, v): o for o in folded for k, _off, v in o.sends}
    return {name: bool(test(seen)) for name, (_why, test) in SITUATIONS.items()}
