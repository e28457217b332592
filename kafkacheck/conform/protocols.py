"""What a conform run's protocols ask of the client and of the broker, checked before
anything runs (the client's side) and once the broker answers (the broker's side): KIP-848's
consumer groups (``--group-protocol consumer``) and KIP-932's share groups (``--workload
share``). Each refusal is a UsageError: one line, exit 3. The command checks the client's side
as it builds the options (:mod:`kafkacheck.commands.conform`), the run the broker's
(:mod:`kafkacheck.conform.suite`)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kafkacheck.exits import UsageError
from kafkacheck.workloads import RUN_GROUP_WORKLOADS, group_options_conflict

if TYPE_CHECKING:
    from kafkacheck.conform.options import ConformOptions

# the first librdkafka whose KIP-848 consumer is production-ready (its CHANGELOG: 2.12.0)
LIBRDKAFKA_CONSUMER_PROTOCOL = (2, 12)


def check_group_protocol(options: ConformOptions) -> None:
    """--group-protocol consumer: a workload whose members join a group (eos's processors join
    one when it is given), a client that speaks KIP-848 (the broker's side is asked once it
    answers: :func:`check_broker_protocol`)."""
    if options.group_protocol != "consumer":
        return
    if (why := group_options_conflict(options.workload, options.group_protocol, "range", RUN_GROUP_WORKLOADS)) is not None:
        raise UsageError(why)
    if options.client == "kafka-python":
        raise UsageError("--group-protocol consumer needs a client that speaks KIP-848's protocol: --client java or "
                         "confluent (kafka-python has only the classic one)")
    if options.client == "confluent":
        try:
            import confluent_kafka
        except ImportError:
            return  # said when the client is made
        version = confluent_kafka.libversion()[0]
        if tuple(int(x) for x in re.findall(r"\d+", version)[:2]) < LIBRDKAFKA_CONSUMER_PROTOCOL:
            raise UsageError(f"--group-protocol consumer with --client confluent needs librdkafka 2.12 or later "
                             f"(its KIP-848 consumer before that is a preview); this confluent-kafka has {version}")


def check_share(options: ConformOptions, versions: list[str]) -> None:
    """--workload share: a client with a share consumer (KIP-932), of a version that has one
    (the broker's side is asked once it answers: :func:`check_broker_share`)."""
    if options.workload == "share-committed":
        raise UsageError("--workload share-committed runs in the simulator only (kafkacheck run --workload "
                         "share-committed); with real clients: --workload share")
    if options.workload != "share":
        return
    if options.client == "kafka-python":
        raise UsageError("--workload share needs a client with a share consumer (KIP-932): --client java or "
                         "confluent (kafka-python has none)")
    old = [v for v in versions if tuple(int(x) for x in v.split(".")[:2]) < (4, 1)]
    if options.client == "java" and old:
        raise UsageError(f"--workload share with --client java needs Kafka 4.1 or later, whose KafkaShareConsumer "
                         f"speaks the share protocol of 4.1+ brokers; not {', '.join(old)}")


def check_broker_share(options: ConformOptions, target) -> None:
    """--workload share against a broker without share groups: it does not advertise
    ShareGroupHeartbeat, or has not finalized share.version 1 (Kafka 4.1 formats at 0)."""
    from kafkacheck.conform.targets import share_groups_off

    if options.workload != "share":
        return
    host, port = target.first()
    why = share_groups_off(host, port, target.apis, min(options.timeout, 5.0))
    if why is not None:
        raise UsageError(f"--workload share: the broker at {host}:{port} {why}")


def check_broker_protocol(options: ConformOptions, target) -> None:
    """--group-protocol consumer against a broker without KIP-848's consumer groups: its
    ApiVersions lacks ConsumerGroupHeartbeat, or it answers one UNSUPPORTED_VERSION."""
    from kafkacheck.conform.targets import CONSUMER_GROUP_HEARTBEAT, consumer_protocol_off

    if options.group_protocol != "consumer":
        return
    host, port = target.first()
    if CONSUMER_GROUP_HEARTBEAT not in target.apis:
        raise UsageError(f"--group-protocol consumer: the broker at {host}:{port} does not advertise "
                         f"ConsumerGroupHeartbeat (API {CONSUMER_GROUP_HEARTBEAT}) in its ApiVersions, so it has no "
                         "KIP-848 consumer groups: use --group-protocol classic")
    if consumer_protocol_off(host, port, min(options.timeout, 5.0)):
        raise UsageError(f"--group-protocol consumer: the broker at {host}:{port} advertises ConsumerGroupHeartbeat "
                         "but answers it UNSUPPORTED_VERSION: its KIP-848 consumer groups are off (Apache Kafka "
                         "before 4.0: --broker-config group.coordinator.rebalance.protocols=classic,consumer); "
                         "or use --group-protocol classic")
