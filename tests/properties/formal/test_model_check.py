"""The z3 models: every historical bug variant yields its counterexample at the smallest
depth that shows it, the fixed protocols have none up to a bound, and kafkacheck
model-check prints, exits and replays accordingly."""

from __future__ import annotations

import functools
import json

import pytest

pytest.importorskip("z3")

from kafkacheck.cli import main
from properties.formal.bmc import check
from properties.formal.replication import Model
from properties.formal.transactions import TxnModel


@functools.cache
def counterexample(variant: str, depth: int):
    """BMC once per variant and depth for the whole module (kip279-hole takes seconds)."""
    return check(Model(variant), depth)


# variant -> (depth of the shortest counterexample, the invariant it breaks)
BUGS = {
    "unclean": (4, "leader-completeness"),
    "no-epoch-hw": (6, "leader-completeness"),
    "kip101": (8, "leader-completeness"),
    "kip279-hole": (9, "leader-completeness"),
}


@pytest.mark.parametrize("variant", sorted(BUGS))
def test_replication_bug_found_at_its_depth(variant):
    depth, invariant = BUGS[variant]
    r = counterexample(variant, depth)
    assert r.violated == invariant and r.depth == depth
    # one step shorter shows nothing: the counterexample is the shortest
    assert check(Model(variant), depth - 1).ok
    assert r.steps[0]["action"] == "init" and len(r.steps) == depth + 1
    last = r.steps[-1]["state"]
    leader = last["leader"]
    committed = last["committed"]
    held = [x.split("@")[0] for x in last["replicas"][leader]["log"]] if leader >= 0 else []
    assert committed and held[:len(committed)] != committed  # the new leader lacks a committed record


def test_kip279_counterexample_is_the_documented_one():
    steps = [(s["action"], s["replica"]) for s in counterexample("kip279-hole", 9).steps[1:]]
    # the follower truncates its committed record because the leader has no entry of its last epoch
    assert ("truncate", 1) in steps and steps[-1] == ("elect", 1)
    assert [a for a, _ in steps].count("elect") == 3


def test_fixed_replication_has_no_violation_to_depth_8():
    assert check(Model("fixed"), 8).ok
    assert check(Model("fixed", replicas=3), 5).ok


def test_k_induction_closes_for_the_fixed_transaction_protocol_with_its_lemmas():
    from properties.formal.bmc import k_induction

    fixed = TxnModel("txn-kip890")
    assert k_induction(fixed, 1)                     # base case: BMC below (lemmas included)
    assert check(fixed, 6).ok
    # without the lemmas the bare invariant is not inductive
    bare = TxnModel("txn-kip890")
    bare.lemmas = lambda s: {}
    assert not k_induction(bare, 1)
    # a wrong lemma is caught by BMC, named as a lemma
    wrong = TxnModel("txn-kip890")
    wrong.lemmas = lambda s: {"no-records": s.nrec == 0}
    r = check(wrong, 4)
    assert r.violated == "lemma no-records"


def test_transactions():
    r = check(TxnModel("txn-17754"), 8)
    assert r.violated == "txn-atomicity" and r.depth == 7
    actions = [s["action"] for s in r.steps[1:]]
    assert actions.count("begin") == 2 and "deliver" in actions
    assert check(TxnModel("txn-kip890"), 10).ok


def test_model_check_command(tmp_path, capsys):
    out = tmp_path / "r.json"
    assert main(["model-check", "--variant", "unclean", "--depth", "6", "--json", str(out)]) == 1
    text = capsys.readouterr().out
    assert "leader-completeness violated after 4 steps" in text and "elect r1" in text and "[m1@e0]" in text
    assert json.loads(out.read_text())["violated"] == "leader-completeness"
    assert main(["model-check", "--variant", "txn-kip890", "--depth", "6", "--induction", "1"]) == 0
    assert "no violation up to depth 6" in capsys.readouterr().out
    assert main(["model-check", "--variant", "nope", "--depth", "3"]) == 3
    assert main(["model-check", "--variant", "fixed", "--depth", "0"]) == 3
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(("variant", "depth"), [("unclean", 4), ("no-epoch-hw", 6), ("kip101", 8),
                                                ("kip279-hole", 9), ("txn-17754", 7)])
def test_every_counterexample_replays_on_the_engine(capsys, variant, depth):
    # invalid with the variant's bug switch, valid without: exit 1 (a counterexample), not 2
    assert main(["model-check", "--variant", variant, "--depth", str(depth), "--replay",
                 "--replay-seeds", "4"]) == 1
    text = capsys.readouterr().out
    assert "as the model predicts" in text and "valid, as the model predicts" in text


def test_the_replay_schedule_follows_the_counterexample():
    from fault_injection.model_shapes import schedule_for

    steps = counterexample("kip279-hole", 9).steps
    schedule = schedule_for(steps, 2)
    elects = [s["value"]["leader"] for s in schedule if s["f"] == "elect"]
    assert elects == [2, 1, 2]                       # r1, r0, r1 as brokers 2, 1, 2
    first = schedule[0]
    assert first["f"] == "partition" and first["value"]["grudge"] == {"1": [2], "2": [1]}
    # the follower's one fetch: its links open, slowed down, then its way to the leader cut
    assert any(s["f"] == "delay" and s["value"]["ms"] > 0 for s in schedule)
    assert schedule[-1]["f"] == "heal"
    assert [s["at_ms"] for s in schedule] == sorted(s["at_ms"] for s in schedule)


def test_a_reordered_no_epoch_hw_counterexample_gives_the_same_schedule():
    """z3 may order independent steps either way (its models depend on the context's history):
    the schedule must not depend on it."""
    from fault_injection.model_shapes import schedule_for

    steps = counterexample("no-epoch-hw", 6).steps
    actions = [s["action"] for s in steps[1:]]
    i, j = actions.index("stale-fetch") + 1, actions.index("append", 2) + 1
    swapped = list(steps)
    swapped[i], swapped[j] = steps[j], steps[i]
    def shape(schedule):
        return [(s["f"], s["value"]) for s in schedule]
    assert shape(schedule_for(swapped, 2)) == shape(schedule_for(steps, 2))


@pytest.mark.parametrize("reason, code", [("timeout", 2), ("canceled", 130)])
def test_an_undecided_solver_answer_is_never_no_violation(monkeypatch, capsys, reason, code):
    """z3 answers unknown when it gives up or when Ctrl-C reaches it (it catches SIGINT
    itself, so Python never raises): neither may read as "no violation" (exit 0)."""
    import z3

    real = z3.Solver.check
    calls = []

    def check_giving_up_at_depth_3(self, *a):
        calls.append(1)
        return z3.unknown if len(calls) == 4 else real(self, *a)

    monkeypatch.setattr(z3.Solver, "check", check_giving_up_at_depth_3)
    monkeypatch.setattr(z3.Solver, "reason_unknown", lambda self: reason)
    assert main(["model-check", "--variant", "kip101", "--depth", "8"]) == code
    out = capsys.readouterr().out
    assert "no violation up to depth 8" not in out
    if code == 2:
        assert "unknown: no violation up to depth 2" in out


def test_ctrl_c_during_model_check_exits_130_without_a_verdict():
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen([sys.executable, "-m", "kafkacheck.cli", "model-check", "--variant", "fixed",
                             "--replicas", "3", "--log-len", "4", "--depth", "40"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(3)
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert "no violation up to depth 40" not in out and "Traceback" not in err
