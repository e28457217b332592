"""The queue workload: client processes that send and poll, recorded as Jepsen-style ops.

Each :class:`QueueClient` is a sans-IO node holding a producer and a consumer (assigned to
every partition). It runs one op at a time: a ``send`` op of 1-3 sends to random keys, or a
``poll`` op that fetches from every partition once. Values are integers unique per key
over the whole run. A send op completes ``ok`` when every send got an offset, ``fail`` when
every send certainly failed, and ``info`` otherwise; after ``info`` the client continues as a
new process (Jepsen's rule) and records a fresh ``assign``.

:class:`FinalReader` runs after the faults are healed: it asks each partition's leader for
its end offset, then polls from the beginning until it has read up to those ends, or the
staleness bound runs out. Its ops are ordinary ``assign``/``poll`` ops of its own process.

Ops reach the history as ``Event("history", op-fields)`` outputs: the runtime stamps them
with its clock, so the clients cannot tell they are simulated.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from reference.consumer import Consumer, ConsumerConfig
from reference.errors import Errors
from reference.messages import (
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    FetchResponse,
    FindCoordinatorResponse,
    HeartbeatResponse,
    InitProducerIdResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    ListOffsetsResponse,
    MetadataResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    ProduceResponse,
    SyncGroupResponse,
    TopicPartition,
    TxnOffsetCommitResponse,
)
from reference.node import Node
from reference.producer import Producer, ProducerConfig


@dataclass(slots=True)
class Budget:
    """Ops left for all clients together (the workload's --ops)."""

    remaining: int
    completed: int = 0


def _encode(value: int) -> bytes:
    return str(value).encode()


def decode_value(raw: bytes | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


class _ClientBase(Node):
    """Routes messages and timers to an embedded producer and consumer."""

    _producer: Producer | None = None
    _consumer: Consumer | None = None

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
    def consumer(self) -> Consumer:
        assert self._consumer is not None
        return self._consumer

    @consumer.setter
    def consumer(self, c: Consumer) -> None:
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
                  | HeartbeatResponse() | LeaveGroupResponse()):
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

    def drain(self) -> list:
        """Its own outputs, then the producer's, then the consumer's."""
        out = super().drain()
        producer, consumer = self._producer, self._consumer
        if producer is not None and producer._out:
            out += producer.drain()
        if consumer is not None and consumer._out:
            out += consumer.drain()
        return out

    def record(self, **op) -> None:
        self.event("history", **op)


class QueueClient(_ClientBase):
    def __init__(self, node_id: int, index: int, n_clients: int, keys: list[TopicPartition],
                 bootstrap: list[int], rng: random.Random, budget: Budget,
                 producer_config: ProducerConfig, consumer_config: ConsumerConfig,
                 poll_ms: int = 100, think_ms: int = 20, send_p: float = 0.5) -> None:
        super().__init__(node_id)
        self.send_p = send_p
        self.index = index
        self.n_clients = n_clients
        self.keys = keys
        self.rng = rng
        self.budget = budget
        self.poll_ms = poll_ms
        self.think_ms = think_ms
        self.producer = Producer(node_id, bootstrap, producer_config)
        self.consumer = Consumer(node_id, bootstrap, consumer_config)
        self.process = index
        self.counters = {tp: 0 for tp in keys}
        self.op: dict | None = None
        self.pending: dict[int, int] = {}  # send id -> micro-op position
        self.results: list = []
        self.op_seq = 0
        self.done = False
        self.acks = producer_config.acks

    def start(self, now_ms: int) -> None:
        self.producer.start(now_ms)
        self.consumer.start(now_ms)
        self._assign()
        self.set_timer(self.rng.randint(1, 50), "next")

    def _assign(self) -> None:
        keys = [tp.key for tp in self.keys]
        self.consumer.assign(list(self.keys))
        self.record(process=self.process, type="invoke", f="assign", value=keys)
        self.record(process=self.process, type="ok", f="assign", value=keys)

    def _value(self, tp: TopicPartition) -> int:
        self.counters[tp] += 1
        return self.counters[tp] * self.n_clients + self.index

    # ------------------------------------------------------------ ops

    def _next_op(self, now_ms: int) -> None:
        if self.budget.remaining <= 0:
            self.done = True
            return
        self.budget.remaining -= 1
        self.op_seq += 1
        if self.rng.random() < self.send_p:
            n = self.rng.randint(1, 3)
            sends = []
            for _ in range(n):
                tp = self.rng.choice(self.keys)
                sends.append(["send", tp.key, self._value(tp)])
            self.op = {"f": "send", "value": sends}
            self.results = [None] * n
            self.pending = {}
            self.record(process=self.process, type="invoke", f="send", value=sends)
            for i, (_, key, value) in enumerate(sends):
                send_id = self.producer.send(now_ms, TopicPartition.parse(key), _encode(value))
                self.pending[send_id] = i
            self._collect_sends(now_ms)
        else:
            self._start_poll(now_ms)

    def _start_poll(self, now_ms: int) -> None:
        self.op = {"f": "poll", "value": [["poll"]]}
        self.record(process=self.process, type="invoke", f="poll", value=[["poll"]])
        # records fetched after the previous poll ended stay buffered for this one
        self.consumer.poll(now_ms)
        self.set_timer(self.poll_ms, ("poll-done", self.op_seq))

    def _collect_sends(self, now_ms: int) -> None:
        for r in self.producer.take_results():
            i = self.pending.pop(r.send_id, None)
            if i is not None:
                self.results[i] = r
        if self.op is None or self.op["f"] != "send" or self.pending:
            return
        sends = self.op["value"]
        value = []
        errors = set()
        all_failed = True
        maybe = False
        for (_, key, v), r in zip(sends, self.results, strict=True):
            if r.error is Errors.NONE:
                all_failed = False
                value.append(["send", key, [r.offset if r.offset >= 0 else None, v]])
                if self.acks == -1 and r.offset >= 0:
                    self.event("acked", key=key, offset=r.offset)
            else:
                errors.add(r.error.name)
                maybe = maybe or r.maybe_appended
                value.append(["send", key, v])
        if not errors:
            type_ = "ok"
        elif all_failed and not maybe:
            type_ = "fail"
        else:
            type_ = "info"
        self.record(process=self.process, type=type_, f="send", value=value,
                    error=",".join(sorted(errors)) if errors else None)
        self._finish_op(now_ms, type_)

    def _finish_poll(self, now_ms: int) -> None:
        got: dict[str, list] = {}
        for r in self.consumer.take_records():
            v = decode_value(r.value)
            got.setdefault(r.tp.key, []).append([r.offset, v])
        self.record(process=self.process, type="ok", f="poll", value=[["poll", got]])
        self._finish_op(now_ms, "ok")

    def _finish_op(self, now_ms: int, type_: str) -> None:
        self.op = None
        self.budget.completed += 1
        if type_ == "info":
            self.process += self.n_clients
            self._assign()
        self.set_timer(self.rng.randint(0, self.think_ms), "next")

    # ------------------------------------------------------------ inputs

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self._route_message(now_ms, src, message)
        if self.op is not None and self.op["f"] == "send":
            self._collect_sends(now_ms)

    def timer(self, now_ms: int, key: object) -> None:
        if self._route_timer(now_ms, key):
            if self.op is not None and self.op["f"] == "send":
                self._collect_sends(now_ms)
            return
        match key:
            case "next":
                if self.op is None:
                    self._next_op(now_ms)
            case ("poll-done", seq):
                if self.op is not None and self.op["f"] == "poll" and seq == self.op_seq:
                    self._finish_poll(now_ms)


class FinalReader(_ClientBase):
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
            read = [r.offset, decode_value(r.value)]
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
