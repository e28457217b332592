"""Step costs: where a swarm hunt's simulation time goes, by message type and timer kind.

    python benchmarks/step_costs.py [--seeds N] [--top K]

Simulates the first N seeds a swarm hunt runs (the covering array's, default 40) and times
every step the simulator takes: each delivered message by its type, sender and receiver (a
broker, the controller or a client), each timer by its kind (its key's name; a client's embedded
producer or consumer named after it, as ``p/linger``), counting the timers the node called
moot (skipped without a call, or set again by the simulator). Prints the K costliest rows of
each table and the share of the simulation's wall time they hold. The timing adds about a
microsecond a step: the shares are what to read, not the absolute times. It times the Python
engine (``KAFKACHECK_ENGINE=python``): it wraps the simulator's steps, which a compiled class
does not allow. Measure with nothing else running.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["KAFKACHECK_ENGINE"] = "python"  # (before the engine's first import: reference.compiled)

import fault_injection.simulation as simulation
from kafkacheck.covering import COVERING_SEEDS
from kafkacheck.runner import simulate
from kafkacheck.swarm import DEFAULT_OPS, draw


def _role(node_id: int, network) -> str:
    """The controller, a broker, or a client (any other node: the harness's too)."""
    return ("controller" if node_id == network.controller else "broker" if node_id in network.brokers
            else "client")


def _kind(key) -> str:
    """A timer's kind: its key's name; a client's embedded producer's or consumer's timer (its
    key tagged ``("p",)``, ``("c",)`` or, for a group or share member, ``("c", incarnation)``)
    and a coordinator's named after both, as ``c/heartbeat``."""
    if not isinstance(key, tuple):
        return str(key)
    name, rest = str(key[0]), key[1:]
    if name == "c" and len(rest) > 1 and isinstance(rest[0], int):
        rest = rest[1:]  # a member's incarnation
    if rest and name in ("c", "p", "group", "txn", "share"):
        inner = rest[0][0] if isinstance(rest[0], tuple) else rest[0]
        return f"{name}/{inner}"
    return name


def instrument() -> tuple[Counter, Counter, Counter]:
    """Wrap the simulator's two kinds of step; (seconds, steps, moot) by row."""
    seconds, steps, moot = Counter(), Counter(), Counter()
    deliver, fire = simulation.Simulation._deliver, simulation.Simulation._fire

    def timed_deliver(self, dst, src, message, sent_ns):
        row = ("message", type(message).__name__, f"{_role(src, self.network)} to {_role(dst, self.network)}")
        t = time.perf_counter()
        deliver(self, dst, src, message, sent_ns)
        seconds[row] += time.perf_counter() - t
        steps[row] += 1

    def timed_fire(self, node_id, incarnation, key):
        row = ("timer", _kind(key), _role(node_id, self.network))
        before = self.moot_timers
        t = time.perf_counter()
        fire(self, node_id, incarnation, key)
        seconds[row] += time.perf_counter() - t
        steps[row] += 1
        moot[row] += self.moot_timers - before

    simulation.Simulation._deliver, simulation.Simulation._fire = timed_deliver, timed_fire
    return seconds, steps, moot


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=40,
                    help=f"the first N seeds of a swarm hunt, the covering array's (default 40, at most "
                         f"{len(COVERING_SEEDS)})")
    ap.add_argument("--top", type=int, default=15, help="rows shown of each table (default 15)")
    args = ap.parse_args()
    if not 1 <= args.seeds <= len(COVERING_SEEDS):
        print(f"step_costs: --seeds must be 1 to {len(COVERING_SEEDS)} (the covering array's seeds)", file=sys.stderr)
        return 3
    seconds, steps, moot = instrument()
    seeds = list(COVERING_SEEDS)[:args.seeds]
    t0 = time.perf_counter()
    for i, seed in enumerate(seeds, 1):
        simulate(draw(seed, DEFAULT_OPS), None)
        print(f"\rseed {seed} ({i} of {len(seeds)})", end="", file=sys.stderr, flush=True)
    total = time.perf_counter() - t0
    print(file=sys.stderr)
    print(f"{len(seeds)} swarm runs: {total:.1f} s, {sum(steps.values()):,} steps")
    for kind in ("message", "timer"):
        rows = [r for r in seconds if r[0] == kind]
        spent = sum(seconds[r] for r in rows)
        print(f"\n{kind}s: {sum(steps[r] for r in rows):,} steps, {spent:.1f} s ({spent / total:.0%} of the runs)")
        moot_column = f" {'moot':>8}" if kind == "timer" else ""
        print(f"  {'seconds':>7} {'share':>6} {'steps':>9} {'us/step':>7}{moot_column}  what, where")
        for r in sorted(rows, key=lambda r: -seconds[r])[:args.top]:
            moot_column = f" {moot[r]:8,}" if kind == "timer" else ""
            print(f"  {seconds[r]:7.2f} {seconds[r] / total:6.1%} {steps[r]:9,} "
                  f"{seconds[r] / steps[r] * 1e6:7.1f}{moot_column}  {r[1]}, {r[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
