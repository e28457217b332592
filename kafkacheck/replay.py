"""Replaying a model counterexample on the reference engine in the simulator.

The counterexample's steps become a scripted fault schedule
(:func:`fault_injection.model_shapes.schedule_for`, which says how each step maps). Which
record lands in which window still depends on the seed, so the replay runs seeds 0, 1, ...
with the variant's bug switch until the checker reports the predicted anomaly, then runs the
same seed without the switch, where the checker must find nothing. Transaction
counterexamples (a request held back across transactions) become a ``straggle`` fault over the
txn workload.
"""


from __future__ import annotations

import tempfile
from pathlib import Path

from fault_injection.model_shapes import schedule_for
from reference.bugs import Bug

# what the checker must report for each variant's counterexample
LOST_COMMITTED = {"lost-write", "unread-after-heal", "inconsistent-offsets", "log-matching", "leader-completeness"}
PREDICTED = {"kip101": LOST_COMMITTED, "kip279-hole": LOST_COMMITTED, "no-epoch-hw": LOST_COMMITTED,
             "unclean": LOST_COMMITTED, "txn-17754": {"G1a", "lost-write", "G1c", "aborted-read", "txn-atomicity"}}


def replay(variant: str, result, bug: str | None, console, seeds: int = 20) -> bool:
    """Run the counterexample on the engine with and without the bug switch; True when the
    verdicts are the predicted ones (invalid with the switch, valid without)."""
    from kafkacheck.runner import RunOptions, simulate
    from properties.checker import check
    from traces.history import iter_history

    if bug is None:
        console.print(f"{variant} has no bug switch in the engine: nothing to replay")
        return True
    txn = variant.startswith("txn-")
    if txn:
        replicas = 3
        schedule = [{"at_ms": 2_000, "f": "straggle", "value": {"p": 0.05, "ms": 4_000}}]
        base = {"workload": "txn", "ops": 3_000, "brokers": 3, "partitions": 4, "replication_factor": 3,
                "min_insync_replicas": 2}
    else:
        replicas = len(result.steps[0]["state"]["replicas"])
        schedule = schedule_for(result.steps, replicas, local_truncation=bug == Bug.TRUNCATE_TO_HIGH_WATERMARK)
        base = {"workload": "queue", "ops": 3_000, "brokers": replicas, "partitions": 1,
                "replication_factor": replicas, "min_insync_replicas": 1}
    console.print(f"replay: {len(schedule)} scheduled fault step(s) on {replicas} brokers, bug switch {bug}")
    predicted = PREDICTED.get(variant, set())
    work = Path(tempfile.mkdtemp(prefix="kafkacheck-replay-"))

    def verdict(seed: int, bugs: list[str]) -> tuple[bool, list[str]]:
        opts = RunOptions(seed=seed, faults=[], bugs=bugs, schedule=schedule, keep_going=True, **base)
        outcome = simulate(opts, work / f"seed{seed}-{'bug' if bugs else 'fixed'}")
        config = outcome.run_meta["config"]
        res = check(iter_history(outcome.run_dir / "history.jsonl"), config)
        kinds = sorted(set(res["anomaly_types"]) | {v.get("invariant", v.get("kind", "")) for v in outcome.violations})
        return res["valid"] is True and not outcome.violations, [k for k in kinds if k]

    for seed in range(seeds):
        with console.status(f"replay: seed {seed} with {bug}"):
            valid, kinds = verdict(seed, [bug])
        if valid or not (set(kinds) & predicted):
            console.print(f"  seed {seed} with {bug}: {'valid' if valid else ', '.join(kinds)}")
            continue
        console.print(f"  seed {seed} with {bug}: [bold red]invalid[/] ({', '.join(kinds)}), as the model predicts")
        with console.status(f"replay: seed {seed} without {bug}"):
            valid_fixed, kinds_fixed = verdict(seed, [])
        console.print(f"  seed {seed} without the switch: "
                      + ("[bold green]valid[/], as the model predicts" if valid_fixed else
                         f"[bold red]invalid[/] ({', '.join(kinds_fixed)}): the engine is not the fixed model"))
        console.print(f"  runs in {work}")
        return valid_fixed
    console.print(f"replay: no seed of {seeds} showed the predicted anomaly ({', '.join(sorted(predicted))})")
    return False
