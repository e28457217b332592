"""A covering array of the swarm's choices: seeds whose draws, together, make every pair of
choices come up.

The swarm draws each choice of a run on its own (:func:`kafkacheck.swarm.draw`), so the pieces
a check needs rarely come together by chance: one run in seven is a groups run, one groups run
in four uses the cooperative assignor, fewer still pause a member. A hunt therefore starts
with the seeds of :func:`covering_seeds`: among the first :data:`POOL` seeds, a few dozen
chosen greedily (each the one that covers most pairs not yet covered) until every pair of
values of two choices that any seed of the pool draws is drawn by one of them: workload x
assignor, workload x transaction version, static members x pause, kill x an aimed strategy...
Pairs no seed can draw (an assignor outside the groups runs, ``offline-partition`` with
``kill``) are not asked for. The seeds are ordinary swarm seeds: ``kafkacheck run --swarm
SEED`` makes each, and nothing of the draw changed for them.
"""

from __future__ import annotations

import sys
from itertools import combinations

from fault_injection.aimed import AIMED
from kafkacheck.runner import RunOptions

POOL = 6_000  # the seeds the covering seeds are chosen among
_FAULTS = ("partition", "loss", "delay", "straggle", "duplicate", "reorder", "kill", "pause", "disk", "clock-skew",
           "offline-partition")


def choices(o: RunOptions) -> dict[str, str]:
    """A drawn run's choices, each as a value (a choice that does not apply to the run's
    workload, such as the assignor of a queue run, is left out)."""
    c = {"workload": o.workload, "acks": o.acks, "min.insync.replicas": str(o.min_insync_replicas),
         "model template": str("template" in (o.swarm or {}))}
    c |= {f"fault:{f}": str(f in o.faults) for f in _FAULTS}
    c |= {f"aimed:{a}": str(a in o.aimed) for a in AIMED}
    if o.workload in ("txn", "eos"):
        c["transaction.version"] = str(o.transaction_version)
        c["producer epochs"] = "near the end" if o.producer_epoch_start else "from 0"
    if o.workload == "groups" or o.eos_subscribe:
        c["group.protocol"] = o.group_protocol
        c["assignor"] = o.assignor
    if o.workload == "groups":
        c["static members"] = str(o.static_members)
    if o.workload == "eos":
        c["eos subscribes"] = str(o.eos_subscribe)
    return c


def pairs(c: dict[str, str]) -> set[tuple[str, str, str, str]]:
    """Every pair of two choices' values of one run."""
    return {(a, c[a], b, c[b]) for a, b in combinations(sorted(c), 2)}


def covering_seeds(pool: int = POOL) -> tuple[int, ...]:
    """Seeds of ``range(pool)`` whose draws cover every pair of choices any seed of the pool
    draws, chosen greedily: each the seed covering most pairs not yet covered (the smallest
    such seed on a tie). Deterministic, and about 6 s: :data:`COVERING_SEEDS` keeps the list
    (``python -m kafkacheck.covering`` prints it again; a test compares)."""
    from kafkacheck.swarm import draw

    drawn = [pairs(choices(draw(seed))) for seed in range(pool)]
    uncovered = set().union(*drawn)
    chosen: list[int] = []
    while uncovered:
        seed = max(range(pool), key=lambda s: (len(drawn[s] & uncovered), -s))
        chosen.append(seed)
        uncovered -= drawn[seed]
    return tuple(chosen)


# covering_seeds(), kept (tests/kafkacheck/test_covering.py computes it again and compares)
COVERING_SEEDS = (40, 1173, 2017, 1903, 1143, 2187, 4452, 358, 515, 3943, 752, 296, 3593, 1802, 2999, 2883, 2233,
                  3011, 132, 4450, 2194, 1140, 1141, 977, 609, 3677, 111, 136, 1694, 3631, 42, 67, 1943, 200, 135,
                  281, 360, 488, 1098, 14, 188, 608, 1031, 8, 10, 60, 222, 295, 802, 21, 31, 39, 62, 91, 579, 1318)


if __name__ == "__main__":
    seeds = covering_seeds()
    print(f"{len(seeds)} seeds: {seeds}")
    sys.exit(0 if seeds == COVERING_SEEDS else 1)
