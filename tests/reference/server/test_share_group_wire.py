"""KIP-932 over the wire: ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch and
ShareAcknowledge against the served reference, with librdkafka's share consumer (confluent-kafka
2.16) and request by request (kafka-python's codec with the project's schemas)."""

from __future__ import annotations

import itertools
import time

import pytest

from reference.errors import Errors
from reference.server import protocol
from reference.server.cluster import InThreadCluster, ServerOptions
from reference.server.kip932_messages import (
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)

ck = pytest.importorskip("confluent_kafka")

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

LOCK_MS = 2_000
_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    options = ServerOptions(data_dir=tmp_path_factory.mktemp("ref"), brokers=1, port=0, min_insync_replicas=1,
                            default_replication_factor=1, share_record_lock_duration_ms=LOCK_MS,
                            share_auto_offset_reset="earliest")
    with InThreadCluster(options) as c:
        yield c


def _topic(cluster, values: list[bytes]) -> str:
    """A new one-partition topic holding ``values`` at offsets 0..n-1."""
    topic = f"sg-{next(_names)}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # (kept: its futures need it)
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(20)
    p = ck.Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for v in values:
        p.produce(topic, v, partition=0)
    assert p.flush(20) == 0
    return topic


def _consumer(cluster, group: str, topic: str):
    c = ck.ShareConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                          "share.acknowledgement.mode": "explicit", "log_level": 3})
    c.subscribe([topic])
    return c


def _poll(c, want: int, timeout_s: float = 20.0) -> list:
    """Polls until ``want`` records came (or the time is up): [(offset, value, delivery count, message)]."""
    got: list = []
    end = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < end:
        for m in c.poll(0.5):
            assert m.error() is None, m.error()
            got.append((m.offset(), m.value(), m.delivery_count(), m))
    return got


def test_librdkafka_share_consumers_acquire_release_and_redeliver(cluster):
    topic = _topic(cluster, [b"%d" % i for i in range(6)])
    a = _consumer(cluster, "g-redeliver", topic)
    got = _poll(a, 6)
    assert [(o, v, n) for o, v, n, _m in got] == [(i, b"%d" % i, 1) for i in range(6)]
    for o, _v, _n, m in got:
        a.acknowledge(m, ck.AcknowledgeType.RELEASE if o in (1, 4) else ck.AcknowledgeType.ACCEPT)
    committed = a.commit_sync()
    assert [tp.error for tp in committed] == [None]
    again = _poll(a, 2)
    assert [(o, n) for o, _v, n, _m in again] == [(1, 2), (4, 2)]  # only the released ones, counted again
    for *_rest, m in again:
        a.acknowledge(m, ck.AcknowledgeType.ACCEPT)
    a.commit_sync()
    assert _poll(a, 1, timeout_s=2.0) == []  # everything accepted: nothing left to deliver
    a.close()


def test_an_expired_lock_is_redelivered_and_its_late_acceptance_refused(cluster):
    topic = _topic(cluster, [b"x"])
    a = _consumer(cluster, "g-expire", topic)
    (first,) = _poll(a, 1)
    time.sleep(LOCK_MS / 1000 + 0.5)  # the lock expires: the record is available again
    b = _consumer(cluster, "g-expire", topic)
    (second,) = _poll(b, 1)
    assert second[2] == 2
    a.acknowledge(first[3], ck.AcknowledgeType.ACCEPT)  # too late: b holds it now
    errors = [tp.error for tp in a.commit_sync()]
    assert errors[0] is not None and "INVALID_RECORD_STATE" in str(errors[0])
    b.acknowledge(second[3], ck.AcknowledgeType.ACCEPT)
    assert [tp.error for tp in b.commit_sync()] == [None]
    a.close()
    b.close()


def _send(cluster, request, response_class):
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    return protocol.round_trip(host, int(port), request, response_class, "kafkacheck-test", 20.0)


def _joined(cluster, group: str, member: str, topic: str):
    end = time.monotonic() + 20
    while time.monotonic() < end:
        r = _send(cluster, ShareGroupHeartbeatRequest[1](group_id=group, member_id=member, member_epoch=0,
                                                        rack_id=None, subscribed_topic_names=[topic]),
                  ShareGroupHeartbeatResponse)
        if r.error_code == 0:
            return r
        time.sleep(0.2)  # the coordinator still loading
    raise AssertionError(f"{member} could not join {group}: {Errors(r.error_code).name}")


def _fetch(cluster, group: str, member: str, topic: str):
    part = ShareFetchRequest.FetchTopic.FetchPartition(partition_index=0, acknowledgement_batches=[])
    topics = [ShareFetchRequest.FetchTopic(topic_id=protocol.topic_id(topic), partitions=[part])]
    return _send(cluster, ShareFetchRequest[1](group_id=group, member_id=member, share_session_epoch=0,
                                               max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, max_records=10,
                                               batch_size=10, topics=topics, forgotten_topics_data=[]),
                 ShareFetchResponse)


def test_a_share_session_ends_with_its_connection_and_describe_shows_the_group(cluster):
    topic = _topic(cluster, [b"a", b"b"])
    group = "g-raw"
    r = _joined(cluster, group, "member-one", topic)
    assert r.member_epoch >= 1
    end = time.monotonic() + 20
    acquired: list = []
    while not acquired and time.monotonic() < end:  # (the share-partition loads at the first fetch)
        f = _fetch(cluster, group, "member-one", topic)
        assert f.error_code == 0 and f.acquisition_lock_timeout_ms == LOCK_MS
        acquired = [(a.first_offset, a.last_offset, a.delivery_count) for t in f.responses
                    for p in t.partitions for a in p.acquired_records]
    assert acquired == [(0, 1, 1)]
    # that connection closed with the round trip, and its session with it: both records are
    # available again at once (well within their lock), for another member
    _joined(cluster, group, "member-two", topic)
    f = _fetch(cluster, group, "member-two", topic)
    assert [(a.first_offset, a.last_offset, a.delivery_count) for t in f.responses for p in t.partitions
            for a in p.acquired_records] == [(0, 1, 2)]
    d = _send(cluster, ShareGroupDescribeRequest[1](group_ids=[group, "no-such-group"],
                                                   include_authorized_operations=False), ShareGroupDescribeResponse)
    found, missing = d.groups
    assert found.error_code == 0 and found.group_state == "Stable"
    assert {m.member_id for m in found.members} == {"member-one", "member-two"}
    assert missing.error_code == Errors.GROUP_ID_NOT_FOUND


def test_api_versions_finalize_share_version_1(cluster):
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

    r = _send(cluster, ApiVersionsRequest[3](client_software_name="t", client_software_version="1"),
              ApiVersionsResponse)
    assert {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}[78] == (1, 2)
    assert {f.name: f.max_version_level for f in r.finalized_features}["share.version"] == 1
