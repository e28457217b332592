"""Mutated Kafka frames for fuzzing a served broker: well-formed requests of most served APIs,
and the ways a frame can go wrong (flipped bits, truncation, a lying size, another API key or
version, trailing bytes, extreme field values, garbage). Used by
tests/reference/server/test_fuzz.py and benchmarks/serve_trust.py."""

from __future__ import annotations

import random
import socket
import struct
from collections.abc import Callable

from kafka.protocol.admin import CreateTopicsRequest, DeleteRecordsRequest
from kafka.protocol.consumer import (
    FetchRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    SyncGroupRequest,
)
from kafka.protocol.metadata import ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest
from kafka.protocol.producer import EndTxnRequest, InitProducerIdRequest, ProduceRequest

from reference import records as rec

TOPIC = "fuzzed"


def frame(msg, corr: int) -> bytes:
    """A request with its header and size prefix, as a client sends it."""
    msg.with_header(correlation_id=corr, client_id="fuzz")
    return bytes(msg.encode(header=True, framed=True))


def seeds(topic: str = TOPIC) -> list[bytes]:
    """One well-formed request of each kind, naming ``topic``."""
    batch = rec.encode_batch([rec.RecordInput(b"k", b"fuzz-value", (), 0)])
    P = ProduceRequest
    T = FetchRequest
    return [
        frame(ApiVersionsRequest[3](client_software_name="f", client_software_version="1"), 1),
        frame(MetadataRequest[12](topics=None, allow_auto_topic_creation=False), 2),
        frame(P[9](transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[P.TopicProduceData(
            name=topic, partition_data=[P.TopicProduceData.PartitionProduceData(index=0, records=batch)])]), 3),
        frame(T[12](replica_id=-1, max_wait_ms=10, min_bytes=1, max_bytes=1 << 20, isolation_level=1,
                     session_id=0, session_epoch=-1, topics=[T.FetchTopic(topic=topic, partitions=[
                         T.FetchTopic.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=0,
                                                     last_fetched_epoch=-1, log_start_offset=-1,
                                                     partition_max_bytes=1 << 20)])],
                     forgotten_topics_data=[], rack_id=""), 4),
        frame(ListOffsetsRequest[7](replica_id=-1, isolation_level=0, topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=-1)])]), 5),
        frame(FindCoordinatorRequest[4](key_type=0, coordinator_keys=["g"]), 6),
        frame(JoinGroupRequest[7](group_id="g", session_timeout_ms=6000, rebalance_timeout_ms=100,
                                   member_id="", group_instance_id=None, protocol_type="consumer",
                                   protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range",
                                                                                        metadata=b"\0\0")]), 7),
        frame(SyncGroupRequest[5](group_id="g", generation_id=1, member_id="m", group_instance_id=None,
                                   protocol_type="consumer", protocol_name="range", assignments=[]), 8),
        frame(HeartbeatRequest[4](group_id="g", generation_id=1, member_id="m", group_instance_id=None), 9),
        frame(OffsetCommitRequest[8](group_id="g", generation_id_or_member_epoch=-1, member_id="",
                                      group_instance_id=None, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(
                                          name=topic, partitions=[
                                              OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                                                  partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                                                  committed_metadata="")])]), 10),
        frame(InitProducerIdRequest[4](transactional_id="t", transaction_timeout_ms=1000, producer_id=-1,
                                        producer_epoch=-1), 11),
        frame(EndTxnRequest[3](transactional_id="t", producer_id=1, producer_epoch=0, committed=True), 12),
        frame(CreateTopicsRequest[7](topics=[CreateTopicsRequest.CreatableTopic(
            name="fz", num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=100, validate_only=True), 13),
        frame(DeleteRecordsRequest[2](topics=[DeleteRecordsRequest.DeleteRecordsTopic(
            name="nope", partitions=[DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition(
                partition_index=0, offset=0)])], timeout_ms=100), 14),
    ]


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One random way for a frame to go wrong."""
    b = bytearray(data)
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


def send_mutated(host: str, ports: list[int], frames: int, rng: random.Random,
                 progress: Callable[[int], None] | None = None) -> tuple[int, int]:
    """Send ``frames`` mutated frames to random ``ports`` of ``host``, one at a time, each
    waiting 0.3 s for an answer; (frames answered, connections the broker closed). A frame the
    broker still waits for the rest of is hung up on mid-request."""
    corpus = seeds()
    answered = closed = 0
    sock = None
    for n in range(frames):
        if progress is not None:
            progress(n)
        if sock is None:
            sock = socket.create_connection((host, rng.choice(ports)), timeout=2)
        try:
            sock.sendall(mutate(rng, rng.choice(corpus)))
            sock.settimeout(0.3)
            if not sock.recv(65536):
                raise ConnectionError
            answered += 1
        except TimeoutError:
            sock.close()
            sock = None
        except OSError:
            closed += 1
            sock.close()
            sock = None
    if sock is not None:
        sock.close()
    return answered, closed
