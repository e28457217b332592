"""Linearizability checker speed: python benchmarks/lin_speed.py [--oracle-files N] [--log-ops N]

1. Every file of tests/data/porcupine_data with the verdict porcupine's tests assert and the
   time per file (C++ search, all cores), against the targets of issue 5 (about twice as fast
   as porcupine measured on this machine):
   the etcd files together < 0.3 s; kv/c50-ok < 0.15 s; kv/c50-bad < 0.03 s;
   kv/c10-* unpartitioned (kv-map) < 1.5 s each.
2. The C++ search against the pure-Python oracle on the same files, every check of part 1
   (the etcd files with the register model, the kv files partitioned by key, c01/c10 as one
   map), both on one thread and timed the same way (best of --oracle-repeat runs), as the
   ratio of the total times (target: at least 100x), with the ratio of each group beside it.
3. A Kafka partition-log history of at least 100,000 operations on one partition, generated
   by the simulator (kafkacheck run, kept in runs/bench-lin-log for the next time), checked
   in under 10 s.

Times are the best of --repeat runs of the check itself (files are parsed once, outside the
timing). Exit status 1 if a verdict is wrong or a target is missed.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from linearizability import check_operations, get_model
from linearizability.formats import read_etcd_log, read_kv_edn
from linearizability.kafka_histories import read_run

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "porcupine_data"
ETCD_OK = {2, 5, 7, 18, 25, 31, 38, 45, 48, 49, 51, 53, 56, 67, 75, 76, 80, 87, 92, 98, 100, 101, 102}
LOG_RUN = ROOT / "runs" / "bench-lin-log"


def best(fn, repeat: int):
    times, result = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def mark(ok: bool) -> str:
    return "ok  " if ok else "MISS"


def porcupine_files(repeat: int) -> tuple[bool, list]:
    good = True
    register, kv, kv_map = get_model("register"), get_model("kv"), get_model("kv-map")
    etcd = []
    for path in sorted(DATA.glob("jepsen/etcd_*.log")):
        ops = read_etcd_log(path)
        if ops:
            etcd.append((path, ops))
    print(f"{'file':<22} {'model':<8} {'ops':>5} {'verdict':<9} {'expected':<9} {'seconds':>9}")
    total = 0.0
    for path, ops in etcd:
        n = int(re.search(r"(\d+)", path.name).group(1))
        expected = "ok" if n in ETCD_OK else "illegal"
        t, r = best(lambda ops=ops: check_operations(register, ops), repeat)
        total += t
        good &= r.verdict == expected
        print(f"{path.name:<22} {'register':<8} {len(ops):>5} {r.verdict:<9} {expected:<9} {t:>9.5f}")
    kv_files = {name: read_kv_edn(DATA / "kv" / f"{name}.txt")
                for name in ("c01-ok", "c01-bad", "c10-ok", "c10-bad", "c50-ok", "c50-bad")}
    kv_times = {}
    for name, ops in kv_files.items():
        expected = "ok" if name.endswith("ok") else "illegal"
        for model in (kv, kv_map) if not name.startswith("c50") else (kv,):
            t, r = best(lambda ops=ops, model=model: check_operations(model, ops), repeat)
            kv_times[(name, model.name)] = t
            good &= r.verdict == expected
            print(f"kv/{name:<19} {model.name:<8} {len(ops):>5} {r.verdict:<9} {expected:<9} {t:>9.5f}")
    print()
    print("targets (issue 5):")
    checks = [
        (f"{len(etcd)} etcd files together", total, 0.3),
        ("kv/c50-ok (partitioned)", kv_times[("c50-ok", "kv")], 0.15),
        ("kv/c50-bad (partitioned)", kv_times[("c50-bad", "kv")], 0.03),
        ("kv/c10-ok unpartitioned", kv_times[("c10-ok", "kv-map")], 1.5),
        ("kv/c10-bad unpartitioned", kv_times[("c10-bad", "kv-map")], 1.5),
    ]
    for what, t, target in checks:
        print(f"  {mark(t < target)} {what:<28} {t:8.4f} s  (target < {target} s)")
        good &= t < target
    print(f"  {mark(good)} every verdict as porcupine's tests assert")
    cases = [("etcd (register)", register, ops) for _, ops in etcd]
    cases += [("kv (partitioned by key)", kv, ops) for ops in kv_files.values()]
    cases += [("kv-map (one map)", kv_map, kv_files[n]) for n in ("c01-ok", "c01-bad", "c10-ok", "c10-bad")]
    return good, cases


def oracle_ratio(cases: list, files: int, repeat: int) -> bool:
    cases = cases[:files] if files else cases
    groups: dict[str, list[float]] = {}
    print(f"\nC++ vs the Python oracle, {len(cases)} checks, one thread each, best of {repeat} run(s) each ...",
          flush=True)
    for group, model, ops in cases:
        native_t, r1 = best(lambda model=model, ops=ops: check_operations(model, ops, threads=1), repeat)
        python_t, r2 = best(lambda model=model, ops=ops: check_operations(model, ops, engine="python"), repeat)
        assert r1.verdict == r2.verdict, "the oracle disagrees"
        totals = groups.setdefault(group, [0.0, 0.0, 0])
        totals[0] += native_t
        totals[1] += python_t
        totals[2] += 1
    for group, (native_t, python_t, n) in groups.items():
        print(f"  {group:<24} {n:>3} checks: C++ {native_t:8.3f} s, Python {python_t:7.2f} s, "
              f"ratio {python_t / native_t:5.0f}x")
    native_total = sum(g[0] for g in groups.values())
    python_total = sum(g[1] for g in groups.values())
    ratio = python_total / native_total
    print(f"  {'all':<24} {len(cases):>3} checks: C++ {native_total:8.3f} s, Python {python_total:7.2f} s, "
          f"ratio {ratio:5.0f}x")
    print(f"  {mark(ratio >= 100)} C++ at least 100x faster than the oracle (total time of every check)")
    return ratio >= 100


def kafka_log(log_ops: int) -> bool:
    history = LOG_RUN / "history.jsonl"
    if not history.exists():
        client_ops = max(1000, log_ops * 3 // 4)   # a one-partition run gives ~1.45 log operations per client op
        print(f"\ngenerating a one-partition simulator run ({client_ops} client ops) into {LOG_RUN} ...", flush=True)
        subprocess.run([sys.executable, "-m", "kafkacheck.cli", "run", "--seed", "7", "--ops", str(client_ops),
                        "--partitions", "1", "--no-progress", "--out", str(LOG_RUN)],
                       check=False, stdout=subprocess.DEVNULL)
    model = get_model("partition-log")
    t0 = time.perf_counter()
    _meta, ops = read_run(LOG_RUN, "partition-log")
    load = time.perf_counter() - t0
    t, r = best(lambda: check_operations(model, ops), 1)
    enough = len(ops) >= log_ops
    print(f"\nKafka partition-log history {LOG_RUN.name}: {len(ops)} operations on "
          f"{len(r.partitions)} partition(s), read in {load:.2f} s, checked in {t:.2f} s: {r.verdict}")
    print(f"  {mark(enough and t < 10 and r.verdict == 'ok')} >= {log_ops} operations checked in < 10 s")
    return enough and t < 10 and r.verdict == "ok"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="time each porcupine file this many times, keep the best")
    ap.add_argument("--oracle-files", type=int, default=0, help="compare with the oracle on the first N checks only")
    ap.add_argument("--oracle-repeat", type=int, default=1,
                    help="time each check this many times on both engines, keep the best (the oracle takes ~30 s a round)")
    ap.add_argument("--log-ops", type=int, default=100_000, help="operations of the Kafka log history")
    args = ap.parse_args()
    if not DATA.exists():
        print(f"{DATA} is missing ", file=sys.stderr)
        return 1
    good, cases = porcupine_files(args.repeat)
    good &= oracle_ratio(cases, args.oracle_files, args.oracle_repeat)
    good &= kafka_log(args.log_ops)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
