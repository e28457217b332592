"""Simulator speed on the default scenario: simulated seconds and messages per wall second.

    python benchmarks/sim_speed.py [--ops N] [--seeds K]

Prints, for each seed and overall, the wall time of the default ``kafkacheck run`` scenario
(3 brokers, RF 3, min.insync.replicas 2, acks=all, faults partition,kill,pause,disk), the
ratio of virtual to wall time ("x real time"), and messages delivered per wall second. The
targets of the foundation issue: the default run (10,000 ops) under 30 s, at least 50x
real time.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from kafkacheck.runner import RunOptions, simulate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=10_000)
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    total_wall = total_virtual = total_messages = 0.0
    print(f"{'seed':>4} {'wall s':>8} {'virtual s':>10} {'x real time':>12} {'msgs/wall s':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            t0 = time.perf_counter()
            outcome = simulate(RunOptions(seed=seed, ops=args.ops), Path(tmp) / str(seed))
            wall = time.perf_counter() - t0
            virtual = outcome.stats["virtual_seconds"]
            msgs = outcome.stats["messages_delivered"]
            total_wall += wall
            total_virtual += virtual
            total_messages += msgs
            print(f"{seed:>4} {wall:>8.2f} {virtual:>10.1f} {virtual / wall:>12.1f} {msgs / wall:>12.0f}")
    print(f"{'all':>4} {total_wall:>8.2f} {total_virtual:>10.1f} "
          f"{total_virtual / total_wall:>12.1f} {total_messages / total_wall:>12.0f}")
    print(f"mean wall time per {args.ops}-op run: {total_wall / args.seeds:.2f} s (target < 30 s); "
          f"speed {total_virtual / total_wall:.0f}x real time (target >= 50x)")


if __name__ == "__main__":
    main()
