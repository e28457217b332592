"""The correct engine gives valid verdicts under the default faults (a sample of seeds in the
default run; all 20 of docs/reference/bug-switches.md's claim behind the slow marker)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from kafkacheck.cli import main


def verdict(tmp_path, seed, ops, *extra):
    out = tmp_path / str(seed)
    code = main(["run", "--seed", str(seed), "--ops", str(ops), "--no-progress", "--format", "json",
                 "--out", str(out), *extra])
    return code, json.loads((out / "results.json").read_text())


def reaches(run_dir, result, marks=(), events=(), nemesis=()):
    """A valid verdict only counts if the run did what the test is named for: each coverage
    mark of the engine (reference/marks.py), event kind of events.jsonl and fault of the
    nemesis named here happened at least once."""
    got_marks = result["stats"]["simulation"]["marks"]
    got_events = Counter(json.loads(line)["kind"] for line in (run_dir / "events.jsonl").open())
    got_faults = Counter(op["f"] for op in map(json.loads, (run_dir / "history.jsonl").open())
                         if op["process"] == "nemesis" and op["type"] == "info")
    missing = ([f"mark {m}" for m in marks if not got_marks.get(m)] + [f"event {e}" for e in events if not got_events[e]]
               + [f"fault {f}" for f in nemesis if not got_faults[f]])
    assert not missing, f"the run did not reach: {', '.join(missing)}"


CRASHES_AND_TRUNCATIONS = dict(marks=("follower-truncate-diverging", "isr-shrink", "disk-lost-unflushed"),
                               events=("crash", "truncate", "leader-elected"))


@pytest.mark.parametrize("seed", [0, 5, 13])
def test_default_runs_are_valid(tmp_path, capsys, seed):
    code, result = verdict(tmp_path, seed, 10_000)
    capsys.readouterr()
    assert code == 0, result["anomaly_types"]
    assert result["stats"]["nemesis_ops"] > 20
    assert result["stats"]["info"] > 0  # the faults really disturbed the clients
    reaches(tmp_path / str(seed), result, nemesis=("partition", "kill", "pause", "disk-fault"),
            marks=(*CRASHES_AND_TRUNCATIONS["marks"], "produce-not-enough-replicas"),
            events=CRASHES_AND_TRUNCATIONS["events"])


def test_an_idempotent_run_is_valid_and_needs_fewer_unknown_outcomes(tmp_path, capsys):
    code, result = verdict(tmp_path, 3, 10_000, "--workload", "idempotent")
    capsys.readouterr()
    assert code == 0, result["anomaly_types"]
    assert result["stats"]["nemesis_ops"] > 20
    reaches(tmp_path / "3", result, marks=("produce-duplicate-sequence", *CRASHES_AND_TRUNCATIONS["marks"]),
            events=("duplicate-sequence", *CRASHES_AND_TRUNCATIONS["events"]))


def test_a_transactional_run_is_valid_with_aborts_and_faults(tmp_path, capsys):
    code, result = verdict(tmp_path, 2, 3000, "--workload", "txn", "--faults",
                           "partition,kill,pause,disk,straggle")
    capsys.readouterr()
    assert code == 0, result["anomaly_types"]
    assert result["stats"]["fail"] > 100  # aborted on purpose and by faults
    assert result["stats"]["nemesis_ops"] > 5
    reaches(tmp_path / "2", result, marks=("txn-coordinator-loaded-unfinished", "txn-concurrent-transactions"),
            events=("txn-decided", "txn-marker", "crash"), nemesis=("straggle", "kill", "partition"))


def test_an_exactly_once_run_is_valid_under_faults(tmp_path, capsys):
    code, result = verdict(tmp_path, 1, 2000, "--workload", "eos", "--faults",
                           "partition,kill,pause,disk,straggle")
    capsys.readouterr()
    assert code == 0, result["anomaly_types"]
    assert result["stats"]["fail"] > 20
    reaches(tmp_path / "1", result, marks=("group-coordinator-loaded", "txn-coordinator-loaded-unfinished",
                                           "log-recovery-truncated"),
            events=("txn-marker", "crash"), nemesis=("straggle", "partition"))


@pytest.mark.parametrize("assignor", ["cooperative-sticky", "sticky"])
def test_a_consumer_group_run_is_valid_with_pauses_crashes_and_rebalances(tmp_path, capsys, assignor):
    extra = ["--static-members"] if assignor == "sticky" else []
    code, result = verdict(tmp_path, 1, 2000, "--workload", "groups", "--assignor", assignor, *extra)
    capsys.readouterr()
    assert code == 0, result["anomaly_types"]
    # what the name promises happened: brokers paused and crashed, members crashed, the group
    # rebalanced again and again
    reaches(tmp_path / "1", result, events=("crash", "group-rebalance", "group-generation"),
            nemesis=("pause", "restart"), marks=("group-member-expired", "group-rebalance-in-progress"))
    ops = [json.loads(line) for line in (tmp_path / "1" / "history.jsonl").open()]
    assert sum(o["f"] == "crash" for o in ops if o["process"] != "nemesis") >= 5  # members that crashed


def test_an_at_most_once_run_is_valid_and_its_members_processed_what_they_committed(tmp_path, capsys):
    code, result = verdict(tmp_path, 2, 2000, "--workload", "at-most-once")
    capsys.readouterr()
    assert code == 0, result["anomaly_types"]
    reaches(tmp_path / "2", result, events=("crash", "group-rebalance", "group-generation"),
            nemesis=("pause", "restart"), marks=("group-member-expired",))
    ops = [json.loads(line) for line in (tmp_path / "2" / "history.jsonl").open()]
    members = [o for o in ops if o["process"] != "nemesis" and o["type"] != "invoke"]
    # commits that processed something, and some that did not (fenced or unanswered)
    assert sum(o["f"] == "commit" and o["type"] == "ok" for o in members) >= 100
    assert any(o["f"] == "commit" and o["type"] != "ok" for o in members)
    assert sum(o["f"] == "crash" for o in members) >= 3


def test_an_at_most_once_run_with_fenced_commits_accepted_processes_records_twice(tmp_path, capsys):
    """A coordinator that accepts a replaced member's commit (the bug switch) lets two members
    process one record: the workload's own anomaly, besides the groups checker's."""
    code, result = verdict(tmp_path, 3, 2000, "--workload", "at-most-once", "--bug", "group-generation-unfenced")
    capsys.readouterr()
    assert code == 1 and "processed-twice" in result["anomaly_types"], result["anomaly_types"]


def test_a_compaction_run_is_valid_and_the_cleaner_really_ran(tmp_path, capsys):
    code, result = verdict(tmp_path, 2, 2000, "--workload", "compaction")
    capsys.readouterr()
    assert code == 0, result["anomaly_types"]
    events = (tmp_path / "2" / "events.jsonl").read_text()
    assert events.count('"kind":"compaction"') > 10
    reaches(tmp_path / "2", result, marks=("cleaner-removed-records", "cleaner-removed-tombstone"),
            events=("compaction", "crash"))


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["queue", "idempotent", "txn", "txn-straggle", "txn-v2", "eos",
                                      "groups", "groups-cooperative", "groups-static", "compaction",
                                      "at-most-once"])
@pytest.mark.parametrize("seed", range(20))
def test_twenty_default_seeds_in_a_row_are_valid(tmp_path, capsys, seed, workload):
    extra = {"txn-straggle": ["--workload", "txn", "--faults", "partition,kill,pause,disk,straggle"],
             "txn-v2": ["--workload", "txn", "--transaction-version", "2", "--faults",
                        "partition,kill,pause,disk,straggle"],
             "groups-cooperative": ["--workload", "groups", "--assignor", "cooperative-sticky"],
             "groups-static": ["--workload", "groups", "--assignor", "sticky", "--static-members"],
             }.get(workload, ["--workload", workload])
    code, result = verdict(tmp_path, seed, 10_000, *extra)
    capsys.readouterr()
    assert code == 0, result["anomaly_types"]


@pytest.mark.slow
def test_idempotence_makes_duplicated_requests_harmless(tmp_path, capsys):
    for seed in range(3):
        code, result = verdict(tmp_path, seed, 4000, "--workload", "idempotent", "--faults",
                               "partition,kill,pause,disk,duplicate,reorder,loss")
        capsys.readouterr()
        assert code == 0, result["anomaly_types"]


@pytest.mark.slow
@pytest.mark.parametrize("faults", ["loss", "reorder", "delay", "clock-skew",
                                    "partition,kill,pause,disk,clock-skew,loss,reorder,delay"])
def test_other_fault_mixes_are_valid(tmp_path, capsys, faults):
    for seed in range(3):
        out = tmp_path / f"{seed}"
        code = main(["run", "--seed", str(seed), "--ops", "4000", "--faults", faults,
                     "--no-progress", "--format", "json", "--out", str(out)])
        capsys.readouterr()
        assert code == 0, json.loads((out / "results.json").read_text())["anomaly_types"]


@pytest.mark.slow
@pytest.mark.parametrize("faults", ["duplicate", "partition,kill,pause,disk,duplicate"])
def test_duplicated_requests_without_idempotence_only_duplicate_records(tmp_path, capsys, faults):
    # A produce request delivered twice is appended twice: Kafka's answer is the idempotent
    # producer. Nothing else may break.
    for seed in range(3):
        out = tmp_path / f"{seed}"
        main(["run", "--seed", str(seed), "--ops", "4000", "--faults", faults,
              "--no-progress", "--format", "json", "--out", str(out)])
        capsys.readouterr()
        result = json.loads((out / "results.json").read_text())
        assert set(result["anomaly_types"]) <= {"duplicate"}, result["anomaly_types"]


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["txn", "eos"])
@pytest.mark.parametrize("transaction_version", ["1", "2"])
@pytest.mark.parametrize("seed", range(10))
def test_a_partition_offline_while_transactions_end_leaves_the_correct_engine_valid(
        tmp_path, capsys, seed, transaction_version, workload):
    """offline-partition (KAFKA-20734's window): the markers of the offline partition wait for
    its leader, and every transaction ends whole."""
    code, result = verdict(tmp_path, seed, 10_000, "--workload", workload, "--faults", "offline-partition",
                           "--transaction-version", transaction_version)
    capsys.readouterr()
    assert code == 0, result["anomaly_types"]
    reaches(tmp_path / str(seed), result, marks=("txn-marker-awaits-leader",), nemesis=("offline-partition",))
