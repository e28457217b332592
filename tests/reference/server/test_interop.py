"""kafka-python and confluent-kafka against the reference broker served on loopback.

One 3-broker cluster (one process, one listener per broker, in a background thread) serves
every test of this module; each test uses its own topics and groups.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid

import pytest

from reference.server.cluster import InThreadCluster, ServerOptions

kafka = pytest.importorskip("kafka")
confluent = pytest.importorskip("confluent_kafka")

from confluent_kafka import Consumer, KafkaException, Producer  # noqa: E402
from confluent_kafka import TopicPartition as CTP  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer  # noqa: E402
from kafka import TopicPartition as KTP  # noqa: E402
from kafka.admin import NewTopic as KNewTopic  # noqa: E402

_names = itertools.count()


def name(prefix: str) -> str:
    return f"{prefix}-{next(_names)}-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with InThreadCluster(ServerOptions(data_dir=tmp_path_factory.mktemp("ref"), brokers=3, port=0)) as c:
        yield c


def create(bootstrap: str, topic: str, partitions: int = 3, rf: int = 3, configs: dict | None = None) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, rf, config=configs or {})], operation_timeout=15)
    futures[topic].result(20)


def create_seeded(bootstrap: str, topic: str, n: int) -> None:
    """A one-partition topic holding the values 0..n-1."""
    create(bootstrap, topic, partitions=1)
    seed = Producer({"bootstrap.servers": bootstrap})
    for i in range(n):
        seed.produce(topic, value=b"%d" % i)
    seed.flush(20)


def drain_confluent(consumer: Consumer, want: int, timeout_s: float = 30.0) -> list:
    got = []
    end = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < end:
        m = consumer.poll(0.2)
        if m is None:
            continue
        assert m.error() is None, m.error()
        got.append(m)
    return got


# ---------------------------------------------------------------- kafka-python

def test_kafka_python_produce_consume_with_keys_headers_and_gzip(cluster):
    topic = name("kp")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20_000)
    admin.create_topics([KNewTopic(topic, 3, 3)])
    admin.close()  # a client left open keeps an I/O thread that draws from the global random
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", compression_type="gzip",
                             linger_ms=5)
    sent = {}
    for i in range(60):
        md = producer.send(topic, key=b"k%d" % (i % 5), value=b"v%d" % i, headers=[("n", str(i).encode())]).get(20)
        sent[(md.partition, md.offset)] = i
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=name("g"),
                             auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=8_000)
    got = {}
    for m in consumer:
        got[(m.partition, m.offset)] = (m.key, m.value, m.headers)
        if len(got) == len(sent):
            break
    consumer.commit()
    committed = {p: consumer.committed(KTP(topic, p)) for p in range(3)}
    consumer.close()
    assert set(got) == set(sent)
    for pos, i in sent.items():
        assert got[pos] == (b"k%d" % (i % 5), b"v%d" % i, [("n", str(i).encode())])
    # keys go to one partition each; every partition's committed offset is its end
    for p in range(3):
        assert committed[p] == 1 + max((o for (q, o) in sent if q == p), default=-1)


def test_kafka_python_idempotent_producer_keeps_order(cluster):
    topic = name("kpi")
    create(cluster.bootstrap, topic, partitions=1)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, enable_idempotence=True, linger_ms=2,
                             max_in_flight_requests_per_connection=5)
    futures = [producer.send(topic, value=b"%d" % i) for i in range(200)]
    offsets = [f.get(20).offset for f in futures]
    producer.close()
    assert offsets == list(range(200))


def test_kafka_python_transactions_and_read_committed(cluster):
    topic = name("kpt")
    create(cluster.bootstrap, topic, partitions=2)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, transactional_id=name("tx"))
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, value=b"aborted-1", partition=0)
    producer.send(topic, value=b"aborted-2", partition=1)
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send(topic, value=b"committed-1", partition=0)
    producer.send(topic, value=b"committed-2", partition=1)
    producer.commit_transaction()
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, isolation_level="read_committed",
                             auto_offset_reset="earliest", consumer_timeout_ms=5_000)
    consumer.assign([KTP(topic, 0), KTP(topic, 1)])
    values = sorted(m.value for m in consumer)
    consumer.close()
    assert values == [b"committed-1", b"committed-2"]


def test_kafka_python_group_gives_each_partition_to_one_member(cluster):
    topic = name("kpg")
    create(cluster.bootstrap, topic, partitions=4)
    group = name("g")
    consumers = [KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap, group_id=group,
                               auto_offset_reset="earliest", session_timeout_ms=6_000,
                               heartbeat_interval_ms=500) for _ in range(2)]
    stop = threading.Event()

    def poll(c):  # each consumer polls in its own thread, as an application would
        while not stop.is_set():
            c.poll(500)

    threads = [threading.Thread(target=poll, args=(c,)) for c in consumers]
    for t in threads:
        t.start()
    end = time.monotonic() + 40
    owned = []
    while time.monotonic() < end:
        owned = [set(c.assignment()) for c in consumers]
        if all(owned) and sum(len(a) for a in owned) == 4:
            break
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join()
    for c in consumers:
        c.close()
    assert all(owned), owned
    assert set().union(*owned) == {KTP(topic, p) for p in range(4)}
    assert sum(len(a) for a in owned) == 4  # no partition twice


def test_kafka_python_admin_calls(cluster):
    topic = name("kpa")
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=20_000)
    admin.create_topics([KNewTopic(topic, 2, 3, topic_configs={"retention.ms": "3600000"})])
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
    for i in range(10):
        producer.send(topic, value=b"%d" % i, partition=0).get(20)
    producer.close()
    cluster_info = admin.describe_cluster()
    assert sorted(b.get("node_id", b.get("broker_id")) for b in cluster_info["brokers"]) == [1, 2, 3], cluster_info
    assert topic in admin.list_topics()
    configs = admin.describe_configs([kafka.admin.ConfigResource("TOPIC", topic)])
    text = str(configs)
    assert "retention.ms" in text and "3600000" in text
    admin.delete_records({KTP(topic, 0): 4})
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap)
    assert consumer.beginning_offsets([KTP(topic, 0)])[KTP(topic, 0)] == 4
    assert consumer.end_offsets([KTP(topic, 0)])[KTP(topic, 0)] == 10
    consumer.close()
    admin.delete_topics([topic])
    deadline = time.monotonic() + 10
    while topic in admin.list_topics() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic not in admin.list_topics()
    admin.close()


# ---------------------------------------------------------------- confluent-kafka

@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd", "snappy"])
def test_confluent_produce_consume_compressed(cluster, codec):
    topic = name(f"cf-{codec}")
    create(cluster.bootstrap, topic)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "compression.type": codec,
                         "enable.idempotence": True, "linger.ms": 5})
    errors = []
    for i in range(100):
        producer.produce(topic, key=b"k%d" % (i % 7), value=b"v%d" % i, headers=[("h", b"%d" % i)],
                         on_delivery=lambda e, m: errors.append(e) if e else None)
    assert producer.flush(30) == 0
    assert errors == []
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": name("g"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got = drain_confluent(consumer, 100)
    consumer.commit(asynchronous=False)
    committed = consumer.committed([CTP(topic, p) for p in range(3)], timeout=10)
    consumer.close()
    assert sorted(m.value() for m in got) == sorted(b"v%d" % i for i in range(100))
    assert all(m.headers() == [("h", m.value()[1:])] for m in got)
    assert sum(tp.offset for tp in committed) == 100


def test_confluent_transactions_send_offsets_and_fencing(cluster):
    src, dst = name("cf-src"), name("cf-dst")
    create_seeded(cluster.bootstrap, src, 10)
    create(cluster.bootstrap, dst, partitions=1)
    group = name("eos")
    txn_id = name("tx")
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe([src])
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id})
    producer.init_transactions(20)
    msgs = drain_confluent(consumer, 10)
    producer.begin_transaction()
    for m in msgs[:5]:
        producer.produce(dst, value=b"aborted-" + m.value())
    producer.abort_transaction(20)
    producer.begin_transaction()
    for m in msgs:
        producer.produce(dst, value=b"out-" + m.value())
    producer.send_offsets_to_transaction([CTP(src, 0, 10)], consumer.consumer_group_metadata(), 20)
    producer.commit_transaction(20)
    consumer.close()
    # the committed offset came with the transaction
    check = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    assert check.committed([CTP(src, 0)], timeout=10)[0].offset == 10
    check.close()
    reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": name("r"),
                       "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    reader.subscribe([dst])
    out = drain_confluent(reader, 10)
    time.sleep(1)
    out += drain_confluent(reader, 1, timeout_s=1)
    reader.close()
    assert sorted(m.value() for m in out) == sorted(b"out-%d" % i for i in range(10))
    # a second producer with the same transactional id fences the first
    zombie = producer
    successor = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id})
    successor.init_transactions(20)
    with pytest.raises(KafkaException):
        zombie.begin_transaction()
        zombie.produce(dst, value=b"zombie")
        zombie.commit_transaction(20)


def test_confluent_new_member_waits_for_pending_transactional_offsets(cluster):
    """KIP-447: while a transaction holds offsets for the group, OffsetFetch (require_stable)
    answers UNSTABLE_OFFSET_COMMIT per partition, so a new member waits for the commit rather
    than taking "nothing committed" and starting again from the beginning (found by the eos
    conformance workload)."""
    src = name("cf-pending")
    create_seeded(cluster.bootstrap, src, 10)
    group = name("eos-pending")
    owner = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": name("tx")})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.send_offsets_to_transaction([CTP(src, 0, 7)], owner.consumer_group_metadata(), 20)
    owner.close()
    newcomer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest"})
    newcomer.assign([CTP(src, 0)])
    committer = threading.Timer(1.5, lambda: producer.commit_transaction(20))
    committer.start()
    try:
        [first] = drain_confluent(newcomer, 1, timeout_s=20)
    finally:
        committer.join()
        newcomer.close()
    assert first.offset() == 7


def test_confluent_cooperative_rebalance(cluster):
    topic = name("cf-coop")
    create(cluster.bootstrap, topic, partitions=4)
    group = name("g")
    conf = {"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "cooperative-sticky", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500}
    first = Consumer(conf)
    first.subscribe([topic])
    end = time.monotonic() + 30
    while len(first.assignment()) < 4 and time.monotonic() < end:
        first.poll(0.2)
    assert len(first.assignment()) == 4
    second = Consumer(conf)
    second.subscribe([topic])
    end = time.monotonic() + 40
    while time.monotonic() < end:
        first.poll(0.1)
        second.poll(0.1)
        a, b = first.assignment(), second.assignment()
        if a and b and len(a) + len(b) == 4:
            break
    a = {(p.topic, p.partition) for p in first.assignment()}
    b = {(p.topic, p.partition) for p in second.assignment()}
    first.close()
    second.close()
    assert a and b and not a & b and len(a | b) == 4


def test_confluent_admin_calls(cluster):
    topic = name("cf-adm")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create(cluster.bootstrap, topic, partitions=2, configs={"cleanup.policy": "compact"})
    described = admin.describe_configs([ConfigResource("topic", topic)])
    configs = next(iter(described.values())).result(10)
    assert configs["cleanup.policy"].value == "compact"
    info = admin.describe_cluster().result(10)
    assert sorted(n.id for n in info.nodes) == [1, 2, 3]
    bad = admin.create_topics([NewTopic(name("cf-bad"), 1, 7)])
    with pytest.raises(KafkaException, match=r"REPLICATION_FACTOR|replication"):
        next(iter(bad.values())).result(10)
    for f in admin.delete_topics([topic]).values():
        f.result(20)
    assert topic not in admin.list_topics(timeout=10).topics
