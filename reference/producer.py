"""A sans-IO producer: batching, leader routing, retries, timeouts.

Theory of operation
-------------------
``send`` puts a record into the open batch of its partition. A batch is sent when it is
full (``batch_size`` bytes) or ``linger_ms`` has passed, to the partition's leader from the
last metadata, with at most ``max_in_flight`` batches per partition outstanding. A response
with an error is retried after ``retry_backoff_ms`` (metadata is refreshed first when the
leader moved) until ``retries`` or ``delivery_timeout_ms`` run out.

Each send ends in one :class:`SendResult`: an offset, or an error with ``maybe_appended``
telling whether any attempt may have been written (a timeout, a lost response,
``NOT_ENOUGH_REPLICAS_AFTER_APPEND``, and with acks=all ``NOT_LEADER_OR_FOLLOWER``).
Without idempotence a retry after such an outcome may duplicate the record, which Kafka
permits; ``retry_unknown_outcomes=False`` stops retrying at the first unknown outcome
instead, so every duplicate is the broker's doing.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from reference import records as rec
from reference.client import ClientNode
from reference.errors import MAYBE_APPENDED, MAYBE_APPENDED_ACKS_ALL, RETRIABLE, Errors
from reference.messages import (
    MetadataImage,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
    TopicPartition,
)
from reference.node import Node

_LEADER_MOVED = frozenset({Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_TOPIC_OR_PARTITION,
                           Errors.LEADER_NOT_AVAILABLE, Errors.FENCED_LEADER_EPOCH,
                           Errors.UNKNOWN_LEADER_EPOCH, Errors.NETWORK_EXCEPTION,
                           Errors.KAFKA_STORAGE_ERROR})


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    acks: int = -1
    linger_ms: int = 5
    batch_size: int = 16_384
    retries: int = 2**31 - 1
    retry_backoff_ms: int = 100
    delivery_timeout_ms: int = 120_000
    request_timeout_ms: int = 30_000
    max_in_flight: int = 5
    metadata_timeout_ms: int = 1_000
    retry_unknown_outcomes: bool = True


@dataclass(frozen=True, slots=True)
class SendResult:
    send_id: int
    tp: TopicPartition
    error: Errors
    offset: int  # -1 when unknown (acks=0 or failed)
    maybe_appended: bool


@dataclass(slots=True)
class _Batch:
    tp: TopicPartition
    created_ms: int
    records: list[tuple[int, rec.RecordInput]] = field(default_factory=list)
    size: int = 0
    closed: bool = False
    attempts: int = 0
    maybe_appended: bool = False
    retry_at_ms: int = 0


class Producer(ClientNode):
    CORRELATION_BASE = 0

    def __init__(self, node_id: int, bootstrap: list[int], config: ProducerConfig) -> None:
        super().__init__(node_id, bootstrap, config.metadata_timeout_ms, config.retry_backoff_ms)
        self.config = config
        self._leaders: dict[TopicPartition, int] = {}
        self.queues: dict[TopicPartition, deque[_Batch]] = {}
        self.in_flight: dict[int, tuple[_Batch, int]] = {}  # corr -> (batch, leader)
        self.in_flight_count: dict[TopicPartition, int] = {}
        self.results: list[SendResult] = []
        self._next_send_id = 0

    def start(self, now_ms: int) -> None:
        self._now_ms = now_ms
        self._refresh_metadata()

    # ------------------------------------------------------------ API

    def send(self, now_ms: int, tp: TopicPartition, value: bytes | None,
             key: bytes | None = None) -> int:
        self._now_ms = now_ms
        send_id = self._next_send_id
        self._next_send_id += 1
        q = self.queues.setdefault(tp, deque())
        if not q or q[-1].closed or q[-1].attempts:
            q.append(_Batch(tp, now_ms))
            self.set_timer(self.config.linger_ms, ("linger", tp))
        b = q[-1]
        b.records.append((send_id, rec.RecordInput(key, value, (), now_ms)))
        b.size += len(value or b"") + len(key or b"") + 16
        if b.size >= self.config.batch_size:
            b.closed = True
        self._drain(now_ms)
        return send_id

    def take_results(self) -> list[SendResult]:
        out, self.results = self.results, []
        return out

    # ------------------------------------------------------------ machinery

    def send_message(self, dst: int, message: object) -> None:
        Node.send(self, dst, message)

    def _drain(self, now_ms: int) -> None:
        for tp in list(self.queues):
            q = self.queues[tp]
            while q:
                b = q[0]
                if self.in_flight_count.get(tp, 0) >= self.config.max_in_flight:
                    break
                if not b.closed and b.attempts == 0 and now_ms - b.created_ms < self.config.linger_ms:
                    break
                if b.retry_at_ms > now_ms:
                    break
                if now_ms - b.created_ms >= self.config.delivery_timeout_ms:
                    q.popleft()
                    self._finish(b, Errors.REQUEST_TIMED_OUT, -1)
                    continue
                leader = self._leaders.get(tp, -1)
                if leader < 0:
                    self._refresh_metadata()
                    break
                q.popleft()
                self._send_batch(now_ms, b, leader)

    def _send_batch(self, now_ms: int, b: _Batch, leader: int) -> None:
        b.closed = True
        b.attempts += 1
        data = rec.encode_batch([r for _, r in b.records])
        corr = self._next_corr()
        self.send_message(leader, ProduceRequest(corr, self.config.acks,
                                                 self.config.request_timeout_ms, b.tp, data))
        if self.config.acks == 0:
            self._finish(b, Errors.NONE, -1)
            return
        self.in_flight[corr] = (b, leader)
        self.in_flight_count[b.tp] = self.in_flight_count.get(b.tp, 0) + 1
        self.set_timer(self.config.request_timeout_ms, ("request", corr))

    def _finish(self, b: _Batch, error: Errors, base_offset: int) -> None:
        for i, (send_id, _r) in enumerate(b.records):
            offset = base_offset + i if error is Errors.NONE and base_offset >= 0 else -1
            self.results.append(SendResult(send_id, b.tp, error, offset,
                                           error is not Errors.NONE and b.maybe_appended))

    def _complete(self, now_ms: int, corr: int, error: Errors, base_offset: int) -> None:
        entry = self.in_flight.pop(corr, None)
        if entry is None:
            return
        b, _leader = entry
        self.in_flight_count[b.tp] -= 1
        if error is Errors.NONE:
            self._finish(b, Errors.NONE, base_offset)
        else:
            unknown = MAYBE_APPENDED_ACKS_ALL if self.config.acks == -1 else MAYBE_APPENDED
            if error in unknown:
                b.maybe_appended = True
            retriable = (error in RETRIABLE or error in MAYBE_APPENDED)
            if error in _LEADER_MOVED:
                self._leaders.pop(b.tp, None)
                self._refresh_metadata()
            if (
                retriable
                and b.attempts <= self.config.retries
                and now_ms - b.created_ms < self.config.delivery_timeout_ms
                and (self.config.retry_unknown_outcomes or not b.maybe_appended)
            ):
                b.retry_at_ms = now_ms + self.config.retry_backoff_ms
                self.queues.setdefault(b.tp, deque()).appendleft(b)
                self.set_timer(self.config.retry_backoff_ms, ("retry", b.tp))
            else:
                self._finish(b, error, -1)
        self._drain(now_ms)

    # ------------------------------------------------------------ inputs

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self._now_ms = now_ms
        match message:
            case ProduceResponse():
                self._complete(now_ms, message.correlation_id, message.error, message.base_offset)
            case MetadataResponse():
                if self._on_metadata_response(now_ms, message):
                    self._drain(now_ms)
            case _:
                pass

    def _metadata_changed(self, image: MetadataImage) -> None:
        self._leaders = {s.tp: s.leader for s in image.partitions}

    def timer(self, now_ms: int, key: object) -> None:
        self._now_ms = now_ms
        if self._on_metadata_timer(key):
            return
        match key:
            case ("request", corr):
                if corr in self.in_flight:
                    self._complete(now_ms, corr, Errors.NETWORK_EXCEPTION, -1)
            case _:
                self._drain(now_ms)
