"""``kafkacheck explore``: run a Hypothesis state machine of :mod:`properties.machines`.

Hypothesis generates programs of rules (client ops, faults, time) against the simulated
cluster; the first program that breaks a white-box invariant or makes the history checker
report a violation is shrunk to a short one, printed, and saved as JSON so that
``kafkacheck explore --replay FILE`` runs it again, deterministically.
"""

from __future__ import annotations

import json
from pathlib import Path

from properties.exploration import explore
from properties.machines import MACHINES, Finding, machine, replay

__all__ = ["explore", "load", "run_replay", "save"]


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
