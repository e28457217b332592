"""Jepsen's rules for recording an op, in one place for every simulated client (the workloads'
clients for ``run`` and ``hunt``, the machines' actors for ``explore``).

An op completes ``ok`` when it took effect, ``fail`` when it certainly did not, and ``info``
when its outcome is unknown; after an ``info`` op the client continues as a new process
(each caller's ``process`` moves on by its stride). The real clients of ``conform`` apply the
same rules to their libraries' errors (:mod:`kafkacheck.real.real_run`).
"""

from __future__ import annotations

from typing import Any

from reference.errors import Errors

# a commit the coordinator refused: the member was replaced (its generation or member id is
# stale, a rebalance is under way, or its static instance id went to another member)
FENCED = frozenset({Errors.ILLEGAL_GENERATION, Errors.UNKNOWN_MEMBER_ID,
                    Errors.REBALANCE_IN_PROGRESS, Errors.FENCED_INSTANCE_ID,
                    Errors.STALE_MEMBER_EPOCH, Errors.GROUP_ID_NOT_FOUND})  # (the last two: KIP-848's)


def send_completion(sends: list[tuple[str, Any, str | None]], results: list) -> tuple[str, list, str | None,
                                                                                       list[tuple[str, int]]]:
    """A send op of ``sends`` ((partition key, value, record key or None)) whose sends got
    ``results`` (the producer's, in the same order): ``(type, value, error, acknowledged)``.
    ``ok`` when every send got an offset, ``fail`` when each certainly failed (none may have
    been appended), ``info`` otherwise; ``acknowledged``: the (key, offset) of each send
    acknowledged at an offset."""
    value: list = []
    errors: set[str] = set()
    acknowledged = []
    all_failed, maybe = True, False
    for (key, v, rk), r in zip(sends, results, strict=True):
        tail = [rk] if rk is not None else []
        if r.error is Errors.NONE:
            all_failed = False
            value.append(["send", key, [r.offset if r.offset >= 0 else None, v], *tail])
            if r.offset >= 0:
                acknowledged.append((key, r.offset))
        else:
            errors.add(r.error.name)
            maybe = maybe or r.maybe_appended
            value.append(["send", key, v, *tail])
    type_ = "ok" if not errors else ("fail" if all_failed and not maybe else "info")
    return type_, value, ",".join(sorted(errors)) or None, acknowledged


def txn_completion(outcome: str, error: str | None, abort_on_purpose: bool,
                   send_error: str | None) -> tuple[str, str | None]:
    """A transaction's ``(type, error)`` from its producer's outcome (``committed``,
    ``aborted`` or unknown, with its error): ``fail`` names why it aborted (on purpose, the
    send that failed, or the producer's error)."""
    if outcome == "committed":
        return "ok", None
    if outcome == "aborted":
        return "fail", ("intentional-abort" if abort_on_purpose and send_error is None
                        else (send_error or error or "aborted"))
    return "info", error or "unknown-outcome"


def commit_completion(result: Errors) -> str:
    """An offset commit's type: refused (fenced) or never sent is certainly not applied."""
    if result is Errors.NONE:
        return "ok"
    if result in FENCED or result is Errors.COORDINATOR_NOT_AVAILABLE:
        return "fail"
    return "info"
