"""The sans-IO producer with enable.idempotence against real brokers (FIFO router): a lost
response is retried without a duplicate, order holds across retries, and the config rules."""

from __future__ import annotations

import pytest

from reference import records as rec
from reference.messages import ProduceResponse
from reference.producer import Producer, ProducerConfig
from tests.reference.test_broker import TP, Router

PRODUCER = 60


def with_producer(r: Router, **config) -> Producer:
    p = Producer(PRODUCER, [1, 2, 3], ProducerConfig(enable_idempotence=True, acks=-1,
                                                     request_timeout_ms=1_000, linger_ms=0,
                                                     **config))
    r.nodes[PRODUCER] = p
    p.start(r.now)
    r._collect(p)
    r.run()
    for _ in range(10):
        r.tick(100)  # producer id and metadata
    assert p.producer_id >= 0
    return p


def values_in_log(r: Router) -> list[bytes]:
    log = r.nodes[1].partitions[TP].log
    return [x.value for b in log.batches() for x in rec.decode_records(b)]


def test_a_lost_response_is_retried_and_written_once():
    r = Router()
    p = with_producer(r)
    lost = []

    def drop_first_ack(src, dst, msg):
        if dst == PRODUCER and isinstance(msg, ProduceResponse) and not lost:
            lost.append(msg)
            return True
        return False

    r.drop = drop_first_ack
    p.send(r.now, TP, b"once")
    r._collect(p)
    r.run()
    for _ in range(40):
        r.tick(100)
    [result] = p.take_results()
    assert lost and result.error.name == "NONE" and result.offset == 0
    assert values_in_log(r) == [b"once"]


def test_order_holds_across_retries_with_several_batches_in_flight():
    r = Router()
    p = with_producer(r, max_in_flight=5)
    dropped = []

    def drop_second_request(src, dst, msg):
        if src == PRODUCER and type(msg).__name__ == "ProduceRequest":
            dropped.append(msg)
            return len(dropped) == 2  # the second batch never arrives the first time
        return False

    r.drop = drop_second_request
    for i in range(5):
        p.send(r.now, TP, b"%d" % i)
        r._collect(p)
        r.tick(1)
    for _ in range(60):
        r.tick(100)
    results = p.take_results()
    assert all(x.error.name == "NONE" for x in results)
    assert values_in_log(r) == [b"0", b"1", b"2", b"3", b"4"]


def test_idempotence_needs_acks_all_and_at_most_five_in_flight():
    with pytest.raises(ValueError):
        ProducerConfig(enable_idempotence=True, acks=1)
    with pytest.raises(ValueError):
        ProducerConfig(enable_idempotence=True, max_in_flight=6)
