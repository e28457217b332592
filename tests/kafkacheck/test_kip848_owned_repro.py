"""benchmarks/kip848_owned_repro.py: two KIP-848 members of Apache Kafka's Java client owning the
same partitions after one cut heartbeat of the member whose onPartitionsAssigned callback is
pending. Bad input is one line and exit 3; the reproductions (a spawned broker, the Java
client) are marked ``slow`` and ``kafka``: on the reference and on Apache Kafka 4.4.0 the cut
makes A's and B's assignment() overlap, and without the cut (the control) it does not."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("kip848_owned_repro", Path(__file__).resolve().parents[2] / "benchmarks" /
                                               "kip848_owned_repro.py")
repro = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(repro)


@pytest.mark.parametrize("args, says", [
    ([], "the following arguments are required: --broker"),
    (["--broker", "tansu"], "argument --broker: invalid choice: 'tansu'"),
    (["--broker", "reference", "--version", "4.4.0"], "--version is the Apache Kafka broker's"),
])
def test_bad_input_is_one_line_and_exit_3(tmp_path, capsys, args, says):
    assert repro.main([*args, "--work", str(tmp_path / "work")]) == 3
    _out, err = capsys.readouterr()
    assert len(err.strip().splitlines()) == 1 and says in err, err
    assert not (tmp_path / "work").exists()


def _run(capsys, tmp_path, *args: str) -> tuple[str, str]:
    assert repro.main([*args, "--work", str(tmp_path / "work")]) == 0
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.startswith("RESULT: ")]
    assert len(lines) == 1, out
    return lines[0], out


@pytest.mark.slow
@pytest.mark.kafka
@pytest.mark.parametrize("broker", [["--broker", "reference"], ["--broker", "kafka", "--version", "4.4.0"]],
                         ids=["reference", "kafka-4.4.0"])
def test_a_cut_heartbeat_makes_two_members_own_the_same_partitions(kafka_dist, tmp_path, capsys, broker):
    result, out = _run(capsys, tmp_path, *broker)
    assert result.startswith("RESULT: AFFECTED: partitions"), out
    # the evidence: A's retry after the cut says it owns nothing; its pending callback then gives it all four
    assert "A -> (cut by the proxy)" in out
    after_cut = out.split("A -> (cut by the proxy)", 1)[1]
    assert "A -> epoch=" in after_cut and "owned=[]" in after_cut.split("A -> epoch=", 1)[1].splitlines()[0], out
    assert "A's callbacks: [('assigned'," in out and "[0, 1, 2, 3])]; A's assignment(): [0, 1, 2, 3]" in out


@pytest.mark.slow
@pytest.mark.kafka
def test_without_the_cut_the_coordinator_keeps_the_partitions_from_b(kafka_dist, tmp_path, capsys):
    result, out = _run(capsys, tmp_path, "--broker", "reference", "--no-cut")
    assert result == "RESULT: NOT AFFECTED: A owns [0, 1, 2, 3], B owns []", out
