"""The history a workload records against a real broker: shared by its client threads and
its nemesis, stamped with wall-clock nanoseconds since the run began (docs/reference/trace-format.md)."""

from __future__ import annotations

import datetime
import json
import threading
import time
from pathlib import Path
from typing import Any

import kafkacheck
from traces.history import Recorder, write_jsonl


class History:
    """A thread-safe recorder on the wall clock."""

    def __init__(self) -> None:
        self.recorder = Recorder()
        self.lock = threading.Lock()
        self.t0 = time.monotonic_ns()
        self.next_process = 0

    def now(self) -> int:
        return time.monotonic_ns() - self.t0

    def op(self, process: int | str, type_: str, f: str, value: Any, **extra: Any) -> None:
        with self.lock:
            self.recorder.op(self.now(), process, type_, f, value, **extra)

    def new_process(self) -> int:
        with self.lock:
            self.next_process += 1
            return self.next_process

    def write_and_judge(self, out_dir: Path, meta: dict, config: dict, broker: str) -> dict:
        """The run directory (run.json with ``meta`` and ``config``, history.jsonl) and the
        checker's verdict, written as results.json too."""
        from properties.checker import check

        run_meta = {"format": 1, "run_id": out_dir.name, **meta, "config": config,
                    "started_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "versions": {"kafkacheck": kafkacheck.__version__, "broker": broker}}
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "run.json").write_text(json.dumps(run_meta, indent=2, sort_keys=True) + "\n")
        write_jsonl(out_dir / "history.jsonl", self.recorder.ops)
        result = check(self.recorder.ops, config)
        (out_dir / "results.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        return result
