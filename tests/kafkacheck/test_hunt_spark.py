"""`kafkacheck hunt --spark MASTER`: the seeds as Spark tasks give the local hunt's verdicts,
its first finding and its coverage marks; Ctrl-C stops it cleanly; without PySpark, one line."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkacheck import hunt_tasks, swarm_hunt

ROOT = Path(__file__).resolve().parents[2]
SEED_LINE = re.compile(r"^  (?:[\w-]+: seed|swarm seed) (\d+):? (True|INVALID [\w,-]+|[\w-]+) \(")


def kc(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkacheck", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def verdicts(stderr: str) -> dict[int, str]:
    """seed -> verdict, from a hunt's progress lines."""
    return {int(m[1]): m[2] for m in map(SEED_LINE.match, stderr.splitlines()) if m}


@pytest.mark.spark
def test_a_switch_is_found_at_the_local_hunts_seed(tmp_path):
    """group-unload-strands-joins: seeds 0-4 valid, seed 5 invalid; the Spark hunt reports
    seed 5 as the local one with two jobs does, with the same verdict for every seed both ran
    and the same shrunk reproduction."""
    args = ("hunt", "--bug", "group-unload-strands-joins", "--runs", "8")
    local = kc(*args, "--jobs", "2", "--out", str(tmp_path / "local"))
    spark = kc(*args, "--spark", "local[2]", "--out", str(tmp_path / "spark"))
    assert local.returncode == 0, local.stderr[-2000:]
    assert spark.returncode == 0, spark.stderr[-2000:]
    reproduce = [ln for ln in local.stdout.splitlines() if "reproduce with" in ln]
    assert reproduce and "--seed 5 " in reproduce[0]
    assert [ln.split(" (saved")[0] for ln in spark.stdout.splitlines() if "reproduce with" in ln] == \
        [reproduce[0].split(" (saved")[0]]
    lv, sv = verdicts(local.stderr), verdicts(spark.stderr)
    assert lv[5] == sv[5] == "INVALID unowned-partition"
    assert all(sv[s] == "True" for s in range(5)), spark.stderr
    assert {s: v for s, v in lv.items() if s in sv} == {s: v for s, v in sv.items() if s in lv}
    assert "task slots" in spark.stderr and "Traceback" not in spark.stderr


@pytest.mark.spark
def test_swarm_seeds_as_spark_tasks_give_the_local_verdicts_and_marks(spark):
    """One run in flight: the steering sees the results in the same order, so the Spark hunt
    runs the same seeds as the local one and gathers the same marks; two in flight (local[2]):
    the seeds may differ, each one's verdict may not."""
    switch = "truncate-to-high-watermark"  # at 300 ops: the 12th covering seed (296) fails

    def run(jobs, session):
        lines: list[str] = []
        out = swarm_hunt.swarm(600, 12, jobs, with_switch=switch, ops=300, log=lines.append, shrink=False,
                               spark=session)
        return out, verdicts("\n".join(lines))

    local, local_v = run(1, None)
    remote, remote_v = run(1, spark)
    assert remote_v == local_v and len(local_v) == local.runs >= 3
    assert (remote.mark_runs, remote.mark_counts, remote.by_workload, remote.found) == \
        (local.mark_runs, local.mark_counts, local.by_workload, local.found)
    assert local.found and local.mark_runs, local_v

    two, two_v = run(2, spark)
    assert two.runs == len(two_v) >= 2
    for seed, verdict in two_v.items():
        if seed not in local_v:
            _s, valid, kinds, _m, _w, _d, _c = swarm_hunt._swarm_run((seed, 300, switch))
            local_v[seed] = str(valid) if valid is not False else "INVALID " + ",".join(kinds)
        assert verdict == local_v[seed], seed


def test_a_worker_with_other_code_or_a_failed_task_is_one_line():
    from spark_analysis.pool import SparkTaskError

    class Handle:
        def __init__(self, value=None, error=None):
            self.value, self.error = value, error

        def ready(self):
            return True

        def get(self):
            if self.error:
                raise self.error
            return self.value

    hunt_tasks._Checked.driver_code = hunt_tasks.code_fingerprint()
    ok = hunt_tasks._Checked(Handle(("result", 1.5, hunt_tasks.code_fingerprint(), "worker-1")))
    assert ok.get() == "result" and hunt_tasks._where(ok) == "; task 1.5 s on worker-1"
    with pytest.raises(hunt_tasks.SparkWorkerError, match="worker-2 runs other kafkacheck code"):
        hunt_tasks._Checked(Handle(("result", 1.5, "0123456789abcdef", "worker-2"))).get()
    with pytest.raises(hunt_tasks.SparkWorkerError) as e:
        hunt_tasks._Checked(Handle(error=SparkTaskError("ModuleNotFoundError: No module named 'kafkacheck'"))).get()
    assert str(e.value).startswith("a Spark task failed: ModuleNotFoundError: No module named 'kafkacheck' (")
    assert "PYSPARK_PYTHON" in str(e.value) and "\n" not in str(e.value)


def test_the_error_line_of_a_failed_task():
    from spark_analysis.pool import first_error_line

    text = ("An error occurred while calling o57.collectToPython.\n"
            ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 0.0 failed\n"
            "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
            '  File "/x/worker.py", line 1, in main\n'
            "    func, profiler = read_command(pickleSer, infile)\n"
            "ModuleNotFoundError: No module named 'kafkacheck'\n"
            "\tat org.apache.spark.api.python.BasePythonRunner.handlePythonException(PythonRunner.scala:1)\n")
    assert first_error_line(Exception(text)) == "ModuleNotFoundError: No module named 'kafkacheck'"
    assert first_error_line(Exception("Could not parse Master URL: 'nowhere'\n\tat x")) == \
        "Could not parse Master URL: 'nowhere'"

    class Py4JError(Exception):  # a Py4JJavaError's first line names the call, its JVM exception the cause
        class java_exception:
            @staticmethod
            def toString():
                return "java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext.\n\tat x"

    assert first_error_line(Py4JError("An error occurred while calling None.org.apache.spark.sql.SparkSession.")) \
        == "java.lang.IllegalStateException: Cannot call methods on a stopped SparkContext."


def test_without_pyspark_spark_is_one_line_and_exit_3(tmp_path):
    code = ("import sys; sys.modules['pyspark'] = None\n"
            "from kafkacheck.cli import main\n"
            "sys.exit(main(['hunt', '--bug', 'ack-before-isr', '--spark', 'local[2]', '--out', sys.argv[1]]))")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 3
    assert r.stderr.strip().splitlines() == ["kafkacheck: error: --spark needs PySpark: pip install 'kafkacheck[spark]'"]
    assert kc("hunt", "--spark", "", "--runs", "1").returncode == 3


def _descendants(pid: int) -> set[int]:
    parent: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for child, par in parent.items():
            if par == p and child not in out:
                out.add(child)
                todo.append(child)
    return out


@pytest.mark.spark
def test_ctrl_c_stops_a_spark_hunt_at_once_with_no_verdict_and_no_jvm_left(tmp_path):
    err = tmp_path / "err"
    with err.open("w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "kafkacheck", "hunt", "--bug", "group-unload-strands-joins",
                                 "--runs", "60", "--spark", "local[2]", "--out", str(tmp_path)],
                                stdout=subprocess.PIPE, stderr=fh, text=True, cwd=ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not verdicts(err.read_text()) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
        assert proc.poll() is None, err.read_text()
        spawned = _descendants(proc.pid)  # the JVM and its Python workers
        os.killpg(proc.pid, signal.SIGINT)
        t = time.monotonic()
        assert proc.wait(30) == 130
        assert time.monotonic() - t < 15
        stdout = proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
    text = err.read_text()
    assert stdout == "", stdout  # no table, no verdict
    assert text.rstrip().endswith("kafkacheck: interrupted")
    assert "Traceback" not in text and "ERROR" not in text, text
    deadline = time.monotonic() + 20
    while any(Path(f"/proc/{p}").exists() for p in spawned) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert spawned and not any(Path(f"/proc/{p}").exists() for p in spawned)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.spark
def test_a_standalone_cluster_finds_the_switch_at_the_local_seed(tmp_path):
    """A Spark standalone master and one worker on 127.0.0.1 (the spark-class the pyspark package
    ships): executors in JVMs of their own, whose Python workers run the interpreter
    PYSPARK_PYTHON names; one that lacks kafkacheck fails the hunt with one line, exit 3."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    port = _free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp_path / "logs"),
           "SPARK_WORKER_DIR": str(tmp_path / "work")}
    env.pop("PYSPARK_PYTHON", None)
    log = (tmp_path / "daemons.log").open("w")
    master = subprocess.Popen([str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                               "--port", str(port), "--webui-port", str(_free_port())], env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    worker = subprocess.Popen([str(spark_class), "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                               "--cores", "2", "--memory", "2g", "--webui-port", str(_free_port()),
                               f"spark://127.0.0.1:{port}"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while "Successfully registered with master" not in (tmp_path / "daemons.log").read_text():
            assert time.monotonic() < deadline and worker.poll() is None, (tmp_path / "daemons.log").read_text()
            time.sleep(0.5)
        url = f"spark://127.0.0.1:{port}"
        args = [sys.executable, "-m", "kafkacheck", "hunt", "--bug", "group-unload-strands-joins", "--runs", "8",
                "--spark", url, "--out", str(tmp_path / "out")]
        r = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=600,
                           env={**env, "PYSPARK_PYTHON": sys.executable})
        assert r.returncode == 0, r.stderr[-2000:]
        assert verdicts(r.stderr).get(5) == "INVALID unowned-partition"
        assert all(verdicts(r.stderr)[s] == "True" for s in range(5))
        assert any("reproduce with: kafkacheck run --seed 5 " in ln for ln in r.stdout.splitlines())
        # a worker whose Python has PySpark but not kafkacheck: this interpreter without its site
        # hooks (the editable install's), with only its site-packages on the path
        bare = tmp_path / "python-without-kafkacheck"
        bare.write_text(f"#!/bin/sh\nPYTHONPATH={Path(pyspark.__file__).parent.parent} exec {sys.executable} -S \"$@\"\n")
        bare.chmod(0o755)
        r = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, timeout=600,
                           env={**env, "PYSPARK_PYTHON": str(bare)})
        assert r.returncode == 3, r.stderr[-2000:]
        last = r.stderr.strip().splitlines()[-1]
        assert last.startswith("kafkacheck: error: a Spark task failed: ModuleNotFoundError"), r.stderr[-2000:]
        assert "PYSPARK_PYTHON" in last and "Traceback" not in r.stderr
    finally:
        for p in (worker, master):
            p.terminate()
        for p in (worker, master):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
