"""What every workload's Hypothesis state machine shares: a simulated cluster
(a controller and three brokers in a seeded :class:`~fault_injection.simulation.Simulation`),
the rules that are not a client's (time passing, faults on a node or on the node that plays a
role, administrative elections), the white-box invariants after every rule, and the teardown
that heals everything, lets the clients finish, reads every partition from the beginning
and asks the history checker for its verdict.

Every rule a run executes is also kept in ``steps``, so :func:`kafkacheck.explore.replay`
runs the same program again: the simulation is seeded by the ``boot`` rule, so it replays
byte for byte. The Hypothesis profiles ``ci`` (30 derandomized programs of up to 25 rules)
and ``deep`` (2,000 programs of up to 60) are registered here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, ClassVar

from hypothesis import HealthCheck, currently_in_test_context, settings, target
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from fault_injection.cluster import (
    CLUSTER_TIMINGS,
    CONTROLLER_ID,
    MS,
    add_cluster,
    broker_config,
    controller_config,
)
from fault_injection.nemesis import Nemesis
from fault_injection.simulation import Simulation
from kafkacheck.workloads.actors import Actor, Reader
from kafkacheck.workloads.client import consumer_config, producer_config
from properties.checker import check
from reference import marks
from reference.consumer import ConsumerConfig
from reference.coordinator import partition_for
from reference.messages import CreateTopicsRequest, TopicPartition
from reference.producer import ProducerConfig
from reference.topics import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TXN_TOPIC

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
        # replication factor 3 with min.insync.replicas 2, or 2 with 1 (the model's shape); or
        # (``placed``, offline-partition's shape) one replica a partition, partition p on the
        # broker BROKERS[p]
        rf = options.get("replication", 3)
        min_isr = 2 if rf == 3 else 1
        bconfig = replace(broker_config(min_isr), **self.broker_settings)
        add_cluster(sim, len(BROKERS), bconfig, controller_config(min_isr), self.bugs)
        for n in SERVERS:
            sim.start(n)
        self.nemesis = Nemesis(sim, SERVERS)
        sim.run_until(1_000 * MS)
        configs = COMPACTED if self.compacted else ()
        sim.inject(ADMIN_ID, CONTROLLER_ID, CreateTopicsRequest(
            1, TOPIC, -1, -1, configs, assignments=tuple((p, (BROKERS[p],)) for p in range(PARTITIONS)))
            if options.get("placed") else CreateTopicsRequest(1, TOPIC, PARTITIONS, rf, configs))
        # Kafka creates its internal topics on first use; the harness creates them up front
        sizes = {TXN_TOPIC: bconfig.transaction_state_partitions, OFFSETS_TOPIC: bconfig.offsets_partitions,
                 SHARE_STATE_TOPIC: bconfig.share_state_partitions}
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
    broker_settings: ClassVar[dict[str, Any]] = {}  # BrokerConfig fields the machine sets

    def internal_topics(self) -> list[str]:
        return []

    def make_actors(self) -> None:
        raise NotImplementedError

    def add_actor(self, make: Callable[[int, int], Actor]) -> None:
        i = len(self.actors)
        self.actors.append(make(ACTOR_BASE + i, i))

    def producer_config(self, acks: int = -1, idempotent: bool = True) -> ProducerConfig:
        return producer_config(CLUSTER_TIMINGS, acks, idempotent)  # as kafkacheck run's clients

    def consumer_config(self, read_committed: bool = False) -> ConsumerConfig:
        return consumer_config(CLUSTER_TIMINGS, read_committed)

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
                not self._others_in_sync(node) or self.options.get("replication", 3) < 3
                or self.options.get("placed")):
            # one broker crashed at a time, and only once the last one is back in every ISR:
            # Kafka does not fsync, so two crashes closer than that may lose acknowledged
            # records (and a broker restarted after losing unflushed data leaves the ISR and
            # ELR, KIP-966, so crashing every replica leaves a partition offline for good);
            # that is Kafka's failure model, not a bug. With two replicas (min.insync.replicas
            # 1) nothing crashes: one crash and the other replica fenced leave a partition
            # offline for good (the crashed one was its last ISR member); a partition of one
            # replica (placed) loses what it did not flush
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
                "network": "connections", "final_read": self.final_read}

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
