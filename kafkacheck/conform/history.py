"""The history a workload records against a real broker: shared by its client threads and
its nemesis, stamped with wall-clock nanoseconds since the run began (TRACE_FORMAT.md)."""

from __future__ import annotations

import threading
import time
from typing import Any

from traces.history import Recorder


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
