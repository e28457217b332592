"""The history checker's linearizability check: each topic-partition's log against the
``partition-log`` model of :mod:`linearizability` (porcupine's search in C++).

It complements the Jepsen-style checks: they name the kind of anomaly, this one says whether
any order of the operations within their real-time intervals explains every append and read
at all, and where the search got stuck when none does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from linearizability import check_operations, get_model
from linearizability.kafka import log_operations

KIND = "nonlinearizable-log"
DEFAULT_TIMEOUT_S = 60.0


def check_log(ops: Iterable[dict], config: dict, report: Callable[..., None],
              timeout_s: float = DEFAULT_TIMEOUT_S) -> str | None:
    """Reports one anomaly per illegal partition; returns a sentence when the check could not
    decide (or does not apply), else None."""
    if config.get("compacted"):
        return "the linearizability check does not apply to compacted topics (compaction removes records by design)"
    model = get_model("partition-log")
    result = check_operations(model, log_operations(ops, config), timeout_s=timeout_s, partial=True)
    for p in result.illegal_partitions():
        key = p.operations[0].input[1]
        stuck = p.stuck
        what = (f"op {stuck.index} ({model.describe_operation(stuck.input, stuck.output)}, process {stuck.client_id})"
                if stuck is not None else "an operation")
        report(KIND, key=key, ops=[stuck.index] if stuck is not None and stuck.index is not None else [],
               linearized=len(p.longest), operations=len(p.operations),
               explanation=f"no order of {key}'s appends and reads within their real-time intervals is a log: "
                           f"the longest linearizable prefix has {len(p.longest)} of {len(p.operations)} "
                           f"operations, and {what} cannot take effect before it returns "
                           f"(kafkacheck lin RUN --html FILE shows it)")
    if result.verdict == "unknown":
        reasons = sorted({p.reason for p in result.partitions if p.reason and p.reason != "cancelled"})
        return f"the linearizability check gave up ({', '.join(reasons) or 'unknown'}) after {result.elapsed_s:.1f} s"
    return None
