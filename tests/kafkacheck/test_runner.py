"""The simulated run: what it keeps in memory is what its run directory holds."""

from __future__ import annotations

import json

import pytest

from kafkacheck.judge import judge_record as judge
from kafkacheck.runner import RunOptions, simulate
from kafkacheck.swarm import draw
from traces.parquet import load_run_dir

RUNS = [
    RunOptions(seed=1, ops=600),
    RunOptions(seed=2, ops=300, workload="txn"),
    RunOptions(seed=3, ops=300, workload="eos"),
    RunOptions(seed=4, ops=600, workload="groups", assignor="cooperative-sticky"),
    RunOptions(seed=5, ops=600, workload="compaction"),
    RunOptions(seed=6, ops=600, workload="idempotent", bugs=["no-sequence-check"], keep_going=True),
    RunOptions(seed=0, ops=400, bugs=["ack-before-isr"], keep_going=True),
    draw(97, 400),  # a swarm draw: aimed nemeses, timings, liveness phase
]


@pytest.mark.parametrize("options", RUNS, ids=lambda o: f"{o.workload}-{o.seed}")
def test_the_verdict_in_memory_is_the_verdict_of_the_run_directory(tmp_path, options):
    outcome = simulate(options, tmp_path)
    record = outcome.record()
    # every op and event is plain JSON (no tuples, no integer keys), so writing and reading
    # it back changes nothing
    assert json.loads(json.dumps(record.ops)) == record.ops
    assert json.loads(json.dumps(record.events)) == record.events
    from_disk = load_run_dir(tmp_path)
    assert from_disk.ops == record.ops
    assert from_disk.events == record.events
    assert judge(record) == judge(from_disk)


def test_a_run_without_a_directory_writes_nothing_and_keeps_its_history(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outcome = simulate(RunOptions(seed=1, ops=200), None)
    assert outcome.run_dir is None
    assert list(tmp_path.iterdir()) == []
    assert outcome.ops and outcome.ops[0]["index"] == 0
    assert judge(outcome.record())["valid"] is True


def test_a_paused_group_member_is_named_by_its_process():
    """The nemesis op that pauses a group member names the history process it runs, so that
    the checker knows whose session stopped (expired-member-commit); a member whose poll
    outlasted its session commits next, in the generation it held."""
    outcome = simulate(RunOptions(seed=3, ops=600, workload="groups", faults=["pause"]), None)
    pauses = [o for o in outcome.ops if o["process"] == "nemesis" and o["f"] == "pause"
              and o["type"] == "info" and "processes" in o["value"]]
    assert pauses
    members = {o["process"] for o in outcome.ops if o["f"] == "subscribe"}
    for o in pauses:
        assert set(o["value"]["processes"]) <= members
        later = [x for x in outcome.ops if x["process"] in o["value"]["processes"] and x["time"] > o["time"]]
        assert later, "the paused member goes on as the same process"


def test_a_cooperative_assignor_that_hands_partitions_over_in_one_phase_is_found(monkeypatch):
    """The groups workload with the cooperative protocol, against a leader whose assignor hands
    a moved partition to its new owner at once (the sticky target in one phase, skipping
    KIP-429's revocation round): the members report it, and the checker finds it
    (reassigned-before-revoked); the correct assignor's run is valid."""
    import reference.assignors
    import reference.group_consumer

    options = RunOptions(seed=1, ops=800, workload="groups", assignor="cooperative-sticky")
    assert judge(simulate(options, None).record())["valid"] is True
    real = reference.assignors.assign

    def one_phase(name, subscriptions, partitions, owned=None):
        if name == "cooperative-sticky":
            return reference.assignors.sticky_assign(subscriptions, partitions, owned)
        return real(name, subscriptions, partitions, owned)

    monkeypatch.setattr(reference.group_consumer, "assign", one_phase)
    result = judge(simulate(options, None).record())
    assert result["anomaly_types"] == ["reassigned-before-revoked"]


def test_a_cleaner_that_removes_delete_markers_too_early_is_found():
    """The compaction workload against a cleaner that keeps delete markers for 0 ms, judged as
    if the topic promised 5 s (its readers go back to the beginning within that window):
    tombstone-missing. Judged by what it did promise (0 ms), the same run is valid."""
    configs = (("cleanup.policy", "compact"), ("segment.bytes", "2048"), ("min.cleanable.dirty.ratio", "0.2"),
               ("delete.retention.ms", "0"))
    record = simulate(RunOptions(seed=1, ops=1500, workload="compaction", topic_configs=configs), None).record()
    assert judge(record)["valid"] is True
    record.meta["config"]["topic_configs"]["delete.retention.ms"] = "5000"
    assert judge(record)["anomaly_types"] == ["tombstone-missing"]
