"""Where a hunt's runs go: forked processes on this machine, or Spark tasks.

Both hunts (:mod:`kafkacheck.hunt`, :mod:`kafkacheck.swarm_hunt`) submit their runs to
:class:`Tasks`. With ``--spark MASTER`` (:func:`spark_session`) the runs are Spark tasks
(:class:`spark_analysis.pool.SparkTaskPool`: a job of one task a run, as many in flight as the
cluster has cores, or ``--jobs``); each returns its small record (the verdict, anomaly kinds,
coverage marks, its seconds and the fingerprint of the code that made it), and a task whose
worker ran code other than the driver's is refused (:class:`SparkWorkerError`).
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing as mp
import os
import threading
import time
from pathlib import Path

from fault_injection.simulation import young_collections_only

# a worker's full garbage collections: one after every this many runs, none during a run
FULL_COLLECTION_EVERY = 20
_runs_done = [0]


class SparkWorkerError(Exception):
    """A Spark task failed, or ran code other than the driver's: one line for the user."""


def code_fingerprint() -> str:
    """A hash of the project's sources (and data files) where this process imports them from
    (150 files, a few milliseconds): a Spark task's verdict is the local one only if its
    worker runs the same code. Read anew each time: a checkout edited during a hunt must not
    pass for a different install."""
    import hashlib
    import importlib.util

    h = hashlib.sha256()
    for pkg in ("reference", "fault_injection", "traces", "properties", "linearizability", "kafkacheck"):
        spec = importlib.util.find_spec(pkg)
        if spec is None or spec.origin is None:
            continue
        root = Path(spec.origin).parent
        for f in sorted(root.rglob("*")):
            if f.suffix in (".py", ".json") and "__pycache__" not in f.parts:
                h.update(str(f.relative_to(root.parent)).encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _one_run(fn, job):
    """Run ``fn(job)`` in a worker with full collections held until it returns. A run's
    simulation already holds them (:func:`young_collections_only`); without this the first
    one after it walks the whole history while the run is judged, 60 ms or more a run.
    Runs leave only a few dozen objects in reference cycles (the compiled engine more: its
    callbacks' environments, docs/measurements/speed.md), so one full collection every
    :data:`FULL_COLLECTION_EVERY` runs keeps a long hunt's memory flat."""
    with young_collections_only():
        result = fn(job)
    _runs_done[0] += 1
    if _runs_done[0] % FULL_COLLECTION_EVERY == 0:
        gc.collect()
    return result


def _remote(fn, job):
    """A Spark task: one run, with its seconds, the code's fingerprint and the worker's host."""
    import socket

    t = time.perf_counter()
    r = _one_run(fn, job)
    return r, time.perf_counter() - t, code_fingerprint(), socket.gethostname()


class _Checked:
    """A Spark task's handle: its run's result, once its code is known to be the driver's."""

    driver_code: str = ""

    def __init__(self, handle) -> None:
        self.handle = handle
        self.seconds = 0.0
        self.host = ""

    def ready(self) -> bool:
        return self.handle.ready()

    def get(self):
        from spark_analysis.pool import SparkTaskError

        try:
            r, self.seconds, fingerprint, self.host = self.handle.get()
        except SparkTaskError as e:
            hint = (" (kafkacheck must be installed for the Python that Spark runs on every worker: "
                    "PYSPARK_PYTHON; see docs/how-to/hunt.md)" if "ModuleNotFoundError" in str(e) else "")
            raise SparkWorkerError(f"a Spark task failed: {e}{hint}") from None
        if fingerprint != _Checked.driver_code:
            _Checked.driver_code = code_fingerprint()  # the files as they are now
        if fingerprint != _Checked.driver_code:
            raise SparkWorkerError(
                f"the Spark worker on {self.host} runs other kafkacheck code (sources {fingerprint}) than "
                f"this driver ({_Checked.driver_code}): install the same kafkacheck on every worker")
        return r


class Tasks:
    """Where the runs of a hunt go: ``jobs`` forked processes, or Spark tasks in ``spark`` (a
    SparkSession), ``jobs`` in flight (default: the cluster's cores)."""

    def __init__(self, jobs: int | None, spark=None) -> None:
        self.spark = spark
        self._done = threading.Event()
        if spark is None:
            self.slots = jobs or default_jobs()
            self.pool = mp.get_context("fork").Pool(self.slots)
        else:
            from spark_analysis.pool import SparkTaskPool

            _Checked.driver_code = code_fingerprint()
            self.pool = SparkTaskPool(spark, "kafkacheck-hunt")
            self.slots = jobs or self.pool.slots

    def submit(self, fn, job):
        if self.spark is None:
            return self.pool.apply_async(_one_run, (fn, job), callback=self._finished,
                                         error_callback=self._finished)
        return _Checked(self.pool.apply_async(_remote, (fn, job)))

    def _finished(self, _result) -> None:
        self._done.set()  # (in the pool's result thread)

    def wait(self, timeout: float) -> None:
        """Until a run submitted here finishes (at once if one did since the last wait), or
        ``timeout`` seconds: a hunt's loop submits the next run as soon as a worker is free,
        not at its next look (Spark tasks: the timeout)."""
        if self.spark is None:
            self._done.wait(timeout)
            self._done.clear()
        else:
            time.sleep(timeout)

    def __enter__(self) -> Tasks:
        return self

    def __exit__(self, *exc) -> None:
        self.pool.terminate()


def _where(handle) -> str:
    """What a progress line adds for a Spark task: its own seconds and its worker."""
    return f"; task {handle.seconds:.1f} s on {handle.host}" if isinstance(handle, _Checked) else ""


def default_jobs() -> int:
    return max(1, min(os.cpu_count() or 2, 4))


@contextlib.contextmanager
def spark_session(master: str | None, log=print):
    """The Spark session of ``--spark MASTER`` (None without it), stopped at the end. On Ctrl-C
    PySpark's handler has cancelled the jobs already; the JVM's logs are silenced before the
    session stops (tasks killed under way are no news), and the interruption goes on up."""
    if master is None:
        yield None
        return
    from spark_analysis.pool import first_error_line
    from spark_analysis.session import get_spark

    log(f"starting Spark (master {master}) ...")
    try:
        spark = get_spark(master=master, app_name="kafkacheck-hunt")
    except Exception as e:
        if type(e).__module__.startswith(("pyspark", "py4j")):
            raise SparkWorkerError(f"Spark did not start with master {master}: {first_error_line(e)}") from None
        raise
    log(f"Spark: {spark.sparkContext.defaultParallelism} task slots (master {spark.sparkContext.master})")
    try:
        yield spark
    except KeyboardInterrupt:
        _silence(spark)
        raise
    finally:
        # a context the interruption left half stopped may fail to stop: the JVM exits with us
        with contextlib.suppress(Exception):
            spark.stop()


def _silence(spark) -> None:
    try:
        log4j = spark.sparkContext._jvm.org.apache.logging.log4j
        log4j.core.config.Configurator.setAllLevels(log4j.LogManager.getRootLogger().getName(), log4j.Level.OFF)
    except Exception:
        pass
