"""Apache Kafka as the target and ground truth: the jar cache, ``conform --spawn kafka``, and the
Java client driver. Marked ``kafka`` (they need Java 17+ and Maven); the three-broker and
three-client runs are also ``slow``."""

from __future__ import annotations

import json
import os

import pytest

from kafkacheck.cli import main
from kafkacheck.conform.cases import SHORT

pytestmark = pytest.mark.kafka


def _report(out):
    return json.loads((out / "report.json").read_text())


def _dead(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _processes_under(path) -> list[str]:
    """Command lines of live processes that mention ``path`` (brokers of a run directory)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if str(path) in cmd:
                found.append(f"{entry}: {cmd[:120]}")
    return found


def test_kafka_fetch_is_quick_once_cached_and_where_prints_the_cache(kafka_dist, capsys):
    assert main(["kafka", "fetch"]) == 0
    assert main(["kafka", "where"]) == 0
    out = capsys.readouterr().out
    assert str(kafka_dist.libs) in out and str(kafka_dist.home) in out
    assert (kafka_dist.libs / "kafka_2.13-4.3.1.jar").exists()
    assert any(kafka_dist.home.glob("driver-*/KafkacheckDriver.class"))


def test_kafka_fetch_says_in_one_line_what_is_missing(kafka_dist, tmp_path, monkeypatch, capsys):
    import kafkacheck.real.kafka_dist as kafka

    monkeypatch.setenv("KAFKACHECK_CACHE", str(tmp_path / "cache"))
    real_which = kafka.shutil.which
    monkeypatch.setattr(kafka.shutil, "which", lambda tool: None if tool == "mvn" else real_which(tool))
    assert main(["kafka", "fetch"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mvn is not installed" in err[0] and "-m 'not kafka'" in err[0]
    assert main(["kafka", "fetch", "--kafka-version", "4.x"]) == 3
    assert main(["conform", "--spawn", "kafka", "--brokers", "2", "--out", str(tmp_path)]) == 3
    assert main(["conform", "--spawn", "reference", "--kafka-version", "4.2.0", "--out", str(tmp_path)]) == 3
    assert "Traceback" not in capsys.readouterr().err
    monkeypatch.setattr(kafka.shutil, "which", real_which)
    for _ in range(2):  # (the second time Maven remembers the missing artifact: the same answer)
        assert main(["kafka", "fetch", "--kafka-version", "9.9.9"]) == 3  # not on Maven Central: usage
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "Apache Kafka 9.9.9 is not on Maven Central" in err[0] and "kafka_2.13" in err[0]
        assert not (tmp_path / "cache" / "kafka-9.9.9").exists()  # nothing half-fetched is left
    assert main(["conform", "--spawn", "kafka", "--kafka-version", "9.9.9", "--out", str(tmp_path / "o")]) == 3


def test_conform_spawn_kafka_one_broker_passes_the_short_profile(kafka_dist, tmp_path):
    """Apache Kafka is the ground truth: every case of the short profile passes on it (or is
    skipped with its reason), and the queue workload is valid through a kill and a proxy cut."""
    out = tmp_path / "k1"
    code = main(["conform", "--spawn", "kafka", "--brokers", "1", "--profile", "short", "--workload-seconds", "8",
                 "--faults", "sigkill,client-partition", "--out", str(out)])
    report = _report(out)
    entries = {e["name"]: e for e in report["entries"]}
    assert code == 0, {n: e["evidence"] for n, e in entries.items() if e["status"] != "pass"}
    assert report["target"] == "kafka" and report["target_version"] == "Apache Kafka 4.3.1"
    assert report["brokers"] == 1 and list(entries) == [*SHORT, "queue"]
    assert entries["min-insync-refused"]["status"] == "skip"  # one broker: no follower to stop
    assert entries["min-insync-capped-by-rf"]["status"] == "pass"
    assert all(e["status"] == "pass" for n, e in entries.items() if n != "min-insync-refused")
    assert "KAFKA-15583" in entries["min-insync-capped-by-rf"]["source"]
    assert "Apache Kafka 3.7.0 and later" in entries["min-insync-capped-by-rf"]["source"]
    faults = {n["f"] for n in report["nemesis"]}
    assert faults & {"sigkill", "client-partition"}, report["nemesis"]
    run = json.loads((out / "queue" / "run.json").read_text())
    assert run["versions"]["broker"] == "Apache Kafka 4.3.1"
    assert "Kafka Server started" in (out / "broker" / "kafka-1.log").read_text()
    assert (out / "broker" / "kafka-1" / "server.properties").exists()
    assert _processes_under(out) == []  # every broker stopped by its pid


@pytest.mark.slow  # 28 s: feature levels and straggle keep faster tests in the default run
def test_kafka_formatted_with_a_feature_level_and_a_straggling_end_txn(kafka_dist, tmp_path, capsys):
    """--feature reaches StorageTool and the report; straggle holds real requests of a real
    client in front of Kafka and records Kafka's answer to each when it is delivered late. The
    ten-minute runs that find KAFKA-17754 this way are tests/kafkacheck/test_real_bugs.py."""
    out = tmp_path / "tv1"
    main(["conform", "--spawn", "kafka", "--brokers", "1", "--feature", "transaction.version=1", "--cases", "none",
          "--workload", "txn", "--workload-seconds", "20", "--faults", "straggle", "--straggle-api", "EndTxn",
          "--out", str(out)])
    report = _report(out)
    assert report["target_version"] == "Apache Kafka 4.3.1 (transaction.version=1)"
    assert report["features"] == {"transaction.version": 1}
    ops = [json.loads(line) for line in (out / "txn" / "history.jsonl").read_text().splitlines()]
    held = [o["value"]["held"] for o in ops if o["f"] == "straggle" and o["type"] == "info" and o["value"]["held"]]
    late = [o["value"] for o in ops if o["f"] == "release" and o["type"] == "info"]
    assert held and all(h["api"] == "EndTxn" and h["proxy"] == "kafka-1" for h in held)
    assert [r["correlation_id"] for r in late] == [h["correlation_id"] for h in held]
    assert any(r["outcome"] == "answered" for r in late)
    assert _processes_under(out) == []
    capsys.readouterr()
    assert main(["conform", "--spawn", "kafka", "--brokers", "1", "--feature", "transaction.version=9", "--cases",
                 "none", "--workload", "none", "--out", str(tmp_path / "bad")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No feature:transaction.version with feature level 9" in err[0]


def test_java_client_drives_cases_and_a_workload_on_kafka(kafka_dist, tmp_path):
    out = tmp_path / "java"
    code = main(["conform", "--spawn", "kafka", "--brokers", "1", "--client", "java", "--cases",
                 "produce-offsets-dense,read-after-ack,read-committed-skips-aborted,fenced-producer,"
                 "offset-commit-fetch,group-exclusive-range,delete-records-log-start",
                 "--workload", "eos", "--workload-seconds", "8", "--faults", "", "--out", str(out)])
    report = _report(out)
    assert code == 0, [(e["name"], e["evidence"]) for e in report["entries"] if e["status"] != "pass"]
    assert report["client"] == "java"
    ops = [json.loads(line) for line in (out / "eos" / "history.jsonl").read_text().splitlines()]
    assert any(o["f"] == "txn" and o["type"] == "ok" and o.get("offsets") for o in ops)
    assert any(o["f"] == "committed" and o["type"] == "ok" for o in ops)
    assert main(["check", str(out / "eos")]) == 0


@pytest.mark.slow  # 25 s: the Java client keeps its Kafka tests in the default run
def test_java_client_on_the_reference_broker(kafka_dist, tmp_path):
    """Kafka's own client against the reference broker: it found that CreateTopics v5+ must
    list the new topic's configs (null made the Java AdminClient fail every createTopics)."""
    out = tmp_path / "java-ref"
    code = main(["conform", "--spawn", "reference", "--client", "java", "--cases",
                 "produce-offsets-dense,min-insync-refused,idempotent-no-duplicates,lso-bounds-read-committed,"
                 "group-exclusive-cooperative", "--workload", "txn", "--workload-seconds", "6", "--faults", "sigkill",
                 "--out", str(out)])
    report = _report(out)
    assert code == 0, [(e["name"], e["evidence"]) for e in report["entries"] if e["status"] != "pass"]
    assert all(e["status"] == "pass" for e in report["entries"])  # min-insync-refused ran: 3 brokers
    assert report["nemesis"] and main(["check", str(out / "txn")]) == 0


def test_java_driver_answers_with_kafkas_error_names_and_stops_with_its_run(kafka_dist, tmp_path):
    from kafkacheck.real import java

    d = java.use_driver(kafka_dist, tmp_path / "java.log")
    try:
        with pytest.raises(java.JavaError, match="no handle"):
            d.call("producer.send", 1.0, h=999, records=[])
        # a producer to a port nobody listens on: the client's own timeout, named as Kafka names it
        p = java.Handle("producer", java.producer_conf("127.0.0.1:1", 1.0, acks="all"), 1.0)
        [answer] = p.call("send", 2.0, records=[{"topic": "t", "partition": 0, "key": None, "value": None,
                                                 "headers": []}])
        assert answer["error"].startswith(("REQUEST_TIMED_OUT", "UNKNOWN_TOPIC_OR_PARTITION")), answer
        p.close()
        pid = d.proc.pid
    finally:
        java.stop_driver()
    assert d.proc is None and _dead(pid)
    with pytest.raises(java.JavaError, match="not started"):
        java.driver()


# ---------------------------------------------------------------- three brokers, every client (slow)


@pytest.mark.slow
@pytest.mark.parametrize("client", ["kafka-python", "confluent", "java"])
def test_conform_spawn_kafka_three_brokers_every_case_and_the_queue_workload(kafka_dist, tmp_path, client):
    out = tmp_path / client
    code = main(["conform", "--spawn", "kafka", "--brokers", "3", "--client", client, "--workload", "queue",
                 "--out", str(out)])
    report = _report(out)
    assert code == 0, [(e["name"], e["evidence"]) for e in report["entries"] if e["status"] != "pass"]
    assert all(e["status"] == "pass" for e in report["entries"]), report["entries"]


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["idempotent", "txn", "eos", "groups", "compaction", "at-most-once"])
def test_conform_spawn_kafka_three_brokers_workloads_with_the_default_faults(kafka_dist, tmp_path, workload):
    out = tmp_path / workload
    code = main(["conform", "--spawn", "kafka", "--brokers", "3", "--cases", "produce-offsets-dense",
                 "--workload", workload, "--out", str(out)])
    entry = _report(out)["entries"][-1]
    assert code == 0 and entry["status"] == "pass", entry
    assert entry["details"]["summary"]["nemesis"], "no fault was injected"


@pytest.mark.slow
def test_groups_with_kip848s_consumer_protocol_and_the_java_client(kafka_dist, tmp_path):
    """The members join with group.protocol=consumer (the broker logs say so), report their
    own member epochs, converge after the default faults, and the history is valid."""
    out = tmp_path / "kip848"
    code = main(["conform", "--spawn", "kafka", "--brokers", "3", "--client", "java", "--cases", "none",
                 "--workload", "groups", "--group-protocol", "consumer", "--workload-seconds", "15",
                 "--out", str(out)])
    report = _report(out)
    entry = report["entries"][-1]
    assert code == 0 and entry["status"] == "pass", entry
    assert report["group_protocol"] == "consumer" and entry["details"]["summary"]["group_converged"] is True
    config = json.loads((out / "groups" / "run.json").read_text())["config"]
    assert config["groups"]["protocol"] == "consumer" and config["groups"]["settled"] is True
    ops = [json.loads(line) for line in (out / "groups" / "history.jsonl").read_text().splitlines()]
    assigned = [e for o in ops for e in o.get("rebalance_log") or [] if e["type"] == "assigned"]
    assert assigned and all(e["generation"] >= 1 for e in assigned)
    logs = "".join(p.read_text(errors="replace") for p in (out / "broker").glob("kafka-*.log"))
    assert "joins the consumer group using the consumer protocol" in logs


@pytest.mark.slow
def test_eos_processors_in_a_kip848_group_with_the_java_client(kafka_dist, tmp_path):
    """The eos processors subscribe as members of one consumer group (group.protocol=consumer),
    commit their offsets with their member epochs, and the history is valid, exactly-once and
    consumer-group checks both. Client delays only: the default faults' kills of the group
    coordinator can leave a 20 s run without a committed offset."""
    out = tmp_path / "eos-kip848"
    code = main(["conform", "--spawn", "kafka", "--brokers", "3", "--client", "java", "--cases", "none",
                 "--workload", "eos", "--group-protocol", "consumer", "--workload-seconds", "20",
                 "--faults", "client-delay", "--out", str(out)])
    report = _report(out)
    entry = report["entries"][-1]
    assert code == 0 and entry["status"] == "pass", entry
    assert report["group_protocol"] == "consumer" and entry["details"]["summary"]["group_converged"] is True
    config = json.loads((out / "eos" / "run.json").read_text())["config"]
    assert config["groups"]["protocol"] == "consumer" and config["groups"]["group"] == config["eos"]["group"]
    ops = [json.loads(line) for line in (out / "eos" / "history.jsonl").read_text().splitlines()]
    committed = [o for o in ops if o["f"] == "txn" and o["type"] == "ok" and o["offsets"]]
    assert committed and all(o["generation"] >= 1 for o in committed)
    assert not any(o["f"] == "assign" and o["process"] in {c["process"] for c in committed} for o in ops)
    logs = "".join(p.read_text(errors="replace") for p in (out / "broker").glob("kafka-*.log"))
    assert "joins the consumer group using the consumer protocol" in logs
