"""The compaction workload: keyed updates and deletes on a compacted topic, and readers that
start again from the beginning.

Each client holds an idempotent producer and a consumer assigned to every partition. Ops:

* ``send``: 1-3 records, each to a random partition with one of a few record keys
  (``["send", key, value, record_key]``); about one in eight is a tombstone (value null);
* ``poll``: one fetch round; about one poll in five first seeks to the beginning (recorded
  as an ``assign`` with ``seek_to_beginning``), so readers see what the cleaner left.

Poll results carry record keys (``[offset, value, record_key]``). The topic is created with
``cleanup.policy=compact``, small segments and a low ``min.cleanable.dirty.ratio`` so that
the cleaner runs often during the run.
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from fault_injection.cluster import MS
from kafkacheck.workloads.actors import Reader, Writer
from kafkacheck.workloads.base import Workload
from kafkacheck.workloads.client import Budget, choice, decode_value, encode_value, randint
from kafkacheck.workloads.machine import BROKERS, COMPACTED, PARTITIONS, ClusterMachine
from kafkacheck.workloads.machine import RECORD_KEYS as MACHINE_RECORD_KEYS
from kafkacheck.workloads.queue_client import QueueClient
from kafkacheck.workloads.rules import send_completion
from reference.consumer import ConsumerConfig
from reference.messages import TopicPartition
from reference.producer import ProducerConfig

RECORD_KEYS = 6  # per partition
TOMBSTONE_P = 0.125


class CompactionClient(QueueClient):
    def __init__(self, node_id: int, index: int, n_clients: int, keys: list[TopicPartition],
                 bootstrap: list[int], rng: random.Random, budget: Budget,
                 producer_config: ProducerConfig, consumer_config: ConsumerConfig) -> None:
        super().__init__(node_id, index, n_clients, keys, bootstrap, rng, budget, producer_config,
                         consumer_config)

    def _next_op(self, now_ms: int) -> None:
        if self.budget.remaining <= 0:
            self.done = True
            return
        if self.rng.random() < 0.5:
            self.budget.remaining -= 1
            self.op_seq += 1
            sends: list[list[Any]] = []  # ["send", key, value or None, record key]
            for _ in range(randint(self.rng, 1, 3)):
                tp = choice(self.rng, self.keys)
                record_key = f"k{self.rng.randrange(RECORD_KEYS)}"
                value = None if self.rng.random() < TOMBSTONE_P else self._value(tp)
                sends.append(["send", tp.key, value, record_key])
            self.op = {"f": "send", "value": sends}
            self.results = [None] * len(sends)
            self.pending = {}
            self.record(process=self.process, type="invoke", f="send", value=sends)
            assert self.producer is not None  # (set in __init__, never replaced)
            for i, (_, key, value, record_key) in enumerate(sends):
                send_id = self.producer.send(now_ms, TopicPartition.parse(key),
                                             None if value is None else encode_value(value),
                                             record_key.encode())
                self.pending[send_id] = i
            self._collect_sends(now_ms)
            return
        self.budget.remaining -= 1
        self.op_seq += 1
        if self.rng.random() < 0.2:
            keys = [tp.key for tp in self.keys]
            self.consumer.assign(list(self.keys))
            self.consumer.seek_to_beginning()
            self.consumer.records = []
            self.record(process=self.process, type="invoke", f="assign", value=keys,
                        seek_to_beginning=True)
            self.record(process=self.process, type="ok", f="assign", value=keys,
                        seek_to_beginning=True)
        self._start_poll(now_ms)

    def _collect_sends(self, now_ms: int) -> None:
        assert self.producer is not None
        for r in self.producer.take_results():
            i = self.pending.pop(r.send_id, None)
            if i is not None:
                self.results[i] = r
        if self.op is None or self.op["f"] != "send" or self.pending:
            return
        type_, value, error, _acknowledged = send_completion(
            [(key, v, record_key) for _, key, v, record_key in self.op["value"]], self.results)
        self.record(process=self.process, type=type_, f="send", value=value, error=error)
        self._finish_op(now_ms, type_)

    def _finish_poll(self, now_ms: int) -> None:
        got: dict[str, list] = {}
        for r in self.consumer.take_records():
            got.setdefault(r.tp.key, []).append(
                [r.offset, decode_value(r.value), r.key.decode() if r.key is not None else None])
        self.record(process=self.process, type="ok", f="poll", value=[["poll", got]])
        self._finish_op(now_ms, "ok")


class CompactionMachine(ClusterMachine):
    """An idempotent producer of keyed updates and tombstones on a compacted topic, and two
    consumers that go back to the beginning."""

    compacted = True
    focus = ("cleaner-removed-records", "cleaner-removed-tombstone", "cleaner-removed-aborted")

    @initialize(seed=st.integers(0, 2**16))
    def boot(self, seed: int) -> None:
        self._boot(seed)

    def make_actors(self) -> None:
        # (partials of module functions, not lambdas: mypyc cannot compile a closure in a method
        # of the machine, a Python class; what a lambda read when called they read when called)
        self.add_actor(partial(_writer, self))
        for _ in range(2):
            self.add_actor(partial(_reader, self))

    def config(self) -> dict:
        return {**super().config(), "idempotence": True, "compacted": True,
                "topic_configs": dict(COMPACTED)}

    @rule(updates=st.lists(st.tuples(st.integers(0, PARTITIONS - 1), st.integers(0, MACHINE_RECORD_KEYS - 1),
                                     st.booleans()), min_size=1, max_size=3))
    def update(self, updates: list[tuple[int, int, bool]]) -> None:
        """Keyed writes; ``True`` makes a tombstone (a delete)."""
        self._step("update", updates=[list(u) for u in updates])
        sends = [(self.keys[p], None if delete else self.value(self.keys[p]), f"k{k}")
                 for p, k, delete in updates]
        self.command(0, ("send", sends))

    @rule(partition=st.integers(0, PARTITIONS - 1), rounds=st.sampled_from([6, 12, 24]),
          key_seed=st.integers(0, MACHINE_RECORD_KEYS - 1))
    def burst(self, partition: int, rounds: int, key_seed: int) -> None:
        """Rounds of keyed updates to one partition, 30 ms apart, every key again and again,
        then time for the cleaner: segments fill and roll and the cleaner compacts them while
        newer values of the same keys arrive."""
        self._step("burst", partition=partition, rounds=rounds, key_seed=key_seed)
        assert self.sim is not None
        tp = self.keys[partition]
        for i in range(rounds):
            key = f"k{(key_seed + i) % MACHINE_RECORD_KEYS}"
            self.command(0, ("send", [(tp, self.value(tp), key)]))
            self.sim.run_until(self.sim.now_ns + 30 * MS)
        self.sim.run_until(self.sim.now_ns + 1_500 * MS)

    @rule(reader=st.integers(0, 1), from_start=st.booleans())
    def poll(self, reader: int, from_start: bool) -> None:
        self._step("poll", reader=reader, from_start=from_start)
        if from_start:
            self.command(1 + reader, ("seek",))
        self.command(1 + reader, ("poll",))


def _writer(machine: ClusterMachine, node: int, i: int) -> Writer:
    return Writer(node, i, BROKERS, machine.producer_config())


def _reader(machine: ClusterMachine, node: int, i: int) -> Reader:
    return Reader(node, i, BROKERS, machine.consumer_config(), machine.keys, record_keys=True)


class CompactionWorkload(Workload):
    name = "compaction"
    description = ("keyed updates and tombstones on a compacted topic (small segments, an eager "
                   "cleaner); readers seek back to the beginning")
    guarantee = "a compacted topic keeps the newest value of every record key"
    # (one assignment each: mypyc cannot compile a multiple assignment in a class body)
    idempotent = True
    compacted = True
    machine = CompactionMachine
    record_keys = RECORD_KEYS
    tombstone_p = TOMBSTONE_P
    # with real clients: segments roll by time (Kafka 4.0 refuses segment.bytes below 1 MiB,
    # KIP-1030) and the cleaner runs as soon as anything is dirty; delete markers are kept 5 s,
    # so that readers going back to the beginning read both within that window (every marker
    # must be there, tombstone-missing) and beyond it (a marker may be gone)
    real_topic_configs = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.ms": "100",
                          "delete.retention.ms": "5000"}

    def client(self, i: int, node_id: int, rng: random.Random) -> CompactionClient:
        s = self.setup
        return CompactionClient(node_id, i, s.options.clients, s.keys, s.broker_ids, rng, s.budget,
                                s.producer, s.consumer)

    @classmethod
    def real_config(cls, run: Any) -> dict:
        return {"topic_configs": dict(cls.real_topic_configs or {})}
