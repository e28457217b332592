"""Which checks a history put to work (properties/exercised.py)."""

from __future__ import annotations

from kafkacheck.runner import RunOptions, simulate
from properties.check_table import CHECKS
from properties.exercised import NOT_IN_HUNTS, SITUATIONS, exercised


def test_every_check_of_the_table_has_a_situation():
    assert set(SITUATIONS) | set(NOT_IN_HUNTS) == {c.name for c in CHECKS}


def _op(index, process, f, type_, value, time):
    return {"index": index, "process": process, "f": f, "type": type_, "value": value, "time": time}


def test_a_history_shows_a_situation_only_when_it_arose():
    ops = [_op(0, 0, "send", "invoke", [["send", "t:0", 1]], 1), _op(1, 0, "send", "ok", [["send", "t:0", [0, 1]]], 2),
           _op(2, 1, "poll", "invoke", [["poll"]], 3), _op(3, 1, "poll", "ok", [["poll", {"t:0": [[0, 1]]}]], 4)]
    seen = exercised(ops, {})
    assert seen["empty-history"] and seen["staleness"]  # process 1 read after process 0's write was acknowledged
    assert not seen["version-orders"] and not seen["process-order"] and not seen["cycles"]
    more = [*ops, _op(4, 1, "poll", "invoke", [["poll"]], 5), _op(5, 1, "poll", "ok", [["poll", {"t:0": [[0, 1]]}]], 6)]
    seen = exercised(more, {})
    assert seen["version-orders"] and seen["process-order"]  # offset 0 read by two ops of process 1
    assert not seen["aborted-reads"] and not seen["groups"] and not seen["share"]


def test_a_transactional_run_exercises_the_transaction_checks():
    out = simulate(RunOptions(seed=1, ops=300, workload="txn"), None)
    seen = exercised(out.ops, out.run_meta["config"])
    assert seen["aborted-reads"] and seen["intermediate-reads"] and seen["hanging-transactions"]
    assert not seen["groups"] and not seen["share"] and not seen["compaction"]
