"""Messages between nodes: Kafka's APIs with Kafka's field names, as frozen dataclasses.

Every request carries a ``correlation_id`` that its response echoes; a node ignores a
response whose correlation id it is no longer waiting for (late, duplicated or reordered
by the network). Offsets are half-open: ``high_watermark`` and ``log_end_offset`` are the
next offset to be written.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, final

from reference.errors import Errors
from reference.frozen import frozen, own_init


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    @property
    def key(self) -> str:
        """The history key of docs/reference/trace-format.md: ``"<topic>:<partition>"``
        (remembered: a run asks for the same few keys again and again)."""
        key = _KEYS.get(self)
        if key is None:
            if len(_KEYS) >= 1 << 16:
                _KEYS.clear()
            key = _KEYS[self] = f"{self.topic}:{self.partition}"
        return key

    @classmethod
    def parse(cls, key: str) -> TopicPartition:
        topic, _, partition = key.rpartition(":")
        return cls(topic, int(partition))


_KEYS: dict[TopicPartition, str] = {}


# ---------------------------------------------------------------- metadata


@frozen
class PartitionState:
    """The controller's record of one partition (KRaft's PartitionRecord)."""

    tp: TopicPartition
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int  # -1: no leader (offline)
    leader_epoch: int
    partition_epoch: int
    # KIP-966 eligible leader replicas: left the ISR while it was below min.insync.replicas,
    # so they hold everything committed and may lead if the ISR dies
    elr: tuple[int, ...] = ()


@frozen
class MetadataImage:
    version: int
    live_brokers: tuple[int, ...]
    partitions: tuple[PartitionState, ...]
    # topic -> its configs (Kafka's names: cleanup.policy, retention.ms, ...)
    topic_configs: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    # topics deleted by DeleteTopics (and not created again): replicas delete their logs
    deleted_topics: tuple[str, ...] = ()


# ---------------------------------------------------------------- broker <-> controller


@frozen
class BrokerRegistrationRequest:
    broker_id: int
    incarnation: int  # a fresh number per process start
    # the broker's storage kept every write across whatever stopped it (a process kill with
    # the operating system still up, or a clean shutdown): a restart lost nothing, so the
    # broker keeps its place in the ISRs. False (the simulator's power loss): it leaves them.
    storage_intact: bool = False


@frozen
class BrokerRegistrationResponse:
    incarnation: int
    error: Errors
    broker_epoch: int


@frozen
class BrokerHeartbeatRequest:
    broker_id: int
    broker_epoch: int
    metadata_version: int
    sent_ms: int = -1  # the broker's clock when it sent this; echoed back (its lease)


@frozen
class BrokerHeartbeatResponse:
    broker_epoch: int
    error: Errors
    metadata: MetadataImage | None  # sent when the broker's version is behind
    request_sent_ms: int = -1


@frozen
class MetadataUpdate:
    """The controller's push of a new image (brokers also learn it by heartbeat)."""

    image: MetadataImage


@frozen
class AlterPartitionRequest:
    correlation_id: int
    broker_id: int
    broker_epoch: int
    tp: TopicPartition
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[tuple[int, int], ...]  # (broker id, broker epoch seen by the leader)


@frozen
class AlterPartitionResponse:
    correlation_id: int
    tp: TopicPartition
    error: Errors
    state: PartitionState | None


@frozen
class CreateTopicsRequest:
    """A new topic: ``num_partitions`` partitions of ``replication_factor`` replicas placed by the
    controller, or, with ``assignments`` (both numbers -1, as Kafka requires), partition index ->
    its replicas as given (the first live one leads)."""

    correlation_id: int
    name: str
    num_partitions: int
    replication_factor: int
    configs: tuple[tuple[str, str], ...] = ()
    assignments: tuple[tuple[int, tuple[int, ...]], ...] = ()


@frozen
class CreateTopicsResponse:
    correlation_id: int
    name: str
    error: Errors
    message: str | None = None  # why it was refused, in Kafka's words where Kafka has them


@frozen
class DeleteTopicsRequest:
    correlation_id: int
    name: str


@frozen
class DeleteTopicsResponse:
    correlation_id: int
    name: str
    error: Errors


# ---------------------------------------------------------------- clients and replicas -> broker


@frozen
class MetadataRequest:
    correlation_id: int


@frozen
class MetadataResponse:
    correlation_id: int
    image: MetadataImage


@final
@dataclass(init=False, frozen=True, slots=True)
class ProduceRequest:
    correlation_id: int
    acks: int  # 0, 1 or -1 (all)
    timeout_ms: int
    tp: TopicPartition
    records: bytes  # one RecordBatch v2
    transactional_id: str | None = None
    # KIP-890 part 2 (Produce v12+): a transaction's first write to the partition adds the
    # partition to the transaction (the leader asks the coordinator), instead of only
    # verifying that the producer added it
    add_partition: bool = False

    def __init__(
        self,
        correlation_id: int,
        acks: int,
        timeout_ms: int,
        tp: TopicPartition,
        records: bytes,
        transactional_id: str | None = None,
        add_partition: bool = False,
    ) -> None:
        self.correlation_id = correlation_id  # type: ignore[misc]
        self.acks = acks  # type: ignore[misc]
        self.timeout_ms = timeout_ms  # type: ignore[misc]
        self.tp = tp  # type: ignore[misc]
        self.records = records  # type: ignore[misc]
        self.transactional_id = transactional_id  # type: ignore[misc]
        self.add_partition = add_partition  # type: ignore[misc]


own_init(ProduceRequest)


@final
@dataclass(init=False, frozen=True, slots=True)
class ProduceResponse:
    correlation_id: int
    tp: TopicPartition
    error: Errors
    base_offset: int = -1
    log_start_offset: int = -1

    def __init__(
        self,
        correlation_id: int,
        tp: TopicPartition,
        error: Errors,
        base_offset: int = -1,
        log_start_offset: int = -1,
    ) -> None:
        self.correlation_id = correlation_id  # type: ignore[misc]
        self.tp = tp  # type: ignore[misc]
        self.error = error  # type: ignore[misc]
        self.base_offset = base_offset  # type: ignore[misc]
        self.log_start_offset = log_start_offset  # type: ignore[misc]


own_init(ProduceResponse)


@final
@dataclass(init=False, frozen=True, slots=True)
class FetchPartition:
    tp: TopicPartition
    current_leader_epoch: int  # -1: no fencing check (KIP-320)
    fetch_offset: int
    last_fetched_epoch: int  # -1: no divergence check (KIP-595 style)
    max_bytes: int = 1 << 20

    def __init__(
        self,
        tp: TopicPartition,
        current_leader_epoch: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        max_bytes: int = 1 << 20,
    ) -> None:
        self.tp = tp  # type: ignore[misc]
        self.current_leader_epoch = current_leader_epoch  # type: ignore[misc]
        self.fetch_offset = fetch_offset  # type: ignore[misc]
        self.last_fetched_epoch = last_fetched_epoch  # type: ignore[misc]
        self.max_bytes = max_bytes  # type: ignore[misc]


own_init(FetchPartition)


@final
@dataclass(init=False, frozen=True, slots=True)
class FetchRequest:
    correlation_id: int
    replica_id: int  # -1 for consumers
    replica_epoch: int  # the follower's broker epoch (KIP-966), -1 for consumers
    max_wait_ms: int
    isolation_level: int  # 0 read_uncommitted, 1 read_committed
    partitions: tuple[FetchPartition, ...]
    # the response's limit over all its partitions (fetch.max.bytes, replica.fetch.response.max.bytes);
    # the first batch of the first partition that returns any is returned even when larger
    max_bytes: int = 0x7FFFFFFF

    def __init__(
        self,
        correlation_id: int,
        replica_id: int,
        replica_epoch: int,
        max_wait_ms: int,
        isolation_level: int,
        partitions: tuple[FetchPartition, ...],
        max_bytes: int = 0x7FFFFFFF,
    ) -> None:
        self.correlation_id = correlation_id  # type: ignore[misc]
        self.replica_id = replica_id  # type: ignore[misc]
        self.replica_epoch = replica_epoch  # type: ignore[misc]
        self.max_wait_ms = max_wait_ms  # type: ignore[misc]
        self.isolation_level = isolation_level  # type: ignore[misc]
        self.partitions = partitions  # type: ignore[misc]
        self.max_bytes = max_bytes  # type: ignore[misc]


own_init(FetchRequest)


@final
@dataclass(init=False, frozen=True, slots=True)
class FetchedPartition:
    tp: TopicPartition
    error: Errors
    high_watermark: int = -1
    log_start_offset: int = -1
    records: tuple[bytes, ...] = ()
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) to truncate to
    log_end_offset: int = -1  # replica fetches only
    last_stable_offset: int = -1
    # read_committed: (producer id, first offset) of aborted transactions in the returned range
    aborted_transactions: tuple[tuple[int, int], ...] = ()

    def __init__(
        self,
        tp: TopicPartition,
        error: Errors,
        high_watermark: int = -1,
        log_start_offset: int = -1,
        records: tuple[bytes, ...] = (),
        diverging_epoch: tuple[int, int] | None = None,
        log_end_offset: int = -1,
        last_stable_offset: int = -1,
        aborted_transactions: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self.tp = tp  # type: ignore[misc]
        self.error = error  # type: ignore[misc]
        self.high_watermark = high_watermark  # type: ignore[misc]
        self.log_start_offset = log_start_offset  # type: ignore[misc]
        self.records = records  # type: ignore[misc]
        self.diverging_epoch = diverging_epoch  # type: ignore[misc]
        self.log_end_offset = log_end_offset  # type: ignore[misc]
        self.last_stable_offset = last_stable_offset  # type: ignore[misc]
        self.aborted_transactions = aborted_transactions  # type: ignore[misc]


own_init(FetchedPartition)


@final
@dataclass(init=False, frozen=True, slots=True)
class FetchResponse:
    correlation_id: int
    partitions: tuple[FetchedPartition, ...]

    def __init__(self, correlation_id: int, partitions: tuple[FetchedPartition, ...]) -> None:
        self.correlation_id = correlation_id  # type: ignore[misc]
        self.partitions = partitions  # type: ignore[misc]


own_init(FetchResponse)


EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


@frozen
class ListOffsetsRequest:
    correlation_id: int
    tp: TopicPartition
    timestamp: int  # EARLIEST_TIMESTAMP or LATEST_TIMESTAMP
    current_leader_epoch: int = -1
    isolation_level: int = 0  # read_committed: LATEST means the last stable offset


@frozen
class ListOffsetsResponse:
    correlation_id: int
    tp: TopicPartition
    error: Errors
    offset: int = -1
    leader_epoch: int = -1
    timestamp: int = -1  # by timestamp: the found record's timestamp


@frozen
class DeleteRecordsRequest:
    correlation_id: int
    tp: TopicPartition
    offset: int  # -1: up to the high watermark


@frozen
class DeleteRecordsResponse:
    correlation_id: int
    tp: TopicPartition
    error: Errors
    low_watermark: int = -1


@frozen
class OffsetForLeaderEpochRequest:
    correlation_id: int
    replica_id: int
    tp: TopicPartition
    current_leader_epoch: int
    leader_epoch: int


@frozen
class OffsetForLeaderEpochResponse:
    correlation_id: int
    tp: TopicPartition
    error: Errors
    leader_epoch: int = -1
    end_offset: int = -1


# ---------------------------------------------------------------- idempotent producers


@frozen
class InitProducerIdRequest:
    correlation_id: int
    transactional_id: str | None = None
    transaction_timeout_ms: int = 60_000
    # KIP-360: an existing producer asks for an epoch bump (-1: a fresh start)
    producer_id: int = -1
    producer_epoch: int = -1


@frozen
class InitProducerIdResponse:
    correlation_id: int
    error: Errors
    producer_id: int = -1
    producer_epoch: int = -1


@frozen
class AllocateProducerIdsRequest:
    """A broker asks the controller for a block of producer ids (KIP-730)."""

    correlation_id: int
    broker_id: int
    broker_epoch: int


@frozen
class AllocateProducerIdsResponse:
    correlation_id: int
    error: Errors
    producer_id_start: int = -1
    producer_id_len: int = 0


# ---------------------------------------------------------------- coordinators


COORDINATOR_GROUP = 0
COORDINATOR_TRANSACTION = 1


@frozen
class FindCoordinatorRequest:
    correlation_id: int
    key: str
    key_type: int  # COORDINATOR_GROUP or COORDINATOR_TRANSACTION


@frozen
class FindCoordinatorResponse:
    correlation_id: int
    error: Errors
    node_id: int = -1


# ---------------------------------------------------------------- transactions


@frozen
class AddPartitionsToTxnRequest:
    """From a producer; or, with ``verify_only``, from a partition leader asking whether the
    partitions belong to the producer's ongoing transaction (KIP-890 part 1)."""

    correlation_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: tuple[TopicPartition, ...]
    verify_only: bool = False


@frozen
class AddPartitionsToTxnResponse:
    correlation_id: int
    error: Errors


@frozen
class AddOffsetsToTxnRequest:
    correlation_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


@frozen
class AddOffsetsToTxnResponse:
    correlation_id: int
    error: Errors


@frozen
class EndTxnRequest:
    correlation_id: int
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    # the transaction version the producer speaks (EndTxn v5+: 2, the epoch bumped at the
    # end; older versions: 1); 0: the coordinator's own setting
    transaction_version: int = 0


@frozen
class EndTxnResponse:
    correlation_id: int
    error: Errors
    producer_id: int = -1  # transaction version 2: the bumped epoch to use next
    producer_epoch: int = -1


@frozen
class WriteTxnMarkersRequest:
    correlation_id: int
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


@frozen
class WriteTxnMarkersResponse:
    correlation_id: int
    producer_id: int
    errors: tuple[tuple[TopicPartition, Errors], ...]
