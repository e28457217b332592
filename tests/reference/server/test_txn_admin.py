"""kafka-python's admin against the served reference: topics placed by hand (CreateTopics
with replica assignments) and KIP-664's APIs, which find hanging transactions
(DescribeProducers, ListTransactions, DescribeTransactions)."""

from __future__ import annotations

import itertools
import time

import pytest

from reference.server.cluster import InThreadCluster, ServerOptions

kafka = pytest.importorskip("kafka")

from kafka import KafkaAdminClient, KafkaProducer  # noqa: E402
from kafka import TopicPartition as KTP  # noqa: E402
from kafka.admin import NewTopic  # noqa: E402
from kafka.errors import InvalidReplicationAssignmentError, TransactionalIdNotFoundError  # noqa: E402

_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with InThreadCluster(ServerOptions(data_dir=tmp_path_factory.mktemp("ref"), brokers=3, port=0)) as c:
        yield c


@pytest.fixture
def admin(cluster):
    a = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20_000)
    yield a
    a.close()  # a client left open keeps an I/O thread


def placed_topic(admin, placement: dict[int, list[int]]) -> str:
    topic = f"placed-{next(_names)}"
    admin.create_topics([NewTopic(topic, num_partitions=-1, replication_factor=-1, replica_assignments=placement)])
    return topic


def replicas(admin, topic: str) -> dict[int, list[int]]:
    end = time.monotonic() + 20
    while time.monotonic() < end:
        [t] = admin.describe_topics([topic])
        parts = {p["partition_index"]: p for p in t["partitions"]}
        if parts and all(p["leader_id"] >= 0 for p in parts.values()):
            return {i: p["replica_nodes"] for i, p in sorted(parts.items())}
        time.sleep(0.1)
    raise AssertionError(f"{topic} has no leaders")


def test_kafka_python_places_a_topic_replica_by_replica(admin):
    topic = placed_topic(admin, {0: [1], 1: [2], 2: [3]})
    assert replicas(admin, topic) == {0: [1], 1: [2], 2: [3]}
    with pytest.raises(InvalidReplicationAssignmentError):
        admin.create_topics([NewTopic("placed-bad", num_partitions=-1, replication_factor=-1,
                                      replica_assignments={0: [1], 1: [9]})])
    with pytest.raises(InvalidReplicationAssignmentError):  # a different replica count a partition
        admin.create_topics([NewTopic("placed-bad", num_partitions=-1, replication_factor=-1,
                                      replica_assignments={0: [1], 1: [2, 3]})])
    assert "placed-bad" not in admin.list_topics()


def until(probe, timeout_s: float = 20.0):
    end = time.monotonic() + timeout_s
    while True:
        try:
            got = probe()
        except Exception:
            got = None
        if got or time.monotonic() > end:
            return got
        time.sleep(0.1)


def test_kip_664_apis_show_an_open_transaction_and_its_end(cluster, admin):
    topic = placed_topic(admin, {0: [2], 1: [3]})
    replicas(admin, topic)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id="kip664", acks="all")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, value=b"open", partition=1).get(20)
        tp = KTP(topic, 1)
        [state] = admin.describe_producers([tp])[tp].active_producers
        assert state.current_transaction_start_offset == 0 and state.last_sequence == 0
        assert state.last_timestamp > 0
        listed = until(lambda: [t for ts in admin.list_transactions().values() for t in ts
                                if t.transactional_id == "kip664"])
        assert [(t.producer_id, t.state.value) for t in listed] == [(state.producer_id, "Ongoing")]
        assert admin.list_transactions(state_filters=["CompleteCommit"]) == {b: [] for b in (1, 2, 3)}
        d = admin.describe_transactions(["kip664"])["kip664"]
        assert (d.state.value, d.producer_id, d.producer_epoch) == ("Ongoing", state.producer_id,
                                                                    state.producer_epoch)
        assert d.topic_partitions == {tp} and d.transaction_start_time_ms > 0
        producer.commit_transaction()
        done = until(lambda: admin.describe_transactions(["kip664"])["kip664"].state.value == "CompleteCommit")
        assert done
        [after] = admin.describe_producers([tp])[tp].active_producers
        assert after.current_transaction_start_offset == -1
        assert admin.describe_transactions(["kip664"])["kip664"].topic_partitions == set()
    finally:
        producer.close()
    with pytest.raises(TransactionalIdNotFoundError):
        admin.describe_transactions(["never-used"])
