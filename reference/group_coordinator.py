"""The group coordinator's offset store: committed offsets over ``__consumer_offsets``.

Theory of operation
-------------------
Group ids are spread over the partitions of the internal topic ``__consumer_offsets`` by
Java's ``String.hashCode`` (as Kafka); the leader of a partition is the coordinator of its
groups. Every commit is written to that partition and takes effect only when the high
watermark passes it, so a coordinator that fails over loses nothing it acknowledged. A new
leader loads the partition's log.

* OffsetCommit writes the offsets as plain records; OffsetFetch reads them back (-1 when
  nothing was committed).
* TxnOffsetCommit (``sendOffsetsToTransaction``) writes them in a transactional batch of
  the producer (first verified with the transaction coordinator, KIP-890 part 1); they
  stay pending until the transaction's marker reaches this partition: a commit marker
  makes them the group's committed offsets, an abort marker drops them. While offsets of a
  group are pending, OffsetFetch with ``require_stable`` (KIP-447) answers
  ``UNSTABLE_OFFSET_COMMIT`` so that a new consumer does not start from offsets about to
  change.

Record format (our own, JSON): key ``{"type": "offset", "group": g, "key": "topic:p"}``,
value ``{"offset": n}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reference import records as rec
from reference.errors import Errors
from reference.messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    TopicPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from reference.txn_coordinator import OFFSETS_TOPIC, partition_for

if TYPE_CHECKING:
    from reference.broker import Broker


@dataclass(slots=True)
class GroupState:
    committed: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass(slots=True)
class _PendingWrite:
    partition: int
    required_offset: int
    apply: object  # callable() applying the write's effect
    on_done: object  # callable(Errors)


def _encode(group: str, offsets: tuple[tuple[TopicPartition, int], ...],
            now_ms: int) -> list[rec.RecordInput]:
    return [rec.RecordInput(json.dumps({"type": "offset", "group": group, "key": tp.key},
                                       sort_keys=True).encode(),
                            json.dumps({"offset": off}).encode(), (), now_ms)
            for tp, off in offsets]


class GroupCoordinator:
    """Owned by a broker; acts for the ``__consumer_offsets`` partitions the broker leads."""

    def __init__(self, broker: Broker, num_partitions: int) -> None:
        self.broker = broker
        self.num_partitions = num_partitions
        self.loaded: dict[int, int] = {}  # partition -> leader epoch it was loaded in
        self.groups: dict[str, GroupState] = {}
        # producer id -> group -> offsets, written in a transaction not yet ended
        self.pending_txn: dict[int, dict[str, dict[TopicPartition, int]]] = {}
        self.writes: list[_PendingWrite] = []

    # ------------------------------------------------------------ ownership

    def partition_of(self, group: str) -> int:
        return partition_for(group, self.num_partitions)

    def _owns(self, group: str) -> Errors:
        if not group:
            return Errors.INVALID_GROUP_ID
        p = self.partition_of(group)
        if p not in self.loaded or not self.broker.lease_valid():
            return Errors.NOT_COORDINATOR
        part = self.broker.partitions.get(TopicPartition(OFFSETS_TOPIC, p))
        if part is None or not part.hw_reached_epoch_start():
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        return Errors.NONE

    def on_leader(self, partition: int, leader_epoch: int) -> None:
        self._unload(partition)
        log = self.broker.partitions[TopicPartition(OFFSETS_TOPIC, partition)].log
        for batch in log.batches():
            try:
                h = rec.parse_header(batch)
                if h.is_control:
                    self._end_txn(partition, h.producer_id, rec.control_is_commit(batch))
                    continue
                for r in rec.decode_records(batch):
                    self._load_record(h, r)
            except (rec.CorruptRecordError, ValueError, KeyError):
                continue  # a record this version cannot read is skipped, never fatal
        self.loaded[partition] = leader_epoch
        self.broker.event("group-coordinator-loaded", partition=partition, leader_epoch=leader_epoch)

    def _load_record(self, h: rec.BatchHeader, r: rec.Record) -> None:
        if r.key is None or r.value is None:
            return
        key = json.loads(r.key)
        if key.get("type") != "offset":
            return
        tp = TopicPartition.parse(key["key"])
        offset = json.loads(r.value)["offset"]
        if h.is_transactional:
            self.pending_txn.setdefault(h.producer_id, {}).setdefault(key["group"], {})[tp] = offset
        else:
            self.groups.setdefault(key["group"], GroupState()).committed[tp] = offset

    def on_not_leader(self, partition: int) -> None:
        self._unload(partition)

    def _unload(self, partition: int) -> None:
        if partition not in self.loaded:
            return
        del self.loaded[partition]
        for g in [g for g in self.groups if self.partition_of(g) == partition]:
            del self.groups[g]
        for pid in list(self.pending_txn):
            groups = self.pending_txn[pid]
            for g in [g for g in groups if self.partition_of(g) == partition]:
                del groups[g]
            if not groups:
                del self.pending_txn[pid]
        keep = []
        for w in self.writes:
            if w.partition == partition:
                w.on_done(Errors.NOT_COORDINATOR)
            else:
                keep.append(w)
        self.writes = keep

    # ------------------------------------------------------------ durable writes

    def _write(self, now_ms: int, partition: int, batch: bytes, apply, on_done) -> None:
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        error, last = self.broker.append_internal(now_ms, tp, batch)
        if error is not Errors.NONE:
            on_done(Errors.NOT_COORDINATOR if error is Errors.NOT_COORDINATOR else error)
            return
        self.writes.append(_PendingWrite(partition, last + 1, apply, on_done))
        self.on_high_watermark(now_ms, partition)

    def on_high_watermark(self, now_ms: int, partition: int) -> None:
        if partition not in self.loaded or not self.writes:
            return
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        hw = self.broker.partitions[tp].log.high_watermark
        keep = []
        for w in self.writes:
            if w.partition == partition and hw >= w.required_offset:
                if self.broker.isr_satisfied(tp):
                    w.apply()
                    w.on_done(Errors.NONE)
                else:
                    w.on_done(Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
            else:
                keep.append(w)
        self.writes = keep

    # ------------------------------------------------------------ transactions

    def on_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker on one of our partitions is committed (HW passed it)."""
        if partition in self.loaded:
            self._end_txn(partition, producer_id, commit)

    def _end_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        groups = self.pending_txn.get(producer_id)
        if not groups:
            return
        for g in [g for g in groups if self.partition_of(g) == partition]:
            offsets = groups.pop(g)
            if commit:
                self.groups.setdefault(g, GroupState()).committed.update(offsets)
        if not groups:
            del self.pending_txn[producer_id]

    # ------------------------------------------------------------ requests

    def offset_commit(self, now_ms: int, src: int, req: OffsetCommitRequest) -> None:
        def answer(error: Errors) -> None:
            self.broker.send(src, OffsetCommitResponse(req.correlation_id, error))

        error = self._owns(req.group_id)
        if error is not Errors.NONE:
            answer(error)
            return
        if not req.offsets:
            answer(Errors.NONE)
            return
        group = req.group_id
        batch = rec.encode_batch(_encode(group, req.offsets, now_ms))

        def apply() -> None:
            self.groups.setdefault(group, GroupState()).committed.update(dict(req.offsets))

        self._write(now_ms, self.partition_of(group), batch, apply, answer)

    def txn_offset_commit(self, now_ms: int, src: int, req: TxnOffsetCommitRequest) -> None:
        def answer(error: Errors) -> None:
            self.broker.send(src, TxnOffsetCommitResponse(req.correlation_id, error))

        error = self._owns(req.group_id)
        if error is not Errors.NONE:
            answer(error)
            return
        partition = self.partition_of(req.group_id)
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        log = self.broker.partitions[tp].log
        if log.producer_state.check_marker(req.producer_id, req.producer_epoch) is not Errors.NONE:
            answer(Errors.PRODUCER_FENCED)
            return

        def verified(error: Errors) -> None:
            if error is not Errors.NONE:
                answer(error)
                return
            if self._owns(req.group_id) is not Errors.NONE:
                answer(Errors.NOT_COORDINATOR)
                return
            if log.producer_state.check_marker(req.producer_id, req.producer_epoch) is not Errors.NONE:
                answer(Errors.PRODUCER_FENCED)
                return
            batch = rec.encode_batch(_encode(req.group_id, req.offsets, now_ms),
                                     producer_id=req.producer_id, producer_epoch=req.producer_epoch,
                                     transactional=True)

            def apply() -> None:
                self.pending_txn.setdefault(req.producer_id, {}).setdefault(
                    req.group_id, {}).update(dict(req.offsets))

            self._write(now_ms, partition, batch, apply, answer)

        if ("txn-unfenced-requests" in self.broker.bugs
                or log.producer_state.txn_open(req.producer_id)):
            verified(Errors.NONE)
        else:
            self.broker.verify_txn(req.transactional_id, req.producer_id, req.producer_epoch, tp,
                                   verified)

    def offset_fetch(self, src: int, req: OffsetFetchRequest) -> None:
        error = self._owns(req.group_id)
        if error is not Errors.NONE:
            self.broker.send(src, OffsetFetchResponse(req.correlation_id, error))
            return
        if req.require_stable:
            for groups in self.pending_txn.values():
                pending = groups.get(req.group_id, {})
                if any(tp in pending for tp in req.partitions):
                    self.broker.send(src, OffsetFetchResponse(req.correlation_id,
                                                              Errors.UNSTABLE_OFFSET_COMMIT))
                    return
        committed = self.groups.get(req.group_id, GroupState()).committed
        self.broker.send(src, OffsetFetchResponse(
            req.correlation_id, Errors.NONE,
            tuple((tp, committed.get(tp, -1)) for tp in req.partitions)))
