"""The share coordinator (reference/share_coordinator.py): how a write's batches lay over
the recorded state, and, through the simulator, that a share-partition's state survives its
leader: a new leader reads what was acknowledged, and the former one is fenced."""

from __future__ import annotations

from reference.share_coordinator import ShareState, merge_batches
from reference.share_partition import ACKNOWLEDGED, ARCHIVED, AVAILABLE


def test_a_write_lays_its_batches_over_the_state_and_drops_what_is_below_the_start():
    old = ((3, 6, AVAILABLE, 1), (7, 7, ACKNOWLEDGED, 1))
    new = ((5, 5, ARCHIVED, 2), (8, 9, ACKNOWLEDGED, 1))
    assert merge_batches(old, new, 4) == ((4, 4, AVAILABLE, 1), (5, 5, ARCHIVED, 2), (6, 6, AVAILABLE, 1),
                                          (7, 9, ACKNOWLEDGED, 1))
    assert merge_batches(old, (), 8) == ()


def test_the_state_round_trips_through_its_record():
    s = ShareState(2, 3, 10, ((10, 12, ACKNOWLEDGED, 1),))
    assert ShareState.from_json(s.to_json()) == s


def test_a_new_leader_loads_the_share_partition_and_the_former_one_is_fenced():
    """Seed 2 of the share workload: a partition's leadership moves, the new leader loads the
    share-partition's state from the share coordinator (a third load, beside the first two
    partitions'), a write of the former leader is refused (FENCED_LEADER_EPOCH), and the run
    stays valid: nothing accepted is delivered again."""
    from kafkacheck.judge import judge_record
    from kafkacheck.runner import RunOptions, simulate

    out = simulate(RunOptions(seed=2, workload="share", ops=600, partitions=2), None)
    marks = out.stats["marks"]
    assert marks["share-partition-loaded"] >= 3 and marks["share-state-fenced-leader"] >= 1
    r = judge_record(out.record())
    assert r["valid"] is True, r["anomaly_types"]
