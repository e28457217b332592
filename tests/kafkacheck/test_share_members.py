"""KIP-932 share-group members as conform handles (kafkacheck.real.kinds.make_share_member),
against a real one-node Apache Kafka 4.3.1: Apache Kafka's Java KafkaShareConsumer (in the
driver) and confluent-kafka's ShareConsumer, both in explicit acknowledgement mode. What Kafka
answers: a record released comes back to the next member with its delivery count up by one; an
acknowledgement sent after the record's acquisition lock expired is refused for its partition
(INVALID_RECORD_STATE) and the record is delivered again. Also: kafka-python has none, and a
driver built against kafka-clients 3.9.1 (no KafkaShareConsumer) still builds and runs.

By default only the Java member runs (about 17 s with the broker's start); confluent-kafka's and
the 3.9.1 driver's (which fetches 3.9.1's jars on its first run) are ``slow``."""

from __future__ import annotations

import time

import pytest

from kafkacheck.real.clients import ShareRec
from kafkacheck.real.kinds import CLIENTS, make_share_member

LOCK_S = 3.0  # group.share.record.lock.duration.ms below
# the broker: share records locked for 3 s (Kafka's minimum lock is 15 s unless lowered), members
# heartbeating every 0.5 s (5 s by default: a newcomer would wait that long for its assignment),
# and the share coordinator's state topic within one broker (Kafka's defaults: replication
# factor 3 and 50 partitions, which a one-node cluster cannot create: no share group would start)
BROKER_CONFIG = {"group.share.min.record.lock.duration.ms": "1000",
                 "group.share.record.lock.duration.ms": str(int(LOCK_S * 1000)),
                 "group.share.min.heartbeat.interval.ms": "500",
                 "group.share.heartbeat.interval.ms": "500",
                 "share.coordinator.state.topic.replication.factor": "1",
                 "share.coordinator.state.topic.min.isr": "1",
                 "share.coordinator.state.topic.num.partitions": "3"}
TIMEOUT_S = 10.0


def test_kafka_python_has_no_share_member():
    with pytest.raises(ValueError, match=r"kafka-python has no share consumer \(KIP-932\)"):
        make_share_member("kafka-python", "127.0.0.1:1", "t", "g", 1.0)


@pytest.fixture(scope="module")
def kafka(kafka_dist, tmp_path_factory):
    """One Apache Kafka 4.3.1 node and the Java client driver, for the module."""
    from kafkacheck.conform import targets
    from kafkacheck.real import java

    work = tmp_path_factory.mktemp("share-kafka")
    target = targets.spawn("kafka", work, brokers=1, broker_config=BROKER_CONFIG, kafka_dist=kafka_dist,
                           log=lambda *a: None)
    try:
        java.use_driver(kafka_dist, work / "java-client.log")
        yield target
    finally:
        java.stop_driver()
        target.close()


def _poll_and_ack(member, want: int, decide, deadline_s: float = 30.0) -> list[ShareRec]:
    """Poll until ``want`` records came (or the deadline), acknowledging each poll's records
    with ``decide(rec)`` before the next poll (explicit mode refuses a poll before that)."""
    got: list[ShareRec] = []
    end = time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < end:
        batch = member.poll(1.0)
        for rec in batch:
            ack = decide(rec)
            if ack is not None:
                member.acknowledge(rec, ack)
        got += batch
    return got


@pytest.mark.kafka
@pytest.mark.parametrize("kind", ["java", pytest.param("confluent", marks=pytest.mark.slow)])
def test_share_members_release_redeliver_and_refuse_an_expired_lock(kafka, kind):
    client = CLIENTS[kind](kafka.bootstrap, TIMEOUT_S)
    topic, group = f"share-{kind}", f"share-group-{kind}"
    key = f"{topic}:0"
    assert client.create_topic(topic, 1, 1) is None
    # share groups start at the latest offset: without this the records below would be skipped
    assert client.alter_group_configs(group, {"share.auto.offset.reset": "earliest"}) is None
    assert [s.offset for s in client.produce(topic, 0, [str(i).encode() for i in range(10)])] == list(range(10))
    released = {0, 3, 6, 9}

    a = make_share_member(kind, kafka.bootstrap, topic, group, TIMEOUT_S)
    b = None
    try:
        # A acquires all ten (delivery 1), releases four and accepts the rest
        got = _poll_and_ack(a, 10, lambda r: "release" if r.offset in released else "accept")
        assert sorted((r.offset, r.value, r.delivery_count) for r in got) == [
            (i, str(i).encode(), 1) for i in range(10)]
        assert all((r.topic, r.partition) == (topic, 0) for r in got)
        assert a.commit() == {key: None}
        assert a.commit() == {}  # nothing pending
        with pytest.raises(ValueError, match="accept, release, reject"):
            a.acknowledge(got[0], "renew")

        # B gets exactly the released four, delivered for the second time; it holds them past their lock
        b = make_share_member(kind, kafka.bootstrap, topic, group, TIMEOUT_S)
        got_b = _poll_and_ack(b, len(released), lambda r: None)
        assert sorted((r.offset, r.delivery_count) for r in got_b) == [(o, 2) for o in sorted(released)]
        time.sleep(LOCK_S + 1.5)
        for rec in got_b:
            b.acknowledge(rec, "accept")
        assert b.commit() == {key: "INVALID_RECORD_STATE"}  # the lock expired: the accept is refused

        # the lock's expiry released them again: delivered a third time, now accepted in time
        again = _poll_and_ack(b, len(released), lambda r: "accept")
        assert sorted((r.offset, r.delivery_count) for r in again) == [(o, 3) for o in sorted(released)]
        assert b.commit() == {key: None}
        assert a.poll(1.0) == []  # every record accepted: nothing left for anyone
    finally:
        started = time.monotonic()
        a.close()
        if b is not None:
            b.close()
        assert time.monotonic() - started < 2 * TIMEOUT_S + 5


@pytest.mark.kafka
@pytest.mark.slow
def test_a_driver_built_against_kafka_clients_3_9_1_serves_all_but_share_consumers(kafka, tmp_path):
    """kafka-clients 3.9.1 has no ConsumerRecord.deliveryCount(): the driver leaves its share
    consumers out (KafkacheckShare.java), answers their ops UNSUPPORTED_VERSION, and serves the
    rest (fetches 3.9.1's jars from Maven Central on the first run)."""
    from kafkacheck.real import java
    from kafkacheck.real.kafka_dist import KafkaDist

    old = KafkaDist("3.9.1")
    assert not java.has_share_consumer(old) and java.has_share_consumer(KafkaDist("4.1.0"))
    classes = java.build_driver(old, log=lambda *a: None)
    assert (classes / "KafkacheckDriver.class").exists() and not (classes / "KafkacheckShare.class").exists()
    d = java.JavaDriver(old, tmp_path / "java-3.9.1.log")
    d.start()
    try:
        admin = d.call("admin.new", 5.0, conf=java.admin_conf(kafka.bootstrap, 5.0))
        d.call("admin.create_topic", 5.0, h=admin, topic="from-3.9.1", partitions=1, rf=1, configs={})
        with pytest.raises(java.JavaError, match=r"^UNSUPPORTED_VERSION: .*GROUP config resources"):
            d.call("admin.alter_group_configs", 5.0, h=admin, group="g", configs={"share.auto.offset.reset": "earliest"})
        d.call("admin.close", 5.0, h=admin)
        producer = d.call("producer.new", 5.0, conf=java.producer_conf(kafka.bootstrap, 5.0, acks="all"))
        [sent] = d.call("producer.send", 7.0, h=producer, records=[{"topic": "from-3.9.1", "partition": 0, "key": None,
                                                                    "value": None, "headers": []}])
        assert sent == {"offset": 0}
        d.call("producer.close", 5.0, h=producer)
        refused = r"^UNSUPPORTED_VERSION: .*share consumers \(KIP-932\) need kafka-clients 4.1 or later"
        with pytest.raises(java.JavaError, match=refused):
            d.call("share.new", 5.0, conf=java.share_conf(kafka.bootstrap, 5.0, **{"group.id": "g"}))
    finally:
        d.close()
