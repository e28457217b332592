"""The verdict on a history: what ``kafkacheck run``, ``check``, ``corpus`` and ``hunt`` give.

The history checker (:func:`properties.checker.check`) judges the client ops; the white-box
invariant violations and liveness findings a simulated run recorded in its events are added
(:func:`properties.checker.with_invariant_violations`). A run directory's ``results.json`` is
written here too, so a re-check keeps what only the run knew.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from properties.checker import check, with_invariant_violations
from traces.history import HistoryError, RunRecord, loads_line


def judge(meta: dict, ops: Iterable[dict], events: list[dict] | None = None, **options) -> dict:
    """The verdict on ``ops`` under ``meta``'s config, with the violations among ``events``
    (None: a history without events, as one recorded against a real broker). ``options``
    go to the checker (cycle budget, forbidden anomaly types, linearizability)."""
    result = check(ops, meta.get("config") or {}, **options)
    return result if events is None else with_invariant_violations(result, events)


def judge_record(record: RunRecord, **options) -> dict:
    """The verdict on a run held in memory (a simulation's record, a corpus run)."""
    return judge(record.meta, record.ops, record.events, **options)


def read_events(directory: Path) -> list[dict] | None:
    """A run directory's events.jsonl (None when it has none); a bad line is a HistoryError."""
    path = directory / "events.jsonl"
    if not path.exists():
        return None
    events = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        event = loads_line(line, f"{path}:{n}")
        if not isinstance(event, dict):
            raise HistoryError(f"{path}:{n}: an event must be a JSON object")
        events.append(event)
    return events


def write_results(path: Path, result: dict) -> None:
    """Write a re-check's verdict, keeping what only the run knew: how to reproduce it and the
    simulation's statistics."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = {}
    if isinstance(old, dict):
        if "reproduce" in old:
            result["reproduce"] = old["reproduce"]
        stats = old.get("stats")
        if isinstance(stats, dict) and "simulation" in stats:
            result["stats"]["simulation"] = stats["simulation"]
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
