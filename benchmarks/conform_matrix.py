"""The conformance matrix: broker x client x case/workload, as measured, in Markdown.

    python benchmarks/conform_matrix.py                       # everything (about an hour)
    python benchmarks/conform_matrix.py --targets kafka:1,kafka:3 --clients java --workloads none

Each cell is one ``kafkacheck conform`` run (the cases with ``--workload none``; each workload
with ``--cases produce-offsets-dense`` and the default faults, Tansu with network faults only,
since its memory storage forgets everything on kill -9). Runs one at a time: the machine has
two cores, and the brokers' timings should not compete with each other. Prints the tables and
writes every report under --out.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from kafkacheck.workloads import WORKLOADS as REGISTRY

WORKLOADS = list(REGISTRY)  # every workload of kafkacheck run
TANSU_FAULTS = "client-partition,client-one-way,client-delay,client-drop"


def run(target: str, brokers: int, client: str, workload: str, out: Path) -> dict:
    cmd = [sys.executable, "-m", "kafkacheck.cli", "conform", "--spawn", target, "--client", client,
           "--workload", workload, "--out", str(out)]
    if target != "tansu":
        cmd += ["--brokers", str(brokers)]
    elif workload != "none":
        cmd += ["--faults", TANSU_FAULTS]
    if workload != "none":
        cmd += ["--cases", "produce-offsets-dense"]
    start = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - start
    try:
        report = json.loads((out / "report.json").read_text())
    except (OSError, ValueError):
        return {"exit": done.returncode, "seconds": seconds, "entries": [], "error": done.stderr.strip()[-300:]}
    return {"exit": done.returncode, "seconds": seconds, "entries": report["entries"],
            "version": report.get("target_version")}


def cell(entry: dict | None) -> str:
    if entry is None:
        return "-"
    status = entry["status"]
    if status == "pass":
        return "pass"
    return f"**{status}**" if status in ("fail", "error") else status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default="kafka:1,kafka:3,reference:3,tansu:1",
                    help="comma-separated target:brokers (default kafka:1,kafka:3,reference:3,tansu:1)")
    ap.add_argument("--clients", default="kafka-python,confluent,java")
    ap.add_argument("--workloads", default=",".join(WORKLOADS),
                    help="workloads to run per target and client ('none': only the cases)")
    ap.add_argument("--no-cases", action="store_true", help="skip the case runs")
    ap.add_argument("--out", default="runs/conform-matrix")
    args = ap.parse_args()
    targets = [(t.split(":")[0], int(t.split(":")[1])) for t in args.targets.split(",")]
    clients = args.clients.split(",")
    workloads = [w for w in args.workloads.split(",") if w and w != "none"]
    out = Path(args.out)
    results: dict[tuple[str, int, str], dict[str, dict]] = {}
    for target, brokers in targets:
        for client in clients:
            key = (target, brokers, client)
            cells: dict[str, dict] = {}
            if not args.no_cases:
                r = run(target, brokers, client, "none", out / f"{target}{brokers}-{client}-cases")
                print(f"{target} x{brokers} {client} cases: exit {r['exit']} in {r['seconds']:.0f} s", flush=True)
                for e in r["entries"]:
                    cells[e["name"]] = e
                cells["_version"] = {"status": r.get("version") or "?"}
            for w in workloads:
                r = run(target, brokers, client, w, out / f"{target}{brokers}-{client}-{w}")
                entry = next((e for e in r["entries"] if e["kind"] == "workload"), None)
                cells[w] = entry or {"status": "error", "evidence": r.get("error", "")}
                print(f"{target} x{brokers} {client} {w}: {cells[w]['status']} in {r['seconds']:.0f} s", flush=True)
            results[key] = cells
    names: list[str] = []  # the cases, in the order they ran
    for c in results.values():
        names += [n for n in c if not n.startswith("_") and n not in WORKLOADS and n not in names]
    columns = [f"{t} ({b}) {c}" for (t, b, c) in results]
    print()
    print("| case / workload | " + " | ".join(columns) + " |")
    print("| --- | " + " | ".join("---" for _ in columns) + " |")
    for name in names + workloads:
        print(f"| {name} | " + " | ".join(cell(results[k].get(name)) for k in results) + " |")
    print()
    print("versions: " + "; ".join(f"{t} ({b}): {results[(t, b, c)].get('_version', {}).get('status', '?')}"
                                   for (t, b, c) in results))
    for key, cells in results.items():
        for name, e in cells.items():
            if not name.startswith("_") and e.get("status") in ("fail", "error"):
                print(f"- {key[0]} ({key[1]}) {key[2]} {name}: {e.get('evidence', '')[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
