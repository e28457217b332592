"""A pool of Spark tasks with the interface of a process pool: ``apply_async(fn, args)`` gives a
handle whose ``ready()`` and ``get()`` say when the task is done and what it returned.

Each call is a Spark job of one task, started from a driver thread of its own (Spark runs the
jobs of several threads at once, FIFO), so the caller keeps as many in flight as it likes and
learns of each result as soon as it is there: a hunt that steers by earlier results, or stops
at its first finding, drives Spark exactly as it drives ``multiprocessing`` (no wave waits for
its slowest task). ``fn`` must be importable on the executors (a module-level function of a
package installed there): it is pickled by reference.

All the jobs of a pool share a job group; :meth:`SparkTaskPool.terminate` cancels it, future
jobs included, and Spark kills the tasks' Python workers.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable
from typing import Any

_ids = itertools.count()


class SparkTaskError(Exception):
    """A Spark task failed (or its job did): the message is one line, the task's own error."""


def first_error_line(e: BaseException) -> str:
    """The line that says what went wrong, out of a Py4J/Spark exception's pages: the last line
    of a Python worker's traceback (``ModuleNotFoundError: No module named 'kafkacheck'``), else
    the first line of the message."""
    text = str(e)
    if "Traceback (most recent call last)" not in text and hasattr(e, "java_exception"):
        # a Py4J error's own first line names the call ("An error occurred while calling
        # None.org.apache...."); the JVM exception says what went wrong
        with contextlib.suppress(Exception):
            text = str(e.java_exception.toString())
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if "Traceback (most recent call last)" in text:
        tb = text[text.index("Traceback (most recent call last)"):].splitlines()
        for ln in tb[1:]:
            s = ln.strip()
            # the exception line: not indented, not a frame, before the JVM's stack resumes
            if s and not ln.startswith((" ", "\t")) and not s.startswith(("File ", "at ", "^")):
                return s[:400]
    return (lines[0] if lines else type(e).__name__)[:400]


class _Handle:
    def __init__(self) -> None:
        self._done = threading.Event()
        self._value: Any = None
        self._error: BaseException | None = None

    def ready(self) -> bool:
        return self._done.is_set()

    def get(self) -> Any:
        self._done.wait()
        if self._error is not None:
            raise SparkTaskError(first_error_line(self._error))
        return self._value


def _call(fn_args):
    fn, args = fn_args
    return fn(*args)


class SparkTaskPool:
    """``apply_async`` as Spark jobs of one task each, in the session ``spark``."""

    def __init__(self, spark, name: str = "kafkacheck") -> None:
        self.sc = spark.sparkContext
        self.group = f"{name}-{next(_ids)}"
        self.closed = False
        self._threads: list[threading.Thread] = []

    @property
    def slots(self) -> int:
        """Tasks the cluster runs at once (its executors' cores; local[N]: N)."""
        return max(1, self.sc.defaultParallelism)

    def apply_async(self, fn: Callable, args: tuple) -> _Handle:
        h = _Handle()

        def run() -> None:
            try:
                if self.closed:
                    raise SparkTaskError("the pool was terminated")
                # thread-local in the JVM (PySpark pins a JVM thread to each Python thread)
                self.sc.setJobGroup(self.group, "kafkacheck tasks", interruptOnCancel=True)
                h._value = self.sc.parallelize([(fn, args)], 1).map(_call).collect()[0]
            except BaseException as e:  # reported by get(); a cancelled job's is never asked for
                h._error = e
            finally:
                h._done.set()

        t = threading.Thread(target=run, name=f"{self.group}-task", daemon=True)
        self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()
        return h

    def terminate(self) -> None:
        """Cancel every job of the pool, those under way and any a thread is about to start."""
        self.closed = True
        try:
            self.sc._jsc.sc().cancelJobGroupAndFutureJobs(self.group)
        except Exception:  # an older Spark, or a context already stopped
            with contextlib.suppress(Exception):
                self.sc.cancelJobGroup(self.group)

    def __enter__(self) -> SparkTaskPool:
        return self

    def __exit__(self, *exc) -> None:
        self.terminate()
