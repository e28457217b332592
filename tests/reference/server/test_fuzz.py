"""Thousands of mutated Kafka frames against a served cluster: the broker answers, refuses
or closes the connection, and afterwards still serves clients with its data intact."""

from __future__ import annotations

import random
import socket
import struct

import pytest

from reference import records as rec
from reference.server.cluster import InThreadCluster, ServerOptions

kafka = pytest.importorskip("kafka")
from kafka import KafkaConsumer, KafkaProducer  # noqa: E402
from kafka import TopicPartition as KTP  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402
from kafka.protocol.admin import CreateTopicsRequest, DeleteRecordsRequest  # noqa: E402
from kafka.protocol.consumer import (  # noqa: E402
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest  # noqa: E402
from kafka.protocol.producer import EndTxnRequest, InitProducerIdRequest, ProduceRequest  # noqa: E402

FRAMES = 3000
TOPIC = "fuzzed"


def _frame(msg, corr: int) -> bytes:
    msg.with_header(correlation_id=corr, client_id="fuzz")
    return bytes(msg.encode(header=True, framed=True))


def seeds() -> list[bytes]:
    batch = rec.encode_batch([rec.RecordInput(b"k", b"fuzz-value", (), 0)])
    P = ProduceRequest
    T = FetchRequest
    return [
        _frame(ApiVersionsRequest[3](client_software_name="f", client_software_version="1"), 1),
        _frame(MetadataRequest[12](topics=None, allow_auto_topic_creation=False), 2),
        _frame(P[9](transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[P.TopicProduceData(
            name=TOPIC, partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=batch)])]), 3),
        _frame(T[12](replica_id=-1, max_wait_ms=10, min_bytes=1, max_bytes=1 << 20, isolation_level=1,
                     session_id=0, session_epoch=-1, topics=[T.FetchTopic(topic=TOPIC, partitions=[
                         T.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                     last_fetched_epoch=-1, log_start_offset=-1,
                                                     partition_max_bytes=1 << 20)])],
                     forgotten_topics_data=[], rack_id=""), 4),
        _frame(ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=TOPIC, partitions=[ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-1)])]), 5),
        _frame(FindCoordinatorRequest[4](key_type=0, coordinator_keys=["g"]), 6),
        _frame(JoinGroupRequest[7](group_id="g", session_timeout_ms=6000, rebalance_timeout_ms=100,
                                   member_id="", group_instance_id=None, protocol_type="consumer",
                                   protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range",
                                                                                        metadata=b"\0\0")]), 7),
        _frame(SyncGroupRequest[5](group_id="g", generation_id=1, member_id="m", group_instance_id=None,
                                   protocol_type="consumer", protocol_name="range", assignments=[]), 8),
        _frame(HeartbeatRequest[4](group_id="g", generation_id=1, member_id="m", group_instance_id=None), 9),
        _frame(OffsetCommitRequest[8](group_id="g", generation_id_or_member_epoch=-1, member_id="",
                                      group_instance_id=None, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                                          name=TOPIC, partitions=[
                                              OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                                                  partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                                  committed_metadata="")])]), 10),
        _frame(InitProducerIdRequest[4](transactional_id="t", transaction_timeout_ms=1000, producer_id=-1,
                                        producer_epoch=-1), 11),
        _frame(EndTxnRequest[3](transactional_id="t", producer_id=1, producer_epoch=0, committed=True), 12),
        _frame(CreateTopicsRequest[7](topics=[CreateTopicsRequest.CreatableTopic(
            name="fz", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=100, validate_only=True), 13),
        _frame(DeleteRecordsRequest[2](topics=[DeleteRecordsRequest.DeleteRecordsTopic(
            name="nope", partitions=[DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(
                partition_index=0, offset=0)])], timeout_ms=100), 14),
    ]


def mutate(rng: random.Random, frame: bytes) -> bytes:
    b = bytearray(frame)
    kind = rng.randrange(7)
    if kind == 0:  # flip bits in the body
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(4, len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncate (size still claims the whole frame: the server waits, then we close)
        b = b[: rng.randrange(4, len(b))]
        struct.pack_into(">i", b, 0, len(b) - 4)
    elif kind == 2:  # a lying size
        struct.pack_into(">i", b, 0, rng.choice([-1, 0, 3, 1 << 30, rng.randrange(1 << 31)]))
    elif kind == 3:  # another API key or version
        struct.pack_into(">hh", b, 4, rng.randrange(-2, 100), rng.randrange(-2, 20))
    elif kind == 4:  # random bytes appended inside the frame
        b += rng.randbytes(rng.randint(1, 64))
        struct.pack_into(">i", b, 0, len(b) - 4)
    elif kind == 5:  # overwrite a field-sized run with extreme values
        i = rng.randrange(4, max(5, len(b) - 4))
        b[i:i + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\0\0\0\0"])
    else:  # pure garbage frame
        body = rng.randbytes(rng.randint(0, 200))
        b = bytearray(struct.pack(">i", len(body)) + body)
    return bytes(b)


def test_mutated_frames_never_hurt_the_broker(tmp_path):
    rng = random.Random(20261122)
    with InThreadCluster(ServerOptions(data_dir=tmp_path, brokers=3, port=0)) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        admin.create_topics([NewTopic(TOPIC, 1, 3)])
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all")
        before = [producer.send(TOPIC, value=b"before-%d" % i).get(20).offset for i in range(50)]
        producer.close()
        ports = sorted(cluster.layout.client_ports.values())
        corpus = seeds()
        answered = closed = 0
        sock = None
        for _ in range(FRAMES):
            if sock is None:
                sock = socket.create_connection(("127.0.0.1", rng.choice(ports)), timeout=2)
            try:
                sock.sendall(mutate(rng, rng.choice(corpus)))
                sock.settimeout(0.3)
                data = sock.recv(65536)
                if data:
                    answered += 1
                else:
                    raise ConnectionError
            except TimeoutError:
                sock.close()  # a frame the server still waits for the rest of: hang up mid-request
                sock = None
            except OSError:
                closed += 1
                sock.close()
                sock = None
        if sock is not None:
            sock.close()
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
