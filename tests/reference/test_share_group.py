"""KIP-932's share groups (reference/share_group.py, reference/share_group_coordinator.py): the
``simple`` assignor, epochs and reconciliation, the group's record, and ShareGroupHeartbeat
against real brokers (FIFO router): joining, epoch fencing, leaving, session expiry, a topic's
partitions changing, a new coordinator loading the group, and group ids of another kind."""

from __future__ import annotations

import pytest

from reference.errors import Errors
from reference.group_messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from reference.messages import CreateTopicsRequest, TopicPartition
from reference.node import Event
from reference.share_group import ShareGroup, ShareMember, check_epoch, reconcile, simple_assign
from reference.share_messages import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse
from tests.reference.test_groups import GROUP, TOPIC, coordinator_of, group_router, join

ALL = frozenset(TopicPartition(TOPIC, p) for p in range(6))


def tps(topic: str, n: int) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(n)]


def counts(result) -> list[int]:
    return sorted(len(v) for v in result.values())


def sharing(result) -> dict[TopicPartition, int]:
    by: dict[TopicPartition, int] = {}
    for v in result.values():
        for tp in v:
            by[tp] = by.get(tp, 0) + 1
    return by


# ---------------------------------------------------------------- the simple assignor


@pytest.mark.parametrize("members,partitions", [(1, 6), (2, 6), (4, 6), (6, 6), (3, 7)])
def test_with_no_more_members_than_partitions_each_partition_has_one_owner_and_counts_are_balanced(
        members, partitions):
    subs = {f"m{i}": ("t",) for i in range(members)}
    result = simple_assign(subs, {"t": partitions}, {})
    assert sharing(result) == dict.fromkeys(tps("t", partitions), 1)
    assert counts(result)[-1] - counts(result)[0] <= 1


@pytest.mark.parametrize("members,partitions", [(3, 2), (5, 2), (4, 3), (7, 3), (9, 1)])
def test_with_more_members_than_partitions_each_partition_is_shared_ceil_m_over_p_ways(members, partitions):
    subs = {f"m{i}": ("t",) for i in range(members)}
    result = simple_assign(subs, {"t": partitions}, {})
    want = -(-members // partitions)
    assert sharing(result) == dict.fromkeys(tps("t", partitions), want)
    assert counts(result)[0] >= 1 and counts(result)[-1] - counts(result)[0] <= 1


def test_the_topics_of_one_subscription_are_one_pool():
    # 3 members, 2 topics of 2 partitions: 4 partitions, one owner each (Kafka's homogeneous builder)
    result = simple_assign({m: ("t", "u") for m in "abc"}, {"t": 2, "u": 2}, {})
    assert sharing(result) == dict.fromkeys(tps("t", 2) + tps("u", 2), 1) and counts(result) == [1, 1, 2]


def test_different_subscriptions_are_assigned_topic_by_topic_to_the_members_subscribed():
    result = simple_assign({"a": ("t", "u"), "b": ("t",), "c": ("u",)}, {"t": 4, "u": 2, "v": 3}, {})
    assert {tp.topic for tp in result["b"]} == {"t"} and {tp.topic for tp in result["c"]} == {"u"}
    assert sharing(result) == dict.fromkeys(tps("t", 4) + tps("u", 2), 1)  # nobody subscribes to v
    assert len([tp for tp in result["a"] if tp.topic == "t"]) == 2


def test_the_assignment_is_sticky_when_a_member_joins_or_leaves():
    subs = {m: ("t",) for m in "abc"}
    before = simple_assign(subs, {"t": 6}, {})
    joined = simple_assign({**subs, "d": ("t",)}, {"t": 6}, before)
    assert counts(joined) == [1, 1, 2, 2]
    assert sum(len(before[m] - joined[m]) for m in "abc") == len(joined["d"]) == 1  # only what d takes moves
    left = simple_assign({m: ("t",) for m in "ab"}, {"t": 6}, joined)
    assert all(joined[m] <= left[m] for m in "ab") and counts(left) == [3, 3]
    # shared: a fifth and sixth member over 4 partitions; each keeps what it had where it can
    shared = simple_assign({m: ("t",) for m in "abcde"}, {"t": 4}, simple_assign(subs | {"d": ("t",)}, {"t": 4}, {}))
    assert counts(shared) == [1, 1, 2, 2, 2] and set(sharing(shared).values()) == {2}


def test_the_assignment_is_deterministic_whatever_the_order_of_its_inputs():
    subs = {m: ("t",) for m in "edcba"}
    previous = {"b": frozenset(tps("t", 2)), "a": frozenset(tps("t", 5)[3:])}
    first = simple_assign(subs, {"t": 5}, previous)
    again = simple_assign(dict(sorted(subs.items())), {"t": 5}, dict(reversed(previous.items())))
    assert first == again and list(first) == sorted(first)


def test_partitions_of_topics_gone_or_unsubscribed_are_dropped_from_the_target():
    previous = {"a": frozenset(tps("t", 3) + tps("u", 1))}
    result = simple_assign({"a": ("t",)}, {"t": 2, "u": 1}, previous)
    assert result == {"a": frozenset(tps("t", 2))}


# ---------------------------------------------------------------- members and the record


def test_a_member_jumps_straight_to_the_target_without_revoking():
    m = ShareMember("a", 3, 2, ("t",), tuple(tps("t", 2)))
    target = frozenset(tps("t", 4)[2:] + tps("u", 1))
    new = reconcile(m, 5, target, False)
    assert (new.member_epoch, new.previous_epoch, new.assigned) == (5, 3, tuple(tps("t", 4)[2:]))
    assert reconcile(new, 5, target, False) is new


def test_heartbeat_epochs():
    m = ShareMember("a", 5, 4)
    assert check_epoch(m, 5) is Errors.NONE
    assert check_epoch(m, 0) is Errors.NONE  # a rejoin
    assert check_epoch(m, 4) is Errors.NONE  # the answer that bumped it was lost
    assert check_epoch(m, 6) is Errors.FENCED_MEMBER_EPOCH
    assert check_epoch(m, 3) is Errors.FENCED_MEMBER_EPOCH


def test_the_group_round_trips_through_its_record():
    g = ShareGroup(4, 3, partition_counts={"t": 2})
    g.members["a"] = ShareMember("a", 3, 1, ("t",), tuple(tps("t", 2)))
    g.target = {"a": frozenset(tps("t", 2))}
    back = ShareGroup.from_json(g.to_json())
    assert back == g and back.state() == "Stable"


# ---------------------------------------------------------------- against brokers


def beside(group: str) -> str:
    """Another group id of the same __consumer_offsets partition (the same coordinator)."""
    from reference.coordinator import partition_for

    return next(g for i in range(100) if (g := f"{group}-{i}") and partition_for(g, 3) == partition_for(group, 3))


class Recorder:
    """A group router whose brokers' events are kept."""

    def __init__(self) -> None:
        self.r = group_router()
        self.events: list[Event] = []
        collect = self.r._collect

        def keep(node) -> None:
            outs = node.drain()
            self.events += [o for o in outs if isinstance(o, Event)]
            node._out.extend(o for o in outs if not isinstance(o, Event))
            collect(node)

        self.r._collect = keep
        self.c = coordinator_of(self.r)
        self.corr = 100

    def beat(self, member_id: str, epoch: int, topics=(TOPIC,), group: str = GROUP, dst: int | None = None
             ) -> ShareGroupHeartbeatResponse:
        self.corr += 1
        self.r.request(self.c if dst is None else dst, ShareGroupHeartbeatRequest(
            self.corr, group, member_id, epoch, None if topics is None else tuple(topics)))
        self.r.tick(10)
        [answer] = self.r.replies(ShareGroupHeartbeatResponse)
        return answer

    def group(self) -> ShareGroup:
        sg = self.r.nodes[self.c].groups.share.group(GROUP)
        assert sg is not None
        return sg

    def run(self, ms: int, members: dict[str, int] | None = None) -> None:
        """Time passes; the ``members`` (id -> epoch) heartbeat every second."""
        for step in range(ms // 100):
            if members and step % 10 == 0:
                for mid in members:
                    members[mid] = self.beat(mid, members[mid], None).member_epoch
            self.r.tick(100)


@pytest.fixture
def rc() -> Recorder:
    return Recorder()


def test_members_join_and_share_the_partitions_and_the_answer_carries_what_changed(rc):
    a = rc.beat("member-a", 0)
    assert (a.error, a.member_id, a.member_epoch, a.heartbeat_interval_ms) == (Errors.NONE, "member-a", 1, 5_000)
    assert set(a.assignment) == ALL
    again = rc.beat("member-a", 1, None)
    assert (again.member_epoch, again.assignment) == (1, None)  # nothing changed: no assignment
    b = rc.beat("member-b", 0)
    assert b.member_epoch == 2 and len(b.assignment) == 3
    a2 = rc.beat("member-a", 1, None)
    assert a2.member_epoch == 2 and set(a2.assignment) == ALL - set(b.assignment)  # no revocation step
    full = rc.beat("member-a", 2)
    assert set(full.assignment) == set(a2.assignment)  # a full heartbeat gets it again
    targets = [e.fields for e in rc.events if e.kind == "share-group-target"]
    assert [t["epoch"] for t in targets] == [1, 2]
    assert set(targets[-1]["target"]) == {"member-a", "member-b"}
    assert targets[-1]["hosts"] == {"member-a": 50, "member-b": 50}


def test_more_members_than_partitions_share_them(rc):
    answers = [rc.beat(f"m{i}", 0) for i in range(9)]
    epochs = {f"m{i}": a.member_epoch for i, a in enumerate(answers)}
    for mid in epochs:
        epochs[mid] = rc.beat(mid, epochs[mid], None).member_epoch
    g = rc.group()
    assert set(epochs.values()) == {9} and set(sharing(g.target).values()) == {2}
    assert counts({mid: set(m.assigned) for mid, m in g.members.items()}) == [1] * 6 + [2] * 3


def test_an_empty_member_id_gets_one_from_the_coordinator(rc):
    a = rc.beat("", 0)
    assert a.error is Errors.NONE and a.member_id and rc.group().members.keys() == {a.member_id}


@pytest.mark.parametrize("member_id,epoch,topics", [
    ("", 3, None),  # a member id is required after the join
    ("x" * 37, 0, (TOPIC,)),  # longer than a UUID's 36
    ("m", 0, None),  # the join must subscribe
    ("m", 0, ()),
    ("m", -2, None),  # no static leave in share groups
])
def test_invalid_heartbeats_are_refused_before_the_group_is_read(rc, member_id, epoch, topics):
    assert rc.beat(member_id, epoch, topics).error is Errors.INVALID_REQUEST


def test_epoch_rules(rc):
    assert rc.beat("a", 1).error is Errors.GROUP_ID_NOT_FOUND  # no such group
    assert rc.beat("a", 0).member_epoch == 1
    assert rc.beat("b", 0).member_epoch == 2
    assert rc.beat("nobody", 2, None).error is Errors.UNKNOWN_MEMBER_ID
    assert rc.beat("a", 3, None).error is Errors.FENCED_MEMBER_EPOCH  # ahead of the coordinator
    assert rc.beat("a", 1, None).member_epoch == 2  # a is at 1: moves to 2
    assert rc.beat("a", 1, None).member_epoch == 2  # its previous epoch: the answer was lost
    assert rc.beat("c", 0).member_epoch == 3
    assert rc.beat("a", 3, None).error is Errors.FENCED_MEMBER_EPOCH  # a is at 2
    assert rc.beat("a", 2, None).member_epoch == 3  # previous is now 2
    assert rc.beat("a", 1, None).error is Errors.FENCED_MEMBER_EPOCH  # neither current nor previous
    rejoin = rc.beat("a", 0)  # 0 is always accepted: same member, same partitions
    assert rejoin.error is Errors.NONE and rejoin.member_epoch == 3 and rejoin.assignment is not None
    assert rc.beat("x", 0, dst=next(n for n in (1, 2, 3) if n != rc.c)).error is Errors.NOT_COORDINATOR


def test_a_member_that_leaves_is_removed_and_the_group_epoch_bumps(rc):
    rc.beat("a", 0)
    rc.beat("b", 0)
    assert rc.beat("a", 1, None).member_epoch == 2
    left = rc.beat("b", -1, None)
    assert (left.error, left.member_id, left.member_epoch) == (Errors.NONE, "b", -1)
    assert rc.group().group_epoch == 3 and set(rc.group().members) == {"a"}
    a = rc.beat("a", 2, None)
    assert a.member_epoch == 3 and set(a.assignment) == ALL
    assert rc.beat("b", -1, None).error is Errors.UNKNOWN_MEMBER_ID
    assert rc.beat("b", 2, None).error is Errors.UNKNOWN_MEMBER_ID
    assert rc.beat("a", -1, None).member_epoch == -1
    assert rc.group().state() == "Empty" and rc.group().assignment_epoch == rc.group().group_epoch == 4
    assert rc.beat("a", -1, None, group=beside(GROUP)).error is Errors.GROUP_ID_NOT_FOUND


def test_a_silent_member_expires_after_the_session_timeout_and_the_others_take_its_partitions(rc):
    members = {"a": rc.beat("a", 0).member_epoch}
    rc.beat("b", 0)
    rc.run(40_000, members)
    assert set(rc.group().members) == {"a", "b"}  # b silent for 40 s: still in (45 s)
    rc.run(8_000, members)
    assert set(rc.group().members) == {"a"}
    assert [e.fields["why"] for e in rc.events if e.kind == "share-group-member-removed"] == ["session expired"]
    a = rc.group().members["a"]
    assert set(a.assigned) == ALL and a.member_epoch == members["a"] == 3
    rc.run(50_000, members)
    assert set(rc.group().members) == {"a"}  # heartbeating keeps the session


def test_a_topic_created_after_the_subscription_bumps_the_epoch_and_is_assigned(rc):
    a = rc.beat("a", 0, (TOPIC, "later"))
    assert a.member_epoch == 1 and set(a.assignment) == ALL
    assert rc.beat("a", 1, None).assignment is None
    rc.r.request(0, CreateTopicsRequest(9, "later", 2, 3))
    for _ in range(10):
        rc.r.tick(200)
    a = rc.beat("a", 1, None)
    assert a.member_epoch == 2 and set(a.assignment) == ALL | set(tps("later", 2))
    assert rc.group().partition_counts == {TOPIC: 6, "later": 2}


def test_a_new_coordinator_loads_the_group_from_the_log(rc):
    from reference.coordinator import partition_for
    from reference.group_coordinator import GroupCoordinator

    rc.beat("a", 0)
    rc.beat("b", 0)
    rc.beat("a", 1, None)
    rc.beat("b", -1, None)
    old = rc.group()
    fresh = GroupCoordinator(rc.r.nodes[rc.c], 3)
    fresh.on_leader(fresh.host.now_ms, partition_for(GROUP, 3), 0)
    loaded = fresh.share.group(GROUP)
    assert loaded == old and loaded.to_json() == old.to_json()
    assert set(fresh.share.sessions) == {(GROUP, "a")}  # a fresh session for every member
    assert fresh.share.group("nobody") is None


def test_a_coordinator_failover_keeps_the_group(rc):
    """The coordinator's broker cut off: another broker leads the group's partition, loads the
    group, and the member carries on at its epoch."""
    rc.beat("a", 0)
    b = rc.beat("b", 0)
    old = rc.group()
    rc.r.blocked = {rc.c}
    for _ in range(100):
        rc.r.tick(200)
    rc.r.blocked = set()
    first = rc.c
    rc.c = coordinator_of(rc.r)
    assert rc.c != first
    assert rc.group() == old
    again = rc.beat("b", b.member_epoch, None)
    assert again.error is Errors.NONE and again.member_epoch == b.member_epoch


def test_a_share_group_with_members_refuses_the_other_protocols_and_they_refuse_it(rc):
    rc.beat("a", 0)
    [j] = join(rc.r, rc.c)
    assert j.error is Errors.INCONSISTENT_GROUP_PROTOCOL
    rc.r.request(rc.c, ConsumerGroupHeartbeatRequest(7, GROUP, "cm", 0, None, 30_000, (TOPIC,), None, ()))
    rc.r.tick(10)
    assert rc.r.replies(ConsumerGroupHeartbeatResponse)[0].error is Errors.GROUP_ID_NOT_FOUND
    rc.beat("a", -1, None)  # empty: a classic group may take the id, and then a share member may not
    [j] = join(rc.r, rc.c)
    assert j.error is Errors.NONE
    assert rc.beat("b", 0).error is Errors.GROUP_ID_NOT_FOUND
    # a consumer group with members has its id too
    cg = beside(GROUP)
    rc.r.request(rc.c, ConsumerGroupHeartbeatRequest(8, cg, "cm", 0, None, 30_000, (TOPIC,), None, ()))
    rc.r.tick(10)
    assert rc.r.replies(ConsumerGroupHeartbeatResponse)[0].error is Errors.NONE
    assert rc.beat("b", 0, group=cg).error is Errors.GROUP_ID_NOT_FOUND


def test_a_full_share_group_refuses_new_members_only(rc):
    rc.r.nodes[rc.c].groups.share.max_size = 2
    rc.beat("a", 0)
    rc.beat("b", 0)
    assert rc.beat("c", 0).error is Errors.GROUP_MAX_SIZE_REACHED
    assert rc.beat("a", 0).error is Errors.NONE
