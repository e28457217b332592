"""The swarm hunt: draws, aimed nemeses, coverage marks, the liveness phase."""

from __future__ import annotations

import ast
import itertools
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fault_injection.aimed import AIMED
from fault_injection.cluster import CLUSTER_TIMINGS
from fault_injection.model_shapes import model_templates, template_schedule
from kafkacheck import swarm_hunt
from kafkacheck.cli import main
from kafkacheck.runner import RunOptions, simulate
from kafkacheck.swarm import describe, draw, features
from reference import marks

ROOT = Path(__file__).resolve().parents[2]


def _history(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "history.jsonl").read_text().splitlines()]


def test_every_mark_the_engine_calls_is_in_the_catalogue_and_every_catalogued_one_is_called():
    called = set()
    for path in [*ROOT.glob("reference/**/*.py"), *ROOT.glob("fault_injection/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "mark"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                called.add(node.args[0].value)
    assert called == set(marks.MARKS)


def test_a_draw_is_a_function_of_the_seed_and_seeds_differ():
    assert describe(draw(5)) == describe(draw(5))
    drawn = {describe(draw(s)) for s in range(40)}
    assert len(drawn) == 40
    workloads = {draw(s).workload for s in range(40)}
    assert workloads == {"queue", "idempotent", "txn", "eos", "groups", "compaction", "share"}
    # some seeds switch whole fault classes off, some draw aimed strategies or a model template
    assert any(not draw(s).faults for s in range(40))
    assert any(draw(s).aimed for s in range(40))
    assert any((draw(s).swarm or {}).get("template") for s in range(80))


def test_share_seeds_are_queue_seeds_drawn_again_and_every_other_seed_keeps_its_draw():
    drawn = [(draw(s), draw(s, share=False)) for s in range(200)]
    shared = [(o, before) for o, before in drawn if o.workload == "share"]
    assert 20 <= len(shared) <= 60
    for o, before in drawn:
        if o.workload != "share":
            assert describe(o) == describe(before)
    for o, before in shared:
        assert before.workload == "queue" and before.schedule is None
        assert o.acks == "all" and 1 <= o.producer_settings["max_in_flight"] <= 5
        assert o.faults == before.faults and o.ops == 1_000


def test_tcp_breaking_faults_only_for_the_idempotent_producer():
    for s in range(200):
        o = draw(s)
        if o.workload != "idempotent":
            assert not {"duplicate", "reorder"} & set(o.faults), describe(o)


def test_the_stored_model_counterexamples_are_still_what_the_model_finds():
    from properties.formal.bmc import check
    from properties.formal.replication import Model

    for variant, stored in model_templates().items():
        if variant == "kip279-hole":
            continue  # 5 s of z3; the other three show the file is current
        # (z3 may pick another counterexample of the same length: compare what they show)
        result = check(Model(variant, replicas=stored["replicas"], log_len=2), 10)
        assert (result.violated, len(result.steps)) == (stored["violated"], len(stored["steps"])), variant


def test_a_template_keeps_the_counterexamples_shape_under_its_random_parameters():
    import random

    from fault_injection.model_shapes import schedule_for

    t = model_templates()["kip279-hole"]
    plain = schedule_for(t["steps"], t["replicas"])
    drawn = template_schedule("kip279-hole", random.Random(3), 2)
    assert [s["f"] for s in drawn] == [s["f"] for s in plain]
    assert all(b["at_ms"] <= a["at_ms"] for b, a in itertools.pairwise(drawn))


def test_the_swarm_draws_each_setting_over_its_range_extremes_included():
    draws = [draw(s) for s in range(300)]
    t = [{**CLUSTER_TIMINGS, **(o.timings or {})} for o in draws]
    for o, tt in zip(draws, t, strict=True):
        # Kafka's constraints between settings hold in every draw
        assert tt["heartbeat_interval_ms"] <= tt["session_timeout_ms"] // 3, describe(o)
        assert tt["member_heartbeat_interval_ms"] <= tt["member_session_timeout_ms"] // 3, describe(o)
        assert tt["member_rebalance_timeout_ms"] >= 3 * tt["member_heartbeat_interval_ms"], describe(o)
        assert tt["replica_lag_time_max_ms"] >= 2 * tt["replica_fetch_wait_max_ms"], describe(o)
        assert tt["delivery_timeout_ms"] >= tt["request_timeout_ms"] + o.producer_settings.get("linger_ms", 2), describe(o)
        if o.workload == "queue":  # no idempotence: one batch in flight, as the checker expects
            assert "max_in_flight" not in o.producer_settings
    assert {o.producer_settings.get("max_in_flight") for o in draws} >= {1, 2, 3, 4, 5}
    sessions = {tt["member_session_timeout_ms"] for tt in t}
    assert {400, 30_000} <= sessions and len(sessions) > 50
    assert {600, 20_000} <= {tt["session_timeout_ms"] for tt in t}
    assert {1, 1 << 20} <= {o.consumer_settings["max_partition_fetch_bytes"] for o in draws}
    assert {1, 52_428_800} <= {o.consumer_settings["fetch_max_bytes"] for o in draws}
    assert {1, 1_000} <= {o.consumer_settings["max_poll_records"] for o in draws}
    assert {1, 1 << 20} <= {o.broker_settings["replica_fetch_max_bytes"] for o in draws}
    compacted = [dict(o.topic_configs) for o in draws if o.topic_configs]
    assert {"0", "120000"} <= {c["delete.retention.ms"] for c in compacted}
    assert {"0", "1"} <= {c["min.cleanable.dirty.ratio"] for c in compacted}
    flushes = {(o.flush_messages is not None, o.flush_messages == 1, o.flush_ms is not None) for o in draws}
    assert flushes >= {(False, False, False), (True, True, False), (True, False, False),
                       (False, False, True), (True, False, True)}
    assert {o.static_members for o in draws if o.workload == "groups"} == {True, False}
    for o in draws[:40]:
        text, feats = describe(o), features(o)
        assert "max_poll_records=" in text and "flush " in text
        assert any(f.startswith("fetch_max_bytes=") for f in feats)


def test_network_faults_land_on_every_kind_of_link():
    from fault_injection.network import LINK_KINDS

    drawn = [draw(s) for s in range(200)]
    assert {k for o in drawn for k in o.fault_links or ()} == {"all", *LINK_KINDS}
    # partitions of one kind of link cut only links of that kind
    import random

    from fault_injection.nemesis import random_schedule
    from fault_injection.network import Network

    net = Network(random.Random(0))
    net.set_roles(0, [1, 2, 3])
    clients = [100, 101, 102]
    for kind in LINK_KINDS:
        steps = random_schedule(random.Random(kind), ["partition", "loss"], [0, 1, 2, 3], 0, 200_000,
                                links=[kind], clients=clients)
        cut = [step for step in steps if step["f"] == "partition"]
        lossy = [step for step in steps if step["f"] == "loss"]
        assert cut and lossy
        for step in cut:
            assert step["value"]["kind"].startswith(kind + ":")
            links = {net.link_kind(src, int(dst)) for dst, srcs in step["value"]["grudge"].items()
                     for src in srcs}
            assert links == {kind}, step
        assert all(step["value"]["links"] == [kind] for step in lossy)


def test_a_fault_confined_to_one_kind_of_link_spares_the_others():
    import random

    from fault_injection.network import LinkFaults, Network

    net = Network(random.Random(0))
    net.set_roles(0, [1, 2, 3])
    net.faults = LinkFaults(loss=1.0, links=frozenset({"replication"}))
    assert net.deliveries(1, 2, 0) == []  # between brokers: lost
    assert net.deliveries(1, 0, 0) and net.deliveries(100, 1, 0)  # controller and client links: not


def test_runs_with_the_extremes_of_fetch_sizes_and_batches_stay_valid(tmp_path):
    from kafkacheck.judge import judge_record as judge

    for workload in ("queue", "idempotent"):
        o = RunOptions(seed=3, ops=600, workload=workload, faults=["partition", "kill"],
                       producer_settings={"batch_size": 1, "linger_ms": 0,
                                          **({"max_in_flight": 5} if workload == "idempotent" else {})},
                       consumer_settings={"max_partition_fetch_bytes": 1, "fetch_max_bytes": 1,
                                          "max_poll_records": 1},
                       broker_settings={"replica_fetch_max_bytes": 1, "replica_fetch_response_max_bytes": 1},
                       fault_links=["client", "replication", "controller"], liveness_ms=20_000)
        outcome = simulate(o, None)
        result = judge(outcome.record())
        assert result["valid"] is True, (workload, result["anomaly_types"])
        polled = [op for op in outcome.ops if op["f"] == "poll" and op["type"] == "ok" and op["process"] != 5000]
        assert polled and all(sum(len(v) for v in op["value"][0][1].values()) <= 1 for op in polled)


def test_runs_collect_marks_and_the_same_seed_gives_the_same_marks(tmp_path):
    o = RunOptions(seed=0, ops=1000)
    first = simulate(o, tmp_path / "a").stats["marks"]
    second = simulate(o, tmp_path / "b").stats["marks"]
    assert first == second and first  # a faulty run reaches some rare branches
    assert set(first) <= set(marks.MARKS)


@pytest.mark.parametrize("strategy,workload", [
    ("leader-after-write", "queue"), ("crash-after-append", "queue"),
    ("coordinator-failover-after-endtxn", "txn"), ("member-paused-across-rebalance", "groups"),
    ("coordinator-paused-during-rebalance", "groups"), ("clock-jump-at-boundary", "queue"),
    ("leader-after-marker", "txn"), ("isr-shrink-then-crash", "queue"),
])
def test_each_aimed_strategy_strikes_and_the_run_stays_valid_on_the_correct_engine(tmp_path, strategy, workload):
    from kafkacheck.judge import judge_record as judge
    from traces.parquet import load_run_dir

    ops = 300 if workload == "txn" else 800
    simulate(RunOptions(seed=1, ops=ops, workload=workload, faults=[], aimed=[strategy],
                        liveness_ms=20_000), tmp_path)
    nemesis = [o for o in _history(tmp_path) if o["process"] == "nemesis" and o["type"] == "invoke"
               and o["f"] != "heal"]
    assert nemesis, f"{strategy} never struck"
    result = judge(load_run_dir(tmp_path))
    assert result["valid"] is True, result["anomaly_types"]


def test_aimed_faults_never_overlap_each_other(tmp_path):
    # (isr-shrink-then-crash takes several nodes away on purpose, only its leader's crash losing
    # records: its own test below checks its shape)
    simulate(RunOptions(seed=2, ops=1500, faults=[], aimed=sorted(set(AIMED) - {
        "coordinator-failover-after-endtxn", "member-paused-across-rebalance", "restart-during-cleaning",
        "isr-shrink-then-crash"})),
        tmp_path)
    down = 0
    for o in _history(tmp_path):
        if o["process"] != "nemesis" or o["type"] != "invoke":
            continue
        if o["f"] in ("kill", "pause", "partition", "disk-fault") or (
                o["f"] == "clock-skew" and o["value"]["skew_ms"]):
            down += 1
        elif o["f"] in ("restart", "resume", "heal") or o["f"] == "clock-skew":
            down = max(0, down - 1)
        assert down <= 1


def test_the_liveness_phase_reports_what_does_not_converge(tmp_path):
    from kafkacheck.liveness import unconverged

    sim_dir = tmp_path / "run"
    simulate(RunOptions(seed=0, ops=300, faults=[], liveness_ms=5_000), sim_dir)
    meta = json.loads((sim_dir / "run.json").read_text())
    assert meta["config"]["liveness"]["converged"] is True

    # a partition whose only live replicas cannot lead: offline, reported as such
    from fault_injection.cluster import CONTROLLER_ID, add_cluster, broker_config, controller_config
    from fault_injection.simulation import Simulation
    from reference.messages import CreateTopicsRequest

    sim = Simulation(0)
    brokers = add_cluster(sim, 3, broker_config(), controller_config())
    sim.start(CONTROLLER_ID)
    for b in brokers:
        sim.start(b)
    sim.run_until(1_000 * 1_000_000)
    sim.inject(90, CONTROLLER_ID, CreateTopicsRequest(1, "t0", 1, 3, ()))
    sim.run_until(3_000 * 1_000_000)
    assert unconverged(sim.controller(), sim.brokers()) == []
    for b in brokers:
        sim.kill(b)
    sim.run_until(8_000 * 1_000_000)
    sim.start(brokers[0])  # back, but a crashed last ISR member may not lead (KIP-966)
    sim.run_until(12_000 * 1_000_000)
    found = {f["what"] for f in unconverged(sim.controller(), sim.brokers())}
    assert found, "three killed brokers and one back: something must be unconverged"


def test_a_liveness_violation_makes_the_verdict_invalid():
    from properties.checker import with_invariant_violations

    result = {"valid": True, "anomalies": {}, "anomaly_types": [], "counts": {}}
    out = with_invariant_violations(result, [{"kind": "liveness-violation", "what": "isr-not-full",
                                              "key": "t0:0", "detail": "ISR [1]", "bound_ms": 10,
                                              "time": 5}])
    assert out["valid"] is False and out["anomaly_types"] == ["liveness"]


def test_swarm_seed_97_a_member_whose_coordinator_lookup_failed_rejoins(tmp_path):
    """Found by the swarm on the correct engine: a group member whose FindCoordinator timed
    out never looked again, never heartbeat, and sat in a generation the group had left
    (unowned-partition). Its heartbeat timer now looks the coordinator up again."""
    from kafkacheck.judge import judge_record as judge
    from traces.parquet import load_run_dir

    # the draw of seed 97 then (before crashing runs kept min.insync.replicas 2, and before
    # the swarm drew every setting over its range, which gave seed 97 another run)
    simulate(RunOptions(seed=97, ops=2000, workload="groups", partitions=1, replication_factor=2,
                        min_insync_replicas=1, faults=["disk"], aimed=["clock-jump-at-boundary"],
                        timings={"replica_lag_time_max_ms": 1000, "request_timeout_ms": 1000,
                                 "transaction_timeout_ms": 20000, "member_session_timeout_ms": 1500,
                                 "member_rebalance_timeout_ms": 2500, "member_max_poll_interval_ms": 3000},
                        fault_stable_ms=(200, 1000), fault_ms=(4000, 15000), liveness_ms=35000,
                        swarm={"seed": 97}), tmp_path)
    result = judge(load_run_dir(tmp_path))
    assert result["valid"] is True, result["anomaly_types"]


def test_swarm_seed_320_a_restarted_follower_is_not_let_into_the_isr_by_a_retried_expansion():
    """Found by the swarm on the correct engine (acked-on-isr): the leader's AlterPartition adding
    broker 1 went unanswered (the controller was down); broker 1 crashed, lost its unflushed log
    and registered again; the leader's retry named broker 1 with the broker epoch of its new,
    empty incarnation, and the controller admitted it. Retries now resend the request as it was
    made (tests/reference/test_broker.py has the mechanism on its own)."""
    from kafkacheck.judge import judge_record as judge

    out = simulate(draw(320, share=False), None)  # (a share run since share groups joined the swarm)
    assert out.violations == []
    result = judge(out.record())
    assert result["valid"] is True, result["anomaly_types"]


def test_the_swarm_finds_a_switch_it_is_not_told_about(tmp_path):
    out = swarm_hunt.swarm(time_limit=600, runs=12, jobs=2, with_switch="ack-before-isr", ops=800,
                           log=lambda _m: None, shrink=False, out_dir=tmp_path)
    assert out.found, "ack-before-isr not found in 12 swarm runs"
    # (no assertion on the marks reached: with two jobs, which run ends first depends on the
    # machine's load, and a run the switch stops at once reaches none)
    # the finding, saved as a run directory: --replay makes it again, byte for byte
    assert out.run_dir and Path(out.run_dir).parent == tmp_path
    assert main(["run", "--replay", out.run_dir, "--no-progress"]) == 1


def test_run_swarm_reproduces_and_refuses_what_the_seed_draws(tmp_path):
    cmd = [sys.executable, "-m", "kafkacheck", "run", "--swarm", "4", "--ops", "300", "--no-progress",
           "--out", str(tmp_path / "r")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode in (0, 1), r.stderr
    assert r.stdout.startswith("swarm seed 4: ")
    again = subprocess.run([*cmd[:-1], str(tmp_path / "r2")], capture_output=True, text=True, timeout=300)
    assert (tmp_path / "r" / "history.jsonl").read_bytes() == (tmp_path / "r2" / "history.jsonl").read_bytes()
    bad = subprocess.run([sys.executable, "-m", "kafkacheck", "run", "--swarm", "4", "--workload", "txn"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 3 and "--swarm draws --workload" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    assert again.returncode == r.returncode
    assert replace(draw(4), ops=300).workload in r.stdout


@pytest.mark.parametrize("strategy", ["heartbeat-held-across-rebalance", "revocation-slow-across-rebalance",
                                      "leave-lost"])
def test_only_consumer_protocol_seeds_draw_the_strategies_of_its_reconciliation(strategy):
    drawn = [draw(s) for s in range(400)]
    chosen = [o for o in drawn if strategy in o.aimed]
    assert chosen and all(o.workload == "groups" and o.group_protocol == "consumer" for o in chosen)
    assert any(o.group_protocol == "consumer" and o not in chosen for o in drawn)


def test_slow_revocations_strike_the_members_a_target_takes_partitions_from_and_the_run_stays_valid(tmp_path):
    """revocation-slow-across-rebalance: at a new target, every member it takes partitions from
    revokes slowly (a slow-callback nemesis op applied to a member node); when a member joined,
    half the time it is paused past its session too. The correct engine stays valid."""
    from kafkacheck.judge import judge_record as judge
    from traces.parquet import load_run_dir

    o = RunOptions(seed=4, ops=800, workload="groups", group_protocol="consumer", faults=[],
                   aimed=["revocation-slow-across-rebalance"], liveness_ms=20_000)
    simulate(o, tmp_path)
    nemesis = [x for x in _history(tmp_path) if x["process"] == "nemesis" and x["type"] == "info"]
    slow = [x["value"] for x in nemesis if x["f"] == "slow-callback"]
    assert slow and all(v["applied"] and v["ms"] >= 500 and v["node"] > 100 for v in slow)
    assert any(x["f"] == "pause" for x in nemesis), "no newcomer was paused past its session"
    result = judge(load_run_dir(tmp_path))
    assert result["valid"] is True, result["anomaly_types"]


def test_held_acknowledgements_strike_a_consumer_group_and_the_run_stays_valid(tmp_path):
    from kafkacheck.judge import judge_record as judge
    from traces.parquet import load_run_dir

    simulate(RunOptions(seed=1, ops=800, workload="groups", group_protocol="consumer", faults=[],
                        aimed=["heartbeat-held-across-rebalance"], liveness_ms=20_000), tmp_path)
    holds = [o for o in _history(tmp_path) if o["process"] == "nemesis" and o["type"] == "invoke"
             and o["f"] == "hold-back"]
    assert holds, "no acknowledgement was held"
    for o in holds:
        v = o["value"]
        assert v["requests"] == ["ConsumerGroupHeartbeatRequest"] and v["having"] == ["owned"]
        assert v["count"] == 2 and 1_000 <= v["ms"] <= 4_000 and v["src"] > 100
    result = judge(load_run_dir(tmp_path))
    assert result["valid"] is True, result["anomaly_types"]


@pytest.mark.parametrize("bugs", [[], ["consumer-group-rejoin-fenced"]])
def test_lost_leaves_make_members_rejoin_as_the_member_the_coordinator_still_has(tmp_path, bugs):
    """leave-lost: two leave heartbeats are lost with their connections; each member subscribes
    again with epoch 0 and the member id it made (KIP-1082) while the coordinator still has it
    at its epoch. The correct engine takes it back; KAFKA-19233's coordinator fences it."""
    from kafkacheck.judge import judge_record as judge
    from traces.parquet import load_run_dir

    simulate(RunOptions(seed=1, ops=800, workload="groups", group_protocol="consumer", faults=[],
                        aimed=["leave-lost"], liveness_ms=20_000, bugs=bugs), tmp_path)
    holds = [o["value"] for o in _history(tmp_path) if o["process"] == "nemesis" and o["type"] == "invoke"
             and o["f"] == "hold-back"]
    assert holds == [{"requests": ["ConsumerGroupHeartbeatRequest"], "epochs": [-1, -2], "ms": 0, "lost": True,
                      "count": 2}]
    result = judge(load_run_dir(tmp_path))
    assert result["valid"] is (not bugs), result["anomaly_types"]
    assert result["anomaly_types"] == (["rejoin-fenced"] if bugs else [])


def test_a_member_paused_mid_op_after_the_ops_are_spent_is_no_stall():
    """Found by the swarm (seed 459, a share run): every op was started by 37 s while one
    share consumer was paused mid-acquire for up to three member sessions (90 s); nothing
    completed for 60 s and the run was judged stalled. The nemesis resumes that consumer:
    waiting for it is no stall."""
    from kafkacheck.judge import judge_record as judge

    assert judge(simulate(draw(459), None).record())["valid"] is True


def _nemesis_invokes(path: Path) -> list[dict]:
    return [o for o in _history(path) if o["process"] == "nemesis" and o["type"] == "invoke"]


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "events.jsonl").read_text().splitlines()]


NEW_APART = {"leader-after-marker": "kafkacheck-swarm-marker-failover", "isr-shrink-then-crash": "kafkacheck-swarm-elr-edge"}


@pytest.mark.parametrize("strategy", sorted(NEW_APART))
def test_the_strategies_drawn_apart_change_only_the_seeds_that_draw_them(monkeypatch, strategy):
    """leader-after-marker (transactional seeds) and isr-shrink-then-crash (acks=all seeds)
    are drawn from RNGs of their own: a seed that does not draw one is drawn as before it
    existed, and a seed that does differs only by it and min.insync.replicas 2."""
    from kafkacheck import swarm
    from kafkacheck.workloads import TXN_WORKLOADS

    drawn = {s: draw(s) for s in range(400)}
    monkeypatch.setattr(swarm, "_marker_failover" if strategy == "leader-after-marker" else "_elr_edge",
                        lambda _seed, options: options)
    before = {s: draw(s) for s in range(400)}
    chosen = [s for s, o in drawn.items() if strategy in o.aimed]
    assert 10 <= len(chosen) <= 120
    for s, o in drawn.items():
        if s not in chosen:
            assert describe(o) == describe(before[s])
            continue
        assert describe(replace(o, aimed=[a for a in o.aimed if a != strategy],
                                min_insync_replicas=before[s].min_insync_replicas)) == describe(before[s])
        assert o.min_insync_replicas == 2 and o.schedule is None and "offline-partition" not in o.faults
        if strategy == "leader-after-marker":
            assert o.workload in TXN_WORKLOADS
        else:
            assert o.acks == "all"
    # and no seed of another workload (or acks=1) draws it
    if strategy == "leader-after-marker":
        assert {drawn[s].workload for s in chosen} == {"txn", "eos"}
    else:
        assert len({drawn[s].workload for s in chosen}) >= 6
        assert any(o.acks == "1" for o in drawn.values())


def test_the_strategies_drawn_apart_take_nothing_from_the_shared_aimed_rng():
    """With leader-after-marker and isr-shrink-then-crash among a run's strategies, the others
    draw from the aimed RNG what they drew without them (their eagerness here)."""
    import random
    from types import SimpleNamespace

    from fault_injection.aimed import AimedNemesis

    def made(strategies: list[str]) -> tuple[dict, tuple]:
        rng = random.Random(7)
        sim = SimpleNamespace(observers=[], call_at=lambda *_a: None)
        a = AimedNemesis(sim, SimpleNamespace(enabled=True, nodes=[0, 1, 2, 3]), strategies, rng, [1, 2, 3], [],
                         dict(CLUSTER_TIMINGS), [], 60_000, (1_000, 6_000))
        return a.rate, rng.getstate()

    old = ["crash-after-append", "election-during-truncation", "leader-after-write"]
    rate, state = made(old)
    rate_new, state_new = made([*old, *NEW_APART])
    assert state_new == state and {s: rate_new[s] for s in old} == rate
    assert set(rate_new) == {*old, *NEW_APART}


@pytest.mark.parametrize("bugs", [[], ["unclean-election"]])
def test_the_last_isr_member_crashes_with_eligible_leader_replicas_and_nothing_committed_is_lost(tmp_path, bugs):
    """isr-shrink-then-crash (KIP-966's edges): followers paused or cut off from the leader (no
    record lost) until the ISR is below min.insync.replicas, then the leader, the last ISR
    member, killed (a power loss) and the two brought back in a drawn order. The correct engine
    elects an eligible replica and loses nothing; an engine that elects a replica outside the
    ISR (the unclean-election switch, as a controller that missed the leader's unclean shutdown
    would, KAFKA-15586) loses acknowledged records."""
    from kafkacheck.judge import judge_record as judge
    from traces.parquet import load_run_dir

    out = simulate(RunOptions(seed=3, ops=800, workload="queue", faults=[], aimed=["isr-shrink-then-crash"],
                              liveness_ms=20_000, bugs=bugs), tmp_path)
    steps = _nemesis_invokes(tmp_path)
    killed = [n for o in steps if o["f"] == "kill" for n in o["value"]["nodes"]]
    assert killed, "no leader was killed"
    away = {n for o in steps if o["f"] == "pause" for n in o["value"]["nodes"]}
    away |= {int(n) for o in steps if o["f"] == "partition" for n, srcs in o["value"]["grudge"].items()
             if o["value"]["kind"] == "cut-from-leader"}
    assert away and all(o["f"] in ("pause", "resume", "partition", "heal", "kill", "restart") for o in steps)
    # each crash is of the leader of a partition whose ISR the controller had taken to its target
    events = _events(tmp_path)
    for o in steps:
        if o["f"] != "kill":
            continue
        (node,) = o["value"]["nodes"]
        assert any(e["kind"] == "partition-change" and e["leader"] == node and len(e["isr"]) <= 2
                   and 0 <= o["time"] - e["time"] <= 4_000_000 for e in events), o
    result = judge(load_run_dir(tmp_path))
    if bugs:
        assert result["valid"] is False and "invariant-violation" in result["anomaly_types"]
    else:
        assert result["valid"] is True, result["anomaly_types"]
        assert out.stats["marks"].get("controller-elect-from-elr")


def test_a_leader_failed_over_as_it_appends_a_marker_leaves_a_follower_without_it(tmp_path):
    """leader-after-marker: the leader is cut off in the step that appended a transaction
    marker (its followers' fetch answers lost), then killed, paused or left isolated: the
    new leader lacks the marker, and the coordinator writes it there again (the same producer
    id and epoch, at the offset the old leader had written it). The correct engine stays valid."""
    from kafkacheck.judge import judge_record as judge
    from traces.parquet import load_run_dir

    out = simulate(RunOptions(seed=1, ops=300, workload="txn", faults=[], aimed=["leader-after-marker"],
                              liveness_ms=20_000), tmp_path)
    steps = _nemesis_invokes(tmp_path)
    assert steps and steps[0]["f"] == "partition" and steps[0]["value"]["kind"] == "isolate"
    events = _events(tmp_path)
    cut_at = steps[0]["time"]
    (leader,) = [int(n) for n, srcs in steps[0]["value"]["grudge"].items() if len(srcs) > 1]
    marker = next(e for e in events if e["kind"] == "txn-marker" and e["node"] == leader
                  and e["time"] // 1_000_000 == cut_at // 1_000_000)
    again = [e for e in events if e["kind"] == "txn-marker" and e["node"] != leader and e["key"] == marker["key"]
             and (e["producer_id"], e["producer_epoch"]) == (marker["producer_id"], marker["producer_epoch"])]
    assert again and again[0]["offset"] == marker["offset"], "the new leader had the marker already"
    assert out.stats["marks"].get("txn-marker-to-moved-leader")
    result = judge(load_run_dir(tmp_path))
    assert result["valid"] is True, result["anomaly_types"]
