"""Start-up: each command imports what it needs and no more (issue 35: ``kafkacheck --help``,
``lin FILE`` and ``check DIR`` start in well under 0.15 s). Measured by the modules a command
imports (``python -X importtime``), never by the clock; ``benchmarks/startup.py`` prints the
times."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ETCD = ROOT / "tests" / "data" / "porcupine_data" / "jepsen" / "etcd_000.log"

# what no quick command may import: Parquet, Spark, the served cluster and the wire codec, the
# simulated engine and its workloads, the solver, the state machines, the client libraries
HEAVY = ("pyarrow", "pyspark", "reference.server", "kafka", "confluent_kafka", "reference.broker",
         "fault_injection.simulation", "fault_injection.nemesis", "kafkacheck.workloads",
         "kafkacheck.runner", "z3", "hypothesis", "edn_format", "matplotlib")


def imported(args: list[str]) -> tuple[set[str], subprocess.CompletedProcess]:
    """The modules ``kafkacheck ARGS`` imports, as ``python -X importtime`` lists them."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "kafkacheck", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    names = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines()
             if line.startswith("import time:") and "|" in line}
    names.discard("imported package")  # importtime's header line
    return names, proc


def heavy(names: set[str]) -> list[str]:
    return sorted(n for n in names if any(n == h or n.startswith(h + ".") for h in HEAVY))


@pytest.fixture(scope="module")
def tiny_history(tmp_path_factory) -> Path:
    """The benchmark's history of a few sends and a poll, as a client anywhere records one."""
    spec = importlib.util.spec_from_file_location("startup", ROOT / "benchmarks" / "startup.py")
    benchmark = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(benchmark)
    path = tmp_path_factory.mktemp("tiny") / "history.jsonl"
    benchmark.tiny_history(path)
    return path


def test_help_imports_no_command():
    names, proc = imported(["--help"])
    assert proc.returncode == 0 and "model-check" in proc.stdout
    commands = sorted(n for n in names if n.startswith("kafkacheck.commands."))
    assert commands == [], commands
    assert not [n for n in names if n.split(".")[0] in ("reference", "properties", "traces",
                                                        "fault_injection", "linearizability")]


def test_lin_imports_only_the_search():
    names, proc = imported(["lin", str(ETCD), "--model", "register"])
    assert proc.returncode == 1, proc.stderr[-2000:]  # etcd_000 is one of porcupine's illegal ones
    assert "linearizability.checker" in names
    assert heavy(names) == []
    assert "properties.checker" not in names and "networkx" not in names


def test_check_imports_only_the_checker(tiny_history):
    names, proc = imported(["check", str(tiny_history)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "properties.checker" in names
    assert heavy(names) == []


def test_a_bad_input_is_still_one_line(tmp_path):
    """Errors are recognised without importing the modules that define them."""
    bad = tmp_path / "history.jsonl"
    bad.write_text("{not json\n")
    _, proc = imported(["check", str(bad)])
    err = [line for line in proc.stderr.splitlines() if not line.startswith("import time:")]
    assert proc.returncode == 3 and len(err) == 1 and err[0].startswith("kafkacheck: error:"), err
