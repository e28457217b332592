"""Assignors: every subscribed partition goes to exactly one subscribed member; balance;
stickiness; and cooperative-sticky's two phases, checked with Hypothesis."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reference.assignors import ASSIGNORS, assign, cooperative_sticky_assign, sticky_assign
from reference.messages import TopicPartition

TOPICS = ["a", "b", "c"]

members_st = st.lists(st.sampled_from([f"m{i}" for i in range(8)]), min_size=1, max_size=6, unique=True)
partitions_st = st.fixed_dictionaries({t: st.integers(0, 9) for t in TOPICS})


@st.composite
def groups(draw, homogeneous: bool = False):
    members = draw(members_st)
    partitions = draw(partitions_st)
    if homogeneous:
        topics = draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True))
        subs = {m: sorted(topics) for m in members}
    else:
        subs = {m: sorted(draw(st.lists(st.sampled_from(TOPICS), min_size=1, unique=True)))
                for m in members}
    return subs, partitions


@st.composite
def owned_for(draw, subs, partitions):
    """A plausible current assignment: each partition owned by at most one member."""
    all_tps = [TopicPartition(t, p) for t in TOPICS for p in range(partitions[t])]
    owners = [*sorted(subs), "gone"]  # "gone" left the group
    out: dict[str, list[TopicPartition]] = {}
    for tp in all_tps:
        m = draw(st.sampled_from([*owners, None]))
        if m is not None:
            out.setdefault(m, []).append(tp)
    return out


def check_complete(subs, partitions, result, allow_unassigned=frozenset()):
    wanted = {TopicPartition(t, p) for ts in subs.values() for t in ts for p in range(partitions[t])}
    seen: list[TopicPartition] = [tp for tps in result.values() for tp in tps]
    assert len(seen) == len(set(seen)), "a partition went to two members"
    assert set(seen) | set(allow_unassigned) == wanted
    for m, tps in result.items():
        assert all(tp.topic in subs[m] for tp in tps), "a partition went to a member not subscribed"


@settings(max_examples=200, deadline=None)
@given(groups())
def test_every_assignor_assigns_each_subscribed_partition_exactly_once(g):
    subs, partitions = g
    for name in ASSIGNORS:
        check_complete(subs, partitions, assign(name, subs, partitions, {}))


@settings(max_examples=200, deadline=None)
@given(groups(homogeneous=True))
def test_roundrobin_and_sticky_balance_within_one(g):
    subs, partitions = g
    for name in ("roundrobin", "sticky", "cooperative-sticky"):
        counts = [len(tps) for tps in assign(name, subs, partitions, {}).values()]
        assert max(counts) - min(counts) <= 1, name


@settings(max_examples=200, deadline=None)
@given(groups(homogeneous=True))
def test_range_balances_each_topic_within_one(g):
    subs, partitions = g
    result = assign("range", subs, partitions)
    for t in {t for ts in subs.values() for t in ts}:
        counts = [sum(1 for tp in tps if tp.topic == t) for tps in result.values()]
        assert max(counts) - min(counts) <= 1


@settings(max_examples=200, deadline=None)
@given(groups())
def test_sticky_is_balanced_no_partition_could_move_to_a_member_two_fewer(g):
    subs, partitions = g
    result = sticky_assign(subs, partitions, {})
    for tps in result.values():
        for tp in tps:
            for other in subs:
                if tp.topic in subs[other]:
                    assert len(result[other]) >= len(tps) - 1


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_sticky_keeps_a_balanced_assignment_and_moves_little(data):
    subs, partitions = data.draw(groups(homogeneous=True))
    first = sticky_assign(subs, partitions, {})
    assert sticky_assign(subs, partitions, first) == first  # nothing changed: nothing moves
    # a member leaves: the others keep everything they had
    if len(subs) > 1:
        leaver = sorted(subs)[0]
        rest = {m: ts for m, ts in subs.items() if m != leaver}
        second = sticky_assign(rest, partitions, first)
        for m in rest:
            assert set(first[m]) <= set(second[m])
    owned = data.draw(owned_for(subs, partitions))
    result = sticky_assign(subs, partitions, owned)
    check_complete(subs, partitions, result)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_cooperative_sticky_hands_over_moved_partitions_in_a_second_round(data):
    subs, partitions = data.draw(groups())
    owned = data.draw(owned_for(subs, partitions))
    target = sticky_assign(subs, partitions, owned)
    first = cooperative_sticky_assign(subs, partitions, owned)
    current_owner = {tp: m for m in sorted(owned) for tp in owned[m]}
    for m, tps in first.items():
        for tp in tps:
            # nobody gets a partition that another live member still owns
            assert current_owner.get(tp, m) in (m, "gone")
        assert set(tps) <= set(target[m])
    # the members revoke what they lost and rejoin; further rounds complete the move (one
    # more with identical subscriptions; a few more at most otherwise)
    homogeneous = len({tuple(ts) for ts in subs.values()}) == 1
    current = first
    for _round in range(1 if homogeneous else 4):
        current = cooperative_sticky_assign(subs, partitions, current)
    check_complete(subs, partitions, current)
