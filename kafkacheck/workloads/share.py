"""The share workload: a producer writes numbered records; the consumers of one share group
(KIP-932) acquire them and accept, release or reject each, sometimes too late (their lock
expired), sometimes crash or leave; after the faults heal they accept whatever comes.

Every consumer runs one op at a time: ``acquire`` (a poll: the records it got, each with its
delivery count), then ``ack`` of what it got (a type drawn for each record: mostly accept,
sometimes release or reject), answered per partition; a consumer sometimes holds its records
past their lock before acknowledging them (a stall), crashes (a new consumer takes its place)
or leaves the group and joins again. docs/reference/trace-format.md describes the ops; the
checker's ``share`` row judges them (properties/share_checks.py).
"""

from __future__ import annotations

import random
from functools import partial
from typing import Any, ClassVar

from fault_injection.simulation import Simulation
from kafkacheck.workloads import share_real
from kafkacheck.workloads.base import Workload
from kafkacheck.workloads.client import Budget, ClientBase, decode_value, randint
from kafkacheck.workloads.queue_client import QueueClient
from kafkacheck.workloads.share_machine import ShareMachine
from kafkacheck.workloads.txn import TxnClient
from reference.messages import TopicPartition
from reference.node import Node
from reference.share_consumer import ShareConsumer, ShareConsumerConfig, SharedRecord, nodes_of
from reference.share_messages import ACCEPT, ACK_TYPES, RELEASE

GROUP = "sharers"
LOCK_MS = 2_000  # group.share.record.lock.duration.ms of these runs (Kafka's default: 30 s)
DELIVERY_LIMIT = 5
# after healing: crashed members' sessions end, every lock expires, everything is acquired again
FINAL_MS = 3 * LOCK_MS + 8_000
_NAMES = {v: k for k, v in ACK_TYPES.items()}


class ShareMemberClient(ClientBase):
    def __init__(self, node_id: int, index: int, n_clients: int, keys: list[TopicPartition],
                 bootstrap: list[int], rng: random.Random, budget: Budget, request_timeout_ms: int,
                 poll_ms: int = 150, think_ms: int = 50) -> None:
        super().__init__(node_id)
        self.index, self.n_clients, self.keys = index, n_clients, keys
        self.bootstrap, self.rng, self.budget = bootstrap, rng, budget
        self.request_timeout_ms = request_timeout_ms
        self.poll_ms, self.think_ms = poll_ms, think_ms
        self.process = index
        self.incarnation = 0
        self.consumer = self._new_consumer()
        self.held: list[SharedRecord] = []  # acquired, not acknowledged yet
        self.op: dict | None = None
        self.op_seq = 0
        self.final = False  # after healing: accept everything

    def _new_consumer(self) -> ShareConsumer:
        c = ShareConsumer(self.node_id, self.bootstrap,
                          ShareConsumerConfig(GROUP, request_timeout_ms=self.request_timeout_ms, max_records=50),
                          member_id=f"share-{self.index}-{self.incarnation}")
        c._corr += self.incarnation * 10**8
        c.timer_tag = ("c", self.incarnation)
        return c

    def start(self, now_ms: int) -> None:
        self.consumer.start(now_ms)
        self._subscribe(now_ms)
        self.set_timer(randint(self.rng, 1, 50), "next")

    def _subscribe(self, now_ms: int, lost: int = 0) -> None:
        """(``lost``: the ShareFetch answers the consumer it replaces lost, leaving)"""
        keys = [tp.key for tp in self.keys]
        self.record(process=self.process, type="invoke", f="subscribe", value=keys)
        self.consumer.subscribe(now_ms, [self.keys[0].topic])
        self.record(process=self.process, type="ok", f="subscribe", value=keys, **_lost(lost))

    # ------------------------------------------------------------ ops

    def _next_op(self, now_ms: int) -> None:
        if not self.final and self.budget.remaining <= 0:
            self._idle(now_ms)
            return
        if not self.final:
            self.budget.remaining -= 1
        self.op_seq += 1
        if self.held:
            self._start_ack(now_ms)
            return
        x = self.rng.random()
        if self.final or x < 0.97:
            self._start_acquire(now_ms)
        elif x < 0.985:
            self._crash(now_ms)
        else:
            self._leave_and_rejoin(now_ms)

    def _start_acquire(self, now_ms: int) -> None:
        self.op = {"f": "acquire"}
        self.record(process=self.process, type="invoke", f="acquire", value=None)
        self.consumer.poll(now_ms)
        self.set_timer(self.poll_ms, ("acquire-done", self.op_seq))

    def _finish_acquire(self, now_ms: int) -> None:
        got: dict[str, list] = {}
        records = self.consumer.take_records()
        # records a ShareFetch sent before this op brought (one out when the op began)
        fetched = min((r.fetched_ms for r in records if r.fetched_ms >= 0), default=None)
        for r in records:
            got.setdefault(r.tp.key, []).append([r.offset, decode_value(r.value), r.delivery_count])
            self.held.append(r)
        known = nodes_of(records)  # the broker that delivered each partition's records
        extra: dict[str, Any] = {"nodes": known} if known else {}
        if fetched is not None:
            extra["fetch_time"] = fetched * 1_000_000
        extra.update(_lost(self.consumer.take_lost()))
        self.record(process=self.process, type="ok", f="acquire", value=got, **extra)
        self.op = None
        # sometimes the application takes longer than the lock before it acknowledges
        stall = 0 if self.final or self.rng.random() >= 0.05 else LOCK_MS + randint(self.rng, 0, LOCK_MS)
        self.set_timer(stall + randint(self.rng, 0, self.think_ms), "next")

    def _start_ack(self, now_ms: int) -> None:
        value: dict[str, list] = {}
        for r in sorted(self.held, key=lambda r: (r.tp, r.offset)):
            t = ACCEPT if self.final else self._draw_type()
            self.consumer.acknowledge(r, t)
            value.setdefault(r.tp.key, []).append([r.offset, _NAMES[t]])
        self.op = {"f": "ack", "value": value, "nodes": nodes_of(self.held)}  # where the acks go
        self.held = []
        self.record(process=self.process, type="invoke", f="ack", value=value)
        self.consumer.commit()
        self._check_ack(now_ms)

    def _draw_type(self) -> int:
        x = self.rng.random()
        return ACCEPT if x < 0.8 else RELEASE if x < 0.95 else ACK_TYPES["reject"]

    def _check_ack(self, now_ms: int) -> None:
        op, result = self.op, self.consumer.commit_result
        if op is None or op["f"] != "ack" or result is None:
            return
        errors = {tp.key: e.name for tp, e in sorted(result.items())}
        self.record(process=self.process, type="ok", f="ack", value={**op["value"], "errors": errors},
                    nodes=op["nodes"])
        self.op = None
        self.set_timer(randint(self.rng, 0, self.think_ms), "next")

    def _crash(self, now_ms: int) -> None:
        """The consumer torn down without a word (its locks end when they expire); a new
        one, a new process, joins in its place."""
        lost = self.consumer.take_lost(leaving=True)
        self.record(process=self.process, type="invoke", f="crash", value=None)
        self.record(process=self.process, type="info", f="crash", value=None, **_lost(lost))
        self.process += self.n_clients
        self._replace(now_ms)

    def _leave_and_rejoin(self, now_ms: int) -> None:
        """Close (the leaders release what it holds) and join again as a new member."""
        lost = self.consumer.take_lost(leaving=True)
        self.consumer.close()
        self._replace(now_ms, lost)

    def _replace(self, now_ms: int, lost: int = 0) -> None:
        self.incarnation += 1
        self.held = []
        self.consumer = self._new_consumer()
        self.consumer.start(now_ms)
        self._subscribe(now_ms, lost)
        self.budget.completed += 1
        self.set_timer(randint(self.rng, 0, self.think_ms), "next")

    def _idle(self, now_ms: int) -> None:
        """Out of ops: the member stays in the group (its heartbeats go on) and acquires
        nothing until the final phase (a record it took and gave back, unrecorded, would
        spend a delivery the history does not show)."""
        self.set_timer(self.poll_ms, "next")

    # ------------------------------------------------------------ inputs

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self.consumer.receive(now_ms, src, message)
        self._check_ack(now_ms)

    def timer(self, now_ms: int, key: object) -> None:
        match key:
            case ("c", incarnation, inner):
                if incarnation == self.incarnation:
                    self.consumer.timer(now_ms, inner)
                    self._check_ack(now_ms)
            case "next":
                if self.op is None:
                    self._next_op(now_ms)
            case ("acquire-done", seq):
                if self.op is not None and self.op["f"] == "acquire" and seq == self.op_seq:
                    self._finish_acquire(now_ms)
            case _:
                pass


def _lost(n: int) -> dict:
    """The op field of ShareFetch answers lost (docs/reference/trace-format.md), when some were."""
    return {"lost_fetches": n} if n else {}


class ShareWorkload(Workload):
    name = "share"
    description = ("the consumers of one share group (KIP-932) acquire records under a lock and accept, release "
                   "or reject each, sometimes after the lock expired, crash or leave, while a producer writes")
    guarantee = ("a share group hands a record to one consumer at a time while its lock holds, never delivers "
                 "an accepted record again, loses none, and delivers none more often than the limit")
    # (one assignment each: mypyc cannot compile a multiple assignment in a class body)
    idempotent = True
    group_coordinator = True
    share_coordinator = True
    default_partitions = 2  # more consumers than partitions: they share each one
    machine: ClassVar[type[ShareMachine] | None] = ShareMachine
    broker_settings: ClassVar[dict] = {"share_record_lock_duration_ms": LOCK_MS,
                                       "share_delivery_count_limit": DELIVERY_LIMIT,
                                       "share_auto_offset_reset": "earliest"}

    def client(self, i: int, node_id: int, rng: random.Random) -> ClientBase:
        s = self.setup
        n = s.options.clients
        if i == 0:  # the producer
            return QueueClient(node_id, i, n, s.keys, s.broker_ids, rng, s.budget, s.producer, s.consumer,
                               think_ms=100, send_p=1.0)
        return ShareMemberClient(node_id, i, n, s.keys, s.broker_ids, rng, s.budget,
                                 s.consumer.request_timeout_ms)

    def members(self, clients: list[int]) -> list[int]:
        return clients[1:]

    def after_heal(self, sim: Simulation, clients: list[Node]) -> None:
        """Every consumer accepts whatever it gets until every lock expired and what was
        still to deliver was delivered."""
        from fault_injection.cluster import MS

        for c in clients:
            if isinstance(c, ShareMemberClient):
                c.final = True
        sim.run_until(sim.now_ns + (FINAL_MS + self.setup.timings["member_session_timeout_ms"]) * MS)

    def config(self) -> dict:
        return {"share": {"group": GROUP, "keys": [tp.key for tp in self.setup.keys], "lock_ms": LOCK_MS,
                          "delivery_limit": DELIVERY_LIMIT, "clock_slack_ms": 0, "final": True}}

    # ------------------------------------------------------------ with real clients
    # (kafkacheck/workloads/share_real.py: Java's and librdkafka's share consumers)

    straggle_apis = ("ShareFetch", "ShareAcknowledge")

    @classmethod
    def real_threads(cls, run, producers: int, consumers: int) -> list:
        """One producer (the share consumers are :meth:`real_members`)."""
        return [run.producer_loop]

    @classmethod
    def real_prepare(cls, run) -> None:
        run.workload_state = share_real.prepare(run)

    @classmethod
    def real_members(cls, run) -> list:
        # (partials: a class method holds no closure, which mypyc cannot compile)
        return [partial(_real_member_loop, run, i) for i in range(4)]

    @classmethod
    def real_settle(cls, run, members: list) -> bool:
        return share_real.settle(run.workload_state, members)

    @classmethod
    def real_config(cls, run) -> dict:
        return share_real.config(run.workload_state)


def _real_member_loop(run: Any, i: int) -> None:
    """Share consumer ``i`` with real clients (``run.workload_state``: what its real_prepare made)."""
    share_real.member_loop(run.workload_state, i)


class ShareCommittedWorkload(ShareWorkload):
    """The share workload read_committed (``share.isolation.level``): its producer writes in
    transactions of sends and read_committed polls, some aborted on purpose (the txn
    workload's client), and the share group must never deliver an aborted record."""

    name = "share-committed"
    description = ("the share workload with share.isolation.level read_committed: the producer writes in "
                   "transactions, some aborted on purpose")
    guarantee = (ShareWorkload.guarantee + ", and, read_committed, never delivers a record of an aborted "
                 "transaction")
    transactional = True
    machine = None
    broker_settings: ClassVar[dict] = {**ShareWorkload.broker_settings, "share_isolation_level": "read_committed"}

    def client(self, i: int, node_id: int, rng: random.Random) -> ClientBase:
        s = self.setup
        if i == 0:  # the producer: transactions of sends and polls (the txn workload's)
            return TxnClient(node_id, i, s.options.clients, s.keys, s.broker_ids, rng, s.budget, s.producer,
                             s.consumer, s.timings["transaction_timeout_ms"], abort_p=0.2)
        return super().client(i, node_id, rng)

    def config(self) -> dict:
        out = super().config()
        out["share"]["isolation"] = "read_committed"
        return {**out, "transaction_version": self.setup.options.transaction_version}
