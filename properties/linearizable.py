"""The history checker's linearizability check: each topic-partition's log against the
``partition-log`` model of :mod:`linearizability` (porcupine's search in C++).

It complements the Jepsen-style checks: they name the kind of anomaly, this one says whether
any order of the operations within their real-time intervals explains every append and read
at all, and where the search got stuck when none does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from linearizability import check_operations, get_model
from linearizability.kafka_histories import log_operations

KIND = "nonlinearizable-log"
DEFAULT_ITERATIONS = 1_000_000_000  # per partition: work, so a busy machine gets the same verdict
DEFAULT_TIMEOUT_S = 3600.0  # the wall-clock safety net, reported as such when it is what stopped


def check_log(ops: Iterable[dict], config: dict, report: Callable[..., None],
              iterations_max: int = DEFAULT_ITERATIONS,
              timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[str | None, dict]:
    """Reports one anomaly per illegal partition; returns a sentence when the check could not
    decide (or does not apply), else None, and a summary of what was checked."""
    if config.get("compacted"):
        return ("the linearizability check does not apply to compacted topics (compaction removes records "
                "by design)", {"checked": False})
    model = get_model("partition-log")
    operations = log_operations(ops, config)
    result = check_operations(model, operations, timeout_s=timeout_s, partial=True, iterations_max=iterations_max)
    summary = {"checked": True, "verdict": result.verdict, "partitions": len(result.partitions),
               "operations": len(operations), "iterations": sum(p.iterations for p in result.partitions),
               "seconds": round(result.elapsed_s, 3)}
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
        why = {"iterations": f"a partition used up its budget of {iterations_max:,} iterations",
               "timeout": f"the wall-clock safety net of {timeout_s:g} s", "memory": "the memory cap"}
        return (f"the linearizability check gave up ({'; '.join(why.get(r, r) for r in reasons) or 'unknown'}) "
                f"after {result.elapsed_s:.1f} s", summary)
    if not operations:
        return "the linearizability check found no appends or reads to check", {**summary, "checked": False}
    return None, summary
