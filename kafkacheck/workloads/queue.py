"""The queue workload: client processes that send and poll, recorded as Jepsen-style ops.

Each :class:`QueueClient` is a sans-IO node holding a producer and a consumer (assigned to
every partition). It runs one op at a time: a ``send`` op of 1-3 sends to random keys, or a
``poll`` op that fetches from every partition once. Values are integers unique per key
over the whole run. A send op completes ``ok`` when every send got an offset, ``fail`` when
every send certainly failed, and ``info`` otherwise; after ``info`` the client continues as a
new process (Jepsen's rule) and records a fresh ``assign``.
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from fault_injection.cluster import MS
from fault_injection.model_shapes import template_schedule
from kafkacheck.workloads.actors import Reader, Writer
from kafkacheck.workloads.base import Workload
from kafkacheck.workloads.client import Budget, ClientBase, decode_value, encode_value
from kafkacheck.workloads.machine import BROKERS, MODEL_SHAPES, PARTITIONS, ClusterMachine
from kafkacheck.workloads.rules import send_completion
from reference.consumer import Consumer, ConsumerConfig
from reference.messages import (
    TopicPartition,
)
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
        self.set_timer(self.rng.randint(1, 50), "next")

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
            n = self.rng.randint(1, 3)
            sends: list[list[Any]] = []  # ["send", key, value]
            for _ in range(n):
                tp = self.rng.choice(self.keys)
                sends.append(["send", tp.key, self._value(tp)])
            self.op = {"f": "send", "value": sends}
            self.results = [None] * n
            self.pending = {}
            self.record(process=self.process, type="invoke", f="send", value=sends)
            assert self.producer is not None
            for i, (_, key, value) in enumerate(sends):
                send_id = self.producer.send(now_ms, TopicPartition.parse(key), encode_value(value))
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
                self.event("acked", key=key, offset=offset)
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


class QueueMachine(ClusterMachine):
    """Two producers (acks and idempotence drawn at boot) and two consumers."""

    focus = ("follower-truncate-diverging", "follower-truncate-below-hw", "fetch-diverging-epoch",
             "become-follower-with-uncommitted-tail", "controller-elect-from-elr", "produce-duplicate-sequence")

    @initialize(seed=st.integers(0, 2**16), acks=st.sampled_from(["all", "1"]), idempotent=st.booleans(),
                replication=st.sampled_from([3, 2]))
    def boot(self, seed: int, acks: str, idempotent: bool, replication: int = 3) -> None:
        self._boot(seed, acks=acks, idempotent=idempotent and acks == "all", replication=replication)

    def make_actors(self) -> None:
        acks = -1 if self.options["acks"] == "all" else 1
        # (partials of module functions, not lambdas: mypyc cannot compile a closure in a method
        # of the machine, a Python class; what a lambda read when called they read when called)
        for _ in range(2):
            self.add_actor(partial(_writer, self, acks))
        for _ in range(2):
            self.add_actor(partial(_reader, self))

    def config(self) -> dict:
        return {**super().config(), "acks": self.options["acks"],
                "idempotence": self.options["idempotent"]}

    @rule(writer=st.integers(0, 1), partitions=st.lists(st.integers(0, PARTITIONS - 1), min_size=1, max_size=3))
    def produce(self, writer: int, partitions: list[int]) -> None:
        self._step("produce", writer=writer, partitions=partitions)
        self.command(writer, ("send", [(self.keys[p], self.value(self.keys[p]), None) for p in partitions]))

    @rule(reader=st.integers(0, 1))
    def poll(self, reader: int) -> None:
        self._step("poll", reader=reader)
        self.command(2 + reader, ("poll",))

    @rule(variant=st.sampled_from(MODEL_SHAPES), shape_seed=st.integers(0, 2**16))
    def model_shape(self, variant: str, shape_seed: int) -> None:
        """The fault sequence of one of the z3 model's counterexamples (partitions between
        two replicas of partition 0, administrative elections, delays), played now while the
        writers keep writing to partition 0, with its parameters (which of the partition's
        replicas play the model's two, the spacing of its steps) drawn from ``shape_seed``:
        a sequence too precise for random faults to stumble on."""
        self._step("model_shape", variant=variant, shape_seed=shape_seed)
        assert self.sim is not None
        sim = self.sim
        c = sim.controller()
        state = c.partitions.get(self.keys[0]) if c is not None else None
        if state is None:
            return
        steps = template_schedule(variant, random.Random(shape_seed), len(BROKERS), list(state.replicas))
        start_ms = sim.now_ns // MS - (steps[0]["at_ms"] if steps else 0)
        writes = 0
        for s in steps:
            at_ns = (start_ms + s["at_ms"]) * MS
            while sim.now_ns < at_ns and not sim.stopped:  # the model's appends: a write every 50 ms
                writes += 1
                self.command(writes % 2, ("send", [(self.keys[0], self.value(self.keys[0]), None)]))
                sim.run_until(min(at_ns, sim.now_ns + 50 * MS))
            if sim.stopped:
                return  # a violation: the invariant check reports it
            self._fault(s["f"], s["value"])

    @rule(writer=st.integers(0, 1), partition=st.integers(0, PARTITIONS - 1),
          delay_us=st.sampled_from([0, 100, 200, 300, 500, 1_000, 5_000]),
          kind=st.sampled_from(["kill", "isolate", "pause", "torn-write"]),
          heal_after=st.sampled_from([0, 300, 3_000, 8_000]), cut_off=st.booleans())
    def write_then_fault_leader(self, writer: int, partition: int, delay_us: int, kind: str,
                                heal_after: int, cut_off: bool = False) -> None:
        """A write, and ``delay_us`` after the leader appended it a fault on that leader: the
        moment where an acknowledgement, the high watermark and the followers disagree (a
        message takes about 0.3 ms). ``cut_off``: the leader is first cut off from the other
        servers (its clients still reach it), so that no follower can have the write."""
        self._step("write_then_fault_leader", writer=writer, partition=partition, delay_us=delay_us, kind=kind,
                   heal_after=heal_after, cut_off=cut_off)
        assert self.sim is not None
        sim = self.sim
        tp = self.keys[partition]
        appended: list[int] = []
        if cut_off:
            leader = self._role("leader", partition)
            if leader is not None:
                self._apply_fault("split", leader)

        # (partials of module functions, not closures: mypyc cannot compile a closure in a method
        # of the machine, a Python class)
        watch = partial(_watch_appends, tp.key, appended)
        sim.observers.append(watch)
        try:
            self.command(writer, ("send", [(tp, self.value(tp), None)]))
            sim.run_until(sim.now_ns + 2_000 * MS, stop=partial(bool, appended))
        finally:
            sim.observers.remove(watch)
        if not appended:
            return
        sim.run_until(sim.now_ns + delay_us * 1_000)
        node = appended[0]
        self._apply_fault(kind, node)
        if heal_after:
            self.sim.run_until(self.sim.now_ns + heal_after * MS)
            self._apply_fault({"kill": "restart", "torn-write": "restart", "pause": "resume"}.get(kind, "heal"),
                              node)


def _writer(machine: QueueMachine, acks: int, node: int, i: int) -> Writer:
    return Writer(node, i, BROKERS, machine.producer_config(acks, machine.options["idempotent"]))


def _reader(machine: ClusterMachine, node: int, i: int) -> Reader:
    return Reader(node, i, BROKERS, machine.consumer_config(), machine.keys)


def _watch_appends(key: str, appended: list[int], node: int, kind: str, fields: dict) -> None:
    """An observer: notes in ``appended`` each node that appends to the log of partition ``key``."""
    if kind == "log-append" and fields.get("key") == key:
        appended.append(node)


class IdempotentMachine(QueueMachine):
    """The queue machine with idempotent producers (acks=all) always."""

    @initialize(seed=st.integers(0, 2**16), replication=st.sampled_from([3, 2]))
    def boot(self, seed: int, replication: int = 3, acks: str = "all", idempotent: bool = True) -> None:
        self._boot(seed, acks="all", idempotent=True, replication=replication)


class QueueWorkload(Workload):
    name = "queue"
    description = "sends and polls; the producer never retries a send whose outcome is unknown"
    guarantee = "acknowledged sends are read back, once, in order"
    hunt_ops = 2000

    machine = QueueMachine

    def client(self, i: int, node_id: int, rng: random.Random) -> QueueClient:
        s = self.setup
        return QueueClient(node_id, i, s.options.clients, s.keys, s.broker_ids, rng, s.budget,
                           s.producer, s.consumer)


class IdempotentWorkload(QueueWorkload):
    name = "idempotent"
    description = ("sends and polls with enable.idempotence: retries of every kind, up to 5 "
                   "batches in flight, and no duplicate may appear")
    guarantee = "an idempotent producer's retries never duplicate or reorder a send"
    idempotent = True
    machine = IdempotentMachine
