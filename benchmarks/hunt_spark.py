"""A minute of swarm hunt as Spark tasks against the same minute with local processes.

    python benchmarks/hunt_spark.py [--seconds S] [--slots N] [--ops N] [--spark-first]
    python benchmarks/hunt_spark.py --per-run


Runs ``kafkacheck hunt --time-limit S --jobs N`` (N forked processes) and then
``kafkacheck hunt --time-limit S --spark local[N]`` (N Spark task slots on this machine), each
as a user does (a fresh process, the correct engine, nothing found, so each hunts the whole
minute), and prints side by side: the runs each made within its S seconds (the hunt's own
clock, which starts once Spark is up), runs a minute, their ratio, the command's whole wall
time (the Spark one includes starting the JVM and its Python workers), and the runs by
workload (the steering picks the seeds from the results as they come, so the two mixes
differ a little). Measure with nothing else running: the two share the machine's cores.

``--per-run`` measures what one run costs each way instead, free of the steering and of the
load's drift between two minutes: the same swarm seeds, one at a time after a warm-up run, in
a process of a ``multiprocessing`` pool (as ``--jobs`` runs them), as Spark tasks in
``local[1]`` (each task's own seconds, as the hunt reports them) and in this process.
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


PER_RUN_SEEDS = (0, 1, 2, 3, 5, 8, 9, 10)


def _timed(seed: int, ops: int) -> float:
    from kafkacheck.swarm_hunt import _swarm_run

    t = time.perf_counter()
    _swarm_run((seed, ops, None))
    return time.perf_counter() - t


def per_run(ops: int) -> None:
    import multiprocessing as mp

    from kafkacheck.hunt_tasks import _remote
    from kafkacheck.swarm_hunt import _swarm_run
    from spark_analysis.pool import SparkTaskPool
    from spark_analysis.session import get_spark

    rows = {}
    with mp.get_context("fork").Pool(1) as pool:
        pool.apply(_timed, (99, ops))
        rows["multiprocessing pool"] = [pool.apply(_timed, (s, ops)) for s in PER_RUN_SEEDS]
    spark = get_spark(master="local[1]", app_name="kafkacheck-bench")
    try:
        tasks = SparkTaskPool(spark)
        tasks.apply_async(_remote, (_swarm_run, (99, ops, None))).get()
        rows["Spark task, local[1]"] = [tasks.apply_async(_remote, (_swarm_run, (s, ops, None))).get()[1]
                                        for s in PER_RUN_SEEDS]
    finally:
        spark.stop()
    _timed(99, ops)
    rows["this process"] = [_timed(s, ops) for s in PER_RUN_SEEDS]
    print(f"swarm seeds {', '.join(map(str, PER_RUN_SEEDS))} ({ops} ops), seconds a run and in all")
    for name, ts in rows.items():
        print(f"{name:<22} {' '.join(f'{t:5.2f}' for t in ts)}  all {sum(ts):6.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60, help="hunting seconds each (default 60)")
    ap.add_argument("--slots", type=int, default=2, help="processes, and Spark task slots (default 2)")
    ap.add_argument("--ops", type=int, default=None, help="ops a run (default: the swarm's, 2000)")
    ap.add_argument("--spark-first", action="store_true",
                    help="the Spark hunt first (a load that changes during the measurement shows as a "
                         "ratio that moves with the order)")
    ap.add_argument("--per-run", action="store_true", help="the cost of one run each way (see above)")
    args = ap.parse_args()
    if args.per_run:
        per_run(args.ops or 2000)
        return 0
    engines = {"local": ["--jobs", str(args.slots)], "spark": ["--spark", f"local[{args.slots}]"]}
    order = ["spark", "local"] if args.spark_first else ["local", "spark"]
    rows = {name: hunt(engines[name], args.seconds, args.ops) for name in order}
    rows = {name: rows[name] for name in ("local", "spark")}
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
