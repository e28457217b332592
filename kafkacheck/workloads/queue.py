"""The queue workload: client processes that send and poll, recorded as Jepsen-style ops.

Its clients are :class:`~kafkacheck.workloads.queue_client.QueueClient` (their own module,
compiled with the engine); here are the workload and its Hypothesis machine.
"""

from __future__ import annotations

import random
from functools import partial

from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from fault_injection.cluster import MS
from fault_injection.model_shapes import template_schedule
from kafkacheck.workloads.actors import Reader, Writer
from kafkacheck.workloads.base import Workload
from kafkacheck.workloads.machine import BROKERS, MODEL_SHAPES, PARTITIONS, ClusterMachine
from kafkacheck.workloads.queue_client import QueueClient


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
