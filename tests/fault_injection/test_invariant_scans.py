"""The invariant checker looks at a broker's partitions again only after the broker changed
one of them (``Broker.changes``, counted by its logs and partitions): a step that changed
nothing costs no scan, and every way the engine changes what the checks read is counted, so a
broken rule is still caught in the step that broke it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fault_injection.simulation import _TIMER
from kafkacheck.runner import RunOptions, _Run


def settled_sim():
    """A short queue run without faults, its ops done."""
    run = _Run(RunOptions(seed=3, ops=60, faults=[]))
    run.start_cluster()
    run.create_topics()
    run.start_clients()
    run.schedule_faults()
    run.run_ops(None)
    return run.sim


def settled_run():
    """A short queue run without faults: its checker, controller, brokers and a partition with
    records below its high watermark, and the broker that leads it."""
    sim = settled_sim()
    brokers = sim.brokers()
    leader, p = next((b, p) for b in brokers.values() for p in b.partitions.values()
                     if p.is_leader and p.log.high_watermark > 1 and not p.tp.topic.startswith("__"))
    return sim.checker, sim.controller(), brokers, leader, p


def test_a_step_that_changes_nothing_costs_no_scan():
    checker, controller, brokers, b, p = settled_run()
    assert checker.after_step(b, controller, brokers) == []
    assert checker.nothing_to_check(b, controller)  # the simulator then skips after_step
    seen = dict(checker.seen[b.node_id])
    checker.seen[b.node_id][p.tp] = (-1, -1, -1, -1, False)  # what a scan would overwrite
    assert checker.after_step(b, controller, brokers) == []
    assert checker.seen[b.node_id][p.tp] == (-1, -1, -1, -1, False)  # not scanned
    checker.seen[b.node_id] = seen


@pytest.mark.parametrize("change", ["high-watermark", "truncation", "leader-epoch"])
def test_every_change_of_a_partition_is_scanned_in_its_step(change):
    checker, controller, brokers, b, p = settled_run()
    assert checker.after_step(b, controller, brokers) == []
    if change == "high-watermark":  # a leader's HW going back within its epoch
        p.log.update_high_watermark(p.log.high_watermark - 1)
        expected, broker = "leader-hw-monotonic", b
    elif change == "truncation":  # a leader cutting its own committed records
        p.log.truncate_to(p.log.high_watermark - 1)
        expected, broker = "leader-hw-monotonic", b
    else:  # another replica told it leads the next epoch, then the leader told the same
        other = next(brokers[r] for r in p.replicas if r != b.node_id)
        newer = replace(controller.partitions[p.tp], leader=other.node_id, leader_epoch=p.leader_epoch + 1,
                        partition_epoch=p.partition_epoch + 1)
        assert other.partitions[p.tp].apply_state(newer, 0) == "leader"
        assert checker.after_step(other, controller, brokers) == []
        assert p.apply_state(replace(newer, leader=b.node_id), 0) == "leader"
        expected, broker = "one-leader-per-epoch", b
    assert not checker.nothing_to_check(broker, controller)
    found = {v.invariant for v in checker.after_step(broker, controller, brokers)}
    assert expected in found


@pytest.mark.parametrize("change", ["acknowledgement", "metadata", "transactions", "consumer-groups"])
def test_the_skip_of_a_quiet_step_sees_every_other_input_of_the_checks(change):
    checker, controller, brokers, b, p = settled_run()
    assert checker.after_step(b, controller, brokers) == []
    assert checker.nothing_to_check(b, controller)
    if change == "acknowledgement":
        checker.acknowledged(p.tp, 0)
    elif change == "metadata":
        controller.metadata_version += 1
    elif change == "transactions":
        b.txn.changes += 1
    else:
        b.groups.consumer.changes += 1
    assert not checker.nothing_to_check(b, controller)
    checker.after_step(b, controller, brokers)
    assert checker.nothing_to_check(b, controller)


def test_a_skipped_moot_timer_still_makes_its_steps_checks():
    # a harness's act (an election, a state machine's acknowledgement) routes without checking:
    # the next step checks; when that step is a moot timer, skipped, it must check all the same
    sim = settled_sim()
    b = next(iter(sim.brokers().values()))
    tp = next(iter(b.partitions))
    sim.checker.acknowledged(tp, 0)
    key = ("verify-timeout", -1)  # a request timeout of nothing in flight: moot
    assert b.timer_is_moot(sim.now_ns // 1_000_000, key) is True
    sim._push(sim.now_ns, _TIMER, b.node_id, sim.processes[b.node_id].incarnation, key)
    moot = sim.moot_timers
    sim.run_until(sim.now_ns)
    assert sim.moot_timers == moot + 1
    assert sim.checker.pending_acks == []
