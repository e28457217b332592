"""Replaying a model counterexample on the reference engine in the simulator.

The counterexample's control steps become a scripted fault schedule (replica ``r`` is broker
``r + 1`` of a cluster with as many brokers as the model has replicas, one partition,
replication factor = brokers, min.insync.replicas 1):

* ``crash r`` -> kill the broker, then wait past the controller's session timeout so that it
  is fenced (and a new leader elected when it led);
* ``restart r`` -> restart it;
* ``elect r`` while the old leader is alive -> cut the old leader off from everyone until the
  controller moves the leadership (healed afterwards); with the leader dead the controller
  elects by itself;
* ``shrink r`` -> cut ``r`` off from the leader (not from the controller), so that the leader
  drops it from the ISR.

The data steps (append, fetch, truncate, advance-hw, expand) are what the queue workload's
producers and the replicas' fetchers do all the time; the schedule leaves time for them.
Which fetch lands in which window depends on the seed, so the replay runs seeds 0, 1, ...
with the variant's bug switch until the checker reports the predicted anomaly, then runs the
same seed without the switch, where the checker must find nothing. Transaction
counterexamples (a request held back across transactions) become a ``straggle`` fault over
the txn workload.
"""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

SESSION_WAIT_MS = 11_000  # well past the simulated cluster's 2 s broker session timeout
# what the checker must report for each variant's counterexample
LOST_COMMITTED = {"lost-write", "unread-after-heal", "inconsistent-offsets", "log-matching", "leader-completeness"}
PREDICTED = {"kip101": LOST_COMMITTED, "kip279-hole": LOST_COMMITTED, "no-epoch-hw": LOST_COMMITTED,
             "unclean": LOST_COMMITTED, "txn-17754": {"G1a", "lost-write", "G1c", "aborted-read", "txn-atomicity"}}


def schedule_for(steps: list[dict], replicas: int) -> list[dict]:
    """The scripted fault schedule of a replication counterexample."""
    def node(r: int) -> int:
        return r + 1

    out: list[dict] = []
    t = 3_000
    leader = 0
    alive = set(range(replicas))
    control = [s for s in steps[1:] if s["action"] in ("crash", "restart", "elect", "shrink")]
    next_control = {id(a): b for a, b in itertools.pairwise(control)}  # a control step -> the next one
    for step in steps[1:]:
        a, r = step["action"], step["replica"]
        later = next_control.get(id(step))
        if a == "crash":
            out.append({"at_ms": t, "f": "kill", "value": {"nodes": [node(r)]}})
            alive.discard(r)
            # back at once (still in the ISR, its volatile state lost), or gone long enough to be fenced
            quick = later is not None and later["action"] == "restart" and later["replica"] == r
            t += 300 if quick else SESSION_WAIT_MS
        elif a == "restart":
            out.append({"at_ms": t, "f": "restart", "value": {"nodes": [node(r)]}})
            alive.add(r)
            # the next crash strikes before the restarted replica fetches again
            t += 30 if later is not None and later["action"] == "crash" else 3_000
        elif a == "elect":
            if leader in alive and leader != r:
                others = [node(x) for x in range(replicas) if x != leader] + [0]  # 0: the controller
                grudge = {str(node(leader)): others, **{str(o): [node(leader)] for o in others}}
                out.append({"at_ms": t, "f": "partition", "value": {"grudge": grudge}})
                out.append({"at_ms": t + SESSION_WAIT_MS, "f": "heal", "value": None})
                t += SESSION_WAIT_MS + 2_000
            else:
                t += 2_000
            leader = r
        elif a == "shrink":
            grudge = {str(node(r)): [node(leader)], str(node(leader)): [node(r)]}
            out.append({"at_ms": t, "f": "partition", "value": {"grudge": grudge}})
            t += SESSION_WAIT_MS
        else:
            t += 500
    return out


def replay(variant: str, result, bug: str | None, console, seeds: int = 20) -> bool:
    """Run the counterexample on the engine with and without the bug switch; True when the
    verdicts are the predicted ones (invalid with the switch, valid without)."""
    from kafkacheck.runner import RunOptions, simulate
    from properties.queue import check
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
        schedule = schedule_for(result.steps, replicas)
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
