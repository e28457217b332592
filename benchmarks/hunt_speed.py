"""Hunt speed: this checkout against another commit, side by side, in one run.

    python benchmarks/hunt_speed.py [--before REF] [--same-as REF] [--seeds K] [--ops N] [--swarm-repeat R]

A hunt's power is its runs per minute. This prints three tables, each measured with the code
of commit REF (default ``0943f12``, the parent of the first commit of the hunting-power
work) and with this checkout, alternating the two so that a busy moment hurts both alike:

1. the default run (``kafkacheck run``: the queue workload, 10,000 ops, default faults):
   the simulation's wall seconds and how much faster than real time it runs;
2. hunt runs per minute for each workload: a run as each tree's hunt does one (simulate, then
   judge: REF writes the run directory and reads it back, this checkout judges what it has
   in memory), each in a fresh interpreter;
3. the swarm hunt itself, ``--swarm-runs`` seeds in one worker process as a hunt runs them,
   with the code of ``--same-as`` (REF predates the swarm) and of this checkout; with
   ``--swarm-repeat R``, R times in each tree, alternately, the fastest counted (a hunt's wall
   time only grows with whatever else the machine does).

This checkout runs as pip installed it: with the compiled engine when pip compiled it from
these sources (``reference/compiled.py``; the tables say which), with its Python engine
under ``--python``. The commits compared with run their Python engines.
 "same bytes" compares the history.jsonl and events.jsonl of
every run with those of commit ``--same-as`` (default ``7fb72e4``, the last commit before the
speed-ups, whose engine behaves as this one does): a speed-up must not change a single byte.
Swarm-independent workloads only; REF itself may differ from both where this issue fixed the
engine (a group member that never looked its coordinator up again, two ELR elections).
Trees are checked out into temporary git worktrees, removed at the end. Measure with nothing
else running.
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
# set for a run of this checkout as pip installed it, its compiled engine included (see
# reference/compiled.py); unset, a script imports the code of the tree it is given
INSTALLED = "KAFKACHECK_BENCH_INSTALLED"


def use_tree(argv_index: int) -> str:
    """The first lines of a script run in a tree: the tree's code, which ``sys.argv[argv_index]``
    names, rather than the installed code (an editable install redirects imports to its own
    checkout), unless the run is of this checkout as installed; then ``ENGINE``: which engine."""
    return f"""
import os, sys
if not os.environ.get("{INSTALLED}"):
    sys.meta_path = [f for f in sys.meta_path if "editable" not in type(f).__module__]
    sys.path.insert(0, sys.argv[{argv_index}])
try:
    from reference.compiled import engine
    ENGINE = engine()[0]
except ImportError:  # a tree before the compiled engine
    ENGINE = "python"
"""


def tree_env(tree: Path, installed: bool = False) -> dict[str, str]:
    """The environment of a script run in ``tree`` (``installed``: this checkout as installed)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"}
    return {**env, INSTALLED: "1"} if installed else {**env, "PYTHONPATH": str(tree), "KAFKACHECK_ENGINE": "python"}
WORKLOADS = ("queue", "idempotent", "txn", "eos", "groups", "compaction")
OPS = {"txn": 500, "eos": 500}  # as the swarm draws them

# one run in a fresh interpreter of the given tree: prints its wall time and the hashes
ONE_RUN = use_tree(4) + r"""
import hashlib, json, tempfile, time
from pathlib import Path
try:
    from kafkacheck.judge import judge_record as judge
except ImportError:  # a tree before kafkacheck/judge.py
    from kafkacheck.corpus import judge
from kafkacheck.runner import RunOptions, simulate
import kafkacheck.cli, properties.checker  # what judging imports: once a process in a hunt's workers
workload, seed, ops, judged = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[5] == "1"
d = Path(tempfile.mkdtemp())
t0 = time.perf_counter()
outcome = simulate(RunOptions(seed=seed, ops=ops, workload=workload), d)
t1 = time.perf_counter()
if judged:
    if hasattr(outcome, "record"):
        judge(outcome.record())
    else:
        from traces.parquet import load_run_dir
        judge(load_run_dir(d))
t2 = time.perf_counter()
h = {f: hashlib.sha256((d / f).read_bytes()).hexdigest() for f in ("history.jsonl", "events.jsonl")}
import kafkacheck.runner
print(json.dumps({"simulate": t1 - t0, "run": t2 - t0, "virtual": outcome.stats["virtual_seconds"],
                  "hashes": h, "code": kafkacheck.runner.__file__, "engine": ENGINE}))
"""


# the swarm hunt in the given tree: its seeds, one worker process running them all
SWARM = use_tree(1) + r"""
import time
from kafkacheck.cli import main
t = time.perf_counter()
code = main(["hunt", "--runs", sys.argv[2], "--jobs", "1", "--time-limit", "3600", "--quiet"])
print("SECONDS", time.perf_counter() - t, code, ENGINE)
"""


def swarm(tree: Path, runs: int, installed: bool = False) -> float:
    r = subprocess.run([sys.executable, "-c", SWARM, str(tree), str(runs)], cwd=tree, env=tree_env(tree, installed),
                       capture_output=True, text=True)
    line = [x for x in r.stdout.splitlines() if x.startswith("SECONDS")]
    if not line:
        raise SystemExit(f"the swarm hunt in {tree} failed:\n{r.stdout[-1000:]}{r.stderr[-2000:]}")
    _, seconds, _, engine = line[-1].split()
    if installed:
        print(f"(now: the {engine} engine)")
    return float(seconds)


def no_compiled_engine() -> str:
    """Why this checkout as installed has no compiled engine of its sources ('' if it has one)."""
    check = subprocess.run([sys.executable, "-c", "from reference.compiled import available; "
                            "ok, why = available(); print('' if ok else why)"],
                           capture_output=True, text=True, cwd=ROOT)
    return check.stdout.strip() if check.returncode == 0 else check.stderr.strip()[-500:]


def in_tree(tree: Path, script: str, *args: str, installed: bool = False) -> dict:
    """Run ``script`` in a fresh interpreter with the code of ``tree`` (``installed``: this
    checkout as installed); the JSON object its last line prints, which names the module file
    it imported (``code``) to prove the tree."""
    r = subprocess.run([sys.executable, "-c", script, *args], cwd=tree, env=tree_env(tree, installed),
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"a run in {tree} failed:\n{r.stderr[-2000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    if not Path(out["code"]).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the run meant for {tree} imported {out['code']}: not a fair comparison")
    return out


def one(tree: Path, workload: str, seed: int, ops: int, judged: bool, installed: bool = False) -> dict:
    return in_tree(tree, ONE_RUN, workload, str(seed), str(ops), str(tree), "1" if judged else "0",
                   installed=installed)


def worktree(ref: str, path: Path) -> Path:
    r = subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=ROOT,
                       capture_output=True, text=True)
    if r.returncode != 0:  # a bad REF: one line, exit 3
        print(f"cannot check out {ref}: {r.stderr.strip().splitlines()[-1]}", file=sys.stderr)
        raise SystemExit(3)
    return path


def drop_worktree(path: Path) -> None:
    subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=ROOT, capture_output=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", default="0943f12", help="the commit to compare speed with (default 0943f12)")
    ap.add_argument("--same-as", default="7fb72e4",
                    help="the commit whose runs must be byte-identical (default 7fb72e4)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per row (default 3)")
    ap.add_argument("--ops", type=int, default=2000, help="ops a hunt run (default 2000; txn and eos 500)")
    ap.add_argument("--default-ops", type=int, default=10_000, help="ops of the default run (default 10000)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--swarm-runs", type=int, default=40,
                    help="seeds of the swarm hunt to time in each tree (default 40; 0: skip)")
    ap.add_argument("--swarm-repeat", type=int, default=1, metavar="R",
                    help="swarm hunts in each tree, the fastest counted (default 1)")
    ap.add_argument("--python", action="store_true",
                    help="run this checkout's Python engine, not the engine pip installed (compiled, when "
                         "pip built it from these sources: reference/compiled.py)")
    args = ap.parse_args()
    installed = not args.python
    if args.swarm_repeat < 1 or args.seeds < 1:
        print("hunt_speed.py: --swarm-repeat and --seeds must be at least 1", file=sys.stderr)
        return 3
    workloads = [w for w in args.workloads.split(",") if w]
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"before": worktree(args.before, Path(tmp) / "before"),
                 "same": worktree(args.same_as, Path(tmp) / "same")}
        try:
            print(f"1. the default run (queue, {args.default_ops} ops), seeds 0-{args.seeds - 1}: "
                  f"simulation wall seconds")
            print(f"{'seed':>4} {args.before + ' s':>12} {'now s':>8} {'ratio':>6} {'x real time then/now':>22}"
                  f"  same bytes as {args.same_as}")
            tb = tn = 0.0
            for seed in range(args.seeds):
                b = one(trees["before"], "queue", seed, args.default_ops, False)
                n = one(ROOT, "queue", seed, args.default_ops, False, installed)
                if seed == 0:
                    print(f"(now: the {n['engine']} engine)")
                s = one(trees["same"], "queue", seed, args.default_ops, False)
                tb, tn = tb + b["simulate"], tn + n["simulate"]
                print(f"{seed:>4} {b['simulate']:>12.2f} {n['simulate']:>8.2f} "
                      f"{b['simulate'] / n['simulate']:>5.2f}x {b['virtual'] / b['simulate']:>10.0f}x "
                      f"{n['virtual'] / n['simulate']:>9.0f}x  {'yes' if s['hashes'] == n['hashes'] else 'NO'}",
                      flush=True)
            print(f"{'all':>4} {tb:>12.2f} {tn:>8.2f} {tb / tn:>5.2f}x")
            print()
            print(f"2. hunt runs per minute (simulate and judge), seeds 0-{args.seeds - 1}")
            print(f"{'workload':<12} {'ops':>5} {'runs/min ' + args.before:>18} {'runs/min now':>14} "
                  f"{'ratio':>6}  same bytes as {args.same_as}")
            for w in workloads:
                ops = min(args.ops, OPS.get(w, args.ops))
                t_before = t_now = 0.0
                same = True
                for seed in range(args.seeds):
                    b = one(trees["before"], w, seed, ops, True)
                    n = one(ROOT, w, seed, ops, True, installed)
                    s = one(trees["same"], w, seed, ops, False)
                    t_before += b["run"]
                    t_now += n["run"]
                    same &= s["hashes"] == n["hashes"]
                rb, rn = 60 * args.seeds / t_before, 60 * args.seeds / t_now
                print(f"{w:<12} {ops:>5} {rb:>18.1f} {rn:>14.1f} {rn / rb:>5.2f}x  "
                      f"{'yes' if same else 'NO'}", flush=True)
            if args.swarm_runs:
                print()
                print(f"3. the swarm hunt (kafkacheck hunt --runs {args.swarm_runs} --jobs 1: one worker "
                      f"runs every seed, as in a hunt), {args.same_as} (before the speed-ups; {args.before} "
                      f"has no swarm) against now")
                tb = tn = float("inf")
                for _ in range(args.swarm_repeat):
                    tb = min(tb, swarm(trees["same"], args.swarm_runs))
                    tn = min(tn, swarm(ROOT, args.swarm_runs, installed))
                rb, rn = 60 * args.swarm_runs / tb, 60 * args.swarm_runs / tn
                print(f"{'seconds':<12} {tb:>10.1f} {tn:>10.1f}")
                print(f"{'runs/min':<12} {rb:>10.1f} {rn:>10.1f}  {rn / rb:.2f}x", flush=True)
        finally:
            for t in trees.values():
                drop_worktree(t)
    return 0


if __name__ == "__main__":
    start = time.monotonic()
    code = main()
    print(f"({time.monotonic() - start:.0f} s)")
    sys.exit(code)
