"""KIP-848 over the wire: ConsumerGroupHeartbeat, ConsumerGroupDescribe, OffsetCommit v9 and
OffsetFetch v9 against the served reference, request by request (kafka-python's codec with the
project's schemas), and librdkafka's consumer with ``group.protocol=consumer``."""

from __future__ import annotations

import itertools
import threading
import time

import pytest

from reference.errors import Errors
from reference.server import protocol
from reference.server.cluster import InThreadCluster, ServerOptions
from reference.server.kip848_messages import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

kafka = pytest.importorskip("kafka")

from kafka import KafkaAdminClient  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402
from kafka.protocol.consumer import OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse  # noqa: E402  # noqa: E402
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse  # noqa: E402

_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    options = ServerOptions(data_dir=tmp_path_factory.mktemp("ref"), brokers=1, port=0, min_insync_replicas=1,
                            default_replication_factor=1, consumer_heartbeat_interval_ms=300)
    with InThreadCluster(options) as c:
        yield c


def _topic(cluster, partitions: int) -> str:
    topic = f"cg-{next(_names)}"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20_000)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()
    return topic


def _send(cluster, request, response_class):
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    return protocol.round_trip(host, int(port), request, response_class, "kafkacheck-test", 20.0)


def _coordinated(cluster, group: str) -> None:
    """The group's coordinator is loaded (FindCoordinator answers once it is)."""
    end = time.monotonic() + 20
    while time.monotonic() < end:
        r = _send(cluster, FindCoordinatorRequest[3](key=group, key_type=0), FindCoordinatorResponse)
        if r.error_code == 0:
            return
        time.sleep(0.2)
    raise AssertionError(f"no coordinator for {group}")


def _heartbeat(cluster, group: str, member: str, epoch: int, **fields):
    return _send(cluster, ConsumerGroupHeartbeatRequest[1](group_id=group, member_id=member, member_epoch=epoch,
                                                          **fields), ConsumerGroupHeartbeatResponse)


def _join(cluster, group: str, member: str, topic: str):
    return _heartbeat(cluster, group, member, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=[topic],
                      topic_partitions=[])


def _commit(cluster, group: str, member: str, epoch: int, topic: str, version: int = 9) -> int:
    r = _send(cluster, protocol.build(OffsetCommitRequest[version], dict(
        group_id=group, generation_id_or_member_epoch=epoch, member_id=member, group_instance_id=None,
        topics=[{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 7,
                                                "committed_leader_epoch": -1, "committed_metadata": ""}]}])),
        OffsetCommitResponse)
    return r.topics[0].partitions[0].error_code


def _fetch(cluster, group: str, member: str | None, epoch: int, topic: str):
    r = _send(cluster, protocol.build(OffsetFetchRequest[9], dict(
        groups=[{"group_id": group, "member_id": member, "member_epoch": epoch,
                 "topics": [{"name": topic, "partition_indexes": [0]}]}], require_stable=True)), OffsetFetchResponse)
    g = r.groups[0]
    return g.error_code, (g.topics[0].partitions[0].committed_offset if g.topics else None)


def test_a_member_joins_commits_at_its_epoch_and_leaves(cluster):
    topic, group = _topic(cluster, 2), f"g-{next(_names)}"
    _coordinated(cluster, group)
    r = _join(cluster, group, "member-a", topic)
    assert r.error_code == 0 and r.member_id == "member-a" and r.member_epoch >= 1
    assert r.heartbeat_interval_ms == 300
    [tps] = r.assignment.topic_partitions
    assert tps.topic_id == protocol.topic_id(topic) and sorted(tps.partitions) == [0, 1]
    epoch = r.member_epoch

    [d] = _send(cluster, ConsumerGroupDescribeRequest[1](group_ids=[group], include_authorized_operations=False),
                ConsumerGroupDescribeResponse).groups
    assert (d.error_code, d.group_state, d.group_epoch, d.assignor_name) == (0, "Stable", epoch, "uniform")
    [m] = d.members
    assert (m.member_id, m.member_epoch, m.subscribed_topic_names, m.member_type) == ("member-a", epoch, [topic], 1)
    assert [(t.topic_name, sorted(t.partitions)) for t in m.assignment.topic_partitions] == [(topic, [0, 1])]

    assert _commit(cluster, group, "member-a", epoch + 1, topic) == Errors.STALE_MEMBER_EPOCH
    assert _commit(cluster, group, "member-a", epoch, topic, version=8) == Errors.UNSUPPORTED_VERSION
    assert _commit(cluster, group, "member-b", epoch, topic) == Errors.UNKNOWN_MEMBER_ID
    assert _commit(cluster, group, "member-a", epoch, topic) == 0
    assert _fetch(cluster, group, "member-a", epoch + 1, topic)[0] == Errors.STALE_MEMBER_EPOCH
    assert _fetch(cluster, group, "member-a", epoch, topic) == (0, 7)
    assert _fetch(cluster, group, None, -1, topic) == (0, 7)  # an admin's fetch

    r = _heartbeat(cluster, group, "member-a", -1)
    assert (r.error_code, r.member_epoch) == (0, -1)
    [d] = _send(cluster, ConsumerGroupDescribeRequest[0](group_ids=[group], include_authorized_operations=False),
                ConsumerGroupDescribeResponse).groups
    assert (d.group_state, d.members) == ("Empty", [])


def test_each_heartbeat_is_logged_with_what_the_coordinator_made_of_it(cluster, caplog):
    """One INFO line of kafkacheck.server.cgroup per heartbeat (what conform's spawned brokers log)."""
    import logging

    topic, group = _topic(cluster, 2), f"g-{next(_names)}"
    _coordinated(cluster, group)
    with caplog.at_level(logging.INFO, logger="kafkacheck.server.cgroup"):
        epoch = _join(cluster, group, "member-log", topic).member_epoch
        _heartbeat(cluster, group, "member-log", epoch + 5)
        _heartbeat(cluster, group, "member-log", -1)
    lines = [r.getMessage() for r in caplog.records if r.name == "kafkacheck.server.cgroup"]
    t = topic[-4:]
    assert lines == [
        f"heartbeat group={group} member=member-l epoch=0 owned=[] -> epoch={epoch} assignment=[{t}-0,{t}-1] "
        f"state=stable assigned=[{t}-0,{t}-1] revoking=[] group_epoch={epoch}",
        f"heartbeat group={group} member=member-l epoch={epoch + 5} owned=null -> FENCED_MEMBER_EPOCH",
        f"heartbeat group={group} member=member-l epoch=-1 owned=null -> epoch=-1 assignment=none"], lines


def test_refusals_name_their_reason(cluster):
    topic, group = _topic(cluster, 1), f"g-{next(_names)}"
    _coordinated(cluster, group)
    assert _join(cluster, group, "", topic).error_code == Errors.INVALID_REQUEST  # v1: the client names itself
    r = _heartbeat(cluster, group, "m", 0, rebalance_timeout_ms=30_000, subscribed_topic_regex="cg-.*",
                   topic_partitions=[])
    assert r.error_code == Errors.INVALID_REQUEST and "regular-expression" in r.error_message
    assert _heartbeat(cluster, group, "m", 5).error_code == Errors.GROUP_ID_NOT_FOUND
    assert _join(cluster, group, "m", topic).error_code == 0
    assert _heartbeat(cluster, group, "m", 99).error_code == Errors.FENCED_MEMBER_EPOCH
    [d] = _send(cluster, ConsumerGroupDescribeRequest[1](group_ids=["nobody", ""],
                                                         include_authorized_operations=False),
                ConsumerGroupDescribeResponse).groups[:1]
    assert d.error_code in (Errors.GROUP_ID_NOT_FOUND, Errors.NOT_COORDINATOR)


def test_librdkafka_members_share_the_partitions(cluster):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic, group = _topic(cluster, 6), f"g-{next(_names)}"
    owned: dict[int, set[int]] = {0: set(), 1: set(), 2: set()}
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[str] = []

    def member(i: int) -> None:
        c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                                      "group.protocol": "consumer", "auto.offset.reset": "earliest"})

        def assigned(_c, tps):
            with lock:
                owned[i] |= {t.partition for t in tps}

        def revoked(_c, tps):
            with lock:
                owned[i] -= {t.partition for t in tps}

        c.subscribe([topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked)
        while not stop.is_set():
            m = c.poll(0.1)
            if m is not None and m.error() is not None:
                errors.append(str(m.error()))
        c.close()

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    try:
        end = time.monotonic() + 30
        settled = False
        while time.monotonic() < end and not settled:
            time.sleep(0.2)
            with lock:
                sets = [set(s) for s in owned.values()]
            settled = all(len(s) == 2 for s in sets) and set().union(*sets) == set(range(6))
        assert settled, f"the group did not settle: {sets}"
    finally:
        stop.set()
        for t in threads:
            t.join(20)
    assert not errors
