"""Thousands of mutated Kafka frames against a served cluster: the broker answers, refuses
or closes the connection, and afterwards still serves clients with its data intact."""

from __future__ import annotations

import random

import pytest

from reference.server.cluster import InThreadCluster, ServerOptions

kafka = pytest.importorskip("kafka")
from kafka import KafkaConsumer, KafkaProducer  # noqa: E402
from kafka import TopicPartition as KTP  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402

from reference.server.fuzz import TOPIC, send_mutated  # noqa: E402

FRAMES = 3000


def test_mutated_frames_never_hurt_the_broker(tmp_path):
    rng = random.Random(20261122)
    with InThreadCluster(ServerOptions(data_dir=tmp_path, brokers=3, port=0)) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        admin.create_topics([NewTopic(TOPIC, 1, 3)])
        admin.close()
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        before = [producer.send(TOPIC, value=b"before-%d" % i).get(20).offset for i in range(50)]
        producer.close()
        ports = sorted(cluster.layout.client_ports.values())
        answered, closed = send_mutated("127.0.0.1", ports, FRAMES, rng)
        assert answered > 100 and closed > 100, (answered, closed)
        # the cluster still works and kept everything acknowledged before the fuzzing
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        after = producer.send(TOPIC, value=b"after").get(20).offset
        producer.close()
        consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                                 consumer_timeout_ms=5000)
        consumer.assign([KTP(TOPIC, 0)])
        values = {m.offset: m.value for m in consumer}
        consumer.close()
        host = cluster.process.host
        assert host is not None and host.errors == 0, "an engine node raised while being fuzzed"
    assert before == list(range(50)) and after >= 50
    for i in range(50):
        assert values[i] == b"before-%d" % i
    assert values[after] == b"after"
