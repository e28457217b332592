"""``--client java``: Apache Kafka's own Java client, driven from Python.

Theory of operation
-------------------
``java/KafkacheckDriver.java`` is a small program of ours around ``kafka-clients``: it reads
one JSON request a line on stdin (``{"id", "op", "h", ...}``: create a producer, consumer, share
consumer or admin client, or act on one) and answers each on stdout, with the error as Kafka names it
(``NOT_ENOUGH_REPLICAS: NotEnoughReplicasException: ...``). It is compiled once per Kafka
version with ``javac`` against the jars of its dist (:mod:`kafkacheck.real.kafka_dist`: a
release's :class:`~kafkacheck.real.kafka_dist.KafkaDist`, or the kafka-clients of
``--kafka-home``), into ``driver-HASH/`` in the dist's ``work_dir`` (HASH: of the source and the
dist's jars, so an edited driver or a rebuilt home is built again). ``java/KafkacheckShare.java``,
its KIP-932 share consumers (``share.*`` ops: KafkaShareConsumer in explicit acknowledgement
mode), is compiled with it only when the dist's kafka-clients is 4.1 or later
(:func:`has_share_consumer`): a driver built against an older one (3.x) serves every other op
and answers the share ops ``UNSUPPORTED_VERSION``.

:class:`JavaDriver` is one such process, shared by every thread of a run: calls are matched to
answers by id, each waits at most its timeout plus a margin, and the process is stopped when
the run ends (its stdin closes, which ends it too if kafkacheck dies). On it sit the two
faces the rest of conform knows (:mod:`~kafkacheck.real.java_clients`): the case client
and the workload handles (the share consumer's too).
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import itertools
import json
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

from kafkacheck.real.kafka_dist import (
    KafkaDist,
    KafkaHome,
    KafkaUnavailable,
    need_tool,
    version_tuple,
    write_log_config,
)

SOURCE = Path(__file__).parent / "java" / "KafkacheckDriver.java"
SHARE_SOURCE = Path(__file__).parent / "java" / "KafkacheckShare.java"
SHARE_SINCE = (4, 1)  # KafkaShareConsumer with share.acknowledgement.mode and commitSync's per-partition map
MAIN_CLASS = "KafkacheckDriver"
MARGIN_S = 10.0  # how much longer than its own timeout Python waits for an answer
STARTUP_TIMEOUT_S = 60.0
ASSIGNORS = {"range": "org.apache.kafka.clients.consumer.RangeAssignor",
             "roundrobin": "org.apache.kafka.clients.consumer.RoundRobinAssignor",
             "cooperative-sticky": "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"}


# KIP-848 consumers: every reconciliation, state transition and heartbeat answer (a few lines a
# heartbeat), to read a group's history against the brokers' (the reference logs its side)
CLIENT_LOGGERS = {"org.apache.kafka.clients.consumer.internals.ConsumerMembershipManager": "DEBUG",
                  "org.apache.kafka.clients.consumer.internals.ConsumerHeartbeatRequestManager": "DEBUG"}


class JavaError(Exception):
    """The Java client refused or failed; the text starts with Kafka's error name."""


def has_share_consumer(dist: KafkaDist | KafkaHome) -> bool:
    """Whether ``dist``'s kafka-clients has the KafkaShareConsumer the driver's share ops use."""
    return version_tuple(dist.version) >= SHARE_SINCE


def build_driver(dist: KafkaDist | KafkaHome, log=print) -> Path:
    """The compiled driver for ``dist`` (built on first use), with its share consumers when the
    dist's kafka-clients has them (:func:`has_share_consumer`)."""
    sources = [SOURCE, SHARE_SOURCE] if has_share_consumer(dist) else [SOURCE]
    digest = hashlib.sha256(b"".join(s.read_bytes() for s in sources) + dist.fingerprint.encode()).hexdigest()[:12]
    out = dist.work_dir / f"driver-{digest}"
    if (out / f"{MAIN_CLASS}.class").exists():
        return out
    dist.fetch(log)
    javac = need_tool("javac", "it builds kafkacheck's Java client driver")
    dist.work_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".driver-", dir=dist.work_dir))
    try:
        done = subprocess.run([javac, "-nowarn", "-d", str(tmp), "-cp", dist.classpath(), *map(str, sources)],
                              capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            first = next((x for x in (done.stdout + done.stderr).splitlines() if "error" in x), done.stderr[:300])
            raise KafkaUnavailable(f"could not build the Java client driver against {dist.label}: {first}")
        try:
            tmp.rename(out)
        except OSError:  # another kafkacheck built the same driver meanwhile
            if not (out / f"{MAIN_CLASS}.class").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for old in dist.work_dir.glob("driver-*"):  # builds of an earlier driver source
        if old != out:
            shutil.rmtree(old, ignore_errors=True)
    return out


class JavaDriver:
    """One driver process; :meth:`call` is thread-safe."""

    def __init__(self, dist: KafkaDist | KafkaHome, log_path: Path) -> None:
        self.dist = dist
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.ids = itertools.count(1)
        self.lock = threading.Lock()
        self.pending: dict[int, tuple[threading.Event, list]] = {}
        self.dead: str | None = None
        self.ready = threading.Event()

    def start(self) -> None:
        classes = build_driver(self.dist)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log_options = write_log_config(self.dist.logging, self.log_path.parent, "WARN", stderr=True, stem="java-client-",
                                       levels=CLIENT_LOGGERS)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it
        try:
            self.proc = subprocess.Popen(
                [self.dist.java(), "-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 *log_options,
                 "-cp", f"{self.dist.classpath()}:{classes}", MAIN_CLASS],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        finally:
            log.close()
        threading.Thread(target=self._read, args=(self.proc,), name="java-driver", daemon=True).start()
        if not self.ready.wait(STARTUP_TIMEOUT_S) or self.dead:
            self.close()
            raise KafkaUnavailable(f"the Java client driver did not start within {STARTUP_TIMEOUT_S} s "
                                   f"(see {self.log_path})")
        atexit.register(self.close)

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            try:
                answer = json.loads(line)
            except ValueError:
                continue
            if answer.get("ready"):
                self.ready.set()
                continue
            with self.lock:
                waiter = self.pending.pop(answer.get("id"), None)
            if waiter is not None:
                waiter[1].append(answer)
                waiter[0].set()
        with self.lock:  # the process ended: nobody waits for ever
            self.dead = f"the Java client driver exited (see {self.log_path})"
            self.ready.set()
            for event, _box in self.pending.values():
                event.set()
            self.pending.clear()

    def call(self, op: str, timeout_s: float, **fields: Any) -> Any:
        """Run ``op``; its result, or :class:`JavaError` with the client's error."""
        event, box = threading.Event(), []
        with self.lock:
            if self.dead or self.proc is None:
                raise JavaError(f"CLIENT_GONE: {self.dead or 'the Java client driver is not running'}")
            request_id = next(self.ids)
            self.pending[request_id] = (event, box)
            line = json.dumps({"id": request_id, "op": op, "timeout_ms": int(timeout_s * 1000), **fields})
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write(line.encode() + b"\n")
                self.proc.stdin.flush()
            except OSError as e:
                self.pending.pop(request_id, None)
                raise JavaError(f"CLIENT_GONE: {e}") from None
        if not event.wait(timeout_s + MARGIN_S):
            with self.lock:
                self.pending.pop(request_id, None)
            raise JavaError(f"REQUEST_TIMED_OUT: the Java client did not answer {op} within {timeout_s + MARGIN_S:.0f} s")
        if not box:
            raise JavaError(f"CLIENT_GONE: {self.dead}")
        if "error" in box[0]:
            raise JavaError(box[0]["error"])
        return box[0].get("ok")

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.close()  # the driver exits when its stdin ends
        try:
            proc.wait(3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


_driver: JavaDriver | None = None
_driver_lock = threading.Lock()


def use_driver(dist: KafkaDist | KafkaHome, log_path: Path) -> JavaDriver:
    """Start the process-wide driver (conform does it before the first case)."""
    global _driver
    with _driver_lock:
        if _driver is None or _driver.dead or _driver.proc is None:
            _driver = JavaDriver(dist, log_path)
            _driver.start()
        return _driver


def driver() -> JavaDriver:
    with _driver_lock:
        if _driver is None:
            raise JavaError("CLIENT_GONE: the Java client driver was not started (use_driver)")
        return _driver


def stop_driver() -> None:
    global _driver
    with _driver_lock:
        if _driver is not None:
            _driver.close()
        _driver = None


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


class Handle:
    """A client object inside the driver."""

    def __init__(self, kind: str, conf: dict[str, Any], timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.d = driver()
        self.h = self.d.call(f"{kind}.new", timeout_s, conf={k: str(v) for k, v in conf.items()})
        self.kind = kind

    def call(self, op: str, timeout_s: float | None = None, **fields: Any) -> Any:
        return self.d.call(f"{self.kind}.{op}", self.timeout_s if timeout_s is None else timeout_s, h=self.h,
                           **fields)

    def close(self, timeout_s: float = 2.0) -> None:
        with contextlib.suppress(JavaError):
            self.call("close", timeout_s)


def ms(seconds: float) -> int:
    return int(seconds * 1000)


def producer_conf(bootstrap: str, timeout_s: float, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "request.timeout.ms": ms(timeout_s),
            "delivery.timeout.ms": ms(timeout_s) + 1000, "max.block.ms": ms(timeout_s), "linger.ms": 2, **extra}


def admin_conf(bootstrap: str, timeout_s: float, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "request.timeout.ms": ms(timeout_s),
            "default.api.timeout.ms": ms(timeout_s), **extra}


def share_conf(bootstrap: str, timeout_s: float, **extra: Any) -> dict[str, Any]:
    """A KafkaShareConsumer's settings, in explicit acknowledgement mode (a share consumer
    refuses the consumer's enable.auto.commit, auto.offset.reset, isolation.level, ...)."""
    return {"bootstrap.servers": bootstrap, "share.acknowledgement.mode": "explicit",
            "request.timeout.ms": ms(timeout_s), "default.api.timeout.ms": ms(timeout_s), **extra}


def consumer_conf(bootstrap: str, timeout_s: float, **extra: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "enable.auto.commit": "false", "request.timeout.ms": ms(timeout_s),
            "default.api.timeout.ms": ms(timeout_s), **extra}
