"""The calibration of docs/measurements/real-bugs.md, one try of each row: KAFKA-17754 found with
kafka-python, librdkafka and the Java client on a transaction.version=1 cluster, and not with
the Java client at Kafka 4.3.1's defaults; the last-replica-standing loss found without eligible
leader replicas (Kafka 4.3.1 formatted without them, and Kafka 3.9.1), and not with them; the
reference broker's txn-unfenced-requests found and the correct reference clean under the same
faults. Each row is the command of ``benchmarks/real_bugs.py`` (the three tries the page
reports), run to its end: up to ten minutes of workload a row, so all of them are ``slow``; the
last-replica-standing rows also need network namespaces (root and nftables)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from kafkacheck.cli import main

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

_spec = importlib.util.spec_from_file_location("real_bugs", Path(__file__).resolve().parents[2] / "benchmarks" /
                                               "real_bugs.py")
real_bugs = importlib.util.module_from_spec(_spec)
sys.modules["real_bugs"] = real_bugs  # (its dataclasses look their module up)
_spec.loader.exec_module(real_bugs)


@pytest.mark.parametrize("row", real_bugs.ROWS, ids=lambda r: f"{r.expect}: {r.setup}")
def test_each_real_bug_is_found_where_it_lives_and_nowhere_else(row, kafka_dist, tmp_path):
    if "last-replica-standing" in row.args:
        from fault_injection.real.netns import unavailable
        if (problem := unavailable()) is not None:
            pytest.skip(problem)
    out = tmp_path / "run"
    code = main(row.argv(out))
    results = json.loads((out / row.workload / "results.json").read_text())
    ops = [json.loads(line) for line in (out / row.workload / "history.jsonl").read_text().splitlines()]
    late = [o["value"] for o in ops if o["f"] == "release" and o["type"] == "info"]
    if row.expect == "found":
        assert code == 1 and results["valid"] is False, results.get("anomaly_types")
        if "straggle" in row.args:  # what a late EndTxn does: an aborted read, a lost or a torn write
            assert set(results["anomaly_types"]) & {"G1a", "lost-write", "nonatomic-read"}
            assert any(r["api"] == "EndTxn" and r.get("answer") == ["NONE"] for r in late)
        else:  # acknowledged writes gone after the leader's power loss
            assert set(results["anomaly_types"]) & {"unread-after-heal", "lost-write"}
            assert any(o["f"] == "last-replica-standing" and o["value"].get("step") == "isr-shrunk"
                       for o in ops if o["type"] == "info")
    else:
        assert code == 0 and results["valid"] is True, results.get("anomaly_types")
        if "straggle" in row.args:  # the window was opened, and the late requests were refused
            assert late and not any(r["api"] == "EndTxn" and r.get("answer") == ["NONE"]
                                    and r["trigger"].startswith("next transaction") for r in late)
