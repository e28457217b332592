"""KAFKA-20734 reproduced with Kafka's own tools and one client: a transaction committed while one
of its partitions has no leader stays open there forever (Apache Kafka 4.3.0 to 4.4.0).

    python benchmarks/kafka20734_repro.py [--version 4.4.0 | --kafka-home DIR] [--work DIR]

Each step prints the ``bin/*.sh`` command a maintainer would type (``localhost:9092``), the one it
ran (the script's main class with ``java -cp``, as ``bin/kafka-run-class.sh`` runs it) and what it
showed: three KRaft nodes (broker+controller, static quorum; kafkacheck's KafkaCluster writes
server.properties, formats and starts them as ``kafka-storage.sh`` and ``kafka-server-start.sh``
do); topic ``out`` by ``kafka-topics.sh --replica-assignment 1,2`` (out-0 on node 1, out-1 on node
2); a kafka-python transaction (tx1, else tx2 or tx3: an id whose coordinator is not node 2) writes
``a0`` to out-0 and ``a1`` to out-1; ``kill -9`` of node 2 until out-1 has no leader;
``commit_transaction()``; node 2 restarted; out-1's last stable offset (LSO) and high watermark
(HW) for 20 s, read_committed reads; the coordinator's log line; ``kafka-transactions.sh
describe``, ``describe-producers``, ``find-hanging``; when out-1 hangs, ``abort`` and the reads
again. Tools jars (kafka-tools and its dependencies): ``mvn dependency:copy-dependencies`` into
``~/.cache/kafkacheck/kafka-tools-VERSION/libs`` (or the distribution's ``libs/``). Every node is
stopped at the end, on errors, Ctrl-C and SIGTERM; the work directory (node logs) stays.

Ends with ``AFFECTED`` (out-1's transaction stayed open) or ``NOT AFFECTED`` (both records became
readable read_committed): exit 0 either way, 2 when a step failed, 3 for bad input (one line),
130 when interrupted.
"""

from __future__ import annotations

import argparse
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kafkacheck.real import kafka_dist as kd

TOPIC = "out"
TXN_IDS = ("tx1", "tx2", "tx3")  # hash to __transaction_state-0, -1, -2 (3 partitions)
BIN_BOOTSTRAP = "localhost:9092"
LOG_LINE = "Couldn't find leader endpoint for partitions"
SETTLE_S = 20.0  # how long out-1 may take to become stable once node 2 is back
TOOLS = {"kafka-topics.sh": "org.apache.kafka.tools.TopicCommand",
         "kafka-get-offsets.sh": "org.apache.kafka.tools.GetOffsetShell",
         "kafka-transactions.sh": "org.apache.kafka.tools.TransactionsCommand"}
TOOLS_JAR = re.compile(r"kafka-tools-\d[\w.-]*\.jar")
# what bin/kafka-topics.sh and the other tools run: kafka-tools and a log4j 2 binding for its SLF4J 1.7
TOOLS_POM = ('<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion><groupId>kafkacheck'
             '</groupId><artifactId>kafka-tools-runtime</artifactId><version>{v}</version><packaging>pom</packaging>'
             '<dependencies>{deps}</dependencies></project>')
DEPENDENCY = "<dependency><groupId>{}</groupId><artifactId>{}</artifactId><version>{}</version></dependency>"


class BadInput(Exception):
    """A usage error: one line, exit 3."""


class StepFailed(Exception):
    """A step did not do what it should: exit 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise BadInput(message)  # one line and exit 3, not argparse's usage and exit 2


def parse(argv: list[str]) -> argparse.Namespace:
    p = Parser(prog="kafka20734_repro.py", description="Reproduce KAFKA-20734 with Kafka's own tools.")
    p.add_argument("--version", help="Apache Kafka release from Maven Central (default 4.4.0)")
    p.add_argument("--kafka-home", help="a Kafka distribution (DIR/libs/*.jar) instead of --version")
    p.add_argument("--work", help="directory for the nodes' data and logs (default: a new temporary one)")
    args = p.parse_args(argv)
    if args.version and args.kafka_home:
        raise BadInput("--version and --kafka-home: give one of them")
    try:
        home, version = args.kafka_home, args.version or "4.4.0"
        args.dist = kd.open_home(home) if home else kd.KafkaDist(kd.check_version(version))
    except (ValueError, kd.NotKafka) as e:
        raise BadInput(str(e).replace("--kafka-version", "--version")) from None
    if isinstance(args.dist, kd.KafkaHome) and not any(TOOLS_JAR.fullmatch(j.name) for j in args.dist.jars):
        raise BadInput(f"--kafka-home {args.dist.home} has no kafka-tools jar (a binary distribution has it in libs/)")
    return args


# ---------------------------------------------------------------- Kafka's tools

def fetch_tools(version: str) -> Path:
    """kafka-tools VERSION and its runtime dependencies in the cache (mvn, once)."""
    libs = kd.cache_root() / f"kafka-tools-{version}" / "libs"
    if (libs / f"kafka-tools-{version}.jar").exists():
        return libs
    mvn = kd.need_tool("mvn", "it fetches Kafka's tools from Maven Central")
    libs.parent.parent.mkdir(parents=True, exist_ok=True)
    print(f"fetching org.apache.kafka:kafka-tools:{version} into {libs.parent} (once)", flush=True)
    with tempfile.TemporaryDirectory(prefix=f".kafka-tools-{version}-", dir=libs.parent.parent) as tmp:
        deps = [("org.apache.kafka", "kafka-tools", version),
                *(("org.apache.logging.log4j", a, kd.LOG4J_VERSION) for a in ("log4j-slf4j-impl", "log4j-core"))]
        (Path(tmp) / "pom.xml").write_text(TOOLS_POM.format(v=version, deps="".join(DEPENDENCY.format(*d) for d in deps)))
        done = subprocess.run([mvn, "-q", "-B", "-f", f"{tmp}/pom.xml", "dependency:copy-dependencies",
                               f"-DoutputDirectory={tmp}/libs", "-DincludeScope=runtime"], capture_output=True,
                              text=True, timeout=kd.FETCH_TIMEOUT_S, stdin=subprocess.DEVNULL)
        if done.returncode != 0 and kd.maven_missing(done.stdout + done.stderr, "org.apache.kafka:kafka-tools"):
            raise kd.KafkaVersionUnknown(f"org.apache.kafka:kafka-tools:{version} is not on Maven Central")
        if done.returncode != 0:
            raise kd.KafkaUnavailable(f"could not fetch kafka-tools {version}: {kd.mvn_error(done.stdout + done.stderr)}")
        libs.parent.mkdir(exist_ok=True)
        if not libs.exists():  # (another run may have fetched them meanwhile)
            Path(tmp, "libs").rename(libs)
    return libs


class Tools:
    """Kafka's command-line tools, run as bin/kafka-run-class.sh runs them."""

    def __init__(self, dist, work: Path, bootstrap: str) -> None:
        if isinstance(dist, kd.KafkaHome):
            self.classpath, logging = dist.classpath(), dist.logging
        else:
            self.classpath, logging = str(fetch_tools(dist.version) / "*"), "log4j2"
        # as config/tools-log4j2.yaml: warnings and errors to stderr
        self.java = [dist.java(), "-Xmx256M", *kd.write_log_config(logging, work, "WARN", stderr=True, stem="tools-")]
        self.bootstrap = bootstrap

    def run(self, script: str, *args: str) -> str:
        main = TOOLS[script]
        print(f"$ {shlex.join([f'bin/{script}', '--bootstrap-server', BIN_BOOTSTRAP, *args])}")
        short_cp = self.classpath if len(self.classpath) < 100 else self.classpath[:60] + "..."
        print(f"  ran: java -cp {short_cp} {main} --bootstrap-server {self.bootstrap} {shlex.join(args)}")
        done = subprocess.run([*self.java, "-cp", self.classpath, main, "--bootstrap-server", self.bootstrap, *args],
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        show(done.stdout + done.stderr or f"(no output; exit {done.returncode})")
        if done.returncode != 0:
            raise StepFailed(f"{script} {args[0]} exited with {done.returncode}")
        return done.stdout


def show(text: str) -> None:
    for line in text.rstrip().splitlines():
        print(f"  | {line.rstrip()}")
    sys.stdout.flush()


def step(n: int, what: str) -> None:
    print(f"\n== {n}. {what}", flush=True)


# ---------------------------------------------------------------- the client (kafka-python)

def look(bootstrap: str, partition: int, level: str, values: bool = True) -> tuple[int, list[str]]:
    """out-PARTITION's end offset at isolation ``level`` (read_committed: the LSO; read_uncommitted:
    the HW) and, with ``values``, its values from the start."""
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(TOPIC, partition)
    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=level, consumer_timeout_ms=3000,
                      enable_auto_commit=False, request_timeout_ms=10000)
    try:
        end = c.end_offsets([tp])[tp]
        c.assign([tp])
        c.seek_to_beginning(tp)
        return end, [m.value.decode() for m in c] if values else []
    finally:
        c.close()


def offsets(bootstrap: str, partition: int) -> tuple[int, int]:
    """(last stable offset, high watermark) of out-PARTITION."""
    return look(bootstrap, partition, "read_committed", False)[0], look(bootstrap, partition, "read_uncommitted", False)[0]


def show_partitions(bootstrap: str) -> dict[int, tuple[int, int, list[str]]]:
    """Each partition's LSO, HW and read_committed values, printed."""
    seen = {}
    for p in (0, 1):
        (lso, committed), (hw, uncommitted) = (look(bootstrap, p, x) for x in ("read_committed", "read_uncommitted"))
        seen[p] = (lso, hw, committed)
        print(f"  client: out-{p} last stable offset {lso}, high watermark {hw}; read_committed {committed}, "
              f"read_uncommitted {uncommitted}")
    return seen


def wait_until(what: str, test, timeout_s: float, interval_s: float = 0.5):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        got = test()
        if got:
            return got
        time.sleep(interval_s)
    raise StepFailed(f"{what} did not happen in {timeout_s:.0f} s")


# ---------------------------------------------------------------- the steps

def start_cluster(cluster) -> None:
    step(1, f"three KRaft nodes (broker+controller, static quorum) of {cluster.dist.label}")
    print("\n".join(f"$ bin/kafka-storage.sh format -t {cluster.cluster_id} -c {n.name}/server.properties"
                    for n in cluster.nodes))
    print("\n".join(f"$ bin/kafka-server-start.sh {n.name}/server.properties" for n in cluster.nodes))
    t0 = time.monotonic()
    cluster.start()
    node = cluster.nodes[0]
    print(f"  ran: {shlex.join(node.process.argv[:3])} ... -cp {cluster.dist.classpath()} kafka.Kafka "
          f"{node.directory}/server.properties (likewise kafka-2, kafka-3)")
    print(f"  {node.name}/server.properties:")
    show((node.directory / "server.properties").read_text())
    print(f"  -> every node ready in {time.monotonic() - t0:.1f} s (bootstrap {cluster.bootstrap})")


def create_topic(tools: Tools) -> None:
    step(2, "topic out: partition 0 on node 1, partition 1 on node 2, one replica each")
    tools.run("kafka-topics.sh", "--create", "--topic", TOPIC, "--replica-assignment", "1,2")
    time.sleep(1)
    tools.run("kafka-topics.sh", "--describe", "--topic", TOPIC)


def probe(cluster, request, response_class):
    """One request to node 1 (which stays up) on a connection of its own; None when it fails."""
    from reference.server.protocol import round_trip

    try:
        return round_trip(cluster.nodes[0].host, cluster.nodes[0].client_port, request, response_class,
                          "kafka20734-repro", 2.0)
    except (OSError, ValueError):
        return None


def coordinator_of(cluster, txn_id: str) -> int | None:
    """The node FindCoordinator names for ``txn_id`` (None while there is none)."""
    from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

    resp = probe(cluster, FindCoordinatorRequest[1](key=txn_id, key_type=1), FindCoordinatorResponse)
    return resp.node_id if resp is not None and resp.error_code == 0 else None


def leader_of(cluster, partition: int) -> int | None:
    """out-PARTITION's leader as node 1's metadata says (-1: none)."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    resp = probe(cluster, MetadataRequest[1](topics=[TOPIC]), MetadataResponse)
    return next((p.leader_id for t in (resp.topics if resp else []) if t.name == TOPIC for p in t.partitions
                 if p.partition_index == partition), None)


def choose_txn_id(cluster) -> str:
    """A transactional id whose coordinator is not node 2: killing the coordinator too is another
    scenario (the transaction moves to a new coordinator, and kafka-python's commit may never reach it)."""
    for txn_id in TXN_IDS:
        node = wait_until(f"a coordinator for {txn_id}", lambda t=txn_id: coordinator_of(cluster, t), 60)
        print(f"  FindCoordinator({txn_id}): node {node}" + (" (node 2 is killed below: next id)" if node == 2 else ""))
        if node != 2:
            return txn_id
    raise StepFailed(f"node 2 coordinates every transactional id of {TXN_IDS}")


def open_transaction(cluster):
    from kafka import KafkaProducer
    from kafka.version import __version__

    step(3, f"kafka-python {__version__}: a transaction writes out-0 and out-1 (its coordinator stays up)")
    txn_id = choose_txn_id(cluster)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=txn_id, acks="all",
                             enable_idempotence=True)
    producer.init_transactions()
    producer.begin_transaction()
    for p in (0, 1):
        meta = producer.send(TOPIC, f"a{p}".encode(), partition=p).get(30)
        print(f"  client: {txn_id}: send a{p} to out-{p}: acknowledged at offset {meta.offset}")
    return producer, txn_id


def make_leaderless(cluster, tools: Tools) -> None:
    node = cluster.nodes[1]
    step(4, f"kill -9 node 2 (pid {node.process.pid}); wait until out-1 has no leader")
    print(f"$ kill -9 {node.process.pid}")
    t0 = time.monotonic()
    node.process.kill()
    wait_until("out-1 leaderless", lambda: leader_of(cluster, 1) == -1, 60)
    print(f"  -> out-1 has no leader {time.monotonic() - t0:.1f} s after the kill")
    tools.run("kafka-topics.sh", "--describe", "--topic", TOPIC)


def commit(producer) -> None:
    step(5, "commit_transaction() while out-1 has no leader")
    t0, result = time.monotonic(), []

    def run():
        try:
            result.append(producer.commit_transaction())
        except Exception as e:
            result.append(e)

    thread = threading.Thread(target=run, name="repro-commit", daemon=True)  # a stuck client is a failed step
    thread.start()
    thread.join(60)
    if not result or isinstance(result[0], Exception):
        raise StepFailed(f"commit_transaction() {'failed: ' + repr(result[0]) if result else 'did not return in 60 s'}")
    print(f"  client: commit_transaction() acknowledged in {time.monotonic() - t0:.1f} s")


def restart_node(cluster) -> None:
    node = cluster.nodes[1]
    step(6, "restart node 2 and wait until it is ready and leads out-1 again")
    print(f"$ bin/kafka-server-start.sh {node.name}/server.properties")
    t0 = time.monotonic()
    node.process.start()
    cluster.wait_ready(120)
    wait_until("node 2 leading out-1", lambda: leader_of(cluster, 1) == 2, 60)
    print(f"  -> node 2 ready and leader of out-1 in {time.monotonic() - t0:.1f} s")


def outcome(tools: Tools, bootstrap: str) -> dict:
    step(7, f"out-1 after node 2's return (watched up to {SETTLE_S:.0f} s for LSO = HW)")
    t0 = time.monotonic()
    while time.monotonic() - t0 < SETTLE_S:
        lso, hw = offsets(bootstrap, 1)
        if lso == hw:
            break
        time.sleep(1)
    print(f"  client: out-1 LSO {lso}, HW {hw} after {time.monotonic() - t0:.1f} s")
    tools.run("kafka-get-offsets.sh", "--topic", TOPIC, "--time", "-1")
    return show_partitions(bootstrap)


def coordinator_log(cluster) -> list[str]:
    step(8, "the transaction coordinator's log")
    lines = [f"{n.name}.log: {line.strip()}" for n in cluster.nodes
             for line in (cluster.work_dir / f"{n.name}.log").read_text(errors="replace").splitlines()
             if LOG_LINE in line]
    print(f"$ grep \"{LOG_LINE}\" logs/server.log  (each node's)")
    show("\n".join(lines) or "(no node logged it)")
    return lines


def transaction_tools(tools: Tools, txn_id: str) -> str:
    step(9, "Kafka's transaction tools: the coordinator's view, the partition's, find-hanging")
    tools.run("kafka-transactions.sh", "describe", "--transactional-id", txn_id)
    tools.run("kafka-transactions.sh", "describe-producers", "--topic", TOPIC, "--partition", "1")
    return tools.run("kafka-transactions.sh", "find-hanging", "--broker-id", "2", "--max-transaction-timeout", "0")


def abort(tools: Tools, bootstrap: str, start_offset: int) -> dict:
    step(10, f"abort the hanging transaction at out-1 (start offset {start_offset}), then read again")
    tools.run("kafka-transactions.sh", "abort", "--topic", TOPIC, "--partition", "1", "--start-offset",
              str(start_offset))
    wait_until("out-1 stable after the abort", lambda: len(set(offsets(bootstrap, 1))) == 1, 30)
    tools.run("kafka-get-offsets.sh", "--topic", TOPIC, "--time", "-1")
    return show_partitions(bootstrap)


# ---------------------------------------------------------------- the run

def verdict(seen: dict, log_lines: list[str], hanging: str, after: dict | None) -> str:
    rc0, (lso1, hw1, rc1) = seen[0][2], seen[1]
    if lso1 == hw1 and rc0 == ["a0"] and rc1 == ["a1"]:
        return "NOT AFFECTED: the commit reached both partitions once out-1 had a leader again: a0 and a1 " \
               "are read_committed, LSO = HW at both"
    if after is None or lso1 >= hw1 or rc0 != ["a0"] or rc1:
        raise StepFailed(f"neither outcome: out-0 {seen[0]}, out-1 {seen[1]}")
    found = "find-hanging listed it" if re.search(rf"^{TOPIC}\s+1\s", hanging, re.M) else "find-hanging did NOT list it"
    return (f"AFFECTED: commit_transaction() was acknowledged, but out-1's transaction stayed open (LSO {lso1} < "
            f"HW {hw1} after {SETTLE_S:.0f} s; read_committed out-1 {rc1}, out-0 {rc0}); "
            f"{'the coordinator logged the skip' if log_lines else 'no node logged the skip'}; {found}; "
            f"kafka-transactions.sh abort then made out-1 stable (LSO {after[1][0]} = HW {after[1][1]}) by "
            f"aborting a1 (read_committed {after[1][2]}) while a0 stays committed: the commit was undone at out-1")


def reproduce(args) -> str:
    from kafkacheck.conform.apache_kafka import KafkaCluster

    work = Path(args.work or tempfile.mkdtemp(prefix="kafka20734-repro-")).resolve()
    print(f"KAFKA-20734 reproduction on {args.dist.label}; work directory {work}")
    args.dist.fetch(log=print)
    cluster = KafkaCluster(args.dist, work, 3)
    tools = Tools(args.dist, work, cluster.bootstrap)
    print(f"bin/*.sh lines say --bootstrap-server {BIN_BOOTSTRAP}; here it is {cluster.bootstrap}")
    producer = None
    try:
        start_cluster(cluster)
        create_topic(tools)
        producer, txn_id = open_transaction(cluster)
        make_leaderless(cluster, tools)
        commit(producer)
        restart_node(cluster)
        seen = outcome(tools, cluster.bootstrap)
        log_lines = coordinator_log(cluster)
        hanging = transaction_tools(tools, txn_id)
        after = abort(tools, cluster.bootstrap, seen[1][0]) if seen[1][0] < seen[1][1] else None
        return verdict(seen, log_lines, hanging, after)
    finally:
        if producer is not None:
            producer.close(timeout=5)
        cluster.stop()
        print(f"\nstopped every node; logs in {work}")


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(sys.argv[1:] if argv is None else argv)
    except BadInput as e:
        print(f"kafka20734_repro.py: {e}", file=sys.stderr)
        return 3
    old = signal.signal(signal.SIGTERM, signal.default_int_handler)  # SIGTERM stops the nodes as Ctrl-C does
    try:
        print(f"\nRESULT: {reproduce(args)}")
        return 0
    except kd.KafkaVersionUnknown as e:
        print(f"kafka20734_repro.py: {e}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # a step that failed: say which, exit 2
        print(f"\nFAILED: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    finally:
        signal.signal(signal.SIGTERM, old)


if __name__ == "__main__":
    sys.exit(main())
