"""Hypothesis state machines that drive the simulated reference cluster (what they share is
:mod:`properties.cluster_machine`; :mod:`properties.exploration` runs them).

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

from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from fault_injection.cluster import (
    CLUSTER_TIMINGS,
    MS,
)
from fault_injection.model_shapes import template_schedule
from properties.actors import Member, Reader, TxnWriter, Writer, member_config
from properties.cluster_machine import (
    BROKERS,
    COMPACTED,
    GROUP,
    MODEL_SHAPES,
    PARTITIONS,
    RECORD_KEYS,
    TOPIC,
    ClusterMachine,
    Finding,
)
from reference.bugs import Bug
from reference.topics import OFFSETS_TOPIC, TXN_TOPIC


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


__all__ = ["MACHINES", "MACHINE_FOR_BUG", "ClusterMachine", "Finding", "machine", "replay"]
