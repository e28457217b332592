"""Hunt speed: runs per minute per workload, this checkout against another commit, side by side.

    python benchmarks/hunt_speed.py [--before REF] [--seeds K] [--ops N]

A hunt's power is its runs per minute. For each workload this runs the same K seeds (a hunt's
run: simulate, write the run directory, judge it) with the code of commit REF (default: the
parent of the first commit of the hunting-power work, ``0943f12``) and with this checkout,
alternating the two so that a busy moment hurts both alike, and prints runs per minute for
each and their ratio. It also checks that both wrote byte-identical history.jsonl and
events.jsonl for every seed (a speed-up must not change a single run). REF is checked out
into a temporary git worktree, removed at the end. Measure with nothing else running.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ("queue", "idempotent", "txn", "eos", "groups", "compaction")
OPS = {"txn": 500, "eos": 500}

# one run in a fresh interpreter of the given tree: prints its wall time and the hashes
ONE_RUN = r"""
import hashlib, json, sys, tempfile, time
# an editable install redirects imports of kafkacheck to its own checkout: use the tree given
sys.meta_path = [f for f in sys.meta_path if "editable" not in type(f).__module__]
sys.path.insert(0, sys.argv[4])
from pathlib import Path
t0 = time.perf_counter()
from kafkacheck.corpus import judge
from kafkacheck.runner import RunOptions, simulate
from traces.parquet import load_run_dir
workload, seed, ops = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = Path(tempfile.mkdtemp())
t1 = time.perf_counter()
simulate(RunOptions(seed=seed, ops=ops, workload=workload), d)
judge(load_run_dir(d))
t2 = time.perf_counter()
h = {f: hashlib.sha256((d / f).read_bytes()).hexdigest() for f in ("history.jsonl", "events.jsonl")}
import kafkacheck.runner
print(json.dumps({"seconds": t2 - t1, "hashes": h, "code": kafkacheck.runner.__file__}))
"""


def one(tree: Path, workload: str, seed: int, ops: int) -> dict:
    r = subprocess.run([sys.executable, "-c", ONE_RUN, workload, str(seed), str(ops), str(tree)], cwd=tree,
                       env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"},
                       capture_output=True, text=True, check=True)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if not Path(out["code"]).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the run meant for {tree} imported {out['code']}: not a fair comparison")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="0943f12", help="the commit to compare with (default 0943f12)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per workload (default 3)")
    ap.add_argument("--ops", type=int, default=2000, help="ops a run (default 2000; txn and eos 500)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    args = ap.parse_args()
    workloads = [w for w in args.workloads.split(",") if w]
    with tempfile.TemporaryDirectory() as tmp:
        before = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "--detach", str(before), args.before], cwd=ROOT,
                       check=True, capture_output=True)
        try:
            print(f"{'workload':<12} {'ops':>5} {'runs/min ' + args.before:>18} {'runs/min now':>14} "
                  f"{'ratio':>6}  same bytes")
            for w in workloads:
                ops = min(args.ops, OPS.get(w, args.ops))
                t_before = t_now = 0.0
                same = True
                for seed in range(args.seeds):
                    b = one(before, w, seed, ops)
                    n = one(ROOT, w, seed, ops)
                    t_before += b["seconds"]
                    t_now += n["seconds"]
                    same &= b["hashes"] == n["hashes"]
                rb, rn = 60 * args.seeds / t_before, 60 * args.seeds / t_now
                print(f"{w:<12} {ops:>5} {rb:>18.1f} {rn:>14.1f} {rn / rb:>5.2f}x  "
                      f"{'yes' if same else 'NO'}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT,
                           capture_output=True)
    return 0


if __name__ == "__main__":
    start = time.monotonic()
    code = main()
    print(f"({time.monotonic() - start:.0f} s)")
    sys.exit(code)
