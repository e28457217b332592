"""What every workload's clients share.

A client is a sans-IO node that embeds a producer and a consumer of :mod:`reference`
(:class:`ClientBase` routes their messages and timers) and records its ops as
``Event("history", op-fields)`` outputs: the runtime stamps them with its clock, so the
clients cannot tell they are simulated. :class:`Budget` counts the ops left for all clients
together; values are integers unique per key, encoded as their decimal text.

:class:`FinalReader` runs after the faults are healed: it asks each partition's leader for
its end offset, then polls from the beginning until it has read up to those ends, or the
staleness bound runs out. Its ops are ordinary ``assign``/``poll`` ops of its own process.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from mypy_extensions import mypyc_attr

from reference.client import ClientNode
from reference.consumer import FETCH_MAX_BYTES, MAX_PARTITION_FETCH_BYTES, Consumer, ConsumerConfig
from reference.group_messages import (
    ConsumerGroupHeartbeatResponse,
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    SyncGroupResponse,
    TxnOffsetCommitResponse,
)
from reference.messages import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    FetchResponse,
    FindCoordinatorResponse,
    InitProducerIdResponse,
    ListOffsetsResponse,
    MetadataResponse,
    ProduceResponse,
    TopicPartition,
)
from reference.node import Node
from reference.producer import Producer, ProducerConfig

T = TypeVar("T")


def producer_config(timings: dict[str, int], acks: int = -1, idempotent: bool = True) -> ProducerConfig:
    """A simulated client's producer, as every harness (runs, hunts, the machines) builds it."""
    return ProducerConfig(acks=acks, linger_ms=2, retry_backoff_ms=50, request_timeout_ms=timings["request_timeout_ms"],
                          delivery_timeout_ms=timings["delivery_timeout_ms"], max_in_flight=5 if idempotent else 1,
                          retry_unknown_outcomes=idempotent, enable_idempotence=idempotent)


def consumer_config(timings: dict[str, int], read_committed: bool = False) -> ConsumerConfig:
    """A simulated client's consumer (read_committed for the transactional workloads)."""
    return ConsumerConfig(fetch_max_wait_ms=50, request_timeout_ms=timings["request_timeout_ms"],
                          isolation_level=1 if read_committed else 0)


@dataclass(slots=True)
class Budget:
    """Ops left for all clients together (the workload's --ops)."""

    remaining: int
    completed: int = 0


def randint(rng: random.Random, a: int, b: int) -> int:
    """``rng.randint(a, b)``, drawn as CPython's random module draws it (``randrange``'s
    ``_randbelow``: the fewest bits that hold ``b - a``, again until below it), in compiled
    code: random.py's three interpreted calls a draw cost more than a client's op
    (tests/kafkacheck/test_client.py holds it to ``rng.randint``)."""
    return a + _below(rng, b - a + 1)


def choice(rng: random.Random, seq: Sequence[T]) -> T:
    """``rng.choice(seq)``, drawn as :func:`randint` draws."""
    if not seq:
        raise IndexError("cannot choose from an empty sequence")
    return seq[_below(rng, len(seq))]


def _below(rng: random.Random, n: int) -> int:
    if n <= 0:
        raise ValueError("empty range for a random draw")
    k = n.bit_length()
    r = rng.getrandbits(k)
    while r >= n:
        r = rng.getrandbits(k)
    return r


def encode_value(value: int) -> bytes:
    return str(value).encode()


def decode_value(raw: bytes | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled, it stays open to the workloads' own modules
class ClientBase(Node):
    """Routes messages and timers to an embedded producer and consumer."""

    _producer: Producer | None = None
    # a plain or group consumer (reference.consumer, reference.group_consumer,
    # reference.modern_consumer) or a share consumer (reference.share_consumer): Any, not a type
    # variable of a generic class, which mypyc cannot compile (it crashes)
    _consumer: Any = None

    # the embedded producer and consumer tag their timers' keys "p" and "c" (unless tagged
    # already), so that timer() can route them back
    @property
    def producer(self) -> Producer | None:
        return self._producer

    @producer.setter
    def producer(self, p: Producer | None) -> None:
        if p is not None and not p.timer_tag:
            p.timer_tag = ("p",)
        self._producer = p

    @property
    def consumer(self) -> Any:
        assert self._consumer is not None
        return self._consumer

    @consumer.setter
    def consumer(self, c: ClientNode) -> None:
        if not c.timer_tag:
            c.timer_tag = ("c",)
        self._consumer = c

    def _route_message(self, now_ms: int, src: int, message: object) -> bool:
        match message:
            case (ProduceResponse() | InitProducerIdResponse() | AddPartitionsToTxnResponse()
                  | AddOffsetsToTxnResponse() | EndTxnResponse() | TxnOffsetCommitResponse()):
                if self.producer is not None:
                    self.producer.receive(now_ms, src, message)
            case (FetchResponse() | ListOffsetsResponse() | OffsetFetchResponse()
                  | OffsetCommitResponse() | JoinGroupResponse() | SyncGroupResponse()
                  | HeartbeatResponse() | LeaveGroupResponse() | ConsumerGroupHeartbeatResponse()):
                self.consumer.receive(now_ms, src, message)
            case MetadataResponse() | FindCoordinatorResponse():
                if message.correlation_id >= Consumer.CORRELATION_BASE:
                    self.consumer.receive(now_ms, src, message)
                elif self.producer is not None:
                    self.producer.receive(now_ms, src, message)
            case _:
                return False
        return True

    def _route_timer(self, now_ms: int, key: object) -> bool:
        match key:
            case ("p", inner):
                if self.producer is not None:
                    self.producer.timer(now_ms, inner)
            case ("c", inner):
                self.consumer.timer(now_ms, inner)
            case _:
                return False
        return True

    def connection_lost(self, now_ms: int, peer: int) -> None:
        """A connection of the client's closed (see :mod:`fault_injection.network`): what its
        producer and consumer had in flight there ends as its timeout would, through this
        node's own timer routing (one connection per broker for both, where Kafka's would
        each keep their own)."""
        for c in (self._producer, self._consumer):
            if c is not None:
                for key in c.expired_by(peer):
                    self.timer(now_ms, (*c.timer_tag, key))

    def drain(self) -> list:
        """Its own outputs, then the producer's, then the consumer's."""
        out = super().drain()
        producer, consumer = self._producer, self._consumer
        if producer is not None and producer._out:
            out += producer.drain()
        if consumer is not None and consumer._out:
            out += consumer.drain()
        return out

    def record(self, **op: Any) -> None:
        self.emit("history", op)


class FinalReader(ClientBase):
    """Reads every partition from the beginning to its end offset after healing."""

    def __init__(self, node_id: int, process: int, keys: list[TopicPartition],
                 bootstrap: list[int], consumer_config: ConsumerConfig,
                 deadline_ms: int, poll_ms: int = 200,
                 committed_keys: list[TopicPartition] | None = None) -> None:
        super().__init__(node_id)
        # with a group: read the group's committed offsets of these partitions at the end
        self.committed_keys = committed_keys
        self.asked_committed = False
        self.producer = None
        self.process = process
        self.keys = keys
        # the harness's reader, not the system under test: Kafka's default fetch sizes and
        # every buffered record a poll, so that reading to the end within the staleness bound
        # does not depend on the sizes a run drew for its clients
        consumer_config = replace(consumer_config, max_partition_fetch_bytes=MAX_PARTITION_FETCH_BYTES,
                                  fetch_max_bytes=FETCH_MAX_BYTES, max_poll_records=None)
        self.consumer = Consumer(node_id, bootstrap, consumer_config)
        self.deadline_ms = deadline_ms
        self.poll_ms = poll_ms
        self.done = False
        self.reached = False
        self.started_ms = 0
        self.finished_ms = 0
        self.polling = False

    def start(self, now_ms: int) -> None:
        self.started_ms = now_ms
        self.consumer.start(now_ms)
        keys = [tp.key for tp in self.keys]
        self.consumer.assign(list(self.keys))
        self.consumer.seek_to_beginning()
        self.record(process=self.process, type="invoke", f="assign", value=keys,
                    seek_to_beginning=True)
        self.record(process=self.process, type="ok", f="assign", value=keys,
                    seek_to_beginning=True)
        self.set_timer(50, "tick")

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self._route_message(now_ms, src, message)

    def timer(self, now_ms: int, key: object) -> None:
        if self._route_timer(now_ms, key) or self.done:
            return
        if key == "tick":
            if self.polling:
                self._finish_poll(now_ms)
            ends = self.consumer.end_offsets
            if len(ends) == len(self.keys) and all(
                self.consumer.positions.get(tp, 0) >= ends[tp] for tp in self.keys
            ):
                self.reached = True
                if self._committed_done(now_ms):
                    self.done = True
                    self.finished_ms = now_ms
                    return
                self.set_timer(self.poll_ms, "tick")
                return
            if now_ms >= self.deadline_ms:
                self.done = True
                self.finished_ms = now_ms
                return
            self.consumer.request_end_offsets()
            self.record(process=self.process, type="invoke", f="poll", value=[["poll"]])
            self.polling = True
            self.consumer.poll(now_ms)
            self.set_timer(self.poll_ms, "tick")

    def _finish_poll(self, now_ms: int) -> None:
        got: dict[str, list] = {}
        for r in self.consumer.take_records():
            read: list[int | str | None] = [r.offset, decode_value(r.value)]
            if r.key is not None:
                read.append(r.key.decode(errors="replace"))
            got.setdefault(r.tp.key, []).append(read)
        self.record(process=self.process, type="ok", f="poll", value=[["poll", got]])
        self.polling = False

    def _committed_done(self, now_ms: int) -> bool:
        """After the read: the group's committed offsets, asked until answered (or the
        deadline passes)."""
        if self.committed_keys is None:
            return True
        keys = [tp.key for tp in self.committed_keys]
        if not self.asked_committed:
            self.asked_committed = True
            self.record(process=self.process, type="invoke", f="committed", value=keys)
        if self.consumer.committed is not None:
            got = {tp.key: self.consumer.committed.get(tp, -1) for tp in self.committed_keys}
            self.record(process=self.process, type="ok", f="committed",
                        value={k: (v if v >= 0 else None) for k, v in got.items()})
            return True
        if now_ms >= self.deadline_ms:
            self.record(process=self.process, type="fail", f="committed", value=keys,
                        error="timeout")
            return True
        self.consumer.request_committed(list(self.committed_keys))
        return False
