"""Checker speed and memory on long histories: 10k, 100k and 1M operations, both engines.

    python benchmarks/check_speed.py [--sizes 10000,100000,1000000] [--seed 0] [--no-oracle]

Writes, for each size, a synthetic history of a correct Kafka queue (an op is an invocation
and its completion, so 1M ops are 2M lines): 8 producer processes send 1-3 records to 16
partitions, 8 consumer processes assigned to partitions poll up to 5 records a partition,
with up to 16 ops in flight and each op taking effect at its completion. Then, in a fresh
process per size and engine, judges it as ``kafkacheck check DIR`` does (reading and validating
the file, the whole checker, cycle search included): first with the compiled engine (``fast``,
properties/_fastcheck), then with the pure-Python checker, its oracle (``python``; skipped with
``--no-oracle``). It prints, per size, the fast engine's wall time and peak memory (max RSS), its
cost per op relative to the smallest size (linear growth shows as a ratio near 1), whether it
judged the history alone (``fast``) or handed it to Python (``fallback``), the oracle's time and
peak memory, the ratio of the two times, and whether the two verdicts are the same.

The targets (kafkacheck issue 35, item 4): 1M ops checked in under 10 s and under 1 GB on the
2-core machine, with the verdict the oracle gives.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def generate(path: Path, n_ops: int, seed: int) -> None:
    rng = random.Random(seed)
    keys = [f"t0:{i}" for i in range(16)]
    logs: dict[str, list[int]] = {k: [] for k in keys}
    counters = dict.fromkeys(keys, 0)
    producers = list(range(8))
    consumers = list(range(8, 16))
    assignment = {c: keys[(c - 8) * 2:(c - 8) * 2 + 2] for c in consumers}
    position = {(c, k): 0 for c in consumers for k in assignment[c]}
    t = 0
    index = 0
    in_flight: dict[int, tuple[str, list]] = {}
    started = 0
    with open(path, "w") as fh:
        def emit(process, type_, f, value):
            nonlocal index, t
            t += rng.randint(100_000, 2_000_000)
            fh.write(json.dumps({"index": index, "time": t, "process": process, "type": type_,
                                 "f": f, "value": value}, separators=(",", ":")) + "\n")
            index += 1

        for c in consumers:
            emit(c, "invoke", "assign", assignment[c])
            emit(c, "ok", "assign", assignment[c])
        while started < n_ops or in_flight:
            idle = [p for p in producers + consumers if p not in in_flight]
            if started < n_ops and idle and ((len(in_flight) < 16 and rng.random() < 0.5) or not in_flight):
                p = rng.choice(idle)
                if p in producers:
                    mops = []
                    for k in rng.sample(keys, rng.randint(1, 3)):
                        counters[k] += 1
                        mops.append(["send", k, counters[k] * 8 + p])
                    in_flight[p] = ("send", mops)
                    emit(p, "invoke", "send", mops)
                else:
                    in_flight[p] = ("poll", [["poll"]])
                    emit(p, "invoke", "poll", [["poll"]])
                started += 1
                continue
            p = rng.choice(list(in_flight))
            f, mops = in_flight.pop(p)
            if f == "send":
                done = []
                for _s, k, v in mops:
                    logs[k].append(v)
                    done.append(["send", k, [len(logs[k]) - 1, v]])
                emit(p, "ok", "send", done)
            else:
                got = {}
                for k in assignment[p]:
                    pos = position[(p, k)]
                    upto = min(len(logs[k]), pos + rng.randint(0, 5))
                    if upto > pos:
                        got[k] = [[o, logs[k][o]] for o in range(pos, upto)]
                        position[(p, k)] = upto
                emit(p, "ok", "poll", [["poll", got]])


def measure(path: str, engine: str) -> None:
    sys.path.insert(0, str(ROOT))
    t0 = time.perf_counter()
    from properties.checker import check, check_fast
    from traces.history import iter_history, locate_run

    _meta, history, _ = locate_run(path)
    config = {"sub_via": ["assign"]}
    if engine == "fast":  # as `kafkacheck check` does, saying whether the fast engine judged alone
        result = check_fast(iter_history(history), config)
        judged = "fast" if isinstance(result, dict) else "fallback"
        if judged == "fallback":
            result = check(iter_history(history), config, engine="python")
    else:
        result = check(iter_history(history), config, engine="python")
        judged = "python"
    t1 = time.perf_counter()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    digest = hashlib.sha256(json.dumps(result, sort_keys=True).encode()).hexdigest()
    print(json.dumps({"check_s": t1 - t0, "peak_mb": peak_mb, "valid": result["valid"], "judged": judged,
                      "lines": result["stats"]["ops"], "verdict": digest}))


def run(path: Path, engine: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", str(path.parent), engine],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--measure":
        measure(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-oracle", action="store_true", help="time the fast engine only")
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    print(f"{'ops':>9} {'lines':>9} {'fast s':>7} {'fast MB':>8} {'us/op':>6} {'vs first':>8} {'judged':>8} "
          f"{'python s':>8} {'py MB':>6} {'ratio':>6} {'same':>5} valid")
    base = None
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            path = Path(tmp) / f"h{n}" / "history.jsonl"
            path.parent.mkdir()
            generate(path, n, args.seed)
            m = run(path, "fast")
            per_op = m["check_s"] / n * 1e6
            base = base or per_op
            line = (f"{n:>9} {m['lines']:>9} {m['check_s']:>7.2f} {m['peak_mb']:>8.0f} {per_op:>6.1f} "
                    f"{per_op / base:>7.2f}x {m['judged']:>8}")
            if args.no_oracle:
                print(f"{line} {'-':>8} {'-':>6} {'-':>6} {'-':>5} {m['valid']}", flush=True)
            else:
                o = run(path, "python")
                print(f"{line} {o['check_s']:>8.1f} {o['peak_mb']:>6.0f} {o['check_s'] / m['check_s']:>5.1f}x "
                      f"{'yes' if o['verdict'] == m['verdict'] else 'NO':>5} {m['valid']}", flush=True)
            path.unlink()


if __name__ == "__main__":
    main()
