"""benchmarks/kafka20734_repro.py: KAFKA-20734 reproduced with Kafka's own tools and kafka-python.
Bad input is one line and exit 3, before anything starts; the reproduction itself (three nodes of
Apache Kafka 4.4.0, about two minutes) is marked ``slow`` and ``kafka``."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("kafka20734_repro", Path(__file__).resolve().parents[2] / "benchmarks" /
                                               "kafka20734_repro.py")
repro = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(repro)


def _no_tools_home(tmp_path: Path) -> Path:
    """A directory that looks like a Kafka distribution without the tools' jar."""
    libs = tmp_path / "kafka_2.13-4.4.0" / "libs"
    libs.mkdir(parents=True)
    for name in ("kafka_2.13-4.4.0.jar", "kafka-tools-api-4.4.0.jar", "log4j-slf4j-impl-2.25.3.jar"):
        (libs / name).touch()
    return libs.parent


@pytest.mark.parametrize("args, says", [
    (["--version", "4.4"], "--version must look like"),
    (["--version", "3.6.2"], "3.7 or later"),
    (["--version", "4.4.0", "--kafka-home", "."], "--version and --kafka-home: give one of them"),
    (["--kafka-home", "/no/such/kafka"], "no such directory"),
    (["--kafka-home", "NO_TOOLS"], "has no kafka-tools jar"),
    (["--brokers", "3"], "unrecognized arguments: --brokers 3"),
    (["--version"], "expected one argument"),
])
def test_bad_input_is_one_line_and_exit_3(tmp_path, capsys, args, says):
    args = [str(_no_tools_home(tmp_path)) if a == "NO_TOOLS" else a for a in args]
    assert repro.main([*args, "--work", str(tmp_path / "work")]) == 3
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and says in err, err
    assert not (tmp_path / "work").exists()


@pytest.mark.slow
@pytest.mark.kafka
def test_kafka_4_4_0_is_affected(kafka_dist, tmp_path, capsys):
    assert repro.main(["--version", "4.4.0", "--work", str(tmp_path / "work")]) == 0
    out = capsys.readouterr().out
    assert "\nRESULT: AFFECTED: commit_transaction() was acknowledged, but out-1's transaction stayed open" in out
    assert "the coordinator logged the skip; find-hanging listed it" in out
    assert "$ bin/kafka-topics.sh --bootstrap-server localhost:9092 --create --topic out --replica-assignment 1,2" in out
    assert "Couldn't find leader endpoint for partitions Set(out-1) while trying to send transaction markers for tx1" in out
    assert "client: out-1 last stable offset 0, high watermark 1; read_committed [], read_uncommitted ['a1']" in out
    assert "client: out-1 last stable offset 2, high watermark 2; read_committed [], read_uncommitted ['a1']" in out
    assert "client: out-0 last stable offset 2, high watermark 2; read_committed ['a0']" in out
