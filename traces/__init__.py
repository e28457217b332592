"""The trace format of docs/reference/trace-format.md: schema validation, recorder, JSONL I/O."""

from traces.history import HistoryError, Recorder, load_run, read_history, write_jsonl

__all__ = ["HistoryError", "Recorder", "load_run", "read_history", "write_jsonl"]
