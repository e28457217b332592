"""The history checker: one verdict for any Kafka history (docs/explanation/protocol-notes.md section 4).

Pure: a history (ops of docs/reference/trace-format.md) and the run's config in, the results.json object
out. The Jepsen-parity core is :mod:`properties.jepsen_checks` (inconsistent-offsets, duplicate,
lost-write, G1a, precommitted-read, the skip and order checks, G1b, stale-read) and
:mod:`properties.cycles` (G0, G1c and their process and realtime variants, G-single, G2).
This module adds what needs the run's configuration:

* ``nonatomic-read``: a process read part of a committed transaction's records in a key and
  then read past them, never reading the rest;
* exactly-once (``config.eos``), consumer groups (``config.groups``) and compaction
  (``config.compacted``) checks;
* instead of Jepsen's ``unseen``, when the run recorded a final read after healing
  (``config.final_read``): ``unread-after-heal`` is an acknowledged value the final read
  never saw although it read its key to the end, and ``stale-after-heal`` says the final
  read could not reach the end within the staleness bound; ``stalled`` reports a run whose
  clients stopped making progress (``config.stalled``);

and decides which anomalies are allowed: Jepsen's allowances (``int-send-skip`` and ``G0``
always; ``poll-skip`` and ``nonmonotonic-poll`` with ``subscribe``; ``G1c`` when its cycle
has write-write edges) and ours (read skew ``G-single``/``G2`` and intermediate reads
``G1b``, which Kafka does not promise to prevent; skips over records a compacted topic
removed). ``forbid`` turns any allowed type into a violation.
"""

from __future__ import annotations

import gc
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from properties.analysis import CLIENT_TXN_FS, Analysis, analyse, compile_ops, is_tombstone
from properties.compaction_checks import Compaction
from properties.cycles import DEFAULT_STEPS, DEFAULT_TIME_LIMIT_S, Budget, check_cycles
from properties.group_checks import check_groups
from properties.jepsen_checks import (
    check_intermediate_reads,
    check_internal,
    check_lost_writes,
    check_process_order,
    check_reads,
    check_staleness,
    check_version_orders,
    readers_of,
)
from properties.linearizable import check_log

MAX_REPORTED = 50  # anomalies listed per type; the count is always complete

SUBSCRIBE_ALLOWED = ("poll-skip", "nonmonotonic-poll", "nonatomic-read")
# the cleaner removes records: skips over them are expected on a compacted topic
COMPACTION_ALLOWED = ("poll-skip", "int-poll-skip")
# what Kafka does not promise: Jepsen's allowances and the read anomalies we add
ALWAYS_ALLOWED = ("int-send-skip", "G0", "G0-process", "G0-realtime", "G-single", "G2", "G1b",
                  "compacted-away")

DEFAULT_STALENESS_BOUND_MS = 30_000


@dataclass(slots=True)
class Result:
    anomalies: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    allowed_items: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    allowed: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, kind: str, allowed: bool = False, **evidence: Any) -> None:
        """Record one anomaly; ``allowed`` marks an instance that is not a violation."""
        if allowed:
            self.allowed[kind] += 1
            if len(self.allowed_items[kind]) < MAX_REPORTED:
                self.allowed_items[kind].append(evidence)
            return
        self.counts[kind] += 1
        if len(self.anomalies[kind]) < MAX_REPORTED:
            self.anomalies[kind].append(evidence)


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The checker builds millions of small acyclic objects; Python's cyclic collector would
    rescan them over and over (it made loading a 1M-op history several times slower), and
    reference counting frees them anyway."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def check(ops: Iterable[dict], config: dict | None = None, *,
          cycle_steps: int = DEFAULT_STEPS, cycle_time_limit_s: float = DEFAULT_TIME_LIMIT_S,
          forbid: tuple[str, ...] = (), linearizable: bool = False) -> dict:
    """Judge a history; returns the results.json object of docs/reference/trace-format.md. ``ops`` may be a
    stream (:func:`traces.history.iter_history`): it is read once, and kept as dicts only when
    the consumer-group or compaction checks need them. ``linearizable`` adds the
    partition-log linearizability check (properties/linearizable.py)."""
    with _gc_paused():
        return _check(ops, config or {}, Budget(cycle_steps, cycle_time_limit_s), forbid, linearizable)


def _check(ops: Iterable[dict], config: dict, budget: Budget, forbid: tuple[str, ...],
           linearizable: bool) -> dict:
    if config.get("groups") or config.get("compacted") or linearizable:
        ops = list(ops)
    counted = _Counted(ops)
    compiled, nemesis = compile_ops(counted, weak_acks=str(config.get("acks", "all")) in ("0", "1"))
    a = analyse(compiled, nemesis)
    r = Result()
    done = [op for op in compiled if op.completed and op.f in CLIENT_TXN_FS and op.type in ("ok", "info")]
    if not done:
        r.add("empty-history", ops=[],
              explanation="no send, poll or txn operation completed (ok or info): the history "
                          "shows nothing about the broker, so it cannot be judged valid")

    check_version_orders(a, r.add)
    check_reads(a, r.add, precommitted_allowed=config.get("isolation_level") == "read_uncommitted")
    compacted = Compaction(ops) if config.get("compacted") else None
    unread = check_lost_writes(a, r.add, compacted.superseded if compacted is not None else None)
    check_internal(a, r.add)
    check_process_order(a, r.add)
    check_intermediate_reads(a, r.add)
    sub = "subscribe" in (config.get("sub_via") or [])
    if compacted is None and not sub:
        final = config.get("final_read") or {}
        check_staleness(a, r.add, int(config.get("staleness_bound_ms")
                                      or final.get("staleness_bound_ms") or DEFAULT_STALENESS_BOUND_MS))
    cycle_stats = check_cycles(a, r.add, bool(config.get("ww_deps", True)), budget)

    if compacted is not None:
        compacted.check(config, r.add, r.allowed)
    _check_nonatomic(a, r)
    _check_eos(a, config, r)
    check_groups(ops, config, r.add)
    _check_final_read(config, unread, r, a, compacted.superseded if compacted is not None else None)
    _check_stall(config, r)
    lin_unknown, lin_stats = (check_log(ops, config, r.add) if linearizable and not config.get("compacted")
                              else (None, None))

    # ---------------------------------------------------------- verdict
    forbidden = set(forbid)
    for kind in list(r.allowed_items):  # --forbid: allowed instances become violations
        if kind in forbidden:
            for item in r.allowed_items.pop(kind):
                r.anomalies[kind].append(item)
            r.counts[kind] += r.allowed.pop(kind)
    bad = []
    for kind in sorted(r.counts):
        if kind in forbidden:
            bad.append(kind)
        elif (kind in ALWAYS_ALLOWED or (kind in SUBSCRIBE_ALLOWED and sub)
              or (kind in COMPACTION_ALLOWED and compacted is not None)):
            r.allowed[kind] += r.counts[kind]
            r.allowed_items[kind].extend(r.anomalies[kind][:MAX_REPORTED - len(r.allowed_items[kind])])
        else:
            bad.append(kind)
    client_ops = [op for op in compiled if op.completed]
    valid: bool | str = not bad
    if valid and (cycle_stats.get("budget_exhausted") or lin_unknown):
        valid = "unknown"
    return {
        "valid": valid,
        "anomaly_types": bad,
        "anomalies": {k: r.anomalies[k] for k in bad},
        "counts": {k: r.counts[k] for k in sorted(r.counts)},
        "allowed": dict(sorted(r.allowed.items())),
        "allowed_anomalies": {k: r.allowed_items[k] for k in sorted(r.allowed_items) if r.allowed_items[k]},
        "unknown": ([cycle_stats["budget_reason"]] if cycle_stats.get("budget_exhausted") else [])
                   + ([lin_unknown] if lin_unknown else []),
        "stats": {
            "ops": counted.n,
            "client_ops": len(client_ops),
            "ok": sum(1 for op in client_ops if op.type == "ok"),
            "fail": sum(1 for op in client_ops if op.type == "fail"),
            "info": sum(1 for op in client_ops if op.type == "info"),
            "keys": len(a.orders),
            "nemesis_ops": len(nemesis),
            "cycles": cycle_stats,
            **({"linearizability": lin_stats} if lin_stats is not None else {}),
        },
    }


class _Counted:
    def __init__(self, ops: Iterable[dict]) -> None:
        self.ops = ops
        self.n = 0

    def __iter__(self) -> Iterator[dict]:
        for op in self.ops:
            self.n += 1
            yield op


def _check_nonatomic(a: Analysis, r: Result) -> None:
    """A process read part of a committed transaction's records in a key and then later
    positions of that key, never reading the rest: the transaction was not visible at once."""
    txn_values: list[tuple[int, str, list[tuple[int, Any]]]] = []  # (op, key, [(index, v)])
    for op in a.ops:
        if op.type != "ok" or op.f != "txn":
            continue
        by_key: dict[str, list[tuple[int, Any]]] = defaultdict(list)
        for key, _off, v in op.sends:
            i = a.index_of(key, v)
            if i is not None:
                by_key[key].append((i, v))
        txn_values.extend((op.index, k, vs) for k, vs in by_key.items() if len(vs) > 1)
    if not txn_values:
        return
    read: dict[tuple[Any, str], set] = defaultdict(set)
    top: dict[tuple[Any, str], tuple[int, int]] = {}  # (process, key) -> (max index, op)
    low: dict[tuple[Any, str], int] = {}  # (process, key) -> min index read
    for op in a.ops:
        if not op.completed or op.type == "info":
            continue
        for key, vs in op.reads().items():
            o = a.orders.get(key)
            for v in vs:
                i = o.first.get(v) if o else None
                if i is None:
                    continue
                pk = (op.process, key)
                read[pk].add(v)
                if i > top.get(pk, (-1, -1))[0]:
                    top[pk] = (i, op.index)
                low[pk] = min(i, low.get(pk, i))
    by_key_txn: dict[str, list] = defaultdict(list)
    for t in txn_values:
        by_key_txn[t[1]].append(t)
    for (process, key), values in sorted(read.items(), key=lambda kv: repr(kv[0])):
        for op, _k, vs in by_key_txn.get(key, ()):
            got = [v for _i, v in vs if v in values]
            if not got or len(got) == len(vs):
                continue
            hi, hi_op = top[(process, key)]
            # the process's reads of the key span the whole transaction (a process that
            # starts reading in the middle of one, after an info op, is no evidence)
            if low[(process, key)] <= min(i for i, _v in vs) and hi > max(i for i, _v in vs):
                missing = [v for _i, v in vs if v not in values]
                r.add("nonatomic-read", key=key, values=sorted(got, key=repr),
                      missing=sorted(missing, key=repr), ops=[op, hi_op],
                      explanation=f"process {process} read {got} of transaction op {op} from "
                                  f"{key} and later positions (op {hi_op}), but never its "
                                  f"{missing}: the transaction was not visible all at once")


def _check_eos(a: Analysis, config: dict, r: Result) -> None:
    """Consume-transform-produce (``config.eos``): every input record below the group's final
    committed offset reaches the output exactly once, and nothing beyond it does."""
    eos = config.get("eos")
    if not eos:
        return
    shift = eos.get("source_shift", 1)
    in_topic, out_topic = eos["input"], eos["output"]
    committed = None
    committed_op = -1
    for op in a.ops:
        if op.f == "committed" and op.type == "ok" and op.completed:
            committed, committed_op = op.raw_value, op.index
    # output writes that must be in the output: read by a read_committed poll, or sent by a
    # committed transaction
    copies: dict[tuple[str, Any], dict[Any, int]] = defaultdict(dict)  # (in key, source) -> writes
    wanted = {(key, v) for key, values in a.ok_reads.items() if key.startswith(out_topic + ":")
              for v in values if isinstance(v, int)}
    readers = readers_of(a, wanted)
    for key, v in sorted(wanted, key=repr):
        copies[(in_topic + key[len(out_topic):], v // shift)][v] = readers[(key, v)][0]
    for op in a.ops:
        if op.type != "ok" or op.f != "txn":
            continue
        for key, _off, v in op.sends:
            if key.startswith(out_topic + ":") and isinstance(v, int):
                copies[(in_topic + key[len(out_topic):], v // shift)].setdefault(v, op.index)
    for (in_key, source), writes in sorted(copies.items(), key=lambda kv: repr(kv[0])):
        if len(writes) > 1:
            r.add("eos-duplicate", key=in_key, value=source, copies=sorted(writes),
                  ops=sorted(set(writes.values())),
                  explanation=f"input value {source} of {in_key} reached the output "
                              f"{len(writes)} times (writes {sorted(writes)}): processed more "
                              f"than once")
    if not isinstance(committed, dict):
        return
    final = config.get("final_read") or {}
    for in_key in sorted(committed):
        upto = committed[in_key]
        upto = 0 if upto is None else upto
        o = a.orders.get(in_key)
        if o is None:
            continue
        for off in o.offset_list:
            for source in o.offsets[off]:
                done = (in_key, source) in copies
                if off < upto and not done and final.get("reached_end"):
                    r.add("eos-lost", key=in_key, value=source, offset=off, ops=[committed_op],
                          explanation=f"input value {source} at offset {off} of {in_key} is "
                                      f"below the group's committed offset {upto}, yet it never "
                                      f"reached the output")
                elif off >= upto and not done:
                    r.allowed["eos-unprocessed"] += 1  # after the last commit: not yet processed
                elif off >= upto and done:
                    writes = copies[(in_key, source)]
                    r.add("eos-output-beyond-commit", key=in_key, value=source, offset=off,
                          ops=[*sorted(set(writes.values())), committed_op],
                          explanation=f"input value {source} at offset {off} of {in_key} is in "
                                      f"the output, but the group's committed offset is {upto}: "
                                      f"the output and the offsets were not committed together")


def _check_final_read(config: dict, unread: list, r: Result, a: Analysis | None = None,
                      superseded=None) -> None:
    final = config.get("final_read") or {}
    if not final.get("performed"):
        if unread:
            r.allowed["unseen"] += len(unread)
        return
    if not final.get("reached_end"):
        r.add("stale-after-heal", ops=[],
              explanation=f"after every fault was healed the final read could not reach the end "
                          f"of every partition within {final.get('staleness_bound_ms')} ms")
    start = final.get("start_ns", 0)
    ends = final.get("end_offsets") or {}
    reported = set()
    for key, v, off, op in unread:
        if op.time >= start:
            continue
        if not final.get("reached_end") and key not in ends:
            continue
        reported.add((key, v))
        r.add("unread-after-heal", key=key, value=v, offset=off, writer=op.index, ops=[op.index],
              explanation=f"value {v} was acknowledged at offset {off} of {key} (op {op.index}) "
                          f"but the final read after healing read {key} to its end "
                          f"({ends.get(key)}) without it: the write is lost")
    if a is None:
        return
    # an acknowledged value that polls read during the run but the final read, which read its
    # partition to the end, no longer finds: it was in the log and left it (a leader elected
    # without it, then the old leader truncated), which is a lost write as much as one nobody read
    final_seen: dict[str, set] = defaultdict(set)
    readers: dict[tuple[str, Any], int] = {}
    for op in a.ops:
        if op.type != "ok" or not op.polls:
            continue
        for key, vs in op.reads().items():
            if op.time >= start:
                final_seen[key].update(vs)
            else:
                for v in vs:
                    readers.setdefault((key, v), op.index)
    for op in a.ops:
        if op.type != "ok" or op.time >= start:
            continue
        for key, off, v in op.sends:
            if key not in ends or is_tombstone(v) or (key, v) in reported or v in final_seen.get(key, ()):
                continue
            if (key, v) not in readers or (superseded is not None and superseded(key, v, off)):
                continue  # never read: check_lost_writes and the loop above judge it
            r.add("unread-after-heal", key=key, value=v, offset=off, writer=op.index,
                  ops=[op.index, readers[(key, v)]],
                  explanation=f"value {v} was acknowledged at offset {off} of {key} (op {op.index}) and read "
                              f"by op {readers[(key, v)]}, but the final read after healing read {key} to its "
                              f"end ({ends[key]}) without it: the write is lost")


def _check_stall(config: dict, r: Result) -> None:
    stalled = config.get("stalled")
    if not stalled:
        return
    r.add("stalled", ops=[], time=stalled.get("at_ns"),
          explanation=f"no client operation completed for {stalled.get('idle_ms', 0) // 1000} s "
                      f"of virtual time after {stalled.get('at_ns', 0) / 1e9:.1f} s; the workload "
                      f"stopped with {stalled.get('ops_completed')} of {config.get('ops')} ops done")


def _with_liveness_violations(result: dict, events: list[dict]) -> dict:
    """The liveness phase's findings (kafkacheck.liveness): the healed cluster did not
    converge within its bound."""
    found = [e for e in events if e.get("kind") == "liveness-violation"]
    if not found:
        return result
    result = dict(result)
    result["anomalies"] = dict(result["anomalies"])
    result["anomalies"]["liveness"] = [
        {"key": e.get("key"), "what": e.get("what"), "time": e.get("time"), "ops": [],
         "explanation": f"{e.get('bound_ms')} ms after every fault was healed: {e.get('what')} "
                        f"({e.get('detail')})"}
        for e in found[:MAX_REPORTED]
    ]
    result["counts"] = {**result.get("counts", {}), "liveness": len(found)}
    result["anomaly_types"] = sorted({*result["anomaly_types"], "liveness"})
    result["valid"] = False
    return result


def with_invariant_violations(result: dict, events: list[dict]) -> dict:
    """Add the simulator's white-box invariant violations (events.jsonl) to a verdict."""
    result = _with_liveness_violations(result, events)
    found = [e for e in events if e.get("kind") == "invariant-violation"]
    if not found:
        return result
    result = dict(result)
    result["anomalies"] = dict(result["anomalies"])
    result["anomalies"]["invariant-violation"] = [
        {"key": e.get("key"), "node": e.get("node"), "invariant": e.get("invariant"),
         "time": e.get("time"), "ops": [],
         "explanation": f"broker state broke '{e.get('invariant')}' on node {e.get('node')}: "
                        f"{e.get('detail')}"}
        for e in found[:MAX_REPORTED]
    ]
    result["counts"] = {**result.get("counts", {}), "invariant-violation": len(found)}
    result["anomaly_types"] = sorted({*result["anomaly_types"], "invariant-violation"})
    result["valid"] = False
    return result
