"""Exploring a machine of :mod:`properties.machines` with Hypothesis: programs run, the first
finding kept (and shrunk, unless told not to), a time limit that is a safety net.

A finding is a white-box invariant broken or a violation the history checker reports. Past
``time_limit`` the exploration stops, unless it is shrinking a finding (for as long again at
most): the programs shrinking tries mostly find nothing, and stopping at one of those would
lose the finding. ``derandomize`` runs the same programs in the same order every time, so a
budget of programs is a verdict that does not depend on the machine's speed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from hypothesis import HealthCheck, settings
from hypothesis.errors import Flaky
from hypothesis.reporting import with_reporter
from hypothesis.stateful import run_state_machine_as_test

from properties.cluster_machine import ClusterMachine, Finding
from properties.machines import machine


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
