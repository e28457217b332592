"""Start-up time per command: python benchmarks/startup.py [--repeat N]

Runs each command below as a user does (a fresh ``python -m kafkacheck`` process) --repeat
times and prints the median wall time, the time Python spent importing (``-X importtime``'s
total) and the modules imported, beside the time of ``python -c pass`` (the interpreter alone).
The quick commands (``kafkacheck --help``, ``lin FILE`` on porcupine's 6 KB etcd_000.log,
``check FILE`` on a 7-op history) have issue 35's target: under 0.15 s each. The others are
printed for comparison (their commands import the simulator or the served cluster, which they
run). Measure on an idle machine: a busy one slows every row alike. Exit status 1 if a quick
command misses the target.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ETCD = ROOT / "tests" / "data" / "porcupine_data" / "jepsen" / "etcd_000.log"
TARGET_S = 0.15


def tiny_history(path: Path) -> None:
    """Three sends and a poll that reads them, as any client records them."""
    ops = []
    for i in range(3):
        ops.append({"process": 0, "type": "invoke", "f": "send", "value": [["send", "t0:0", i]]})
        ops.append({"process": 0, "type": "ok", "f": "send", "value": [["send", "t0:0", [i, i]]]})
    ops += [{"process": 1, "type": "invoke", "f": "assign", "value": ["t0:0"]},
            {"process": 1, "type": "ok", "f": "assign", "value": ["t0:0"]},
            {"process": 1, "type": "invoke", "f": "poll", "value": [["poll"]]},
            {"process": 1, "type": "ok", "f": "poll", "value": [["poll", {"t0:0": [[0, 0], [1, 1], [2, 2]]}]]}]
    path.write_text("".join(json.dumps({"index": i, "time": 1000 * (i + 1), **op}) + "\n"
                            for i, op in enumerate(ops)))


def measure(argv: list[str], repeat: int) -> tuple[float, float, int, int]:
    """Median wall seconds, median import seconds, modules imported, exit status."""
    walls, imports, modules, status = [], [], 0, 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-X", "importtime", *argv], capture_output=True,
                              text=True, cwd=ROOT)
        walls.append(time.perf_counter() - t0)
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("import time:") and "|" in ln]
        # top-level imports (no indentation in the name column) sum to the whole import time
        tops = [ln for ln in lines[1:] if not ln.rsplit("|", 1)[1].startswith("  ")]
        imports.append(sum(int(ln.split("|")[1]) for ln in tops) / 1e6)
        modules, status = len(lines) - 1, proc.returncode
    return statistics.median(walls), statistics.median(imports), modules, status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=7, metavar="N", help="runs of each command (default 7)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        history = Path(tmp) / "history.jsonl"
        tiny_history(history)
        quick = [("kafkacheck --help", ["--help"]),
                 ("kafkacheck lin etcd_000.log", ["lin", str(ETCD), "--model", "register"]),
                 ("kafkacheck check (7 ops)", ["check", str(history)])]
        others = [("kafkacheck run --help", ["run", "--help"]),
                  ("kafkacheck conform --help", ["conform", "--help"]),
                  ("kafkacheck corpus --help", ["corpus", "--help"])]
        base = measure(["-c", "pass"], args.repeat)
        print(f"{'command':32} {'wall s':>8} {'imports s':>10} {'modules':>8}  target")
        print(f"{'python -c pass':32} {base[0]:8.3f} {base[1]:10.3f} {base[2]:8d}")
        missed = 0
        for label, argv in quick + others:
            wall, imp, mods, status = measure(["-m", "kafkacheck", *argv], args.repeat)
            is_quick = (label, argv) in quick
            ok = wall < TARGET_S
            missed += is_quick and not ok
            mark = (f"< {TARGET_S} s {'ok' if ok else 'MISSED'}") if is_quick else ""
            print(f"{label:32} {wall:8.3f} {imp:10.3f} {mods:8d}  {mark}"
                  + (f" (exit {status})" if status not in (0, 1) else ""))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
