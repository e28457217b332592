"""A broker: partitions, produce and fetch handling, replica fetchers, purgatories.

Theory of operation
-------------------
On start the broker recovers every partition log found in its storage, then registers with
the controller, which gives it a fresh broker epoch; until registered it serves nothing.
It learns partition roles from the controller's metadata images (pushed, and repaired by
heartbeat responses) and applies them through :class:`~reference.partition.Partition`.

* Produce (leader): fenced by role and epoch, checked against ``min.insync.replicas``,
  appended, then answered at once (acks 0/1) or parked in the produce purgatory until the
  high watermark passes the batch (acks=all) or the request times out.
* Fetch (leader): replica fetches are validated for divergence (rule 1), update follower
  positions (rule 3) and may propose ISR expansion (rule 4); consumer fetches read below
  the high watermark only (rule 6). A fetch with nothing to return waits in the fetch
  purgatory up to ``max_wait_ms`` (long polling).
* Followers run one fetcher per leader broker: one Fetch in flight covering every partition
  followed from that broker.
* Timers: heartbeat, ISR-lag check, HW checkpoint, periodic flush, request expiry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reference import records as rec
from reference.bugs import Bug
from reference.errors import Errors
from reference.frozen import frozen
from reference.group_coordinator import GroupCoordinator
from reference.log import LogConfig, PartitionLog
from reference.marks import mark
from reference.messages import (
    COORDINATOR_TRANSACTION,
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    EndTxnRequest,
    FetchedPartition,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    InitProducerIdRequest,
    InitProducerIdResponse,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataImage,
    MetadataRequest,
    MetadataResponse,
    MetadataUpdate,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    ProduceRequest,
    ProduceResponse,
    SyncGroupRequest,
    TopicPartition,
    TxnOffsetCommitRequest,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from reference.node import Node
from reference.partition import Partition, Role
from reference.storage import Storage, StorageError
from reference.txn_coordinator import OFFSETS_TOPIC, TXN_TOPIC, TransactionCoordinator, partition_for

LIST_OFFSETS_MAX_TIMESTAMP = -3  # KIP-734


@frozen
class BrokerConfig:
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_backoff_ms: int = 1_000
    replica_fetch_timeout_ms: int = 30_000  # no answer to a replica fetch: send it again
    heartbeat_interval_ms: int = 2_000
    registration_retry_ms: int = 1_000
    alter_partition_timeout_ms: int = 5_000
    high_watermark_checkpoint_interval_ms: int = 5_000
    flush_ms: int | None = None  # Kafka's flush.ms; None = never (the default)
    flush_messages: int | None = None  # Kafka's flush.messages
    segment_bytes: int = 1 << 20
    transaction_state_partitions: int = 3  # transaction.state.log.num.partitions
    offsets_partitions: int = 3  # offsets.topic.num.partitions
    transaction_version: int = 1  # 2: KIP-890 epoch bump at every transaction end
    # the controller's session timeout: a broker that heard back from the controller less
    # than this long after sending a heartbeat cannot have been fenced and replaced since
    coordinator_lease_ms: int = 9_000
    log_cleaner_backoff_ms: int = 15_000  # how often the cleaner and retention run

    def log_config(self) -> LogConfig:
        return LogConfig(segment_bytes=self.segment_bytes, flush_messages=self.flush_messages)

    @classmethod
    def from_timings(cls, timings: dict[str, int], **settings) -> BrokerConfig:
        """A config whose timers come from a timings table (the simulated cluster's or the
        served one's): each of :data:`TIMER_FIELDS`, and the coordinator lease from its
        ``session_timeout_ms``; ``settings`` set the other fields."""
        return cls(**{f: timings[f] for f in TIMER_FIELDS}, coordinator_lease_ms=timings["session_timeout_ms"],
                   **settings)


TIMER_FIELDS = ("replica_lag_time_max_ms", "replica_fetch_wait_max_ms", "replica_fetch_backoff_ms",
                "replica_fetch_timeout_ms", "heartbeat_interval_ms", "registration_retry_ms",
                "alter_partition_timeout_ms", "high_watermark_checkpoint_interval_ms", "log_cleaner_backoff_ms")


@dataclass(slots=True)
class _DelayedProduce:
    src: int
    correlation_id: int
    tp: TopicPartition
    required_offset: int  # HW must be > last offset of the batch
    base_offset: int
    deadline_ms: int
    on_done: object = None  # for internal appends (markers): called with the error


@dataclass(slots=True)
class _MarkerResult:
    """Collects the per-partition outcomes of one WriteTxnMarkers request."""

    src: int
    correlation_id: int
    producer_id: int
    waiting: int
    errors: dict[TopicPartition, Errors]


@dataclass(slots=True)
class _DelayedFetch:
    src: int
    request: FetchRequest
    deadline_ms: int
    tps: frozenset[TopicPartition]  # the partitions it asks for


@dataclass(slots=True)
class _Fetcher:
    leader: int
    correlation_id: int = 0
    in_flight: bool = False
    # the request in flight: each partition's (leader epoch, fetch offset) it asked with; an
    # answer applies to a partition only while both are still what they were (as Kafka's
    # AbstractFetcherThread compares the fetch offset and the partition's fetch state)
    asked: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)


class Broker(Node):
    def __init__(self, broker_id: int, storage: Storage, config: BrokerConfig,
                 controller_id: int, incarnation: int = 0,
                 bugs: frozenset[str] = frozenset(), storage_intact: bool = False) -> None:
        super().__init__(broker_id)
        self.storage = storage
        self.config = config
        self.controller_id = controller_id
        self.incarnation = incarnation
        self.bugs = bugs
        self.storage_intact = storage_intact  # see BrokerRegistrationRequest
        self.broker_epoch = -1
        self.metadata = MetadataImage(-1, (), ())
        self.partitions: dict[TopicPartition, Partition] = {}
        self.fetchers: dict[int, _Fetcher] = {}
        self.delayed_produce: dict[TopicPartition, list[_DelayedProduce]] = {}
        self.delayed_fetch: list[_DelayedFetch] = []
        self.next_correlation_id = 0
        self.alter_in_flight: dict[int, TopicPartition] = {}
        self._leaders: dict[TopicPartition, int] | None = None
        self._topic_configs: dict[str, tuple[tuple[str, str], ...]] = {}
        self.producer_ids: tuple[int, int] = (0, 0)  # [next, end) of this broker's block
        self.allocate_in_flight = -1
        self.txn = TransactionCoordinator(self, config.transaction_state_partitions,
                                          config.transaction_version)
        self.groups = GroupCoordinator(self, config.offsets_partitions)
        # produces waiting for the transaction coordinator's verification (KIP-890 part 1)
        self.verifying: dict[int, object] = {}  # correlation id -> callback(error)
        self._now_ms = 0
        self.lease_until_ms = -1

    # ------------------------------------------------------------ lifecycle

    def start(self, now_ms: int) -> None:
        dirs = sorted({n.split("/", 1)[0] for n in self.storage.list("")})
        for d in dirs:
            topic, _, part = d.rpartition("-")
            if not topic or not part.isdigit():
                continue
            tp = TopicPartition(topic, int(part))
            log = PartitionLog.open(self.storage, d, self.config.log_config())
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

    def _register(self) -> None:
        self.send(self.controller_id, BrokerRegistrationRequest(self.node_id, self.incarnation,
                                                                    self.storage_intact))
        self.set_timer(self.config.registration_retry_ms, "register")

    def _corr(self) -> int:
        self.next_correlation_id += 1
        return self.next_correlation_id

    # ------------------------------------------------------------ dispatch

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self._now_ms = now_ms
        match message:
            case ProduceRequest():
                self._on_produce(now_ms, src, message)
            case FetchRequest():
                self._on_fetch(now_ms, src, message)
            case FetchResponse():
                self._on_fetch_response(now_ms, src, message)
            case MetadataRequest():
                self.send(src, MetadataResponse(message.correlation_id, self.metadata))
            case ListOffsetsRequest():
                self._on_list_offsets(src, message)
            case DeleteRecordsRequest():
                self._on_delete_records(src, message)
            case OffsetForLeaderEpochRequest():
                self._on_offset_for_leader_epoch(src, message)
            case InitProducerIdRequest():
                if message.transactional_id is not None:
                    self.txn.init_producer_id(now_ms, src, message)
                else:
                    self._on_init_producer_id(src, message)
            case FindCoordinatorRequest():
                self._on_find_coordinator(src, message)
            case AddPartitionsToTxnRequest():
                self.txn.add_partitions(now_ms, src, message)
            case AddOffsetsToTxnRequest():
                self.txn.add_offsets(now_ms, src, message, self.config.offsets_partitions)
            case EndTxnRequest():
                self.txn.end_txn(now_ms, src, message)
            case OffsetCommitRequest():
                self.groups.offset_commit(now_ms, src, message)
            case JoinGroupRequest():
                self.groups.join_group(now_ms, src, message)
            case SyncGroupRequest():
                self.groups.sync_group(now_ms, src, message)
            case HeartbeatRequest():
                self.groups.heartbeat(now_ms, src, message)
            case LeaveGroupRequest():
                self.groups.leave_group(now_ms, src, message)
            case TxnOffsetCommitRequest():
                self._now_ms = now_ms
                self.groups.txn_offset_commit(now_ms, src, message)
            case OffsetFetchRequest():
                self.groups.offset_fetch(src, message)
            case WriteTxnMarkersRequest():
                self._on_write_markers(now_ms, src, message)
            case WriteTxnMarkersResponse():
                self.txn.on_markers_response(now_ms, message)
            case AddPartitionsToTxnResponse():
                self._on_verified(now_ms, message)
            case AllocateProducerIdsResponse():
                if message.correlation_id == self.allocate_in_flight:
                    self.allocate_in_flight = -1
                    if message.error is Errors.NONE:
                        self.producer_ids = (message.producer_id_start,
                                             message.producer_id_start + message.producer_id_len)
            case MetadataUpdate():
                if self.broker_epoch >= 0:
                    self._apply_metadata(now_ms, message.image)
            case BrokerRegistrationResponse():
                self._on_registration(now_ms, message)
            case BrokerHeartbeatResponse():
                self._on_heartbeat_response(now_ms, message)
            case AlterPartitionResponse():
                self._on_alter_partition_response(now_ms, message)
            case _:
                pass  # unknown messages are dropped, never fatal

    def timer_is_moot(self, now_ms: int, key: object) -> bool:
        # the timeouts of requests answered in time: most timers a broker sets (see timer)
        match key:
            case ("fetcher", leader, corr):
                f = self.fetchers.get(leader)
                return f is None or f.correlation_id != corr
            case "fetch-expiry":
                return all(d.deadline_ms > now_ms for d in self.delayed_fetch)
            case ("produce-expiry", tp):
                return all(d.deadline_ms > now_ms for d in self.delayed_produce.get(tp, ()))
            case ("verify-timeout", corr):
                return corr not in self.verifying
            case ("alter-timeout", corr):
                return corr not in self.alter_in_flight
        return False

    def timer(self, now_ms: int, key: object) -> None:
        self._now_ms = now_ms
        match key:
            case "register":
                if self.broker_epoch < 0:
                    self._register()
            case "heartbeat":
                self.send(self.controller_id, BrokerHeartbeatRequest(
                    self.node_id, self.broker_epoch, self.metadata.version, now_ms))
                self.set_timer(self.config.heartbeat_interval_ms, "heartbeat")
            case "isr-check":
                self._check_isr(now_ms)
                self.set_timer(self.config.replica_lag_time_max_ms / 2, "isr-check")
            case "checkpoint":
                for p in self.partitions.values():
                    p.log.checkpoint()
                self.set_timer(self.config.high_watermark_checkpoint_interval_ms, "checkpoint")
            case "flush":
                for p in self.partitions.values():
                    p.log.flush()
                    self.event("fsync", key=p.tp.key, log_end_offset=p.log.log_end_offset)
                self.set_timer(self.config.flush_ms, "flush")
            case "cleaner":
                self._run_cleaner(now_ms)
                self.set_timer(self.config.log_cleaner_backoff_ms, "cleaner")
            case ("produce-expiry", tp):
                self._expire_produce(now_ms, tp)
            case "fetch-expiry":
                self._expire_fetches(now_ms)
            case ("fetcher", leader, corr):
                self._fetcher_timer(now_ms, leader, corr)
            case ("allocate-timeout", corr):
                if corr == self.allocate_in_flight:
                    self.allocate_in_flight = -1
            case ("txn", *rest):
                self.txn.timer(now_ms, tuple(rest))
            case ("group", *rest):
                self.groups.timer(now_ms, tuple(rest))
            case ("verify-timeout", corr):
                then = self.verifying.pop(corr, None)
                if then is not None:
                    self._now_ms = now_ms
                    then(Errors.COORDINATOR_NOT_AVAILABLE)
            case ("alter-timeout", corr):
                # no answer: the change may or may not have been applied, so it stays pending
                # (the HW keeps counting the larger ISR) and is asked again, as Kafka's
                # AlterPartitionManager retries; dropping it let a leader that missed the
                # controller's "yes" count a smaller ISR than the controller's
                tp = self.alter_in_flight.pop(corr, None)
                p = self.partitions.get(tp) if tp is not None else None
                if p is not None and p.is_leader and p.pending_isr is not None:
                    self._propose_isr(now_ms, p, p.pending_isr)
            case _:
                pass

    # ------------------------------------------------------------ controller

    def _on_registration(self, now_ms: int, msg: BrokerRegistrationResponse) -> None:
        if msg.incarnation != self.incarnation or self.broker_epoch >= 0:
            return
        if msg.error is not Errors.NONE:
            return  # the registration timer tries again
        self.broker_epoch = msg.broker_epoch
        self.event("registered", broker_epoch=self.broker_epoch)
        self.timer(now_ms, "heartbeat")

    def _on_heartbeat_response(self, now_ms: int, msg: BrokerHeartbeatResponse) -> None:
        if msg.broker_epoch != self.broker_epoch:
            return
        if msg.error is Errors.STALE_BROKER_EPOCH:
            # the controller no longer knows this registration: register again
            self.broker_epoch = -1
            self._register()
            return
        if msg.request_sent_ms >= 0:
            self.lease_until_ms = max(self.lease_until_ms,
                                      msg.request_sent_ms + self.config.coordinator_lease_ms)
        if msg.metadata is not None:
            self._apply_metadata(now_ms, msg.metadata)

    def min_insync_replicas(self, topic: str) -> int:
        """The topic's min.insync.replicas if it sets one, else the broker's."""
        value = dict(self._topic_configs.get(topic, ())).get("min.insync.replicas")
        return int(value) if value is not None and value.isdigit() else self.config.min_insync_replicas

    def _log_config(self, topic: str) -> LogConfig:
        configs = dict(self._topic_configs.get(topic, ()))
        base = self.config.log_config()
        return LogConfig.from_topic(base, configs) if configs else base

    def _apply_metadata(self, now_ms: int, image: MetadataImage) -> None:
        if image.version <= self.metadata.version:
            return
        self.metadata = image
        self._topic_configs = dict(image.topic_configs)
        deleted = set(image.deleted_topics)
        for tp in [tp for tp in self.partitions if tp.topic in deleted]:
            self._delete_partition(tp)
        for tp, p in self.partitions.items():
            p.log.config = self._log_config(tp.topic)
            p.min_insync_replicas = self.min_insync_replicas(tp.topic)
            p.log.bugs = self.bugs
        for state in image.partitions:
            if self.node_id not in state.replicas:
                continue
            p = self.partitions.get(state.tp)
            if p is None:
                d = f"{state.tp.topic}-{state.tp.partition}"
                log = PartitionLog.open(self.storage, d, self._log_config(state.tp.topic))
                log.bugs = self.bugs
                p = self.partitions[state.tp] = Partition(
                    state.tp, log, self.node_id, self.bugs,
                    min_insync_replicas=self.min_insync_replicas(state.tp.topic))
            before_leo = p.log.log_end_offset
            change = p.apply_state(state, now_ms)
            if change == "leader":
                self.event("leader-elected", key=state.tp.key, leader_epoch=p.leader_epoch,
                           log_end_offset=p.log.log_end_offset,
                           high_watermark=p.log.high_watermark, isr=sorted(p.isr))
                self._after_leader_change(now_ms, p)
                if state.tp.topic == TXN_TOPIC:
                    self.txn.on_leader(now_ms, state.tp.partition, p.leader_epoch)
                elif state.tp.topic == OFFSETS_TOPIC:
                    self.groups.on_leader(state.tp.partition, p.leader_epoch)
                self._maybe_advance_hw(now_ms, p)
            elif change == "follower":
                if p.log.log_end_offset < before_leo:
                    self.event("truncate", key=state.tp.key, from_offset=before_leo,
                               to=p.log.log_end_offset, reason="high-watermark")
                self._after_leader_change(now_ms, p)
                if state.tp.topic == TXN_TOPIC:
                    self.txn.on_not_leader(state.tp.partition)
                elif state.tp.topic == OFFSETS_TOPIC:
                    self.groups.on_not_leader(state.tp.partition)
            elif p.is_leader:
                self._maybe_advance_hw(now_ms, p)
        self._leaders = None
        self._sync_fetchers(now_ms)
        self.txn.leaders_changed(now_ms)

    def _delete_partition(self, tp: TopicPartition) -> None:
        """The topic was deleted: drop the replica and its files."""
        p = self.partitions.pop(tp)
        for d in self.delayed_produce.pop(tp, []):
            self._answer_produce(d, Errors.UNKNOWN_TOPIC_OR_PARTITION)
        for name in self.storage.list(p.log.directory + "/"):
            self.storage.delete(name)
        self.event("partition-deleted", key=tp.key)

    def _after_leader_change(self, now_ms: int, p: Partition) -> None:
        """Answer what the old role left pending: parked produces can no longer complete."""
        if not p.is_leader:
            for d in self.delayed_produce.pop(p.tp, []):
                self._answer_produce(d, Errors.NOT_LEADER_OR_FOLLOWER)

    def _answer_produce(self, d: _DelayedProduce, error: Errors, log_start_offset: int = -1) -> None:
        if d.on_done is not None:
            d.on_done(error)
        else:
            self.send(d.src, ProduceResponse(d.correlation_id, d.tp, error,
                                             d.base_offset if error is Errors.NONE else -1,
                                             log_start_offset))

    def _propose_isr(self, now_ms: int, p: Partition, new_isr: frozenset[int]) -> None:
        members = []
        for r in sorted(new_isr):
            if r == self.node_id:
                members.append((r, self.broker_epoch))
            else:
                f = p.followers.get(r)
                members.append((r, f.broker_epoch if f is not None else -1))
        corr = self._corr()
        p.pending_isr = new_isr
        self.alter_in_flight[corr] = p.tp
        self.send(self.controller_id, AlterPartitionRequest(
            corr, self.node_id, self.broker_epoch, p.tp, p.leader_epoch, p.partition_epoch,
            tuple(members)))
        self.set_timer(self.config.alter_partition_timeout_ms, ("alter-timeout", corr))

    def _on_alter_partition_response(self, now_ms: int, msg: AlterPartitionResponse) -> None:
        tp = self.alter_in_flight.pop(msg.correlation_id, None)
        p = self.partitions.get(msg.tp)
        if tp is None or p is None:
            return
        if msg.error is Errors.NONE and msg.state is not None:
            old = p.isr
            p.pending_isr = None
            p.apply_state(msg.state, now_ms)
            kind = "isr-expand" if len(p.isr) > len(old) else "isr-shrink"
            self.event(kind, key=tp.key, isr=sorted(p.isr), partition_epoch=p.partition_epoch)
            if p.is_leader:
                self._maybe_advance_hw(now_ms, p)
        elif msg.error in (Errors.INELIGIBLE_REPLICA, Errors.OPERATION_NOT_ATTEMPTED):
            # the controller says its partition epoch is ours and the change was not applied:
            # the committed ISR holds (Kafka's Partition.handleAlterPartitionError)
            p.pending_isr = None
        # any other refusal: the change stays pending until the next metadata image settles it

    def _check_isr(self, now_ms: int) -> None:
        if self.broker_epoch < 0:
            return
        for p in self.partitions.values():
            if p.is_leader:
                shrunk = p.isr_to_shrink(now_ms, self.config.replica_lag_time_max_ms)
                if shrunk is not None:
                    mark("isr-shrink")
                    if len(shrunk) < p.effective_min_isr:
                        mark("isr-shrink-below-min-isr")
                    self._propose_isr(now_ms, p, shrunk)

    # ------------------------------------------------------------ produce

    def _on_produce(self, now_ms: int, src: int, req: ProduceRequest, verified: int = 0) -> None:
        """``verified``: the verification guard of a transactional write the coordinator has
        confirmed (0: not verified)."""
        p = self.partitions.get(req.tp)
        error = self._produce_error(p, req)
        if error is not Errors.NONE:
            if req.acks != 0:
                self.send(src, ProduceResponse(req.correlation_id, req.tp, error))
            return
        assert p is not None
        duplicate = None
        header = rec.parse_header(req.records)
        if (header.is_transactional and not verified
                and not p.log.producer_state.txn_open(header.producer_id)
                and Bug.TXN_UNFENCED_REQUESTS not in self.bugs):
            # the first write of a transaction here: ask the coordinator whether this
            # partition is part of the producer's ongoing transaction (KIP-890 part 1), before
            # the log's own checks, as Kafka's ReplicaManager does
            self._verify(now_ms, src, req, header)
            return
        if (verified and header.is_transactional and not p.log.producer_state.txn_open(header.producer_id)
                and not p.log.producer_state.guard_holds(header.producer_id, verified)):
            # a marker ended the transaction between the verification and this append (Kafka's
            # VerificationGuard): appending would open a transaction that nobody ends
            mark("produce-txn-raced-marker")
            if req.acks != 0:
                self.send(src, ProduceResponse(req.correlation_id, req.tp, Errors.INVALID_TXN_STATE, -1,
                                               p.log.log_start_offset))
            return
        if Bug.NO_SEQUENCE_CHECK not in self.bugs:
            seq_error, duplicate = p.log.producer_state.check(header)
            if seq_error not in (Errors.NONE, Errors.DUPLICATE_SEQUENCE_NUMBER):
                mark("produce-sequence-refused")
                if req.acks != 0:  # refused by the log: Kafka tells its start offset too
                    self.send(src, ProduceResponse(req.correlation_id, req.tp, seq_error, -1,
                                                   p.log.log_start_offset))
                return
        if duplicate is not None:
            # a retry of a batch already written: answer with the original offsets (acks=all
            # still waits until they are committed)
            base, last = duplicate.first_offset, duplicate.last_offset
            mark("produce-duplicate-sequence")
            self.event("duplicate-sequence", key=req.tp.key, base_offset=base, last_offset=last)
        else:
            try:
                base, last = p.log.append_as_leader(req.records, p.leader_epoch)
            except StorageError:
                mark("produce-storage-error")
                if req.acks != 0:
                    self.send(src, ProduceResponse(req.correlation_id, req.tp,
                                                   Errors.KAFKA_STORAGE_ERROR))
                return
            self.event("log-append", key=req.tp.key, base_offset=base, last_offset=last,
                       leader_epoch=p.leader_epoch)
        if req.acks == -1 and Bug.ACK_BEFORE_ISR not in self.bugs:
            self.delayed_produce.setdefault(req.tp, []).append(_DelayedProduce(
                src, req.correlation_id, req.tp, last + 1, base, now_ms + req.timeout_ms))
            self.set_timer(req.timeout_ms, ("produce-expiry", req.tp))
        elif req.acks != 0:
            self.send(src, ProduceResponse(req.correlation_id, req.tp, Errors.NONE, base,
                                           p.log.log_start_offset))
        self._maybe_advance_hw(now_ms, p)
        self._complete_produces(p)  # a duplicate's original may be committed already
        self._wake_fetches(now_ms, req.tp)

    def _produce_error(self, p: Partition | None, req: ProduceRequest) -> Errors:
        if self.broker_epoch < 0:
            return Errors.NOT_LEADER_OR_FOLLOWER
        if p is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        if not p.is_leader:
            return Errors.NOT_LEADER_OR_FOLLOWER
        if req.acks not in (-1, 0, 1):
            return Errors.INVALID_REQUIRED_ACKS
        if req.tp.topic in (TXN_TOPIC, OFFSETS_TOPIC):
            return Errors.INVALID_TOPIC_EXCEPTION  # internal topics are written by coordinators
        if req.acks == -1 and len(p.isr) < p.effective_min_isr:
            mark("produce-not-enough-replicas")
            return Errors.NOT_ENOUGH_REPLICAS
        try:
            rec.validate(req.records)
            if p.log.config.compact and any(r.key is None for r in rec.decode_records(req.records)):
                return Errors.INVALID_RECORD  # a compacted topic needs a key on every record
        except rec.CorruptRecordError:
            return Errors.CORRUPT_MESSAGE
        return Errors.NONE

    def _verify(self, now_ms: int, src: int, req: ProduceRequest, header: rec.BatchHeader) -> None:
        guard = self.partitions[req.tp].log.producer_state.start_verification(header.producer_id)

        def verified(error: Errors) -> None:
            if error is Errors.NONE:
                self._on_produce(self._now_ms, src, req, verified=guard)
            elif req.acks != 0:
                if error is Errors.PRODUCER_FENCED:
                    error = Errors.INVALID_PRODUCER_EPOCH  # what producers expect here (Kafka's
                    # AddPartitionsToTxnManager)
                self.send(src, ProduceResponse(req.correlation_id, req.tp, error))

        if req.transactional_id is None:
            verified(Errors.INVALID_TXN_STATE)
            return
        self.verify_txn(req.transactional_id, header.producer_id, header.producer_epoch, req.tp,
                        verified)

    def verify_txn(self, txn_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition,
                   then) -> None:
        """Ask the transaction coordinator whether ``tp`` is in the ongoing transaction of
        (producer id, epoch) (KIP-890 part 1); ``then(error)`` gets the answer."""
        coordinator = self.leaders().get(TopicPartition(
            TXN_TOPIC, partition_for(txn_id, self.config.transaction_state_partitions)), -1)
        if coordinator < 0:
            then(Errors.COORDINATOR_NOT_AVAILABLE)
            return
        corr = self._corr()
        self.verifying[corr] = then
        self.send(coordinator, AddPartitionsToTxnRequest(corr, txn_id, producer_id, producer_epoch,
                                                         (tp,), verify_only=True))
        self.set_timer(self.config.alter_partition_timeout_ms, ("verify-timeout", corr))

    def _on_verified(self, now_ms: int, resp: AddPartitionsToTxnResponse) -> None:
        then = self.verifying.pop(resp.correlation_id, None)
        if then is None:
            return
        self._now_ms = now_ms
        error = resp.error
        then(Errors.COORDINATOR_NOT_AVAILABLE if error is Errors.NOT_COORDINATOR else error)

    # ------------------------------------------------------------ coordinator support

    def next_corr(self) -> int:
        return self._corr()

    def leaders(self) -> dict[TopicPartition, int]:
        """Partition -> leader broker in this broker's metadata image (-1: none)."""
        if self._leaders is None:
            self._leaders = {s.tp: s.leader for s in self.metadata.partitions}
        return self._leaders

    def take_producer_id(self) -> int:
        """A producer id from this broker's block, or -1 while a new block is on its way."""
        nxt, end = self.producer_ids
        if nxt < end:
            self.producer_ids = (nxt + 1, end)
            return nxt
        if self.allocate_in_flight < 0 and self.broker_epoch >= 0:
            self.allocate_in_flight = self._corr()
            self.send(self.controller_id, AllocateProducerIdsRequest(
                self.allocate_in_flight, self.node_id, self.broker_epoch))
            self.set_timer(self.config.alter_partition_timeout_ms,
                           ("allocate-timeout", self.allocate_in_flight))
        return -1

    def lease_valid(self) -> bool:
        """True while this broker cannot have been fenced (and its partitions led by
        others): a coordinator answers from memory only then, so a broker waking from a
        pause with stale state does not serve stale reads."""
        return self._now_ms < self.lease_until_ms

    def isr_satisfied(self, tp: TopicPartition) -> bool:
        p = self.partitions.get(tp)
        return p is not None and len(p.isr) >= p.effective_min_isr

    def append_internal(self, now_ms: int, tp: TopicPartition, batch: bytes) -> tuple[Errors, int]:
        """A coordinator's write to a partition this broker leads: (error, last offset)."""
        p = self.partitions.get(tp)
        if self.broker_epoch < 0 or p is None or not p.is_leader:
            return Errors.NOT_COORDINATOR, -1
        if len(p.isr) < p.effective_min_isr:
            return Errors.NOT_ENOUGH_REPLICAS, -1
        try:
            base, last = p.log.append_as_leader(batch, p.leader_epoch)
        except StorageError:
            return Errors.KAFKA_STORAGE_ERROR, -1
        self.event("log-append", key=tp.key, base_offset=base, last_offset=last,
                   leader_epoch=p.leader_epoch)
        self._maybe_advance_hw(now_ms, p)
        self._wake_fetches(now_ms, tp)
        return Errors.NONE, last

    def _on_find_coordinator(self, src: int, req: FindCoordinatorRequest) -> None:
        if req.key_type == COORDINATOR_TRANSACTION:
            tp = TopicPartition(TXN_TOPIC, partition_for(req.key, self.config.transaction_state_partitions))
        else:
            tp = TopicPartition(OFFSETS_TOPIC, partition_for(req.key, self.config.offsets_partitions))
        leader = self.leaders().get(tp, -1)
        if self.broker_epoch < 0 or leader < 0:
            self.send(src, FindCoordinatorResponse(req.correlation_id, Errors.COORDINATOR_NOT_AVAILABLE))
        else:
            self.send(src, FindCoordinatorResponse(req.correlation_id, Errors.NONE, leader))

    def _on_write_markers(self, now_ms: int, src: int, req: WriteTxnMarkersRequest) -> None:
        """Append a commit or abort marker to each partition; answer when all are committed."""
        result = _MarkerResult(src, req.correlation_id, req.producer_id, len(req.partitions), {})

        def settle(tp: TopicPartition, error: Errors) -> None:
            if error is Errors.NONE and tp.topic == OFFSETS_TOPIC:
                self.groups.on_marker(tp.partition, req.producer_id, req.commit)
            result.errors[tp] = error
            result.waiting -= 1
            if result.waiting == 0:
                self.send(result.src, WriteTxnMarkersResponse(
                    result.correlation_id, result.producer_id, tuple(sorted(result.errors.items()))))

        for tp in req.partitions:
            p = self.partitions.get(tp)
            if self.broker_epoch < 0 or p is None or not p.is_leader:
                settle(tp, Errors.NOT_LEADER_OR_FOLLOWER)
                continue
            error = p.log.producer_state.check_marker(req.producer_id, req.producer_epoch, req.coordinator_epoch)
            if error is Errors.NONE and len(p.isr) < p.effective_min_isr:
                error = Errors.NOT_ENOUGH_REPLICAS
            if error is not Errors.NONE:
                settle(tp, error)
                continue
            marker = rec.encode_control_batch(req.producer_id, req.producer_epoch, req.commit,
                                              req.coordinator_epoch, now_ms)
            try:
                base, _last = p.log.append_as_leader(marker, p.leader_epoch)
            except StorageError:
                settle(tp, Errors.KAFKA_STORAGE_ERROR)
                continue
            self.event("txn-marker", key=tp.key, offset=base, producer_id=req.producer_id,
                       producer_epoch=req.producer_epoch, commit=req.commit,
                       coordinator_epoch=req.coordinator_epoch)
            timeout = self.config.alter_partition_timeout_ms * 5
            self.delayed_produce.setdefault(tp, []).append(_DelayedProduce(
                src, req.correlation_id, tp, base + 1, base, now_ms + timeout,
                on_done=lambda e, tp=tp: settle(tp, e)))
            self.set_timer(timeout, ("produce-expiry", tp))
            self._maybe_advance_hw(now_ms, p)
            self._complete_produces(p)
            self._wake_fetches(now_ms, tp)

    def _complete_produces(self, p: Partition) -> None:
        pending = self.delayed_produce.get(p.tp)
        if not pending:
            return
        hw = p.log.high_watermark
        keep = []
        for d in pending:
            if hw >= d.required_offset:
                error = (Errors.NONE if len(p.isr) >= p.effective_min_isr
                         else Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
                if error is not Errors.NONE:
                    mark("produce-not-enough-replicas-after-append")
                self._answer_produce(d, error, p.log.log_start_offset)
            else:
                keep.append(d)
        self.delayed_produce[p.tp] = keep

    def _expire_produce(self, now_ms: int, tp: TopicPartition) -> None:
        pending = self.delayed_produce.get(tp, [])
        keep = []
        for d in pending:
            if d.deadline_ms <= now_ms:
                mark("produce-timed-out-in-purgatory")
                self._answer_produce(d, Errors.REQUEST_TIMED_OUT)
            else:
                keep.append(d)
        self.delayed_produce[tp] = keep

    def _maybe_advance_hw(self, now_ms: int, p: Partition) -> None:
        old = p.log.high_watermark
        if p.maybe_advance_high_watermark():
            self.event("hw-advance", key=p.tp.key, **{"from": old}, to=p.log.high_watermark,
                       leader_epoch=p.leader_epoch)
            self._complete_produces(p)
            self._wake_fetches(now_ms, p.tp)
            if p.tp.topic == TXN_TOPIC:
                self.txn.on_high_watermark(now_ms, p.tp.partition)
            elif p.tp.topic == OFFSETS_TOPIC:
                self.groups.on_high_watermark(now_ms, p.tp.partition)

    # ------------------------------------------------------------ fetch (leader side)

    def _on_fetch(self, now_ms: int, src: int, req: FetchRequest) -> None:
        results, has_data = self._read_fetch(now_ms, req)
        if has_data or req.max_wait_ms <= 0:
            self.send(src, FetchResponse(req.correlation_id, tuple(results)))
            return
        self.delayed_fetch.append(_DelayedFetch(src, req, now_ms + req.max_wait_ms,
                                                frozenset(fp.tp for fp in req.partitions)))
        self.set_timer(req.max_wait_ms, "fetch-expiry")

    def _read_fetch(self, now_ms: int, req: FetchRequest) -> tuple[list[FetchedPartition], bool]:
        results = []
        has_data = False
        for fp in req.partitions:
            r = self._read_partition(now_ms, req, fp)
            if r.records or r.error is not Errors.NONE or r.diverging_epoch is not None:
                has_data = True
            results.append(r)
        return results, has_data

    def _read_partition(self, now_ms: int, req: FetchRequest, fp: FetchPartition) -> FetchedPartition:
        p = self.partitions.get(fp.tp)
        if self.broker_epoch < 0 or p is None or not p.is_leader:
            return FetchedPartition(fp.tp, self._not_led_here(fp.tp))
        log = p.log
        follower = req.replica_id >= 0
        no_epoch_check = follower and Bug.HW_WITHOUT_EPOCH_CHECK in self.bugs
        if no_epoch_check:
            # the bug: the position counts toward the HW before (and whatever) the checks say
            p.update_follower(req.replica_id, req.replica_epoch, fp.fetch_offset, now_ms)
            self._maybe_advance_hw(now_ms, p)
        if fp.current_leader_epoch >= 0 and fp.current_leader_epoch != p.leader_epoch:
            return FetchedPartition(fp.tp, Errors[p.check_epoch(fp.current_leader_epoch)])
        if follower and not p.matches_latest_epoch(fp.fetch_offset, fp.last_fetched_epoch):
            diverging = p.divergence(fp.fetch_offset, fp.last_fetched_epoch)
            if diverging is not None:
                return FetchedPartition(fp.tp, Errors.NONE, log.high_watermark,
                                        log.log_start_offset, (), diverging, log.log_end_offset)
        if fp.fetch_offset > log.log_end_offset or fp.fetch_offset < log.log_start_offset:
            mark("fetch-out-of-range")
            return FetchedPartition(fp.tp, Errors.OFFSET_OUT_OF_RANGE, log.high_watermark,
                                    log.log_start_offset, log_end_offset=log.log_end_offset)
        if follower:
            if not no_epoch_check:
                p.update_follower(req.replica_id, req.replica_epoch, fp.fetch_offset, now_ms)
                self._maybe_advance_hw(now_ms, p)
            expanded = p.isr_to_expand(req.replica_id)
            if expanded is not None:
                mark("isr-expand")
                self._propose_isr(now_ms, p, expanded)
            batches = log.read(fp.fetch_offset, fp.max_bytes, log.log_end_offset)
            return FetchedPartition(fp.tp, Errors.NONE, log.high_watermark, log.log_start_offset,
                                    tuple(batches), None, log.log_end_offset)
        lso = p.last_stable_offset()
        if req.isolation_level == 1:
            batches = log.read(fp.fetch_offset, fp.max_bytes, lso)
            end = rec.last_offset_of(batches[-1]) + 1 if batches else fp.fetch_offset
            aborted = tuple(log.producer_state.aborted_between(fp.fetch_offset, end))
        else:
            batches = log.read(fp.fetch_offset, fp.max_bytes, log.high_watermark)
            aborted = ()
        return FetchedPartition(fp.tp, Errors.NONE, log.high_watermark, log.log_start_offset,
                                tuple(batches), None, -1, lso, aborted)

    def _wake_fetches(self, now_ms: int, tp: TopicPartition) -> None:
        if not self.delayed_fetch:
            return
        waiting = []
        for d in self.delayed_fetch:
            if tp in d.tps:
                results, has_data = self._read_fetch(now_ms, d.request)
                if has_data:
                    self.send(d.src, FetchResponse(d.request.correlation_id, tuple(results)))
                    continue
            waiting.append(d)
        self.delayed_fetch = waiting

    def _expire_fetches(self, now_ms: int) -> None:
        waiting = []
        for d in self.delayed_fetch:
            if d.deadline_ms <= now_ms:
                results, _ = self._read_fetch(now_ms, d.request)
                self.send(d.src, FetchResponse(d.request.correlation_id, tuple(results)))
            else:
                waiting.append(d)
        self.delayed_fetch = waiting

    def _on_init_producer_id(self, src: int, req: InitProducerIdRequest) -> None:
        """A producer id for an idempotent producer (transactional ids go to the coordinator)."""
        pid = self.take_producer_id()
        if pid >= 0:
            self.send(src, InitProducerIdResponse(req.correlation_id, Errors.NONE, pid, 0))
        else:
            self.send(src, InitProducerIdResponse(req.correlation_id, Errors.COORDINATOR_LOAD_IN_PROGRESS))

    def _leader_for(self, tp: TopicPartition, current_leader_epoch: int) -> tuple[Partition | None, Errors]:
        """The partition if this broker leads it in the request's epoch, else the error: a
        partition its metadata does not know is UNKNOWN_TOPIC_OR_PARTITION, one led elsewhere
        NOT_LEADER_OR_FOLLOWER (Kafka's ReplicaManager.getPartitionOrError)."""
        p = self.partitions.get(tp)
        if self.broker_epoch < 0 or p is None or not p.is_leader:
            return None, self._not_led_here(tp)
        fenced = p.check_epoch(current_leader_epoch)
        if fenced is not None:
            return None, Errors[fenced]
        return p, Errors.NONE

    def _not_led_here(self, tp: TopicPartition) -> Errors:
        if self.broker_epoch >= 0 and tp not in self.partitions and tp not in self.leaders():
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        return Errors.NOT_LEADER_OR_FOLLOWER

    def _on_list_offsets(self, src: int, req: ListOffsetsRequest) -> None:
        p, error = self._leader_for(req.tp, req.current_leader_epoch)
        if p is None:
            self.send(src, ListOffsetsResponse(req.correlation_id, req.tp, error))
            return
        if req.timestamp >= 0 or req.timestamp == LIST_OFFSETS_MAX_TIMESTAMP:
            # a lookup answers only what a consumer of that isolation level may read, and
            # (offset -1, timestamp -1, epoch -1) when nothing qualifies, as Kafka's
            # Partition.fetchOffsetForTimestamp
            upper = p.last_stable_offset() if req.isolation_level == 1 else p.log.high_watermark
            found = (p.log.offset_of_max_timestamp(upper) if req.timestamp == LIST_OFFSETS_MAX_TIMESTAMP
                     else p.log.offset_for_timestamp(req.timestamp, upper))
            offset, ts, epoch = found if found is not None else (-1, -1, -1)
            self.send(src, ListOffsetsResponse(req.correlation_id, req.tp, Errors.NONE, offset, epoch, ts))
            return
        if req.timestamp == -2:
            offset = p.log.log_start_offset
        elif not p.hw_reached_epoch_start():
            # rule 3: a new leader's HW may lag the true HW; do not answer with it (KIP-207)
            self.send(src, ListOffsetsResponse(req.correlation_id, req.tp,
                                               Errors.OFFSET_NOT_AVAILABLE))
            return
        elif req.isolation_level == 1:
            offset = p.last_stable_offset()
        else:
            offset = p.log.high_watermark
        self.send(src, ListOffsetsResponse(req.correlation_id, req.tp, Errors.NONE, offset,
                                           p.leader_epoch))

    def _on_delete_records(self, src: int, req: DeleteRecordsRequest) -> None:
        """DeleteRecords: move the log start offset (followers follow it by fetching)."""
        p, error = self._leader_for(req.tp, -1)
        if p is None:
            self.send(src, DeleteRecordsResponse(req.correlation_id, req.tp, error))
            return
        offset = p.log.high_watermark if req.offset == -1 else req.offset
        if offset < 0 or offset > p.log.high_watermark:
            self.send(src, DeleteRecordsResponse(req.correlation_id, req.tp, Errors.OFFSET_OUT_OF_RANGE))
            return
        try:
            if p.log.increment_log_start_offset(offset):
                self.event("log-start-offset", key=req.tp.key, offset=p.log.log_start_offset,
                           reason="delete-records")
        except StorageError:
            self.send(src, DeleteRecordsResponse(req.correlation_id, req.tp, Errors.KAFKA_STORAGE_ERROR))
            return
        self.send(src, DeleteRecordsResponse(req.correlation_id, req.tp, Errors.NONE,
                                             p.log.log_start_offset))

    def _run_cleaner(self, now_ms: int) -> None:
        """Compaction and retention on every replica (each replica cleans its own log)."""
        for tp in sorted(self.partitions):
            p = self.partitions[tp]
            log = p.log
            try:
                if log.config.compact:
                    first = log.producer_state.first_unstable_offset(log.high_watermark)
                    upper = log.high_watermark if first is None else min(first, log.high_watermark)
                    result = log.clean(now_ms, upper)
                    if result is not None:
                        self.event("compaction", key=tp.key, first_offset=result.first_offset,
                                   end_offset=result.end_offset, removed=result.records_removed,
                                   tombstones_removed=result.tombstones_removed,
                                   aborted_removed=result.aborted_removed)
                if log.config.delete:
                    before = log.log_start_offset
                    if log.apply_retention(now_ms) > before:
                        self.event("log-start-offset", key=tp.key, offset=log.log_start_offset,
                                   reason="retention")
            except StorageError:
                continue  # a full or failing disk: try again at the next round

    def _on_offset_for_leader_epoch(self, src: int, req: OffsetForLeaderEpochRequest) -> None:
        p, error = self._leader_for(req.tp, req.current_leader_epoch)
        if p is None:
            self.send(src, OffsetForLeaderEpochResponse(req.correlation_id, req.tp, error))
            return
        epoch, end = self._epoch_end_offset(p, req.leader_epoch)
        self.send(src, OffsetForLeaderEpochResponse(req.correlation_id, req.tp, Errors.NONE,
                                                    epoch, end))

    @staticmethod
    def _epoch_end_offset(p: Partition, leader_epoch: int) -> tuple[int, int]:
        """The OffsetForLeaderEpoch answer as Kafka's LeaderEpochFileCache.endOffsetFor gives
        it: an epoch above the latest is unknown (-1, -1); one below the first ends where the
        first begins, under the epoch asked. (Followers use the log's own lookup, through
        the fetch's diverging epoch, which ends in the same truncation.)"""
        epochs = p.log.epochs
        if leader_epoch < 0 or not epochs or leader_epoch > epochs[-1][0]:
            return -1, -1
        if leader_epoch < epochs[0][0]:
            return leader_epoch, epochs[0][1]
        return p.log.end_offset_for_epoch(leader_epoch)

    # ------------------------------------------------------------ fetch (follower side)

    def _sync_fetchers(self, now_ms: int) -> None:
        leaders = {p.leader for p in self.partitions.values()
                   if p.role is Role.FOLLOWER and p.leader >= 0}
        # Kafka shuts idle fetcher threads down after every leadership change: a fetcher with
        # no partition left goes, its request in flight abandoned (its answer is ignored), and
        # following that broker again starts a new one that fetches at once
        for idle in [b for b in self.fetchers if b not in leaders]:
            del self.fetchers[idle]
        for leader in sorted(leaders):
            f = self.fetchers.setdefault(leader, _Fetcher(leader))
            if not f.in_flight:
                self._send_fetch(now_ms, f)

    def _send_fetch(self, now_ms: int, f: _Fetcher) -> None:
        if self.broker_epoch < 0:
            return
        parts = []
        for tp in sorted(self.partitions):
            p = self.partitions[tp]
            if p.role is not Role.FOLLOWER or p.leader != f.leader:
                continue
            last_epoch = -1 if Bug.TRUNCATE_TO_HIGH_WATERMARK in self.bugs else p.log.latest_epoch
            parts.append(FetchPartition(tp, p.leader_epoch, p.log.log_end_offset, last_epoch))
        if not parts:
            f.in_flight = False
            return
        f.correlation_id = self._corr()
        f.in_flight = True
        f.asked = {fp.tp: (fp.current_leader_epoch, fp.fetch_offset) for fp in parts}
        self.send(f.leader, FetchRequest(f.correlation_id, self.node_id, self.broker_epoch,
                                         self.config.replica_fetch_wait_max_ms, 0, tuple(parts)))
        timeout = self.config.replica_fetch_wait_max_ms + self.config.replica_fetch_timeout_ms
        self.set_timer(timeout, ("fetcher", f.leader, f.correlation_id))

    def _fetcher_timer(self, now_ms: int, leader: int, corr: int) -> None:
        f = self.fetchers.get(leader)
        if f is None or f.correlation_id != corr:
            return
        # either the request got no answer in time, or this is the backoff after errors
        f.in_flight = False
        self._send_fetch(now_ms, f)

    def _on_fetch_response(self, now_ms: int, src: int, resp: FetchResponse) -> None:
        f = self.fetchers.get(src)
        if f is None or not f.in_flight or f.correlation_id != resp.correlation_id:
            return  # late, duplicated or for a fetcher that moved on
        backoff = False
        for r in resp.partitions:
            p = self.partitions.get(r.tp)
            if p is None or p.role is not Role.FOLLOWER or p.leader != src:
                continue
            if f.asked.get(r.tp) != (p.leader_epoch, p.log.log_end_offset):
                # asked in an earlier leader epoch or from another log end (the partition
                # followed another leader meanwhile): the answer continues a log this replica
                # may no longer have
                mark("follower-stale-fetch-response")
                continue
            if not self._apply_fetched(now_ms, p, r):
                backoff = True
        if backoff:
            f.correlation_id = self._corr()
            self.set_timer(self.config.replica_fetch_backoff_ms,
                           ("fetcher", f.leader, f.correlation_id))
        else:
            f.in_flight = False
            self._send_fetch(now_ms, f)

    def _apply_fetched(self, now_ms: int, p: Partition, r: FetchedPartition) -> bool:
        """Apply one partition of a fetch response; False asks the fetcher to back off."""
        log = p.log
        if r.error is Errors.OFFSET_OUT_OF_RANGE:
            before = log.log_end_offset
            if r.log_end_offset >= 0 and log.log_end_offset > r.log_end_offset:
                mark("follower-truncate-out-of-range")
                if r.log_end_offset < log.high_watermark:
                    mark("follower-truncate-below-hw")
                log.truncate_to(r.log_end_offset)
            elif log.log_end_offset < r.log_start_offset:
                mark("follower-reset-to-log-start")
                log.truncate_fully_and_start_at(r.log_start_offset)
            else:
                return False
            self.event("truncate", key=p.tp.key, from_offset=before, to=log.log_end_offset,
                       reason="out-of-range")
            return True
        if r.error is not Errors.NONE:
            return False
        if r.diverging_epoch is not None:
            before = log.log_end_offset
            p.truncate_on_divergence(*r.diverging_epoch)
            self.event("truncate", key=p.tp.key, from_offset=before, to=log.log_end_offset,
                       reason="diverging-epoch", epoch=r.diverging_epoch[0])
            return True
        try:
            for batch in r.records:
                last = rec.last_offset_of(batch)
                if last < log.log_end_offset:
                    continue  # already have it
                if rec.base_offset_of(batch) < log.log_end_offset:
                    break  # overlaps what we have: not a continuation
                log.append_as_follower(batch)
        except StorageError:
            return False
        except (rec.CorruptRecordError, ValueError):
            return False  # a corrupt fetch is dropped and fetched again
        # as Kafka's ReplicaFetcherThread.processPartitionData: append, then the high
        # watermark, then the log start (which may not pass the high watermark)
        old_hw = log.high_watermark
        if r.high_watermark >= 0 and log.update_high_watermark(r.high_watermark):
            self.event("hw-advance", key=p.tp.key, **{"from": old_hw}, to=log.high_watermark,
                       leader_epoch=p.leader_epoch, follower=True)
        if r.log_start_offset > log.log_start_offset:
            log.increment_log_start_offset(r.log_start_offset)  # bounded by our HW
        return True
