"""Checking a history: partition it, search every partition, combine the verdicts.

``check_operations(model, operations)`` is the whole API (``check_events`` takes porcupine's
event form). Built-in models run on the C++ search (``linearizability._porcupine``) with the
partitions spread over threads and interleaved in slices; models defined in Python, or
``engine="python"``, run on the pure-Python search of :mod:`linearizability.oracle`, the
partitions interleaved the same way. Either way the first illegal partition stops the others,
``iterations_max`` (work per partition, so the verdict does not depend on the
machine's load), ``timeout_s`` (a wall-clock safety net) and ``memory_max_mb`` turn a
search that runs too long or too big into ``unknown`` with the reason, and
``partial=True`` keeps the longest linearizable prefix of every partition (for reports and
the HTML page).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from linearizability.models import Model
from linearizability.operations import Event, HistoryError, Operation, events_to_operations, pending_return_time, validate
from linearizability.oracle import PythonSearch

MEMORY_MAX_MB = 4096        # default cap on the search caches
SLICE_ITERATIONS = 4096     # steps a partition runs before the next one gets its turn
PYTHON_ENTRY_BYTES = 200    # rough size of one cache entry in the Python search

try:
    from linearizability import _porcupine
except ImportError:  # pragma: no cover - only when the extension was not built
    _porcupine = None


@dataclass
class PartitionResult:
    verdict: str                      # ok, illegal, unknown
    operations: list[Operation]
    reason: str = ""                  # why unknown: iterations, timeout, memory, cancelled
    longest: list[int] = field(default_factory=list)   # op positions of the longest linearizable prefix
    blocked: int | None = None        # the op whose return the search could not get past
    iterations: int = 0
    cache_entries: int = 0

    @property
    def stuck(self) -> Operation | None:
        """The operation an illegal partition's search could not get past."""
        return self.operations[self.blocked] if self.verdict == "illegal" and self.blocked is not None else None


@dataclass
class CheckResult:
    verdict: str                      # ok, illegal, unknown
    model: str
    engine: str                       # c++ or python
    partitions: list[PartitionResult]
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    def illegal_partitions(self) -> list[PartitionResult]:
        return [p for p in self.partitions if p.verdict == "illegal"]

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for p in self.partitions:
            counts[p.verdict] = counts.get(p.verdict, 0) + 1
        parts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        reasons = sorted({p.reason for p in self.partitions if p.reason and p.reason != "cancelled"})
        why = f" ({', '.join(reasons)})" if self.verdict == "unknown" and reasons else ""
        return (f"{self.verdict}{why}: {len(self.partitions)} partition(s) [{parts}], "
                f"{sum(len(p.operations) for p in self.partitions)} operations, {self.engine}, {self.elapsed_s:.3f} s")


def native_available() -> bool:
    return _porcupine is not None


def check_operations(model: Model, operations: Sequence[Operation], *, timeout_s: float | None = None,
                     memory_max_mb: float = MEMORY_MAX_MB, partial: bool = False, engine: str = "auto",
                     threads: int | None = None, partitioned: bool = True,
                     iterations_max: int | None = None) -> CheckResult:
    """Is the history linearizable with respect to ``model``? ``engine`` is ``auto`` (C++
    when the model has a native twin), ``c++`` or ``python``; ``partitioned=False`` checks the
    history as one piece even when the model could split it."""
    validate(operations)
    started = time.perf_counter()
    parts = model.partition(operations) if (partitioned and model.partition) else [list(operations)]
    parts = [p for p in parts if p]
    use_native = engine == "c++" or (engine == "auto" and model.native is not None and _porcupine is not None)
    if model.prepare:
        prepared = [model.prepare(p) for p in parts]
        parts = [[p[i] for i, _ in pairs] for p, pairs in zip(parts, prepared, strict=True)]
        searched = [[op for _, op in pairs] for pairs in prepared]
    else:
        searched = parts
    if use_native:
        if model.native is None or model.encode is None:
            raise HistoryError(f"model {model.name!r} has no C++ twin; use engine='python'")
        if _porcupine is None:
            raise HistoryError("the C++ extension linearizability._porcupine is not built; reinstall with pip")
        results = _check_native(model, searched, timeout_s, memory_max_mb, partial, threads, iterations_max)
    elif engine in ("auto", "python"):
        results = _check_python(model, searched, timeout_s, memory_max_mb, partial, iterations_max)
    else:
        raise HistoryError(f"engine must be auto, c++ or python, not {engine!r}")
    for result, original in zip(results, parts, strict=True):
        result.operations = original      # report the intervals as recorded
    verdicts = {r.verdict for r in results}
    verdict = "illegal" if "illegal" in verdicts else ("unknown" if "unknown" in verdicts else "ok")
    return CheckResult(verdict, model.name, "c++" if use_native else "python", results,
                       time.perf_counter() - started)


def check_events(model: Model, events: Iterable[Event], **options) -> CheckResult:
    return check_operations(model, events_to_operations(events), **options)


def _check_native(model: Model, parts: list[list[Operation]], timeout_s: float | None, memory_max_mb: float,
                  partial: bool, threads: int | None, iterations_max: int | None) -> list[PartitionResult]:
    encoded = [model.encode(p, pending_return_time(p)) for p in parts]
    raw = _porcupine.check(model.native, encoded, timeout_s=timeout_s or 0.0,
                           bytes_max=int(memory_max_mb * 1024 * 1024), threads=threads or os.cpu_count() or 1,
                           partial=partial, slice=SLICE_ITERATIONS, iterations_max=iterations_max or 0)
    return [PartitionResult(r["verdict"], ops, r["reason"], list(r["longest"]),
                            None if r["blocked"] < 0 else r["blocked"], r["iterations"], r["cache_entries"])
            for r, ops in zip(raw, parts, strict=True)]


def _check_python(model: Model, parts: list[list[Operation]], timeout_s: float | None, memory_max_mb: float,
                  partial: bool, iterations_max: int | None) -> list[PartitionResult]:
    entries_max = int(memory_max_mb * 1024 * 1024 / PYTHON_ENTRY_BYTES)
    searches = [PythonSearch(model, p, partial=partial) for p in parts]
    deadline = None if not timeout_s else time.monotonic() + timeout_s
    reasons = ["" for _ in searches]
    running = [i for i, s in enumerate(searches) if s.status == "running"]
    stop_reason = ""
    while running and not stop_reason:
        for i in list(running):
            status = searches[i].run(SLICE_ITERATIONS)
            if status != "running":
                running.remove(i)
            elif iterations_max and searches[i].iterations >= iterations_max:
                running.remove(i)  # this partition alone ran out of work
                searches[i].give_up()
                reasons[i] = "iterations"
            if status == "illegal":
                stop_reason = "cancelled"
                break
            if sum(s.cache_entries for s in searches) > entries_max:
                stop_reason = "memory"
                break
            if deadline is not None and time.monotonic() > deadline:
                stop_reason = "timeout"
                break
    for i in running:
        searches[i].give_up()
        reasons[i] = stop_reason
    return [PartitionResult(s.status, s.operations, reasons[i], s.longest, None if s.blocked < 0 else s.blocked,
                            s.iterations, s.cache_entries) for i, s in enumerate(searches)]
