"""The workloads' Hypothesis state machines (kafkacheck/explore.py) against the simulated cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from kafkacheck.cli import main
from kafkacheck.explore import MACHINE_FOR_BUG, MACHINES, Finding, machine, replay
from reference.bugs import BUGS

PROGRAMS = Path(__file__).parent / "programs"


# share-committed's machine is eos's (kafkacheck/run_machine.py) over another workload: eos represents it
@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "share-committed" else n
                                  for n in sorted(MACHINES)])
def test_correct_engine_passes_the_ci_profile(name):
    """Fast and derandomized: the same programs on every run; the correct engine must keep
    every invariant and give histories the checker finds valid."""
    run_state_machine_as_test(machine(name), settings=settings.get_profile("ci"))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MACHINES))
def test_correct_engine_passes_the_deep_profile(name):
    run_state_machine_as_test(machine(name), settings=settings.get_profile("deep"))


def test_every_workload_has_a_machine_and_explore_help_lists_it(capsys):
    from kafkacheck.workloads import WORKLOADS

    assert set(WORKLOADS) <= set(MACHINES)
    with pytest.raises(SystemExit):
        main(["explore", "--help"])
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in WORKLOADS)


def test_every_bug_switch_has_a_machine():
    assert set(MACHINE_FOR_BUG) == set(BUGS)
    assert set(MACHINE_FOR_BUG.values()) <= set(MACHINES)


def _program(name):
    data = json.loads((PROGRAMS / name).read_text())
    return data["machine"], data["bugs"], data["steps"]


def test_a_found_program_replays_with_its_bug_and_passes_without():
    name, bugs, steps = _program("ack-before-isr.json")
    with pytest.raises(Finding, match="acked-on-isr"):
        replay(name, bugs, steps)
    m = replay(name, [], steps)
    assert m.result["valid"] is True


def test_replay_is_deterministic():
    steps = [["boot", {"seed": 3, "acks": "all", "idempotent": True}],
             ["produce", {"writer": 0, "partitions": [0, 1]}], ["fault", {"kind": "kill", "node": 1}],
             ["advance", {"ms": 3000}], ["poll", {"reader": 1}], ["fault", {"kind": "restart", "node": 1}],
             ["produce", {"writer": 1, "partitions": [1]}], ["advance", {"ms": 200}]]
    a = replay("queue", [], steps)
    b = replay("queue", [], steps)
    assert a.sim.recorder.ops == b.sim.recorder.ops
    assert a.result["valid"] is True
    assert a.result["stats"]["client_ops"] >= 5


def test_the_checker_finds_a_lost_write_in_a_machine_history():
    """Not only the invariants: with invariants off, the history checker sees the loss that
    ack-before-isr causes when the leader is cut off from the other servers."""
    steps = [["boot", {"seed": 0, "acks": "all", "idempotent": False}],
             ["produce", {"writer": 0, "partitions": [0]}], ["advance", {"ms": 200}]]
    m = machine("queue", ["ack-before-isr"])()
    m.boot(seed=0, acks="all", idempotent=False)
    m.sim.checker = None  # the invariants would stop the run at the first bad ack
    leader = next(b for b, node in m.sim.brokers().items() if node.partitions[m.keys[0]].is_leader)
    for step, args in [*steps[1:], ["fault", {"kind": "split", "node": leader}],
                       ["produce", {"writer": 0, "partitions": [0]}], ["advance", {"ms": 6000}],
                       ["produce", {"writer": 1, "partitions": [0]}], ["advance", {"ms": 3000}]]:
        getattr(m, step)(**args)
    with pytest.raises(Finding, match="unread-after-heal"):
        m.teardown()


def test_explore_command(tmp_path, capsys):
    assert main(["explore", "--machine", "compaction", "--examples", "2", "--steps", "8", "--no-progress",
                 "--out", str(tmp_path / "p.json")]) == 0
    assert "no violation" in capsys.readouterr().out
    assert main(["explore", "--replay", str(PROGRAMS / "ack-before-isr.json")]) == 1
    assert "acked-on-isr" in capsys.readouterr().out
    bad = tmp_path / "bad.json"
    bad.write_text('{"machine": "queue", "bugs": [], "steps": [["boot", {"seed": 0}], ["nope", {}]]}')
    assert main(["explore", "--replay", str(bad)]) == 3
    assert "no rule 'nope'" in capsys.readouterr().err
    assert main(["explore", "--replay", str(tmp_path / "missing.json")]) == 3
    assert main(["explore", "--bug", "nonsense"]) == 3


def test_explore_cut_short_by_its_time_limit_is_unknown(capsys):
    """How many programs fit in S seconds depends on the machine: not a clean verdict."""
    assert main(["explore", "--machine", "queue", "--examples", "100000", "--time-limit", "2",
                 "--no-progress"]) == 2
    assert capsys.readouterr().out.startswith("unknown: the time limit stopped machine queue after ")


@pytest.mark.parametrize("program,finding", [
    ("epoch-lookup-falls-back-to-hw.json", "acked-on-isr"),  # model_shape kip279-hole
    ("hw-without-epoch-check.json", "acked-on-isr"),  # model_shape no-epoch-hw
    ("txn-unfenced-requests.json", "G1a"),  # hold_back: a commit's EndTxn lands in the next
    ("group-generation-unfenced.json", "fenced-commit"),  # pause_across_rebalance
])
def test_the_rules_aimed_at_delicate_moments_find_their_switch_and_pass_without(program, finding):
    name, bugs, steps = _program(program)
    with pytest.raises(Finding, match=finding):
        replay(name, bugs, steps)
    assert replay(name, [], steps).result["valid"] is True


@pytest.mark.parametrize("program", ["groups-leader-assigned-before-metadata.json",
                                     "groups-member-dropped-while-idle.json",
                                     "groups-crashed-leader-eligible.json",
                                     "groups-elr-election-dropped-last-isr-member.json",
                                     "queue-stale-fetch-answer-appended.json",
                                     "compaction-isr-change-dropped-on-timeout.json",
                                     "txn-final-reader-first-poll.json",
                                     "compaction-superseded-by-unknown-send.json"])
def test_programs_the_machines_found_on_the_correct_engine_now_pass(program):
    """Found by the groups machine once kafkacheck explore kept its findings: the group's
    leader assigned partitions from metadata that did not know the topic yet and never
    rebalanced when it learnt it (unowned-partition; fixed: the leader keeps the snapshot of
    partition counts it assigned from, asks for metadata while a subscribed topic is unknown,
    and rejoins when the counts change, as Kafka's ConsumerCoordinator does); and a member
    the group dropped while it did not poll showed its old generation in its one final poll
    (the harness: members now poll as an application's loop does). Then, without any switch,
    two mistakes of the controller's KIP-966 elections (reference/controller.py): a leader
    back from a crash was put into the ELR and elected with its records gone (log-matching);
    an election from the ELR dropped the fenced last ISR member from the ISR and the ELR
    alike, and the partition stayed offline for good (stale-after-heal). And the queue
    machine: a follower applied a fetch answer built for an older leader epoch (its request
    had waited at a paused leader while the partition moved away and back), appending it on
    top of another leader's records (log-matching). And the compaction machine: a leader whose
    AlterPartition got no answer (it was cut off from the controller) dropped the pending ISR
    change, counted the smaller ISR, and acknowledged a write that the follower the controller
    had added did not have; that follower was elected later (unread-after-heal). And one of the
    checker's: the txn machine's final read began 20 s after healing (behind queued
    transactions) and its first poll, which returns before the first fetch, was empty: that is
    not a stale read (the checker no longer counts a reader's first poll after assignment). And
    the compaction checker's: a value the cleaner removed because a newer value of its record
    key replaced it was called lost when that newer value's send had ended with an unknown
    outcome (a read of it at a later offset proves it was written)."""
    name, bugs, steps = _program(program)
    m = replay(name, bugs, steps)
    assert m.result["valid"] is True


def test_explore_keeps_a_finding_when_the_time_limit_cuts_shrinking_short(monkeypatch):
    """Past the time limit the first shrinking program that found nothing used to stop the
    exploration and lose the finding. A clock that moves one second a reading makes the
    limit pass during shrinking, the same way on any machine."""
    import kafkacheck.explore as pm

    class Clock:
        t = 0.0

        def monotonic(self) -> float:
            self.t += 1.0
            return self.t

    monkeypatch.setattr(pm, "time", Clock())
    r = pm.explore("queue", ["ack-before-isr"], examples=200, steps=40, time_limit=8, derandomize=True)
    assert r.found and "acked-on-isr" in r.found, r
    assert r.steps and r.steps[0][0] == "boot"


def test_the_queue_machine_finds_ack_before_isr_in_a_fixed_budget_of_programs():
    from kafkacheck.explore import explore

    r = explore("queue", ["ack-before-isr"], examples=60, steps=40, derandomize=True, shrink=False)
    assert r.found and "acked-on-isr" in r.found and r.found_after <= 60
    assert r.steps and r.steps[0][0] == "boot"  # the program as found, to replay


@pytest.mark.parametrize("bug,finding", [("share-ack-before-persist", "share-redelivered-accepted"),
                                         ("share-ack-any-holder", "share-ack-not-held"),
                                         ("share-count-not-incremented", "share-count-regressed")])
def test_the_share_machine_finds_each_share_switch_in_a_fixed_budget_of_programs(bug, finding):
    """As ``kafkacheck hunt --bug X --machines`` runs it (its budget: Hypothesis draws programs
    differently for another max_examples), derandomized, stopped at the first finding: the
    switch is found within the first 40 programs (the 7th and 11th when written)."""
    from kafkacheck.explore import explore
    from kafkacheck.hunt import DEFAULT_MACHINE_PROGRAMS

    r = explore("share", [bug], examples=DEFAULT_MACHINE_PROGRAMS, derandomize=True, shrink=False)
    assert r.found and finding in r.found and r.found_after <= 40, r
