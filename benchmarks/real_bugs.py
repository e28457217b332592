"""Real bugs in real Kafka: each configuration of docs/measurements/real-bugs.md, run
``--tries`` times, and whether (and when) kafkacheck found the bug.

    python benchmarks/real_bugs.py [--tries 3] [--only SUBSTRING] [--out DIR [--resume]]

Each row is one ``kafkacheck conform`` command (printed with the table); each try runs it to
its end. A try "found" the bug when the workload's checker reported anomalies; its minutes are
when the evidence was complete: for the earliest anomaly, the time of the latest operation
it cites, counted from the start of the workload. Rows that expect "found" must find
the bug in more than half their tries (2 of 3), rows that expect "clean" nothing in any.
Prints a Markdown table and writes every try to ``DIR/real-bugs.json``; run directories stay
in ``DIR`` (default: a new temporary directory); ``--resume`` keeps the tries an earlier,
interrupted run recorded in ``DIR/real-bugs.json`` and runs only the ones missing. Needs
Java 17+ and Maven (Apache Kafka's jars, the Java client), and root with nftables for last-replica-standing (network
namespaces). About 4 hours for three tries of every row on a 2-core machine (10 minutes a
try of a transactional row, 2.5 of a last-replica-standing one).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Row:
    bug: str
    setup: str
    expect: str  # "found" or "clean"
    args: tuple[str, ...]
    seconds: int
    workload: str

    def argv(self, out: Path) -> list[str]:
        return ["conform", *self.args, "--cases", "none", "--workload", self.workload,
                "--workload-seconds", str(self.seconds), "--out", str(out)]


STRAGGLE = ("--faults", "straggle")
LRS = ("--spawn", "kafka", "--brokers", "3", "--faults", "last-replica-standing")
ROWS = [
    Row("KAFKA-17754", "kafka-python 3.0, Kafka 4.3.1 defaults", "found",
        ("--spawn", "kafka", "--brokers", "3", "--client", "kafka-python", *STRAGGLE), 600, "txn"),
    Row("KAFKA-17754", "confluent-kafka (librdkafka 2.16), Kafka 4.3.1 defaults", "found",
        ("--spawn", "kafka", "--brokers", "3", "--client", "confluent", *STRAGGLE), 600, "txn"),
    Row("KAFKA-17754", "Java client 4.3.1, Kafka 4.3.1 formatted with transaction.version=1", "found",
        ("--spawn", "kafka", "--brokers", "3", "--client", "java", "--feature", "transaction.version=1", *STRAGGLE),
        600, "txn"),
    Row("KAFKA-17754", "Java client 4.3.1, Kafka 4.3.1 defaults (transaction.version=2)", "clean",
        ("--spawn", "kafka", "--brokers", "3", "--client", "java", *STRAGGLE), 600, "txn"),
    Row("last replica standing", "Kafka 4.3.1 formatted with eligible.leader.replicas.version=0", "found",
        (*LRS, "--feature", "eligible.leader.replicas.version=0"), 120, "queue"),
    Row("last replica standing", "Kafka 3.9.1 (no eligible leader replicas)", "found",
        (*LRS, "--kafka-version", "3.9.1"), 120, "queue"),
    Row("last replica standing", "Kafka 4.3.1 defaults (eligible leader replicas on)", "clean", LRS, 120, "queue"),
    Row("txn-unfenced-requests", "Java client 4.3.1, reference broker with --bug txn-unfenced-requests", "found",
        ("--spawn", "reference", "--brokers", "3", "--client", "java", "--bug", "txn-unfenced-requests", *STRAGGLE),
        600, "txn"),
    Row("txn-unfenced-requests", "Java client 4.3.1, correct reference broker (transaction version 2)", "clean",
        ("--spawn", "reference", "--brokers", "3", "--client", "java", *STRAGGLE), 600, "txn"),
    Row("KAFKA-17754", "kafka-python 3.0, correct reference broker (transaction version 1, as Kafka)", "found",
        ("--spawn", "reference", "--brokers", "3", "--client", "kafka-python", *STRAGGLE), 600, "txn"),
]


# anomalies that only the final read after healing proves (what it did not find)
FINAL_READ_ANOMALIES = ("unread-after-heal", "lost-write")


def evidence_minutes(run_dir: Path, results: dict) -> float | None:
    """When the earliest anomaly's evidence was complete, in minutes from the workload's start:
    the latest operation it cites, or for an anomaly the final read proves, the end of that
    read."""
    times, start = {}, None
    for line in (run_dir / "history.jsonl").read_text().splitlines():
        op = json.loads(line)
        times[op["index"]] = op["time"]
        if op["process"] != "nemesis" and start is None:
            start = op["time"]  # the workload's first operation (after the topics were made)
    final = json.loads((run_dir / "run.json").read_text())["config"].get("final_read") or {}
    final_end = final.get("start_ns", 0) + final.get("took_ms", 0) * 1_000_000
    ends = []
    for kind, found in results.get("anomalies", {}).items():
        for a in found:
            cited = [times[i] for i in a.get("ops", []) if i in times]
            if kind in FINAL_READ_ANOMALIES:
                cited.append(final_end)
            if cited:
                ends.append(max(cited))
    return round((min(ends) - start) / 60e9, 1) if ends and start is not None else None


def one_try(row: Row, out: Path) -> dict:
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "kafkacheck", *row.argv(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:  # the workload, plus starting, healing and reading back: never a try that hangs the run
        _stdout, stderr = proc.communicate(timeout=row.seconds + 900)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # as Ctrl-C: kafkacheck stops its brokers and clients
        try:
            proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        return {"exit": None, "minutes": round((time.monotonic() - start) / 60, 1), "found": None, "anomalies": [],
                "error": f"did not end within {row.seconds + 900} s"}
    done = subprocess.CompletedProcess(proc.args, proc.returncode, _stdout, stderr)
    took = round((time.monotonic() - start) / 60, 1)
    run_dir = out / row.workload
    try:
        results = json.loads((run_dir / "results.json").read_text())
    except (OSError, ValueError):
        return {"exit": done.returncode, "minutes": took, "found": None, "anomalies": [],
                "error": (done.stderr.strip().splitlines() or ["no results"])[-1][:200]}
    kinds = results.get("anomaly_types", [])
    return {"exit": done.returncode, "minutes": took, "found": bool(kinds), "anomalies": kinds,
            "evidence_at_min": evidence_minutes(run_dir, results), "run_dir": str(run_dir)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tries", type=int, default=3)
    p.add_argument("--only", default="", help="rows whose bug or setup contains this")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--resume", action="store_true", help="keep the tries DIR/real-bugs.json has; run the rest")
    a = p.parse_args()
    if a.tries < 1:
        p.error("--tries must be at least 1")
    if a.resume and a.out is None:
        p.error("--resume needs --out DIR, the directory of the run to resume")
    out = a.out or Path(tempfile.mkdtemp(prefix="kafkacheck-real-bugs-"))
    out.mkdir(parents=True, exist_ok=True)
    recorded = json.loads((out / "real-bugs.json").read_text()) if a.resume and (out / "real-bugs.json").exists() \
        else []
    order = [row.setup for row in ROWS]
    recorded = [r for r in recorded if r["setup"] in order]  # rows since renamed are run again
    done = {r["setup"]: r["tries"] for r in recorded}
    rows = [r for r in ROWS if a.only.lower() in (r.bug + " " + r.setup).lower()]
    print(f"run directories in {out}", flush=True)
    report = [r for r in recorded if r["setup"] not in {row.setup for row in rows}]
    for row in rows:
        i = ROWS.index(row)
        tries = list(done.get(row.setup, []))
        entry = {"bug": row.bug, "setup": row.setup, "expect": row.expect,
                 "command": "kafkacheck " + shlex.join(row.argv(Path("runs/real-bugs"))), "tries": tries}
        report.append(entry)
        report.sort(key=lambda r: order.index(r["setup"]))
        for t in range(len(tries), a.tries):
            run = out / f"row{i}-try{t + 1}"
            shutil.rmtree(run, ignore_errors=True)  # what an interrupted try left
            result = one_try(row, run)
            tries.append(result)
            print(f"{row.bug} | {row.setup} | try {t + 1}: {result}", flush=True)
            (out / "real-bugs.json").write_text(json.dumps(report, indent=2) + "\n")
    for r in report:  # the evidence's time is a function of the run directory: computed again
        for t in r["tries"]:
            run_dir = Path(t.get("run_dir") or "/nonexistent")
            if t["found"] and (run_dir / "results.json").exists():
                t["evidence_at_min"] = evidence_minutes(run_dir, json.loads((run_dir / "results.json").read_text()))
    print()
    print("| bug | setup | expected | found in | minutes to the evidence | anomalies | as expected |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    ok = True
    for r in report:
        found = [t for t in r["tries"] if t["found"]]
        minutes = ", ".join(str(t["evidence_at_min"]) for t in found) or "-"
        kinds = sorted({k for t in found for k in t["anomalies"]})
        good = (2 * len(found) > len(r["tries"])) if r["expect"] == "found" else (not found and all(t["found"] is False
                                                                                   for t in r["tries"]))
        ok &= good
        print(f"| {r['bug']} | {r['setup']} | {r['expect']} | {len(found)} of {len(r['tries'])} | {minutes} | "
              f"{', '.join(kinds) or '-'} | {'yes' if good else 'NO'} |")
    print()
    for r in report:
        print(f"- {r['setup']}: `{r['command']}`")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
