"""How long the z3 models take: every historical bug found at the smallest depth that shows
it (target: each under 10 s), and the fixed protocol verified to depth 12 (target: under 2
minutes). Prints one line per variant.

    python benchmarks/model_speed.py [--fixed-depth 12] [--replicas 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from properties.formal.bmc import check
from properties.formal.replication import Model
from properties.formal.transactions import TxnModel


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fixed-depth", type=int, default=12)
    ap.add_argument("--replicas", type=int, default=2)
    args = ap.parse_args()
    print(f"{'variant':<14} {'verdict':<34} {'depth':>5} {'seconds':>8}  target")
    ok = True
    for variant, depth in (("unclean", 4), ("no-epoch-hw", 6), ("kip101", 8), ("kip279-hole", 9)):
        r = check(Model(variant, replicas=args.replicas), depth)
        good = r.violated is not None and r.seconds < 10
        ok &= good
        verdict = "met" if good else "MISSED"
        print(f"{variant:<14} {r.violated or 'none':<34} {r.depth:>5} {r.seconds:>8.2f}  < 10 s {verdict}")
    r = check(TxnModel("txn-17754"), 7)
    good = r.violated is not None and r.seconds < 10
    ok &= good
    verdict = "met" if good else "MISSED"
    print(f"{'txn-17754':<14} {r.violated or 'none':<34} {r.depth:>5} {r.seconds:>8.2f}  < 10 s {verdict}")
    start = time.monotonic()
    r = check(TxnModel("txn-kip890"), args.fixed_depth)
    print(f"{'txn-kip890':<14} {'no violation' if r.ok else r.violated:<34} {args.fixed_depth:>5} "
          f"{time.monotonic() - start:>8.2f}")
    r = check(Model("fixed", replicas=args.replicas), args.fixed_depth)
    good = r.ok and r.seconds < 120
    ok &= good
    print(f"{'fixed':<14} {'no violation' if r.ok else r.violated:<34} {args.fixed_depth:>5} {r.seconds:>8.2f}  "
          f"< 120 s {'met' if good else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
