"""The share workload's Hypothesis machine (``kafkacheck explore --machine share``): an
idempotent producer and three consumers of one share group (KIP-932) on the simulated cluster.

A :class:`Sharer` runs one command at a time on its :class:`~reference.share_consumer.ShareConsumer`
and records the share workload's ops (kafkacheck/workloads/share.py): ``acquire`` (a poll: the
records it got, each with its delivery count), ``ack`` (a type for each record it holds,
answered per partition), ``crash`` (torn down without a word, a new process takes its place),
and ``subscribe`` (after joining, and after a clean leave). Its commands:

* ``("acquire",)``;
* ``("ack", types)``: acknowledge every record it holds, the types (accept, release, reject)
  given in turn; holding nothing, it acquires first;
* ``("stall", types, extra_ms)``: hold what it acquired (acquiring first if it holds nothing)
  past the lock, ``LOCK_MS + extra_ms``, then acknowledge it as ``ack`` does;
* ``("crash",)`` and ``("leave",)``.

Besides those and the cluster's faults the machine has rules aimed at the moments the
design makes delicate: records given back and acquired again (``redeliver``); a lock that
expires while its holder still processes the records, another consumer acquiring them and
the first acknowledging them late (``expire_then_ack``); and an acknowledgement answered just
before its partition's leader fails (``ack_then_fault``). After healing, every consumer
acquires and accepts whatever comes until nothing is left: the checker's
``share`` row judges the history (``share-lost`` included).
"""

from __future__ import annotations

from typing import ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from fault_injection.cluster import CLUSTER_TIMINGS, MS
from kafkacheck.workloads.actors import POLL_MS, PROCESS_STRIDE, Actor, Writer, _int
from kafkacheck.workloads.machine import BROKERS, GROUP, PARTITIONS, ClusterMachine
from reference.node import Timer
from reference.share_consumer import ShareConsumer, ShareConsumerConfig, SharedRecord, nodes_of
from reference.share_messages import ACK_TYPES
from reference.topics import OFFSETS_TOPIC, SHARE_STATE_TOPIC

LOCK_MS = 2_000  # group.share.record.lock.duration.ms, as the share workload's: locks expire within programs
DELIVERY_LIMIT = 5
CONSUMERS = 3
TICK_MS = 50  # an acquire looks at its fetches this often
# the final phase: at least this long (crashed members' sessions end, every lock expires),
# then until a few rounds in a row acquired nothing, at most FINAL_MAX_MS
FINAL_MIN_MS = 3 * LOCK_MS + CLUSTER_TIMINGS["member_session_timeout_ms"] + 8_000  # as the workload's
FINAL_MAX_MS = 40_000
FINAL_QUIET_ROUNDS = 3
TYPES = st.lists(st.sampled_from(["accept", "accept", "accept", "release", "reject"]), min_size=1, max_size=4)


class Sharer(Actor):
    """A share consumer of the machine's group, subscribed to the topic (module docstring)."""

    def __init__(self, node_id: int, process: int, bootstrap: list[int], request_timeout_ms: int,
                 topic: str, keys: list[str]) -> None:
        super().__init__(node_id, process)
        self.index = process
        self.bootstrap = bootstrap
        self.request_timeout_ms = request_timeout_ms
        self.topic = topic
        self.keys = keys
        self.held: list[SharedRecord] = []  # acquired, not acknowledged yet
        self.last_acked: list[SharedRecord] = []  # what the last ack named
        self.acquired = 0  # records acquired so far (the final phase watches it)
        self.client = self._new_client()

    def _new_client(self) -> ShareConsumer:
        c = ShareConsumer(self.node_id, self.bootstrap,
                          ShareConsumerConfig(GROUP, request_timeout_ms=self.request_timeout_ms, max_records=50),
                          member_id=f"machine-share-{self.index}-{self.gen}")
        c._corr += self.gen * 10**8  # answers to a predecessor's requests never match
        return c

    def started(self, now_ms: int) -> None:
        self._subscribe(now_ms)

    def _subscribe(self, now_ms: int) -> None:
        self.record("invoke", "subscribe", self.keys)
        self.client.subscribe(now_ms, [self.topic])
        self.record("ok", "subscribe", self.keys)

    def _replace(self, now_ms: int) -> None:
        """A new consumer (a new member id) in the place of the last, which sends nothing more
        (what it had queued, a leave's last requests, still goes out)."""
        old = self.client
        self._out.extend(o for o in old.drain() if type(o) is not Timer)
        self.gen += 1
        self.held = []
        self.client = self._new_client()
        self.client.start(now_ms)
        self._subscribe(now_ms)

    # ------------------------------------------------------------ commands

    def begin(self, now_ms: int, cmd: tuple) -> None:
        f = cmd[0]
        if f in ("ack", "stall") and not self.held and cmd[-1] != "again":
            self.queue.appendleft((*cmd, "again"))  # nothing held: acquire first
            f = "acquire"
        if f == "acquire":
            self.record("invoke", "acquire", None)
            self.client.poll(now_ms)
            self.op = {"f": "acquire", "until": now_ms + POLL_MS}
            self.set_timer(TICK_MS, ("op", self.seq))
        elif f == "ack":
            self._ack(now_ms, cmd[1])
        elif f == "stall":
            if self.held:  # the application takes longer than the lock
                self.op = {"f": "stall", "types": cmd[1]}
                self.set_timer(LOCK_MS + cmd[2], ("op", self.seq))
        elif f == "crash":
            self.record("invoke", "crash", None)
            self.record("info", "crash", None)
            self.process += PROCESS_STRIDE
            self._replace(now_ms)
        elif f == "leave":  # the leader releases what it holds; it joins again as a new member
            self.client.close()
            self._replace(now_ms)

    def _ack(self, now_ms: int, types: tuple[str, ...]) -> None:
        self.last_acked = []
        if not self.held:
            return
        value: dict[str, list] = {}
        self.last_acked = sorted(self.held, key=lambda r: (r.tp, r.offset))
        for i, r in enumerate(self.last_acked):
            t = types[i % len(types)]
            self.client.acknowledge(r, ACK_TYPES[t])
            value.setdefault(r.tp.key, []).append([r.offset, t])
        self.held = []
        self.op = {"f": "ack", "value": value, "nodes": nodes_of(self.last_acked) or None}
        self.record("invoke", "ack", value)
        self.client.commit()

    def timer(self, now_ms: int, key: object) -> None:
        match key:
            case ("c", gen, ("share-request", node, corr)) if gen == self.gen and self.op is not None:
                s = self.client._sessions.get(node)
                if s is not None and s.in_flight == corr and not s.in_flight_acks:
                    self.op["lost"] = True  # a fetch without an answer: it may have acquired records unseen
        super().timer(now_ms, key)

    def on_timer(self, now_ms: int) -> None:
        op = self.op
        assert op is not None
        if op["f"] == "stall":
            self.op = None
            self._ack(now_ms, op["types"])
            return
        if op["f"] != "acquire":
            return
        # an acquisition ends with no fetch out (records that came later would be recorded
        # by the next acquire, after their lock began); until POLL_MS a fetch that brought
        # nothing (a share-partition still loading, a new session) is sent again
        if any(s.in_flight >= 0 for s in self.client._sessions.values()) or (
                now_ms < op["until"] and not self.client.records):
            if now_ms < op["until"] and not self.client.records:
                self.client.poll(now_ms)
            self.set_timer(TICK_MS, ("op", self.seq))
            return
        if op.get("lost"):
            # the acquisition's outcome is unknown (as the checker reads an info acquire: it may
            # have delivered records once each, unseen); what did come is left to its lock
            self.client.take_records()
            self.complete("info", "acquire", None)
            return
        got: dict[str, list] = {}
        records = self.client.take_records()
        for r in records:
            got.setdefault(r.tp.key, []).append([r.offset, _int(r.value), r.delivery_count])
            # a record acquired again (its last lock expired while held) is held once, as now
            self.held = [h for h in self.held if (h.tp, h.offset) != (r.tp, r.offset)] + [r]
            self.acquired += 1
        self.complete("ok", "acquire", got, nodes=nodes_of(records) or None)

    def check(self, now_ms: int) -> None:
        op, result = self.op, self.client.commit_result
        if op is None or op["f"] != "ack" or result is None:
            return
        errors = {tp.key: e.name for tp, e in sorted(result.items())}
        self.complete("ok", "ack", {**op["value"], "errors": errors}, nodes=op["nodes"])


class ShareMachine(ClusterMachine):
    """An idempotent producer and three consumers of one share group."""

    broker_settings: ClassVar[dict] = {"share_record_lock_duration_ms": LOCK_MS,
                                       "share_delivery_count_limit": DELIVERY_LIMIT,
                                       "share_auto_offset_reset": "earliest"}
    focus = ("share-ack-invalid-record-state", "share-lock-released", "share-partition-loaded",
             "share-coordinator-loaded", "share-state-fenced-leader", "share-group-member-expired",
             "share-session-not-found")

    def internal_topics(self) -> list[str]:
        return [OFFSETS_TOPIC, SHARE_STATE_TOPIC]

    @initialize(seed=st.integers(0, 2**16))
    def boot(self, seed: int) -> None:
        self._boot(seed)

    def make_actors(self) -> None:
        self.add_actor(lambda node, i: Writer(node, i, BROKERS, self.producer_config()))
        timeout = self.consumer_config().request_timeout_ms
        for _ in range(CONSUMERS):
            self.add_actor(lambda node, i: Sharer(node, i, BROKERS, timeout, self.keys[0].topic,
                                                  [tp.key for tp in self.keys]))

    def config(self) -> dict:
        return {**super().config(), "idempotence": True,
                "share": {"group": GROUP, "keys": [tp.key for tp in self.keys], "lock_ms": LOCK_MS,
                          "delivery_limit": DELIVERY_LIMIT, "clock_slack_ms": 0, "final": True}}

    def _sharer(self, consumer: int) -> Sharer:
        a = self.actors[1 + consumer]
        assert isinstance(a, Sharer)
        return a

    def _settle(self, consumers: list[int], limit_ms: int = 5_000) -> None:
        """Run until these consumers finished their commands (at most ``limit_ms``)."""
        assert self.sim is not None
        sharers = [self._sharer(c) for c in consumers]
        self.sim.run_until(self.sim.now_ns + limit_ms * MS, stop=lambda: all(s.idle for s in sharers))

    # ------------------------------------------------------------ rules

    @rule(partitions=st.lists(st.integers(0, PARTITIONS - 1), min_size=1, max_size=3))
    def produce(self, partitions: list[int]) -> None:
        self._step("produce", partitions=partitions)
        self.command(0, ("send", [(self.keys[p], self.value(self.keys[p]), None) for p in partitions]))

    @rule(consumer=st.integers(0, CONSUMERS - 1))
    def acquire(self, consumer: int) -> None:
        self._step("acquire", consumer=consumer)
        self.command(1 + consumer, ("acquire",))

    @rule(consumer=st.integers(0, CONSUMERS - 1), types=TYPES)
    def ack(self, consumer: int, types: list[str]) -> None:
        """Acknowledge what the consumer holds, the types in turn (acquiring first if it holds nothing)."""
        self._step("ack", consumer=consumer, types=types)
        self.command(1 + consumer, ("ack", tuple(types)))

    @rule(consumer=st.integers(0, CONSUMERS - 1), types=TYPES, extra_ms=st.sampled_from([0, 300, 1_500]))
    def stall(self, consumer: int, types: list[str], extra_ms: int) -> None:
        """The consumer holds what it acquired past the lock, then acknowledges it."""
        self._step("stall", consumer=consumer, types=types, extra_ms=extra_ms)
        self.command(1 + consumer, ("stall", tuple(types), extra_ms))

    @rule(consumer=st.integers(0, CONSUMERS - 1), what=st.sampled_from(["crash", "leave"]))
    def churn(self, consumer: int, what: str) -> None:
        """The consumer crashes (its locks end when they expire) or leaves; a new one takes its place."""
        self._step("churn", consumer=consumer, what=what)
        self.command(1 + consumer, (what,))

    @rule(consumer=st.integers(0, CONSUMERS - 1), paused=st.booleans())
    def pause_consumer(self, consumer: int, paused: bool) -> None:
        """The consumer stops (a long GC pause: no heartbeats, its locks run out) or continues."""
        self._step("pause_consumer", consumer=consumer, paused=paused)
        assert self.sim is not None
        node = self._sharer(consumer).node_id
        (self.sim.pause if paused else self.sim.resume)(node)

    @rule(holder=st.integers(0, CONSUMERS - 1), taker=st.integers(0, CONSUMERS - 2),
          what=st.sampled_from(["release", "accept", "reject"]))
    def expire_then_ack(self, holder: int, taker: int, what: str) -> None:
        """The holder acquires records and processes them past their lock; meanwhile another
        consumer (the ``taker``-th of those that share a partition with it) acquires them again;
        then the holder acknowledges them late, and the others acquire while the taker still
        holds them: the late acknowledgement is the lapsed holder's, not the taker's to lose."""
        self._step("expire_then_ack", holder=holder, taker=taker, what=what)
        assert self.sim is not None
        for p in range(PARTITIONS):
            self.command(0, ("send", [(self.keys[p], self.value(self.keys[p]), None)]))
        self.sim.run_until(self.sim.now_ns + 300 * MS)
        mine = self._sharer(holder).client.assignment
        others = [c for c in range(CONSUMERS) if c != holder]
        sharing = [c for c in others if self._sharer(c).client.assignment & mine] or others
        second = sharing[taker % len(sharing)]
        self.command(1 + holder, ("stall", (what,), 200))
        self.sim.run_until(self.sim.now_ns + (POLL_MS + LOCK_MS + 100) * MS)
        self.command(1 + second, ("acquire",))  # before the holder's late acknowledgement
        self._settle([holder, second])
        rest = [c for c in range(CONSUMERS) if c != second]
        for c in rest:
            self.command(1 + c, ("acquire",))
        self._settle(rest)
        self.sim.run_until(self.sim.now_ns + 100 * MS)  # (a fault at the same instant would excuse it)

    @rule(consumer=st.integers(0, CONSUMERS - 1), rounds=st.integers(1, 3), how=st.sampled_from(["release", "expire"]))
    def redeliver(self, consumer: int, rounds: int, how: str) -> None:
        """The consumer acquires records and gives them back (releases them, or lets their lock
        expire) ``rounds`` times, acquiring them again each time: each delivery counts."""
        self._step("redeliver", consumer=consumer, rounds=rounds, how=how)
        assert self.sim is not None
        for _ in range(rounds):
            if how == "release":
                self.command(1 + consumer, ("ack", ("release",)))
                self._settle([consumer])
            else:
                self.command(1 + consumer, ("acquire",))
                self._settle([consumer])
                self.sim.run_until(self.sim.now_ns + (LOCK_MS + 200) * MS)
        self.command(1 + consumer, ("acquire",))
        self._settle([consumer])
        self.sim.run_until(self.sim.now_ns + 100 * MS)

    @rule(consumer=st.integers(0, CONSUMERS - 1), kind=st.sampled_from(["kill", "torn-write", "split"]),
          types=TYPES)
    def ack_then_fault(self, consumer: int, kind: str, types: list[str]) -> None:
        """The consumer acknowledges what it holds (acquiring first if it holds nothing) and the
        moment the answer comes the leader of a partition it acknowledged fails; left for later
        rules (or the end) to heal."""
        self._step("ack_then_fault", consumer=consumer, kind=kind, types=types)
        s = self._sharer(consumer)
        self.command(1 + consumer, ("ack", tuple(types)))
        self._settle([consumer])
        tps = [r.tp for r in s.last_acked]
        partition = tps[0].partition if tps else 0
        node = self._role("leader", partition)
        if node is not None:
            self._apply_fault(kind, node)

    # ------------------------------------------------------------ the end

    def before_final_read(self) -> None:
        """Every consumer accepts whatever it gets, round after round, until the crashed
        members' sessions ended, every lock expired and a few rounds in a row acquired nothing."""
        assert self.sim is not None
        sim = self.sim
        start = sim.now_ns
        quiet = 0
        sharers = [self._sharer(c) for c in range(CONSUMERS)]
        while not sim.stopped and sim.now_ns < start + FINAL_MAX_MS * MS:
            before = sum(s.acquired for s in sharers)
            for c in range(CONSUMERS):
                self.command(1 + c, ("ack", ("accept",)))
            sim.run_until(sim.now_ns + 1_000 * MS, stop=lambda: all(s.idle for s in sharers))
            sim.run_until(sim.now_ns + 100 * MS)
            quiet = quiet + 1 if sum(s.acquired for s in sharers) == before else 0
            if quiet >= FINAL_QUIET_ROUNDS and sim.now_ns >= start + FINAL_MIN_MS * MS:
                break
