"""Which bug switches of the reference broker show over a real network, under faults between
its nodes (each node in a network namespace of its own; needs root), and in how long.

    python benchmarks/node_faults.py [--seconds 60] [--tries 3] [--faults isolate,split]
                                     [--switches unclean-election,...]

For each switch (and for none), runs ``kafkacheck conform --spawn reference --brokers 3
--bug SWITCH --cases produce-offsets-dense --workload queue --faults F --workload-seconds S``
up to ``--tries`` times, stopping at the first failing run, and prints a table: found or
not, in which try, after how many seconds of workload in all, and the anomalies. The run
directories stay in a temporary directory printed at the start.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SWITCHES = ["unclean-election", "hw-without-epoch-check", "truncate-to-high-watermark", "ack-before-isr",
            "txn-unfenced-requests"]


def run(switch: str | None, seconds: float, faults: str, out: Path) -> tuple[int, list[str], str]:
    workload = "txn" if switch == "txn-unfenced-requests" else "queue"
    argv = [sys.executable, "-m", "kafkacheck", "conform", "--spawn", "reference", "--brokers", "3",
            "--cases", "produce-offsets-dense", "--workload", workload, "--faults", faults,
            "--workload-seconds", str(seconds), "--out", str(out)]
    if switch:
        argv += ["--bug", switch]
    code = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True).returncode
    try:
        results = json.loads((out / workload / "results.json").read_text())
        kinds = results["anomaly_types"]
    except (OSError, ValueError, KeyError):
        kinds = []
    return code, kinds, workload


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--faults", default="isolate,split")
    ap.add_argument("--switches", default=",".join(SWITCHES))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kc-node-faults-"))
    print(f"run directories in {tmp}", file=sys.stderr, flush=True)
    rows = []
    for switch in [*[s for s in args.switches.split(",") if s], None]:
        name = switch or "(none)"
        found, kinds, tries, workload = False, [], 0, "queue"
        start = time.monotonic()
        for t in range(1, args.tries + 1):
            tries = t
            code, kinds, workload = run(switch, args.seconds, args.faults, tmp / f"{name}-{t}")
            print(f"  {name}: try {t}: exit {code} {kinds}", file=sys.stderr, flush=True)
            if code == 1:
                found = True
                break
        rows.append((name, workload, found, tries, time.monotonic() - start, kinds))
    print(f"\n| switch | workload | found | tries of {args.seconds:g} s | wall s | anomalies |")
    print("| --- | --- | --- | ---: | ---: | --- |")
    for name, workload, found, tries, wall, kinds in rows:
        print(f"| `{name}` | {workload} | {'yes' if found else 'no'} | {tries} | {wall:.0f} | "
              f"{', '.join(kinds) or '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
