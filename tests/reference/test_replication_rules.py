"""Replication rules on one partition, driven directly (no simulator): divergence and
truncation (KIP-101/279), epoch fencing (KIP-320), HW from current-epoch positions, ISR
shrink and expand."""

from __future__ import annotations

from reference import records as rec
from reference.log import PartitionLog
from reference.messages import PartitionState, TopicPartition
from reference.partition import Partition
from reference.storage import MemoryStorage

TP = TopicPartition("t", 0)


def replica(broker_id: int, bugs=frozenset()) -> Partition:
    return Partition(TP, PartitionLog(MemoryStorage(), "t-0"), broker_id, bugs)


def state(leader, epoch, isr=(1, 2, 3), partition_epoch=None):
    return PartitionState(TP, (1, 2, 3), tuple(isr), leader, epoch,
                          epoch if partition_epoch is None else partition_epoch)


def append(p: Partition, *values: bytes) -> None:
    for v in values:
        p.log.append_as_leader(rec.encode_batch([rec.RecordInput(None, v)]), p.leader_epoch)


def test_a_follower_with_a_diverged_suffix_truncates_to_where_the_epochs_agree():
    a, b = replica(1), replica(2)
    a.apply_state(state(1, 0), 0)
    append(a, b"m0", b"m1")  # epoch 0; m1 never reached b
    b.apply_state(state(1, 0), 0)
    b.log.append_as_follower(a.log.batches()[0])
    b.apply_state(state(2, 1, isr=(2, 3)), 0)  # b leads epoch 1 from offset 1
    append(b, b"n1")
    a.apply_state(state(2, 1, isr=(2, 3)), 0)
    diverging = b.divergence(a.log.log_end_offset, a.log.latest_epoch)
    assert diverging == (0, 1)  # epoch 0 ends at offset 1 on the leader
    a.truncate_on_divergence(*diverging)
    assert a.log.log_end_offset == 1
    assert b.divergence(a.log.log_end_offset, a.log.latest_epoch) is None


def test_a_follower_that_never_saw_the_leaders_first_epoch_truncates_to_its_start():
    leader, follower = replica(1), replica(2)
    leader.apply_state(state(1, 3), 0)
    append(leader, b"x")
    follower.apply_state(state(2, 1), 0)
    append(follower, b"old")  # written as leader of epoch 1, which the new leader never had
    follower.apply_state(state(1, 3), 0)
    diverging = leader.divergence(follower.log.log_end_offset, follower.log.latest_epoch)
    assert diverging == (-1, 0)
    follower.truncate_on_divergence(*diverging)
    assert follower.log.log_end_offset == 0


def test_requests_from_another_leader_epoch_are_fenced():
    p = replica(1)
    p.apply_state(state(1, 5), 0)
    assert p.check_epoch(4) == "FENCED_LEADER_EPOCH"
    assert p.check_epoch(6) == "UNKNOWN_LEADER_EPOCH"
    assert p.check_epoch(5) is None and p.check_epoch(-1) is None


def test_the_hw_waits_for_every_isr_follower_to_fetch_in_the_current_epoch():
    p = replica(1)
    p.apply_state(state(1, 0), 0)
    append(p, b"a", b"b")
    assert not p.maybe_advance_high_watermark()  # no follower position known yet
    p.update_follower(2, 10, 2, 0)
    assert not p.maybe_advance_high_watermark()
    p.update_follower(3, 11, 1, 0)
    assert p.maybe_advance_high_watermark() and p.log.high_watermark == 1
    p.apply_state(state(1, 1), 0)  # a new epoch: old positions say nothing (KIP-320 rule 3)
    append(p, b"c")
    assert not p.maybe_advance_high_watermark()
    assert all(f.log_end_offset == -1 for f in p.followers.values())


def test_lagging_followers_leave_the_isr_and_caught_up_ones_may_return():
    p = replica(1)
    p.apply_state(state(1, 0), 0)
    append(p, b"a")
    p.update_follower(2, 10, 1, 100)
    p.update_follower(3, 11, 0, 100)
    assert p.isr_to_shrink(3_050, 3_000) == frozenset({1, 2})  # 3 last caught up at 0
    p.apply_state(state(1, 0, isr=(1, 2), partition_epoch=1), 5_000)
    p.maybe_advance_high_watermark()
    assert p.isr_to_expand(3) is None  # not caught up to the HW yet
    p.update_follower(3, 11, 1, 5_100)
    assert p.isr_to_expand(3) == frozenset({1, 2, 3})


def test_pre_kip_101_truncation_to_the_high_watermark_is_the_bug_switch():
    p = replica(2, frozenset({"truncate-to-high-watermark"}))
    p.apply_state(state(1, 0), 0)
    p.log.append_as_follower(rec.with_offset_and_epoch(
        rec.encode_batch([rec.RecordInput(None, b"m0")]), 0, 0))
    assert p.log.high_watermark == 0
    p.apply_state(state(3, 1), 0)
    assert p.log.log_end_offset == 0  # m0 is gone although it may be committed
    correct = replica(2)
    correct.apply_state(state(1, 0), 0)
    correct.log.append_as_follower(p_batch := rec.with_offset_and_epoch(
        rec.encode_batch([rec.RecordInput(None, b"m0")]), 0, 0))
    correct.apply_state(state(3, 1), 0)
    assert correct.log.log_end_offset == 1 and correct.log.batches() == [p_batch]


def test_the_kip_279_hole_is_the_bug_switch():
    """A follower whose last epoch the leader never had: KIP-279 truncates it to where the
    leader's largest earlier epoch ends; the switch answers 'undefined' and the follower falls
    back to its own high watermark, below records it shares with the leader."""
    def run(bugs):
        leader, follower = replica(1, bugs), replica(2, bugs)
        leader.apply_state(state(1, 0), 0)
        append(leader, b"m0", b"m1")
        follower.apply_state(state(1, 0), 0)
        for b in leader.log.batches():
            follower.log.append_as_follower(b)
        follower.log.update_high_watermark(1)   # it learned that m0 is committed, not yet m1
        follower.apply_state(state(2, 1), 0)
        append(follower, b"x2")          # epoch 1: the old leader never sees it
        leader.apply_state(state(1, 2), 0)
        follower.apply_state(state(1, 2), 0)
        diverging = leader.divergence(follower.log.log_end_offset, follower.log.latest_epoch)
        follower.truncate_on_divergence(*diverging)
        return diverging, follower.log.log_end_offset

    assert run(frozenset()) == ((0, 2), 2)            # keeps m0 and m1, drops x2
    diverging, end = run(frozenset({"epoch-lookup-falls-back-to-hw"}))
    assert diverging == (-1, -1) and end == 1          # falls back to its high watermark: m1 is gone
