"""benchmarks/kafka20734_fix.py: KAFKA-20734's fix built from Maven Central's sources jar of
kafka-metadata, checked, and run with ``conform --kafka-home``. Marked ``kafka`` (Java and
Maven); the build and its one-node run are also ``slow``."""

from __future__ import annotations

import difflib
import importlib.util
import json
from pathlib import Path

import pytest

from kafkacheck.cli import main

_spec = importlib.util.spec_from_file_location("kafka20734_fix", Path(__file__).resolve().parents[2] / "benchmarks" /
                                               "kafka20734_fix.py")
fix = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fix)

pytestmark = pytest.mark.kafka


def test_the_edit_changes_the_leader_step_of_one_method_once(kafka_dist, tmp_path):
    source = fix.read_source(fix.fetch_sources("4.3.1", fix.cache_root() / "kafka20734" / "4.3.1"))  # its own cache
    patched = fix.patch_source(source, "4.3.1")
    changed = [line for line in difflib.unified_diff(source.splitlines(), patched.splitlines(), n=0)
               if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == [
        "-            .flatMap(partition -> Optional.ofNullable(image.cluster().broker(partition.leader))",
        "-                .map(broker -> broker.node(listenerName.value()).orElse(Node.noNode())));",
        "+            .map(partition -> Optional.ofNullable(image.cluster().broker(partition.leader))",
        "+                .map(broker -> broker.node(listenerName.value()).orElse(Node.noNode()))",
        "+                .orElse(Node.noNode()));",
    ]
    with pytest.raises(fix.Failed, match="already fixed"):  # an edited (or fixed) source is not edited again
        fix.patch_source(patched, "4.3.1")


@pytest.mark.parametrize("version, says", [
    ("4.2.2", "Apache Kafka 4.2.2 is not affected"),
    ("4.4.0", "Maven Central has no sources jar for org.apache.kafka:kafka-metadata:4.4.0"),
    ("4.3", "--version must look like 4.3.1"),
])
def test_a_version_it_cannot_patch_is_one_line_and_exit_3(kafka_dist, tmp_path, capsys, version, says):
    assert fix.main(["--version", version, "--out", str(tmp_path / "fixed")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err
    assert not (tmp_path / "fixed").exists()


@pytest.mark.slow
def test_the_patched_build_answers_no_node_for_a_leaderless_partition_and_starts(kafka_dist, tmp_path, capsys):
    home = tmp_path / "kafka-4.3.1-kafka20734"
    assert fix.main(["--out", str(home)]) == 0
    printed = capsys.readouterr().out
    # the probe's answers, original -> patched: only a partition without a registered leader changes
    assert ("no-leader empty -> noNode; leader-not-registered empty -> noNode; leader-registered node 3 -> node 3; "
            "unknown-partition empty -> empty; unknown-topic empty -> empty") in printed
    assert f"kafkacheck conform --spawn kafka --kafka-home {home} --brokers 3" in printed
    originals = {j.name for j in kafka_dist.libs.glob("*.jar")}
    assert {j.name for j in (home / "libs").glob("*.jar")} == originals
    out = tmp_path / "o"
    assert main(["conform", "--spawn", "kafka", "--brokers", "1", "--kafka-home", str(home), "--cases",
                 "produce-offsets-dense", "--workload", "none", "--out", str(out)]) == 0
    assert json.loads((out / "report.json").read_text())["target_version"] == f"Apache Kafka 4.3.1 (from {home})"
