"""``conform --kafka-version A,B,C``: the list checked before anything starts, the table of
verdicts and where in version order the verdict turns (kafkacheck/conform/matrix.py,
kafkacheck/commands/conform_matrix.py). The runs of real Kafka versions are ``slow``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kafkacheck.cli import main
from kafkacheck.conform.matrix import Row, bisect, matrix_exit, matrix_json, parse_versions, row_from_report
from kafkacheck.conform.report import Entry, Report


def _rows(verdicts: str) -> list[Row]:
    """``"3.9.1:pass 4.3.0:fail"`` as rows."""
    return [Row(v, verdict, ("hanging-transaction",) if verdict == "fail" else (), f"runs/{v}")
            for v, verdict in (item.split(":") for item in verdicts.split())]


# ---------------------------------------------------------------- the list


def test_the_versions_are_kept_in_the_order_given():
    assert parse_versions("4.4.0, 3.9.1,4.3.0") == ["4.4.0", "3.9.1", "4.3.0"]
    assert parse_versions("4.3.1") == ["4.3.1"]


@pytest.mark.parametrize("text, says", [
    ("4.2.2,4.3", "must look like 4.3.1, not '4.3'"),
    ("4.3.1,3.6.2", "3.7 or later"),
    ("4.3.1,4.4.0,4.3.1", "4.3.1 is listed twice"),
    ("4.3.1,,4.4.0", "an empty entry"),
    ("4.3.1,latest", "not 'latest'"),
])
def test_one_bad_entry_refuses_the_whole_list(text, says):
    with pytest.raises(ValueError, match=says):
        parse_versions(text)


@pytest.mark.parametrize("args, says", [
    (["--spawn", "kafka", "--kafka-version", "4.2.2,4.3"], "not '4.3'"),
    (["--spawn", "kafka", "--kafka-version", "3.6.2,4.3.1"], "3.7 or later"),
    (["--spawn", "kafka", "--kafka-version", "4.3.1,4.3.1"], "listed twice"),
    (["--spawn", "reference", "--kafka-version", "4.2.2,4.3.1"], "goes with --spawn kafka or --client java"),
    (["--spawn", "kafka", "--kafka-version", "3.8.1,4.3.1", "--feature", "transaction.version=1"], "3.8.1 cannot"),
])
def test_a_bad_list_is_one_line_and_exit_3_before_anything_starts(tmp_path, capsys, args, says):
    code = main(["conform", *args, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and len(err) == 1 and says in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "o").exists()


@pytest.mark.kafka
def test_a_version_maven_central_lacks_refuses_the_list_before_the_others_run(kafka_dist, tmp_path, capsys):
    code = main(["conform", "--spawn", "kafka", "--brokers", "1", "--kafka-version", "4.3.1,9.9.9",
                 "--workload", "none", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and len(err) == 1 and "Apache Kafka 9.9.9 is not on Maven Central" in err[0], err
    assert not (tmp_path / "o" / "4.3.1").exists()  # 4.3.1 (listed first, and cached) did not start


# ---------------------------------------------------------------- the table


def test_a_regression_names_the_first_failing_version_and_the_last_passing_before_it():
    rows = _rows("4.3.0:fail 3.9.1:pass 4.4.0:fail 4.2.2:pass 4.3.1:fail")  # in any order given
    b = bisect(rows)
    assert (b.first_failing, b.last_passing_before, b.monotonic) == ("4.3.0", "4.2.2", True)
    assert b.sentence == "first failing: 4.3.0; last passing before it: 4.2.2"
    assert matrix_exit(rows) == 1


def test_verdicts_that_are_not_monotonic_name_no_first_failing_version():
    b = bisect(_rows("3.9.1:pass 4.2.2:pass 4.3.0:fail 4.3.1:pass 4.4.0:fail"))
    assert (b.first_failing, b.last_passing_before, b.monotonic) == (None, None, False)
    assert b.sentence == ("the verdicts are not monotonic in version order (pass 3.9.1 to 4.2.2, fail 4.3.0, pass "
                          "4.3.1, fail 4.4.0): no single first failing version")
    assert not bisect(_rows("4.2.2:fail 4.3.0:pass")).monotonic  # fixed later: still not one turn to fail


def test_every_version_passing_or_failing_and_unusable_versions():
    assert bisect(_rows("4.2.2:pass 4.3.0:pass")).sentence == "every version passed (4.2.2 to 4.3.0)"
    all_fail = bisect(_rows("4.3.1:fail 4.3.0:fail"))
    assert (all_fail.first_failing, all_fail.last_passing_before) == ("4.3.0", None)
    assert all_fail.sentence == "first failing: 4.3.0; no version before it passed"
    rows = [*_rows("4.2.2:pass 4.3.1:fail"), Row("4.3.0", "unusable", (), "runs/4.3.0", "did not start")]
    b = bisect(rows)  # no verdict for 4.3.0: the turn is somewhere in 4.2.2..4.3.1
    assert (b.first_failing, b.last_passing_before) == ("4.3.1", "4.2.2")
    assert b.sentence.endswith("(no verdict for 4.3.0: unusable)")
    assert matrix_exit(rows) == 1
    assert matrix_exit([rows[0], rows[2]]) == 2 and matrix_exit([rows[0]]) == 0
    assert bisect([rows[2]]).sentence == "no version gave a verdict (no verdict for 4.3.0: unusable)"


def test_a_row_is_read_off_the_versions_report(tmp_path):
    report = Report("kafka", "127.0.0.1:9092", "kafka-python", "2026-11-27T00:00:00+00:00", {})
    report.entries += [
        Entry("case", "produce-offsets-dense", "g", "s", "pass", "ok", 0.5),
        Entry("case", "fenced-producer", "g", "s", "error", "timed out", 20.0),
        Entry("workload", "txn", "g", "s", "fail", "anomalies", 30.0,
              {"run_dir": str(tmp_path / "txn"), "anomalies": {"hanging-transaction": [], "aborted-read": []}}),
    ]
    row = row_from_report("4.3.1", report, tmp_path)
    assert row == Row("4.3.1", "fail", ("case fenced-producer (error)", "aborted-read", "hanging-transaction"),
                      str(tmp_path / "txn"))
    report.unusable = "the broker stopped answering"
    assert row_from_report("4.3.1", report, tmp_path).verdict == "unusable"
    table = matrix_json([row], bisect([row]), "kafkacheck conform ...")
    assert table["versions"][0]["anomalies"] == list(row.anomalies) and table["first_failing"] == "4.3.1"
    assert json.loads(json.dumps(table))["exit"] == 1


# ---------------------------------------------------------------- real versions (slow)


@pytest.mark.kafka
@pytest.mark.slow
def test_a_two_version_matrix_runs_the_same_command_on_each(kafka_dist, tmp_path, capsys):
    out = tmp_path / "m"
    code = main(["conform", "--spawn", "kafka", "--brokers", "1", "--kafka-version", "4.3.1,4.2.2", "--cases",
                 "produce-offsets-dense", "--workload", "none", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    matrix = json.loads((out / "matrix.json").read_text())
    assert [(r["version"], r["verdict"]) for r in matrix["versions"]] == [("4.3.1", "pass"), ("4.2.2", "pass")]
    assert matrix["summary"] == "every version passed (4.2.2 to 4.3.1)" and matrix["exit"] == 0
    for version in ("4.3.1", "4.2.2"):
        report = json.loads((out / version / "report.json").read_text())
        assert report["target_version"] == f"Apache Kafka {version}"
        assert (out / version / "junit.xml").exists() and (out / version / "report.html").exists()
    assert printed.index("[1/2] Apache Kafka 4.3.1") < printed.index("[2/2] Apache Kafka 4.2.2")
    assert "every version passed (4.2.2 to 4.3.1)" in printed


@pytest.mark.kafka
@pytest.mark.slow
def test_ctrl_c_during_a_version_stops_the_matrix_with_no_verdict_for_it(kafka_dist, tmp_path):
    out = tmp_path / "m"
    (out / "4.3.1").mkdir(parents=True)
    (out / "matrix.json").write_text("{}")  # an earlier matrix's: it must not stand for this one
    (out / "4.3.1" / "report.json").write_text("{}")
    log = tmp_path / "out.txt"
    with log.open("w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "kafkacheck", "conform", "--spawn", "kafka", "--brokers", "1",
                                 "--kafka-version", "4.3.1,4.2.2", "--cases", "produce-offsets-dense", "--workload",
                                 "queue", "--workload-seconds", "120", "--faults", "", "--out", str(out)],
                                stdout=f, stderr=subprocess.STDOUT, text=True)
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end and "produce-offsets-dense: pass" not in log.read_text():
            time.sleep(0.2)
        time.sleep(3)  # the workload runs
        pressed = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(60)
        stopped_s = time.monotonic() - pressed
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert code == 130 and stopped_s < 30, text
    assert "interrupted during Apache Kafka 4.3.1: no verdict for it" in text and "[2/2]" not in text
    assert not (out / "matrix.json").exists() and not (out / "4.3.1" / "report.json").exists()
    procs = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()
    assert not [p for p in procs if str(out) in p and int(p.split()[0]) != os.getpid()]  # no broker left
