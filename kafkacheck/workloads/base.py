"""What a workload brings to a simulated run, and what the run gives it.

:class:`Workload` is the interface :func:`kafkacheck.runner.simulate` drives, one subclass a
workload (its module holds its clients too): its topics besides the workload topic, its
clients, the cluster nodes the nemesis may also pause, what it does once the faults are
healed, its final reader, and what the checker needs to know (its part of run.json's
``config``). The class attributes say what the cluster must offer: idempotent producers,
transactions (the transaction state topic, read_committed consumers), consumer groups (the
offsets topic), a compacted topic.

A new workload is a new module with a subclass, listed in :data:`kafkacheck.workloads.WORKLOADS`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from mypy_extensions import mypyc_attr

from fault_injection.simulation import Simulation
from kafkacheck.workloads.client import Budget, FinalReader
from kafkacheck.workloads.machine import ClusterMachine
from reference.consumer import ConsumerConfig
from reference.messages import TopicPartition
from reference.node import Node
from reference.producer import ProducerConfig


@dataclass
class Setup:
    """What a workload's clients are built from: the run's options
    (:class:`kafkacheck.runner.RunOptions`), its timings, the workload topic's partitions, the
    brokers to bootstrap from, the shared op budget, and the client configurations the
    workload's kind implies."""

    options: Any
    timings: dict[str, int]
    keys: list[TopicPartition]
    broker_ids: list[int]
    budget: Budget
    producer: ProducerConfig
    consumer: ConsumerConfig


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled, it stays open to the workloads' own modules
class Workload:
    name: ClassVar[str]
    description: ClassVar[str]
    idempotent: ClassVar[bool] = False  # idempotent producers (Kafka then requires acks=all)
    transactional: ClassVar[bool] = False  # transactions and read_committed consumers
    group_coordinator: ClassVar[bool] = False  # consumer groups (the offsets topic)
    share_coordinator: ClassVar[bool] = False  # share groups (the share state topic)
    broker_settings: ClassVar[dict] = {}  # BrokerConfig fields the workload sets (before the run's own)
    default_partitions: ClassVar[int] = 4  # the topic's partitions unless --partitions says
    compacted: ClassVar[bool] = False  # the workload topic is compacted
    subscribe: ClassVar[bool] = False  # consumers subscribe (rebalances move partitions)
    # the Hypothesis machine of ``kafkacheck explore`` (its rules are this workload's ops)
    machine: ClassVar[type[ClusterMachine] | None] = None
    # machines of the same ops in a variant of the workload, by name (kafkacheck explore --machine)
    variants: ClassVar[dict[str, type[ClusterMachine]]] = {}
    hunt_ops: ClassVar[int] = 1000  # ops a run of ``kafkacheck hunt`` without a switch
    # with real clients (kafkacheck conform): the guarantee the report names, a second
    # (output) topic, keyed records (record keys a partition, the share of tombstones), the
    # workload topic's configs, the requests ``--faults straggle`` may hold back
    guarantee: ClassVar[str]
    has_output: ClassVar[bool] = False
    record_keys: ClassVar[int] = 0
    tombstone_p: ClassVar[float] = 0.0
    real_topic_configs: ClassVar[dict[str, str] | None] = None
    straggle_apis: ClassVar[tuple[str, ...]] = ("Produce",)

    def __init__(self, setup: Setup) -> None:
        self.setup = setup

    def topics(self) -> list[tuple[str, int]]:
        """Topics besides the workload topic and the internal ones: (name, partitions)."""
        return []

    def client(self, i: int, node_id: int, rng: random.Random) -> Node:
        """Client ``i`` of the run's ``--clients``."""
        raise NotImplementedError

    def members(self, clients: list[int]) -> list[int]:
        """Which of the client nodes ``clients`` the nemesis may pause too (group members)."""
        return []

    def after_heal(self, sim: Simulation, clients: list[Node]) -> None:
        """What the clients do once every fault is healed, before the final read."""

    def final_reader(self, node_id: int, process: int, deadline_ms: int) -> FinalReader:
        s = self.setup
        return FinalReader(node_id, process, s.keys, s.broker_ids, s.consumer, deadline_ms)

    def config(self) -> dict:
        """The workload's part of run.json's ``config`` (what the checker reads)."""
        return {}

    # ------------------------------------------------------------ with real clients
    # ``run`` is a :class:`kafkacheck.real.real_run.RealRun`

    @classmethod
    def real_threads(cls, run: Any, producers: int, consumers: int) -> list[Callable[[], None]]:
        """The loops of the client threads that run until the run stops: by default
        ``producers`` producers of one send per op and ``consumers`` consumers."""
        return [run.producer_loop] * producers + [run.consumer_loop] * consumers

    @classmethod
    def real_members(cls, run: Any) -> list[Callable[[], None]]:
        """Consumer-group members: they poll on after healing until the group settles."""
        return []

    @classmethod
    def real_prepare(cls, run: Any) -> None:
        """After the topics are created, before any client thread starts (``run.workload_state``
        may keep what the threads share)."""

    @classmethod
    def real_settle(cls, run: Any, members: list) -> bool:
        """After healing: the members (threads of :meth:`real_members`) run on until they
        settle, then stop. Whether they settled."""
        return run.settle_members(members)

    @classmethod
    def real_after_heal(cls, run: Any) -> None:
        """What is read after healing, before every partition's end offset and the final read."""

    @classmethod
    def real_config(cls, run: Any) -> dict:
        """The workload's part of run.json's ``config`` for a run with real clients."""
        return {}

    @classmethod
    def real_straggle_apis(cls, run: Any) -> tuple[str, ...]:
        """The requests ``--faults straggle`` holds back by default in this run."""
        return cls.straggle_apis
