"""Compiled speed: the engine compiled by mypyc against the same engine interpreted, in one run.

    python benchmarks/compiled_speed.py [--seeds K] [--swarm N] [--repeat R]

The engine type-checks (tests/test_types.py), so mypyc, which turns typed Python into C, can
compile it unchanged but for the few edits listed in EDITS (what the source does not say in a
way mypyc accepts yet: exceptions that subclass built-in ones stay Python classes, the broker's
coordinators hold it strongly, not through a weak proxy, and the node classes the workloads
subclass stay open to interpreted subclasses). This checks out HEAD (commit first) into a
temporary git worktree, makes those edits, compiles ``reference/`` (but the served broker,
``__init__`` and ``frozen.py``) with the simulator, network and disk, then runs the default run
(seeds 0 to K-1) and the first N seeds of a swarm hunt in this checkout (interpreted) and in
the compiled tree, alternately, R times each (the fastest counted), and prints each one's
simulation wall seconds, the ratio, and whether its history.jsonl and events.jsonl are the same
byte for byte (exit 1 if any is not: the interpreted engine is the oracle). Needs mypy (the
test extra) and a C compiler; the build takes about two minutes on two cores. Measure with
nothing else running. The worktree is removed at the end.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hunt_speed import ROOT, drop_worktree, in_tree, worktree

# (file, text, replacement): each text must be found once, or the source moved on and so must this
IMPORT = "from __future__ import annotations\n"
WITH_ATTR = IMPORT + "\nfrom mypy_extensions import mypyc_attr\n"
PYTHON_CLASS = "@mypyc_attr(native_class=False)\n"
EDITS = [
    ("reference/errors.py", IMPORT, WITH_ATTR),
    ("reference/errors.py", "class UnexpectedInput(AssertionError):",
     PYTHON_CLASS + "class UnexpectedInput(AssertionError):"),
    ("reference/group_state.py", IMPORT, WITH_ATTR),
    ("reference/group_state.py", "class IllegalTransition(AssertionError):",
     PYTHON_CLASS + "class IllegalTransition(AssertionError):"),
    ("reference/txn_metadata.py", IMPORT, WITH_ATTR),
    ("reference/txn_metadata.py", "class IllegalTransition(AssertionError):",
     PYTHON_CLASS + "class IllegalTransition(AssertionError):"),
    ("reference/storage.py", IMPORT, WITH_ATTR),
    ("reference/storage.py", "class StorageError(OSError):", PYTHON_CLASS + "class StorageError(OSError):"),
    # a compiled class takes no weak references: the coordinators hold their broker strongly
    # (a crashed broker then waits for a full collection, which a single run does not mind)
    ("reference/broker.py", "host = weakref.proxy(self)", "host = self"),
    ("reference/node.py", IMPORT, WITH_ATTR),
    ("reference/node.py", "class Node:", "@mypyc_attr(allow_interpreted_subclasses=True)\nclass Node:"),
]
NOT_COMPILED = {"__init__.py", "frozen.py"}  # a package's init; a decorator that sets attributes on itself

RUN = r"""
import hashlib, json, sys, tempfile, time
sys.meta_path = [f for f in sys.meta_path if "editable" not in type(f).__module__]
sys.path.insert(0, sys.argv[1])
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
print(json.dumps({"seconds": seconds, "hashes": h, "code": reference.broker.__file__}))
"""


def build(tree: Path) -> None:
    for path, text, replacement in EDITS:
        f = tree / path
        source = f.read_text()
        if source.count(text) != 1:
            raise SystemExit(f"compiled_speed.py: {path} no longer holds {text!r} once: update EDITS")
        f.write_text(source.replace(text, replacement))
    (tree / "pyproject.toml").unlink()  # its build setup is not mypyc's
    sources = [str(p.relative_to(tree)) for p in sorted((tree / "reference").glob("*.py")) if p.name not in NOT_COMPILED]
    sources += [f"fault_injection/{m}.py" for m in ("simulation", "network", "disk")]
    print(f"compiling {len(sources)} modules with mypyc (about two minutes)...", file=sys.stderr, flush=True)
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "mypyc", "--ignore-missing-imports", *sources], cwd=tree,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"compiled_speed.py: mypyc failed:\n{(r.stdout + r.stderr)[-3000:]}")
    built = list((tree / "reference").glob("broker.*.so"))
    if not built:
        raise SystemExit("compiled_speed.py: mypyc built no extension for reference/broker.py")
    print(f"compiled in {time.perf_counter() - t:.0f} s", file=sys.stderr)


def timed(tree: Path, kind: str, seed: int, repeat: int, compiled: bool) -> tuple[float, list[str]]:
    best, hashes = float("inf"), []
    for _ in range(repeat):
        out = in_tree(tree, RUN, str(tree), kind, str(seed))
        if out["code"].endswith(".py") == compiled:
            raise SystemExit(f"compiled_speed.py: the run in {tree} imported {out['code']}")
        best, hashes = min(best, out["seconds"]), out["hashes"]
    return best, hashes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2, help="default runs, seeds 0 to K-1 (default 2)")
    ap.add_argument("--swarm", type=int, default=10, help="the first N seeds of a swarm hunt (default 10)")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each in each tree, the fastest counted (default 2)")
    args = ap.parse_args()
    if args.seeds < 0 or args.swarm < 0 or args.repeat < 1:
        print("compiled_speed.py: --seeds and --swarm must be 0 or more, --repeat 1 or more", file=sys.stderr)
        return 3
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        print("compiled_speed.py: mypyc needs a C compiler (cc or gcc)", file=sys.stderr)
        return 3
    from kafkacheck.covering import COVERING_SEEDS

    runs = [("default", s) for s in range(args.seeds)] + [("swarm", s) for s in list(COVERING_SEEDS)[:args.swarm]]
    with tempfile.TemporaryDirectory() as tmp:
        tree = worktree("HEAD", Path(tmp) / "compiled")
        try:
            build(tree)
            print(f"{'run':>14} {'interpreted s':>14} {'compiled s':>11} {'ratio':>6}  same bytes")
            totals = {"default": [0.0, 0.0], "swarm": [0.0, 0.0]}
            differ = 0
            for kind, seed in runs:
                a, ha = timed(ROOT, kind, seed, args.repeat, compiled=False)
                b, hb = timed(tree, kind, seed, args.repeat, compiled=True)
                totals[kind][0] += a
                totals[kind][1] += b
                differ += ha != hb
                print(f"{kind + ' ' + str(seed):>14} {a:14.2f} {b:11.2f} {a / b:5.2f}x  {'yes' if ha == hb else 'NO'}",
                      flush=True)
            for kind, (a, b) in totals.items():
                if b:
                    print(f"{'all ' + kind:>14} {a:14.2f} {b:11.2f} {a / b:5.2f}x")
        finally:
            drop_worktree(tree)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
