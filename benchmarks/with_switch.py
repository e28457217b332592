"""How fast the swarm finds each bug switch it is not told about.

    python benchmarks/with_switch.py [--time-limit S] [--jobs N] [SWITCH ...]

For each bug switch (default: every one) runs ``kafkacheck hunt --with-switch SWITCH
--time-limit S --jobs N`` (default 120 s, 2 jobs): the swarm draws the same seeds and steers the
same way as on the correct engine, and stops at its first finding, which it shrinks. Prints one
row per switch (found or not, after how many runs and seconds, the swarm seed, the anomalies,
the command that reproduces the shrunk finding) and exits 1 if any switch was not found within
60 s, the target of docs/how-to/hunt.md. Run it with nothing else on the machine: with two
jobs the steering sees runs end in an order that depends on timing.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from kafkacheck import swarm_hunt
from reference.bugs import BUGS

TARGET_S = 60.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("switches", nargs="*", help="the switches (default: every one)")
    ap.add_argument("--time-limit", type=float, default=120.0)
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    unknown = sorted(set(args.switches) - set(BUGS))
    if unknown:
        print(f"unknown switch {unknown[0]!r}; known: {', '.join(sorted(BUGS))}", file=sys.stderr)
        return 3
    late = []
    print("| switch on in the engine | found | after | swarm seed | anomaly | reproduce with |")
    print("| --- | --- | ---: | ---: | --- | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.switches or sorted(BUGS):
            out = swarm_hunt.swarm(args.time_limit, None, args.jobs, with_switch=name, log=lambda _m: None,
                                   out_dir=Path(tmp) / name)
            if not out.found:
                late.append(name)
                print(f"| `{name}` | no | {out.runs} runs, {out.seconds:.1f} s | - | - | - |", flush=True)
                continue
            seed, anomalies, _drawn = out.found[0]
            if out.seconds > TARGET_S:
                late.append(name)
            command = swarm_hunt.swarm_command(seed, out.shrunk_ops or out.ops, name)
            print(f"| `{name}` | yes | {out.runs} runs, {out.seconds:.1f} s | {seed} | {', '.join(anomalies)} "
                  f"| `{command}` |", flush=True)
    if late:
        print(f"not found within {TARGET_S:.0f} s: {', '.join(late)}")
    return 1 if late else 0


if __name__ == "__main__":
    sys.exit(main())
