"""The KIP-848 member (reference/modern_consumer.py) driven by hand as a sans-IO object: the
test feeds it the coordinator's answers and reads what it sends and which timers it sets.
Joining, assignments and their acknowledgements, the auto-commit before a revocation,
fencing, the coordinator moving, a lost heartbeat, leaving, and the errors that stop it."""

from __future__ import annotations

import pytest

from reference.consumer import ConsumedRecord, ConsumerConfig
from reference.errors import Errors
from reference.group_messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from reference.messages import FindCoordinatorRequest, FindCoordinatorResponse, TopicPartition
from reference.modern_consumer import ModernGroupConsumer
from reference.node import Send, Timer

GROUP = "grp"
TP0, TP1, TP2, TP3 = (TopicPartition("t", p) for p in range(4))
BOOTSTRAP, COORD, OTHER = 1, 2, 3
MAX_POLL_MS = 9_000
BACKOFF_MS = 100


def member(**config) -> ModernGroupConsumer:
    defaults = {"group_id": GROUP, "enable_auto_commit": False, "heartbeat_interval_ms": 1_000,
                "request_timeout_ms": 2_000, "retry_backoff_ms": BACKOFF_MS, "max_poll_interval_ms": MAX_POLL_MS,
                "rebalance_timeout_ms": 60_000}
    c = ModernGroupConsumer(50, [BOOTSTRAP], ConsumerConfig(**{**defaults, **config}))
    c.start(0)
    c.drain()
    return c


def sent(outs, cls) -> list:
    return [o.message for o in outs if isinstance(o, Send) and isinstance(o.message, cls)]


def heartbeats(outs) -> list[ConsumerGroupHeartbeatRequest]:
    return sent(outs, ConsumerGroupHeartbeatRequest)


def armed(outs, name: str) -> list[Timer]:
    return [o for o in outs if isinstance(o, Timer) and (o.key == name or (isinstance(o.key, tuple) and o.key[0] == name))]


def answer(c: ModernGroupConsumer, hb: ConsumerGroupHeartbeatRequest, error=Errors.NONE, epoch: int = 1,
           assignment=None, member_id: str = "m-1", interval_ms: int = 1_000, now: int = 0) -> list:
    if error is not Errors.NONE:
        c.receive(now, COORD, ConsumerGroupHeartbeatResponse(hb.correlation_id, error))
    else:
        c.receive(now, COORD, ConsumerGroupHeartbeatResponse(
            hb.correlation_id, error, member_id, epoch, interval_ms,
            None if assignment is None else tuple(sorted(assignment))))
    return c.drain()


def find_coordinator(c: ModernGroupConsumer, outs, node: int = COORD, now: int = 0) -> list:
    [find] = sent(outs, FindCoordinatorRequest)
    c.receive(now, BOOTSTRAP, FindCoordinatorResponse(find.correlation_id, Errors.NONE, node))
    return c.drain()


def join(c: ModernGroupConsumer, assignment=(TP0, TP1), epoch: int = 1) -> ConsumerGroupHeartbeatRequest:
    """Subscribe, find the coordinator, join; answer the acknowledgement. Returns the ack."""
    c.subscribe(0, ["t"])
    [hb] = heartbeats(find_coordinator(c, c.drain()))
    [ack] = heartbeats(answer(c, hb, epoch=epoch, assignment=assignment))
    answer(c, ack, epoch=epoch)
    c.take_rebalance_log()
    return ack


def beat(c: ModernGroupConsumer, now: int = 1_000) -> ConsumerGroupHeartbeatRequest:
    """Fire the periodic heartbeat timer the last answer armed; returns the heartbeat."""
    key = ("heartbeat", c._hb_seq)
    c.timer(now, key)
    [hb] = heartbeats(c.drain())
    return hb


def take(c: ModernGroupConsumer, *offsets: tuple[TopicPartition, int]) -> list[ConsumedRecord]:
    """The application polls records of these offsets (as if fetched)."""
    c.records += [ConsumedRecord(tp, o, None, b"v") for tp, o in offsets]
    return c.take_records()


def full(hb: ConsumerGroupHeartbeatRequest) -> bool:
    return (hb.rebalance_timeout_ms == MAX_POLL_MS and hb.subscribed_topics == ("t",)
            and hb.owned is not None)


# ------------------------------------------------------------ joining and assignments


def test_join_is_a_full_epoch_0_heartbeat_and_the_member_takes_its_id_epoch_and_assignment():
    c = member()
    c.subscribe(0, ["t", "a", "t"])
    outs = c.drain()
    assert not heartbeats(outs) and c.state == "joining"  # the coordinator first
    [hb] = heartbeats(find_coordinator(c, outs))
    assert (hb.group_id, hb.member_id, hb.member_epoch, hb.instance_id) == (GROUP, "", 0, None)
    # the Java client sends max.poll.interval.ms as the rebalance timeout; joining owns nothing
    assert hb.rebalance_timeout_ms == MAX_POLL_MS and hb.subscribed_topics == ("a", "t")
    assert hb.owned == () and hb.server_assignor is None
    answer(c, hb, epoch=5, assignment={TP0, TP1}, member_id="m-7")
    assert (c.state, c.member_id, c.generation, c.owned) == ("stable", "m-7", 5, {TP0, TP1})
    assert c.take_rebalance_log() == [{"type": "assigned", "keys": ["t:0", "t:1"], "generation": 5,
                                       "owned": ["t:0", "t:1"]}]
    static = member(group_instance_id="i-1", server_assignor="range")
    static.subscribe(0, ["t"])
    [hb] = heartbeats(find_coordinator(static, static.drain()))
    assert hb.instance_id == "i-1" and hb.server_assignor == "range"


def test_an_assignment_is_acknowledged_at_once_and_then_heartbeats_carry_only_what_changed():
    c = member()
    c.subscribe(0, ["t"])
    [hb] = heartbeats(find_coordinator(c, c.drain()))
    outs = answer(c, hb, epoch=1, assignment={TP0, TP1}, interval_ms=1_500)
    [ack] = heartbeats(outs)  # at once, without waiting for the interval
    assert (ack.member_id, ack.member_epoch, ack.owned) == ("m-1", 1, (TP0, TP1))
    assert ack.rebalance_timeout_ms == -1 and ack.subscribed_topics is None
    outs = answer(c, ack, epoch=1, interval_ms=1_500)
    assert not heartbeats(outs) and len(c.take_rebalance_log()) == 1
    [t] = armed(outs, "heartbeat")
    assert t.delay_ms == 1_500  # the interval the coordinator gave
    hb = beat(c)
    assert hb.owned is None and hb.subscribed_topics is None and hb.member_epoch == 1
    assert hb.instance_id is None and hb.group_id == GROUP
    # a new epoch alone: logged, not acknowledged
    assert not heartbeats(answer(c, hb, epoch=2))
    assert c.take_rebalance_log() == [{"type": "assigned", "keys": [], "generation": 2, "owned": ["t:0", "t:1"]}]
    # a new subscription goes in the next heartbeat, and only it
    c.subscribe(0, ["t", "u"])
    [hb] = heartbeats(c.drain())
    assert hb.subscribed_topics == ("t", "u") and hb.owned is None


def test_without_auto_commit_a_revocation_comes_before_the_assignment_and_both_are_acknowledged():
    c = member()
    join(c)
    hb = beat(c)
    [ack] = heartbeats(answer(c, hb, epoch=2, assignment={TP1, TP2}))
    assert ack.owned == (TP1, TP2) and c.owned == {TP1, TP2}
    assert c.take_rebalance_log() == [
        {"type": "revoked", "keys": ["t:0"], "generation": 2},
        {"type": "assigned", "keys": ["t:2"], "generation": 2, "owned": ["t:1", "t:2"]}]
    # the application gets records of the partitions it owns only
    assert [r.tp for r in take(c, (TP0, 3), (TP1, 4))] == [TP1]
    assert c.consumed == {TP1: 5}


def test_auto_commit_commits_the_revoked_partitions_before_revoking_them():
    c = member(enable_auto_commit=True)
    join(c)
    take(c, (TP0, 6), (TP1, 4))
    hb = beat(c)
    # the coordinator asks for TP1 back (same epoch: the member is revoking)
    outs = answer(c, hb, epoch=1, assignment={TP0})
    [commit] = sent(outs, OffsetCommitRequest)
    assert commit.offsets == ((TP1, 5),) and (commit.generation_id, commit.member_id) == (1, "m-1")
    assert not heartbeats(outs) and c.state == "reconciling"
    assert c.owned == {TP0, TP1} and not c.take_rebalance_log()  # nothing revoked before the commit
    assert [r.tp for r in take(c, (TP0, 7), (TP1, 5))] == [TP0]  # TP1 is paused meanwhile
    hb = beat(c, 2_000)
    assert hb.owned is None  # heartbeats go on, and still own TP1
    c.receive(2_100, COORD, OffsetCommitResponse(commit.correlation_id, Errors.NONE))
    assert not heartbeats(c.drain())  # the acknowledgement waits for the heartbeat in flight
    assert c.owned == {TP0} and c.state == "stable"
    [ack] = heartbeats(answer(c, hb, epoch=1, now=2_200))
    assert ack.owned == (TP0,)
    assert c.take_rebalance_log() == [{"type": "revoked", "keys": ["t:1"], "generation": 1},
                                      {"type": "assigned", "keys": [], "generation": 1, "owned": ["t:0"]}]
    assert c.commit_result is None  # the member's own commit, not the application's


def test_a_slow_revocation_callback_heartbeats_unacknowledged_and_completes_the_reconciliation_it_began():
    """The nemesis slow-callback: the revocation's callback takes 3 s; meanwhile the member
    heartbeats without saying what it owns (still revoking), a newer target waits, and the
    callback then completes the reconciliation it began (as the Java client does) before the
    newer one is taken."""
    c = member()
    join(c, assignment=(TP0, TP1))
    c.slow_callback_ms = 3_000
    hb = beat(c)
    outs = answer(c, hb, epoch=1, assignment={TP0})  # TP1 goes
    assert not heartbeats(outs) and c.state == "reconciling" and c.owned == {TP0, TP1}
    [callback] = armed(outs, "revoke-callback")
    assert callback.delay_ms == 3_000 and c.slow_callback_ms == 0  # one revocation only
    assert [r.tp for r in take(c, (TP0, 1), (TP1, 1))] == [TP0]  # TP1 paused meanwhile
    hb = beat(c, 2_000)
    assert hb.owned is None  # a heartbeat that acknowledges nothing
    # the group moves on: TP1 comes back, with TP2; it waits for the callback
    answer(c, hb, epoch=1, assignment={TP0, TP1, TP2}, now=2_100)
    assert c.owned == {TP0, TP1} and not c.take_rebalance_log()
    c.timer(3_000, callback.key)
    outs = c.drain()
    assert c.take_rebalance_log() == [
        {"type": "revoked", "keys": ["t:1"], "generation": 1},
        {"type": "assigned", "keys": [], "generation": 1, "owned": ["t:0"]},
        {"type": "assigned", "keys": ["t:1", "t:2"], "generation": 1, "owned": ["t:0", "t:1", "t:2"]}]
    assert c.owned == {TP0, TP1, TP2} and c.state == "stable"


# ------------------------------------------------------------ errors


@pytest.mark.parametrize("error", [Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID])
def test_a_fenced_member_loses_its_partitions_and_rejoins_at_once_with_epoch_0_and_its_member_id(error):
    c = member()
    join(c, epoch=3)
    hb = beat(c)
    [rejoin] = heartbeats(answer(c, hb, error))
    assert c.take_rebalance_log() == [{"type": "revoked", "keys": ["t:0", "t:1"], "generation": 3,
                                       "lost": error.name}]
    assert not c.owned and c.state == "joining"
    assert (rejoin.member_id, rejoin.member_epoch, rejoin.owned) == ("m-1", 0, ())
    assert full(rejoin)
    [ack] = heartbeats(answer(c, rejoin, epoch=5, assignment={TP2}, member_id="m-1"))
    assert c.member_id == "m-1" and c.generation == 5 and ack.owned == (TP2,)


@pytest.mark.parametrize("error", [Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE,
                                   Errors.COORDINATOR_LOAD_IN_PROGRESS])
def test_the_coordinator_moving_is_looked_up_again_and_the_heartbeat_retried_in_full_after_the_backoff(error):
    c = member()
    join(c)
    hb = beat(c, 1_000)
    outs = answer(c, hb, error, now=1_000)
    [retry] = armed(outs, "group-again")
    assert not heartbeats(outs) and c.coordinator == -1 and retry.delay_ms == BACKOFF_MS
    assert not heartbeats(find_coordinator(c, outs, OTHER, now=1_010))  # backing off
    c.timer(1_000 + BACKOFF_MS, retry.key)
    [again] = sent([o for o in c.drain() if isinstance(o, Send) and o.dst == OTHER], ConsumerGroupHeartbeatRequest)
    assert again.member_epoch == 1 and again.owned == (TP0, TP1) and full(again)
    assert c.owned == {TP0, TP1} and not c.take_rebalance_log()


def test_a_heartbeat_without_an_answer_finds_the_coordinator_again_and_loses_nothing():
    c = member()
    join(c)
    hb = beat(c, 1_000)
    c.timer(2_000, ("heartbeat-timeout", hb.correlation_id + 1))  # another heartbeat's: moot
    assert not c.drain() and c.coordinator == COORD
    c.timer(3_000, ("heartbeat-timeout", hb.correlation_id))
    outs = c.drain()
    assert c.coordinator == -1 and sent(outs, FindCoordinatorRequest)
    [again] = heartbeats(find_coordinator(c, outs, OTHER, now=3_010))
    assert again.member_epoch == 1 and full(again) and again.owned == (TP0, TP1)
    answer(c, hb, Errors.FENCED_MEMBER_EPOCH)  # the lost heartbeat's late answer: ignored
    assert c.owned == {TP0, TP1} and c.generation == 1 and not c.take_rebalance_log()
    # a heartbeat lost with its connection: the same, at once
    c.connection_lost(3_020, OTHER)
    assert c.coordinator == -1 and sent(c.drain(), FindCoordinatorRequest) and c.owned == {TP0, TP1}


@pytest.mark.parametrize("error", [Errors.GROUP_ID_NOT_FOUND, Errors.INVALID_REQUEST, Errors.UNSUPPORTED_ASSIGNOR])
def test_a_fatal_error_stops_the_member(error):
    c = member()
    join(c)
    hb = beat(c)
    outs = answer(c, hb, error)
    assert c.fatal_error is error and c.state == "fatal" and not c.owned and not heartbeats(outs)
    assert c.take_rebalance_log() == [{"type": "revoked", "keys": ["t:0", "t:1"], "generation": 1,
                                       "lost": error.name}]
    c.poll(5_000)
    c.timer(5_000, ("group-again", c._again_seq))
    c.timer(5_000, ("heartbeat", c._hb_seq))
    c.subscribe(5_000, ["t"])
    assert not heartbeats(c.drain())  # no rejoin


def test_an_unknown_server_assignor_is_refused_at_the_join_and_fatal():
    c = member(server_assignor="bogus")
    c.subscribe(0, ["t"])
    [hb] = heartbeats(find_coordinator(c, c.drain()))
    assert hb.server_assignor == "bogus"
    answer(c, hb, Errors.UNSUPPORTED_ASSIGNOR)
    assert c.fatal_error is Errors.UNSUPPORTED_ASSIGNOR


def test_a_fenced_instance_id_stops_the_member_and_an_unreleased_one_retries_the_join():
    c = member(group_instance_id="i-1")
    join(c)
    answer(c, beat(c), Errors.FENCED_INSTANCE_ID)
    assert c.fenced and not c.owned and c.fatal_error is None
    c.poll(5_000)
    assert not heartbeats(c.drain())
    # a restarted static member whose previous incarnation the coordinator still holds
    c = member(group_instance_id="i-1")
    c.subscribe(0, ["t"])
    [hb] = heartbeats(find_coordinator(c, c.drain()))
    outs = answer(c, hb, Errors.UNRELEASED_INSTANCE_ID)
    assert not heartbeats(outs) and c.fatal_error is None and not c.fenced
    [t] = armed(outs, "group-again")
    assert t.delay_ms == BACKOFF_MS
    c.timer(BACKOFF_MS, t.key)
    [again] = heartbeats(c.drain())
    assert again.member_epoch == 0 and again.instance_id == "i-1" and full(again) and again.owned == ()


# ------------------------------------------------------------ leaving and commits


@pytest.mark.parametrize("instance, epoch", [(None, -1), ("i-1", -2)])
def test_close_revokes_everything_then_leaves_with_minus_1_or_minus_2_for_a_static_member(instance, epoch):
    c = member(group_instance_id=instance)
    join(c, epoch=4)
    c.close()
    [leave] = heartbeats(c.drain())
    assert (leave.member_id, leave.member_epoch, leave.instance_id) == ("m-1", epoch, instance)
    assert c.take_rebalance_log() == [{"type": "revoked", "keys": ["t:0", "t:1"], "generation": 4},
                                      {"type": "revoked", "keys": [], "generation": 4, "lost": "closed"}]
    assert c.state == "closed" and not c.owned and c.member_id == "m-1"


def test_a_member_that_stops_polling_leaves_and_rejoins_at_its_next_poll():
    c = member()
    join(c)
    c.poll(1_000)
    c.timer(1_000 + MAX_POLL_MS, "poll-interval-check")  # polled just within the interval
    outs = c.drain()
    assert not heartbeats(outs) and c.owned == {TP0, TP1} and armed(outs, "poll-interval-check")
    c.timer(2_000 + MAX_POLL_MS, "poll-interval-check")
    [leave] = heartbeats(c.drain())
    assert leave.member_epoch == -1 and leave.member_id == "m-1"
    assert c.take_rebalance_log() == [{"type": "revoked", "keys": ["t:0", "t:1"], "generation": 1,
                                       "lost": "max poll interval"}]
    assert c.state == "unjoined" and not c.owned
    c.poll(20_000)
    [rejoin] = heartbeats(c.drain())
    assert (rejoin.member_id, rejoin.member_epoch, rejoin.owned) == ("m-1", 0, ()) and full(rejoin)


def test_commits_carry_the_member_epoch_and_id_and_report_the_answer():
    c = member()
    join(c, epoch=4)
    c.commit({TP0: 7})
    [req] = sent(c.drain(), OffsetCommitRequest)
    assert (req.group_id, req.generation_id, req.member_id, req.offsets) == (GROUP, 4, "m-1", ((TP0, 7),))
    assert c.commit_result is None
    c.receive(0, COORD, OffsetCommitResponse(req.correlation_id, Errors.STALE_MEMBER_EPOCH))
    assert c.commit_result is Errors.STALE_MEMBER_EPOCH
    take(c, (TP1, 2))
    assert c.commit_consumed() == {TP1: 3}
    [req] = sent(c.drain(), OffsetCommitRequest)
    assert req.offsets == ((TP1, 3),) and req.generation_id == 4
