"""A served reference cluster: the controller and brokers on real sockets and real files.

Layout of the data directory::

    DIR/controller/metadata.log         the controller's metadata log
    DIR/broker-1/<topic>-<p>/...         broker 1's partition logs (segments, checkpoints)
    DIR/cluster.json                    ports and the cluster id, written at first start

Node ids are the engine's: the controller is node 0, brokers are 1..N (the ids clients
see). Broker ``i`` listens for Kafka clients on ``port + i - 1`` (or on a free port when
``port`` is 0). :class:`ServerProcess` hosts any subset of the nodes: all of them
(``--single-process``), or one each, with the others reached through
:mod:`reference.server.peers`.

Timings are shorter than Kafka's defaults (a broker is fenced 3 s after its last
heartbeat rather than 9 s) so that a conformance run sees failover within its budget; they
are listed in ``SERVER_TIMINGS`` and printed by ``kafkacheck serve``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from reference.broker import Broker, BrokerConfig
from reference.controller import Controller, ControllerConfig
from reference.errors import Errors
from reference.messages import CreateTopicsRequest
from reference.node import Event
from reference.server import apis, gateway
from reference.server.host import Host, now_ms
from reference.server.peers import LogOnce, Peers, client_base, load_or_create_secret
from reference.server.storage import FileStorage
from reference.topics import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TXN_TOPIC

log = logging.getLogger("kafkacheck.server")

CONTROLLER_ID = 0
CLUSTER_ID = "kafkacheck-reference"

SERVER_TIMINGS = {
    "replica_lag_time_max_ms": 5_000,
    "replica_fetch_wait_max_ms": 200,
    "replica_fetch_backoff_ms": 100,
    "replica_fetch_timeout_ms": 3_000,
    "heartbeat_interval_ms": 500,
    "registration_retry_ms": 500,
    "alter_partition_timeout_ms": 3_000,
    "high_watermark_checkpoint_interval_ms": 2_000,
    "session_timeout_ms": 3_000,
    "log_cleaner_backoff_ms": 2_000,
}


@dataclass
class ServerOptions:
    data_dir: Path
    brokers: int = 3
    port: int = 9092  # broker i listens on port + i - 1; 0: free ports
    host: str = "127.0.0.1"
    min_insync_replicas: int = 2
    default_replication_factor: int = 3
    default_partitions: int = 1
    unclean_leader_election: bool = False
    flush_ms: int | None = None
    flush_messages: int | None = None
    auto_create_topics: bool = True
    bugs: frozenset[str] = field(default_factory=frozenset)
    # advertise other ports than the listeners' (a fault proxy forwards each to its broker)
    proxied: bool = False
    max_connections: int = 1000  # client connections of one process; more are closed at once
    idle_timeout_s: float = 600.0  # Kafka's connections.max.idle.ms
    # the transaction.version feature ApiVersions finalizes (Kafka 4.x formats new clusters at
    # 2): clients that read it (Apache Kafka's Java client) speak KIP-890 part 2 at 2; the
    # coordinator follows each request's version either way
    transaction_version: int = 2
    # node id -> the address it binds and is reached at (every node in a network namespace of
    # its own: fault_injection/real/netns.py); None: every node on ``host``
    hosts: dict[int, str] | None = None
    # KIP-848's consumer groups: Kafka's group.consumer.session.timeout.ms and
    # group.consumer.heartbeat.interval.ms (defaults as Kafka's)
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    # KIP-932's share groups: group.share.record.lock.duration.ms and
    # group.share.delivery.count.limit (Kafka's defaults), and share.auto.offset.reset, a group
    # config in Kafka, for every share group here (docs/reference/deviations.md)
    share_record_lock_duration_ms: int = 30_000
    share_delivery_count_limit: int = 5
    share_auto_offset_reset: str = "latest"

    def broker_config(self) -> BrokerConfig:
        return BrokerConfig.from_timings(SERVER_TIMINGS, min_insync_replicas=self.min_insync_replicas,
                                         flush_ms=self.flush_ms, flush_messages=self.flush_messages,
                                         offsets_partitions=3, transaction_state_partitions=3,
                                         consumer_session_timeout_ms=self.consumer_session_timeout_ms,
                                         consumer_heartbeat_interval_ms=self.consumer_heartbeat_interval_ms,
                                         share_record_lock_duration_ms=self.share_record_lock_duration_ms,
                                         share_delivery_count_limit=self.share_delivery_count_limit,
                                         share_auto_offset_reset=self.share_auto_offset_reset)

    def controller_config(self) -> ControllerConfig:
        return ControllerConfig(session_timeout_ms=SERVER_TIMINGS["session_timeout_ms"],
                                unclean_leader_election_enable=self.unclean_leader_election,
                                min_insync_replicas=self.min_insync_replicas)

    def broker_configs(self) -> dict[str, str]:
        """What DescribeConfigs shows for a broker (Kafka's names)."""
        return {
            "min.insync.replicas": str(self.min_insync_replicas),
            "default.replication.factor": str(self.default_replication_factor),
            "num.partitions": str(self.default_partitions),
            "unclean.leader.election.enable": str(self.unclean_leader_election).lower(),
            "auto.create.topics.enable": str(self.auto_create_topics).lower(),
            "log.flush.interval.ms": str(self.flush_ms) if self.flush_ms is not None else "9223372036854775807",
            "log.flush.interval.messages": str(self.flush_messages)
            if self.flush_messages is not None else "9223372036854775807",
            "replica.lag.time.max.ms": str(SERVER_TIMINGS["replica_lag_time_max_ms"]),
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.num.partitions": "3",
            "group.share.record.lock.duration.ms": str(self.share_record_lock_duration_ms),
            "group.share.delivery.count.limit": str(self.share_delivery_count_limit),
            "group.consumer.session.timeout.ms": str(self.consumer_session_timeout_ms),
            "group.consumer.heartbeat.interval.ms": str(self.consumer_heartbeat_interval_ms),
        }


class DataDirInUse(RuntimeError):
    pass


class _FileLock:
    """An exclusive ``flock`` on ``path`` for this process's lifetime, with the holder's pid in
    the file (for the message another process gets). The kernel drops it when the holder
    dies, however it dies."""

    def __init__(self, path: Path, what: str) -> None:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(self.fd)
            raise DataDirInUse(f"{what} is in use by another process (pid {holder})") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class DataDirLock(_FileLock):
    """The launcher's lock: one ``kafkacheck serve`` (or conform) per data directory."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__(data_dir / "serve.lock", f"the data directory {data_dir}")


class NodeLock(_FileLock):
    """A node process's lock on its nodes' part of the data directory."""

    def __init__(self, data_dir: Path, nodes: list[int]) -> None:
        super().__init__(data_dir / f"node-{'-'.join(map(str, sorted(nodes)))}.lock",
                         f"node {','.join(map(str, sorted(nodes)))} of {data_dir}")


def holder_of(path: Path) -> int | None:
    """The pid that holds the flock on ``path``, or None when nobody does."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        return int(text) if text.isdigit() else -1
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


class ClusterLayout:
    """Ports of every node, fixed at the first start and kept in ``cluster.json`` so that a
    restarted process listens where clients and peers expect it."""

    def __init__(self, options: ServerOptions) -> None:
        self.path = options.data_dir / "cluster.json"
        self.client_ports: dict[int, int] = {}
        self.peer_ports: dict[int, int] = {}
        self.advertised_ports: dict[int, int] = {}  # what Metadata tells clients
        self.hosts: dict[int, str] = {}  # node id -> its address (all options.host if empty)
        self.advertised_hosts: dict[int, str] = {}  # broker id -> the address Metadata gives
        self.default_host = options.host

    def host_of(self, node: int) -> str:
        return self.hosts.get(node, self.default_host)

    def advertised_host(self, broker: int) -> str:
        return self.advertised_hosts.get(broker, self.host_of(broker))

    @classmethod
    def load_or_create(cls, options: ServerOptions) -> ClusterLayout:
        layout = cls(options)
        options.data_dir.mkdir(parents=True, exist_ok=True)
        if layout.path.exists():
            d = json.loads(layout.path.read_text())
            if d.get("brokers") != options.brokers:
                raise ValueError(f"{options.data_dir} holds a cluster of {d.get('brokers')} brokers, "
                                 f"not {options.brokers}")
            layout.client_ports = {int(k): v for k, v in d["client_ports"].items()}
            layout.peer_ports = {int(k): v for k, v in d["peer_ports"].items()}
            layout.advertised_ports = {int(k): v for k, v in d.get("advertised_ports", d["client_ports"]).items()}
            if options.port and layout.client_ports.get(1) != options.port:
                raise ValueError(f"{options.data_dir} was served on port {layout.client_ports.get(1)}, "
                                 f"not {options.port}")
            layout.hosts = {int(k): v for k, v in d.get("hosts", {}).items()}
            layout.advertised_hosts = {int(k): v for k, v in d.get("advertised_hosts", {}).items()}
            if options.hosts is not None and options.hosts != layout.hosts:
                # a new run's namespaces have new addresses; the ports stay
                layout._set_hosts(options)
                layout.save(options.brokers)
            return layout
        ports = free_ports(3 * options.brokers + 1, options.host)
        for b in range(1, options.brokers + 1):
            layout.client_ports[b] = options.port + b - 1 if options.port else ports.pop()
            layout.advertised_ports[b] = ports.pop() if options.proxied else layout.client_ports[b]
        for n in range(0, options.brokers + 1):
            layout.peer_ports[n] = ports.pop()
        layout._set_hosts(options)
        layout.save(options.brokers)
        load_or_create_secret(options.data_dir)  # before any node process starts
        return layout

    def _set_hosts(self, options: ServerOptions) -> None:
        self.hosts = dict(options.hosts or {})
        # behind fault proxies (on the host's loopback) clients are told the proxies' address
        self.advertised_hosts = {b: options.host for b in self.client_ports} if options.proxied and self.hosts \
            else {}

    def save(self, brokers: int) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"cluster_id": CLUSTER_ID, "brokers": brokers,
                                   "client_ports": self.client_ports,
                                   "advertised_ports": self.advertised_ports,
                                   "peer_ports": self.peer_ports,
                                   "hosts": self.hosts, "advertised_hosts": self.advertised_hosts}, indent=2))
        os.replace(tmp, self.path)

    def bootstrap(self, host: str | None = None) -> str:
        """The advertised addresses of the brokers (``host`` for all of them, if given)."""
        return ",".join(f"{host or self.advertised_host(b)}:{p}" for b, p in sorted(self.advertised_ports.items()))


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    import socket
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


class ServerProcess:
    """The nodes of one process: ``nodes`` is a subset of 0 (controller) and 1..N."""

    def __init__(self, options: ServerOptions, layout: ClusterLayout, nodes: list[int]) -> None:
        self.options = options
        self.layout = layout
        self.node_ids = nodes
        self.host: Host | None = None
        self.servers: list[asyncio.AbstractServer] = []
        self.peers: Peers | None = None
        self.storages: list[FileStorage] = []
        self.connections: dict[asyncio.Task, gateway.Connection] = {}
        self.setup_task: asyncio.Task | None = None
        self.once = LogOnce()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(self._loop_error)
        self.host = host = Host(loop)
        host._next_client = client_base(min(self.node_ids))
        host.on_event = self._on_event
        o = self.options
        everything = set(range(0, o.brokers + 1))
        if set(self.node_ids) != everything:
            lay = self.layout
            remote = {n: (lay.host_of(n), lay.peer_ports[n]) for n in everything - set(self.node_ids)}
            self.peers = Peers(remote, host.deliver, load_or_create_secret(o.data_dir))
            await self.peers.listen(lay.host_of(min(self.node_ids)), lay.peer_ports[min(self.node_ids)])
            host.remote = self.peers.send
        info = gateway.ClusterInfo(
            cluster_id=CLUSTER_ID, controller_id=CONTROLLER_ID,
            endpoints={b: (self.layout.advertised_host(b), p) for b, p in self.layout.advertised_ports.items()},
            default_partitions=o.default_partitions,
            default_replication_factor=o.default_replication_factor,
            auto_create_topics=o.auto_create_topics, broker_configs=o.broker_configs(),
            idle_timeout_s=o.idle_timeout_s, request_timeout_s=min(30.0, o.idle_timeout_s),
            transaction_version=o.transaction_version)
        incarnation = now_ms()
        for n in sorted(self.node_ids):
            if n == CONTROLLER_ID:
                storage = FileStorage(o.data_dir / "controller", track_flushes=False)
                node = Controller(CONTROLLER_ID, storage, o.controller_config(), o.bugs)
            else:
                storage = FileStorage(o.data_dir / f"broker-{n}")
                # appends are written through to the operating system before they are
                # acknowledged, so a killed process loses none of them; a power loss (what
                # storage.lose_unflushed leaves behind) loses what was not flushed
                # (--flush-ms bounds that), and the broker tells the controller so
                node = Broker(n, storage, o.broker_config(), CONTROLLER_ID, incarnation, o.bugs,
                              storage_intact=not storage.lost_power)
            self.storages.append(storage)
            host.add(node)
            if n != CONTROLLER_ID:
                server = await asyncio.start_server(
                    lambda r, w, node=node: self._serve(info, node, r, w),
                    self.layout.host_of(n), self.layout.client_ports[n], reuse_address=True)
                self.servers.append(server)
        if CONTROLLER_ID in self.node_ids:
            self.setup_task = loop.create_task(self._create_internal_topics())

    async def _serve(self, info: gateway.ClusterInfo, broker: Broker, reader, writer) -> None:
        """Serve one client connection. At --max-connections, the least recently active idle
        connection is closed to admit the new one (Kafka closes idle connections too, and an
        attacker holding idle sockets must not lock working clients out); when every one is busy
        the new one is closed instead. Either is logged once a minute."""
        assert self.host is not None
        if len(self.connections) >= self.options.max_connections:
            idle = [c for c in self.connections.values() if c.idle()]
            if not idle:
                self.once.warning("max-connections", "refused a connection from %s: %d connections open, "
                                  "none idle (the limit, --max-connections)", writer.get_extra_info("peername"),
                                  len(self.connections))
                writer.close()
                return
            victim = min(idle, key=lambda c: c.last_active)
            self.once.warning("max-connections-evict", "%d connections open (the limit, --max-connections): "
                              "closing the least recently active idle one (%s) to admit %s",
                              len(self.connections), victim.peer, writer.get_extra_info("peername"))
            victim.evict()
        conn = gateway.Connection(self.host, info, broker, reader, writer, apis.HANDLERS)
        task = asyncio.current_task()
        if task is not None:
            self.connections[task] = conn
            task.add_done_callback(lambda t: self.connections.pop(t, None))
        with contextlib.suppress(asyncio.CancelledError):  # the server is stopping
            await conn.serve()

    def _loop_error(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        """asyncio's own trouble (an accept that failed: too many open files...), logged once
        a minute by kind instead of a traceback each time."""
        e = context.get("exception")
        kind = type(e).__name__ if e is not None else context.get("message", "error")
        self.once.warning(f"loop-{kind}", "%s: %s", context.get("message", "event loop error"), e or "")

    def _on_event(self, node_id: int, event: Event) -> None:
        if event.kind in ("recover", "broker-registered", "broker-fenced", "leader-elected",
                          "topic-deleted", "partition-deleted", "storage-error"):
            log.info("node %d: %s %s", node_id, event.kind, json.dumps(event.fields, default=str))
        elif event.kind == "txn-markers-skipped":  # the bug switch txn-markers-skip-offline at work, as Kafka logs it
            log.warning("node %d: %s %s", node_id, event.kind, json.dumps(event.fields, default=str))

    async def _create_internal_topics(self) -> None:
        """Kafka creates ``__consumer_offsets``, ``__transaction_state`` and
        ``__share_group_state`` on first use; the reference cluster creates them once enough
        brokers are up."""
        assert self.host is not None
        host = self.host
        o = self.options
        rf = min(3, o.brokers)
        pending = {OFFSETS_TOPIC, TXN_TOPIC, SHARE_STATE_TOPIC}
        answers: asyncio.Queue = asyncio.Queue()
        me = host.register_client(lambda src, msg: answers.put_nowait(msg))
        corr = 0
        while pending:
            for name in sorted(pending):
                corr += 1
                host.deliver(me, CONTROLLER_ID, CreateTopicsRequest(corr, name, 3, rf))
            with contextlib.suppress(TimeoutError):
                while True:
                    msg = await asyncio.wait_for(answers.get(), 0.5)
                    if msg.error in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
                        pending.discard(msg.name)
        host.unregister_client(me)

    async def stop(self) -> None:
        if self.setup_task is not None:
            self.setup_task.cancel()
        for s in self.servers:
            s.close()
        for t in list(self.connections):
            t.cancel()
        await asyncio.gather(*self.connections, return_exceptions=True)
        if self.peers is not None:
            await self.peers.close()
        for s in self.servers:
            with contextlib.suppress(Exception):
                await s.wait_closed()
        if self.host is not None:
            for node in list(self.host.nodes.values()):
                if isinstance(node, Broker):
                    clean = True
                    for p in node.partitions.values():
                        try:
                            p.log.checkpoint()
                            p.log.flush(force=True)  # as Kafka's clean shutdown
                        except Exception:
                            clean = False
                    if clean and isinstance(node.storage, FileStorage):
                        node.storage.mark_clean()
            self.host.nodes.clear()
        for s in self.storages:
            s.close()


class InThreadCluster:
    """A whole cluster in one background thread of this process (tests, benchmarks)::

        with InThreadCluster(ServerOptions(data_dir=d, port=0)) as cluster:
            KafkaProducer(bootstrap_servers=cluster.bootstrap)
    """

    def __init__(self, options: ServerOptions, ready_timeout_s: float = 20.0) -> None:
        self.options = options
        self.layout = ClusterLayout.load_or_create(options)
        self.bootstrap = self.layout.bootstrap()
        self.process = ServerProcess(options, self.layout, list(range(0, options.brokers + 1)))
        self.ready_timeout_s = ready_timeout_s
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread = None

    def __enter__(self) -> InThreadCluster:
        import threading
        self.loop = asyncio.new_event_loop()
        started = threading.Event()

        def run() -> None:
            assert self.loop is not None
            asyncio.set_event_loop(self.loop)
            self.loop.run_until_complete(self.process.start())
            started.set()
            self.loop.run_forever()
            self.loop.run_until_complete(self.process.stop())
            self.loop.close()

        self._thread = threading.Thread(target=run, name="kafkacheck-server", daemon=True)
        self._thread.start()
        if not started.wait(self.ready_timeout_s):
            raise TimeoutError("the reference cluster did not start")
        self.wait_ready()
        return self

    def ready(self) -> bool:
        """Every broker registered and the internal topics have leaders."""
        host = self.process.host
        if host is None:
            return False
        brokers = [n for n in host.nodes.values() if isinstance(n, Broker)]
        if not brokers or any(b.broker_epoch < 0 for b in brokers):
            return False
        image = brokers[0].metadata
        topics = {s.tp.topic for s in image.partitions if s.leader >= 0}
        return {OFFSETS_TOPIC, TXN_TOPIC, SHARE_STATE_TOPIC} <= topics and len(image.live_brokers) == len(brokers)

    def wait_ready(self) -> None:
        import time
        end = time.monotonic() + self.ready_timeout_s
        while not self.ready():
            if time.monotonic() > end:
                raise TimeoutError("the reference cluster did not become ready")
            time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self.loop is not None and self._thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(30)
