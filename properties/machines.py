"""Hypothesis state machines that drive the simulated reference cluster.

Each machine boots a cluster (a controller and three brokers in a seeded
:class:`~fault_injection.simulation.Simulation`), then runs rules that Hypothesis chooses:
client ops (produce with acks and idempotence drawn at boot, poll, transactions that commit
or abort, consumer-group join/leave/crash/commit, keyed updates and tombstones on a compacted
topic), faults (kill, restart, pause, resume, network partitions and heals, loss and
duplication, disk faults, clock skew) and the passing of time. After every rule the
simulator's white-box invariants must hold (they run after every broker step); at teardown
every fault is healed, the clients finish, a reader reads every partition from the
beginning, and the history checker of :mod:`properties.queue` must find no violation.

A failure shrinks to a short program of rules. Every rule a run executes is also kept in
``steps``, so :func:`replay` runs the same program again: the simulation is seeded by the
``boot`` rule, so it replays byte for byte.

Machines: ``queue`` (producers and consumers), ``txn`` (transactions and read_committed
consumers), ``groups`` (a consumer group), ``compaction`` (a compacted topic).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from hypothesis import HealthCheck, currently_in_test_context, settings, target
from hypothesis import strategies as st
from hypothesis.errors import Flaky
from hypothesis.reporting import with_reporter
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test

from fault_injection.cluster import (
    CLUSTER_TIMINGS,
    CONTROLLER_ID,
    MS,
    add_cluster,
    broker_config,
    controller_config,
)
from fault_injection.model_shapes import template_schedule
from fault_injection.nemesis import Nemesis
from fault_injection.simulation import Simulation
from properties.actors import Actor, Member, Reader, TxnWriter, Writer, member_config
from properties.queue import check
from reference import marks
from reference.bugs import Bug
from reference.consumer import ConsumerConfig
from reference.coordinator import partition_for
from reference.messages import CreateTopicsRequest, TopicPartition
from reference.producer import ProducerConfig
from reference.topics import OFFSETS_TOPIC, TXN_TOPIC

BROKERS = [1, 2, 3]
SERVERS = [CONTROLLER_ID, *BROKERS]
ADMIN_ID = 90
ACTOR_BASE = 100
TOPIC = "t0"
PARTITIONS = 2
GROUP = "machines"
COMPACTED = (("cleanup.policy", "compact"), ("segment.bytes", "1024"),
             ("min.cleanable.dirty.ratio", "0.1"), ("delete.retention.ms", "5000"))
RECORD_KEYS = 4
FINAL_READ_MS = 20_000  # the staleness bound of the final read
# the fault rule's kinds: process faults, partitions (isolate: from every node; split: from
# the other servers only, so clients still reach it), heal (the network), message loss (not
# duplication: over TCP a request never arrives twice), disk faults (torn-write and corrupt
# crash the broker with a damaged tail; full and slow-flush last until disk-heal), clock skew
FAULTS = ["kill", "restart", "pause", "resume", "isolate", "split", "heal", "loss",
          "torn-write", "corrupt", "full", "slow-flush", "disk-heal", "clock-skew"]

# the coverage marks of the moments where replication, transactions and groups are delicate
DELICATE = {"follower-truncate-diverging", "follower-truncate-below-hw", "become-follower-with-uncommitted-tail",
            "request-fenced-leader-epoch", "isr-shrink", "isr-shrink-below-min-isr", "controller-elect-from-elr",
            "txn-coordinator-loaded-unfinished", "txn-producer-fenced", "txn-marker-to-moved-leader",
            "group-illegal-generation", "group-member-expired", "cleaner-removed-tombstone",
            "produce-duplicate-sequence", "disk-lost-unflushed"}
# the counterexamples of the replication model whose shape model_shape plays (kafkacheck
# model-check; fault_injection/model_counterexamples.json)
MODEL_SHAPES = ["kip101", "kip279-hole", "no-epoch-hw", "unclean"]
# the roles aimed_fault picks its node by
ROLES = ["leader", "leader", "follower", "controller", "txn-coordinator", "group-coordinator"]

settings.register_profile("ci", max_examples=30, stateful_step_count=25, deadline=None, derandomize=True,
                          database=None, suppress_health_check=list(HealthCheck))
settings.register_profile("deep", max_examples=2000, stateful_step_count=60, deadline=None,
                          database=None, suppress_health_check=list(HealthCheck))


class Finding(AssertionError):
    """A machine found a violation; the message says what."""


class ClusterMachine(RuleBasedStateMachine):
    """Boot, faults, time and teardown; subclasses add the client rules."""

    bugs: ClassVar[tuple[str, ...]] = ()
    on_example: ClassVar[Callable[[ClusterMachine], None] | None] = None  # progress hook
    last: ClassVar[ClusterMachine | None] = None  # the most recent run (for explore)

    def __init__(self) -> None:
        super().__init__()
        self.sim: Simulation | None = None
        self.steps: list[tuple[str, dict]] = []
        self.actors: list[Actor] = []
        self.counters: dict[str, int] = {}
        self.result: dict | None = None
        self.final_read: dict | None = None
        self.heal_ns: int | None = None
        self.options: dict[str, Any] = {}
        type(self).last = self

    # ------------------------------------------------------------ boot

    def _boot(self, seed: int, **options: Any) -> None:
        self.steps.append(("boot", {"seed": seed, **options}))
        self.options = options
        marks.reset()
        sim = self.sim = Simulation(seed)
        # replication factor 3 with min.insync.replicas 2, or 2 with 1 (the model's shape)
        rf = options.get("replication", 3)
        min_isr = 2 if rf == 3 else 1
        bconfig = broker_config(min_isr)
        add_cluster(sim, len(BROKERS), bconfig, controller_config(min_isr), self.bugs)
        for n in SERVERS:
            sim.start(n)
        self.nemesis = Nemesis(sim, SERVERS)
        sim.run_until(1_000 * MS)
        sim.inject(ADMIN_ID, CONTROLLER_ID, CreateTopicsRequest(
            1, TOPIC, PARTITIONS, rf, COMPACTED if self.compacted else ()))
        # Kafka creates its internal topics on first use; the harness creates them up front
        sizes = {TXN_TOPIC: bconfig.transaction_state_partitions, OFFSETS_TOPIC: bconfig.offsets_partitions}
        for i, internal in enumerate(self.internal_topics()):
            sim.inject(ADMIN_ID, CONTROLLER_ID, CreateTopicsRequest(2 + i, internal, sizes[internal], 3))
        sim.run_until(2_000 * MS)
        self.keys = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        self.make_actors()
        for a in self.actors:
            sim.add_process(a.node_id, lambda inc, disk, a=a: a)
            sim.start(a.node_id)
        sim.run_until(2_500 * MS)

    compacted = False

    def internal_topics(self) -> list[str]:
        return []

    def make_actors(self) -> None:
        raise NotImplementedError

    def add_actor(self, make: Callable[[int, int], Actor]) -> None:
        i = len(self.actors)
        self.actors.append(make(ACTOR_BASE + i, i))

    def producer_config(self, acks: int = -1, idempotent: bool = True) -> ProducerConfig:
        t = CLUSTER_TIMINGS
        return ProducerConfig(acks=acks, linger_ms=2, retry_backoff_ms=50,
                              request_timeout_ms=t["request_timeout_ms"],
                              delivery_timeout_ms=t["delivery_timeout_ms"],
                              max_in_flight=5 if idempotent else 1, retry_unknown_outcomes=idempotent,
                              enable_idempotence=idempotent)

    def consumer_config(self, read_committed: bool = False) -> ConsumerConfig:
        return ConsumerConfig(fetch_max_wait_ms=50, request_timeout_ms=CLUSTER_TIMINGS["request_timeout_ms"],
                              isolation_level=1 if read_committed else 0)

    def value(self, tp: TopicPartition) -> int:
        n = self.counters[tp.key] = self.counters.get(tp.key, 0) + 1
        return n

    def command(self, actor: int, cmd: tuple) -> None:
        assert self.sim is not None
        a = self.actors[actor]
        self.sim.act(a.node_id, lambda node, now_ms: a.command(now_ms, cmd))

    def _step(self, name: str, **args: Any) -> None:
        self.steps.append((name, args))

    # ------------------------------------------------------------ faults and time

    @rule(ms=st.sampled_from([1, 3, 10, 50, 200, 1_000, 3_000, 6_000]))
    def advance(self, ms: int) -> None:
        """Time passes: messages flow, timers fire, leaders fail over, the cleaner runs."""
        self._step("advance", ms=ms)
        assert self.sim is not None
        self.sim.run_until(self.sim.now_ns + ms * MS)

    @rule(kind=st.sampled_from(FAULTS), node=st.sampled_from(SERVERS))
    def fault(self, kind: str, node: int) -> None:
        """One fault (or its end) on a server: see ``FAULTS``."""
        self._step("fault", kind=kind, node=node)
        self._apply_fault(kind, node)

    def _apply_fault(self, kind: str, node: int) -> None:
        assert self.sim is not None
        others = [n for n in self.sim.processes if n != node]
        servers = [n for n in SERVERS if n != node]
        if kind in ("kill", "torn-write", "corrupt") and node in BROKERS and (
                not self._others_in_sync(node) or self.options.get("replication", 3) < 3):
            # one broker crashed at a time, and only once the last one is back in every ISR:
            # Kafka does not fsync, so two crashes closer than that may lose acknowledged
            # records (and a broker restarted after losing unflushed data leaves the ISR and
            # ELR, KIP-966, so crashing every replica leaves a partition offline for good);
            # that is Kafka's failure model, not a bug. With two replicas (min.insync.replicas
            # 1) nothing crashes: one crash and the other replica fenced leave a partition
            # offline for good (the crashed one was its last ISR member)
            return
        if kind in ("kill", "restart", "pause", "resume"):
            self._fault(kind, {"nodes": [node]})
        elif kind in ("isolate", "split"):  # split: cut off from the servers, not the clients
            cut = others if kind == "isolate" else servers
            self._fault("partition", {"kind": kind, "grudge": {str(node): cut, **{str(o): [node] for o in cut}}})
        elif kind in ("heal", "loss"):
            self._fault(kind, None if kind == "heal" else {"p": 0.2})
        elif kind == "clock-skew":
            self._fault(kind, {"node": node, "skew_ms": 3_000})
        elif node != CONTROLLER_ID:  # the disk faults, on brokers
            self._fault("disk-heal" if kind == "disk-heal" else "disk-fault", {"node": node, "kind": kind})

    def _others_in_sync(self, node: int) -> bool:
        """Every broker but ``node`` runs, is known to the controller as the process it is
        (a broker restarted while the controller was paused or cut off is not, yet), and is in
        the ISR of every partition it replicates."""
        assert self.sim is not None
        c = self.sim.controller()
        if c is None:
            return False
        for b in BROKERS:
            process = self.sim.processes[b]
            reg = c.brokers.get(b)
            if b != node and (process.node is None or reg is None or reg.fenced
                              or process.node.broker_epoch != reg.broker_epoch):
                return False
        return all(r == node or r in s.isr for s in c.partitions.values() for r in s.replicas)

    def _fault(self, f: str, value: Any) -> None:
        self.nemesis.apply({"f": f, "value": value})

    @rule(kind=st.sampled_from(["kill", "pause", "isolate", "split", "torn-write", "clock-skew"]),
          role=st.sampled_from(ROLES), partition=st.integers(0, PARTITIONS - 1),
          heal_after=st.sampled_from([0, 1, 5, 50, 500, 3_000]))
    def aimed_fault(self, kind: str, role: str, partition: int, heal_after: int) -> None:
        """A fault on the node that plays a role now (a partition's leader or an in-sync
        follower, the transaction or group coordinator, the controller), healed after
        ``heal_after`` ms (0: left for later rules), where a random node would rarely be the
        one that matters."""
        self._step("aimed_fault", kind=kind, role=role, partition=partition, heal_after=heal_after)
        assert self.sim is not None
        node = self._role(role, partition)
        if node is None:
            return
        self._apply_fault(kind, node)
        if heal_after:
            self.sim.run_until(self.sim.now_ns + heal_after * MS)
            self._apply_fault({"kill": "restart", "torn-write": "restart", "pause": "resume"}.get(kind, "heal"),
                              node)
            if kind == "clock-skew":
                self._fault("clock-skew", {"node": node, "skew_ms": 0})

    @rule(partition=st.integers(0, PARTITIONS - 1), replica=st.sampled_from(BROKERS))
    def elect(self, partition: int, replica: int) -> None:
        """An administrative election (Kafka's ElectLeaders): ``replica`` leads the partition
        in a new epoch if it is a live ISR member (the controller refuses otherwise)."""
        self._step("elect", partition=partition, replica=replica)
        self._fault("elect", {"topic": TOPIC, "partition": partition, "leader": replica})

    def _role(self, role: str, partition: int) -> int | None:
        """The node that plays ``role`` now (None: nobody does)."""
        assert self.sim is not None
        if role == "controller":
            return CONTROLLER_ID
        c = self.sim.controller()
        if c is None:
            return None
        if role in ("leader", "follower"):
            s = c.partitions.get(self.keys[partition])
            if s is None:
                return None
            if role == "leader":
                return s.leader if s.leader >= 0 else None
            followers = [r for r in s.isr if r != s.leader]
            return followers[0] if followers else None
        # the coordinators: leaders of the internal topics' partitions for our ids
        if role == "txn-coordinator":
            tp = TopicPartition(TXN_TOPIC, partition_for("machine-txn-0", broker_config().transaction_state_partitions))
        else:
            tp = TopicPartition(OFFSETS_TOPIC, partition_for(GROUP, broker_config().offsets_partitions))
        s = c.partitions.get(tp)
        return s.leader if s is not None and s.leader >= 0 else None

    # ------------------------------------------------------------ checks

    @invariant()
    def white_box(self) -> None:
        """The simulator checks the broker invariants after every step; none may break."""
        if self.sim is not None and self.sim.violations:
            at, v = self.sim.violations[0]
            raise Finding(f"invariant '{v.invariant}' broken on node {v.node} at "
                          f"{at / 1e9:.3f} s: {v.detail}")

    def config(self) -> dict:
        return {"acks": "all", "isolation_level": "read_uncommitted", "sub_via": ["assign"],
                "final_read": self.final_read}

    def teardown(self) -> None:
        try:
            if self.sim is None:
                return
            self._finish()
            self._aim()
            self.sim.check_all_acked()  # every acks=all record is still on the ISR
            self.white_box()
            self.result = check(self.sim.recorder.ops, self.config())
            found = [k for k in self.result["anomaly_types"] if k != "empty-history"]
            if found:  # (a program may well have no client op that completed)
                lines = []
                for kind in found:
                    first = self.result["anomalies"][kind][0]
                    lines.append(f"{kind} ({self.result['counts'][kind]}): {first.get('explanation', '')}")
                raise Finding("the history checker found: " + "; ".join(lines))
        finally:
            hook = type(self).on_example
            if hook is not None:
                hook(self)

    def _aim(self) -> None:
        """Tell Hypothesis what makes a program interesting (hypothesis.target), so it leans
        toward programs that reach more rare branches of the engine (coverage marks) and more
        of the delicate ones: truncations, fenced epochs, ISR changes, coordinator moves."""
        if not currently_in_test_context():
            return  # a replay outside Hypothesis
        reached = marks.counts()
        target(float(len(reached)), label="coverage marks reached")
        target(float(sum(n for m, n in reached.items() if m in DELICATE)), label="delicate moments")
        # what this machine's part of the engine does when it is busy (transactions ended,
        # rebalances, the cleaner at work), and client ops that completed: without them faults
        # have nothing to break (aiming at faults alone, programs became all faults)
        target(float(sum(reached.get(m, 0) for m in self.focus)), label="the machine's own moments")
        assert self.sim is not None
        done = sum(1 for op in self.sim.recorder.ops if op["type"] in ("ok", "fail", "info"))
        target(float(min(done, 40)), label="client ops completed")

    focus: ClassVar[tuple[str, ...]] = ()  # the marks of this machine's part of the engine

    def _finish(self) -> None:
        """Heal everything, let the clients finish their commands, then read everything."""
        sim = self.sim
        assert sim is not None
        if sim.stopped:
            return
        self.nemesis.heal_all()
        for a in self.actors:
            sim.resume(a.node_id)
        self.heal_ns = sim.now_ns
        self.before_final_read()
        deadline = sim.now_ns + 30_000 * MS
        sim.run_until(deadline, stop=lambda: all(a.idle for a in self.actors))
        sim.run_until(sim.now_ns + 3_000 * MS)
        # the final read: from the beginning until every partition's end offset (asked
        # again before each poll) is reached, or the staleness bound runs out
        start = sim.now_ns
        reader = Reader(ACTOR_BASE + 99, 99, BROKERS, self.consumer_config(self.read_committed),
                        self.keys, record_keys=self.compacted)
        self.actors.append(reader)
        sim.add_process(reader.node_id, lambda inc, disk: reader)
        sim.start(reader.node_id)
        sim.act(reader.node_id, lambda node, now_ms: reader.command(now_ms, ("seek",)))
        c = reader.client
        reached = False
        while sim.now_ns < start + FINAL_READ_MS * MS and not sim.stopped:
            sim.act(reader.node_id, lambda node, now_ms: c.request_end_offsets())
            sim.act(reader.node_id, lambda node, now_ms: reader.command(now_ms, ("poll",)))
            sim.run_until(sim.now_ns + 1_000 * MS, stop=lambda: reader.idle)
            ends = c.end_offsets
            if len(ends) == len(self.keys) and all(c.positions.get(tp, 0) >= ends[tp] for tp in self.keys):
                reached = True
                break
        self.final_read = {"performed": True, "start_ns": start, "heal_ns": self.heal_ns,
                           "reached_end": reached, "staleness_bound_ms": FINAL_READ_MS,
                           "took_ms": (sim.now_ns - start) // MS,
                           "end_offsets": {tp.key: o for tp, o in sorted(c.end_offsets.items())}}

    read_committed = False

    def before_final_read(self) -> None:
        """Hook: commands the clients run after healing (group members poll once more)."""


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
        for _ in range(2):
            self.add_actor(lambda node, i: Writer(node, i, BROKERS, self.producer_config(
                acks, self.options["idempotent"])))
        for _ in range(2):
            self.add_actor(lambda node, i: Reader(node, i, BROKERS, self.consumer_config(), self.keys))

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

        def watch(node: int, kind: str, fields: dict) -> None:
            if kind == "log-append" and fields.get("key") == tp.key:
                appended.append(node)

        sim.observers.append(watch)
        try:
            self.command(writer, ("send", [(tp, self.value(tp), None)]))
            sim.run_until(sim.now_ns + 2_000 * MS, stop=lambda: bool(appended))
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


class TxnMachine(ClusterMachine):
    """Two transactional producers and two read_committed consumers."""

    read_committed = True
    focus = ("txn-coordinator-loaded-unfinished", "txn-coordinator-resumed-markers", "txn-producer-fenced",
             "txn-concurrent-transactions", "txn-timed-out", "txn-marker-retried", "txn-marker-to-moved-leader",
             "produce-txn-raced-marker")

    def internal_topics(self) -> list[str]:
        return [TXN_TOPIC]

    @initialize(seed=st.integers(0, 2**16))
    def boot(self, seed: int) -> None:
        self._boot(seed)

    def make_actors(self) -> None:
        for w in range(2):
            self.add_actor(lambda node, i, w=w: TxnWriter(
                node, i, BROKERS, self.producer_config(), f"machine-txn-{w}",
                CLUSTER_TIMINGS["transaction_timeout_ms"]))
        for _ in range(2):
            self.add_actor(lambda node, i: Reader(node, i, BROKERS, self.consumer_config(True), self.keys))

    def config(self) -> dict:
        return {**super().config(), "idempotence": True, "txn": True, "isolation_level": "read_committed"}

    @rule(writer=st.integers(0, 1), partitions=st.lists(st.integers(0, PARTITIONS - 1), min_size=1, max_size=4),
          abort=st.booleans(), dwell_ms=st.sampled_from([0, 200, 1_000, 2_000]))
    def transaction(self, writer: int, partitions: list[int], abort: bool, dwell_ms: int = 0) -> None:
        """Begin, send, stay in the transaction ``dwell_ms`` (processing), then commit (or
        abort on purpose)."""
        self._step("transaction", writer=writer, partitions=partitions, abort=abort, dwell_ms=dwell_ms)
        self.command(writer, ("txn", [(self.keys[p], self.value(self.keys[p])) for p in partitions],
                              abort, dwell_ms))

    @rule(reader=st.integers(0, 1))
    def poll(self, reader: int) -> None:
        self._step("poll", reader=reader)
        self.command(2 + reader, ("poll",))

    @rule(writer=st.integers(0, 1), request=st.sampled_from(["EndTxnRequest", "ProduceRequest",
                                                             "AddPartitionsToTxnRequest"]),
          ms=st.sampled_from([2_300, 3_000, 5_000]))
    def hold_back(self, writer: int, request: str, ms: int) -> None:
        """The writer's next request of this kind reaches the broker ``ms`` late, past its
        timeout, after the writer gave up on it and went on (KAFKA-17754: a delayed EndTxn or
        produce of one transaction lands in the next)."""
        self._step("hold_back", writer=writer, request=request, ms=ms)
        assert self.sim is not None
        sim = self.sim
        node = self.actors[writer].node_id
        sim.hold_back(lambda src, _dst, m: src == node and type(m).__name__ == request, ms)
        held = sim.holds[-1]
        # time passes until the request is sent and held (for at most 3 s): healing at the
        # program's end would release a hold still waiting
        sim.run_until(sim.now_ns + 3_000 * MS, stop=lambda: held not in sim.holds)

    @rule(p=st.sampled_from([0.05, 0.2, 0.5]), ms=st.sampled_from([3_000, 6_000]))
    def straggle(self, p: float, ms: int) -> None:
        """A share ``p`` of messages is held back for ``ms`` (a stalled connection), past the
        request timeout, so that retries and the next transaction's requests overtake them:
        a produce or EndTxn of one transaction arriving in the next (KAFKA-17754). Healed
        by ``fault(heal)``."""
        self._step("straggle", p=p, ms=ms)
        self._fault("straggle", {"p": p, "ms": ms})


class GroupsMachine(ClusterMachine):
    """An idempotent producer and three members of one consumer group."""

    focus = ("group-member-expired", "group-illegal-generation", "group-unknown-member",
             "group-rebalance-in-progress", "group-coordinator-loaded", "group-static-member-replaced")

    def internal_topics(self) -> list[str]:
        return [OFFSETS_TOPIC]

    @initialize(seed=st.integers(0, 2**16), assignor=st.sampled_from(["range", "roundrobin", "cooperative-sticky"]))
    def boot(self, seed: int, assignor: str) -> None:
        self._boot(seed, assignor=assignor)

    def make_actors(self) -> None:
        self.add_actor(lambda node, i: Writer(node, i, BROKERS, self.producer_config()))
        mc = member_config(self.consumer_config(), GROUP, self.options["assignor"], CLUSTER_TIMINGS)
        for _ in range(3):
            self.add_actor(lambda node, i: Member(node, i, BROKERS, mc, TOPIC, [tp.key for tp in self.keys]))

    def config(self) -> dict:
        return {**super().config(), "idempotence": True, "sub_via": ["subscribe"],
                "groups": {"group": GROUP, "assignor": self.options["assignor"], "static": False,
                           "keys": [tp.key for tp in self.keys], "final_polls": True}}

    def before_final_read(self) -> None:
        assert self.sim is not None
        self.sim.run_until(self.sim.now_ns + 8_000 * MS)  # rebalances settle
        self.heal_ns = self.sim.now_ns  # the members' final polls come after this
        # as an application's poll loop: a member the group dropped while it did not poll
        # rejoins on its next poll, which returns before the join completes; the polls after
        # it show the generation it joined (the checker takes each member's last poll)
        for _ in range(3):
            for m in range(1, 4):
                self.command(m, ("poll",))
            self.sim.run_until(self.sim.now_ns + CLUSTER_TIMINGS["member_rebalance_timeout_ms"] * MS)

    @rule(partitions=st.lists(st.integers(0, PARTITIONS - 1), min_size=1, max_size=3))
    def produce(self, partitions: list[int]) -> None:
        self._step("produce", partitions=partitions)
        self.command(0, ("send", [(self.keys[p], self.value(self.keys[p]), None) for p in partitions]))

    @rule(member=st.integers(0, 2), what=st.sampled_from(["poll", "poll", "commit", "crash", "leave"]))
    def member(self, member: int, what: str) -> None:
        """A member polls, commits what it read, crashes (rebuilt as a new process) or
        leaves and joins again."""
        self._step("member", member=member, what=what)
        self.command(1 + member, (what,))

    @rule(member=st.integers(0, 2), extra_ms=st.sampled_from([500, 2_000, 5_000]),
          then=st.sampled_from(["commit", "poll"]))
    def pause_across_rebalance(self, member: int, extra_ms: int, then: str) -> None:
        """Once every member has polled, one stops (a long GC pause) past its session timeout,
        so the group rebalances without it while the others poll, then wakes and at once
        commits or polls in the generation it remembers: the coordinator must tell it that it
        was replaced."""
        self._step("pause_across_rebalance", member=member, extra_ms=extra_ms, then=then)
        assert self.sim is not None
        sim = self.sim
        node = self.actors[1 + member].node_id
        for m in range(3):  # first the group settles: every member polls (joins, is assigned)
            self.command(1 + m, ("poll",))
        sim.run_until(sim.now_ns + 1_000 * MS)
        sim.pause(node)
        sim.run_until(sim.now_ns + CLUSTER_TIMINGS["member_session_timeout_ms"] * MS)
        for other in range(3):  # the others poll meanwhile: they rebalance and take its partitions
            if other != member:
                self.command(1 + other, ("poll",))
        sim.run_until(sim.now_ns + extra_ms * MS)
        sim.resume(node)
        self.command(1 + member, (then,))

    @rule(member=st.integers(0, 2), paused=st.booleans())
    def pause_member(self, member: int, paused: bool) -> None:
        """A member stops (a long GC pause) or continues, missing rebalances meanwhile."""
        self._step("pause_member", member=member, paused=paused)
        assert self.sim is not None
        node = self.actors[1 + member].node_id
        (self.sim.pause if paused else self.sim.resume)(node)


class CompactionMachine(ClusterMachine):
    """An idempotent producer of keyed updates and tombstones on a compacted topic, and two
    consumers that go back to the beginning."""

    compacted = True
    focus = ("cleaner-removed-records", "cleaner-removed-tombstone", "cleaner-removed-aborted")

    @initialize(seed=st.integers(0, 2**16))
    def boot(self, seed: int) -> None:
        self._boot(seed)

    def make_actors(self) -> None:
        self.add_actor(lambda node, i: Writer(node, i, BROKERS, self.producer_config()))
        for _ in range(2):
            self.add_actor(lambda node, i: Reader(node, i, BROKERS, self.consumer_config(), self.keys,
                                                  record_keys=True))

    def config(self) -> dict:
        return {**super().config(), "idempotence": True, "compacted": True,
                "topic_configs": dict(COMPACTED)}

    @rule(updates=st.lists(st.tuples(st.integers(0, PARTITIONS - 1), st.integers(0, RECORD_KEYS - 1),
                                     st.booleans()), min_size=1, max_size=3))
    def update(self, updates: list[tuple[int, int, bool]]) -> None:
        """Keyed writes; ``True`` makes a tombstone (a delete)."""
        self._step("update", updates=[list(u) for u in updates])
        sends = [(self.keys[p], None if delete else self.value(self.keys[p]), f"k{k}")
                 for p, k, delete in updates]
        self.command(0, ("send", sends))

    @rule(partition=st.integers(0, PARTITIONS - 1), rounds=st.sampled_from([6, 12, 24]),
          key_seed=st.integers(0, RECORD_KEYS - 1))
    def burst(self, partition: int, rounds: int, key_seed: int) -> None:
        """Rounds of keyed updates to one partition, 30 ms apart, every key again and again,
        then time for the cleaner: segments fill and roll and the cleaner compacts them while
        newer values of the same keys arrive."""
        self._step("burst", partition=partition, rounds=rounds, key_seed=key_seed)
        assert self.sim is not None
        tp = self.keys[partition]
        for i in range(rounds):
            key = f"k{(key_seed + i) % RECORD_KEYS}"
            self.command(0, ("send", [(tp, self.value(tp), key)]))
            self.sim.run_until(self.sim.now_ns + 30 * MS)
        self.sim.run_until(self.sim.now_ns + 1_500 * MS)

    @rule(reader=st.integers(0, 1), from_start=st.booleans())
    def poll(self, reader: int, from_start: bool) -> None:
        self._step("poll", reader=reader, from_start=from_start)
        if from_start:
            self.command(1 + reader, ("seek",))
        self.command(1 + reader, ("poll",))


MACHINES: dict[str, type[ClusterMachine]] = {
    "queue": QueueMachine, "txn": TxnMachine, "groups": GroupsMachine, "compaction": CompactionMachine,
}
# the machine whose rules can reach each bug switch
MACHINE_FOR_BUG = {
    Bug.TRUNCATE_TO_HIGH_WATERMARK: "queue", Bug.HW_WITHOUT_EPOCH_CHECK: "queue", Bug.UNCLEAN_ELECTION: "queue",
    Bug.EPOCH_LOOKUP_FALLS_BACK_TO_HW: "queue",
    Bug.NO_SEQUENCE_CHECK: "queue", Bug.ACK_BEFORE_ISR: "queue", Bug.TXN_UNFENCED_REQUESTS: "txn",
    Bug.LSO_OFF_BY_ONE: "txn", Bug.GROUP_GENERATION_UNFENCED: "groups", Bug.COMPACTION_DROPS_LATEST: "compaction",
}


def machine(name: str, bugs: tuple[str, ...] | list[str] = ()) -> type[ClusterMachine]:
    """The machine class ``name`` with the engine's bug switches ``bugs`` on."""
    base = MACHINES[name]
    # a fresh subclass each time: its hooks and ``last`` are its own
    return type(base.__name__, (base,), {"bugs": tuple(bugs), "__module__": __name__})


def replay(name: str, bugs: list[str], steps: list[list]) -> ClusterMachine:
    """Run a recorded program (``steps`` of a run) again; raises what the run raised."""
    m = machine(name, bugs)()
    try:
        for step, args in steps:
            getattr(m, step)(**args)
            m.white_box()
    finally:
        m.teardown()
    return m


@dataclass
class Exploration:
    found: str | None  # the finding's message, None when nothing was found
    examples: int  # programs run (shrinking included)
    seconds: float
    steps: list  # the shrunk program (rules with their arguments)
    timed_out: bool = False  # the time limit stopped it before its programs were run
    found_after: int | None = None  # programs run up to the first one that found something
    found_seconds: float | None = None  # and the seconds until then (shrinking comes after)


def explore(name: str, bugs: list[str], examples: int, steps: int = 25, time_limit: float | None = None,
            on_example=None, derandomize: bool = False, shrink: bool = True) -> Exploration:
    """Run machine ``name`` (with bug switches ``bugs``) for up to ``examples`` programs of up
    to ``steps`` rules, stopping early (with what was found so far) after ``time_limit``.
    ``derandomize``: the same programs in the same order every time (a budget of programs is
    then a verdict that does not depend on the machine's speed). ``shrink``: False stops at
    the first finding, which is reported as it was found."""
    cls = machine(name, bugs)
    count = [0]
    start = time.monotonic()
    deadline = None if time_limit is None else start + time_limit

    class Stop(BaseException):
        """The time limit passed, or a finding ends it (a BaseException: Hypothesis lets it
        through)."""

    first: list[tuple[str, list]] = []  # the first finding, kept in case shrinking is cut short

    def hook(m: ClusterMachine) -> None:
        count[0] += 1
        if on_example is not None:
            on_example(count[0])
        if not first and _found(m):
            first.append((_finding_text(m), [list(s) for s in m.steps], count[0], time.monotonic() - start))
            if not shrink:
                raise Stop
        if deadline is None or time.monotonic() <= deadline:
            return
        # past the limit: stop, unless shrinking a finding (for as long again at most; the
        # programs shrinking tries mostly find nothing, and stopping at one of those lost the
        # finding: the machines looked blind)
        if not first or time.monotonic() > deadline + max(time_limit or 0, 30):
            raise Stop

    cls.on_example = staticmethod(hook)
    found = None
    timed_out = False
    try:
        with with_reporter(lambda _text: None):  # the program is printed from ``steps`` instead
            run_state_machine_as_test(cls, settings=settings(
                max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
                suppress_health_check=list(HealthCheck), print_blob=False, derandomize=derandomize))
    except Stop:
        timed_out = True
    except (Finding, Flaky) as e:
        found = str(e).splitlines()[0] if str(e) else type(e).__name__
    except BaseExceptionGroup as group:  # Hypothesis found distinct failures: the first
        finding = next((e for e in group.exceptions if isinstance(e, (Finding, Flaky))), None)
        if finding is None:
            raise
        # the program shown is the last one run: name its own finding
        last = cls.last
        found = (_finding_text(last) if last is not None and _found(last)
                 else str(finding).splitlines()[0] if str(finding) else type(finding).__name__)
    last = cls.last
    program = [list(s) for s in last.steps] if (found and last is not None) else []
    if found is None and first:
        found, program = first[0][:2]  # shrinking was cut short: the finding as first seen
        found += " (not shrunk: the time limit cut shrinking short)" if shrink else " (not shrunk)"
    after, after_s = (first[0][2], first[0][3]) if first else (None, None)
    return Exploration(found, count[0], time.monotonic() - start, program, timed_out and not found,
                       after if found else None, after_s if found else None)


def _finding_text(m: ClusterMachine) -> str:
    if m.sim is not None and m.sim.violations:
        at, v = m.sim.violations[0]
        return f"invariant '{v.invariant}' broken on node {v.node} at {at / 1e9:.3f} s: {v.detail}"
    r = m.result or {}
    kinds = [k for k in r.get("anomaly_types", []) if k != "empty-history"]
    return "the history checker found: " + ", ".join(kinds)


def _found(m: ClusterMachine) -> bool:
    """Whether this run found something (so that shrinking is not cut short)."""
    if m.sim is not None and m.sim.violations:
        return True
    r = m.result
    return bool(r and [k for k in r["anomaly_types"] if k != "empty-history"])
