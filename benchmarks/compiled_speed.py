"""Compiled speed: the engine pip compiled against the same engine's Python source, in one run.

    python benchmarks/compiled_speed.py [--seeds K] [--swarm N] [--repeat R]

``pip install`` compiles the engine with mypyc (``compile_engine.py``; ``reference/compiled.py``
lists the modules and chooses the engine at run time). This runs the default run (seeds 0 to
K-1) and the first N seeds of a swarm hunt with this checkout's Python engine
(``KAFKACHECK_ENGINE=python``) and with its compiled engine, alternately, R times each (the
fastest counted), and prints each one's simulation wall seconds, the ratio, and whether its
history.jsonl and events.jsonl are the same byte for byte (exit 1 if any is not: the Python
engine is the oracle; ``benchmarks/same_bytes.py --compiled`` compares many more runs). Exit 3
if there is no compiled engine of these sources (``pip install -e .`` builds one). Measure
with nothing else running.
"""

from __future__ import annotations

import argparse
import sys

from hunt_speed import ROOT, in_tree, no_compiled_engine, use_tree

RUN = use_tree(1) + r"""
import hashlib, json, tempfile, time
from pathlib import Path
from kafkacheck.runner import RunOptions, simulate
from kafkacheck.swarm import DEFAULT_OPS, draw
import reference.broker
kind, seed = sys.argv[2], int(sys.argv[3])
options = RunOptions(seed=seed, ops=10_000) if kind == "default" else draw(seed, DEFAULT_OPS)
d = Path(tempfile.mkdtemp())
t = time.perf_counter()
simulate(options, d)
seconds = time.perf_counter() - t
h = [hashlib.sha256((d / f).read_bytes()).hexdigest() for f in ("history.jsonl", "events.jsonl")]
print(json.dumps({"seconds": seconds, "hashes": h, "code": reference.broker.__file__, "engine": ENGINE}))
"""


def timed(kind: str, seed: int, repeat: int, compiled: bool) -> tuple[float, list[str]]:
    best, hashes = float("inf"), []
    for _ in range(repeat):
        out = in_tree(ROOT, RUN, str(ROOT), kind, str(seed), installed=compiled)
        if out["engine"] != ("compiled" if compiled else "python") or out["code"].endswith(".py") == compiled:
            raise SystemExit(f"compiled_speed.py: a run meant for the {'compiled' if compiled else 'Python'} "
                             f"engine imported {out['code']}")
        best, hashes = min(best, out["seconds"]), out["hashes"]
    return best, hashes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2, help="default runs, seeds 0 to K-1 (default 2)")
    ap.add_argument("--swarm", type=int, default=10, help="the first N seeds of a swarm hunt (default 10)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each with each engine, the fastest counted (default 2)")
    args = ap.parse_args()
    if args.seeds < 0 or args.swarm < 0 or args.repeat < 1:
        print("compiled_speed.py: --seeds and --swarm must be 0 or more, --repeat 1 or more", file=sys.stderr)
        return 3
    why = no_compiled_engine()
    if why:
        print(f"compiled_speed.py: no compiled engine: {why}", file=sys.stderr)
        return 3
    from kafkacheck.covering import COVERING_SEEDS

    runs = [("default", s) for s in range(args.seeds)] + [("swarm", s) for s in list(COVERING_SEEDS)[:args.swarm]]
    print(f"{'run':>14} {'python s':>9} {'compiled s':>11} {'ratio':>6}  same bytes")
    totals = {"default": [0.0, 0.0], "swarm": [0.0, 0.0]}
    differ = 0
    for kind, seed in runs:
        a, ha = timed(kind, seed, args.repeat, compiled=False)
        b, hb = timed(kind, seed, args.repeat, compiled=True)
        totals[kind][0] += a
        totals[kind][1] += b
        differ += ha != hb
        print(f"{kind + ' ' + str(seed):>14} {a:9.2f} {b:11.2f} {a / b:5.2f}x  {'yes' if ha == hb else 'NO'}",
              flush=True)
    for kind, (a, b) in totals.items():
        if b:
            print(f"{'all ' + kind:>14} {a:9.2f} {b:11.2f} {a / b:5.2f}x")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
