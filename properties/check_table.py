"""The history checker's table of checks: what is checked, what is allowed, and why.

All of it is one table, :data:`CHECKS`: each :class:`Check` names the anomaly types it
reports, when it applies (over the typed :class:`~properties.judging.RunConfig`), what of it
is allowed and when (:class:`Allowance`), and runs in table order over one
:class:`~properties.judging.Judging` (:func:`properties.checker.check` runs it, on either engine).

The allowances: Jepsen's (``int-send-skip`` and ``G0`` always; ``poll-skip`` and
``nonmonotonic-poll`` with ``subscribe``; ``G1c`` when its cycle has write-write edges, which
the cycle search decides per cycle) and ours (read skew ``G-single``/``G2`` and intermediate
reads ``G1b``, which Kafka does not promise to prevent; skips over records a compacted topic
removed). ``forbid`` (:func:`properties.checker.check`) turns any allowed type into a violation.

The Spark jobs and the console take their anomaly names (:data:`ANOMALY_TYPES`) and allowances
(:func:`allowances`, :data:`ALWAYS_ALLOWED`) from it, and ``docs/reference/anomalies.md`` lists
the same table (a test keeps them in step).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from properties.analysis import CLIENT_TXN_FS
from properties.config_checks import (
    _check_eos,
    _check_final_read,
    _check_idempotence,
    _check_nonatomic,
    _check_share,
    _check_stall,
    _shares,
)
from properties.cycles import check_cycles
from properties.group_checks import check_groups
from properties.jepsen_checks import (
    check_intermediate_reads,
    check_internal,
    check_lost_writes,
    check_process_order,
    check_reads,
    check_staleness,
    check_version_orders,
)
from properties.judging import Judging, RunConfig
from properties.linearizable import KIND, check_log
from properties.txn_checks import applies as hanging_applies
from properties.txn_checks import check_hanging


@dataclass(frozen=True)
class Allowance:
    """Anomaly types a check reports that are not violations ``when`` (``always``, or a flag of
    :class:`RunConfig` such as ``subscribe`` or ``compacted``: plain names, so that the Spark
    jobs can map them to columns), and why."""

    kinds: tuple[str, ...]
    when: str
    why: str



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


def allowed_reasons() -> dict[str, str]:
    """Why each allowed type is allowed, from the table (and the few the checks decide apart)."""
    reasons: dict[str, str] = {"unseen": "acknowledged values no poll returned; without a final read, "
                                         "unread is not lost",
                               "eos-unprocessed": "input read after the last commit: not yet processed"}
    # a G1c cycle is allowed only when it has write-write edges (the checker decides per cycle)
    reasons.update(dict.fromkeys(("G1c", "G1c-process", "G1c-realtime"), "cycles through write-write "
                                 "dependencies: Kafka does not isolate writes"))
    for a in allowances():
        for kind in a.kinds:
            reasons.setdefault(kind, a.why)
    return reasons


def allowed_kinds(rc: RunConfig, checks: Iterable[Check] = CHECKS) -> set[str]:
    """The anomaly types that are not violations under ``rc``."""
    return {k for c in checks for a in c.allows if rc.holds(a.when) for k in a.kinds}


ALWAYS_ALLOWED = tuple(k for a in allowances() if a.when == "always" for k in a.kinds)
