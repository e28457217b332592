"""What every part of a broker reads and writes.

A broker is one node (:class:`reference.broker.Broker`) whose work is split by concern into
modules of functions over this state: :mod:`~reference.produce` (the produce path),
:mod:`~reference.leader` (the leader side of replication: fetches served, the high
watermark, ISR changes, offset lookups), :mod:`~reference.follower` (the replica fetchers),
:mod:`~reference.cleaner` (DeleteRecords, compaction, retention), and the two coordinators
(:mod:`~reference.txn_coordinator`, :mod:`~reference.group_coordinator`), which see only
the narrow :class:`~reference.coordinator.CoordinatorHost`. This module holds the state and
the small questions everyone asks of it; it decides nothing.

``now_ms`` is the time of the input being handled: set once at each entry point (start,
receive, timer), never elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reference.coordinator import Coordinator
from reference.errors import Errors
from reference.frozen import frozen
from reference.log_config import LogConfig
from reference.messages import FetchedPartition, FetchPartition, FetchRequest, MetadataImage, TopicPartition
from reference.node import Node
from reference.partition import Partition
from reference.purgatory import Purgatory
from reference.storage import Storage

# Kafka's defaults of replica.fetch.max.bytes and replica.fetch.response.max.bytes
REPLICA_FETCH_MAX_BYTES = 1 << 20
REPLICA_FETCH_RESPONSE_MAX_BYTES = 10 << 20


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
    # the epoch a new transactional producer id starts at (Kafka: 0). A harness aim, not a Kafka
    # setting: near 32766 a run reaches the end of a producer's epochs in a few transactions
    # instead of 32,000 (where version 2 gives the producer a new id)
    producer_epoch_start: int = 0
    # the controller's session timeout: a broker that heard back from the controller less
    # than this long after sending a heartbeat cannot have been fenced and replaced since
    coordinator_lease_ms: int = 9_000
    log_cleaner_backoff_ms: int = 15_000  # how often the cleaner and retention run
    # a follower's fetch: each partition's limit, and the response's over all of them; below
    # the defaults the fetcher rotates its partitions' order, as Kafka's does
    replica_fetch_max_bytes: int = REPLICA_FETCH_MAX_BYTES
    replica_fetch_response_max_bytes: int = REPLICA_FETCH_RESPONSE_MAX_BYTES
    # KIP-848's consumer groups: group.consumer.session.timeout.ms and
    # group.consumer.heartbeat.interval.ms (Kafka's defaults)
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    # KIP-932's share groups: the acquisition lock (group.share.record.lock.duration.ms), the
    # delivery count limit, a share-partition's in-flight span, where a share-partition never
    # acknowledged starts (share.auto.offset.reset, a group config in Kafka), and how many
    # partitions __share_group_state has
    share_session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    share_heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    share_record_lock_duration_ms: int = 30_000
    share_delivery_count_limit: int = 5
    share_partition_max_record_locks: int = 2_000
    share_auto_offset_reset: str = "latest"
    share_isolation_level: str = "read_uncommitted"  # share.isolation.level, a group config in Kafka
    share_state_partitions: int = 3

    def log_config(self) -> LogConfig:
        return LogConfig(segment_bytes=self.segment_bytes, flush_messages=self.flush_messages)

    @classmethod
    def from_timings(cls, timings: dict[str, int], **settings) -> BrokerConfig:
        """A config whose timers come from a timings table (the simulated cluster's or the
        served one's): each of :data:`TIMER_FIELDS`, and the coordinator lease from its
        ``session_timeout_ms``, and the consumer groups' session and heartbeat interval from its
        ``member_session_timeout_ms`` and ``member_heartbeat_interval_ms`` if it has them;
        ``settings`` set the other fields."""
        fields: dict[str, Any] = {f: timings[f] for f in TIMER_FIELDS}
        groups: dict[str, Any] = {f"{kind}_{k}": timings[f"member_{k}"]
                                  for k in ("session_timeout_ms", "heartbeat_interval_ms")
                                  for kind in ("consumer", "share") if f"member_{k}" in timings}
        return cls(**fields, coordinator_lease_ms=timings["session_timeout_ms"], **groups, **settings)


TIMER_FIELDS = ("replica_lag_time_max_ms", "replica_fetch_wait_max_ms", "replica_fetch_backoff_ms",
                "replica_fetch_timeout_ms", "heartbeat_interval_ms", "registration_retry_ms",
                "alter_partition_timeout_ms", "high_watermark_checkpoint_interval_ms", "log_cleaner_backoff_ms")


@dataclass(init=False, slots=True)  # its own __init__: compiled, a native one (reference/frozen.py)
class DelayedFetch:
    """A fetch with nothing to return yet, waiting up to its max wait (long polling)."""

    src: int
    request: FetchRequest
    deadline_ms: int
    tps: frozenset[TopicPartition]  # the partitions it asks for
    # what reading it found when it arrived, and the broker's (changes, epoch) then: while
    # they are the same, reading it again would find the same (None: something changed
    # during that read, read again)
    read: tuple[FetchedPartition, ...] | None = None
    read_at: tuple[int, int] = (-1, -1)

    def __init__(self, src: int, request: FetchRequest, deadline_ms: int, tps: frozenset[TopicPartition],
                 read: tuple[FetchedPartition, ...] | None = None, read_at: tuple[int, int] = (-1, -1)) -> None:
        self.src = src
        self.request = request
        self.deadline_ms = deadline_ms
        self.tps = tps
        self.read = read
        self.read_at = read_at


@dataclass(slots=True)
class Fetcher:
    """A follower's fetcher of one leader broker: one Fetch in flight for every partition
    followed from that broker."""

    leader: int
    correlation_id: int = 0
    in_flight: bool = False
    # the request in flight: each partition's (leader epoch, fetch offset) it asked with; an
    # answer applies to a partition only while both are still what they were (as Kafka's
    # AbstractFetcherThread compares the fetch offset and the partition's fetch state)
    asked: dict[TopicPartition, tuple[int, int]] = field(default_factory=dict)
    rounds: int = 0  # fetches sent: where the next one starts when the order rotates
    # the partitions a fetch asks for, and the broker's (changes, epoch) when they were listed
    parts: list[FetchPartition] = field(default_factory=list)
    parts_at: tuple[int, int] = (-1, -1)
    backing_off: bool = False  # after errors: the timer is the backoff, not the fetch's timeout


class BrokerState(Node):
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
        self.now_ms = 0
        self.broker_epoch = -1  # -1 until the controller registered this process
        self.lease_until_ms = -1
        self.metadata = MetadataImage(-1, (), ())
        self.partitions: dict[TopicPartition, Partition] = {}
        # bumped by its logs and partitions at every change of what the invariants and the
        # fetches read (a list they share, as Broker._rolled: no reference cycle); see
        # PartitionLog.changes
        self.changes: list[int] = [0]
        self.next_correlation_id = 0
        # leader side: acks=all produces and markers waiting for the high watermark, fetches
        # waiting for data, ISR changes asked of the controller
        self.purgatory = Purgatory()
        self.delayed_fetch: list[DelayedFetch] = []
        self.alter_in_flight: dict[int, TopicPartition] = {}
        # follower side: a fetcher per leader broker
        self.fetchers: dict[int, Fetcher] = {}
        # produces waiting for the transaction coordinator's verification (KIP-890 part 1)
        # correlation id -> (callback(error), the coordinator asked)
        self.verifying: dict[int, tuple[Callable[[Errors], None], int]] = {}
        self.producer_ids: tuple[int, int] = (0, 0)  # [next, end) of this broker's block
        self.allocate_in_flight = -1
        self.heartbeat_unanswered_since = -1  # the first heartbeat the controller has not answered
        # the coordinators, by the internal topic whose partitions they act for
        self.coordinators: dict[str, Coordinator] = {}
        self._leaders: dict[TopicPartition, int] | None = None
        self._topic_configs: dict[str, tuple[tuple[str, str], ...]] = {}

    def read_version(self) -> tuple[int, int]:
        """The broker's count of changes and its epoch: while both are the same, reading its
        logs and partitions (a fetch, a follower's list of what to fetch) finds the same."""
        return self.changes[0], self.broker_epoch

    def corr(self) -> int:
        """A new correlation id for a request this broker sends."""
        self.next_correlation_id += 1
        return self.next_correlation_id

    def leaders(self) -> dict[TopicPartition, int]:
        """Partition -> leader broker in this broker's metadata image (-1: none)."""
        if self._leaders is None:
            self._leaders = {s.tp: s.leader for s in self.metadata.partitions}
        return self._leaders

    def lease_valid(self) -> bool:
        """True while this broker cannot have been fenced (and its partitions led by
        others): a coordinator answers from memory only then, so a broker waking from a
        pause with stale state does not serve stale reads."""
        return self.now_ms < self.lease_until_ms

    def isr_satisfied(self, tp: TopicPartition) -> bool:
        p = self.partitions.get(tp)
        return p is not None and len(p.isr) >= p.effective_min_isr

    def min_insync_replicas(self, topic: str) -> int:
        """The topic's min.insync.replicas if it sets one, else the broker's."""
        value = dict(self._topic_configs.get(topic, ())).get("min.insync.replicas")
        return int(value) if value is not None and value.isdigit() else self.config.min_insync_replicas

    def log_config(self, topic: str) -> LogConfig:
        configs = dict(self._topic_configs.get(topic, ()))
        base = self.config.log_config()
        return LogConfig.from_topic(base, configs) if configs else base

    def leader_for(self, tp: TopicPartition, current_leader_epoch: int) -> tuple[Partition | None, Errors]:
        """The partition if this broker leads it in the request's epoch, else the error: a
        partition its metadata does not know is UNKNOWN_TOPIC_OR_PARTITION, one led elsewhere
        NOT_LEADER_OR_FOLLOWER (Kafka's ReplicaManager.getPartitionOrError)."""
        p = self.partitions.get(tp)
        if self.broker_epoch < 0 or p is None or not p.is_leader:
            return None, self.not_led_here(tp)
        fenced = p.check_epoch(current_leader_epoch)
        if fenced is not None:
            return None, Errors[fenced]
        return p, Errors.NONE

    def not_led_here(self, tp: TopicPartition) -> Errors:
        if self.broker_epoch >= 0 and tp not in self.partitions and tp not in self.leaders():
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        return Errors.NOT_LEADER_OR_FOLLOWER
