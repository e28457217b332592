"""``kafkacheck serve``: the reference cluster on real sockets, and its launcher.

:class:`ReferenceCluster` starts one process per node (``python -m reference.server``:
node 0 the controller, 1..N the brokers) with the data directory's ``cluster.json`` telling
each process where the others are, waits until the cluster answers Metadata with every
broker and the internal topics, and can kill -9, pause, resume and restart a broker (what
``kafkacheck conform`` does to it). With ``single_process`` the whole cluster runs in one
process instead (one listener per broker).
"""

from __future__ import annotations

import signal
import sys
import time

from fault_injection.real.processes import LocalProcess, ProcessGroup
from reference.server.cluster import (
    SERVER_TIMINGS,
    ClusterLayout,
    DataDirLock,
    ServerOptions,
    holder_of,
)


class ClusterNotReady(RuntimeError):
    pass


def metadata_probe(host: str, port: int, timeout_s: float = 2.0) -> tuple[list[int], dict[str, list[int]]]:
    """One Metadata v1 round trip: (broker ids, topic -> leaders of its partitions)."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    from reference.server.protocol import round_trip

    resp = round_trip(host, port, MetadataRequest[1](topics=None), MetadataResponse, "kafkacheck-probe", timeout_s)
    topics = {t.name: [p.leader_id for p in t.partitions] for t in resp.topics}
    return sorted(b.node_id for b in resp.brokers), topics


def partition_states(host: str, port: int, topic: str, timeout_s: float = 2.0) -> dict[int, tuple[int, list[int]]]:
    """One Metadata v1 round trip: partition -> (leader, ISR) of ``topic`` (empty when the
    broker does not know it)."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    from reference.server.protocol import round_trip

    resp = round_trip(host, port, MetadataRequest[1](topics=[topic]), MetadataResponse, "kafkacheck-probe", timeout_s)
    return {p.partition_index: (p.leader_id, sorted(p.isr_nodes)) for t in resp.topics if t.name == topic
            for p in t.partitions}


class ReferenceCluster:
    def __init__(self, options: ServerOptions, single_process: bool = False, log_level: str = "WARNING",
                 netns=None) -> None:
        """``netns``: a fault_injection.real.netns.NodeNetwork with a node named like each process
        ("controller", "broker-N"): every node runs in its namespace, at its address."""
        self.options = options
        self.single_process = single_process
        self.netns = netns
        if netns is not None:
            if single_process:
                raise ValueError("nodes in network namespaces need a process each")
            options.hosts = {n: netns.address("controller" if n == 0 else f"broker-{n}")
                             for n in range(0, options.brokers + 1)}
        self.layout = ClusterLayout.load_or_create(options)
        self.bootstrap = self.layout.bootstrap()
        self.group = ProcessGroup()
        self.log_dir = options.data_dir / "logs"
        self.lock: DataDirLock | None = None
        nodes = [list(range(0, options.brokers + 1))] if single_process else \
            [[n] for n in range(0, options.brokers + 1)]
        for ids in nodes:
            name = "cluster" if single_process else ("controller" if ids == [0] else f"broker-{ids[0]}")
            prefix = netns.exec_prefix(name) if netns is not None else []
            argv = [*prefix, sys.executable, "-m", "reference.server", "--data-dir", str(options.data_dir),
                    "--brokers", str(options.brokers),
                    "--min-insync-replicas", str(options.min_insync_replicas),
                    "--default-replication-factor", str(options.default_replication_factor),
                    "--log-level", log_level, "--exit-with-parent"]
            for n in ids:
                argv += ["--node", str(n)]
            if options.unclean_leader_election:
                argv.append("--unclean-leader-election")
            if options.flush_ms is not None:
                argv += ["--flush-ms", str(options.flush_ms)]
            if options.flush_messages is not None:
                argv += ["--flush-messages", str(options.flush_messages)]
            if options.transaction_version != 2:
                argv += ["--transaction-version", str(options.transaction_version)]
            argv += ["--consumer-session-timeout-ms", str(options.consumer_session_timeout_ms),
                     "--consumer-heartbeat-interval-ms", str(options.consumer_heartbeat_interval_ms),
                     "--share-lock-ms", str(options.share_record_lock_duration_ms),
                     "--share-delivery-limit", str(options.share_delivery_count_limit),
                     "--share-auto-offset-reset", options.share_auto_offset_reset]
            if options.bugs:
                argv += ["--bugs", ",".join(sorted(options.bugs))]
            argv += ["--max-connections", str(options.max_connections), "--idle-timeout", str(options.idle_timeout_s)]
            self.group.add(name, argv, self.log_dir / f"{name}.log")

    # ------------------------------------------------------------ lifecycle

    def start(self, timeout_s: float = 30.0) -> None:
        """Lock the data directory (DataDirInUse when another launcher holds it), stop what a
        dead launcher left behind, start every node and wait until the cluster is ready."""
        if self.lock is None:
            self.lock = DataDirLock(self.options.data_dir)
        self._stop_orphans()
        self.group.start_all()
        self.wait_ready(timeout_s)

    def _stop_orphans(self, grace_s: float = 5.0) -> None:
        """Nodes of a launcher that died (kill -9) stop by themselves within a second
        (--exit-with-parent); one that still holds its node lock after ``grace_s`` is stopped
        here, by the pid in its lock file (SIGTERM, then SIGKILL)."""
        import os

        locks = sorted(self.options.data_dir.glob("node-*.lock"))
        end = time.monotonic() + grace_s
        while any(holder_of(p) for p in locks) and time.monotonic() < end:
            time.sleep(0.1)
        for path in locks:
            pid = holder_of(path)
            if pid is None or pid <= 0:
                continue
            print(f"stopping pid {pid}, a node left running by an earlier launcher ({path.name})", file=sys.stderr)
            for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 2.0)):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
                end = time.monotonic() + wait
                while holder_of(path) and time.monotonic() < end:
                    time.sleep(0.1)
                if not holder_of(path):
                    break

    def ready(self) -> bool:
        for broker, port in sorted(self.layout.client_ports.items()):
            proc = self.process_of(broker)
            if proc is not None and (not proc.alive or proc.paused):
                continue
            try:
                brokers, topics = metadata_probe(self.layout.host_of(broker), port, 1.0)
            except (OSError, ValueError):
                return False
            live = [b for b in self.layout.client_ports if self._up(b)]
            internal = ("__consumer_offsets", "__transaction_state")
            return sorted(live) == brokers and all(
                name in topics and topics[name] and all(leader >= 0 for leader in topics[name])
                for name in internal)
        return False

    def _up(self, broker: int) -> bool:
        p = self.process_of(broker)
        return p is None or (p.alive and not p.paused)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        end = time.monotonic() + timeout_s
        while not self.ready():
            dead = [p.name for p in self.group.processes.values() if p.starts and not p.alive]
            if dead:
                raise ClusterNotReady(f"{', '.join(dead)} exited; see {self.log_dir}")
            if time.monotonic() > end:
                raise ClusterNotReady(f"the cluster did not become ready in {timeout_s:.0f} s; see {self.log_dir}")
            time.sleep(0.1)

    def stop(self) -> None:
        self.group.stop_all()
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def __enter__(self) -> ReferenceCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ process faults

    def process_of(self, broker: int) -> LocalProcess | None:
        """The process of a broker (None in single-process mode: faults hit the whole cluster)."""
        if self.single_process:
            return None
        return self.group.processes.get(f"broker-{broker}")

    def processes(self) -> dict[str, LocalProcess]:
        return self.group.processes

    def lose_unflushed(self, name: str) -> dict[str, int]:
        """After broker ``name`` was killed (kill -9): its files cut back to what it had
        flushed, as a power loss would leave them (reference.server.storage.lose_unflushed);
        the bytes cut per file."""
        from reference.server.storage import lose_unflushed

        proc = self.group.processes.get(name)
        if proc is None or proc.alive or not name.startswith("broker-"):
            raise RuntimeError(f"{name} is not a stopped broker: only a stopped broker's files can be cut")
        return lose_unflushed(self.options.data_dir / name)

    @property
    def pids(self) -> dict[str, int | None]:
        return {name: p.pid for name, p in self.group.processes.items()}


def describe_timings() -> str:
    return ", ".join(f"{k}={v}" for k, v in SERVER_TIMINGS.items())
