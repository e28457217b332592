"""Every bug switch is caught by the seed docs/reference/bug-switches.md names, and the same run without the
switch is valid."""

from __future__ import annotations

import json

import pytest

from kafkacheck.cli import main

# (switch, extra options, invariant expected, history anomalies expected with --keep-going)
CASES = [
    ("truncate-to-high-watermark", ["--seed", "0"], "acked-on-isr", None),
    ("hw-without-epoch-check", ["--seed", "17", "--ops", "4000", "--faults", "partition,kill,pause"],
     "acked-on-isr", None),
    ("unclean-election", ["--seed", "2"], "acked-on-isr", None),
    ("ack-before-isr", ["--seed", "0"], "acked-on-isr", {"lost-write", "inconsistent-offsets"}),
]


def run(tmp_path, name, args):
    out = tmp_path / name
    code = main(["run", "--no-progress", "--format", "json", "--out", str(out), *args])
    return code, json.loads((out / "results.json").read_text())


@pytest.mark.parametrize(("bug", "args", "invariant", "keep_going_expects"), CASES,
                         ids=[c[0] for c in CASES])
def test_the_readme_seed_catches_the_bug(tmp_path, capsys, bug, args, invariant, keep_going_expects):
    code, result = run(tmp_path, "bug", [*args, "--bug", bug])
    capsys.readouterr()
    assert code == 1 and result["valid"] is False
    found = {a["invariant"] for a in result["anomalies"]["invariant-violation"]}
    assert invariant in found
    if keep_going_expects:
        code, result = run(tmp_path, "keep", [*args, "--bug", bug, "--keep-going"])
        assert keep_going_expects <= set(result["anomaly_types"])


@pytest.mark.parametrize(("bug", "args"), [(c[0], c[1]) for c in CASES if c[0] != "ack-before-isr"],
                         ids=[c[0] for c in CASES if c[0] != "ack-before-isr"])
def test_the_same_run_without_the_bug_is_valid(tmp_path, capsys, bug, args):
    code, result = run(tmp_path, "ok", args)
    capsys.readouterr()
    assert code == 0, result["anomaly_types"]


def test_truncation_to_the_high_watermark_shows_in_the_history_with_keep_going(tmp_path, capsys):
    code, result = run(tmp_path, "k", ["--seed", "7", "--bug", "truncate-to-high-watermark",
                                       "--keep-going"])
    capsys.readouterr()
    assert code == 1 and "inconsistent-offsets" in result["anomaly_types"]


def test_idempotence_without_sequence_checks_writes_retries_twice(tmp_path, capsys):
    code, result = run(tmp_path, "noseq", ["--workload", "idempotent", "--seed", "0",
                                           "--bug", "no-sequence-check"])
    capsys.readouterr()
    assert code == 1 and "duplicate" in result["anomaly_types"]
    code, result = run(tmp_path, "seq", ["--workload", "idempotent", "--seed", "0"])
    capsys.readouterr()
    assert code == 0, result["anomaly_types"]


def test_an_lso_one_past_an_open_transaction_is_caught(tmp_path, capsys):
    args = ["--workload", "txn", "--seed", "0", "--ops", "1000", "--bug", "lso-off-by-one"]
    code, result = run(tmp_path, "lso", args)
    capsys.readouterr()
    assert code == 1
    assert {a["invariant"] for a in result["anomalies"]["invariant-violation"]} == {"lso-below-open-txn"}
    code, result = run(tmp_path, "lso-keep", [*args, "--keep-going"])
    capsys.readouterr()
    assert {"G1a", "precommitted-read"} <= set(result["anomaly_types"])


def caught(tmp_path, capsys, args, bug, anomaly):
    """The run of ``args`` with switch ``bug`` is invalid with ``anomaly`` among its anomalies
    (its result is returned), and the same run without the switch is valid."""
    code, result = run(tmp_path, "bug", [*args, "--bug", bug])
    capsys.readouterr()
    assert code == 1 and anomaly in result["anomaly_types"], result["anomaly_types"]
    code, correct = run(tmp_path, "correct", args)
    capsys.readouterr()
    assert code == 0, correct["anomaly_types"]
    return result


def test_delayed_requests_from_an_earlier_transaction_are_caught(tmp_path, capsys):
    # (seed 9 since the simulated network has connections: a straggler now stalls its connection
    # until its client gives up and retries on a new one, and the late EndTxn lands after)
    args = ["--workload", "txn", "--seed", "9", "--ops", "3000", "--faults", "straggle"]
    result = caught(tmp_path, capsys, args, "txn-unfenced-requests", "precommitted-read")
    assert "invariant-violation" not in result["anomaly_types"]  # seen in the history alone


def test_a_coordinator_that_accepts_stale_generations_is_caught(tmp_path, capsys):
    caught(tmp_path, capsys, ["--workload", "groups", "--seed", "0", "--ops", "2000"], "group-generation-unfenced",
           "fenced-commit")


def test_eos_processors_in_a_group_catch_a_coordinator_that_accepts_stale_generations(tmp_path, capsys):
    # KIP-447: the offsets of a zombie processor's transaction, accepted, copy its input twice
    caught(tmp_path, capsys, ["--workload", "eos", "--group-protocol", "classic", "--seed", "0", "--ops", "2000"],
           "group-generation-unfenced", "eos-duplicate")


def test_a_consumer_group_coordinator_that_accepts_stale_member_epochs_is_caught(tmp_path, capsys):
    # KIP-848: a member's commit of a partition another member owns at a newer epoch, accepted
    result = caught(tmp_path, capsys, ["--workload", "groups", "--group-protocol", "consumer", "--seed", "0"],
                    "group-generation-unfenced", "fenced-commit")
    assert "invariant-violation" not in result["anomaly_types"]  # seen by the members alone


def test_a_cleaner_that_drops_the_newest_record_of_a_key_is_caught(tmp_path, capsys):
    caught(tmp_path, capsys, ["--workload", "compaction", "--seed", "4", "--ops", "2000"], "compaction-drops-latest",
           "compaction-lost-latest")


def test_a_coordinator_that_strands_waiting_joins_when_it_unloads_is_caught(tmp_path, capsys):
    """group-unload-strands-joins: the members whose joins the old coordinator dropped wait
    for an answer as kafka-python does (max.poll.interval.ms + 5 s), so after healing they
    are still behind the generation the others settled in."""
    caught(tmp_path, capsys, ["--workload", "groups", "--seed", "5", "--ops", "2000"], "group-unload-strands-joins",
           "unowned-partition")


def test_a_coordinator_that_skips_the_markers_of_an_offline_partition_is_caught(tmp_path, capsys):
    """KAFKA-20734: the invariant sees the transaction completed without a partition's marker;
    with --keep-going the history shows an acknowledged commit's records aborted by the
    producer's next transaction there."""
    args = ["--workload", "txn", "--faults", "offline-partition", "--ops", "1000"]
    code, result = run(tmp_path, "skip", [*args, "--bug", "txn-markers-skip-offline"])
    capsys.readouterr()
    assert code == 1
    assert {a["invariant"] for a in result["anomalies"]["invariant-violation"]} == {"txn-complete-after-markers"}
    code, result = run(tmp_path, "skip-keep", [*args, "--seed", "4", "--bug", "txn-markers-skip-offline",
                                               "--keep-going"])
    capsys.readouterr()
    assert {"lost-write", "invariant-violation"} <= set(result["anomaly_types"])
    code, correct = run(tmp_path, "correct", args)
    capsys.readouterr()
    assert code == 0, correct["anomaly_types"]


def test_the_swarm_catches_a_lost_partition_epoch_through_slow_revocations(tmp_path, capsys):
    """What `kafkacheck hunt --with-switch consumer-group-partition-epoch-lost` found (swarm
    seed 43, shrunk to 250 ops): a member joined, the members losing partitions to it revoked
    slowly while it was paused past its session (revocation-slow-across-rebalance), the group
    gave the partitions back to them, and its rejoin took one while its owner still held it."""
    from kafkacheck.swarm import draw

    assert "revocation-slow-across-rebalance" in draw(43).aimed
    result = caught(tmp_path, capsys, ["--swarm", "43", "--ops", "250"], "consumer-group-partition-epoch-lost",
                    "invariant-violation")
    assert {a["invariant"] for a in result["anomalies"]["invariant-violation"]} == {"consumer-group-single-owner"}


def test_a_consumer_group_that_refuses_a_fenced_members_rejoin_is_caught(tmp_path, capsys):
    """KAFKA-19233 (KIP-848): a member fenced by epoch joins again with epoch 0 and its member
    id, and is fenced again until its session runs out."""
    args = ["--workload", "groups", "--group-protocol", "consumer", "--assignor", "uniform", "--seed", "4",
            "--ops", "500"]
    result = caught(tmp_path, capsys, args, "consumer-group-rejoin-fenced", "rejoin-fenced")
    assert "invariant-violation" not in result["anomaly_types"]  # seen by the members alone


@pytest.mark.parametrize(("bug", "seed", "anomaly"), [
    ("share-count-not-incremented", "0", "share-count-regressed"),
    ("share-ack-any-holder", "0", "share-ack-not-held"),
    ("share-ack-before-persist", "1", "share-redelivered-accepted"),
])
def test_a_share_group_switch_is_caught_by_its_seed(tmp_path, capsys, bug, seed, anomaly):
    """KIP-932: each share-group switch, found by the seed docs/reference/bug-switches.md names
    (the share workload, 2 partitions shared by 4 consumers, the default faults)."""
    result = caught(tmp_path, capsys, ["--workload", "share", "--seed", seed, "--ops", "1000"], bug, anomaly)
    assert "invariant-violation" not in result["anomaly_types"]  # seen by the consumers alone


@pytest.mark.parametrize(("bug", "swarm", "ops", "anomaly"), [
    ("share-count-not-incremented", "9", "125", "share-count-regressed"),
    # 28 s: slow (its plain seed above, and the other switches' swarm seeds, stay in the default run)
    pytest.param("share-ack-any-holder", "23", "500", "share-ack-not-held", marks=pytest.mark.slow),
    ("share-ack-before-persist", "16", "1000", "share-redelivered-accepted"),
])
def test_the_swarm_catches_each_share_group_switch(tmp_path, capsys, bug, swarm, ops, anomaly):
    """What `kafkacheck hunt --with-switch SWITCH` found for each share-group switch (the
    swarm seed, shrunk): share seeds are queue seeds the swarm draws again as share runs."""
    from kafkacheck.swarm import draw

    assert draw(int(swarm)).workload == "share"
    caught(tmp_path, capsys, ["--swarm", swarm, "--ops", ops], bug, anomaly)


def test_an_epoch_that_wraps_at_its_end_is_caught(tmp_path, capsys):
    """txn-epoch-overflow: at transaction version 2 the producers, starting 16 epochs before
    their last, wrap past 32767 instead of moving to new producer ids; without the switch
    they move (the mark txn-producer-id-rotated) and the run is valid."""
    args = ["--workload", "txn", "--transaction-version", "2", "--producer-epoch-start", "32750", "--ops", "500"]
    result = caught(tmp_path, capsys, args, "txn-epoch-overflow", "invariant-violation")
    assert {a["invariant"] for a in result["anomalies"]["invariant-violation"]} == {"txn-complete-after-markers"}
    code, correct = run(tmp_path, "rotated", args)
    capsys.readouterr()
    assert code == 0 and correct["valid"] is True
    assert json.loads((tmp_path / "rotated" / "run.json").read_text())["options"]["producer_epoch_start"] == 32750
