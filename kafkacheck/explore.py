"""``kafkacheck explore``: Hypothesis programs against the simulated cluster, each workload's
machine taken from the registry (:data:`kafkacheck.workloads.WORKLOADS`).

Each machine (a workload's ``machine``, over :class:`~kafkacheck.workloads.machine.ClusterMachine`)
boots a cluster (a controller and three brokers in a seeded
:class:`~fault_injection.simulation.Simulation`), then runs rules that Hypothesis chooses:
the workload's client ops (produce with acks and idempotence drawn at boot, poll,
transactions that commit or abort, consumer-group join/leave/crash/commit, keyed updates and
tombstones on a compacted topic), faults (kill, restart, pause, resume, network partitions
and heals, message loss, disk faults, clock skew) and the passing of time. After every rule
the simulator's white-box invariants must hold (they run after every broker step); at
teardown every fault is healed, the clients finish, a reader reads every partition from the
beginning, and the history checker of :mod:`properties.checker` must find no violation.

The first program that breaks an invariant or makes the checker report a violation is
shrunk to a short one (:func:`explore`), printed, and saved as JSON (:func:`save`) so that
``kafkacheck explore --replay FILE`` runs it again (:func:`replay`), deterministically: the
simulation is seeded by the ``boot`` rule, so it replays byte for byte.

Past ``time_limit`` an exploration stops, unless it is shrinking a finding (for as long
again at most): the programs shrinking tries mostly find nothing, and stopping at one of
those would lose the finding. ``derandomize`` runs the same programs in the same order every
time, so a budget of programs is a verdict that does not depend on the machine's speed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.errors import Flaky
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from kafkacheck.run_machine import run_machine
from kafkacheck.workloads import WORKLOADS
from kafkacheck.workloads.machine import ClusterMachine, Finding
from reference.bugs import Bug

# the workloads that have a machine, by name
MACHINES: dict[str, type[ClusterMachine]] = {name: w.machine for name, w in WORKLOADS.items()
                                             if w.machine is not None}
MACHINES |= {name: m for w in WORKLOADS.values() for name, m in w.variants.items()}  # (groups-consumer: KIP-848's)
# every other workload: its own clients under the machine's faults (kafkacheck.run_machine)
MACHINES |= {name: run_machine(name, w.description) for name, w in WORKLOADS.items() if name not in MACHINES}
# the machine whose rules can reach each bug switch
MACHINE_FOR_BUG = {
    Bug.TRUNCATE_TO_HIGH_WATERMARK: "queue", Bug.HW_WITHOUT_EPOCH_CHECK: "queue", Bug.UNCLEAN_ELECTION: "queue",
    Bug.EPOCH_LOOKUP_FALLS_BACK_TO_HW: "queue",
    Bug.NO_SEQUENCE_CHECK: "queue", Bug.ACK_BEFORE_ISR: "queue", Bug.TXN_UNFENCED_REQUESTS: "txn",
    Bug.LSO_OFF_BY_ONE: "txn", Bug.GROUP_GENERATION_UNFENCED: "groups", Bug.COMPACTION_DROPS_LATEST: "compaction",
    Bug.GROUP_UNLOAD_STRANDS_JOINS: "groups", Bug.TXN_MARKERS_SKIP_OFFLINE: "txn",
    Bug.CONSUMER_GROUP_PARTITION_EPOCH_LOST: "groups-consumer", Bug.CONSUMER_GROUP_REJOIN_FENCED: "groups-consumer",
    Bug.TXN_EPOCH_OVERFLOW: "txn-epoch-end",
    Bug.SHARE_ACK_BEFORE_PERSIST: "share", Bug.SHARE_ACK_ANY_HOLDER: "share", Bug.SHARE_COUNT_NOT_INCREMENTED: "share",
}

__all__ = ["MACHINES", "MACHINE_FOR_BUG", "Exploration", "Finding", "explore", "load", "machine", "replay",
           "run_replay", "save"]


def machine(name: str, bugs: tuple[str, ...] | list[str] = ()) -> type[ClusterMachine]:
    """The machine class ``name`` with the engine's bug switches ``bugs`` on."""
    base = MACHINES[name]
    # a fresh subclass each time: its hooks and ``last`` are its own
    return type(base.__name__, (base,), {"bugs": tuple(bugs), "__module__": base.__module__})


def replay(name: str, bugs: list[str], steps: list[list]) -> ClusterMachine:
    """Run a recorded program (``steps`` of a run) again; raises what the run raised."""
    m = machine(name, bugs)()
    try:
        for step, args in steps:
            getattr(m, step)(**args)
            m.white_box()
    finally:
        m.teardown()
    return m


@dataclass
class Exploration:
    found: str | None  # the finding's message, None when nothing was found
    examples: int  # programs run (shrinking included)
    seconds: float
    steps: list  # the shrunk program (rules with their arguments)
    timed_out: bool = False  # the time limit stopped it before its programs were run
    found_after: int | None = None  # programs run up to the first one that found something
    found_seconds: float | None = None  # and the seconds until then (shrinking comes after)


def explore(name: str, bugs: list[str], examples: int, steps: int = 25, time_limit: float | None = None,
            on_example=None, derandomize: bool = False, shrink: bool = True) -> Exploration:
    """Run machine ``name`` (with bug switches ``bugs``) for up to ``examples`` programs of up
    to ``steps`` rules, stopping early (with what was found so far) after ``time_limit``.
    ``derandomize``: the same programs in the same order every time (a budget of programs is
    then a verdict that does not depend on the machine's speed). ``shrink``: False stops at
    the first finding, which is reported as it was found."""
    cls = machine(name, bugs)
    count = [0]
    start = time.monotonic()
    deadline = None if time_limit is None else start + time_limit

    class Stop(BaseException):
        """The time limit passed, or a finding ends it (a BaseException: Hypothesis lets it
        through)."""

    first: list[tuple[str, list]] = []  # the first finding, kept in case shrinking is cut short

    def hook(m: ClusterMachine) -> None:
        count[0] += 1
        if on_example is not None:
            on_example(count[0])
        if not first and _found(m):
            first.append((_finding_text(m), [list(s) for s in m.steps], count[0], time.monotonic() - start))
            if not shrink:
                raise Stop
        if deadline is None or time.monotonic() <= deadline:
            return
        # past the limit: stop, unless shrinking a finding (for as long again at most; the
        # programs shrinking tries mostly find nothing, and stopping at one of those lost the
        # finding: the machines looked blind)
        if not first or time.monotonic() > deadline + max(time_limit or 0, 30):
            raise Stop

    cls.on_example = staticmethod(hook)
    found = None
    timed_out = False
    try:
        with with_reporter(lambda _text: None):  # the program is printed from ``steps`` instead
            run_state_machine_as_test(cls, settings=settings(
                max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
                suppress_health_check=list(HealthCheck), print_blob=False, derandomize=derandomize))
    except Stop:
        timed_out = True
    except (Finding, Flaky) as e:
        found = str(e).splitlines()[0] if str(e) else type(e).__name__
    except BaseExceptionGroup as group:  # Hypothesis found distinct failures: the first
        finding = next((e for e in group.exceptions if isinstance(e, (Finding, Flaky))), None)
        if finding is None:
            raise
        # the program shown is the last one run: name its own finding
        last = cls.last
        found = (_finding_text(last) if last is not None and _found(last)
                 else str(finding).splitlines()[0] if str(finding) else type(finding).__name__)
    last = cls.last
    program = [list(s) for s in last.steps] if (found and last is not None) else []
    if found is None and first:
        found, program = first[0][:2]  # shrinking was cut short: the finding as first seen
        found += " (not shrunk: the time limit cut shrinking short)" if shrink else " (not shrunk)"
    after, after_s = (first[0][2], first[0][3]) if first else (None, None)
    return Exploration(found, count[0], time.monotonic() - start, program, timed_out and not found,
                       after if found else None, after_s if found else None)


def _finding_text(m: ClusterMachine) -> str:
    if m.sim is not None and m.sim.violations:
        at, v = m.sim.violations[0]
        return f"invariant '{v.invariant}' broken on node {v.node} at {at / 1e9:.3f} s: {v.detail}"
    r = m.result or {}
    kinds = [k for k in r.get("anomaly_types", []) if k != "empty-history"]
    return "the history checker found: " + ", ".join(kinds)


def _found(m: ClusterMachine) -> bool:
    """Whether this run found something (so that shrinking is not cut short)."""
    if m.sim is not None and m.sim.violations:
        return True
    r = m.result
    return bool(r and [k for k in r["anomaly_types"] if k != "empty-history"])


def save(path: Path, name: str, bugs: list[str], program: list) -> None:
    path.write_text(json.dumps({"machine": name, "bugs": bugs, "steps": program}, indent=1) + "\n")


def load(path: Path) -> tuple[str, list[str], list]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a program saved by kafkacheck explore ({e})") from None
    if not (isinstance(data, dict) and data.get("machine") in MACHINES and isinstance(data.get("steps"), list)
            and isinstance(data.get("bugs", []), list)):
        raise ValueError(f"{path}: not a program saved by kafkacheck explore "
                         f"(needs machine: one of {', '.join(MACHINES)}, bugs, steps)")
    steps = data["steps"]
    for s in steps:
        if not (isinstance(s, list) and len(s) == 2 and isinstance(s[0], str) and isinstance(s[1], dict)):
            raise ValueError(f"{path}: each step is [rule name, {{arguments}}], not {s!r}")
    if not steps or steps[0][0] != "boot":
        raise ValueError(f"{path}: the first step must be boot")
    return data["machine"], list(data.get("bugs", [])), steps


def run_replay(path: Path) -> tuple[str, list[str], str | None, dict | None]:
    """(machine, bugs, finding or None, results) of a saved program run again."""
    name, bugs, steps = load(path)
    cls = machine(name, bugs)
    for rule_name, _args in steps:
        if not callable(getattr(cls, rule_name, None)):
            raise ValueError(f"{path}: machine {name} has no rule {rule_name!r}")
    try:
        m = replay(name, bugs, steps)
    except Finding as e:
        last = cls.last
        return name, bugs, str(e), last.result if last is not None else None
    except TypeError as e:
        raise ValueError(f"{path}: bad arguments in a step: {e}") from None
    return name, bugs, None, m.result
