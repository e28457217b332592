"""A sans-IO producer: batching, leader routing, retries, timeouts.

Theory of operation
-------------------
``send`` puts a record into the open batch of its partition. A batch is sent when it is
full (``batch_size`` bytes) or ``linger_ms`` has passed, to the partition's leader from the
last metadata, with at most ``max_in_flight`` batches per partition outstanding. A response
with an error is retried after ``retry_backoff_ms`` (metadata is refreshed first when the
leader moved) until ``retries`` or ``delivery_timeout_ms`` run out.

With ``enable_idempotence`` the producer first gets a producer id (InitProducerId), numbers
each partition's batches with sequence numbers fixed at the first send, and retries every
retriable outcome safely: the broker drops a retried batch it already has and names the
original offset. Retried batches go back in sequence order, so order holds across
retries with up to 5 batches in flight.

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
from typing import Any, ClassVar, final

from reference import records as rec
from reference.client import ClientNode
from reference.errors import MAYBE_APPENDED, MAYBE_APPENDED_ACKS_ALL, RETRIABLE, Errors
from reference.frozen import frozen, own_init
from reference.messages import (
    InitProducerIdRequest,
    InitProducerIdResponse,
    MetadataImage,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
    TopicPartition,
)
from reference.node import Node

_PRODUCER_FATAL = frozenset({Errors.UNKNOWN_PRODUCER_ID, Errors.INVALID_PRODUCER_EPOCH})
_LEADER_MOVED = frozenset({Errors.NOT_LEADER_OR_FOLLOWER, Errors.UNKNOWN_TOPIC_OR_PARTITION,
                           Errors.LEADER_NOT_AVAILABLE, Errors.FENCED_LEADER_EPOCH,
                           Errors.UNKNOWN_LEADER_EPOCH, Errors.NETWORK_EXCEPTION,
                           Errors.KAFKA_STORAGE_ERROR})


@frozen
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
    enable_idempotence: bool = False

    def __post_init__(self) -> None:
        if self.enable_idempotence and (self.acks != -1 or not 1 <= self.max_in_flight <= 5):
            raise ValueError("enable.idempotence needs acks=all and max.in.flight between 1 and 5")


@final
@dataclass(init=False, frozen=True, slots=True)
class SendResult:
    send_id: int
    tp: TopicPartition
    error: Errors
    offset: int  # -1 when unknown (acks=0 or failed)
    maybe_appended: bool

    def __init__(self, send_id: int, tp: TopicPartition, error: Errors, offset: int, maybe_appended: bool) -> None:
        self.send_id = send_id  # type: ignore[misc]
        self.tp = tp  # type: ignore[misc]
        self.error = error  # type: ignore[misc]
        self.offset = offset  # type: ignore[misc]
        self.maybe_appended = maybe_appended  # type: ignore[misc]


own_init(SendResult)


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
    base_sequence: int = -1  # fixed at the first send: retries carry the same sequences
    data: bytes | None = None  # the encoded batch, fixed at the first send


class Producer(ClientNode):
    CORRELATION_BASE: ClassVar[int] = 0

    def __init__(self, node_id: int, bootstrap: list[int], config: ProducerConfig) -> None:
        super().__init__(node_id, bootstrap, config.metadata_timeout_ms, config.retry_backoff_ms)
        self.config = config
        self._leaders: dict[TopicPartition, int] = {}
        self.queues: dict[TopicPartition, deque[_Batch]] = {}
        self.in_flight: dict[int, tuple[_Batch, int]] = {}  # corr -> (batch, leader)
        self.in_flight_count: dict[TopicPartition, int] = {}
        self.results: list[SendResult] = []
        self._next_send_id = 0
        self.producer_id = -1
        self.producer_epoch = -1
        self._sequences: dict[TopicPartition, int] = {}
        self._init_corr = -1
        self._needs_reset = False  # a numbered batch failed: its sequence left a gap
        self.transactional_id: str | None = None  # set by TransactionalProducer

    def start(self, now_ms: int) -> None:
        self._now_ms = now_ms
        self._refresh_metadata()
        if self.config.enable_idempotence:
            self._init_producer_id()

    # ------------------------------------------------------------ API

    # (a producer's send is KafkaProducer.send, not Node.send: its messages go by send_message)
    def send(self, now_ms: int, tp: TopicPartition, value: bytes | None,  # type: ignore[override]
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

    def _init_producer_id(self) -> None:
        """Ask any broker for a producer id (retried until one answers)."""
        if self._init_corr >= 0:
            return
        self._init_corr = self._next_corr()
        target = self.bootstrap[self._init_corr % len(self.bootstrap)]
        self.send_message(target, InitProducerIdRequest(self._init_corr))
        self._timeout(target, self.config.request_timeout_ms, ("init", self._init_corr))

    def _on_init_producer_id(self, now_ms: int, resp: InitProducerIdResponse) -> None:
        if resp.correlation_id != self._init_corr:
            return
        self._init_corr = -1
        if resp.error is Errors.NONE:
            self.producer_id, self.producer_epoch = resp.producer_id, resp.producer_epoch
            self._sequences.clear()
            self._drain(now_ms)
        else:
            self.set_timer(self.config.retry_backoff_ms, "init-again")

    def _reset_sequences(self) -> None:
        """Start again under a fresh producer id after a gap (as KIP-360 does with an epoch
        bump). Batches already sent under the old id may have been written: they end with an
        unknown outcome rather than risk a duplicate; unsent ones are numbered anew."""
        self._needs_reset = False
        self.producer_id = -1
        self._sequences.clear()
        for tp in sorted(self.queues):
            q = self.queues[tp]
            keep: deque[_Batch] = deque()
            for b in q:
                if b.attempts > 0:
                    # given up, as after a timeout (the broker never said its sequence was
                    # out of order: an idempotent producer is told that only after a loss)
                    self._finish(b, Errors.REQUEST_TIMED_OUT, -1)
                else:
                    keep.append(b)
            self.queues[tp] = keep
        self._init_producer_id()

    def _requeue(self, b: _Batch) -> None:
        """Put a batch back for retry, in sequence order (idempotence keeps order)."""
        q = self.queues.setdefault(b.tp, deque())
        i = 0
        while i < len(q) and 0 <= q[i].base_sequence < b.base_sequence:
            i += 1
        q.insert(i, b)

    def _earlier_unresolved(self, b: _Batch) -> bool:
        """True while a batch with a smaller sequence to the same partition is unresolved."""
        pending = [x for x, _l in self.in_flight.values()] + list(self.queues.get(b.tp, ()))
        return any(x.tp == b.tp and 0 <= x.base_sequence < b.base_sequence for x in pending)

    def _ready_to_send(self) -> bool:
        """False while the producer may not send at all (no producer id yet)."""
        if self.config.enable_idempotence:
            if self._needs_reset:
                if self.in_flight:
                    return False  # let every outstanding request resolve first
                self._reset_sequences()
            if self.producer_id < 0:
                self._init_producer_id()
                return False
        return True

    def _partition_ready(self, tp: TopicPartition) -> bool:
        """False while batches for ``tp`` must wait (a transaction has not added it yet)."""
        return True

    def _drain(self, now_ms: int) -> None:
        if not self._ready_to_send():
            return
        for tp in list(self.queues):
            q = self.queues[tp]
            if q and not self._partition_ready(tp):
                continue
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
        if b.data is None:
            if self.config.enable_idempotence:
                b.base_sequence = self._sequences.get(b.tp, 0)
                self._sequences[b.tp] = b.base_sequence + len(b.records)
                b.data = rec.encode_batch([r for _, r in b.records], producer_id=self.producer_id,
                                          producer_epoch=self.producer_epoch,
                                          base_sequence=b.base_sequence,
                                          transactional=self.transactional_id is not None)
            else:
                b.data = rec.encode_batch([r for _, r in b.records])
        corr = self._next_corr()
        self.send_message(leader, ProduceRequest(corr, self.config.acks,
                                                 self.config.request_timeout_ms, b.tp, b.data,
                                                 self.transactional_id))
        if self.config.acks == 0:
            self._finish(b, Errors.NONE, -1)
            return
        self.in_flight[corr] = (b, leader)
        self.in_flight_count[b.tp] = self.in_flight_count.get(b.tp, 0) + 1
        self.set_timer(self.config.request_timeout_ms, ("request", corr))

    def _finish(self, b: _Batch, error: Errors, base_offset: int) -> None:
        if (error is not Errors.NONE and b.data is not None and self.config.enable_idempotence
                and rec.producer_id_of(b.data) == self.producer_id):
            self._needs_reset = True
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
        if error is Errors.DUPLICATE_SEQUENCE_NUMBER:
            error = Errors.NONE  # already written: the broker names the original offset
        if error is Errors.NONE:
            self._finish(b, Errors.NONE, base_offset)
        elif self.config.enable_idempotence and error in _PRODUCER_FATAL:
            # the broker no longer knows this producer (or a newer epoch exists): give the
            # batch up and start again with a fresh producer id
            self._finish(b, error, -1)
        elif (error is Errors.OUT_OF_ORDER_SEQUENCE_NUMBER and self.config.enable_idempotence
              and not self._earlier_unresolved(b)):
            self._finish(b, error, -1)  # a real gap: nothing earlier can fill it
        else:
            unknown = MAYBE_APPENDED_ACKS_ALL if self.config.acks == -1 else MAYBE_APPENDED
            if error in unknown:
                b.maybe_appended = True
            retriable = (error in RETRIABLE or error in MAYBE_APPENDED
                         or error is Errors.OUT_OF_ORDER_SEQUENCE_NUMBER)
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
                self._requeue(b)
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
            case InitProducerIdResponse():
                self._on_init_producer_id(now_ms, message)
            case MetadataResponse():
                if self._on_metadata_response(now_ms, message):
                    self._drain(now_ms)
            case _:
                pass

    def _metadata_changed(self, image: MetadataImage) -> None:
        self._leaders = {s.tp: s.leader for s in image.partitions}

    def expired_by(self, peer: int) -> list:
        """Also every produce request in flight to ``peer``: they are retried in sequence order
        on a new connection (the timer ``("lost", peer)``)."""
        return [*super().expired_by(peer), ("lost", peer)]

    def _close(self, now_ms: int, peer: int) -> None:
        """Close the connection to ``peer`` (a request on it got no answer in time), which
        fails what else was in flight there."""
        self.close_connection(peer)
        self._lost(now_ms, peer)

    def _lost(self, now_ms: int, peer: int) -> None:
        """Fail what was in flight on the closed connection to ``peer``."""
        for corr in sorted(c for c, (_b, leader) in self.in_flight.items() if leader == peer):
            self._complete(now_ms, corr, Errors.NETWORK_EXCEPTION, -1)

    def timer(self, now_ms: int, key: Any) -> None:
        self._now_ms = now_ms
        if self._on_metadata_timer(key):
            return
        match key:
            case ("lost", peer):
                self._lost(now_ms, peer)
            case ("request", corr):
                if corr in self.in_flight:
                    # no answer in time: close the connection, failing every request on it
                    # (Kafka's NetworkClient does), so that the retries go on a new one
                    self._close(now_ms, self.in_flight[corr][1])
            case ("init", corr):
                if corr == self._init_corr:
                    self._init_corr = -1
                    self._close(now_ms, self.bootstrap[corr % len(self.bootstrap)])  # where it asked
                    self._init_producer_id()
            case "init-again":
                self._init_producer_id()
            case _:
                self._drain(now_ms)
