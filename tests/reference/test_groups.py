"""Consumer groups against real brokers (FIFO router): joining and rebalancing with each
assignor, session expiry, leaving, static membership, generation fencing of commits, and the
bug switch that removes that fencing."""

from __future__ import annotations

from reference.consumer import ConsumerConfig
from reference.errors import Errors
from reference.group_consumer import GroupConsumer
from reference.group_messages import HeartbeatRequest, HeartbeatResponse, OffsetCommitRequest, OffsetCommitResponse
from reference.messages import CreateTopicsRequest, TopicPartition
from reference.topics import OFFSETS_TOPIC
from tests.reference.test_broker import Router

TOPIC = "g"
GROUP = "grp"
ALL = {TopicPartition(TOPIC, p) for p in range(6)}


def group_router(bugs=frozenset()) -> Router:
    r = Router(bugs=bugs)
    r.request(0, CreateTopicsRequest(3, OFFSETS_TOPIC, 3, 3))
    r.request(0, CreateTopicsRequest(4, TOPIC, 6, 3))
    for _ in range(10):
        r.tick(200)
    return r


def member(r: Router, node_id: int, assignor: str = "range", instance: str | None = None,
           **config) -> GroupConsumer:
    c = GroupConsumer(node_id, [1, 2, 3], ConsumerConfig(
        group_id=GROUP, assignors=(assignor,), group_instance_id=instance,
        session_timeout_ms=3_000, heartbeat_interval_ms=500, rebalance_timeout_ms=3_000,
        request_timeout_ms=2_000, fetch_max_wait_ms=0, **config))
    r.nodes[node_id] = c
    c.start(r.now)
    r._collect(c)
    r.run()
    for _ in range(5):
        r.tick(100)
    c.subscribe(r.now, [TOPIC])
    r._collect(c)
    r.run()
    return c


def run(r: Router, consumers, ms: int) -> None:
    for _ in range(ms // 100):
        for c in consumers:
            if c.state != "closed":
                c.poll(r.now)  # the application keeps polling
                r._collect(c)
        r.tick(100)


def owners(consumers) -> dict[TopicPartition, list[int]]:
    out: dict[TopicPartition, list[int]] = {}
    for c in consumers:
        for tp in c.owned:
            out.setdefault(tp, []).append(c.node_id)
    return out


def assert_partitioned(consumers) -> None:
    o = owners(consumers)
    assert set(o) == ALL and all(len(v) == 1 for v in o.values()), o
    gens = {c.generation for c in consumers}
    assert len(gens) == 1


def test_members_share_the_partitions_and_rebalance_when_one_leaves():
    for assignor in ("range", "roundrobin", "sticky", "cooperative-sticky"):
        r = group_router()
        cs = [member(r, 70 + i, assignor) for i in range(3)]
        run(r, cs, 6_000)
        assert_partitioned(cs)
        assert sorted(len(c.owned) for c in cs) == [2, 2, 2]
        before = {c.node_id: set(c.owned) for c in cs}
        cs[0].close()
        r._collect(cs[0])
        run(r, cs, 6_000)
        assert_partitioned(cs[1:])
        if assignor in ("sticky", "cooperative-sticky"):
            for c in cs[1:]:
                assert before[c.node_id] <= c.owned, assignor  # survivors keep theirs
        log = [e for c in cs[1:] for e in c.take_rebalance_log()]
        if assignor == "cooperative-sticky":
            # cooperative: nothing a survivor kept was ever revoked
            assert not [e for e in log if e["type"] == "revoked"]
        else:
            assert [e for e in log if e["type"] == "revoked"]  # eager: revoke all, rejoin


def test_a_silent_member_is_expired_and_its_partitions_move():
    r = group_router()
    cs = [member(r, 70 + i) for i in range(2)]
    run(r, cs, 5_000)
    assert_partitioned(cs)
    gen = cs[0].generation
    r.blocked = {71}  # member 71 goes silent
    run(r, cs[:1], 8_000)
    assert cs[0].owned == ALL and cs[0].generation > gen


def test_a_static_member_restarting_within_its_session_keeps_its_assignment():
    r = group_router()
    cs = [member(r, 70 + i, instance=f"i{i}") for i in range(2)]
    run(r, cs, 5_000)
    assert_partitioned(cs)
    gen, had = cs[1].generation, set(cs[1].owned)
    # the process restarts: a fresh consumer with the same group.instance.id
    r.blocked = {71}  # the old process is gone (its timers run into a cut network)
    again = member(r, 72, instance="i1")
    run(r, [cs[0], again], 1_500)
    assert again.owned == had and again.generation == gen  # no rebalance
    assert cs[0].generation == gen
    # the old incarnation is fenced if it ever speaks again
    assert again.member_id != cs[1].member_id


def commit_as(r: Router, coordinator: int, generation: int, member_id: str) -> Errors:
    r.request(coordinator, OffsetCommitRequest(90, GROUP, generation, member_id,
                                               ((TopicPartition(TOPIC, 0), 5),)))
    r.tick(10)
    [resp] = r.replies(OffsetCommitResponse)
    return resp.error


def test_commits_and_heartbeats_from_a_stale_generation_are_fenced_unless_the_bug_is_on():
    for bugs, fenced in ((frozenset(), True), (frozenset({"group-generation-unfenced"}), False)):
        r = group_router(bugs)
        cs = [member(r, 70 + i) for i in range(2)]
        run(r, cs, 5_000)
        c = cs[0]
        coordinator, gen, mid = c.coordinator, c.generation, c.member_id
        assert commit_as(r, coordinator, gen, mid) is Errors.NONE
        cs.append(member(r, 72))
        run(r, cs, 5_000)
        assert c.generation > gen
        stale = commit_as(r, coordinator, gen, mid)
        r.request(coordinator, HeartbeatRequest(91, GROUP, gen, mid))
        [hb] = r.replies(HeartbeatResponse)
        if fenced:
            assert stale is Errors.ILLEGAL_GENERATION and hb.error is Errors.ILLEGAL_GENERATION
            assert commit_as(r, coordinator, -1, "") is Errors.UNKNOWN_MEMBER_ID
            assert commit_as(r, coordinator, gen, "nobody") is Errors.UNKNOWN_MEMBER_ID
        else:
            assert stale is Errors.NONE and hb.error is Errors.NONE


def test_auto_commit_commits_what_the_application_took_and_a_new_member_resumes_there():
    from reference import records as rec
    from reference.messages import ProduceRequest

    r = group_router()
    tp = TopicPartition(TOPIC, 0)
    for i in range(3):
        r.request(r.nodes[0].partitions[tp].leader, ProduceRequest(
            i, -1, 5_000, tp, rec.encode_batch([rec.RecordInput(None, b"%d" % i)])))
    run(r, [], 500)
    c = member(r, 70, auto_commit_interval_ms=1_000)
    run(r, [c], 4_000)
    got = [x for x in c.take_records() if x.tp == tp]
    assert [x.value for x in got] == [b"0", b"1", b"2"]
    run(r, [c], 2_000)  # an auto-commit after the take
    c.close()
    r._collect(c)
    r.run()
    d = member(r, 71)
    run(r, [d], 4_000)
    assert d.positions.get(tp) == 3 and not [x for x in d.take_records() if x.tp == tp]


def join(r: Router, dst: int, member_id: str = "", instance: str | None = None,
         protocols=(("range", b"{}"),), group: str = GROUP, require_known: bool = False):
    from reference.group_messages import JoinGroupRequest, JoinGroupResponse

    r.request(dst, JoinGroupRequest(80, group, member_id, instance, 3_000, 3_000, protocols, require_known))
    r.tick(10)
    return r.replies(JoinGroupResponse)


def coordinator_of(r: Router) -> int:
    from reference.messages import COORDINATOR_GROUP, FindCoordinatorRequest, FindCoordinatorResponse

    r.request(1, FindCoordinatorRequest(1, GROUP, COORDINATOR_GROUP))
    return r.replies(FindCoordinatorResponse)[0].node_id


def test_a_new_member_first_gets_its_member_id_then_joins_with_it():
    """KIP-394 (JoinGroup v4+): MEMBER_ID_REQUIRED with the id; only that id joins as new."""
    r = group_router()
    c = coordinator_of(r)
    [first] = join(r, c, require_known=True)
    assert first.error is Errors.MEMBER_ID_REQUIRED and first.member_id and first.generation_id == -1
    assert join(r, c, member_id="made-up", require_known=True)[0].error is Errors.UNKNOWN_MEMBER_ID
    [joined] = join(r, c, member_id=first.member_id, require_known=True)
    assert joined.error is Errors.NONE and joined.member_id == first.member_id and joined.generation_id == 1
    # a static member needs no second round: it joins at once (and waits for the rebalance)
    assert join(r, c, instance="s9", require_known=True) == []


def test_the_protocol_is_the_one_most_members_prefer():
    """Kafka's ClassicGroup.selectProtocol: each member votes for its first choice among the
    protocols all support; the leader's own preference does not decide."""
    r = group_router()
    c = coordinator_of(r)
    both = (("range", b"{}"), ("roundrobin", b"{}"))
    [leader] = join(r, c, protocols=both)
    assert leader.protocol_name == "range"
    assert join(r, c, protocols=both[::-1]) == [] and join(r, c, protocols=both[::-1]) == []
    answers = join(r, c, member_id=leader.member_id, protocols=both)
    assert len(answers) == 3 and {a.protocol_name for a in answers} == {"roundrobin"}


def test_group_protocol_error_paths():
    from reference.group_messages import LeaveGroupRequest, LeaveGroupResponse, SyncGroupRequest, SyncGroupResponse
    from reference.messages import COORDINATOR_GROUP, FindCoordinatorRequest, FindCoordinatorResponse

    r = group_router()
    r.request(1, FindCoordinatorRequest(1, GROUP, COORDINATOR_GROUP))
    c = r.replies(FindCoordinatorResponse)[0].node_id
    other = 1 if c != 1 else 2
    assert join(r, other)[0].error is Errors.NOT_COORDINATOR
    assert join(r, c, group="")[0].error is Errors.INVALID_GROUP_ID
    assert join(r, c, member_id="nobody")[0].error is Errors.UNKNOWN_MEMBER_ID
    [first] = join(r, c, instance="s1")  # alone: the rebalance completes at once
    assert first.error is Errors.NONE and first.generation_id == 1 and first.leader == first.member_id
    me = first.member_id
    r.request(c, SyncGroupRequest(81, GROUP, 0, me))
    assert r.replies(SyncGroupResponse)[0].error is Errors.ILLEGAL_GENERATION
    r.request(c, OffsetCommitRequest(82, GROUP, 1, me, ((TopicPartition(TOPIC, 0), 1),)))
    assert r.replies(OffsetCommitResponse)[0].error is Errors.REBALANCE_IN_PROGRESS  # completing
    r.request(c, SyncGroupRequest(83, GROUP, 1, me, ((me, b'["g:0"]'),)))
    r.tick(10)
    sync = r.replies(SyncGroupResponse)[0]
    assert sync.error is Errors.NONE and sync.assignment == b'["g:0"]'
    # a zombie of a static member (same instance id, another member id) is fenced
    assert join(r, c, member_id="zombie", instance="s1")[0].error is Errors.FENCED_INSTANCE_ID
    # a second member with an assignor the first does not support: its join waits
    assert join(r, c, protocols=(("roundrobin", b"{}"),)) == []
    r.request(c, HeartbeatRequest(84, GROUP, 1, me))
    assert r.replies(HeartbeatResponse)[0].error is Errors.REBALANCE_IN_PROGRESS
    # the first rejoins, the round completes, and nobody agrees on a protocol
    answers = join(r, c, member_id=me, instance="s1")
    assert {x.error for x in answers} == {Errors.INCONSISTENT_GROUP_PROTOCOL} and len(answers) == 2
    r.request(c, LeaveGroupRequest(85, GROUP, "nobody"))
    assert r.replies(LeaveGroupResponse)[0].error is Errors.UNKNOWN_MEMBER_ID


def test_a_member_that_stops_polling_leaves_after_max_poll_interval():
    r = group_router()
    cs = [member(r, 70 + i, max_poll_interval_ms=2_000) for i in range(2)]
    run(r, cs, 5_000)
    assert_partitioned(cs)
    run(r, cs[:1], 6_000)  # member 71 keeps heartbeating but its application stopped polling
    assert cs[0].owned == ALL and not cs[1].owned
    assert any(e.get("lost") == "closed" for e in cs[1].take_rebalance_log())
    run(r, cs, 6_000)  # it polls again: it rejoins
    assert_partitioned(cs)


def test_a_new_group_coordinator_loads_generation_members_and_assignment():
    from reference.coordinator import partition_for
    from reference.group_coordinator import GroupCoordinator
    from reference.group_state import STABLE

    r = group_router()
    cs = [member(r, 70 + i) for i in range(2)]
    run(r, cs, 5_000)
    old = r.nodes[cs[0].coordinator].groups.groups[GROUP]
    fresh = GroupCoordinator(r.nodes[cs[0].coordinator], 3)
    fresh.on_leader(fresh.host.now_ms, partition_for(GROUP, 3), 0)
    g = fresh.groups[GROUP]
    assert g.state == STABLE and g.generation == old.generation
    assert {m: x.assignment for m, x in g.members.items()} == {
        m: x.assignment for m, x in old.members.items()}


def test_joins_waiting_when_the_coordinator_unloads_the_group_are_answered_not_coordinator():
    """A group's coordinator that stops leading its __consumer_offsets partition answers the
    joins waiting for its rebalance (NOT_COORDINATOR, as Kafka's onUnloaded), so that their
    members find the new coordinator; the bug switch group-unload-strands-joins drops them
    unanswered (kafka-python then waits max.poll.interval.ms + 5 s for an answer)."""
    from reference.bugs import Bug
    from reference.coordinator import partition_for
    from reference.group_messages import JoinGroupResponse

    for bugs, answered in ((frozenset(), True), (frozenset({Bug.GROUP_UNLOAD_STRANDS_JOINS}), False)):
        r = group_router(bugs)
        c = coordinator_of(r)
        [first] = join(r, c)  # alone: generation 1 at once
        assert first.error is Errors.NONE
        assert join(r, c) == []  # a second member: the rebalance waits for the first to rejoin
        r.nodes[c].groups.on_not_leader(partition_for(GROUP, 3))  # the partition moves away
        r._collect(r.nodes[c])
        r.run()
        waiting = r.replies(JoinGroupResponse)
        if answered:
            assert [a.error for a in waiting] == [Errors.NOT_COORDINATOR]
        else:
            assert waiting == []
