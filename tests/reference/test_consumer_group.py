"""KIP-848's consumer group state (reference/consumer_group.py): reconciliation toward the
target, partition epochs (and KAFKA-16147's bookkeeping), epoch checks of heartbeats and
commits, and the server-side assignors."""

from __future__ import annotations

from dataclasses import replace

from reference.assignors import server_assign
from reference.consumer_group import (
    STABLE,
    UNRELEASED,
    UNREVOKED,
    ConsumerGroup,
    ModernMember,
    check_commit_epoch,
    check_epoch,
    reconcile,
)
from reference.errors import Errors
from reference.messages import TopicPartition

P = [TopicPartition("t", i) for i in range(4)]


def member(mid="a", epoch=1, assigned=(), revoking=(), state=STABLE, previous=0) -> ModernMember:
    return ModernMember(mid, None, epoch, previous, state, 1000, ("t",), None,
                        tuple((tp, epoch) for tp in assigned), tuple((tp, epoch) for tp in revoking))


def free(_tp) -> int:
    return -1


def test_a_new_member_gets_its_free_target_at_the_target_epoch():
    m = reconcile(member(epoch=0), 3, frozenset(P[:2]), frozenset(), True, free)
    assert (m.state, m.member_epoch, m.assigned_set(), m.previous_epoch) == (STABLE, 3, frozenset(P[:2]), 0)


def test_a_partition_taken_away_is_revoked_first_and_the_epoch_waits():
    m = member(epoch=3, assigned=P[:2])
    m = reconcile(m, 4, frozenset(P[:1]), frozenset(P[:2]), False, free)
    assert (m.state, m.member_epoch, m.assigned_set(), m.revoking_set()) == (UNREVOKED, 3, {P[0]}, {P[1]})
    still = reconcile(m, 4, frozenset(P[:1]), frozenset(P[:2]), False, free)
    assert still == m  # its heartbeat still lists the partition: nothing moves
    unknown = reconcile(m, 4, frozenset(P[:1]), None, False, free)
    assert unknown == m  # a heartbeat that does not say what it owns counts as owning it
    done = reconcile(m, 4, frozenset(P[:1]), frozenset(P[:1]), False, free)
    assert (done.state, done.member_epoch, done.revoking_set()) == (STABLE, 4, frozenset())


def test_a_partition_another_member_holds_is_unreleased_until_it_lets_go():
    held = {P[2]: 5}
    m = reconcile(member(epoch=3, assigned=P[:2]), 5, frozenset(P[:3]), frozenset(P[:2]), False,
                  lambda tp: held.get(tp, -1))
    assert (m.state, m.member_epoch, m.assigned_set()) == (UNRELEASED, 5, frozenset(P[:2]))
    m = reconcile(m, 5, frozenset(P[:3]), frozenset(P[:2]), False, free)
    assert (m.state, m.assigned_set()) == (STABLE, frozenset(P[:3]))


def test_a_partition_the_member_itself_revokes_is_not_unreleased():
    # KAFKA-19449: the target gives a partition back to the member that is revoking it
    m = member(epoch=3, assigned=P[:1], revoking=P[1:2], state=UNREVOKED)
    held = lambda tp: 3 if tp in P[:2] else -1  # noqa: E731  (the map still has it: the member holds it)
    assert reconcile(m, 5, frozenset(P[:2]), frozenset(P[:2]), False, held) == m  # not acknowledged yet
    back = reconcile(m, 5, frozenset(P[:2]), frozenset(P[:1]), False, held)
    assert (back.state, back.member_epoch, back.assigned_set(), back.revoking_set()) == (STABLE, 5, {P[0], P[1]},
                                                                                          frozenset())


def test_partition_epochs_follow_a_partition_given_back_and_the_bug_loses_it():
    def group(bug):
        g = ConsumerGroup(epoch_bug=bug)
        g.update_member(member("a", 3, assigned=P[:1], revoking=P[1:2], state=UNREVOKED))
        g.update_member(member("a", 5, assigned=P[:2]))  # given back, as above
        return g

    assert group(False).owner_epoch(P[1]) == 5
    assert group(True).owner_epoch(P[1]) == -1  # KAFKA-16147: looks free to the next member


def test_removing_a_member_frees_its_partitions_and_bumps_the_group_epoch():
    g = ConsumerGroup(group_epoch=4, assignment_epoch=4)
    g.update_member(member("a", 4, assigned=P[:2]))
    g.update_member(member("b", 4, assigned=P[2:]))
    assert g.double_held() == {}
    g.remove_member("a")
    assert (g.group_epoch, g.owner_epoch(P[0]), g.owner_epoch(P[2])) == (5, -1, 4)
    g.remove_member("b")
    assert g.assignment_epoch == g.group_epoch == 6


def test_heartbeat_epochs():
    m = member(epoch=5, assigned=P[:2], previous=4)
    assert check_epoch(m, 5, None) is Errors.NONE
    assert check_epoch(m, 6, None) is Errors.FENCED_MEMBER_EPOCH
    assert check_epoch(m, 4, frozenset(P[:1])) is Errors.NONE  # the answer that bumped it was lost
    assert check_epoch(m, 4, frozenset(P[:3])) is Errors.FENCED_MEMBER_EPOCH
    assert check_epoch(m, 3, frozenset()) is Errors.FENCED_MEMBER_EPOCH
    assert check_epoch(m, 0, frozenset()) is Errors.NONE  # KAFKA-19233's fix: a rejoin
    assert check_epoch(m, 0, frozenset(), rejoin_refused=True) is Errors.FENCED_MEMBER_EPOCH


def test_commit_epochs_kip_1251():
    m = ModernMember("a", None, 7, 5, STABLE, 1000, ("t",), None, ((P[0], 5), (P[1], 7)), ())
    assert check_commit_epoch(m, 7, [P[0], P[3]]) is Errors.NONE
    assert check_commit_epoch(m, 8, [P[0]]) is Errors.STALE_MEMBER_EPOCH
    assert check_commit_epoch(m, 5, [P[0]]) is Errors.NONE  # held since epoch 5
    assert check_commit_epoch(m, 6, [P[1]]) is Errors.STALE_MEMBER_EPOCH  # given only at 7
    assert check_commit_epoch(m, 6, [P[2]]) is Errors.STALE_MEMBER_EPOCH  # not its partition


def test_the_group_and_its_members_round_trip_through_their_record():
    g = ConsumerGroup(group_epoch=3, assignment_epoch=3, target={"a": frozenset(P[:2])}, partition_counts={"t": 4})
    g.update_member(replace(member("a", 3, assigned=P[:1], revoking=P[1:2], state=UNREVOKED), instance_id="i"))
    back = ConsumerGroup.from_json(g.to_json())
    assert back.to_json() == g.to_json() and back.owners == g.owners and back.static == {"i": "a"}


def test_server_assignors():
    subs = {"m-b": ["t"], "m-a": ["t"], "m-c": ["t"]}
    ranged = server_assign("range", subs, {"t": 4}, {}, {"m-b": None, "m-a": None, "m-c": "zz"})
    assert ranged == {"m-c": P[:2], "m-a": P[2:3], "m-b": P[3:]}  # static members first
    uniform = server_assign("uniform", subs, {"t": 4}, {"m-b": P[:3]}, dict.fromkeys(subs))
    assert sorted(len(v) for v in uniform.values()) == [1, 1, 2] and set(uniform["m-b"]) <= set(P[:3])
    assert sorted(tp for v in uniform.values() for tp in v) == P
