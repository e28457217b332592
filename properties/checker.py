"""The history checker: one verdict for any Kafka history (docs/explanation/protocol-notes.md section 4).

Pure: a history (ops of docs/reference/trace-format.md) and the run's config in, the results.json object
out. The Jepsen-parity core is :mod:`properties.jepsen_checks` (inconsistent-offsets, duplicate,
lost-write, G1a, precommitted-read, the skip and order checks, G1b, stale-read) and
:mod:`properties.cycles` (G0, G1c and their process and realtime variants, G-single, G2).
This module adds what needs the run's configuration:

* ``nonatomic-read``: a process read part of a committed transaction's records in a key and
  then read past them, never reading the rest;
* exactly-once (``config.eos``), consumer groups (``config.groups``), share groups
  (``config.share``: :mod:`properties.share_checks`) and compaction (``config.compacted``) checks;
* instead of Jepsen's ``unseen``, when the run recorded a final read after healing
  (``config.final_read``): ``unread-after-heal`` is an acknowledged value the final read
  never saw although it read its key to the end, and ``stale-after-heal`` says the final
  read could not reach the end within the staleness bound; ``stalled`` reports a run whose
  clients stopped making progress (``config.stalled``);

and decides which anomalies are allowed: Jepsen's allowances (``int-send-skip`` and ``G0``
always; ``poll-skip`` and ``nonmonotonic-poll`` with ``subscribe``; ``G1c`` when its cycle
has write-write edges) and ours (read skew ``G-single``/``G2`` and intermediate reads
``G1b``, which Kafka does not promise to prevent; skips over records a compacted topic
removed). ``forbid`` turns any allowed type into a violation.

All of it is one table, :data:`CHECKS`: each :class:`Check` names the anomaly types it
reports, when it applies (over the typed :class:`RunConfig`), what of it is allowed and when
(:class:`Allowance`), and runs in table order over one :class:`Judging`. The Spark jobs take
their anomaly names (:data:`ANOMALY_TYPES`) and allowances (:func:`allowances`) from it, and
``docs/reference/anomalies.md`` lists the same table (a test keeps them in step).
"""

from __future__ import annotations

import gc
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from properties.analysis import CLIENT_TXN_FS, Analysis, analyse, compile_ops, is_tombstone
from properties.compaction_checks import Compaction
from properties.cycles import DEFAULT_STEPS, DEFAULT_TIME_LIMIT_S, Budget, check_cycles
from properties.group_checks import check_groups
from properties.jepsen_checks import (
    check_intermediate_reads,
    check_internal,
    check_lost_writes,
    check_process_order,
    check_reads,
    check_staleness,
    check_version_orders,
    readers_of,
)
from properties.linearizable import KIND, check_log
from properties.share_checks import check_share
from properties.txn_checks import applies as hanging_applies
from properties.txn_checks import check_hanging
from traces.history import HistoryError, HistoryStream

MAX_REPORTED = 50  # anomalies listed per type; the count is always complete

DEFAULT_STALENESS_BOUND_MS = 30_000


@dataclass(slots=True)
class Result:
    anomalies: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    allowed_items: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    allowed: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, kind: str, allowed: bool = False, **evidence: Any) -> None:
        """Record one anomaly; ``allowed`` marks an instance that is not a violation."""
        if allowed:
            self.allowed[kind] += 1
            if len(self.allowed_items[kind]) < MAX_REPORTED:
                self.allowed_items[kind].append(evidence)
            return
        self.counts[kind] += 1
        if len(self.anomalies[kind]) < MAX_REPORTED:
            self.anomalies[kind].append(evidence)


@dataclass(frozen=True)
class RunConfig:
    """What the checker reads of run.json's ``config`` (docs/reference/trace-format.md), typed;
    ``raw`` is the whole of it, for the checks that read more (the eos, groups and compaction
    settings, the final read)."""

    acks: str = "all"
    isolation_level: str | None = None  # read_uncommitted allows a read of one's own open writes
    subscribe: bool = False  # consumers subscribe (``sub_via``): rebalances move partitions
    compacted: bool = False
    eos: bool = False
    groups: bool = False
    stalled: bool = False
    staleness_bound_ms: int = DEFAULT_STALENESS_BOUND_MS
    ww_deps: bool = True
    raw: dict = field(default_factory=dict, compare=False)

    @classmethod
    def of(cls, config: dict) -> RunConfig:
        final = config.get("final_read") or {}
        return cls(acks=str(config.get("acks", "all")), isolation_level=config.get("isolation_level"),
                   subscribe="subscribe" in (config.get("sub_via") or []),
                   compacted=bool(config.get("compacted")), eos=bool(config.get("eos")),
                   groups=bool(config.get("groups")), stalled=bool(config.get("stalled")),
                   staleness_bound_ms=int(config.get("staleness_bound_ms") or final.get("staleness_bound_ms")
                                          or DEFAULT_STALENESS_BOUND_MS),
                   ww_deps=bool(config.get("ww_deps", True)), raw=config)

    @property
    def weak_acks(self) -> bool:
        """acks 0 or 1: an acknowledged write may be lost with its leader."""
        return self.acks in ("0", "1")

    def holds(self, when: str) -> bool:
        """Whether condition ``when`` of an :class:`Allowance` holds: ``always`` or a flag."""
        return when == "always" or bool(getattr(self, when))


@dataclass(frozen=True)
class Allowance:
    """Anomaly types a check reports that are not violations ``when`` (``always``, or a flag of
    :class:`RunConfig` such as ``subscribe`` or ``compacted``: plain names, so that the Spark
    jobs can map them to columns), and why."""

    kinds: tuple[str, ...]
    when: str
    why: str


@dataclass
class Judging:
    """One history being judged: its config, ops, analysis, the result so far, and what the
    checks hand on to later ones (the unread writes, the cycle search's and the
    linearizability check's statistics)."""

    rc: RunConfig
    ops: Iterable[dict]
    compiled: list
    a: Analysis
    r: Result
    budget: Budget
    linearizable: bool
    compaction: Compaction | None = None  # what the cleaner may remove, on a compacted topic
    unread: list = field(default_factory=list)
    cycle_stats: dict = field(default_factory=dict)
    lin_unknown: str | None = None
    lin_stats: dict | None = None
    faults: frozenset = frozenset()  # the nemesis ops' kinds (f)


@dataclass(frozen=True)
class Check:
    """One check of the table: what it reports, when it applies (``when``, for people;
    ``applies``, for the checker), what of it is allowed, and how it runs."""

    name: str
    reports: tuple[str, ...]
    when: str
    applies: Callable[[Judging], bool]
    run: Callable[[Judging], None]
    allows: tuple[Allowance, ...] = ()


def _always(_j: Judging) -> bool:
    return True


def _empty(j: Judging) -> None:
    done = [op for op in j.compiled if op.completed and op.f in CLIENT_TXN_FS and op.type in ("ok", "info")]
    if not done:
        j.r.add("empty-history", ops=[],
                explanation="no send, poll or txn operation completed (ok or info): the history "
                            "shows nothing about the broker, so it cannot be judged valid")


def _superseded(j: Judging):
    return j.compaction.superseded if j.compaction is not None else None


def _lost_writes(j: Judging) -> None:
    j.unread = check_lost_writes(j.a, j.r.add, _superseded(j))


def _cycles(j: Judging) -> None:
    j.cycle_stats = check_cycles(j.a, j.r.add, j.rc.ww_deps, j.budget)


def _compaction(j: Judging) -> None:
    assert j.compaction is not None
    j.compaction.check(j.rc.raw, j.r.add, j.r.allowed)


def _linearizability(j: Judging) -> None:
    j.lin_unknown, j.lin_stats = check_log(j.ops, j.rc.raw, j.r.add)


JEPSEN = "Jepsen's Kafka checker allows it too"
CHECKS: tuple[Check, ...] = (
    Check("empty-history", ("empty-history",), "always", _always, _empty),
    Check("version-orders", ("inconsistent-offsets", "duplicate"), "always", _always,
          lambda j: check_version_orders(j.a, j.r.add)),
    Check("aborted-reads", ("G1a", "precommitted-read"), "always (a read of its own write is allowed with "
          "read_uncommitted)", _always,
          lambda j: check_reads(j.a, j.r.add, precommitted_allowed=j.rc.isolation_level == "read_uncommitted")),
    Check("lost-writes", ("lost-write", "compacted-away"), "always", _always, _lost_writes,
          (Allowance(("compacted-away",), "always", "the cleaner removed a value a newer one of its record key "
                     "superseded"),)),
    Check("within-an-op", ("int-poll-skip", "int-nonmonotonic-poll", "int-send-skip", "int-nonmonotonic-send"),
          "always", _always, lambda j: check_internal(j.a, j.r.add),
          (Allowance(("int-send-skip",), "always", "transactions do not isolate writes; " + JEPSEN),
           Allowance(("int-poll-skip",), "compacted", "the cleaner removes records"))),
    Check("process-order", ("poll-skip", "nonmonotonic-poll", "nonmonotonic-send"), "always", _always,
          lambda j: check_process_order(j.a, j.r.add),
          (Allowance(("poll-skip", "nonmonotonic-poll"), "subscribe", "a rebalance moves partitions between "
                     "members, which start at the committed offsets; " + JEPSEN),
           Allowance(("poll-skip",), "compacted", "the cleaner removes records"))),
    Check("intermediate-reads", ("G1b",), "always", _always, lambda j: check_intermediate_reads(j.a, j.r.add),
          (Allowance(("G1b",), "always", "Kafka does not promise to hide a transaction's intermediate writes"),)),
    Check("staleness", ("stale-read",), "assigned consumers of a topic that is not compacted",
          lambda j: not j.rc.compacted and not j.rc.subscribe,
          lambda j: check_staleness(j.a, j.r.add, j.rc.staleness_bound_ms)),
    Check("cycles", ("G0", "G0-process", "G0-realtime", "G1c", "G1c-process", "G1c-realtime", "G-single", "G2"),
          "always (within the search budget)", _always, _cycles,
          (Allowance(("G0", "G0-process", "G0-realtime"), "always", "write cycles: " + JEPSEN),
           Allowance(("G-single", "G2"), "always", "read skew: Kafka does not promise to prevent it"))),
    Check("compaction", ("compaction-lost-latest", "phantom-value", "scan-missed-latest", "tombstone-missing"),
          "a compacted topic",
          lambda j: j.rc.compacted, _compaction),
    Check("nonatomic-reads", ("nonatomic-read",), "always", _always, lambda j: _check_nonatomic(j.a, j.r),
          (Allowance(("nonatomic-read",), "subscribe", "a rebalance may hand a partition over in the middle of "
                     "a transaction's records"),)),
    Check("exactly-once", ("eos-duplicate", "eos-lost", "eos-output-beyond-commit"), "config.eos",
          lambda j: j.rc.eos, lambda j: _check_eos(j.a, j.rc.raw, j.r)),
    Check("groups", ("double-ownership", "fenced-commit", "cooperative-revoked-unmoved", "reassigned-before-revoked",
                     "assigned-before-released", "rejoin-fenced", "expired-member-commit", "committed-offset-regressed",
                     "unowned-partition", "processed-twice"),
          "config.groups", lambda j: j.rc.groups,
          lambda j: check_groups(j.ops, j.rc.raw, j.r.add)),
    Check("share", ("share-double-acquired", "share-lock-forgotten", "share-redelivered-accepted",
                    "share-redelivered-stale-leader", "share-ack-not-held", "share-lost", "share-lost-unseen",
                    "share-aborted-delivered", "share-delivery-limit", "share-count-regressed",
                    "share-count-forgotten", "share-value-mismatch"),
          "config.share (KIP-932 share groups; share-lost with config.share.final)", lambda j: _shares(j.rc),
          lambda j: _check_share(j.ops, j.rc, j.r),
          (Allowance(("share-lock-forgotten",), "always", "a record acquired again within its lock while a broker "
                     "fault was in force: a new leader forgets every acquisition, which Kafka never persists"),
           Allowance(("share-lost-unseen",), "always", "a record never accepted nor seen archived, written before "
                     "a fault ended, with real clients: a fetch whose answer a fault lost is retried inside the client, "
                     "and each may have delivered it unseen, up to the limit that archives it"),
           Allowance(("share-count-forgotten",), "always", "a delivery count that did not rise while a broker fault "
                     "was in force: a new leader restarts from the persisted count"),
           Allowance(("share-redelivered-stale-leader",), "always", "an accepted record delivered again by another "
                     "broker than the one that took the accept, while a broker was cut off or paused: a leader that "
                     "has not learnt it was replaced serves the share-partition it had (Kafka persists no "
                     "acquisition, and checks no lease)"))),
    Check("hanging-transactions", ("hanging-transaction",), "a run with the broker's word on open transactions "
          "(config.txn_probe), the log read uncommitted (config.final_read.uncommitted) or a partition whose last "
          "stable offset stayed below its high watermark (config.final_read.stable_offsets)",
          lambda j: hanging_applies(j.rc.raw), lambda j: check_hanging(j.compiled, j.rc.raw, j.r.add)),
    Check("final-read", ("stale-after-heal", "unread-after-heal"), "always (unseen values are allowed "
          "without a final read)", _always,
          lambda j: _check_final_read(j.rc.raw, j.unread, j.r, j.a, _superseded(j))),
    Check("idempotence", ("idempotence-error",), "an idempotent producer without transactions (config.idempotence)",
          lambda j: bool(j.rc.raw.get("idempotence")) and not j.rc.raw.get("txn") and not j.rc.raw.get("eos"),
          lambda j: _check_idempotence(j.a, j.rc, j.r, j.faults)),
    Check("stall", ("stalled",), "config.stalled", lambda j: j.rc.stalled, lambda j: _check_stall(j.rc.raw, j.r)),
    Check("linearizability", (KIND,), "asked for (kafkacheck check --lin), a topic that is not compacted",
          lambda j: j.linearizable and not j.rc.compacted, _linearizability),
)
# what the simulator and the liveness phase add to a verdict (with_invariant_violations)
WHITE_BOX_TYPES = ("invariant-violation", "liveness")
ANOMALY_TYPES = tuple(dict.fromkeys(k for c in CHECKS for k in c.reports)) + WHITE_BOX_TYPES


def allowances() -> list[Allowance]:
    """Every allowance of the table."""
    return [a for c in CHECKS for a in c.allows]


def allowed_kinds(rc: RunConfig, checks: Iterable[Check] = CHECKS) -> set[str]:
    """The anomaly types that are not violations under ``rc``."""
    return {k for c in checks for a in c.allows if rc.holds(a.when) for k in a.kinds}


ALWAYS_ALLOWED = tuple(k for a in allowances() if a.when == "always" for k in a.kinds)


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


def _jsonl(ops: list | tuple) -> str | None:
    """The ops as history.jsonl text, or None when JSON would change them (tuples, keys that are
    not strings, values JSON does not have): the compiled engine must see what Python sees."""
    lines = []
    for op in ops:
        try:
            line = json.dumps(op, separators=(",", ":"))
        except (TypeError, ValueError):
            return None
        if json.loads(line) != op:
            return None
        lines.append(line)
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
                           idempotence, sorted(TCP_BREAKING_FAULTS), rc.isolation_level == "read_uncommitted",
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


def _shares(rc: RunConfig) -> bool:
    return rc.raw.get("share") is not None


def _check_share(ops: Iterable[dict], rc: RunConfig, r: Result) -> None:
    check_share(ops if isinstance(ops, list) else list(ops), rc.raw, r.add, _may_lose_acknowledged(rc))


def _check_nonatomic(a: Analysis, r: Result) -> None:
    """A process read part of a committed transaction's records in a key and then later
    positions of that key, never reading the rest: the transaction was not visible at once."""
    txn_values: list[tuple[int, str, list[tuple[int, Any]]]] = []  # (op, key, [(index, v)])
    for op in a.ops:
        if op.type != "ok" or op.f != "txn":
            continue
        by_key: dict[str, list[tuple[int, Any]]] = defaultdict(list)
        for key, _off, v in op.sends:
            i = a.index_of(key, v)
            if i is not None:
                by_key[key].append((i, v))
        txn_values.extend((op.index, k, vs) for k, vs in by_key.items() if len(vs) > 1)
    if not txn_values:
        return
    read: dict[tuple[Any, str], set] = defaultdict(set)
    top: dict[tuple[Any, str], tuple[int, int]] = {}  # (process, key) -> (max index, op)
    low: dict[tuple[Any, str], int] = {}  # (process, key) -> min index read
    for op in a.ops:
        if not op.completed or op.type == "info":
            continue
        for key, vs in op.reads().items():
            o = a.orders.get(key)
            for v in vs:
                i = o.first.get(v) if o else None
                if i is None:
                    continue
                pk = (op.process, key)
                read[pk].add(v)
                if i > top.get(pk, (-1, -1))[0]:
                    top[pk] = (i, op.index)
                low[pk] = min(i, low.get(pk, i))
    by_key_txn: dict[str, list] = defaultdict(list)
    for t in txn_values:
        by_key_txn[t[1]].append(t)
    for (process, key), values in sorted(read.items(), key=lambda kv: repr(kv[0])):
        for op, _k, vs in by_key_txn.get(key, ()):
            got = [v for _i, v in vs if v in values]
            if not got or len(got) == len(vs):
                continue
            hi, hi_op = top[(process, key)]
            # the process's reads of the key span the whole transaction (a process that
            # starts reading in the middle of one, after an info op, is no evidence)
            if low[(process, key)] <= min(i for i, _v in vs) and hi > max(i for i, _v in vs):
                missing = [v for _i, v in vs if v not in values]
                r.add("nonatomic-read", key=key, values=sorted(got, key=repr),
                      missing=sorted(missing, key=repr), ops=[op, hi_op],
                      explanation=f"process {process} read {got} of transaction op {op} from "
                                  f"{key} and later positions (op {hi_op}), but never its "
                                  f"{missing}: the transaction was not visible all at once")


def _check_eos(a: Analysis, config: dict, r: Result) -> None:
    """Consume-transform-produce (``config.eos``): every input record below the group's final
    committed offset reaches the output exactly once, and nothing beyond it does."""
    eos = config.get("eos")
    if not eos:
        return
    shift = eos.get("source_shift", 1)
    in_topic, out_topic = eos["input"], eos["output"]
    committed = None
    committed_op = -1
    for op in a.ops:
        if op.f == "committed" and op.type == "ok" and op.completed:
            committed, committed_op = op.raw_value, op.index
    # output writes that must be in the output: read by a read_committed poll, or sent by a
    # committed transaction
    copies: dict[tuple[str, Any], dict[Any, int]] = defaultdict(dict)  # (in key, source) -> writes
    wanted = {(key, v) for key, values in a.ok_reads.items() if key.startswith(out_topic + ":")
              for v in values if isinstance(v, int)}
    readers = readers_of(a, wanted)
    for key, v in sorted(wanted, key=repr):
        copies[(in_topic + key[len(out_topic):], v // shift)][v] = readers[(key, v)][0]
    for op in a.ops:
        if op.type != "ok" or op.f != "txn":
            continue
        for key, _off, v in op.sends:
            if key.startswith(out_topic + ":") and isinstance(v, int):
                copies[(in_topic + key[len(out_topic):], v // shift)].setdefault(v, op.index)
    for (in_key, source), writes in sorted(copies.items(), key=lambda kv: repr(kv[0])):
        if len(writes) > 1:
            r.add("eos-duplicate", key=in_key, value=source, copies=sorted(writes),
                  ops=sorted(set(writes.values())),
                  explanation=f"input value {source} of {in_key} reached the output "
                              f"{len(writes)} times (writes {sorted(writes)}): processed more "
                              f"than once")
    if not isinstance(committed, dict):
        return
    final = config.get("final_read") or {}
    for in_key in sorted(committed):
        upto = committed[in_key]
        upto = 0 if upto is None else upto
        o = a.orders.get(in_key)
        if o is None:
            continue
        for off in o.offset_list:
            for source in o.offsets[off]:
                done = (in_key, source) in copies
                if off < upto and not done and final.get("reached_end"):
                    r.add("eos-lost", key=in_key, value=source, offset=off, ops=[committed_op],
                          explanation=f"input value {source} at offset {off} of {in_key} is "
                                      f"below the group's committed offset {upto}, yet it never "
                                      f"reached the output")
                elif off >= upto and not done:
                    r.allowed["eos-unprocessed"] += 1  # after the last commit: not yet processed
                elif off >= upto and done:
                    writes = copies[(in_key, source)]
                    r.add("eos-output-beyond-commit", key=in_key, value=source, offset=off,
                          ops=[*sorted(set(writes.values())), committed_op],
                          explanation=f"input value {source} at offset {off} of {in_key} is in "
                                      f"the output, but the group's committed offset is {upto}: "
                                      f"the output and the offsets were not committed together")


def _check_final_read(config: dict, unread: list, r: Result, a: Analysis | None = None,
                      superseded=None) -> None:
    final = config.get("final_read") or {}
    if not final.get("performed"):
        if unread:
            r.allowed["unseen"] += len(unread)
        return
    if not final.get("reached_end"):
        r.add("stale-after-heal", ops=[],
              explanation=f"after every fault was healed the final read could not reach the end "
                          f"of every partition within {final.get('staleness_bound_ms')} ms")
    start = final.get("start_ns", 0)
    ends = final.get("end_offsets") or {}
    reported = set()
    for key, v, off, op in unread:
        if op.time >= start:
            continue
        if not final.get("reached_end") and key not in ends:
            continue
        reported.add((key, v))
        r.add("unread-after-heal", key=key, value=v, offset=off, writer=op.index, ops=[op.index],
              explanation=f"value {v} was acknowledged at offset {off} of {key} (op {op.index}) "
                          f"but the final read after healing read {key} to its end "
                          f"({ends.get(key)}) without it: the write is lost")
    if a is None:
        return
    # an acknowledged value that polls read during the run but the final read, which read its
    # partition to the end, no longer finds: it was in the log and left it (a leader elected
    # without it, then the old leader truncated), which is a lost write as much as one nobody read
    final_seen: dict[str, set] = defaultdict(set)
    readers: dict[tuple[str, Any], int] = {}
    for op in a.ops:
        if op.type != "ok" or not op.polls:
            continue
        for key, vs in op.reads().items():
            if op.time >= start:
                final_seen[key].update(vs)
            else:
                for v in vs:
                    readers.setdefault((key, v), op.index)
    for op in a.ops:
        if op.type != "ok" or op.time >= start:
            continue
        for key, off, v in op.sends:
            if key not in ends or is_tombstone(v) or (key, v) in reported or v in final_seen.get(key, ()):
                continue
            if (key, v) not in readers or (superseded is not None and superseded(key, v, off)):
                continue  # never read: check_lost_writes and the loop above judge it
            r.add("unread-after-heal", key=key, value=v, offset=off, writer=op.index,
                  ops=[op.index, readers[(key, v)]],
                  explanation=f"value {v} was acknowledged at offset {off} of {key} (op {op.index}) and read "
                              f"by op {readers[(key, v)]}, but the final read after healing read {key} to its "
                              f"end ({ends[key]}) without it: the write is lost")


# what an idempotent producer must never be told while none of its records was lost: a gap in
# its sequence (the broker lost a batch it had acknowledged) or that it was fenced (only a
# transactional producer has a rival instance); the real clients' names for them too
IDEMPOTENCE_ERRORS = ("OUT_OF_ORDER_SEQUENCE_NUMBER", "OutOfOrderSequence", "INVALID_PRODUCER_EPOCH",
                      "InvalidProducerEpoch", "PRODUCER_FENCED", "ProducerFenced")


# faults under which TCP's promise (a connection delivers what was sent in order, once, with no
# holes) no longer holds: the simulator's network drops, holds back, duplicates or reorders
# single messages, so a batch may reach the broker while the one ahead of it in its producer's
# sequence was lost (the broker, with no state for the producer yet, takes it as its first,
# as Kafka's does, and refuses the earlier one's retry). The real faults (client-partition,
# client-drop...) act on whole TCP connections and keep the promise.
TCP_BREAKING_FAULTS = frozenset({"duplicate", "reorder", "loss", "partition", "straggle", "hold-back"})


def _may_lose_acknowledged(rc: RunConfig) -> bool:
    """Acknowledged records may be lost without a violation: acks 0 or 1, unclean elections."""
    return rc.weak_acks or bool(rc.raw.get("unclean_leader_election_enable"))


def _check_idempotence(a: Analysis, rc: RunConfig, r: Result, faults: frozenset = frozenset()) -> None:
    """With retries and up to five batches in flight, an idempotent producer whose records
    were not lost is never told OUT_OF_ORDER_SEQUENCE_NUMBER or that it was fenced. Not judged
    where records may be lost without a violation (acks 0 or 1, unclean elections, a crash
    that lost an unflushed tail), where the checker found them lost (that is the violation),
    or where the network lost, held back, reordered or duplicated single messages of a
    connection, which TCP never does (a batch then reaches its broker ahead of the one before
    it, and is refused: :data:`TCP_BREAKING_FAULTS`)."""
    if faults & TCP_BREAKING_FAULTS or _may_lose_acknowledged(rc) or any(
            r.counts.get(k) or r.allowed.get(k) for k in ("lost-write", "unread-after-heal")):
        return
    for op in a.ops:
        if op.f != "send" or op.type == "ok" or not op.error:
            continue
        told = [e for e in IDEMPOTENCE_ERRORS if e in op.error]
        if told:
            r.add("idempotence-error", key=op.sends[0][0] if op.sends else None, error=op.error, ops=[op.index],
                  explanation=f"process {op.process}'s idempotent producer was told {told[0]} (op {op.index}), "
                              f"though no record of the run was lost: its sequence had no gap and nobody "
                              f"could fence it")


def _check_stall(config: dict, r: Result) -> None:
    stalled = config.get("stalled")
    if not stalled:
        return
    r.add("stalled", ops=[], time=stalled.get("at_ns"),
          explanation=f"no client operation completed for {stalled.get('idle_ms', 0) // 1000} s "
                      f"of virtual time after {stalled.get('at_ns', 0) / 1e9:.1f} s; the workload "
                      f"stopped with {stalled.get('ops_completed')} of {config.get('ops')} ops done")


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
