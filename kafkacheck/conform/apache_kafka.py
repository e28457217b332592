"""Apache Kafka as a target: a KRaft cluster on loopback, run from a dist of
:mod:`kafkacheck.real.kafka_dist` (a release from Maven Central, or ``--kafka-home``).

Theory of operation
-------------------
* :class:`KafkaCluster` -- one node (``process.roles=broker,controller``) or three nodes that
  are each broker and controller, with a static three-voter quorum
  (``controller.quorum.voters``). Every node has three listeners on 127.0.0.1: ``CLIENT``
  (what clients use; it advertises the node's fault-proxy port when the run has proxies),
  ``INTERNAL`` (replication between brokers, never proxied) and ``CONTROLLER`` (the Raft
  quorum). Storage is formatted with ``kafka.tools.StorageTool format``, brokers run as
  ``kafka.Kafka server.properties``, each a process of its own
  (:class:`fault_injection.real.processes.LocalProcess`), logging to ``NODE.log`` in the run
  directory (INFO, through the backend of the dist's SLF4J binding: log4j 2, or Kafka 3.x's
  reload4j). A node is ready when its log, since its latest start, says ``Kafka Server
  started`` and a Metadata request to it lists every live node; the cluster is ready when
  every node is.

Settings follow docs/how-to/apache-kafka.md for a 2-core machine: 512 MB heaps, a 2 MiB cleaner dedupe
buffer, two network and I/O threads, three partitions for each internal topic, no initial
rebalance delay, the cleaner looking for work every second (Kafka's default 15 s would hide
compaction from a short test), and replication factor ``min(3, nodes)`` with
``min.insync.replicas`` ``min(2, nodes)`` for new and internal topics (Kafka's default
``min.insync.replicas`` is 1; 2 is the durable setting its documentation recommends, and
what the reference broker uses). Everything else is Kafka's default.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import signal
import struct
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from fault_injection.real.processes import LocalProcess
from kafkacheck.real.kafka_dist import KafkaDist, KafkaHome, write_log_config
from reference.log import ROLL_FLUSH_MS

READY_LINE = "Kafka Server started"
HEAP = ["-Xms512m", "-Xmx512m"]
JVM_OPTIONS = ["-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true"]


def random_cluster_id() -> str:
    """A Kafka ``Uuid`` as StorageTool's random-uuid prints it (URL-safe base64, no padding)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


# a broker's log: INFO (it says when the broker is ready), without the per-request chatter
QUIET_LOGGERS = ("kafka.request.logger", "state.change.logger")


@dataclass
class KafkaNode:
    node_id: int
    client_port: int
    internal_port: int
    controller_port: int
    advertised_port: int  # the client port, or its fault proxy's
    directory: Path
    process: LocalProcess | None = None
    host: str = "127.0.0.1"  # its address (its network namespace's, with node faults)
    advertised_host: str = "127.0.0.1"  # what clients are told: its address, or the proxy's
    log_options: list[str] = field(default_factory=list)  # the JVM options that point its logging at its config

    @property
    def name(self) -> str:
        return f"kafka-{self.node_id}"


class ClusterNotReady(RuntimeError):
    pass


class FeatureRefused(ValueError):
    """StorageTool refused a ``--feature`` (an unknown feature, or a level this version lacks)."""


def _format_error(log: str) -> str:
    """The line of StorageTool's output that says why formatting failed ('' if none does)."""
    for line in log.splitlines():
        line = line.strip()
        m = re.match(r'Exception in thread "main" [\w.$]+: (.*)', line)
        if m:
            return m.group(1)[:300]
        if line.startswith(("Unsupported feature", "Error", "Invalid")):
            return line[:300]
    return ""


class KafkaCluster:
    """Apache Kafka in KRaft mode: ``nodes`` processes, each broker and controller, on
    127.0.0.1 or (``netns``, a fault_injection.real.netns.NodeNetwork with nodes named ``kafka-N``)
    each in its network namespace at its own address."""

    def __init__(self, dist: KafkaDist | KafkaHome, work_dir: Path, nodes: int = 1, proxied: bool = False,
                 overrides: dict[str, str] | None = None, netns=None, features: dict[str, int] | None = None,
                 power_loss: bool = False) -> None:
        if nodes not in (1, 3):
            raise ValueError("--brokers must be 1 or 3 for --spawn kafka (one node, or a three-voter quorum)")
        from reference.server.cluster import free_ports

        self.dist = dist
        self.work_dir = work_dir
        self.overrides = dict(overrides or {})
        self.features = dict(features or {})  # StorageTool format --feature NAME=LEVEL
        # the run cuts logs back to their checkpointed recovery points (cut_to_flushed): have
        # Kafka write them every RECOVERY_CHECKPOINT_MS instead of every minute, so that the
        # cut keeps what a flush setting (log.flush.interval.*) made durable; it changes when
        # Kafka records what it flushed, not when it flushes
        self.power_loss = power_loss
        ports = free_ports(4 * nodes)
        self.nodes = [KafkaNode(i + 1, *ports[4 * i:4 * i + 3],
                                advertised_port=ports[4 * i + 3] if proxied else ports[4 * i],
                                directory=work_dir / f"kafka-{i + 1}") for i in range(nodes)]
        self.netns = netns
        if netns is not None:
            for n in self.nodes:
                n.host = netns.address(n.name)
                n.advertised_host = "127.0.0.1" if proxied else n.host
        self.cluster_id = random_cluster_id()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{n.advertised_host}:{n.advertised_port}" for n in self.nodes)

    def properties(self, node: KafkaNode) -> dict[str, str]:
        count = len(self.nodes)
        rf, min_isr = str(min(3, count)), str(min(2, count))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in self.nodes),
            "listeners": f"CLIENT://{node.host}:{node.client_port},INTERNAL://{node.host}:{node.internal_port},"
                         f"CONTROLLER://{node.host}:{node.controller_port}",
            "advertised.listeners": f"CLIENT://{node.advertised_host}:{node.advertised_port},"
                                    f"INTERNAL://{node.host}:{node.internal_port}",
            "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "INTERNAL",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": str(node.directory / "data"),
            "num.partitions": "1",
            "default.replication.factor": rf,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "transaction.state.log.num.partitions": "3",
            "group.initial.rebalance.delay.ms": "0",
            # KIP-848's consumer groups: the session and heartbeat of the classic members'
            # (session.timeout.ms 6 s, heartbeat.interval.ms 0.5 s, which a member of the consumer
            # protocol may not set: the coordinator decides them; Kafka's 45 s and 5 s keep a member
            # whose leave was lost in a failover in the group for 45 s)
            "group.consumer.session.timeout.ms": "6000",
            "group.consumer.min.session.timeout.ms": "6000",
            "group.consumer.heartbeat.interval.ms": "500",
            "group.consumer.min.heartbeat.interval.ms": "500",
            # KIP-932's share groups (4.1+; older brokers ignore the names): the share state topic
            # as the other internal topics (its RF 3 default leaves one node without share groups),
            # a member's session and heartbeats as the consumer protocol's
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            "share.coordinator.state.topic.num.partitions": "3",
            "group.share.session.timeout.ms": "6000",
            "group.share.min.session.timeout.ms": "6000",
            "group.share.heartbeat.interval.ms": "500",
            "group.share.min.heartbeat.interval.ms": "500",
            "log.cleaner.dedupe.buffer.size": "2097152",
            "log.cleaner.backoff.ms": "1000",
            "num.network.threads": "2",
            "num.io.threads": "2",
        }
        if self.power_loss:
            props["log.flush.offset.checkpoint.interval.ms"] = str(RECOVERY_CHECKPOINT_MS)
        props.update(self.overrides)
        return props

    def _write_config(self, node: KafkaNode) -> Path:
        node.directory.mkdir(parents=True, exist_ok=True)
        path = node.directory / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self.properties(node).items()))
        node.log_options = write_log_config(self.dist.logging, node.directory, "INFO", quiet=QUIET_LOGGERS)
        return path

    def _java(self, node: KafkaNode, main: str, *args: str) -> list[str]:
        return [self.dist.java(), *HEAP, *JVM_OPTIONS, *node.log_options, "-cp", self.dist.classpath(), main, *args]

    def format(self) -> None:
        """StorageTool format for every node, in parallel (each is a JVM start). A node
        directory left by an earlier run in the same place (ours: it has our
        server.properties) is cleared first, as its cluster id is another one."""
        runs = []
        for node in self.nodes:
            if (node.directory / "server.properties").exists():
                shutil.rmtree(node.directory)
                (self.work_dir / f"{node.name}.log").unlink(missing_ok=True)
            config = self._write_config(node)
            argv = self._java(node, "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(config),
                              *(a for name, level in sorted(self.features.items())
                                for a in ("--feature", f"{name}={level}")))
            log = open(node.directory / "format.log", "wb")  # noqa: SIM115 - closed below
            runs.append((node, log, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                     stdin=subprocess.DEVNULL, start_new_session=True)))
        failed = []
        try:
            for node, log, proc in runs:
                try:
                    code = proc.wait(120)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    code = proc.wait()
                log.close()
                if code != 0:
                    failed.append(f"{node.name} (see {node.directory / 'format.log'})")
        finally:
            for _node, log, proc in runs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                log.close()
        if failed:
            reason = _format_error((self.nodes[0].directory / "format.log").read_text(errors="replace"))
            if self.features and reason and "feature" in reason.lower():
                raise FeatureRefused(f"--feature {' '.join(f'{k}={v}' for k, v in sorted(self.features.items()))}: "
                                     f"{self.dist.label} refuses it: {reason}")
            raise ClusterNotReady(f"kafka.tools.StorageTool format failed for {', '.join(failed)}"
                                  + (f": {reason}" if reason else ""))

    def start(self, timeout_s: float = 90.0) -> None:
        self.format()
        for node in self.nodes:
            prefix = self.netns.exec_prefix(node.name) if self.netns is not None else []
            node.process = LocalProcess(node.name, [*prefix, *self._java(node, "kafka.Kafka",
                                                                         str(node.directory / "server.properties"))],
                                        self.work_dir / f"{node.name}.log")
            node.process.start()
        self.wait_ready(timeout_s)

    def processes(self) -> dict[str, LocalProcess]:
        return {n.name: n.process for n in self.nodes if n.process is not None}

    def lose_unflushed(self, name: str) -> dict[str, list[int]]:
        """After ``name`` was killed (kill -9): cut its logs back to what it had flushed, as a
        power loss of its machine would (:func:`cut_to_flushed`)."""
        node = next(n for n in self.nodes if n.name == name)
        if node.process is not None and node.process.alive:
            raise RuntimeError(f"{name} is running: only a stopped node's logs can be cut")
        return cut_to_flushed(node.directory / "data", _stopped_at(node.process))

    def _up(self, node: KafkaNode) -> bool:
        return node.process is not None and node.process.alive and not node.process.paused

    def ready(self) -> bool:
        live = [n for n in self.nodes if self._up(n)]
        if not live:
            return False
        want = sorted(n.node_id for n in live)
        for node in live:
            assert node.process is not None
            if READY_LINE not in node.process.log_since_start():
                return False
            try:
                brokers = metadata_brokers(node.host, node.client_port, 1.0)
            except (OSError, ValueError):
                return False
            if brokers != want:
                return False
        return True

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        end = time.monotonic() + timeout_s
        while not self.ready():
            dead = [n.name for n in self.nodes if n.process is not None and n.process.starts and not n.process.alive]
            if dead:
                raise ClusterNotReady(f"{', '.join(dead)} exited; see {self.work_dir}/{dead[0]}.log")
            if time.monotonic() > end:
                raise ClusterNotReady(f"Apache Kafka did not become ready in {timeout_s:.0f} s; see the logs in "
                                      f"{self.work_dir}")
            time.sleep(0.2)

    def stop(self, grace_s: float = 3.0) -> None:
        """SIGTERM to every node at once (a node of a quorum that is shutting down may wait
        for controllers that are gone), then SIGKILL whatever is left after ``grace_s``."""
        procs = [n.process for n in self.nodes if n.process is not None and n.process.alive]
        for p in procs:
            assert p.popen is not None
            if p.paused:
                p.popen.send_signal(signal.SIGCONT)
                p.paused = False
            p.popen.send_signal(signal.SIGTERM)
        end = time.monotonic() + grace_s
        for p in procs:
            assert p.popen is not None
            try:
                p.popen.wait(max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.send_signal(signal.SIGKILL)
                p.popen.wait()


# ---------------------------------------------------------------- a power loss, on disk

RECOVERY_POINTS = "recovery-point-offset-checkpoint"
RECOVERY_CHECKPOINT_MS = 200  # log.flush.offset.checkpoint.interval.ms with power-loss faults
_BATCH_HEADER = struct.Struct(">qi")  # base offset, batch length (the bytes after this field)


def _read_checkpoint(path: Path) -> dict[str, int]:
    """Kafka's offset checkpoint file (version 0, count, then ``topic partition offset``
    lines) as ``{"topic-p": offset}``; empty when it is missing or unreadable."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return {}
    out: dict[str, int] = {}
    for line in lines[2:]:
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit() and parts[2].lstrip("-").isdigit():
            out[f"{parts[0]}-{parts[1]}"] = int(parts[2])
    return out


def _batches_end(data: bytes, offset: int) -> int:
    """The byte position of the first record batch of a segment whose base offset is at
    least ``offset`` (the segment's length when there is none)."""
    pos = 0
    while pos + _BATCH_HEADER.size <= len(data):
        base, length = _BATCH_HEADER.unpack_from(data, pos)
        if base >= offset or length <= 0:
            return pos
        pos += _BATCH_HEADER.size + length
    return min(pos, len(data))


def _log_end(segments: list[Path]) -> int:
    """The offset after the last batch of a partition directory (its log end offset)."""
    for seg in reversed(segments):
        data = seg.read_bytes()
        pos, end = 0, None
        while pos + 61 <= len(data):
            base, length = _BATCH_HEADER.unpack_from(data, pos)
            if length <= 0 or pos + _BATCH_HEADER.size + length > len(data):
                break  # a zeroed or torn tail (preallocated, or cut by a crash): the log ends here
            last_delta = struct.unpack_from(">i", data, pos + 23)[0]
            end = base + last_delta + 1
            pos += _BATCH_HEADER.size + length
        if end is not None:
            return end
    return int(segments[0].stem) if segments else 0


def _stopped_at(process) -> float | None:
    """When a killed node last ran (wall clock): its kill, or the pause before it."""
    history = process.history if process is not None else []
    kills = [i for i, (_t, what) in enumerate(history) if what == "kill"]
    if not kills:
        return None
    i = kills[-1]
    return history[i - 1][0] if i > 0 and history[i - 1][1] == "pause" else history[i][0]


def cut_to_flushed(log_dir: Path, stopped_at: float | None = None) -> dict[str, list[int]]:
    """Make a stopped Kafka node's log directory look as a power loss would leave it: every
    partition cut back to what Kafka recorded as flushed (fsync-ed), the larger of its entry
    in ``recovery-point-offset-checkpoint`` (Kafka advances the recovery point only after a
    flush returned, and writes the checkpoint every log.flush.offset.checkpoint.interval.ms:
    every RECOVERY_CHECKPOINT_MS in runs with power losses) and the base offset of the newest
    segment whose predecessor rolled at least ROLL_FLUSH_MS before the node stopped
    (``stopped_at``, wall clock; None: long before): when a segment rolls, Kafka's scheduler
    flushes everything before it a moment later, as the reference broker does
    (:data:`reference.log.ROLL_FLUSH_MS`); a segment's last write, its modification time, is
    its roll. The segment holding the cut is cut there, later segments (and their indexes)
    and producer snapshots beyond it are deleted; Kafka's recovery of an unclean shutdown (no
    clean-shutdown marker after kill -9) rescans the log, rebuilding its indexes, and finds
    the records beyond the cut simply absent. The KRaft metadata log is left alone: Raft
    flushes it before acknowledging. Returns ``{"topic-p": [cut from, log end before]}`` for
    every partition that lost records."""
    points = _read_checkpoint(log_dir / RECOVERY_POINTS)
    lost: dict[str, list[int]] = {}
    for part in sorted(p for p in log_dir.iterdir() if p.is_dir() and "-" in p.name):
        if part.name.startswith("__cluster_metadata"):
            continue
        segments = sorted((s for s in part.glob("*.log") if s.stem.isdigit()), key=lambda p: int(p.stem))
        if not segments:
            continue
        cut = max(points.get(part.name, 0), _rolled_and_flushed(segments, stopped_at))
        end = _log_end(segments)
        if end <= cut:
            continue
        _cut_segments(part, segments, cut)
        lost[part.name] = [cut, end]
    return lost


def _rolled_and_flushed(segments: list[Path], stopped_at: float | None) -> int:
    """The base offset of the newest segment everything below which was flushed on a roll."""
    flushed = int(segments[0].stem)
    for older, newer in pairwise(segments):
        if stopped_at is None or older.stat().st_mtime + ROLL_FLUSH_MS / 1000 <= stopped_at:
            flushed = int(newer.stem)
    return flushed


def _cut_segments(part: Path, segments: list[Path], cut: int) -> None:
    holder = max((i for i, s in enumerate(segments) if int(s.stem) <= cut), default=0)
    for seg in segments[holder + 1:]:
        for f in part.glob(seg.stem + ".*"):
            f.unlink()
    os.truncate(segments[holder], _batches_end(segments[holder].read_bytes(), cut))
    for snap in part.glob("*.snapshot"):
        if snap.stem.isdigit() and int(snap.stem) > cut:
            snap.unlink()


def metadata_brokers(host: str, port: int, timeout_s: float) -> list[int]:
    """The node ids a Metadata v12 answer lists (the registered, unfenced brokers)."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    from reference.server.protocol import round_trip

    request = MetadataRequest[12](topics=[], allow_auto_topic_creation=False)
    resp = round_trip(host, port, request, MetadataResponse, "kafkacheck-probe", timeout_s)
    return sorted(b.node_id for b in resp.brokers)
