"""A broker: its lifecycle, and the tables that route its inputs to the modules that act.

Theory of operation
-------------------
On start the broker recovers every partition log found in its storage, then registers with
the controller, which gives it a fresh broker epoch; until registered it serves nothing.
It learns partition roles from the controller's metadata images (pushed, and repaired by
heartbeat responses) and applies them through :class:`~reference.partition.Partition`: a
partition it now leads or follows, a coordinator partition loaded or unloaded, fetchers
started or stopped, produces parked for a leadership it lost answered.

Everything else is routed by two tables: :data:`HANDLERS` (message type -> handler) and
:data:`TIMERS` (timer name -> handler), to

* :mod:`~reference.produce`: the produce path, transaction markers, internal writes;
* :mod:`~reference.leader`: fetches served, the high watermark, ISR changes, offset lookups;
* :mod:`~reference.follower`: the replica fetchers;
* :mod:`~reference.cleaner`: DeleteRecords, compaction, retention;
* the coordinators (:mod:`~reference.txn_coordinator`, :mod:`~reference.group_coordinator`),
  which see this broker as their :class:`~reference.coordinator.CoordinatorHost`.

Their shared state is :class:`~reference.broker_state.BrokerState`. Timers: heartbeat,
ISR-lag check, HW checkpoint, periodic flush, the cleaner, request expiry. Unknown messages
and timers are dropped, never fatal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from reference import cleaner, follower, leader, produce
from reference.broker_state import TIMER_FIELDS, BrokerConfig, BrokerState
from reference.coordinator import STOPPED, partition_for
from reference.errors import Errors, UnexpectedInput
from reference.group_coordinator import GroupCoordinator
from reference.group_messages import (
    ConsumerGroupHeartbeatRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from reference.log import ROLL_FLUSH_MS, PartitionLog
from reference.messages import (
    COORDINATOR_TRANSACTION,
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    DeleteRecordsRequest,
    EndTxnRequest,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    MetadataImage,
    MetadataRequest,
    MetadataResponse,
    MetadataUpdate,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
    TopicPartition,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from reference.partition import Partition
from reference.share_coordinator import ShareCoordinator
from reference.share_fetch import ShareFetcher
from reference.share_messages import (
    COORDINATOR_SHARE,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    ShareGroupHeartbeatRequest,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
)
from reference.storage import Storage, StorageError
from reference.topics import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TXN_TOPIC
from reference.txn_coordinator import TransactionCoordinator

__all__ = ["TIMER_FIELDS", "Broker", "BrokerConfig"]


class Broker(BrokerState):
    def __init__(self, broker_id: int, storage: Storage, config: BrokerConfig,
                 controller_id: int, incarnation: int = 0,
                 bugs: frozenset[str] = frozenset(), storage_intact: bool = False) -> None:
        super().__init__(broker_id, storage, config, controller_id, incarnation, bugs, storage_intact)
        # the broker owns its coordinators and they see it as their host: a reference cycle
        # that stop() breaks, so that a crashed broker is freed at once (the simulator avoids
        # full collections)
        host = self
        self.txn = TransactionCoordinator(host, config.transaction_state_partitions, config.transaction_version,
                                          config.producer_epoch_start)
        self.groups = GroupCoordinator(host, config.offsets_partitions, config.consumer_session_timeout_ms,
                                       config.consumer_heartbeat_interval_ms, config.share_session_timeout_ms,
                                       config.share_heartbeat_interval_ms)
        # KIP-932: the share coordinator (share-partitions' state) and the share-partitions led here
        self.share_state = ShareCoordinator(host, config.share_state_partitions)
        self.share = ShareFetcher(host, config)
        self.coordinators = {TXN_TOPIC: self.txn, OFFSETS_TOPIC: self.groups, SHARE_STATE_TOPIC: self.share_state}
        self._rolled: list[str] = []  # the segments that rolled since the last drain (see drain)
        # Broker.changes when the last flush left every log flushed: while it is the same, no
        # log has anything to flush (its appends, truncations and new logs all move it)
        self._flushed_at: int | None = None

    # ------------------------------------------------------------ lifecycle

    def stop(self) -> None:
        """The process is gone: the coordinators let go of their host, which they would
        otherwise keep alive with themselves until a full garbage collection."""
        groups = self.groups
        for part in (self.txn, groups, groups.consumer, groups.share, self.share_state, self.share):
            part.host = STOPPED

    def start(self, now_ms: int) -> None:
        self.now_ms = now_ms
        dirs = sorted({n.split("/", 1)[0] for n in self.storage.list("")})
        for d in dirs:
            topic, _, part = d.rpartition("-")
            if not topic or not part.isdigit():
                continue
            tp = TopicPartition(topic, int(part))
            log = PartitionLog.open(self.storage, d, self.config.log_config())
            log.roll_flush = self._rolled.append
            log.changes = self.changes
            self.partitions[tp] = Partition(tp, log, self.node_id, self.bugs,
                                            min_insync_replicas=self.config.min_insync_replicas)
            self.event("recover", key=tp.key, log_end_offset=log.log_end_offset,
                       high_watermark=log.high_watermark, cut_bytes=log.recovered_bytes_cut)
        self._register()
        self.set_timer(self.config.replica_lag_time_max_ms / 2, "isr-check")
        self.set_timer(self.config.high_watermark_checkpoint_interval_ms, "checkpoint")
        if self.config.flush_ms is not None:
            self.set_timer(self.config.flush_ms, "flush")
        self.set_timer(self.config.log_cleaner_backoff_ms, "cleaner")

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self.now_ms = now_ms
        handler = HANDLERS.get(type(message))
        if handler is None:
            raise UnexpectedInput(f"broker {self.node_id}: no handler for {type(message).__name__} from {src}")
        handler(self, now_ms, src, message)

    def timer(self, now_ms: int, key: Any) -> None:
        self.now_ms = now_ms
        name, args = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        handler = TIMERS.get(name)
        if handler is None:
            raise UnexpectedInput(f"broker {self.node_id}: no handler for the timer {key!r}")
        handler(self, now_ms, *args)

    def timer_is_moot(self, now_ms: int, key: Any) -> bool | float:
        # the timeouts of requests answered in time: most timers a broker sets (see timer);
        # a periodic flush with nothing to flush, which would only set itself again
        name, args = (key[0], key[1:]) if isinstance(key, tuple) else (key, ())
        moot = MOOT_TIMERS.get(name)
        return moot is not None and moot(self, now_ms, *args)

    # ------------------------------------------------------------ the controller

    def _register(self) -> None:
        self.send(self.controller_id, BrokerRegistrationRequest(self.node_id, self.incarnation,
                                                                self.storage_intact))
        self.set_timer(self.config.registration_retry_ms, "register")

    def _on_registration(self, now_ms: int, msg: BrokerRegistrationResponse) -> None:
        if msg.incarnation != self.incarnation or self.broker_epoch >= 0:
            return
        if msg.error is not Errors.NONE:
            return  # the registration timer tries again
        self.broker_epoch = msg.broker_epoch
        self.event("registered", broker_epoch=self.broker_epoch)
        self._heartbeat(now_ms)

    def _heartbeat(self, now_ms: int) -> None:
        since = self.heartbeat_unanswered_since
        if since >= 0 and now_ms - since > self.config.alter_partition_timeout_ms:
            # no answer in time: the controller channel's request timeout closes the connection
            self.close_connection(self.controller_id)
            since = -1
        self.heartbeat_unanswered_since = now_ms if since < 0 else since
        self.send(self.controller_id, BrokerHeartbeatRequest(
            self.node_id, self.broker_epoch, self.metadata.version, now_ms))
        self.set_timer(self.config.heartbeat_interval_ms, "heartbeat")

    def _on_heartbeat_response(self, now_ms: int, msg: BrokerHeartbeatResponse) -> None:
        if msg.broker_epoch != self.broker_epoch:
            return
        self.heartbeat_unanswered_since = -1
        if msg.error is Errors.STALE_BROKER_EPOCH:
            # the controller no longer knows this registration: register again
            self.broker_epoch = -1
            self._register()
            return
        if msg.request_sent_ms >= 0:
            self.lease_until_ms = max(self.lease_until_ms, msg.request_sent_ms + self.config.coordinator_lease_ms)
        if msg.metadata is not None:
            self._apply_metadata(now_ms, msg.metadata)

    def _apply_metadata(self, now_ms: int, image: MetadataImage) -> None:
        if image.version <= self.metadata.version:
            return
        self.metadata = image
        self._topic_configs = dict(image.topic_configs)
        deleted = set(image.deleted_topics)
        for tp in [tp for tp in self.partitions if tp.topic in deleted]:
            self._delete_partition(tp)
        for tp, p in self.partitions.items():
            p.log.config = self.log_config(tp.topic)
            p.min_insync_replicas = self.min_insync_replicas(tp.topic)
            p.log.bugs = self.bugs
        for state in image.partitions:
            if self.node_id in state.replicas:
                self._apply_partition_state(now_ms, state)
        self._leaders = None
        follower.sync_fetchers(self, now_ms)
        self.txn.leaders_changed(now_ms)

    def _apply_partition_state(self, now_ms: int, state) -> None:
        p = self.partitions.get(state.tp)
        if p is None:
            d = f"{state.tp.topic}-{state.tp.partition}"
            log = PartitionLog.open(self.storage, d, self.log_config(state.tp.topic))
            log.bugs = self.bugs
            log.roll_flush = self._rolled.append
            log.changes = self.changes
            self.changes[0] += 1
            p = self.partitions[state.tp] = Partition(
                state.tp, log, self.node_id, self.bugs, min_insync_replicas=self.min_insync_replicas(state.tp.topic))
        before_leo = p.log.log_end_offset
        change = p.apply_state(state, now_ms)
        coordinator = self.coordinators.get(state.tp.topic)
        if change == "leader":
            self.event("leader-elected", key=state.tp.key, leader_epoch=p.leader_epoch,
                       log_end_offset=p.log.log_end_offset, high_watermark=p.log.high_watermark, isr=sorted(p.isr))
            self._after_leader_change(p)
            if coordinator is not None:
                coordinator.on_leader(now_ms, state.tp.partition, p.leader_epoch)
            leader.maybe_advance_hw(self, now_ms, p)
        elif change == "follower":
            if p.log.log_end_offset < before_leo:
                self.event("truncate", key=state.tp.key, from_offset=before_leo, to=p.log.log_end_offset,
                           reason="high-watermark")
            self._after_leader_change(p)
            if coordinator is not None:
                coordinator.on_not_leader(state.tp.partition)
        elif p.is_leader:
            leader.maybe_advance_hw(self, now_ms, p)

    def _delete_partition(self, tp: TopicPartition) -> None:
        """The topic was deleted: drop the replica and its files."""
        p = self.partitions.pop(tp)
        self.changes[0] += 1
        self.purgatory.cancel(tp, Errors.UNKNOWN_TOPIC_OR_PARTITION)
        for name in self.storage.list(p.log.directory + "/"):
            self.storage.delete(name)
        self.event("partition-deleted", key=tp.key)

    def _after_leader_change(self, p: Partition) -> None:
        """Answer what the old role left pending: parked produces can no longer complete; the
        share-partitions of the old leadership go."""
        if not p.is_leader:
            self.purgatory.cancel(p.tp, Errors.NOT_LEADER_OR_FOLLOWER)
        self.share.on_leadership(p.tp)

    def _on_producer_ids(self, msg: AllocateProducerIdsResponse) -> None:
        if msg.correlation_id == self.allocate_in_flight:
            self.allocate_in_flight = -1
            if msg.error is Errors.NONE:
                self.producer_ids = (msg.producer_id_start, msg.producer_id_start + msg.producer_id_len)

    # ------------------------------------------------------------ what the coordinators may ask

    def take_producer_id(self) -> int:
        """A producer id from this broker's block, or -1 while a new block is on its way."""
        nxt, end = self.producer_ids
        if nxt < end:
            self.producer_ids = (nxt + 1, end)
            return nxt
        if self.allocate_in_flight < 0 and self.broker_epoch >= 0:
            self.allocate_in_flight = self.corr()
            self.send(self.controller_id, AllocateProducerIdsRequest(
                self.allocate_in_flight, self.node_id, self.broker_epoch))
            self.set_timer(self.config.alter_partition_timeout_ms, ("allocate-timeout", self.allocate_in_flight))
        return -1

    def append_internal(self, now_ms: int, tp: TopicPartition, batch: bytes) -> tuple[Errors, int]:
        return produce.append_internal(self, now_ms, tp, batch)

    def log_of(self, tp: TopicPartition) -> PartitionLog:
        return self.partitions[tp].log

    def caught_up(self, tp: TopicPartition) -> bool:
        p = self.partitions.get(tp)
        return p is not None and p.hw_reached_epoch_start()

    def leader_of(self, tp: TopicPartition) -> int:
        return self.leaders().get(tp, -1)

    def has_partition(self, tp: TopicPartition) -> bool:
        return tp in self.leaders()

    def partition_count(self, topic: str) -> int:
        return sum(1 for tp in self.leaders() if tp.topic == topic)

    def verify_txn(self, txn_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition,
                   then: Callable[[Errors], None], add: bool = False) -> None:
        produce.verify_txn(self, txn_id, producer_id, producer_epoch, tp, then, add)

    # ------------------------------------------------------------ clients' lookups

    def _on_find_coordinator(self, src: int, req: FindCoordinatorRequest) -> None:
        if req.key_type == COORDINATOR_TRANSACTION:
            tp = TopicPartition(TXN_TOPIC, partition_for(req.key, self.config.transaction_state_partitions))
        elif req.key_type == COORDINATOR_SHARE:
            tp = TopicPartition(SHARE_STATE_TOPIC, partition_for(req.key, self.config.share_state_partitions))
        else:
            tp = TopicPartition(OFFSETS_TOPIC, partition_for(req.key, self.config.offsets_partitions))
        coordinator = self.leaders().get(tp, -1)
        if self.broker_epoch < 0 or coordinator < 0:
            self.send(src, FindCoordinatorResponse(req.correlation_id, Errors.COORDINATOR_NOT_AVAILABLE))
        else:
            self.send(src, FindCoordinatorResponse(req.correlation_id, Errors.NONE, coordinator))

    def _on_init_producer_id(self, now_ms: int, src: int, req: InitProducerIdRequest) -> None:
        """A producer id: transactional ids go to the transaction coordinator, an idempotent
        producer gets one from this broker's block."""
        if req.transactional_id is not None:
            self.txn.init_producer_id(now_ms, src, req)
            return
        pid = self.take_producer_id()
        if pid >= 0:
            self.send(src, InitProducerIdResponse(req.correlation_id, Errors.NONE, pid, 0))
        else:
            self.send(src, InitProducerIdResponse(req.correlation_id, Errors.COORDINATOR_LOAD_IN_PROGRESS))

    # ------------------------------------------------------------ periodic work

    def _checkpoint(self) -> None:
        for p in self.partitions.values():
            try:
                p.log.checkpoint()
            except StorageError:
                # a full disk refuses a partition's first checkpoint file: this round skips it
                # (a restart then recovers with the HW it checkpointed last, or none, which is
                # only older); before, the exception escaped the broker and ended the run
                continue
        self.set_timer(self.config.high_watermark_checkpoint_interval_ms, "checkpoint")

    def drain(self) -> list:
        """Also a timer for each segment that rolled in this step: Kafka's scheduler flushes it
        a moment later (a crash before then loses its unflushed tail). The logs append to
        ``_rolled``, a list, not to the broker: no reference cycle keeps a crashed broker."""
        rolled = self._rolled
        if rolled:
            for name in rolled:
                self.set_timer(ROLL_FLUSH_MS, ("roll-flush", name))
            rolled.clear()
        return super().drain()

    def _flush(self) -> None:
        for p in self.partitions.values():
            if p.log.flush():  # a log with nothing new is not fsynced, as in Kafka
                self.event("fsync", key=p.tp.key, log_end_offset=p.log.log_end_offset)
        self._flushed_at = self.changes[0]
        flush_ms = self.config.flush_ms
        assert flush_ms is not None  # the flush timer is set only with flush.ms
        self.set_timer(flush_ms, "flush")

    def _flush_is_moot(self) -> bool | float:
        """The next flush's delay when this one would flush nothing (no log changed since the
        last flush left them all flushed), else False."""
        flush_ms = self.config.flush_ms
        return flush_ms is not None and self._flushed_at == self.changes[0] and flush_ms


def _on_metadata_update(b: Broker, now_ms: int, src: int, msg: MetadataUpdate) -> None:
    if b.broker_epoch >= 0:
        b._apply_metadata(now_ms, msg.image)


# message type -> handler(broker, now_ms, src, message)
HANDLERS: dict[type, Callable[[Broker, int, int, Any], None]] = {
    ProduceRequest: produce.on_produce,
    FetchRequest: leader.on_fetch,
    FetchResponse: follower.on_fetch_response,
    MetadataRequest: lambda b, now, src, m: b.send(src, MetadataResponse(m.correlation_id, b.metadata)),
    ListOffsetsRequest: lambda b, now, src, m: leader.on_list_offsets(b, src, m),
    DeleteRecordsRequest: lambda b, now, src, m: cleaner.on_delete_records(b, src, m),
    OffsetForLeaderEpochRequest: lambda b, now, src, m: leader.on_offset_for_leader_epoch(b, src, m),
    InitProducerIdRequest: Broker._on_init_producer_id,
    FindCoordinatorRequest: lambda b, now, src, m: b._on_find_coordinator(src, m),
    AddPartitionsToTxnRequest: lambda b, now, src, m: b.txn.add_partitions(now, src, m),
    AddOffsetsToTxnRequest: lambda b, now, src, m: b.txn.add_offsets(now, src, m, b.config.offsets_partitions),
    EndTxnRequest: lambda b, now, src, m: b.txn.end_txn(now, src, m),
    OffsetCommitRequest: lambda b, now, src, m: b.groups.offset_commit(now, src, m),
    JoinGroupRequest: lambda b, now, src, m: b.groups.join_group(now, src, m),
    SyncGroupRequest: lambda b, now, src, m: b.groups.sync_group(now, src, m),
    HeartbeatRequest: lambda b, now, src, m: b.groups.heartbeat(now, src, m),
    ConsumerGroupHeartbeatRequest: lambda b, now, src, m: b.groups.consumer.heartbeat(now, src, m),
    ShareGroupHeartbeatRequest: lambda b, now, src, m: b.groups.share.heartbeat(now, src, m),
    LeaveGroupRequest: lambda b, now, src, m: b.groups.leave_group(now, src, m),
    TxnOffsetCommitRequest: lambda b, now, src, m: b.groups.txn_offset_commit(now, src, m),
    OffsetFetchRequest: lambda b, now, src, m: b.groups.offset_fetch(src, m),
    WriteTxnMarkersRequest: produce.on_write_markers,
    WriteTxnMarkersResponse: lambda b, now, src, m: b.txn.on_markers_response(now, m),
    AddPartitionsToTxnResponse: lambda b, now, src, m: produce.on_verified(b, m),
    AllocateProducerIdsResponse: lambda b, now, src, m: b._on_producer_ids(m),
    MetadataUpdate: _on_metadata_update,
    BrokerRegistrationResponse: lambda b, now, src, m: b._on_registration(now, m),
    BrokerHeartbeatResponse: lambda b, now, src, m: b._on_heartbeat_response(now, m),
    AlterPartitionResponse: lambda b, now, src, m: leader.on_alter_partition_response(b, now, m),
    ShareFetchRequest: lambda b, now, src, m: b.share.on_fetch(now, src, m),
    ShareAcknowledgeRequest: lambda b, now, src, m: b.share.on_acknowledge(now, src, m),
    ReadShareGroupStateRequest: lambda b, now, src, m: b.share_state.read(now, src, m),
    WriteShareGroupStateRequest: lambda b, now, src, m: b.share_state.write(now, src, m),
    ReadShareGroupStateResponse: lambda b, now, src, m: b.share.on_state_response(m),
    WriteShareGroupStateResponse: lambda b, now, src, m: b.share.on_state_response(m),
}


def _every(delay: Callable[[Broker], float], work: Callable[[Broker, int], None], name: str):
    """A periodic timer: the work, then the next one."""
    def fire(b: Broker, now_ms: int) -> None:
        work(b, now_ms)
        b.set_timer(delay(b), name)
    return fire


def _allocate_timed_out(b: Broker, now_ms: int, corr: int) -> None:
    if corr == b.allocate_in_flight:
        b.allocate_in_flight = -1
        b.close_connection(b.controller_id)  # a new connection for the next request


# timer name -> handler(broker, now_ms, *the key's other fields)
TIMERS: dict[str, Callable[..., None]] = {
    "register": lambda b, now: b._register() if b.broker_epoch < 0 else None,
    "heartbeat": lambda b, now: b._heartbeat(now),
    "isr-check": _every(lambda b: b.config.replica_lag_time_max_ms / 2, leader.check_isr, "isr-check"),
    "checkpoint": lambda b, now: b._checkpoint(),
    "flush": lambda b, now: b._flush(),
    "roll-flush": lambda b, now, name: b.storage.flush(name),
    "cleaner": _every(lambda b: b.config.log_cleaner_backoff_ms, cleaner.run_cleaner, "cleaner"),
    "produce-expiry": lambda b, now, tp: b.purgatory.expire(tp, now),
    "fetch-expiry": leader.expire_fetches,
    "fetcher": follower.fetcher_timer,
    "allocate-timeout": _allocate_timed_out,
    "txn": lambda b, now, *rest: b.txn.timer(now, tuple(rest)),
    "group": lambda b, now, *rest: b.groups.timer(now, tuple(rest)),
    "share": lambda b, now, *rest: b.share.timer(now, tuple(rest)),
    "verify-timeout": lambda b, now, corr: produce.verify_timed_out(b, corr),
    "alter-timeout": lambda b, now, corr: leader.alter_timed_out(b, corr),
}

# timer name -> whether firing now would do nothing, or only set the same timer again after
# the delay it returns (Node.timer_is_moot)
MOOT_TIMERS: dict[str, Callable[..., bool | float]] = {
    "flush": lambda b, now: b._flush_is_moot(),
    "fetcher": lambda b, now, leader_id, corr: follower.fetcher_timer_is_moot(b, leader_id, corr),
    "fetch-expiry": lambda b, now: all(d.deadline_ms > now for d in b.delayed_fetch),
    "produce-expiry": lambda b, now, tp: not b.purgatory.due(tp, now),
    "verify-timeout": lambda b, now, corr: corr not in b.verifying,
    "alter-timeout": lambda b, now, corr: corr not in b.alter_in_flight,
}
