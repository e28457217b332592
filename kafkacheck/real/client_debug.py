"""Seeing what the workload's clients do, for diagnosing a client thread that stalls.

* ``KAFKACHECK_RDKAFKA_DEBUG`` (e.g. ``cgrp,eos,protocol``): librdkafka's debug contexts for
  every confluent-kafka client of the workload. librdkafka prints its log to the kafkacheck
  process's standard error (``2> FILE``), one line each with its time and the client's name:
  the client.id is the workload thread's name and the client's role
  (``eos-processor-1.member#consumer-7``). Off by default.
* ``KAFKACHECK_CALL_LOG=1``: :class:`CallWatch` writes the duration of each client call of the
  eos processors to ``client-calls.log`` in the run directory, and the Python stack of a call
  still running after ``KAFKACHECK_CALL_STUCK_S`` seconds (default 15). Off by default.
* Always: a run that ends with client threads still hung writes every thread's Python stack
  to ``hung-threads.txt`` in the run directory (:func:`dump_threads`).
"""

from __future__ import annotations

import contextlib
import faulthandler
import itertools
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

RDKAFKA_DEBUG_ENV = "KAFKACHECK_RDKAFKA_DEBUG"
CALL_LOG_ENV = "KAFKACHECK_CALL_LOG"
CALL_STUCK_ENV = "KAFKACHECK_CALL_STUCK_S"

_names = itertools.count(1)


def rdkafka_debug(role: str) -> dict:
    """The librdkafka settings a confluent-kafka client of ``role`` adds: none unless
    ``KAFKACHECK_RDKAFKA_DEBUG`` names debug contexts."""
    contexts = os.environ.get(RDKAFKA_DEBUG_ENV, "").strip()
    if not contexts:
        return {}
    name = f"{threading.current_thread().name}.{role}.{next(_names)}".replace(" ", "_")
    return {"debug": contexts, "log_level": 7, "client.id": name}


class CallWatch:
    """The durations of client calls, written to ``path`` (None: nothing is timed). A call
    running longer than ``stuck_s`` gets its thread's Python stack written, once."""

    def __init__(self, path: Path | None, clock: Callable[[], int] = time.monotonic_ns, stuck_s: float = 15.0) -> None:
        self.path, self.clock, self.stuck_s = path, clock, stuck_s
        self._lock = threading.Lock()
        self._running: dict[int, tuple[str, float, bool]] = {}  # thread id -> (call, start, stack written)
        self._native: dict[int, int] = {}  # thread id -> the OS's (gdb's LWP)
        self._stop = threading.Event()
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("")
            threading.Thread(target=self._monitor, name="kafkacheck-callwatch", daemon=True).start()

    @classmethod
    def from_env(cls, run_dir: Path | None, clock: Callable[[], int] = time.monotonic_ns) -> CallWatch:
        if run_dir is None or not os.environ.get(CALL_LOG_ENV):
            return cls(None)
        return cls(run_dir / "client-calls.log", clock, float(os.environ.get(CALL_STUCK_ENV) or 15))

    @contextlib.contextmanager
    def call(self, name: str) -> Iterator[None]:
        if self.path is None:
            yield
            return
        tid, start = threading.get_ident(), time.monotonic()
        at = self.clock()
        with self._lock:
            self._running[tid] = (name, start, False)
            self._native[tid] = threading.get_native_id()
        outcome = "ok"
        try:
            yield
        except BaseException as e:
            outcome = f"raised {type(e).__name__}: {str(e)[:120]}"
            raise
        finally:
            with self._lock:
                self._running.pop(tid, None)
            self._write(f"{at / 1e9:9.3f} {threading.current_thread().name} {name} "
                        f"{time.monotonic() - start:.3f}s {outcome}\n")

    def stop(self) -> None:
        self._stop.set()

    def _write(self, text: str) -> None:
        assert self.path is not None
        with self._lock, self.path.open("a") as f:
            f.write(text)

    def _monitor(self) -> None:
        while not self._stop.wait(1.0):
            now = time.monotonic()
            with self._lock:
                late = [(tid, name, start) for tid, (name, start, written) in self._running.items()
                        if not written and now - start > self.stuck_s]
                for tid, name, start in late:
                    self._running[tid] = (name, start, True)
            frames = sys._current_frames()
            for tid, name, start in late:
                stack = "".join(traceback.format_stack(frames[tid])) if tid in frames else "(no frame)\n"
                names = {t.ident: t.name for t in threading.enumerate()}
                self._write(f"{self.clock() / 1e9:9.3f} STUCK {names.get(tid, tid)} {name} for "
                            f"{now - start:.1f}s (LWP {self._native.get(tid)}):\n{stack}")


def dump_threads(path: Path, why: str) -> None:
    """Every Python thread's stack to ``path`` (a run with hung client threads); never raises."""
    with contextlib.suppress(Exception):
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w") as f:
            f.write(f"{why}\n")
            names = {t.ident: t.name for t in threading.enumerate()}
            for tid, frame in sys._current_frames().items():
                f.write(f"\n--- thread {names.get(tid, '?')} ({tid})\n")
                f.write("".join(traceback.format_stack(frame)))
            f.flush()
            faulthandler.dump_traceback(f, all_threads=True)
