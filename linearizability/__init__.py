"""A porcupine-style linearizability checker: the search in C++ (pybind11), models for
registers, key-value maps, Kafka partition logs and committed offsets, a pure-Python oracle,
and an HTML view of the result.

    from linearizability import check_operations, Operation, MODELS
    result = check_operations(MODELS["register"], [Operation(0, ("write", 1), 0, None, 5), ...])
    result.verdict   # "ok", "illegal" or "unknown"
"""

from linearizability.checker import CheckResult, PartitionResult, check_events, check_operations, native_available
from linearizability.models import MODELS, Model, get_model
from linearizability.operations import UNKNOWN, Event, HistoryError, Operation, events_to_operations

__all__ = [
    "MODELS",
    "UNKNOWN",
    "CheckResult",
    "Event",
    "HistoryError",
    "Model",
    "Operation",
    "PartitionResult",
    "check_events",
    "check_operations",
    "events_to_operations",
    "get_model",
    "native_available",
]
