"""The share workload (KIP-932) in the simulator: the correct engine is valid under the
default faults, its history says what the consumers saw (acquires with delivery counts and
the broker that gave them, acknowledgements answered per partition), and conform refuses it
in one line with a client that has no share consumer (kafka-python, its default)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from kafkacheck.cli import main
from kafkacheck.judge import judge_record
from kafkacheck.runner import RunOptions, simulate
from reference.messages import TopicPartition
from reference.share_consumer import ShareConsumer, SharedRecord


@pytest.mark.parametrize("seed", [0, 1])
def test_the_correct_engine_is_valid_and_the_consumers_share_the_partitions(seed):
    out = simulate(RunOptions(seed=seed, workload="share", ops=600, partitions=2), None)
    r = judge_record(out.record())
    assert r["valid"] is True, r["anomaly_types"]
    acquired = [o for o in out.ops if o["f"] == "acquire" and o["type"] == "ok" and o["value"]]
    holders = Counter(o["process"] for o in acquired)
    assert len(holders) >= 3  # more consumers than partitions: they share them
    counts = {n for o in acquired for records in o["value"].values() for _off, _v, n in records}
    assert 1 in counts and max(counts) >= 2  # records came back (released, expired) and were counted
    errors = Counter(e for o in out.ops if o["f"] == "ack" and o["type"] == "ok" for e in o["value"]["errors"].values())
    assert errors["NONE"] > 100
    assert all(o.get("nodes") for o in acquired)  # the broker that gave each partition's records
    # every acknowledged write was delivered and, in the end, accepted or archived
    marks = out.stats["marks"]
    assert marks.get("share-partition-loaded", 0) >= 2 and marks.get("share-lock-released", 0) >= 1


def test_a_run_on_the_command_line_uses_two_partitions_and_is_valid(tmp_path, capsys):
    code = main(["run", "--no-progress", "--format", "json", "--workload", "share", "--seed", "2", "--ops", "300",
                 "--out", str(tmp_path / "r")])
    capsys.readouterr()
    assert code == 0
    config = json.loads((tmp_path / "r" / "run.json").read_text())["config"]
    assert config["partitions"] == 2 and config["share"]["delivery_limit"] == 5


def test_conform_refuses_the_share_workload_to_kafka_python_in_one_line(capsys):
    code = main(["conform", "--spawn", "reference", "--workload", "share"])
    err = capsys.readouterr().err
    assert code == 3 and len(err.strip().splitlines()) == 1 and "kafka-python has none" in err
    code = main(["conform", "--spawn", "kafka", "--client", "java", "--kafka-version", "4.0.2", "--workload", "share"])
    err = capsys.readouterr().err
    assert code == 3 and len(err.strip().splitlines()) == 1 and "4.1 or later" in err


def test_a_consumer_acknowledges_consecutive_offsets_in_one_batch_a_type_each():
    tp = TopicPartition("t", 0)
    by_tp = {tp: {5: 1, 6: 2, 7: 1, 9: 3}}
    assert ShareConsumer._ack_batches(by_tp) == ((tp, ((5, 7, (1, 2, 1)), (9, 9, (3,)))),)
    r = SharedRecord(tp, 5, b"v", 1, node=2)
    assert r.fetched_ms == -1 and r.node == 2


def test_a_share_fetch_that_ignores_the_isolation_level_is_caught():
    """The share-committed workload on an engine told to read uncommitted (its share fetches
    then acquire the records of aborted transactions) while the run says read_committed."""
    wrong = RunOptions(seed=0, ops=1000, workload="share-committed",
                       broker_settings={"share_isolation_level": "read_uncommitted"})
    assert judge_record(simulate(wrong, None).record())["anomaly_types"] == ["share-aborted-delivered"]
    right = RunOptions(seed=0, ops=1000, workload="share-committed")
    assert judge_record(simulate(right, None).record())["valid"] is True
