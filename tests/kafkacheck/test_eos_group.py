"""The eos workload's processors as members of one consumer group (``run --workload eos
--group-protocol classic|consumer``): they subscribe, commit their transactions' offsets with
the group's generation or member epoch (KIP-447), and the consumer-group checks judge them;
without --group-protocol they assign themselves their partitions as before."""

from __future__ import annotations

import json

import pytest

from kafkacheck.cli import main
from kafkacheck.judge import judge_record
from kafkacheck.runner import RunOptions, simulate
from kafkacheck.workloads import RUN_GROUP_WORKLOADS, group_options_conflict
from reference.errors import Errors
from reference.group_messages import TxnOffsetCommitRequest
from reference.messages import (
    COORDINATOR_GROUP,
    COORDINATOR_TRANSACTION,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    TopicPartition,
)
from reference.producer import ProducerConfig
from reference.txn_producer import GroupMetadata, TransactionalProducer


def _completions(ops: list[dict]) -> list[dict]:
    return [o for o in ops if o["process"] != "nemesis" and o["type"] != "invoke"]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_processors_in_a_group_run_valid_and_commit_with_their_generation(protocol):
    outcome = simulate(RunOptions(seed=3, ops=300, workload="eos", group_protocol=protocol, eos_subscribe=True),
                       None)
    result = judge_record(outcome.record())
    assert result["valid"] is True, result["anomaly_types"]
    config = outcome.run_meta["config"]
    assert config["sub_via"] == ["subscribe"] and config["groups"]["group"] == config["eos"]["group"]
    assert config["groups"].get("protocol") == ("consumer" if protocol == "consumer" else None)
    done = _completions(outcome.ops)
    processors = {o["process"] for o in done if o["f"] == "txn"}
    assert {o["process"] for o in done if o["f"] == "subscribe"} >= processors
    assert not any(o["f"] == "assign" and o["process"] in processors for o in done)
    # committed transactions carried the offsets of partitions the group gave them, with its generation
    committed = [o for o in done if o["f"] == "txn" and o["type"] == "ok" and o["offsets"]]
    assert committed and all(o["generation"] >= 1 for o in committed)
    assignments = [e for o in done for e in o.get("rebalance_log") or () if e["type"] == "assigned"]
    assert {k for e in assignments for k in e["owned"]} == set(config["groups"]["keys"])
    reader = 1000 * config["clients"]  # the final reader's process
    assert sum(o["f"] == "poll" and o["process"] != reader for o in done) == 3  # each processor's final poll


def test_without_a_group_protocol_the_processors_assign_as_before():
    outcome = simulate(RunOptions(seed=3, ops=300, workload="eos"), None)
    config = outcome.run_meta["config"]
    assert config["groups"] is None and config["sub_via"] == ["assign"]
    done = _completions(outcome.ops)
    assert {o["f"] for o in done} == {"send", "txn", "assign", "poll", "committed"}
    assert not any(o.get("rebalance_log") or "generation" in o for o in done)
    assert not any(o["process"] == "nemesis" and isinstance(o.get("value"), dict) and o["value"].get("processes")
                   for o in outcome.ops)  # no processor is paused as a group member


def test_the_offsets_of_a_transaction_carry_the_consumers_group_metadata():
    p = TransactionalProducer(100, [1], ProducerConfig(enable_idempotence=True), "eos-0")
    p.producer_id, p.producer_epoch = 7, 0  # as InitProducerId left it
    p.coordinators = {(COORDINATOR_TRANSACTION, "eos-0"): 1, (COORDINATOR_GROUP, "eos"): 2}
    p.begin_transaction()
    p.send_offsets_to_transaction(0, {TopicPartition("t0", 1): 5}, "eos", GroupMetadata(4, "member-1"))
    [add] = [s.message for s in p.drain() if isinstance(getattr(s, "message", None), AddOffsetsToTxnRequest)]
    p.receive(1, 1, AddOffsetsToTxnResponse(add.correlation_id, Errors.NONE))
    [commit] = [s.message for s in p.drain() if isinstance(getattr(s, "message", None), TxnOffsetCommitRequest)]
    assert (commit.generation_id, commit.member_id, commit.group_instance_id) == (4, "member-1", None)


def test_run_and_conform_take_eos_with_a_group_protocol(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--workload", "eos", "--group-protocol", "consumer", "--assignor", "uniform",
                 "--ops", "60", "--seed", "1", "--no-progress", "--format", "json", "--out", str(out)]) == 0
    capsys.readouterr()
    options = json.loads((out / "run.json").read_text())["options"]
    assert options["group_protocol"] == "consumer"  # --replay makes the same run
    # the classic protocol given is recorded too: without it the processors assign
    assert group_options_conflict("eos", "classic", "cooperative-sticky", RUN_GROUP_WORKLOADS) is None
    assert "not an assignor of the classic protocol" in group_options_conflict("eos", "classic", "uniform",
                                                                               RUN_GROUP_WORKLOADS)
    assert group_options_conflict("eos", None, "uniform", RUN_GROUP_WORKLOADS) is None  # (no group: ignored)
    assert group_options_conflict("eos", "consumer", "range", RUN_GROUP_WORKLOADS) is None  # run's and conform's
    assert "do not join a consumer group" in group_options_conflict("eos", "consumer", "range")  # always joining: no
