"""The kafkacheck command: verdicts, run directories, exit codes, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kafkacheck.cli import main


def kc(*args):
    # as from a script or CI: no terminal, and no COLUMNS (a plugin of the test session sets it)
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run([sys.executable, "-m", "kafkacheck.cli", *args],
                          capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "r"
    code = main(["run", "--seed", "4", "--ops", "1200", "--no-progress", "--out", str(out)])
    return code, out


def test_run_writes_the_run_directory_and_a_valid_verdict(small_run):
    code, out = small_run
    assert code == 0
    for name in ("run.json", "history.jsonl", "events.jsonl", "results.json", "schedule.json"):
        assert (out / name).exists(), name
    meta = json.loads((out / "run.json").read_text())
    assert meta["seed"] == 4 and meta["target"] == "sim" and meta["config"]["acks"] == "all"
    results = json.loads((out / "results.json").read_text())
    assert results["valid"] is True
    assert results["stats"]["nemesis_ops"] > 0
    assert meta["config"]["final_read"]["reached_end"] is True


def test_check_rereads_a_run_directory_and_a_history_file(small_run):
    _code, out = small_run
    p = kc("check", str(out))
    assert p.returncode == 0, p.stderr
    assert "valid" in p.stdout
    p = kc("check", str(out / "history.jsonl"), "--format", "json")
    assert p.returncode == 0 and json.loads(p.stdout)["valid"] is True


def test_a_scripted_schedule_replays(small_run, tmp_path):
    _code, out = small_run
    p = kc("run", "--seed", "4", "--ops", "1200", "--no-progress", "--out", str(tmp_path / "x"),
           "--schedule", str(out / "schedule.json"))
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "x" / "history.jsonl").read_bytes() != b""


def test_a_malformed_history_is_exit_3_with_one_line(tmp_path):
    h = tmp_path / "history.jsonl"
    h.write_text('{"index":0,"time":1,"process":0,"type":"invoke","f":"poll","value":[["poll"]]}\n'
                 "garbage\n")
    p = kc("check", str(h))
    assert p.returncode == 3
    assert p.stderr.count("\n") == 1 and f"{h}:2: not valid JSON" in p.stderr
    assert "Traceback" not in p.stderr


@pytest.mark.parametrize("args", [
    ["run", "--bug", "no-such-bug"],
    ["run", "--faults", "meteor"],
    ["run", "--ops", "0"],
    ["run", "--flush-ms", "0"],
    ["run", "--workload", "idempotent", "--acks", "1"],
    ["run", "--workload", "nonsense"],
    ["run", "--brokers", "2", "--replication-factor", "3"],
    ["run", "--acks", "2"],
    ["run", "--seed", "abc"],
    ["run", "--schedule", "/nonexistent/schedule.json"],
    ["run", "--workload", "queue", "--group-protocol", "consumer"],  # no group to join
    ["run", "--workload", "groups", "--group-protocol", "consumer", "--assignor", "cooperative-sticky"],
    ["run", "--workload", "groups", "--assignor", "uniform"],  # the consumer protocol's, not classic's
    ["run", "--group-protocol", "cooperative"],
    ["check", "/nonexistent/run"],
    ["run", "--ops", "10", "--out", "/proc/not-writable"],
    ["frobnicate"],
])
def test_bad_options_are_exit_3_without_a_traceback(args):
    p = kc(*args)
    assert p.returncode == 3, (args, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    assert "error" in p.stderr


def test_help_names_every_bug_switch_and_fault():
    p = kc("run", "--help")
    for name in ("truncate-to-high-watermark", "hw-without-epoch-check", "unclean-election",
                 "ack-before-isr", "no-sequence-check", "idempotent", "partition", "kill",
                 "pause", "disk", "clock-skew"):
        assert name in p.stdout


def test_flushing_brokers_write_fsync_events(tmp_path):
    out = tmp_path / "f"
    p = kc("run", "--seed", "2", "--ops", "600", "--flush-ms", "100", "--flush-messages", "5",
           "--no-progress", "--out", str(out))
    assert p.returncode == 0, p.stdout + p.stderr
    events = (out / "events.jsonl").read_text()
    assert '"kind":"fsync"' in events
    assert json.loads((out / "run.json").read_text())["config"]["flush_ms"] == 100


def test_run_help_names_every_workload_readably(capsys):
    from kafkacheck.workloads import WORKLOADS

    with pytest.raises(SystemExit) as e:
        main(["run", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "option_strings" not in out and "about 15% aborted" in " ".join(out.split())
    for name in WORKLOADS:
        assert f"{name}:" in out


JEPSEN_G1C = ('{:index 0, :time 0, :process 0, :type :invoke, :f :txn, :value [[:send :x :a] [:poll]]}\n'
              '{:index 1, :time 1, :process 1, :type :invoke, :f :txn, :value [[:send :y :b] [:poll]]}\n'
              '{:index 2, :time 2, :process 0, :type :ok, :f :txn, :value [[:send :x [0 :a]] [:poll {:y [[0 :b]]}]]}\n'
              '{:index 3, :time 3, :process 1, :type :ok, :f :txn, :value [[:send :y [0 :b]] [:poll {:x [[0 :a]]}]]}\n')


def test_import_jepsen_then_check(tmp_path):
    edn = tmp_path / "history.edn"
    edn.write_text(JEPSEN_G1C)
    r = kc("import-jepsen", str(edn), "--out", str(tmp_path / "run"))
    assert r.returncode == 0 and "imported 4 ops" in r.stderr
    r = kc("check", str(tmp_path / "run"), "--format", "json")
    result = json.loads(r.stdout)
    assert r.returncode == 1 and result["anomaly_types"] == ["G1c"]
    assert (tmp_path / "run" / "results.json").exists()
    r = kc("check", str(tmp_path / "run"), "--cycle-budget", "0")
    assert r.returncode == 3 and "Traceback" not in r.stderr
    # the README's one-step form
    r = kc("import-jepsen", str(edn), "--out", str(tmp_path / "run2"), "--check")
    assert r.returncode == 1 and "G1c" in r.stdout and "Traceback" not in r.stderr, r.stderr


def test_bad_edn_and_non_unique_values_are_one_line_errors(tmp_path):
    edn = tmp_path / "bad.edn"
    edn.write_text("{:type :ok, :f :send, :value [[:send :x")
    r = kc("import-jepsen", str(edn), "--out", str(tmp_path / "o"))
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    hist = tmp_path / "history.jsonl"
    ops = [{"index": i, "time": i, "process": p, "type": t, "f": "send",
            "value": [["send", "x", [i, 1] if t == "ok" else 1]]}
           for i, (p, t) in enumerate([(0, "invoke"), (0, "ok"), (1, "invoke"), (1, "ok")])]
    hist.write_text("".join(json.dumps(o) + "\n" for o in ops))
    r = kc("check", str(hist))
    assert r.returncode == 3 and "unique" in r.stderr and "Traceback" not in r.stderr


def test_hunt_finds_a_planted_bug_and_shrinks_it(tmp_path):
    r = kc("hunt", "--bug", "ack-before-isr", "--time-limit", "120", "--jobs", "1", "--quiet", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == "passed: 1 switch detected"  # the verdict first
    # piped, the table is as wide as its cells: the anomaly's name is whole (it was cut to
    # eight characters at 80 columns)
    assert [line for line in r.stdout.splitlines() if "│ ack-before-isr │ yes" in line and "invariant-violation" in line]
    assert "ack-before-isr: reproduce with: kafkacheck run --seed" in r.stdout
    # the finding is saved as a run directory, which --replay makes again byte for byte
    [saved] = tmp_path.glob("finding-seed*-queue-ack-before-isr-*")
    assert f"(saved: kafkacheck run --replay {saved})" in r.stdout
    assert main(["run", "--replay", str(saved), "--no-progress"]) == 1


def test_hunt_machines_are_judged_by_a_budget_of_derandomized_programs(tmp_path):
    """The same programs on every machine: a switch its machine does not find within
    --machine-programs is missed, whatever the clock says."""
    def hunt(*args):
        return subprocess.run([sys.executable, "-m", "kafkacheck.cli", "hunt", "--jobs", "1", "--quiet",
                               "--machines", *args], capture_output=True, text=True, cwd=tmp_path)

    r = hunt("--bug", "ack-before-isr", "--machine-programs", "40")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ack-before-isr: machine queue: invariant 'acked-on-isr' broken" in r.stdout
    saved = tmp_path / "runs" / "hunt" / "hunt-ack-before-isr-queue.json"  # where runs go, not the cwd
    assert f"kafkacheck explore --replay {saved.relative_to(tmp_path)}" in r.stdout
    assert not list(tmp_path.glob("hunt-*.json"))
    assert main(["explore", "--replay", str(saved)]) == 1  # it finds it again
    # its seeds find it (seed 1), its machine not in its first program (it does in its second)
    r = hunt("--bug", "compaction-drops-latest", "--runs", "2", "--machine-programs", "1")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "compaction-drops-latest: machine compaction did not find it in 1 program\n" in r.stdout


PORCUPINE = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "porcupine_data"


def test_lin_checks_porcupine_files_with_exit_codes(tmp_path):
    p = kc("lin", str(PORCUPINE / "jepsen" / "etcd_002.log"))
    assert p.returncode == 0, p.stderr
    assert "ok" in p.stdout
    p = kc("lin", str(PORCUPINE / "kv" / "c10-bad.txt"), "--model", "kv-map", "--format", "json",
           "--html", str(tmp_path / "page.html"))
    assert p.returncode == 1, p.stderr
    out = json.loads(p.stdout)
    assert out["verdict"] == "illegal" and out["partitions"][0]["stuck_at"]["operation"].startswith("get(")
    assert (tmp_path / "page.html").read_text().startswith("<!doctype html>")


def test_lin_checks_a_run_directory(small_run):
    _code, out = small_run
    p = kc("lin", str(out), "--model", "partition-log")
    assert p.returncode == 0, p.stdout + p.stderr
    # the queue workload commits no offsets: nothing checked is not "ok"
    p = kc("lin", str(out), "--model", "committed-offsets")
    assert p.returncode == 1 and p.stdout.startswith("empty-history:"), p.stdout + p.stderr
    p = kc("check", str(out), "--lin", "--format", "json")
    assert p.returncode == 0 and json.loads(p.stdout)["valid"] is True
    lin = json.loads(p.stdout)["stats"]["linearizability"]
    assert lin["checked"] and lin["verdict"] == "ok" and lin["operations"] > 0
    p = kc("check", str(out), "--lin")
    assert p.returncode == 0 and "linearizability" in p.stdout and "ok:" in p.stdout, p.stdout


def test_lin_on_nothing_checkable_never_says_ok(tmp_path):
    empty = tmp_path / "history.jsonl"
    empty.write_text("")
    p = kc("lin", str(empty))
    assert p.returncode == 1 and "empty-history" in p.stdout, p.stdout + p.stderr
    logs = tmp_path / "jepsen.log"  # looks like an etcd log (jepsen.util), holds no operation
    logs.write_text("".join(f"2026-11-24 12:00:00 INFO jepsen.util - line {i}\n" for i in range(5000)))
    p = kc("lin", str(logs))
    assert p.returncode == 3 and "not a history" in p.stderr and "Traceback" not in p.stderr


def test_lin_bad_input_is_one_line_and_exit_3(tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    for args in (["lin", str(junk)], ["lin", str(tmp_path / "missing.log")],
                 ["lin", str(junk), "--timeout", "0"]):
        p = kc(*args)
        assert p.returncode == 3, (args, p.stdout, p.stderr)
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) <= 2


def test_check_keeps_what_only_the_run_knew(small_run, tmp_path):
    import shutil

    _code, out = small_run
    copy = tmp_path / "r"
    shutil.copytree(out, copy)
    before = json.loads((copy / "results.json").read_text())
    assert before["reproduce"] and before["stats"]["simulation"]
    assert kc("check", str(copy)).returncode == 0
    after = json.loads((copy / "results.json").read_text())
    assert after["reproduce"] == before["reproduce"]
    assert after["stats"]["simulation"] == before["stats"]["simulation"]


def test_runs_with_other_options_never_share_a_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--seed", "3", "--ops", "300", "--no-progress", "--format", "json"]) == 0
    assert main(["run", "--seed", "3", "--ops", "400", "--no-progress", "--format", "json"]) == 0
    dirs = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert len(dirs) == 2 and all(d.startswith("seed3-correct-") for d in dirs), dirs
    ops = {json.loads((tmp_path / "runs" / d / "results.json").read_text())["reproduce"] for d in dirs}
    assert len(ops) == 2
    # an explicit --out that holds a run made with other options is refused, not overwritten
    target = tmp_path / "runs" / dirs[0]
    before = (target / "history.jsonl").read_bytes()
    p = kc("run", "--seed", "3", "--ops", "500", "--no-progress", "--out", str(target))
    assert p.returncode == 3 and "other options" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert (target / "history.jsonl").read_bytes() == before


@pytest.mark.parametrize("args", [["run", "--seed", "abc"], ["bogus"], ["conform", "--client", "nope"],
                                  ["check"], ["lin", "x", "--iterations-max", "many"]])
def test_argument_errors_are_one_line_with_a_hint(args):
    p = kc(*args)
    assert p.returncode == 3 and "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("--help)"), p.stderr


def test_hunt_verdicts_count_runs_and_a_time_limit_is_unknown_not_missed():
    """Missed means none of --runs seeds failed: the same on any machine. The wall clock is a
    safety net whose expiry is "unknown" (exit 2), never "missed" (it once decided, issue 22)."""
    # group-unload-strands-joins: seed 0 of its scenario does not show it (seed 5 does)
    r = kc("hunt", "--bug", "group-unload-strands-joins", "--runs", "1", "--jobs", "1", "--quiet")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "NO" in r.stdout and "unknown" not in r.stdout
    assert r.stdout.splitlines()[0] == "FAILED: missed group-unload-strands-joins"
    # a limit no run can meet (a run takes a second or so): the first wait for a result expires it
    r = kc("hunt", "--bug", "compaction-drops-latest", "--runs", "500", "--time-limit", "0.001", "--jobs", "1",
           "--quiet")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "unknown: the" in r.stdout and "of 500 runs" in r.stdout
    assert r.stdout.splitlines()[0] == "unknown: the time limit cut compaction-drops-latest short"
    r = kc("hunt", "--runs", "0")
    assert r.returncode == 3 and len(r.stderr.strip().splitlines()) == 1
