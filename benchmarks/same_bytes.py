"""Same bytes: this checkout's histories against another commit's, run for run.

    python benchmarks/same_bytes.py [--against REF] [--quick]
    python benchmarks/same_bytes.py --compiled [--quick]

A change meant to keep behaviour (a refactoring, a speed-up) must not change one byte of
any history. This runs the same set of runs with the code of commit REF (default ``HEAD``,
so that uncommitted changes are compared with the last commit) and with this checkout, the
two trees side by side in two processes, and compares the SHA-256 of every history.jsonl
and events.jsonl (and, for the Hypothesis machines' saved programs, of the ops they record):

* the determinism tests' runs (``tests/fault_injection/test_determinism.py``);
* every workload, seeds 0-2 (2,000 ops; 500 for txn and eos), and the groups workload with
  each assignor and static members;
* the default run (10,000 ops), seed 0;
* swarm seeds 0-9 (``kafkacheck run --swarm``), which draw configurations, timings, aimed
  nemeses and model templates;
* each model template (``--template``), with and without the bug switch it shows;
* every program in ``tests/properties/programs/``, replayed with and without its switch.

Prints one line per run and exits 1 if any differs (``--quick``: fewer runs). With
``--ignore-event KIND`` (repeatable) the events of that kind are left out of both sides before
hashing: a change that only drops events of one kind (no-op fsyncs) shows that nothing else
moved. REF is checked out into a temporary git worktree, removed at the end.

With ``--compiled``, the same runs compare this checkout's Python engine with its compiled
engine (``reference/compiled.py``: what ``pip install`` built, which must be of these
sources; exit 3 if there is none): the Python engine is the oracle the compiled one must
equal byte for byte.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hunt_speed import no_compiled_engine, tree_env, use_tree

ROOT = Path(__file__).resolve().parents[1]
WORKLOADS = ("queue", "idempotent", "txn", "eos", "groups", "compaction")


def plan(quick: bool) -> list[dict]:
    """The runs: kafkacheck run arguments, or a machine program to replay."""
    runs: list[dict] = [
        {"argv": ["--seed", "11", "--ops", "1500"]},
        {"argv": ["--seed", "11", "--ops", "1500", "--faults", "partition"]},
        {"argv": ["--seed", "12", "--ops", "1500", "--faults", "partition"]},
    ]
    seeds = range(1) if quick else range(3)
    for w in WORKLOADS:
        ops = "500" if w in ("txn", "eos") else "2000"
        runs += [{"argv": ["--workload", w, "--seed", str(s), "--ops", ops]} for s in seeds]
    if not quick:
        runs += [{"argv": ["--workload", "groups", "--ops", "2000", "--assignor", a]}
                 for a in ("roundrobin", "sticky", "cooperative-sticky")]
        runs.append({"argv": ["--workload", "groups", "--ops", "2000", "--static-members"]})
        runs.append({"argv": ["--workload", "txn", "--ops", "1000", "--transaction-version", "2",
                              "--faults", "partition,kill,pause,disk,straggle"]})
        runs.append({"argv": ["--seed", "0"]})  # the default run, 10,000 ops
    runs += [{"argv": ["--swarm", str(s)]} for s in (range(3) if quick else range(10))]
    # the shapes of the z3 model's counterexamples, with and without the bug each shows
    for template, bug in (("kip101", "truncate-to-high-watermark"), ("kip279-hole", "epoch-lookup-falls-back-to-hw"),
                          ("no-epoch-hw", "hw-without-epoch-check"), ("unclean", "unclean-election")):
        shape = ["--brokers", "2", "--partitions", "1", "--min-insync-replicas", "1", "--template", template,
                 "--ops", "1000"]
        runs += [{"argv": shape}, {"argv": [*shape, "--bug", bug]}]
    for program in sorted((ROOT / "tests" / "properties" / "programs").glob("*.json")):
        data = json.loads(program.read_text())
        runs.append({"program": program.name, "bugs": data["bugs"]})
        if data["bugs"]:
            runs.append({"program": program.name, "bugs": []})
    return runs


# runs every item of the plan with the code of one tree, in this one process; prints a JSON
# line of hashes per item
RUNNER = use_tree(1) + r"""
import contextlib, hashlib, io, json, tempfile
from pathlib import Path
import kafkacheck.cli
from kafkacheck.cli import main
try:
    from kafkacheck.explore import machine
except ImportError:  # before the machines moved to kafkacheck/workloads
    from properties.machines import machine
assert Path(kafkacheck.cli.__file__).resolve().is_relative_to(Path(sys.argv[1]).resolve()), kafkacheck.cli.__file__
import reference.broker
assert ENGINE == sys.argv[4] and reference.broker.__file__.endswith(".py") == (ENGINE == "python"), \
    reference.broker.__file__
programs = Path(sys.argv[2])
ignored = set(filter(None, sys.argv[3].split(",")))

def kept(events: bytes) -> bytes:
    names = [k.encode() for k in ignored]
    return b"".join(line for line in events.splitlines(keepends=True)
                    if not any(n in line for n in names) or json.loads(line).get("kind") not in ignored)

def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]

for line in sys.stdin:
    item = json.loads(line)
    if "argv" in item:
        d = Path(tempfile.mkdtemp())
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            code = main(["run", *item["argv"], "--out", str(d / "r"), "--no-progress"])
        h = {"history.jsonl": sha((d / "r" / "history.jsonl").read_bytes()),
             "events.jsonl": sha(kept((d / "r" / "events.jsonl").read_bytes()))}
    else:  # as kafkacheck.explore.replay, keeping the machine to read what it recorded
        data = json.loads((programs / item["program"]).read_text())
        m = machine(data["machine"], item["bugs"])()
        code = "valid"
        try:
            try:
                for step, args in data["steps"]:
                    getattr(m, step)(**args)
                    m.white_box()
            finally:
                m.teardown()
        except AssertionError as e:
            code = str(e).splitlines()[0][:100]
        h = {"ops": sha(json.dumps(m.sim.recorder.ops, sort_keys=True).encode()),
             "events": sha(json.dumps([e for e in m.sim.recorder.events if e["kind"] not in ignored],
                                      sort_keys=True).encode())}
    print(json.dumps({"code": code, "hashes": h}), flush=True)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default="HEAD", help="the commit to compare with (default HEAD)")
    ap.add_argument("--quick", action="store_true", help="fewer runs (one seed a workload, 3 swarm seeds)")
    ap.add_argument("--ignore-event", action="append", default=[], metavar="KIND",
                    help="leave events of this kind out of both sides (repeatable)")
    ap.add_argument("--compiled", action="store_true",
                    help="compare this checkout's Python engine with its compiled engine instead")
    args = ap.parse_args()
    items = plan(args.quick)
    if args.compiled:
        return compare_compiled(items, ",".join(args.ignore_event))
    with tempfile.TemporaryDirectory() as tmp:
        ref = Path(tmp) / "ref"
        r = subprocess.run(["git", "worktree", "add", "--detach", str(ref), args.against], cwd=ROOT,
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"cannot check out {args.against}: {r.stderr.strip().splitlines()[-1]}", file=sys.stderr)
            return 3
        try:
            return compare(items, ref, args.against, ",".join(args.ignore_event))
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(ref)], cwd=ROOT, capture_output=True)


def compare_compiled(items: list[dict], ignored: str) -> int:
    why = no_compiled_engine()
    if why:
        print(f"same_bytes.py: no compiled engine to compare: {why}", file=sys.stderr)
        return 3
    return compare(items, ROOT, "python", ignored, engines=("python", "compiled"))


def start(tree: Path, items: list[dict], ignored: str, engine: str = "python") -> subprocess.Popen:
    env = tree_env(tree, installed=engine == "compiled")
    p = subprocess.Popen([sys.executable, "-c", RUNNER, str(tree), str(ROOT / "tests" / "properties" / "programs"),
                          ignored, engine],
                         cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert p.stdin is not None
    p.stdin.write("".join(json.dumps(i) + "\n" for i in items))
    p.stdin.close()
    return p


def compare(items: list[dict], ref: Path, name: str, ignored: str = "",
            engines: tuple[str, str] = ("python", "python")) -> int:
    """Runs the items in ``ref`` with the first engine and in this checkout with the second."""
    t0 = time.monotonic()
    a, b = start(ref, items, ignored, engines[0]), start(ROOT, items, ignored, engines[1])
    assert a.stdout is not None and b.stdout is not None
    differ = 0
    for item in items:
        x, y = a.stdout.readline(), b.stdout.readline()
        if not x or not y:
            print(f"a runner stopped early ({'REF' if not x else 'this checkout'})", file=sys.stderr)
            return 3
        x, y = json.loads(x), json.loads(y)
        same = x == y
        differ += not same
        what = " ".join(item["argv"]) if "argv" in item else f"program {item['program']} bugs={item['bugs']}"
        print(f"{'same' if same else 'DIFFERENT':<9} {what}" + ("" if same else f"  {name}: {x}  now: {y}"),
              flush=True)
    a.wait()
    b.wait()
    print(f"{len(items) - differ} of {len(items)} the same as {name} ({time.monotonic() - t0:.0f} s)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
