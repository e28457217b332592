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

from reference import records as rec
from reference.client import ClientNode
from reference.errors import Errors
from reference.messages import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataImage,
    MetadataResponse,
    TopicPartition,
)

ERRORS_KEPT_MAX = 100


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    auto_offset_reset: str = "earliest"
    fetch_max_wait_ms: int = 500
    request_timeout_ms: int = 30_000
    isolation_level: int = 0  # 1: read_committed (up to the last stable offset, aborted dropped)
    max_partition_fetch_bytes: int = 1 << 20
    metadata_timeout_ms: int = 1_000
    retry_backoff_ms: int = 100


@dataclass(frozen=True, slots=True)
class ConsumedRecord:
    tp: TopicPartition
    offset: int
    key: bytes | None
    value: bytes | None


class Consumer(ClientNode):
    CORRELATION_BASE = 1 << 40

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
        self._busy_leaders: set[int] = set()
        self._list_in_flight: dict[int, TopicPartition] = {}
        self._listing: set[TopicPartition] = set()
        self._list_for_end: set[int] = set()
        self.end_offsets: dict[TopicPartition, int] = {}

    def start(self, now_ms: int) -> None:
        self._now_ms = now_ms
        self._refresh_metadata()

    # ------------------------------------------------------------ API

    def assign(self, tps: list[TopicPartition]) -> None:
        self.assignment = tuple(tps)
        self.positions = {tp: o for tp, o in self.positions.items() if tp in tps}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.positions[tp] = offset

    def seek_to_beginning(self) -> None:
        self.positions = {tp: 0 for tp in self.assignment}

    def poll(self, now_ms: int) -> None:
        """Start fetches for every assigned partition that is not being fetched."""
        self._now_ms = now_ms
        by_leader: dict[int, list[FetchPartition]] = {}
        for tp in self.assignment:
            leader, epoch = self._leaders.get(tp, (-1, -1))
            if leader < 0:
                self._refresh_metadata()
                continue
            if tp not in self.positions:
                self._list_offsets(tp, leader, epoch)
                continue
            if leader in self._busy_leaders:
                continue
            by_leader.setdefault(leader, []).append(FetchPartition(
                tp, epoch, self.positions[tp], -1, self.config.max_partition_fetch_bytes))
        for leader, parts in sorted(by_leader.items()):
            corr = self._next_corr()
            self._fetch_in_flight[corr] = (leader, tuple(p.tp for p in parts))
            self._busy_leaders.add(leader)
            self.send(leader, FetchRequest(corr, -1, -1, self.config.fetch_max_wait_ms,
                                           self.config.isolation_level, tuple(parts)))
            self.set_timer(self.config.fetch_max_wait_ms + self.config.request_timeout_ms,
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
            self.set_timer(self.config.request_timeout_ms, ("list", corr))

    def take_records(self) -> list[ConsumedRecord]:
        out, self.records = self.records, []
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
        self.set_timer(self.config.request_timeout_ms, ("list", corr))

    def _fetch_done(self, corr: int) -> tuple[int, tuple[TopicPartition, ...]] | None:
        entry = self._fetch_in_flight.pop(corr, None)
        if entry is not None:
            self._busy_leaders.discard(entry[0])
        return entry

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self._now_ms = now_ms
        match message:
            case FetchResponse():
                if self._fetch_done(message.correlation_id) is None:
                    return
                for r in message.partitions:
                    self._apply(r)
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
            case _:
                pass

    def _metadata_changed(self, image: MetadataImage) -> None:
        self._leaders = {s.tp: (s.leader, s.leader_epoch) for s in image.partitions}

    def _apply(self, r) -> None:
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

    def timer(self, now_ms: int, key: object) -> None:
        self._now_ms = now_ms
        if self._on_metadata_timer(key):
            return
        match key:
            case ("fetch", corr):
                if self._fetch_done(corr) is not None:
                    self._refresh_metadata()
            case ("list", corr):
                tp = self._list_in_flight.pop(corr, None)
                self._list_for_end.discard(corr)
                if tp is not None:
                    self._listing.discard(tp)
            case _:
                pass
