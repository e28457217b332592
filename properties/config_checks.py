"""The history checker's own checks that need the run's configuration: nonatomic reads,
exactly-once, the final read after healing, idempotence errors and stalls.

Beyond Jepsen's core (:mod:`properties.jepsen_checks`, :mod:`properties.cycles`) and the families
with a module of their own, over the typed :class:`~properties.judging.RunConfig`:

* ``nonatomic-read``: a process read part of a committed transaction's records in a key and
  then read past them, never reading the rest;
* exactly-once (``config.eos``): ``eos-duplicate``, ``eos-lost``, ``eos-output-beyond-commit``;
* instead of Jepsen's ``unseen``, when the run recorded a final read after healing
  (``config.final_read``): ``unread-after-heal`` is an acknowledged value the final read
  never saw although it read its key to the end, and ``stale-after-heal`` says the final
  read could not reach the end within the staleness bound;
* ``idempotence-error``: an idempotent producer told of a sequence gap or a fence although no
  record was lost (:data:`IDEMPOTENCE_ERRORS`, :data:`TCP_BREAKING_FAULTS`);
* ``stalled``: the run's clients stopped making progress (``config.stalled``);
* share groups (``config.share``): the adapter to :mod:`properties.share_checks`.

:data:`properties.check_table.CHECKS` says when each runs and what of it is allowed; the fast
engine (:mod:`properties.checker`) runs the stall and share checks in Python beside its
compiled core.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from properties.analysis import Analysis, is_tombstone
from properties.jepsen_checks import readers_of
from properties.judging import Result, RunConfig
from properties.share_checks import check_share


def _shares(rc: RunConfig) -> bool:
    return rc.raw.get("share") is not None


def _check_share(ops: Iterable[dict], rc: RunConfig, r: Result) -> None:
    check_share(ops if isinstance(ops, list) else list(ops), rc.raw, r.add, _may_lose_acknowledged(rc))


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


# what an idempotent producer must never be told while none of its records was lost: a gap in
# its sequence (the broker lost a batch it had acknowledged) or that it was fenced (only a
# transactional producer has a rival instance); the real clients' names for them too
IDEMPOTENCE_ERRORS = ("OUT_OF_ORDER_SEQUENCE_NUMBER", "OutOfOrderSequence", "INVALID_PRODUCER_EPOCH",
                      "InvalidProducerEpoch", "PRODUCER_FENCED", "ProducerFenced")


# faults under which TCP's promise (a connection delivers what was sent in order, once, with no
# holes) no longer holds: the simulator's ``duplicate`` and ``reorder``, which deliver single
# messages of a connection twice or out of order, so a batch may reach the broker ahead of the
# one before it in its producer's sequence (the broker, with no state for the producer yet, takes
# it as its first, as Kafka's does, and refuses the earlier one's retry). Every other fault of the
# simulator's network, and every real one, acts on whole connections and keeps the promise.
TCP_BREAKING_FAULTS = frozenset({"duplicate", "reorder"})
# a history without ``"network": "connections"`` in its config (a real run's, or a simulated run's from
# before the simulator's network had connections, 2026-11-28): there ``loss``, ``partition``,
# ``straggle`` and ``hold-back`` dropped or held single messages of a connection too
MESSAGE_NETWORK_BREAKING = TCP_BREAKING_FAULTS | {"loss", "partition", "straggle", "hold-back"}


def tcp_breaking(rc: RunConfig) -> frozenset:
    """The faults of this history under which TCP's promise does not hold."""
    return TCP_BREAKING_FAULTS if rc.raw.get("network") == "connections" else MESSAGE_NETWORK_BREAKING


def _may_lose_acknowledged(rc: RunConfig) -> bool:
    """Acknowledged records may be lost without a violation: acks 0 or 1, unclean elections."""
    return rc.weak_acks or bool(rc.raw.get("unclean_leader_election_enable"))


def _check_idempotence(a: Analysis, rc: RunConfig, r: Result, faults: frozenset = frozenset()) -> None:
    """With retries and up to five batches in flight, an idempotent producer whose records
    were not lost is never told OUT_OF_ORDER_SEQUENCE_NUMBER or that it was fenced. Not judged
    where records may be lost without a violation (acks 0 or 1, unclean elections, a crash
    that lost an unflushed tail), where the checker found them lost (that is the violation),
    or where the network reordered or duplicated single messages of a connection, which TCP
    never does (a batch then reaches its broker ahead of the one before it, and is refused:
    :data:`TCP_BREAKING_FAULTS`)."""
    if faults & tcp_breaking(rc) or _may_lose_acknowledged(rc) or any(
            r.counts.get(k) or r.allowed.get(k) for k in ("lost-write", "unread-after-heal")):
        return
    for op in a.ops:
        if op.f != "send" or op.type == "ok" or not op.error:
            continue
        told = [e for e in IDEMPOTENCE_ERRORS if e in op.error]
        if told:
            r.add("idempotence-error", key=op.sends[0][0] if op.sends else None, error=op.error, ops=[op.index],
                  explanation=f"process {op.process}'s idempotent producer was told {told[0]} (op {op.index}), "
                              f"though no record of the run was lost: its sequence had no gap and nobody "
                              f"could fence it")


def _check_stall(config: dict, r: Result) -> None:
    stalled = config.get("stalled")
    if not stalled:
        return
    r.add("stalled", ops=[], time=stalled.get("at_ns"),
          explanation=f"no client operation completed for {stalled.get('idle_ms', 0) // 1000} s "
                      f"of virtual time after {stalled.get('at_ns', 0) / 1e9:.1f} s; the workload "
                      f"stopped with {stalled.get('ops_completed')} of {config.get('ops')} ops done")

