"""A minute of swarm hunt as Spark tasks against the same minute with local processes.

    python benchmarks/hunt_spark.py [--seconds S] [--slots N] [--ops N]

Runs ``kafkacheck hunt --time-limit S --jobs N`` (N forked processes) and then
``kafkacheck hunt --time-limit S --spark local[N]`` (N Spark task slots on this machine), each
as a user does (a fresh process, the correct engine, nothing found, so each hunts the whole
minute), and prints side by side: the runs each made within its S seconds (the hunt's own
clock, which starts once Spark is up), runs a minute, their ratio, the command's whole wall
time (the Spark one includes starting the JVM and its Python workers), and the runs by
workload (the steering picks the seeds from the results as they come, so the two mixes
differ a little). Measure with nothing else running: the two share the machine's cores.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"nothing found on the engine in (\d+) swarm runs .*?; ([\d.]+) s, stopped by")


def hunt(extra: list[str], seconds: float, ops: int | None) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "kafkacheck", "hunt", "--time-limit", f"{seconds:g}", "--quiet",
               "--out", out, *extra, *(["--ops", str(ops)] if ops else [])]
        t = time.monotonic()
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - t
    m = SUMMARY.search(r.stdout)
    if r.returncode != 0 or m is None:
        log = Path(tempfile.mkdtemp()) / "hunt.log"
        log.write_text(r.stdout + "\n---- stderr\n" + r.stderr)
        raise SystemExit(f"{' '.join(cmd[2:])} exited {r.returncode}: its output is in {log}; "
                         f"the last line: {(r.stderr.strip() or r.stdout.strip()).splitlines()[-1][:300]}")
    workloads = re.search(r"runs by workload: (.*)", r.stdout)
    return {"command": "kafkacheck " + " ".join(cmd[3:cmd.index('--out')] + cmd[cmd.index('--out') + 2:]),
            "runs": int(m[1]), "seconds": float(m[2]), "wall": wall,
            "workloads": workloads[1] if workloads else "?"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60, help="hunting seconds each (default 60)")
    ap.add_argument("--slots", type=int, default=2, help="processes, and Spark task slots (default 2)")
    ap.add_argument("--ops", type=int, default=None, help="ops a run (default: the swarm's, 2000)")
    args = ap.parse_args()
    rows = {"local": hunt(["--jobs", str(args.slots)], args.seconds, args.ops),
            "spark": hunt(["--spark", f"local[{args.slots}]"], args.seconds, args.ops)}
    print(f"{'':<7} {'runs':>5} {'hunt s':>7} {'runs/min':>9} {'wall s':>7}  command")
    for name, r in rows.items():
        print(f"{name:<7} {r['runs']:>5} {r['seconds']:>7.1f} {60 * r['runs'] / r['seconds']:>9.1f} "
              f"{r['wall']:>7.1f}  {r['command']}")
    local, spark = (60 * rows[k]["runs"] / rows[k]["seconds"] for k in ("local", "spark"))
    print(f"spark / local runs a minute: {spark / local:.2f}")
    for name, r in rows.items():
        print(f"{name} runs by workload: {r['workloads']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
