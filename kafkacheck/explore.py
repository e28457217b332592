"""``kafkacheck explore``: run a Hypothesis state machine of :mod:`properties.machines`.

Hypothesis generates programs of rules (client ops, faults, time) against the simulated
cluster; the first program that breaks a white-box invariant or makes the history checker
report a violation is shrunk to a short one, printed, and saved as JSON so that
``kafkacheck explore --replay FILE`` runs it again, deterministically.
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

from properties.machines import MACHINES, ClusterMachine, Finding, machine, replay


@dataclass
class Exploration:
    found: str | None  # the finding's message, None when nothing was found
    examples: int  # programs run (shrinking included)
    seconds: float
    steps: list  # the shrunk program (rules with their arguments)
    report: list[str]  # what Hypothesis printed about the falsifying example


def explore(name: str, bugs: list[str], examples: int, steps: int = 25, time_limit: float | None = None,
            on_example=None) -> Exploration:
    """Run machine ``name`` (with bug switches ``bugs``) for up to ``examples`` programs of up
    to ``steps`` rules, stopping early (with what was found so far) after ``time_limit``."""
    cls = machine(name, bugs)
    count = [0]
    start = time.monotonic()
    deadline = None if time_limit is None else start + time_limit

    class Stop(BaseException):
        """The time limit passed (a BaseException: Hypothesis lets it through)."""

    def hook(m: ClusterMachine) -> None:
        count[0] += 1
        if on_example is not None:
            on_example(count[0])
        if deadline is not None and time.monotonic() > deadline and not _found(m):
            raise Stop

    cls.on_example = staticmethod(hook)
    report: list[str] = []
    found = None
    try:
        with with_reporter(report.append):
            run_state_machine_as_test(cls, settings=settings(
                max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
                suppress_health_check=list(HealthCheck), print_blob=False))
    except Stop:
        pass
    except (Finding, Flaky) as e:
        found = str(e).splitlines()[0] if str(e) else type(e).__name__
    last = cls.last
    program = [list(s) for s in last.steps] if (found and last is not None) else []
    return Exploration(found, count[0], time.monotonic() - start, program, report)


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
