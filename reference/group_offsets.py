"""The offsets half of the group coordinator: committed offsets (OffsetCommit, OffsetFetch)
and transactional ones (TxnOffsetCommit, KIP-98/447), kept pending until the transaction's
marker is committed, and the checks of the committer against its group (classic generation or
KIP-848 member epoch). :class:`~reference.group_coordinator.GroupCoordinator` takes these
methods; they use its groups, its consumer groups and its writes to ``__consumer_offsets``.
"""

from __future__ import annotations

from collections.abc import Callable

from reference import records as rec
from reference.bugs import Bug
from reference.consumer_group_coordinator import ConsumerGroups, check_commit, check_fetch
from reference.coordinator import Coordinator
from reference.errors import Errors
from reference.group_messages import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from reference.group_state import GroupState, check_member, check_txn_member, offset_records
from reference.messages import TopicPartition
from reference.topics import OFFSETS_TOPIC


class GroupOffsets(Coordinator):
    """Committed offsets, as a part of the group coordinator (Kafka's OffsetMetadataManager)."""

    groups: dict[str, GroupState]
    pending_txn: dict[int, dict[str, dict[TopicPartition, int]]]  # producer id -> group -> offsets
    # what the group coordinator brings (declared here, not under TYPE_CHECKING: a class body
    # that a compiler of Python such as mypyc can read)
    consumer: ConsumerGroups
    unfenced: bool

    def _owns(self, group: str) -> Errors:
        raise NotImplementedError  # GroupCoordinator's

    def _write_then(self, now_ms: int, group: str, batch: bytes, apply: Callable[[], None],
                    on_done: Callable[[Errors], None]) -> None:
        raise NotImplementedError  # GroupCoordinator's

    # ------------------------------------------------------------ transactions

    def on_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker on one of our partitions is committed (HW passed it). The
        high watermark may have passed the transaction's offsets in the same step: those are
        applied first, so that the marker ends them in log order, as Kafka replays its log
        (otherwise an abort would find nothing pending, and the aborted offsets, applied just
        after, would stay pending until the producer's next commit made them the group's)."""
        if partition in self.loaded:
            self.on_high_watermark(self.host.now_ms, partition)
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


    # ------------------------------------------------------------ offsets

    def offset_commit(self, now_ms: int, src: int, req: OffsetCommitRequest) -> None:
        def answer(error: Errors) -> None:
            self.host.send(src, OffsetCommitResponse(req.correlation_id, error))

        error = self._owns(req.group_id)
        modern = self.consumer.group(req.group_id)
        if error is Errors.NONE and modern is not None and not self.groups[req.group_id].members:
            error = check_commit(modern, req.generation_id, req.member_id, [tp for tp, _o in req.offsets], False,
                                 self.unfenced)
        elif error is Errors.NONE:
            error = check_member(self.groups.get(req.group_id), req.generation_id, req.member_id, self.unfenced)
        if error is not Errors.NONE:
            answer(error)
            return
        if not req.offsets:
            answer(Errors.NONE)
            return
        group = req.group_id
        batch = rec.encode_batch(offset_records(group, req.offsets, now_ms))

        def apply() -> None:
            self.groups.setdefault(group, GroupState()).committed.update(dict(req.offsets))

        self._write_then(now_ms, group, batch, apply, answer)

    def txn_offset_commit(self, now_ms: int, src: int, req: TxnOffsetCommitRequest) -> None:
        def answer(error: Errors) -> None:
            self.host.send(src, TxnOffsetCommitResponse(req.correlation_id, error))

        error = self._owns(req.group_id)
        if error is not Errors.NONE:
            answer(error)
            return
        partition = self.partition_of(req.group_id)
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        log = self.host.log_of(tp)
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
            modern = self.consumer.group(req.group_id)
            if modern is not None and not self.groups[req.group_id].members:
                error = check_commit(modern, req.generation_id, req.member_id, [tp for tp, _o in req.offsets], True,
                                     self.unfenced)
            else:
                error = check_txn_member(self.groups.get(req.group_id), req, self.unfenced)
            if error is not Errors.NONE:
                answer(error)
                return
            batch = rec.encode_batch(offset_records(req.group_id, req.offsets, now_ms),
                                     producer_id=req.producer_id, producer_epoch=req.producer_epoch,
                                     transactional=True)

            def apply() -> None:
                self.pending_txn.setdefault(req.producer_id, {}).setdefault(
                    req.group_id, {}).update(dict(req.offsets))

            self._write_then(now_ms, req.group_id, batch, apply, answer)

        if ((Bug.TXN_UNFENCED_REQUESTS in self.host.bugs and not req.add_partition)
                or log.producer_state.txn_open(req.producer_id, req.producer_epoch)):
            verified(Errors.NONE)
        else:
            self.host.verify_txn(req.transactional_id, req.producer_id, req.producer_epoch, tp,
                                 verified, req.add_partition)

    def offset_fetch(self, src: int, req: OffsetFetchRequest) -> None:
        error = self._owns(req.group_id)
        modern = self.consumer.group(req.group_id)
        if error is Errors.NONE and modern is not None and (req.member_id is not None or req.member_epoch >= 0):
            error = check_fetch(modern, req.member_id, req.member_epoch)
        if error is not Errors.NONE:
            self.host.send(src, OffsetFetchResponse(req.correlation_id, error))
            return
        if req.require_stable:
            for groups in self.pending_txn.values():
                pending = groups.get(req.group_id, {})
                if any(tp in pending for tp in req.partitions):
                    self.host.send(src, OffsetFetchResponse(req.correlation_id,
                                                              Errors.UNSTABLE_OFFSET_COMMIT))
                    return
        committed = self.groups.get(req.group_id, GroupState()).committed
        self.host.send(src, OffsetFetchResponse(
            req.correlation_id, Errors.NONE,
            tuple((tp, committed.get(tp, -1)) for tp in req.partitions)))
