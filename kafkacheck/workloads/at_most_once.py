"""The at-most-once workload: consumer-group members that commit before they process.

Kafka's documentation names three delivery semantics for a consumer; at most once is the one
where the application "reads the messages, then saves its position in the log, and finally
processes the messages": after a crash, the records between the saved position and what was
processed are lost to the group, but none is ever processed twice. Automatic commits
(``enable.auto.commit``) do not give it: they commit what earlier polls returned, after the
application had it, which is at least once. So each member here commits by itself:

* ``poll``: poll for a while; the completion carries what was read and the rebalance log;
* ``commit``: right after a poll that returned records, the positions after them (only of the
  partitions the member still owns), in the generation it holds. A record is *processed*
  when that commit succeeded (``ok``); a commit refused (``fail``) or unanswered (``info``)
  processes nothing, and those records are lost to the group, as the semantics allows;
* now and then a ``crash`` (rebuilt as a new process) or a clean leave and join.

The checker (:func:`properties.group_checks.check_at_most_once`, with ``groups.delivery`` set)
reports ``processed-twice``: one record processed by two commits, of one member or of
two. Kafka lets that happen only if a commit it acknowledged was lost, or if it accepted a
commit from a member it had already replaced; the consumer-group checks of ``groups`` run as
well. An idempotent producer writes every partition meanwhile.

The same workload everywhere: :class:`AtMostOnceMember` for ``run`` and ``hunt``,
:class:`AtMostOnceMachine` for ``explore``, :func:`real_member_loop` for ``conform``.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial

from hypothesis import strategies as st
from hypothesis.stateful import rule

from kafkacheck.real.real_run import RealMember, RealRun
from kafkacheck.workloads.groups import GroupMemberClient, GroupsMachine, GroupsWorkload
from kafkacheck.workloads.queue_client import QueueClient
from reference.messages import TopicPartition

DELIVERY = "at-most-once"
CRASH_P = LEAVE_P = 0.01  # of a member's ops that are not a commit


class AtMostOnceMember(GroupMemberClient):
    """A group member that commits what each poll returned before it processes it."""

    to_commit = False  # the last poll returned records: the next op commits them

    def _next_op(self, now_ms: int) -> None:
        if self.consumer.fenced or self.budget.remaining <= 0:
            super()._next_op(now_ms)  # the restart of a fenced member, or the end
            return
        self.budget.remaining -= 1
        self.op_seq += 1
        if self.to_commit:
            self.to_commit = False
            owned = self.consumer.owned
            offsets = {tp: records[-1][0] + 1 for key, records in sorted(self.last_read.items()) if records
                       for tp in (TopicPartition.parse(key),) if tp in owned}
            self._start_commit(now_ms, offsets)
            return
        x = self.rng.random()
        if x < CRASH_P:
            self._crash(now_ms)
        elif x < CRASH_P + LEAVE_P:
            self._leave_and_rejoin(now_ms)
        else:
            self._start_poll(now_ms)

    def _finish_poll(self, now_ms: int) -> None:
        final = self.op is not None and self.op.get("final")
        super()._finish_poll(now_ms)
        self.to_commit = not final and any(self.last_read.values())

    def _crash(self, now_ms: int) -> None:
        self.to_commit = False
        super()._crash(now_ms)

    def _leave_and_rejoin(self, now_ms: int) -> None:
        self.to_commit = False
        super()._leave_and_rejoin(now_ms)


# ------------------------------------------------------------ the Hypothesis machine


class AtMostOnceMachine(GroupsMachine):
    """The groups machine whose members process: poll, then commit what the poll returned."""

    @rule(member=st.integers(0, 2), what=st.sampled_from(["process", "process", "process", "crash", "leave"]))
    def member(self, member: int, what: str) -> None:
        """A member processes (polls, then commits the positions after what it read),
        crashes (rebuilt as a new process) or leaves and joins again."""
        self._step("member", member=member, what=what)
        if what == "process":
            self.command(1 + member, ("poll",))
            self.command(1 + member, ("commit",))
        else:
            self.command(1 + member, (what,))

    def config(self) -> dict:
        config = super().config()
        config["groups"] = {**config["groups"], "delivery": DELIVERY}
        return config


# ------------------------------------------------------------ with real clients


def real_member_loop(run: RealRun, i: int) -> None:
    """Member ``i``: poll, commit what the poll returned, now and then leave and join again;
    after healing it only polls, until the group settles."""
    member = RealMember(run, i)
    while not run.done.is_set():
        if member.m is None:
            member.join()
            continue
        healed = run.healed.is_set()
        if not healed and run.rng.random() < LEAVE_P:  # leave cleanly and join again
            member.rejoin()
            continue
        got = member.poll()
        if got is None:
            continue
        owned = member.m.owned
        offsets = {key: records[-1][0] + 1 for key, records in sorted(got.items()) if records and key in owned}
        if not healed and offsets:
            member.commit(offsets)
    member.stop()


class AtMostOnceWorkload(GroupsWorkload):
    name = "at-most-once"
    description = ("consumer-group members that commit what each poll returned before processing it "
                   "(at-most-once delivery), crashing and leaving now and then, while a producer writes")
    guarantee = "a consumer group that commits before it processes never processes a record twice"
    machine = AtMostOnceMachine
    variants = {}

    def client(self, i: int, node_id: int, rng: random.Random) -> QueueClient | GroupMemberClient:
        if i == 0:
            return super().client(i, node_id, rng)  # the producer
        s = self.setup
        return AtMostOnceMember(node_id, i, s.options.clients, [tp.key for tp in s.keys], s.broker_ids, rng,
                                s.budget, self.member_config(), s.options.static_members,
                                protocol=s.options.group_protocol)

    def config(self) -> dict:
        config = super().config()
        config["groups"] = {**config["groups"], "delivery": DELIVERY}
        return config

    @classmethod
    def real_members(cls, run: RealRun) -> list[Callable[[], None]]:
        # (partials: a class method holds no closure, which mypyc cannot compile)
        return [partial(real_member_loop, run, i) for i in range(3)]

    @classmethod
    def real_config(cls, run: RealRun) -> dict:
        config = super().real_config(run)
        config["groups"] = {**config["groups"], "delivery": DELIVERY}
        return config
