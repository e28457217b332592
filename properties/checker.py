"""The history checker: one verdict for any Kafka history (docs/explanation/protocol-notes.md section 4).

Pure: a history (ops of docs/reference/trace-format.md) and the run's config in, the results.json object
out. The Jepsen-parity core is :mod:`properties.jepsen_checks` (inconsistent-offsets, duplicate,
lost-write, G1a, precommitted-read, the skip and order checks, G1b, stale-read) and
:mod:`properties.cycles` (G0, G1c and their process and realtime variants, G-single, G2);
:mod:`properties.config_checks` adds what needs the run's configuration (nonatomic-read,
exactly-once, the final read after healing, idempotence, stalls), beside the consumer-group,
share-group, compaction, transaction and linearizability modules. What runs, and what of it is
allowed and why, is one table, :data:`properties.check_table.CHECKS`, whose checks work on the
state of :mod:`properties.judging`.

This module owns the entry point, :func:`check`, and its two engines (:func:`engine_of`):
``fast``, the compiled hot path of properties/_fastcheck (:func:`check_fast`), which hands
what it does not cover to ``python``, the pure-Python checker and its oracle; the verdict from
what the checks reported (allowances applied, ``forbid`` honoured: it turns any allowed type
into a violation); and the simulator's white-box findings added to a verdict
(:func:`with_invariant_violations`).
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from properties.analysis import analyse, compile_ops
from properties.check_table import CHECKS, Check, allowed_kinds, allowed_reasons
from properties.compaction_checks import Compaction
from properties.config_checks import _check_share, _check_stall, _may_lose_acknowledged, _shares, tcp_breaking
from properties.cycles import DEFAULT_STEPS, DEFAULT_TIME_LIMIT_S, Budget
from properties.group_checks import check_groups
from properties.judging import MAX_REPORTED, Judging, Result, RunConfig
from properties.txn_checks import check_hanging
from traces.history import HistoryError, HistoryStream


@contextmanager
def _gc_paused() -> Iterator[None]:
    """The checker builds millions of small acyclic objects; Python's cyclic collector would
    rescan them over and over (it made loading a 1M-op history several times slower), and
    reference counting frees them anyway."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


ENGINES = ("fast", "python")


class EngineError(HistoryError):
    """An unknown checker engine (as $KAFKACHECK_CHECKER): unusable input, one line, exit 3."""


def engine_of(engine: str | None = None) -> str:
    """The checker's engine: ``engine``, else $KAFKACHECK_CHECKER, else ``fast`` (the compiled
    hot path of properties/_fastcheck, which hands what it does not cover to ``python``, the
    pure-Python checker and its oracle)."""
    e = engine or os.environ.get("KAFKACHECK_CHECKER") or "fast"
    if e not in ENGINES:
        source = "" if engine else "$KAFKACHECK_CHECKER: "
        raise EngineError(f"{source}unknown checker engine {e!r} (one of {', '.join(ENGINES)})")
    return e


def check(ops: Iterable[dict], config: dict | None = None, *,
          cycle_steps: int = DEFAULT_STEPS, cycle_time_limit_s: float = DEFAULT_TIME_LIMIT_S,
          forbid: tuple[str, ...] = (), linearizable: bool = False, engine: str | None = None) -> dict:
    """Judge a history; returns the results.json object of docs/reference/trace-format.md. ``ops`` may be a
    stream (:func:`traces.history.iter_history`): it is read once, and kept as dicts only when
    the consumer-group or compaction checks need them. ``linearizable`` adds the
    partition-log linearizability check (properties/linearizable.py). ``engine`` (default
    $KAFKACHECK_CHECKER, else ``fast``): ``fast`` judges in C++ what :func:`check_fast` covers
    and the rest in Python, ``python`` judges all in Python; both give the same verdict."""
    with _gc_paused():
        if engine_of(engine) == "fast":
            result = _check_fast(ops, config or {}, Budget(cycle_steps, cycle_time_limit_s), forbid, linearizable)
            if isinstance(result, dict):
                return result
        return _check(ops, config or {}, Budget(cycle_steps, cycle_time_limit_s), forbid, linearizable)


def check_fast(ops: Iterable[dict], config: dict | None = None, *,
               cycle_steps: int = DEFAULT_STEPS, cycle_time_limit_s: float = DEFAULT_TIME_LIMIT_S,
               forbid: tuple[str, ...] = (), linearizable: bool = False) -> dict | str:
    """The compiled engine alone: the verdict :func:`check` gives, or a string saying why this
    history is left to the Python checker ("fallback: ..."). It covers histories of integer values
    (a :class:`traces.history.HistoryStream`, which it reads itself, or a list of ops) under a
    config without compaction, exactly-once or linearizability (the consumer-group checks run in
    Python, on the raw ops, beside it); of the anomalies it
    reports what :mod:`properties.jepsen_checks` and :mod:`properties.cycles` report, ``nonatomic-read``,
    the final read's findings, ``idempotence-error``, ``empty-history``, ``unseen`` and ``stalled``."""
    with _gc_paused():
        return _check_fast(ops, config or {}, Budget(cycle_steps, cycle_time_limit_s), forbid, linearizable)


def _fast_unfit(rc: RunConfig, linearizable: bool) -> str | None:
    """Why the compiled engine does not judge a run of this config (None: it does)."""
    raw = rc.raw
    final = raw.get("final_read") or {}
    for why, unfit in (("linearizability", linearizable), ("compaction", rc.compacted),
                       ("exactly-once", rc.eos or raw.get("eos")),
                       ("a final read's start that is not a 64-bit integer",
                        final.get("performed") and (type(final.get("start_ns", 0)) is not int
                                                    or abs(final.get("start_ns", 0)) >= 2**62)),
                       ("a staleness bound beyond 2**40 ms", abs(rc.staleness_bound_ms) >= 2**40),
                       ("a final read's end offsets that are not an object",
                        final.get("performed") and not isinstance(final.get("end_offsets") or {}, dict))):
        if unfit:
            return why
    return None


_COMPACT = json.JSONEncoder(separators=(",", ":"))  # json.dumps's, made once


def _jsonl(ops: list | tuple) -> str | None:
    """The ops as history.jsonl text, or None when JSON would change them (tuples, keys that are
    not strings, values JSON does not have): the compiled engine must see what Python sees."""
    try:
        lines = [_COMPACT.encode(op) for op in ops]
    except (TypeError, ValueError):
        return None
    if json.loads("[" + ",".join(lines) + "]") != list(ops):  # one decoding, one comparison
        return None
    return "\n".join(lines) + "\n"


def _check_fast(ops: Iterable[dict], config: dict, budget: Budget, forbid: tuple[str, ...],
                linearizable: bool) -> dict | str:
    rc = RunConfig.of(config)
    why = _fast_unfit(rc, linearizable)
    if why:
        return f"fallback: {why}"
    try:
        from properties import _fastcheck
    except ImportError:
        return "fallback: the C++ extension properties._fastcheck is not built"
    applied = [c for c in CHECKS if c.applies(_Applies(rc, linearizable))]
    runs = {c.name for c in applied}  # the table decides for both engines which checks run
    path = text = None
    if isinstance(ops, HistoryStream):
        if ops.named_values:
            return "fallback: named values (a Jepsen import)"
        path = str(ops.path)
        if runs & {"groups", "hanging-transactions", "share"}:  # checks that read the raw ops (in Python): the file read
            ops = list(ops)                             # once more
    elif isinstance(ops, (list, tuple)):
        text = _jsonl(ops)
        if text is None:
            return "fallback: ops that JSON would change"
    else:
        return "fallback: a stream of ops that is not a history file"
    final = rc.raw.get("final_read") or {}
    performed = bool(final.get("performed"))
    idempotence = "idempotence" in runs and not _may_lose_acknowledged(rc)
    out = _fastcheck.check(path, text, rc.ww_deps, "staleness" in runs, rc.staleness_bound_ms,
                           min(budget.steps, 2**62), budget.deadline - time.monotonic(), rc.weak_acks, performed,
                           final.get("start_ns", 0) if performed else 0, bool(final.get("reached_end")),
                           [str(k) for k in (final.get("end_offsets") or {})] if performed else [],
                           idempotence, sorted(tcp_breaking(rc)), rc.isolation_level == "read_uncommitted",
                           [str(v) for v in (final.get("end_offsets") or {}).values()] if performed else [],
                           str(final.get("staleness_bound_ms")))
    if isinstance(out, str):
        return out
    r = Result()
    for kind, allowed, count, items in out["reports"]:
        if allowed:
            r.allowed[kind] += count
            r.allowed_items[kind].extend(items)
        else:
            r.counts[kind] += count
            r.anomalies[kind].extend(items)
    if out["unread"] and not performed:  # _check_final_read without a final read
        r.allowed["unseen"] += out["unread"]
    if "stall" in runs:
        _check_stall(rc.raw, r)
    if "groups" in runs:
        check_groups(ops, rc.raw, r.add)
    if "hanging-transactions" in runs:
        check_hanging(compile_ops(ops)[0], rc.raw, r.add)
    if "share" in runs:
        _check_share(ops, rc, r)
    cycle_stats = out["cycles"]
    budget.used = out["budget_used"]
    budget.reason = out["budget_reason"] or None
    if "budget_reason" in cycle_stats:
        cycle_stats["budget_reason"] = budget.explain()
    return _verdict(r, rc, applied, forbid, cycle_stats, None, None, out["stats"])


@dataclass(frozen=True)
class _Applies:
    """What a :class:`Check`'s ``applies`` reads of a :class:`Judging`."""

    rc: RunConfig
    linearizable: bool


def _check(ops: Iterable[dict], config: dict, budget: Budget, forbid: tuple[str, ...],
           linearizable: bool) -> dict:
    rc = RunConfig.of(config)
    if rc.groups or rc.compacted or linearizable or _shares(rc):
        ops = list(ops)
    counted = _Counted(ops)
    compiled, nemesis = compile_ops(counted, weak_acks=rc.weak_acks)
    j = Judging(rc, ops, compiled, analyse(compiled, nemesis), Result(), budget, linearizable,
                Compaction(ops) if rc.compacted else None, faults=frozenset(counted.nemesis_fs))
    applied = [c for c in CHECKS if c.applies(j)]
    for c in applied:
        c.run(j)
    client_ops = [op for op in compiled if op.completed]
    stats = {
        "ops": counted.n,
        "client_ops": len(client_ops),
        "ok": sum(1 for op in client_ops if op.type == "ok"),
        "fail": sum(1 for op in client_ops if op.type == "fail"),
        "info": sum(1 for op in client_ops if op.type == "info"),
        "keys": len(j.a.orders),
        "nemesis_ops": len(nemesis),
    }
    return _verdict(j.r, rc, applied, forbid, j.cycle_stats, j.lin_unknown, j.lin_stats, stats)


def _verdict(r: Result, rc: RunConfig, applied: list[Check], forbid: tuple[str, ...], cycle_stats: dict,
             lin_unknown: str | None, lin_stats: dict | None, stats: dict) -> dict:
    """The results.json object from what the checks reported: allowances applied, ``forbid``
    honoured."""
    forbidden = set(forbid)
    for kind in list(r.allowed_items):  # --forbid: allowed instances become violations
        if kind in forbidden:
            for item in r.allowed_items.pop(kind):
                r.anomalies[kind].append(item)
            r.counts[kind] += r.allowed.pop(kind)
    allowed = allowed_kinds(rc, applied)
    bad = []
    for kind in sorted(r.counts):
        if kind in forbidden:
            bad.append(kind)
        elif kind in allowed:
            r.allowed[kind] += r.counts[kind]
            r.allowed_items[kind].extend(r.anomalies[kind][:MAX_REPORTED - len(r.allowed_items[kind])])
        else:
            bad.append(kind)
    valid: bool | str = not bad
    if valid and (cycle_stats.get("budget_exhausted") or lin_unknown):
        valid = "unknown"
    return {
        "valid": valid,
        "anomaly_types": bad,
        "anomalies": {k: r.anomalies[k] for k in bad},
        "counts": {k: r.counts[k] for k in sorted(r.counts)},
        "allowed": dict(sorted(r.allowed.items())),
        "allowed_anomalies": {k: r.allowed_items[k] for k in sorted(r.allowed_items) if r.allowed_items[k]},
        # why each allowed type is allowed (the report's folded lines say it)
        "allowed_why": {k: why for k, why in sorted(allowed_reasons().items()) if k in r.allowed},
        "unknown": ([cycle_stats["budget_reason"]] if cycle_stats.get("budget_exhausted") else [])
                   + ([lin_unknown] if lin_unknown else []),
        "stats": {
            **stats,
            "cycles": cycle_stats,
            **({"linearizability": lin_stats} if lin_stats is not None else {}),
        },
    }


class _Counted:
    def __init__(self, ops: Iterable[dict]) -> None:
        self.ops = ops
        self.n = 0
        self.nemesis_fs: set[str] = set()

    def __iter__(self) -> Iterator[dict]:
        for op in self.ops:
            self.n += 1
            if op["process"] == "nemesis":
                self.nemesis_fs.add(op["f"])
            yield op



def _with_events(result: dict, events: list[dict], event_kind: str, anomaly: str, item) -> dict:
    """``result`` with the events of ``event_kind`` added as anomaly ``anomaly`` (``item``
    makes one event its evidence), which makes the verdict invalid."""
    found = [e for e in events if e.get("kind") == event_kind]
    if not found:
        return result
    result = dict(result)
    result["anomalies"] = {**result["anomalies"], anomaly: [item(e) for e in found[:MAX_REPORTED]]}
    result["counts"] = {**result.get("counts", {}), anomaly: len(found)}
    result["anomaly_types"] = sorted({*result["anomaly_types"], anomaly})
    result["valid"] = False
    return result


def with_invariant_violations(result: dict, events: list[dict]) -> dict:
    """Add the simulator's white-box invariant violations (events.jsonl) to a verdict, and the
    liveness phase's findings (kafkacheck.liveness: the healed cluster did not converge within
    its bound)."""
    result = _with_events(result, events, "liveness-violation", "liveness", lambda e: {
        "key": e.get("key"), "what": e.get("what"), "time": e.get("time"), "ops": [],
        "explanation": f"{e.get('bound_ms')} ms after every fault was healed: {e.get('what')} ({e.get('detail')})"})
    return _with_events(result, events, "invariant-violation", "invariant-violation", lambda e: {
        "key": e.get("key"), "node": e.get("node"), "invariant": e.get("invariant"), "time": e.get("time"), "ops": [],
        "explanation": f"broker state broke '{e.get('invariant')}' on node {e.get('node')}: {e.get('detail')}"})
