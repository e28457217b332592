"""Transactions that never end at a partition: ``hanging-transaction``.

A transaction whose end the coordinator decided must end at every partition it wrote: its
marker is written there (once the partition has a leader again), the partition's last stable
offset (LSO) moves past its records, and read_committed consumers read them (commit) or skip
them (abort). A coordinator that completes a transaction without a partition's marker leaves
that partition with an open transaction of the producer id: the LSO stays at its first record,
read_committed consumers of the partition read nothing beyond it, and only a later marker of
the same producer id ends it, with that marker's result (Kafka's partition leader folds a later
transaction of the producer id into the open one), or an administrator's abort. Kafka 4.3.0 to
4.4.0 do this to a partition that has no leader when the markers are sent (KAFKA-20734).

Three kinds of evidence, each enough on its own:

* the final read (``config.final_read.stable_offsets``: each partition's last stable offset and
  high watermark after the cluster healed and the final read waited for open transactions to
  end): the LSO, below the high watermark, sits at the first record a transaction wrote there
  whose end was acknowledged (its commit, or its abort: a failed ``txn`` op with
  ``"aborted": true``) before the final read began (``final_read.start_ns``: a coordinator
  acknowledges the end before it writes the markers, and a simulated run's clients go on during
  the final read);
* the log (``config.final_read.uncommitted``: every data record of each partition, read with
  read_uncommitted after the final read): a transaction wrote a partition (committed, aborted
  or with an outcome the client did not learn), and the same producer's (transactional id's)
  next records there follow it with no offset between that does not hold a data record. A
  marker takes an offset of its own, and a producer cannot write a partition in its next
  transaction before the marker of the previous one is there (its coordinator answers
  CONCURRENT_TRANSACTIONS until every marker is written; a new producer with the id first has
  the open transaction aborted), so the first transaction's marker never came there, and the
  next transaction's marker ended both;
* the broker's own state (``config.txn_probe.open_transactions``, from brokers that serve
  KIP-664's DescribeProducers, ListTransactions and DescribeTransactions): a partition's leader
  said producer id X had a transaction open there since offset F, X's coordinator then said
  that transaction was not pending at the partition (Empty, CompleteCommit, CompleteAbort, or
  Ongoing or Prepare* without it: a hanging transaction as ``kafka-transactions.sh find-hanging``
  defines it), or, F being the first record of a transaction whose end was acknowledged before,
  was Ongoing: the producer's next transaction had begun, which the coordinator allows only
  once every marker of the one before was written; and the leader said again, after that, that
  it was open since F. A coordinator that names a transaction complete has had every marker
  acknowledged.

Each finding says what became of the transaction's records at the partition (``outcome``):
``open`` (still open at the end), ``committed-later`` (read_committed reads returned them:
a later marker of the producer committed them), ``aborted`` (in the log, but the final read read
the partition to its end without them: a later marker aborted them, undoing a commit the client
was told succeeded while it stands at the other partitions) or ``unknown``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from properties.analysis import Op, hashable

NS_PER_S = 1e9
_PENDING = ("Ongoing", "PrepareCommit", "PrepareAbort")


def applies(config: dict) -> bool:
    """Whether a run carries evidence this check reads: the broker's word on open transactions,
    the log read with read_uncommitted, or a partition whose last stable offset stayed below its
    high watermark."""
    final = config.get("final_read") or {}
    if (config.get("txn_probe") or {}).get("open_transactions") or final.get("uncommitted"):
        return True
    return any(isinstance(v, list) and len(v) == 2 and v[0] < v[1] for v in (final.get("stable_offsets") or {}).values())


@dataclass
class _Log:
    """The transactional writes of a history and what was read of them, with the log read
    uncommitted: who wrote each record, where each value sits, who read it first."""

    writer: dict[tuple[str, int], Op] = field(default_factory=dict)
    at: dict[tuple[str, object], int] = field(default_factory=dict)  # (key, value) -> offset
    data: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))  # offsets holding data records
    first_read: dict[tuple[str, object], Op] = field(default_factory=dict)
    txns: list[Op] = field(default_factory=list)

    @classmethod
    def of(cls, ops: list[Op], uncommitted: dict) -> _Log:
        log = cls()
        for key, pairs in uncommitted.items():
            for pair in pairs:
                if isinstance(pair, list) and len(pair) >= 2 and isinstance(pair[0], int):
                    log.data[key].add(pair[0])
                    log.at.setdefault((key, hashable(pair[1])), pair[0])
        for op in ops:
            if not op.completed:
                continue
            if op.f == "txn":
                log.txns.append(op)
                for key, off, value in op.sends:
                    if off is not None:
                        log.at.setdefault((key, value), off)
            if op.type == "ok":
                for poll in op.polls:
                    for key, got in poll:
                        for _off, value in got:
                            log.first_read.setdefault((key, value), op)
        for op in log.txns:
            for key, value in {(k, v) for k, _o, v in op.sends}:
                if (key, value) in log.at:
                    log.writer.setdefault((key, log.at[(key, value)]), op)
        return log

    def offsets(self, op: Op, key: str) -> list[tuple[int, object]]:
        """``op``'s records at ``key``: (offset, value), where the offset is known."""
        return sorted((self.at[(key, v)], v) for k, _o, v in op.sends if k == key and (key, v) in self.at)

    def in_log(self, op: Op, key: str) -> list[tuple[int, object]]:
        """``op``'s records at ``key`` that the log read uncommitted holds at their offsets."""
        return [(o, v) for o, v in self.offsets(op, key) if o in self.data[key]]


def check_hanging(ops: list[Op], config: dict, add) -> None:
    """Report ``hanging-transaction`` through ``add(kind, **evidence)``."""
    final = config.get("final_read") or {}
    log = _Log.of(ops, final.get("uncommitted") or {})
    found: dict[tuple[str, int], dict] = {}
    for key, pair in sorted((final.get("stable_offsets") or {}).items()):
        writer = log.writer.get((key, pair[0])) if isinstance(pair, list) and len(pair) == 2 and pair[0] < pair[1] \
            else None
        if writer is not None and (writer.type == "ok" or writer.aborted) \
                and writer.time < final.get("start_ns", writer.time + 1):  # its end was acknowledged before the final read
            found[(key, pair[0])] = {"op": writer}
    if final.get("uncommitted"):
        for spot, (op, nxt, between) in _unmarked(log).items():
            found.setdefault(spot, {"op": op}).update(next=nxt, between=between)
    for entry in (config.get("txn_probe") or {}).get("open_transactions") or []:
        spot = (entry["partition"], entry["start_offset"])
        sighting = _sighting(entry, log.writer.get(spot))
        if sighting is not None:
            found.setdefault(spot, {"op": log.writer.get(spot)}).setdefault("sighting", sighting)
    for (key, first), entry in sorted(found.items()):
        _report(key, first, entry, log, final, config.get("broker_log") or [], add)


def _sighting(entry: dict, writer: Op | None) -> dict | None:
    """The first time the broker's word shows the open transaction of ``entry`` hanging, as
    ``{"at_ns", "partition", "producer_id", "start_offset", "transactional_id", "coordinator":
    {"state", "has_partition"}}``; None if it never does. Hanging: its coordinator no longer had
    the partition in the transaction (complete, empty, or on without it); or the transaction
    whose first record opened it (``writer``) had its end acknowledged before the coordinator
    was asked, and the coordinator was on a later one (Ongoing, with or without the partition:
    the producer's next transaction began, so the first one had completed). A Prepare* with the
    partition may be the first one's end still under way: it says nothing."""
    acked_ns = writer.time if writer is not None and (writer.type == "ok" or writer.aborted) else None
    for first_ns, last_ns, state, here in entry.get("seen") or []:
        if (state in ("PrepareCommit", "PrepareAbort") and here) or state in ("Dead", "PrepareEpochFence"):
            continue
        moved_on = acked_ns is not None and first_ns > acked_ns and state == "Ongoing"
        if moved_on or state in ("CompleteCommit", "CompleteAbort", "Empty") or not here:
            return {"at_ns": last_ns, **{k: entry[k] for k in ("partition", "producer_id", "start_offset",
                                                                "transactional_id")},
                    "coordinator": {"state": state, "has_partition": here}}
    return None


def _unmarked(log: _Log) -> dict[tuple[str, int], tuple[Op, Op, list[int]]]:
    """Rule of the log: (key, first offset) -> (an op whose records at key are in the log, the
    same producer's next op with records there, the offsets between them, each a data record).
    The producer is the op's transactional id where the history names it (a client that lost
    track of a commit starts over under a new process, with the same id), else its process."""
    last: dict[tuple[object, str], Op] = {}  # (producer, key) -> its latest op with records at key
    out: dict[tuple[str, int], tuple[Op, Op, list[int]]] = {}
    for op in sorted(log.txns, key=lambda o: o.time):
        producer = op.transactional_id or op.process
        for key in dict.fromkeys(k for k, _o, _v in op.sends):
            prev, mine = last.get((producer, key)), log.in_log(op, key)
            if prev is not None and mine and (theirs := log.in_log(prev, key)):
                # from the first record on: a marker of the first transaction's own anywhere
                # before the next one's records would be an offset without a data record
                a, c = theirs[0][0], mine[0][0]
                between = [o for o in range(a + 1, c) if o not in {x for x, _v in theirs}]
                if c > theirs[-1][0] and all(o in log.data[key] for o in range(a + 1, c)):
                    out.setdefault((key, a), (prev, op, between))
            if mine:
                last[(producer, key)] = op
    return out


def _report(key: str, first: int, entry: dict, log: _Log, final: dict, broker_log: list, add) -> None:
    op, sighting, nxt = entry.get("op"), entry.get("sighting"), entry.get("next")
    mine = log.offsets(op, key) if op is not None else []
    outcome, read_by = _outcome(key, first, mine, log, final)
    stable = (final.get("stable_offsets") or {}).get(key)
    topic, _, partition = key.rpartition(":")
    names = (f"{topic}-{partition}", f'"{key}"')  # Kafka's TopicPartition, the reference's key in JSON
    lines = [e for e in broker_log if any(n in str(e.get("line", "")) for n in names)][:3]
    ops = [o.index for o in (op, nxt, read_by) if o is not None]
    add("hanging-transaction", key=key, first_offset=first, outcome=outcome, values=[v for _o, v in mine],
        offsets=[o for o, _v in mine], final_stable_offsets=stable, sighting=sighting,
        next_op=nxt.index if nxt is not None else None, broker_log=lines, ops=list(dict.fromkeys(ops)),
        explanation=_explain(key, first, entry, stable, outcome, read_by, lines))


def _outcome(key: str, first: int, mine: list, log: _Log, final: dict) -> tuple[str, Op | None]:
    """What became of the records (``mine``: the transaction's (offset, value) at ``key``)."""
    stable = (final.get("stable_offsets") or {}).get(key)
    if isinstance(stable, list) and len(stable) == 2 and stable[0] <= first < stable[1]:
        return "open", None
    reads = [log.first_read[(key, v)] for _o, v in mine if (key, v) in log.first_read]
    if reads:
        return "committed-later", min(reads, key=lambda o: o.time)
    in_log = mine and all(o in log.data[key] for o, _v in mine)
    if in_log and _read_to_its_end(key, final):
        return "aborted", None
    return "unknown", None


def _read_to_its_end(key: str, final: dict) -> bool:
    """Whether the final read read ``key`` to its end offset (its position there, when the run
    recorded positions; else the whole read's)."""
    end = (final.get("end_offsets") or {}).get(key)
    if end is None:
        return False
    positions = final.get("positions")
    return positions[key] >= end if isinstance(positions, dict) and key in positions else bool(final.get("reached_end"))


def _explain(key: str, first: int, entry: dict, stable, outcome: str, read_by: Op | None, lines: list) -> str:
    op, sighting, nxt = entry.get("op"), entry.get("sighting"), entry.get("next")
    if op is not None:
        told = {"ok": "the client was told it committed", "info": "its outcome was unknown to the client",
                "fail": "the client was told it failed" + (" and that its abort succeeded" if op.aborted else "")
                }.get(op.type, op.type)
        head = f"the transaction of op {op.index} ({told} at {op.time / NS_PER_S:.2f} s) wrote offset {first} of {key}"
    else:
        head = f"a transaction wrote offset {first} of {key} (no op of the history names that offset)"
    parts = [head + ", and its marker never came there"]
    if nxt is not None:
        between = entry.get("between") or []
        parts.append(f"the same producer's next transaction there (op {nxt.index}) wrote right after it"
                     + (f", offsets {between[0]}-{between[-1]} between holding data records only" if between else "")
                     + ": no marker between them")
    if sighting is not None:
        coord = sighting.get("coordinator") or {}
        state = coord.get("state", "unknown")
        here = coord.get("has_partition")
        what = (f"{state}{' with' if here else ' without'} {key}" if state in _PENDING else state)
        later = " (a later transaction of the producer)" if state == "Ongoing" and here else ""
        parts.append(f"at {sighting['at_ns'] / NS_PER_S:.2f} s the leader of {key} had producer id "
                     f"{sighting['producer_id']}'s transaction open there since offset {first} while its coordinator "
                     f"said the transaction {sighting.get('transactional_id')!r} was {what}{later}")
    if isinstance(stable, list) and len(stable) == 2:
        parts.append(f"after healing the last stable offset of {key} was {stable[0]} and its high watermark {stable[1]}")
    parts.append({
        "open": "the transaction was still open at the end: read_committed consumers of the partition read nothing "
                "beyond it",
        "committed-later": (f"its records were first read by op {read_by.index} at {read_by.time / NS_PER_S:.2f} s, "
                            "once a later marker of the producer ended it" if read_by is not None else ""),
        "aborted": "its records are in the log, but the final read read the partition to its end without them: a "
                   "later marker of the producer aborted them"
                   + (", undoing a commit the client was told succeeded" if op is not None and op.type == "ok" else ""),
        "unknown": "the final read did not show what became of its records"}[outcome])
    log = f"; the broker logged: {lines[0].get('line')}" if lines else ""
    return "; ".join(p for p in parts if p) + log
