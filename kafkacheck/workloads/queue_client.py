"""The queue workload's client: sends and polls, recorded as Jepsen-style ops.

Each :class:`QueueClient` is a sans-IO node holding a producer and a consumer (assigned to
every partition). It runs one op at a time: a ``send`` op of 1-3 sends to random keys, or a
``poll`` op that fetches from every partition once. Values are integers unique per key
over the whole run. A send op completes ``ok`` when every send got an offset, ``fail`` when
every send certainly failed, and ``info`` otherwise; after ``info`` the client continues as a
new process (Jepsen's rule) and records a fresh ``assign``.

It is compiled with the engine (:mod:`reference.compiled`), apart from the queue workload's
Hypothesis machine (:mod:`kafkacheck.workloads.queue`), and stays open to the other workloads'
clients, which extend it.
"""

from __future__ import annotations

import random
from typing import Any

from mypy_extensions import mypyc_attr

from kafkacheck.workloads.client import Budget, ClientBase, choice, decode_value, encode_value, randint
from kafkacheck.workloads.rules import send_completion
from reference.consumer import Consumer, ConsumerConfig
from reference.messages import TopicPartition
from reference.producer import Producer, ProducerConfig


def assign_every_key(client: ClientBase, process: int, keys: list[TopicPartition]) -> None:
    """Assign ``client``'s consumer every partition of ``keys``, recorded as one assign op (the
    queue's clients and the transactional ones)."""
    names = [tp.key for tp in keys]
    client.consumer.assign(list(keys))
    client.record(process=process, type="invoke", f="assign", value=names)
    client.record(process=process, type="ok", f="assign", value=names)


def unique_value(counters: dict[TopicPartition, int], tp: TopicPartition, n_clients: int, index: int) -> int:
    """The next value client ``index`` of ``n_clients`` writes to ``tp``: no other client writes it."""
    counters[tp] += 1
    return counters[tp] * n_clients + index


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled, it stays open to the other workloads' clients
class QueueClient(ClientBase):
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
        assert self.producer is not None  # (set in __init__, never replaced)
        self.producer.start(now_ms)
        self.consumer.start(now_ms)
        self._assign()
        self.set_timer(randint(self.rng, 1, 50), "next")

    def _assign(self) -> None:
        assign_every_key(self, self.process, self.keys)

    def _value(self, tp: TopicPartition) -> int:
        return unique_value(self.counters, tp, self.n_clients, self.index)

    # ------------------------------------------------------------ ops

    def _next_op(self, now_ms: int) -> None:
        if self.budget.remaining <= 0:
            self.done = True
            return
        self.budget.remaining -= 1
        self.op_seq += 1
        if self.rng.random() < self.send_p:
            n = randint(self.rng, 1, 3)
            sends: list[list[Any]] = []  # ["send", key, value]
            tps: list[TopicPartition] = []
            for _ in range(n):
                tp = choice(self.rng, self.keys)
                tps.append(tp)
                sends.append(["send", tp.key, self._value(tp)])
            self.op = {"f": "send", "value": sends}
            self.results = [None] * n
            self.pending = {}
            self.record(process=self.process, type="invoke", f="send", value=sends)
            assert self.producer is not None
            for i, (_, _key, value) in enumerate(sends):
                send_id = self.producer.send(now_ms, tps[i], encode_value(value))
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
        assert self.producer is not None
        for r in self.producer.take_results():
            i = self.pending.pop(r.send_id, None)
            if i is not None:
                self.results[i] = r
        if self.op is None or self.op["f"] != "send" or self.pending:
            return
        type_, value, error, acknowledged = send_completion(
            [(key, v, None) for _, key, v in self.op["value"]], self.results)
        if self.acks == -1:
            for key, offset in acknowledged:
                self.emit("acked", {"key": key, "offset": offset})
        self.record(process=self.process, type=type_, f="send", value=value, error=error)
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
        self.set_timer(randint(self.rng, 0, self.think_ms), "next")

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
