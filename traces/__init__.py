"""The trace format of docs/reference/trace-format.md: schema validation, recorder, JSONL I/O."""

import importlib

# the package's names, imported when first used (PEP 562): importing one module of the package
# (``kafkacheck check`` needs only a few) does not import all of it
_EXPORTS = {
    "HistoryError": "traces.history",
    "Recorder": "traces.history",
    "load_run": "traces.history",
    "read_history": "traces.history",
    "write_jsonl": "traces.history",
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = ["HistoryError", "Recorder", "load_run", "read_history", "write_jsonl"]
