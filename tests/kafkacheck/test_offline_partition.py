"""The simulator's offline-partition fault (KAFKA-20734's window): the workload's topics placed
one replica a partition, a partition's broker paused past its session, the aimed strategy
that does it around a commit, the white-box invariant that catches a coordinator completing a
transaction without its markers, and the combinations refused."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from fault_injection.nemesis import ScheduleError, load_schedule, offline_ms
from kafkacheck.cli import main
from kafkacheck.judge import judge_record
from kafkacheck.runner import STALL_MS, RunOptions, simulate
from kafkacheck.swarm import AIMED_CRASHING, CRASHES, draw

SKIP = "txn-markers-skip-offline"


def nemesis_ops(outcome) -> list[dict]:
    return [o for o in outcome.ops if o["process"] == "nemesis" and o["type"] == "info"]


def test_an_offline_partition_run_places_its_topics_and_pauses_one_partitions_broker():
    outcome = simulate(RunOptions(seed=1, ops=300, workload="eos", faults=["offline-partition"]), None)
    config = outcome.run_meta["config"]
    placement = config["placement"]
    assert config["replication_factor"] == 1
    assert sorted(placement) == [f"{t}:{p}" for t in ("t0", "t1") for p in range(4)]
    assert all(len(nodes) == 1 and nodes[0] in (1, 2, 3) for nodes in placement.values())
    ops = nemesis_ops(outcome)
    offline = [o for o in ops if o["f"] == "offline-partition"]
    assert offline, "no partition went offline"
    for o in offline:
        v = o["value"]
        assert v["how"] == "pause" and v["nodes"] == placement[v["partition"]]
        after = ops[ops.index(o) + 1]
        assert (after["f"], after["value"]["nodes"]) == ("resume", v["nodes"])
        assert after["time"] - o["time"] >= offline_ms(config["timings_ms"])[0] * 1_000_000
    stable = config["final_read"]["stable_offsets"]
    assert sorted(stable) == sorted(placement) and all(lso == hw for lso, hw in stable.values())
    assert judge_record(outcome.record())["valid"] is True


def test_a_run_without_the_fault_places_nothing():
    config = simulate(RunOptions(seed=0, ops=100, workload="txn", faults=["pause"]), None).run_meta["config"]
    assert "placement" not in config and config["replication_factor"] == 3
    assert set(config["final_read"]["stable_offsets"]) == {f"t0:{p}" for p in range(4)}


@pytest.mark.parametrize("transaction_version", [1, 2])
def test_the_switch_is_caught_by_the_invariant_and_the_correct_engine_stays_valid(transaction_version):
    options = RunOptions(seed=0, ops=400, workload="txn", faults=["offline-partition"],
                         transaction_version=transaction_version)
    correct = simulate(options, None)
    assert judge_record(correct.record())["valid"] is True
    bug = simulate(replace(options, bugs=[SKIP]), None)
    result = judge_record(bug.record())
    assert result["valid"] is False
    assert {a["invariant"] for a in result["anomalies"]["invariant-violation"]} == {"txn-complete-after-markers"}
    assert any(e["kind"] == "txn-markers-skipped" for e in bug.events)


def test_the_aimed_strategy_strikes_only_where_the_topics_are_placed():
    calm = (10**9, 10**9)  # no random fault within the run: what strikes is the strategy
    placed = simulate(RunOptions(seed=1, ops=300, workload="txn", faults=["offline-partition"],
                                 fault_stable_ms=calm, aimed=["offline-around-commit"]), None)
    struck = [o for o in nemesis_ops(placed) if o["f"] == "offline-partition"]
    assert struck and judge_record(placed.record())["valid"] is True
    placement = placed.run_meta["config"]["placement"]
    assert all(o["value"]["nodes"] == placement[o["value"]["partition"]] for o in struck)
    unplaced = simulate(RunOptions(seed=1, ops=300, workload="txn", faults=[], aimed=["offline-around-commit"]),
                        None)
    assert nemesis_ops(unplaced) == [o for o in nemesis_ops(unplaced) if o["f"] == "heal"]


def run_cli(tmp_path, capsys, *args: str) -> tuple[int, str]:
    code = main(["run", "--no-progress", "--out", str(tmp_path / "r"), *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("args", [["--faults", "offline-partition,kill"], ["--faults", "pause,disk,offline-partition"],
                                  ["--faults", "offline-partition", "--replication-factor", "3"]])
def test_a_power_loss_or_a_replication_factor_with_the_fault_is_refused_in_one_line(tmp_path, capsys, args):
    code, err = run_cli(tmp_path, capsys, "--workload", "txn", *args)
    assert code == 3 and len(err.strip().splitlines()) == 1
    assert "offline-partition" in err


def test_scripted_offline_steps_are_checked(tmp_path):
    step = {"at_ms": 3000, "f": "offline-partition", "value": {"partition": "t0:1", "nodes": [2], "how": "pause"}}
    path = tmp_path / "s.json"
    path.write_text(json.dumps([step, {"at_ms": 9000, "f": "resume", "value": {"nodes": [2]}}]))
    assert [s["f"] for s in load_schedule(str(path))] == ["offline-partition", "resume"]
    for bad in ([{**step, "value": {**step["value"], "how": "kill"}}],
                [step, {"at_ms": 4000, "f": "kill", "value": {"nodes": [1]}}]):
        path.write_text(json.dumps(bad))
        with pytest.raises(ScheduleError, match="offline-partition"):
            load_schedule(str(path))


def test_a_scripted_offline_step_places_the_topics_too(tmp_path):
    schedule = [{"at_ms": 3000, "f": "offline-partition", "value": {"partition": "t0:1", "nodes": [2], "how": "pause"}},
                {"at_ms": 12000, "f": "resume", "value": {"nodes": [2]}}]
    outcome = simulate(RunOptions(seed=0, ops=200, workload="txn", schedule=schedule), None)
    assert outcome.run_meta["config"]["replication_factor"] == 1
    assert [o["f"] for o in nemesis_ops(outcome)][:2] == ["offline-partition", "resume"]


def test_the_swarm_draws_the_fault_for_transactional_runs_only_and_never_with_a_power_loss():
    drawn = [draw(s) for s in range(120)]
    offline = [o for o in drawn if "offline-partition" in o.faults]
    assert offline and any("offline-around-commit" in o.aimed for o in offline)
    for o in offline:
        assert o.workload in ("txn", "eos") and not set(o.faults) & CRASHES and not set(o.aimed) & AIMED_CRASHING
    assert all("offline-around-commit" not in o.aimed for o in drawn if o not in offline)


def test_a_workload_waiting_for_its_offline_partition_is_not_stalled():
    # swarm seed 310: one partition, held offline longer than the stall bound (its producers'
    # delivery timeout is 90 s); every op touches it, so none completes until it is back
    options = draw(310, ops=125)
    assert options.partitions == 1 and options.faults == ["offline-partition"]
    outcome = simulate(options, None)
    ops = nemesis_ops(outcome)
    down = next(o for o in ops if o["f"] == "offline-partition")
    back = next((o for o in ops if o["f"] == "resume" and o["time"] > down["time"]), None)
    assert back is not None and back["time"] - down["time"] > STALL_MS * 1_000_000
    result = judge_record(outcome.record())
    assert result["valid"] is True, result["anomaly_types"]
