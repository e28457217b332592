"""The groups workload: consumer-group members that subscribe, poll, commit, crash and leave.

One client is an idempotent producer writing unique values to every partition. The others
are members of one consumer group, all subscribed to the topic, with the assignor of
``--assignor``; each op is one of

* ``poll``: poll for a while; the completion carries what was read and the member's
  ``rebalance_log`` (revocations and assignments with their generation, and what the member
  owned after each assignment);
* ``commit``: commit the positions after what was read (the op's ``generation`` field names
  the generation it was sent with): ``ok``, ``fail`` when the coordinator refused it
  (fenced), ``info`` when the answer never came;
* ``crash``: the member is torn down without leaving and rebuilt (a new process; with
  ``--static-members`` the same ``group.instance.id``);
* ``subscribe`` after a clean leave: the member leaves the group and joins again.

The nemesis also pauses members for longer than their session timeout, so that they miss
rebalances and wake up with stale generations. At the end every member polls once more so
that its final assignment is in the history.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from fault_injection.cluster import CLUSTER_TIMINGS, MS
from fault_injection.simulation import Simulation
from kafkacheck.real.real_run import RealMember, RealRun
from kafkacheck.workloads.actors import Member, Writer, member_config
from kafkacheck.workloads.base import Workload
from kafkacheck.workloads.client import Budget, ClientBase, decode_value, randint
from kafkacheck.workloads.machine import BROKERS, PARTITIONS, TOPIC, ClusterMachine
from kafkacheck.workloads.machine import GROUP as MACHINE_GROUP
from kafkacheck.workloads.queue_client import QueueClient
from kafkacheck.workloads.rules import commit_completion
from reference.consumer import ConsumerConfig
from reference.group_consumer import GroupConsumer
from reference.group_messages import ConsumerGroupHeartbeatRequest
from reference.modern_consumer import ModernGroupConsumer
from reference.node import Node
from reference.topics import OFFSETS_TOPIC

GROUP = "workers"
# kafka-python's JoinGroup timeout: max(request.timeout.ms, max.poll.interval.ms + 5 s), with
# Kafka's default max.poll.interval.ms (300 s), which the conformance members keep
KAFKA_PYTHON_JOIN_TIMEOUT_MS = 300_000 + 5_000


class GroupMemberClient(ClientBase):
    def __init__(self, node_id: int, index: int, n_clients: int, keys: list[str],
                 bootstrap: list[int], rng: random.Random, budget: Budget,
                 consumer_config: ConsumerConfig, static: bool, poll_ms: int = 200,
                 think_ms: int = 50, protocol: str = "classic") -> None:
        super().__init__(node_id)
        self.index = index
        self.n_clients = n_clients
        self.keys = keys
        self.topic = keys[0].rpartition(":")[0]
        self.incarnation = 0
        self.bootstrap = bootstrap
        self.rng = rng
        self.budget = budget
        self.static = static
        self.protocol = protocol  # the group protocol: classic, or consumer (KIP-848)
        self.config = consumer_config
        self.poll_ms = poll_ms
        self.think_ms = think_ms
        self.producer = None
        self.process = index
        self.consumer = self._new_consumer()
        self.op: dict | None = None
        self.op_seq = 0
        self.done = False
        self.final_polled = False
        self.last_read: dict[str, list] = {}  # what the last poll returned

    def _new_consumer(self) -> GroupConsumer | ModernGroupConsumer:
        instance = f"member-{self.index}" if self.static else None
        config = replace(self.config, group_id=GROUP, group_instance_id=instance)
        if self.protocol == "consumer":
            # its own member id, as Kafka 4.0's clients make (KIP-1082): a new one a process
            c: GroupConsumer | ModernGroupConsumer = ModernGroupConsumer(
                self.node_id, self.bootstrap, config, member_id=f"member-{self.index}.{self.incarnation}")
        else:
            # a JoinGroup waits for its answer as kafka-python's does in the conformance workload
            # (max.poll.interval.ms, Kafka's default, + 5 s), ended early only by a broken connection
            c = GroupConsumer(self.node_id, self.bootstrap, config, join_timeout_ms=KAFKA_PYTHON_JOIN_TIMEOUT_MS)
        # a rebuilt member is a new process: answers to its predecessor's requests (new
        # correlation ids) and its predecessor's timers (tagged) never reach it
        c._corr += self.incarnation * 10**9
        c.timer_tag = ("c", self.incarnation)
        return c


    def _route_timer(self, now_ms: int, key: object) -> bool:
        match key:
            case ("c", incarnation, inner):
                if incarnation == self.incarnation:
                    self.consumer.timer(now_ms, inner)
                return True
        return False

    def start(self, now_ms: int) -> None:
        self.consumer.start(now_ms)
        self._subscribe(now_ms)
        self.set_timer(randint(self.rng, 1, 50), "next")

    def slow_callback(self, ms: int) -> bool:
        """The nemesis slow-callback: the member's next revocation takes ``ms`` (KIP-848's
        member only; False when this one is classic)."""
        if not isinstance(self.consumer, ModernGroupConsumer):
            return False
        self.consumer.slow_callback_ms = ms
        return True

    def _subscribe(self, now_ms: int, carried: bool = False) -> None:
        """Subscribe (again); ``carried``: the history goes on as a new process with the same
        consumer (after an op whose outcome is unknown), so the new process starts owning what
        the consumer owns: its subscribe says so, as an assignment at the consumer's epoch."""
        self.record(process=self.process, type="invoke", f="subscribe", value=self.keys)
        log = self.consumer.take_rebalance_log() if carried else []
        owned = sorted(tp.key for tp in self.consumer.owned) if carried else []
        if owned:
            log.append({"type": "assigned", "keys": owned, "generation": self.consumer.generation, "owned": owned})
        self.consumer.subscribe(now_ms, [self.topic])
        self.record(process=self.process, type="ok", f="subscribe", value=self.keys,
                    **({"rebalance_log": log} if log else {}))

    # ------------------------------------------------------------ ops

    def _next_op(self, now_ms: int) -> None:
        if self.consumer.fenced:
            # FENCED_INSTANCE_ID is fatal for a Kafka consumer: the application restarts it
            self.budget.remaining -= 1  # the restart is an op (a crash op in the history)
            self._crash(now_ms)
            return
        if self.budget.remaining <= 0:
            self.done = True
            self.consumer.poll(now_ms)  # keep the membership alive until the run ends
            self.set_timer(self.poll_ms, "idle")
            return
        self.budget.remaining -= 1
        self.op_seq += 1
        x = self.rng.random()
        if x < 0.65:
            self._start_poll(now_ms)
        elif x < 0.98:
            self._start_commit(now_ms)
        elif x < 0.99:
            self._crash(now_ms)
        else:
            self._leave_and_rejoin(now_ms)

    def _start_poll(self, now_ms: int, final: bool = False) -> None:
        self.op = {"f": "poll", "final": final, "start_ms": now_ms}
        self.record(process=self.process, type="invoke", f="poll", value=[["poll"]])
        self.consumer.poll(now_ms)
        self.set_timer(self.poll_ms, ("poll-done", self.op_seq))

    def _finish_poll(self, now_ms: int) -> None:
        got: dict[str, list] = {}
        for r in self.consumer.take_records():
            got.setdefault(r.tp.key, []).append([r.offset, decode_value(r.value)])
        log = self.consumer.take_rebalance_log()
        extra = {"rebalance_log": log} if log else {}
        self.record(process=self.process, type="ok", f="poll", value=[["poll", got]], **extra)
        self.last_read = got
        # a poll that took longer than the session (the member was paused, as by a long GC
        # pause): the application commits what it processed at once, as a real one would,
        # in the generation it still believes it holds
        stalled = self.op is not None and now_ms - self.op["start_ms"] > self.config.session_timeout_ms
        self._end_op(now_ms, "ok", commit_next=stalled)

    def _start_commit(self, now_ms: int, offsets: dict | None = None) -> None:
        """Commit ``offsets`` (default: the positions after everything read of the partitions
        it owns); with nothing to commit, or a commit still in flight, poll instead."""
        if offsets is None:
            offsets = {tp: o for tp, o in self.consumer.consumed.items() if tp in self.consumer.owned}
        if not offsets or self.consumer._commit_corr >= 0:
            self._start_poll(now_ms)
            return
        value = {tp.key: o for tp, o in sorted(offsets.items())}
        self.op = {"f": "commit", "value": value, "generation": self.consumer.generation}
        self.record(process=self.process, type="invoke", f="commit", value=value,
                    generation=self.consumer.generation)
        self.consumer.commit(offsets)
        self._check_commit(now_ms)

    def _check_commit(self, now_ms: int) -> None:
        op = self.op
        result = self.consumer.commit_result
        if op is None or op["f"] != "commit" or result is None:
            return
        type_ = commit_completion(result)
        self.record(process=self.process, type=type_, f="commit", value=op["value"],
                    generation=op["generation"], error=None if type_ == "ok" else result.name)
        self._end_op(now_ms, type_)

    def _crash(self, now_ms: int) -> None:
        """Tear the member down without leaving, and start a fresh one as a new process."""
        self.record(process=self.process, type="invoke", f="crash", value=None)
        self.record(process=self.process, type="info", f="crash", value=None)
        self.process += self.n_clients
        self.incarnation += 1
        self.consumer = self._new_consumer()
        self.consumer.start(now_ms)
        self._subscribe(now_ms)
        self.budget.completed += 1
        self.set_timer(randint(self.rng, 0, self.think_ms), "next")

    def _leave_and_rejoin(self, now_ms: int) -> None:
        self.consumer.close()
        log = self.consumer.take_rebalance_log()
        self.record(process=self.process, type="invoke", f="subscribe", value=self.keys)
        self.consumer.state = "unjoined"
        self.consumer.subscribe(now_ms, [self.topic])
        extra = {"rebalance_log": log} if log else {}
        self.record(process=self.process, type="ok", f="subscribe", value=self.keys, **extra)
        self.budget.completed += 1
        self.set_timer(randint(self.rng, 0, self.think_ms), "next")

    def _end_op(self, now_ms: int, type_: str, commit_next: bool = False) -> None:
        final = self.op is not None and self.op.get("final")
        self.op = None
        if final:
            self.final_polled = True
            return
        self.budget.completed += 1
        if type_ == "info":
            self.process += self.n_clients
            self._subscribe(now_ms, carried=True)
        elif commit_next and self.budget.remaining > 0 and not self.consumer.fenced:
            self.budget.remaining -= 1
            self.op_seq += 1
            self._start_commit(now_ms)
            return
        self.set_timer(randint(self.rng, 0, self.think_ms), "next")

    def final_poll(self, now_ms: int) -> None:
        """One last poll so that the member's final assignment reaches the history."""
        if self.op is None:
            self.op_seq += 1
            self._start_poll(now_ms, final=True)

    # ------------------------------------------------------------ inputs

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self._route_message(now_ms, src, message)
        self._check_commit(now_ms)

    def timer(self, now_ms: int, key: object) -> None:
        if self._route_timer(now_ms, key):
            self._check_commit(now_ms)
            return
        match key:
            case "next":
                if self.op is None:
                    self._next_op(now_ms)
            case "idle":
                if self.op is None and self.consumer.fenced:
                    self._crash(now_ms)  # restarted, as after a fenced op; "next" idles again
                    return
                if self.op is None:
                    self.consumer.poll(now_ms)
                    self.consumer.take_records()  # dropped: not an op (the run is ending)
                self.set_timer(self.poll_ms, "idle")
            case ("poll-done", seq):
                if self.op is not None and self.op["f"] == "poll" and seq == self.op_seq:
                    self._finish_poll(now_ms)


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
        # (partials of module functions, not lambdas: mypyc cannot compile a closure in a method
        # of the machine, a Python class; what a lambda read when called they read when called)
        self.add_actor(partial(_writer, self))
        mc = member_config(self.consumer_config(), MACHINE_GROUP, self.options["assignor"], CLUSTER_TIMINGS)
        for _ in range(3):
            self.add_actor(partial(_member, self, mc, "classic"))

    def config(self) -> dict:
        return {**super().config(), "idempotence": True, "sub_via": ["subscribe"],
                "groups": {"group": MACHINE_GROUP, "assignor": self.options["assignor"], "static": False,
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


class ConsumerGroupsMachine(GroupsMachine):
    """The same members with KIP-848's consumer protocol: the coordinator assigns (uniform or
    range), each member reconciles with its own epoch."""

    focus = ("cgroup-target-assignment", "cgroup-fenced-member-epoch", "cgroup-unknown-member-id",
             "cgroup-member-expired", "cgroup-commit-stale-epoch", "group-coordinator-loaded")

    @initialize(seed=st.integers(0, 2**16), assignor=st.sampled_from(["range", "uniform"]))
    def boot(self, seed: int, assignor: str) -> None:
        self._boot(seed, assignor=assignor)

    def make_actors(self) -> None:
        # (partials of module functions, not lambdas: see GroupsMachine.make_actors)
        self.add_actor(partial(_writer, self))
        mc = replace(member_config(self.consumer_config(), MACHINE_GROUP, "range", CLUSTER_TIMINGS),
                     server_assignor=self.options["assignor"])
        for _ in range(3):
            self.add_actor(partial(_member, self, mc, "consumer"))

    def config(self) -> dict:
        config = super().config()
        config["groups"] = {**config["groups"], "protocol": "consumer"}
        return config

    @rule(member=st.integers(0, 2), ms=st.sampled_from([20, 300, 1_500, 4_000]))
    def hold_heartbeat(self, member: int, ms: int) -> None:
        """The member's next two heartbeats that say what it owns (its acknowledgement of a
        reconciliation, and the same sent again when the first got no answer; or a join) are
        held back in the network while the program goes on: the coordinator meets them after
        the group may have moved on (the narrow window of this protocol)."""
        self._step("hold_heartbeat", member=member, ms=ms)
        assert self.sim is not None
        node = self.actors[1 + member].node_id
        for _ in range(2):
            # (a partial of a module function, not a lambda: mypyc cannot compile a closure in a
            # method of the machine, a Python class)
            self.sim.hold_back(partial(_owning_heartbeat, node), ms)


def _writer(machine: ClusterMachine, node: int, i: int) -> Writer:
    return Writer(node, i, BROKERS, machine.producer_config())


def _member(machine: ClusterMachine, mc: ConsumerConfig, protocol: str, node: int, i: int) -> Member:
    return Member(node, i, BROKERS, mc, TOPIC, [tp.key for tp in machine.keys], protocol=protocol)


def _owning_heartbeat(node: int, src: int, _dst: int, msg: object) -> bool:
    """Whether ``msg`` is a heartbeat from ``node`` that says what it owns (a hold's match)."""
    return src == node and isinstance(msg, ConsumerGroupHeartbeatRequest) and msg.owned is not None


# ------------------------------------------------------------ with real clients

def real_member_loop(run: RealRun, i: int) -> None:
    """Member ``i`` polls, commits what it reached, sometimes leaves and joins again."""
    member = RealMember(run, i)
    while not run.done.is_set():
        if member.m is None:
            member.join()
            continue
        healed = run.healed.is_set()
        r = run.rng.random()
        if not healed and r < 0.02:  # leave cleanly and join again
            member.rejoin()
            continue
        offsets = member.m.reached()
        if not healed and r < 0.2 and offsets:
            member.commit(offsets)
            continue
        member.poll()
    member.stop()


class GroupsWorkload(Workload):
    name = "groups"
    description = ("consumer-group members (subscribe, --assignor) that poll, commit, crash and leave, "
                   "paused past their session timeouts, while a producer writes")
    guarantee = "a consumer group gives each partition to one member per generation and refuses fenced commits"
    # (one assignment each: mypyc cannot compile a multiple assignment in a class body)
    idempotent = True
    group_coordinator = True
    subscribe = True
    machine = GroupsMachine
    variants = {"groups-consumer": ConsumerGroupsMachine}  # the same with KIP-848's protocol

    def client(self, i: int, node_id: int, rng: random.Random) -> QueueClient | GroupMemberClient:
        s = self.setup
        n = s.options.clients
        if i == 0:  # the producer
            return QueueClient(node_id, i, n, s.keys, s.broker_ids, rng, s.budget, s.producer, s.consumer,
                               think_ms=100, send_p=1.0)
        return GroupMemberClient(node_id, i, n, [tp.key for tp in s.keys], s.broker_ids, rng, s.budget,
                                 self.member_config(), s.options.static_members,
                                 protocol=s.options.group_protocol)

    def members(self, clients: list[int]) -> list[int]:
        return clients[1:]

    def member_config(self) -> ConsumerConfig:
        """A consumer-group member's configuration, from the run's timings."""
        t, o = self.setup.timings, self.setup.options
        return replace(self.setup.consumer, session_timeout_ms=t["member_session_timeout_ms"],
                       heartbeat_interval_ms=t["member_heartbeat_interval_ms"],
                       rebalance_timeout_ms=t["member_rebalance_timeout_ms"],
                       max_poll_interval_ms=t["member_max_poll_interval_ms"], enable_auto_commit=False,
                       **({"assignors": ("range",), "server_assignor": o.assignor} if o.group_protocol == "consumer"
                          else {"assignors": (o.assignor,)}))

    def after_heal(self, sim: Simulation, clients: list[Node]) -> None:
        """Every member polls once more: its final assignment reaches the history."""
        for c in clients:
            if isinstance(c, GroupMemberClient):
                sim.call_at(sim.now_ns, partial(_final_poll, sim, c))
        sim.run_until(sim.now_ns + 2_000 * MS)

    def config(self) -> dict:
        o = self.setup.options
        return {"sub_via": ["subscribe"],
                "groups": {"group": GROUP, "assignor": o.assignor, "static": o.static_members,
                           "keys": [tp.key for tp in self.setup.keys], "final_polls": True,
                           # a commit records the member epoch its request carried
                           **({"protocol": "consumer", "commit_epochs": "sent"} if o.group_protocol == "consumer"
                              else {})}}


    @classmethod
    def real_threads(cls, run: RealRun, producers: int, consumers: int) -> list[Callable[[], None]]:
        """One producer (the members are :meth:`real_members`)."""
        return [run.producer_loop]

    @classmethod
    def real_members(cls, run: RealRun) -> list[Callable[[], None]]:
        # (partials: a class method holds no closure, which mypyc cannot compile)
        return [partial(real_member_loop, run, i) for i in range(3)]

    @classmethod
    def real_config(cls, run: RealRun) -> dict:
        consumer = run.group_protocol == "consumer"  # KIP-848: the coordinator's range assignor
        return {"sub_via": ["subscribe"], "groups": {"group": run.group, "assignor": "range", "static": False,
                                                     "keys": run.keys(), "final_polls": True,
                                                     **({"protocol": "consumer"} if consumer else {})}}

    @classmethod
    def real_straggle_apis(cls, run: RealRun) -> tuple[str, ...]:
        """With KIP-848's protocol also a member's heartbeat (its acknowledgement of a
        revocation, delivered late) and its commits (with the member epoch)."""
        extra = ("ConsumerGroupHeartbeat", "OffsetCommit") if run.group_protocol == "consumer" else ()
        return (*cls.straggle_apis, *extra)


def _final_poll(sim: Simulation, c: GroupMemberClient) -> None:
    """Ask a member for its final poll through the simulation, so its outputs are routed."""
    sim.act(c.node_id, lambda node, now_ms: c.final_poll(now_ms))
