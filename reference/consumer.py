"""A sans-IO consumer: assign, seek, poll, fetching from each partition's leader.

Theory of operation
-------------------
The consumer keeps a position (the next offset to read) per assigned partition. ``poll``
sends one Fetch per leader broker covering the assigned partitions it leads; decoded
records accumulate in :attr:`Consumer.records` until taken. A partition without a
position asks the leader with ListOffsets according to ``auto_offset_reset``
(``earliest``, ``latest``, or ``none``, which reports ``OFFSET_OUT_OF_RANGE``).
Errors that mean the leader moved refresh metadata; nothing is ever read at or above the
leader's high watermark because the broker never returns it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar, final

from reference import records as rec
from reference.client import ClientNode
from reference.errors import Errors
from reference.frozen import frozen, own_init
from reference.group_messages import OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse
from reference.messages import (
    COORDINATOR_GROUP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchedPartition,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataImage,
    MetadataResponse,
    TopicPartition,
)

ERRORS_KEPT_MAX = 100
# Kafka's defaults of max.partition.fetch.bytes and fetch.max.bytes
MAX_PARTITION_FETCH_BYTES = 1 << 20
FETCH_MAX_BYTES = 52_428_800


@frozen
class ConsumerConfig:
    auto_offset_reset: str = "earliest"
    fetch_max_wait_ms: int = 500
    request_timeout_ms: int = 30_000
    isolation_level: int = 0  # 1: read_committed (up to the last stable offset, aborted dropped)
    max_partition_fetch_bytes: int = MAX_PARTITION_FETCH_BYTES
    fetch_max_bytes: int = FETCH_MAX_BYTES  # a fetch response's limit over all its partitions
    # records one take_records returns; the rest stay buffered, and a partition with buffered
    # records is not fetched again until they are taken (Kafka's default is 500; None: all)
    max_poll_records: int | None = None
    metadata_timeout_ms: int = 1_000
    retry_backoff_ms: int = 100
    group_id: str | None = None  # a partition without a position starts at the group's commit
    # group membership (GroupConsumer, ``subscribe``)
    group_instance_id: str | None = None
    session_timeout_ms: int = 45_000
    rebalance_timeout_ms: int = 300_000  # Kafka uses max.poll.interval.ms
    heartbeat_interval_ms: int = 3_000
    max_poll_interval_ms: int = 300_000
    assignors: tuple[str, ...] = ("range", "cooperative-sticky")
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5_000
    # KIP-848 (ModernGroupConsumer): the server-side assignor asked for (None: the group's default)
    server_assignor: str | None = None


@final
@dataclass(init=False, frozen=True, slots=True)
class ConsumedRecord:
    tp: TopicPartition
    offset: int
    key: bytes | None
    value: bytes | None

    def __init__(self, tp: TopicPartition, offset: int, key: bytes | None, value: bytes | None) -> None:
        self.tp = tp  # type: ignore[misc]
        self.offset = offset  # type: ignore[misc]
        self.key = key  # type: ignore[misc]
        self.value = value  # type: ignore[misc]


own_init(ConsumedRecord)


class Consumer(ClientNode):
    CORRELATION_BASE: ClassVar[int] = 1 << 40

    def __init__(self, node_id: int, bootstrap: list[int], config: ConsumerConfig) -> None:
        super().__init__(node_id, bootstrap, config.metadata_timeout_ms, config.retry_backoff_ms)
        self.config = config
        self._leaders: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (leader, epoch)
        self.assignment: tuple[TopicPartition, ...] = ()
        self.positions: dict[TopicPartition, int] = {}
        self.records: list[ConsumedRecord] = []
        # the most recent partition errors, for a caller that wants to see them
        self.errors: deque[tuple[TopicPartition, Errors]] = deque(maxlen=ERRORS_KEPT_MAX)
        self._fetch_in_flight: dict[int, tuple[int, tuple[TopicPartition, ...]]] = {}
        self._fetch_offsets: dict[int, dict[TopicPartition, int]] = {}  # corr -> fetch offsets
        self._last_asked: dict[TopicPartition, int] = {}
        self._busy_leaders: set[int] = set()
        # fetch sizes below Kafka's defaults can cut a response short: then each fetch starts
        # at the next partition, so that none starves (KIP-74: the consumer rotates the order)
        self._rotate = (config.fetch_max_bytes < FETCH_MAX_BYTES
                        or config.max_partition_fetch_bytes < MAX_PARTITION_FETCH_BYTES)
        self._fetch_round = 0
        self._list_in_flight: dict[int, TopicPartition] = {}
        self._listing: set[TopicPartition] = set()
        self._list_for_end: set[int] = set()
        self.end_offsets: dict[TopicPartition, int] = {}
        # the group's committed offsets (config.group_id)
        self.coordinator = -1
        self._find_corr = -1
        self._offset_fetch: tuple[int, tuple[TopicPartition, ...]] | None = None
        self._report_fetch = -1
        self.committed: dict[TopicPartition, int] | None = None  # request_committed's answer
        self._no_commit: set[TopicPartition] = set()  # nothing committed: auto.offset.reset
        self._commit_corr = -1
        self.commit_result: Errors | None = None  # of the last commit(), once answered

    def start(self, now_ms: int) -> None:
        self._now_ms = now_ms
        self._refresh_metadata()

    # ------------------------------------------------------------ API

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assignment = tuple(tps)
        self.positions = {tp: o for tp, o in self.positions.items() if tp in tps}

    def reset_positions(self) -> None:
        """Forget every position: the next poll starts again from the group's committed
        offsets (what an exactly-once processor does after aborting a transaction)."""
        self.positions = {}
        self._no_commit = set()
        self.records = []

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Move the position; records of ``tp`` fetched but not yet taken are dropped."""
        self.positions[tp] = offset
        self.records = [r for r in self.records if r.tp != tp]

    def seek_to_beginning(self) -> None:
        self.positions = {tp: 0 for tp in self.assignment}

    def poll(self, now_ms: int) -> None:
        """Start fetches for every assigned partition that is not being fetched."""
        self._now_ms = now_ms
        by_leader: dict[int, list[FetchPartition]] = {}
        tps = self.assignment
        if self._rotate and len(tps) > 1:
            k = self._fetch_round % len(tps)
            self._fetch_round += 1
            tps = tps[k:] + tps[:k]
        buffered = {r.tp for r in self.records} if self.config.max_poll_records is not None else ()
        for tp in tps:
            leader, epoch = self._leaders.get(tp, (-1, -1))
            if leader < 0:
                self._refresh_metadata()
                continue
            if tp not in self.positions:
                if self.config.group_id is not None and tp not in self._no_commit:
                    self._fetch_committed()
                else:
                    self._list_offsets(tp, leader, epoch)
                continue
            if leader in self._busy_leaders or tp in buffered:
                continue
            by_leader.setdefault(leader, []).append(FetchPartition(
                tp, epoch, self.positions[tp], -1, self.config.max_partition_fetch_bytes))
        for leader, parts in sorted(by_leader.items()):
            corr = self._next_corr()
            self._fetch_in_flight[corr] = (leader, tuple(p.tp for p in parts))
            self._fetch_offsets[corr] = {p.tp: p.fetch_offset for p in parts}
            self._busy_leaders.add(leader)
            self.send(leader, FetchRequest(corr, -1, -1, self.config.fetch_max_wait_ms,
                                           self.config.isolation_level, tuple(parts),
                                           self.config.fetch_max_bytes))
            self._timeout(leader, self.config.fetch_max_wait_ms + self.config.request_timeout_ms,
                           ("fetch", corr))

    def request_end_offsets(self) -> None:
        """Ask each assigned partition's leader for its end (HW); see :attr:`end_offsets`."""
        for tp in self.assignment:
            leader, epoch = self._leaders.get(tp, (-1, -1))
            if tp in self.end_offsets:
                continue
            if leader < 0:
                self._refresh_metadata()
                continue
            corr = self._next_corr()
            self._list_for_end.add(corr)
            self._list_in_flight[corr] = tp
            self.send(leader, ListOffsetsRequest(corr, tp, LATEST_TIMESTAMP, epoch,
                                                 self.config.isolation_level))
            self._timeout(leader, self.config.request_timeout_ms, ("list", corr))

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit offsets (the next offset to read) for the group; see :attr:`commit_result`."""
        if self.config.group_id is None:
            raise ValueError("commit needs a group_id")
        self.commit_result = None
        if self.coordinator < 0:
            self._find_coordinator()
            self.commit_result = Errors.COORDINATOR_NOT_AVAILABLE
            return
        self._commit_corr = self._next_corr()
        self.send(self.coordinator, OffsetCommitRequest(
            self._commit_corr, self.config.group_id, -1, "", tuple(sorted(offsets.items()))))
        self._timeout(self.coordinator, self.config.request_timeout_ms, ("commit", self._commit_corr))

    def request_committed(self, tps: list[TopicPartition]) -> None:
        """Ask the group coordinator for the committed offsets of ``tps`` (stable ones only,
        KIP-447); the answer lands in :attr:`committed`. Call again until it is set."""
        if self._report_fetch >= 0:
            return
        if self.coordinator < 0:
            self._find_coordinator()
            return
        assert self.config.group_id is not None
        self._report_fetch = self._next_corr()
        self.send(self.coordinator, OffsetFetchRequest(self._report_fetch, self.config.group_id,
                                                       tuple(tps)))
        self._timeout(self.coordinator, self.config.request_timeout_ms, ("report-fetch", self._report_fetch))

    def take_records(self) -> list[ConsumedRecord]:
        """The records fetched so far, at most ``max_poll_records`` of them (the oldest)."""
        n = self.config.max_poll_records
        if n is None or len(self.records) <= n:
            out, self.records = self.records, []
        else:
            out, self.records = self.records[:n], self.records[n:]
        return out

    # ------------------------------------------------------------ machinery

    def _list_offsets(self, tp: TopicPartition, leader: int, epoch: int) -> None:
        if tp in self._listing:
            return
        policy = self.config.auto_offset_reset
        if policy == "none":
            self.errors.append((tp, Errors.OFFSET_OUT_OF_RANGE))
            return
        corr = self._next_corr()
        self._listing.add(tp)
        self._list_in_flight[corr] = tp
        ts = EARLIEST_TIMESTAMP if policy == "earliest" else LATEST_TIMESTAMP
        self.send(leader, ListOffsetsRequest(corr, tp, ts, epoch, self.config.isolation_level))
        self._timeout(leader, self.config.request_timeout_ms, ("list", corr))

    def _find_coordinator(self) -> None:
        if self._find_corr >= 0 or self.config.group_id is None:
            return
        self._find_corr = self._next_corr()
        target = self.bootstrap[self._find_corr % len(self.bootstrap)]
        self.send(target, FindCoordinatorRequest(self._find_corr, self.config.group_id,
                                                 COORDINATOR_GROUP))
        self._timeout(target, self.config.request_timeout_ms, ("find", self._find_corr))

    def _fetch_committed(self) -> None:
        if self._offset_fetch is not None:
            return
        if self.coordinator < 0:
            self._find_coordinator()
            return
        assert self.config.group_id is not None
        tps = tuple(tp for tp in self.assignment
                    if tp not in self.positions and tp not in self._no_commit)
        corr = self._next_corr()
        self._offset_fetch = (corr, tps)
        self.send(self.coordinator, OffsetFetchRequest(corr, self.config.group_id, tps))
        self._timeout(self.coordinator, self.config.request_timeout_ms, ("offset-fetch", corr))

    def _on_group_response(self, message: object) -> None:
        match message:
            case FindCoordinatorResponse():
                if message.correlation_id != self._find_corr:
                    return
                self._find_corr = -1
                if message.error is Errors.NONE:
                    self.coordinator = message.node_id
            case OffsetFetchResponse() if message.correlation_id == self._report_fetch:
                self._report_fetch = -1
                if message.error is Errors.NONE:
                    self.committed = dict(message.offsets)
                elif message.error in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE):
                    self.coordinator = -1
            case OffsetFetchResponse():
                if self._offset_fetch is None or message.correlation_id != self._offset_fetch[0]:
                    return
                self._offset_fetch = None
                if message.error is Errors.NONE:
                    for tp, offset in message.offsets:
                        if tp not in self.assignment or tp in self.positions:
                            continue
                        if offset >= 0:
                            self.positions[tp] = offset
                        else:
                            self._no_commit.add(tp)
                elif message.error in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE):
                    self.coordinator = -1
            case OffsetCommitResponse():
                if message.correlation_id != self._commit_corr:
                    return
                self._commit_corr = -1
                self.commit_result = message.error
                if message.error in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE):
                    self.coordinator = -1
            case _:
                pass

    def _fetch_done(self, corr: int) -> tuple[int, tuple[TopicPartition, ...]] | None:
        entry = self._fetch_in_flight.pop(corr, None)
        self._last_asked = self._fetch_offsets.pop(corr, {})
        if entry is not None:
            self._busy_leaders.discard(entry[0])
        return entry

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self._now_ms = now_ms
        match message:
            case FetchResponse():
                if self._fetch_done(message.correlation_id) is None:
                    return
                asked = self._last_asked
                for r in message.partitions:
                    if self.positions.get(r.tp) == asked.get(r.tp):
                        self._apply(r)  # else the position moved (seek, reset): stale data
            case ListOffsetsResponse():
                tp = self._list_in_flight.pop(message.correlation_id, None)
                if tp is None:
                    return
                if message.correlation_id in self._list_for_end:
                    self._list_for_end.discard(message.correlation_id)
                    if message.error is Errors.NONE:
                        self.end_offsets[tp] = message.offset
                    return
                self._listing.discard(tp)
                if message.error is Errors.NONE and tp in self.assignment:
                    self.positions.setdefault(tp, message.offset)
                elif message.error is not Errors.OFFSET_NOT_AVAILABLE:
                    self._refresh_metadata()
            case MetadataResponse():
                self._on_metadata_response(now_ms, message)
            case FindCoordinatorResponse() | OffsetFetchResponse() | OffsetCommitResponse():
                self._on_group_response(message)
            case _:
                pass

    def _metadata_changed(self, image: MetadataImage) -> None:
        self._leaders = {s.tp: (s.leader, s.leader_epoch) for s in image.partitions}

    def _apply(self, r: FetchedPartition) -> None:
        tp = r.tp
        if tp not in self.positions:
            return
        if r.error is Errors.OFFSET_OUT_OF_RANGE:
            self.errors.append((tp, r.error))
            del self.positions[tp]  # auto.offset.reset on the next poll
            return
        if r.error is not Errors.NONE:
            self.errors.append((tp, r.error))
            self._leaders.pop(tp, None)
            self._refresh_metadata()
            return
        position = self.positions[tp]
        read_committed = self.config.isolation_level == 1
        aborted = sorted(r.aborted_transactions, key=lambda a: a[1])
        aborting: set[int] = set()  # producers whose records here belong to aborted transactions
        for batch in r.records:
            try:
                h = rec.parse_header(batch)
                if h.last_offset < position:
                    continue
                while aborted and aborted[0][1] <= h.last_offset:
                    aborting.add(aborted.pop(0)[0])
                if h.is_control:
                    # a marker: never handed to the application
                    if read_committed and h.producer_id in aborting and not rec.control_is_commit(batch):
                        aborting.discard(h.producer_id)
                    position = h.last_offset + 1
                    continue
                if read_committed and h.is_transactional and h.producer_id in aborting:
                    position = h.last_offset + 1  # records of an aborted transaction
                    continue
                decoded = rec.decode_records(batch)
            except rec.CorruptRecordError:
                self.errors.append((tp, Errors.CORRUPT_MESSAGE))
                self.positions[tp] = position
                return
            for record in decoded:
                if record.offset < position:
                    continue
                self.records.append(ConsumedRecord(tp, record.offset, record.key, record.value))
                position = record.offset + 1
        self.positions[tp] = position

    def timer(self, now_ms: int, key: Any) -> None:
        self._now_ms = now_ms
        if self._on_metadata_timer(key):
            return
        match key:
            case ("fetch", corr):
                done = self._fetch_done(corr)
                if done is not None:
                    self.close_connection(done[0])  # no answer in time: a new connection (Kafka's NetworkClient)
                    self._refresh_metadata()
            case ("find", corr):
                if corr == self._find_corr:
                    self._find_corr = -1
            case ("offset-fetch", corr):
                if self._offset_fetch is not None and self._offset_fetch[0] == corr:
                    self._offset_fetch = None
                    self._close_coordinator()
            case ("report-fetch", corr):
                if corr == self._report_fetch:
                    self._report_fetch = -1
                    self._close_coordinator()
            case ("commit", corr):
                if corr == self._commit_corr:
                    self._commit_corr = -1
                    self.commit_result = Errors.REQUEST_TIMED_OUT
                    self._close_coordinator()
            case ("list", corr):
                tp = self._list_in_flight.pop(corr, None)
                self._list_for_end.discard(corr)
                if tp is not None:
                    self._listing.discard(tp)
            case _:
                pass
