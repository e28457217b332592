"""Simulator speed on the default scenario: messages and client ops per wall second.

    python benchmarks/sim_speed.py [--ops N] [--seeds K] [--repeat R] [--against REF]

Runs the default ``kafkacheck run`` scenario (the queue workload, 3 brokers, RF 3,
min.insync.replicas 2, acks=all, faults partition,kill,pause,disk) for each seed and prints
its wall time, how much faster than real time it ran, and the messages delivered and client
ops completed per wall second. With ``--against REF`` each seed runs, in fresh interpreters
and alternately (so that a busy moment hurts both alike), with the code of commit REF (checked
out into a temporary git worktree, removed at the end) and with this checkout, and the table
puts the two side by side with their ratios: issue 45 asks for three times the messages per
wall second of its starting commit, ``d63a49c``. This checkout runs as pip installed it: with
the compiled engine when pip compiled it from these sources (``reference/compiled.py``; the
table says which), with its Python engine under ``--python``. With ``--repeat R`` each seed runs R times
in each tree (alternately) and the fastest counts: a run's wall time only grows with whatever
else the machine does, so the fastest of a few is the steadiest measure of the code. Measure
with nothing else running.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from hunt_speed import ROOT, drop_worktree, in_tree, use_tree, worktree

# one default run in a fresh interpreter of the given tree: its wall time and counts
ONE_RUN = use_tree(1) + r"""
import json, time
from kafkacheck.runner import RunOptions, simulate
import kafkacheck.runner
t = time.perf_counter()
outcome = simulate(RunOptions(seed=int(sys.argv[2]), ops=int(sys.argv[3])), None)
wall = time.perf_counter() - t
s = outcome.stats
print(json.dumps({"wall": wall, "virtual": s["virtual_seconds"], "messages": s["messages_delivered"],
                  "ops": s["ops_completed"], "code": kafkacheck.runner.__file__, "engine": ENGINE}))
"""


def one(tree: Path, seed: int, ops: int, installed: bool = False) -> dict:
    return in_tree(tree, ONE_RUN, str(tree), str(seed), str(ops), installed=installed)


def _rates(runs: list[dict]) -> tuple[float, ...]:
    """Virtual seconds, messages and client ops, each per wall second of ``runs`` together."""
    wall = sum(r["wall"] for r in runs)
    return tuple(sum(r[k] for r in runs) / wall for k in ("virtual", "messages", "ops"))


def _row(label: str, runs: list[dict]) -> str:
    speed, messages, ops = _rates(runs)
    return f"{label:>10} {sum(r['wall'] for r in runs):>8.2f} {speed:>7.0f}x {messages:>10.0f} {ops:>9.0f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=1, metavar="R",
                    help="runs of each seed in each tree, the fastest counted (default 1)")
    ap.add_argument("--against", metavar="REF", help="a commit to run side by side with this checkout")
    ap.add_argument("--python", action="store_true",
                    help="run this checkout's Python engine, not the engine pip installed (compiled, when "
                         "pip built it from these sources: reference/compiled.py)")
    args = ap.parse_args()
    if args.repeat < 1 or args.seeds < 1 or args.ops < 1:
        print("sim_speed.py: --repeat, --seeds and --ops must be at least 1", file=sys.stderr)
        return 3
    fastest = f", the fastest of {args.repeat} runs" if args.repeat > 1 else ""
    print(f"the default run, {args.ops} ops, seeds 0-{args.seeds - 1}{fastest}; per seed and over all:")
    print(f"{'':>10} {'wall s':>8} {'x real':>8} {'msgs/s':>10} {'ops/s':>9}")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"now": ROOT}
        if args.against:
            trees = {args.against: worktree(args.against, Path(tmp) / "ref"), "now": ROOT}
        try:
            runs: dict[str, list[dict]] = {name: [] for name in trees}
            for seed in range(args.seeds):
                tries: dict[str, list[dict]] = {name: [] for name in trees}
                for _ in range(args.repeat):
                    for name, tree in trees.items():
                        tries[name].append(one(tree, seed, args.ops, installed=name == "now" and not args.python))
                if seed == 0:
                    print(f"(now: the {tries['now'][0]['engine']} engine)")
                for name in trees:
                    runs[name].append(min(tries[name], key=lambda r: r["wall"]))
                    print(_row(f"{seed} {name}", runs[name][-1:]), flush=True)
            for name in trees:
                print(_row(f"all {name}", runs[name]))
            if args.against:
                before, now = (_rates(runs[n]) for n in (args.against, "now"))
                print(f"now / {args.against}: messages per wall second {now[1] / before[1]:.2f}x, "
                      f"client ops per wall second {now[2] / before[2]:.2f}x")
        finally:
            if args.against:
                drop_worktree(trees[args.against])
    return 0


if __name__ == "__main__":
    sys.exit(main())
