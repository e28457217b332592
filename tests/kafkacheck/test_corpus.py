"""kafkacheck corpus / extract / analyze."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from kafkacheck.cli import main
from kafkacheck.corpus import RunSpec, generate_local, generate_spark, plan
from traces.history import read_history
from traces.parquet import existing_runs


def test_plan_is_deterministic_distinct_and_normalised():
    a = plan(40, ["queue", "txn"], ["none", "kill", "pause"], ["all", "1"], [3, 2], ["unclean-election"], 100, False)
    b = plan(40, ["queue", "txn"], ["none", "kill", "pause"], ["all", "1"], [3, 2], ["unclean-election"], 100, False)
    assert a == b and len({s.run_id for s in a}) == 40
    assert all(s.acks == "all" for s in a if s.workload == "txn")   # transactions need acks=all
    assert {s.bug for s in a} == {None, "unclean-election"}
    g = plan(12, ["queue"], ["kill", "pause"], ["all"], [3], [], 100, True)
    assert [(s.faults, s.seed) for s in g[:4]] == [(("kill",), 0), (("pause",), 0), (("kill",), 1), (("pause",), 1)]


def test_local_generation_batches_files_and_resumes(tmp_path):
    specs = [RunSpec(seed=s, workload="queue", faults=("kill",), acks="all", replication_factor=3, bug=None, ops=60)
             for s in range(5)]
    out = generate_local(tmp_path, specs[:3], jobs=2, runs_per_file=2)
    assert out.written == 3 and not out.failures
    assert len(list((tmp_path / "ops").glob("part-*.parquet"))) == 2
    again = generate_local(tmp_path, specs, jobs=1, runs_per_file=2)
    assert (again.written, again.skipped, again.total_runs) == (2, 3, 5)
    v = pq.read_table(tmp_path / "runs").to_pylist()
    assert sorted(r["run_id"] for r in v) == sorted(s.run_id for s in specs)
    assert all(r["valid"] == "true" for r in v)   # the correct engine: every verdict valid


@pytest.mark.spark
def test_spark_engine_writes_the_same_runs(spark, tmp_path):
    specs = [RunSpec(seed=s, workload="txn", faults=(), acks="all", replication_factor=3, bug=None, ops=60)
             for s in range(3)]
    out = generate_spark(tmp_path / "s", specs, runs_per_file=2, master=None)
    local = generate_local(tmp_path / "l", specs, jobs=1, runs_per_file=2)
    assert out.written == local.written == 3
    a = pq.read_table(tmp_path / "s" / "ops").sort_by([("run_id", "ascending"), ("index", "ascending")])
    b = pq.read_table(tmp_path / "l" / "ops").sort_by([("run_id", "ascending"), ("index", "ascending")])
    assert a.equals(b)   # same seeds, same histories, whichever engine ran them


def test_from_runs_and_extract_give_back_the_history(tmp_path, capsys):
    for seed in (1, 2):
        assert main(["run", "--seed", str(seed), "--ops", "80", "--out", str(tmp_path / "runs" / f"r{seed}"),
                     "--no-progress"]) == 0
    assert main(["corpus", "--from-runs", str(tmp_path / "runs"), "--out", str(tmp_path / "c"), "--no-progress"]) == 0
    ids = sorted(existing_runs(tmp_path / "c"))
    assert len(ids) == 2
    assert main(["corpus", "--from-runs", str(tmp_path / "runs"), "--out", str(tmp_path / "c"), "--no-progress"]) == 0
    assert "0 runs written, 2 already there" in capsys.readouterr().out
    for rid in ids:
        assert main(["extract", str(tmp_path / "c"), rid, "--out", str(tmp_path / "x" / rid)]) == 0
        src = next(d for d in (tmp_path / "runs").iterdir()
                   if json.loads((d / "run.json").read_text())["run_id"] in (rid, rid.split("~")[0]))
        assert read_history(tmp_path / "x" / rid / "history.jsonl") == read_history(src / "history.jsonl")


@pytest.mark.parametrize("argv, message", [
    (["corpus", "--out", "{tmp}/c", "--workloads", "nope"], "unknown workload"),
    (["corpus", "--out", "{tmp}/c", "--bugs", "nope"], "unknown bug switch"),
    (["corpus", "--out", "{tmp}/c", "--runs", "0"], "--runs must be at least 1"),
    (["corpus", "--out", "{tmp}/c", "--from-runs", "{tmp}/missing"], "no such file"),
    (["extract", "{tmp}", "r1", "--out", "{tmp}/x"], "is not a corpus"),
    (["analyze", "{tmp}", "--out", "{tmp}/r"], "is not a corpus"),
])
def test_bad_input_is_one_line_and_exit_3(tmp_path, capsys, argv, message):
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 3
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.spark
def test_analyze_writes_the_report(spark, tmp_path, capsys):
    assert main(["corpus", "--runs", "16", "--out", str(tmp_path / "c"), "--ops", "150", "--jobs", "2",
                 "--bugs", "no-sequence-check,lso-off-by-one", "--workloads", "idempotent,txn",
                 "--no-progress"]) == 0
    assert main(["analyze", str(tmp_path / "c"), "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    r = tmp_path / "r"
    for name in ("index.html", "rate_by_fault.png", "heatmap.png", "agreement.csv", "rate_by_bug.md",
                 "bug_reveals.csv", "time_to_anomaly.csv"):
        assert (r / name).exists(), name
    page = (r / "index.html").read_text()
    assert "rate_by_fault.png" in page and "Spark findings vs per-run checker verdicts" in page
    import csv

    rows = list(csv.DictReader((r / "agreement.csv").open()))
    assert {row["family"] for row in rows} >= {"lost-write", "duplicate", "G0"}
    # the runs table's verdicts and Spark's duplicate detection agree run for run on this corpus
    dup = next(row for row in rows if row["family"] == "duplicate")
    assert dup["spark_only"] == dup["checker_only"] == "0"


def _children(pid: int) -> set[int]:
    out = set()
    for d in __import__("pathlib").Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.add(int(d.name))
    return out


@pytest.mark.spark
def test_analyze_interrupted_is_one_line_and_exit_130(tmp_path):
    """Ctrl-C in a terminal signals the whole process group: one line, exit 130, no report, no
    py4j or JVM traceback, and Spark's JVM gone with the driver."""
    import os
    import signal
    import subprocess
    import sys
    import time

    assert main(["corpus", "--runs", "6", "--out", str(tmp_path / "c"), "--no-progress"]) == 0
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "index.html").write_text("an earlier report")
    err = tmp_path / "err"
    with err.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "kafkacheck", "analyze", str(tmp_path / "c"), "--out",
                                 str(tmp_path / "r")], stdout=subprocess.DEVNULL, stderr=fh,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while "detect" not in err.read_text() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, err.read_text()
        jvms = _children(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(30) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    text = err.read_text()
    tail = text[text.index("detect"):]
    assert "Traceback" not in tail and "ERROR" not in tail and "Exception" not in tail, tail
    assert "interrupted" in tail
    assert not (tmp_path / "r" / "index.html").exists()
    deadline = time.monotonic() + 20
    while any(Path(f"/proc/{p}").exists() for p in jvms) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert jvms and not any(Path(f"/proc/{p}").exists() for p in jvms)
