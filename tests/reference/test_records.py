"""RecordBatch v2: round trips, CRC-32C, corruption, and agreement with kafka-python's codec."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from reference import records as rec

record_inputs = st.lists(
    st.builds(
        rec.RecordInput,
        key=st.none() | st.binary(max_size=20),
        value=st.none() | st.binary(max_size=200),
        headers=st.lists(st.builds(rec.Header, st.text(max_size=8), st.none() | st.binary(max_size=8)),
                         max_size=3).map(tuple),
        timestamp=st.integers(0, 2**40),
    ),
    min_size=1, max_size=20,
)


@given(record_inputs, st.integers(0, 2**40), st.integers(-1, 1000))
def test_a_batch_decodes_to_the_records_it_was_built_from(inputs, base_offset, epoch):
    batch = rec.encode_batch(inputs, base_offset=base_offset, partition_leader_epoch=epoch,
                             producer_id=7, producer_epoch=1, base_sequence=3, transactional=True)
    h = rec.validate(batch)
    assert (h.base_offset, h.partition_leader_epoch, h.records_count) == (base_offset, epoch, len(inputs))
    assert h.is_transactional and not h.is_control
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (7, 1, 3)
    decoded = rec.decode_records(batch)
    assert [r.offset for r in decoded] == list(range(base_offset, base_offset + len(inputs)))
    assert [(r.key, r.value, r.headers, r.timestamp) for r in decoded] == [
        (i.key, i.value, i.headers, i.timestamp) for i in inputs]


@given(record_inputs)
def test_kafka_python_reads_our_batches(inputs):
    batch = rec.encode_batch(inputs, base_offset=40, partition_leader_epoch=3)
    theirs = DefaultRecordBatch(bytearray(batch))
    assert theirs.validate_crc()
    assert theirs.base_offset == 40 and theirs.leader_epoch == 3
    got = list(theirs)
    assert [(r.offset, r.key, r.value) for r in got] == [
        (40 + i, x.key, x.value) for i, x in enumerate(inputs)]


def test_we_read_kafka_pythons_batches():
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i in range(5):
        builder.append(i, timestamp=1000 + i, key=b"k%d" % i, value=b"v%d" % i,
                       headers=[("h", b"x")])
    batch = bytes(builder.build())
    decoded = rec.decode_records(batch)
    assert [(r.offset, r.key, r.value, r.timestamp) for r in decoded] == [
        (i, b"k%d" % i, b"v%d" % i, 1000 + i) for i in range(5)]
    assert decoded[0].headers == (rec.Header("h", b"x"),)


def test_a_flipped_bit_is_caught_by_the_crc():
    batch = bytearray(rec.encode_batch([rec.RecordInput(b"k", b"value")]))
    batch[-3] ^= 0x10
    with pytest.raises(rec.CorruptRecordError, match="CRC"):
        rec.validate(bytes(batch))


def test_offset_and_epoch_rewrite_keeps_the_crc_valid():
    batch = rec.encode_batch([rec.RecordInput(None, b"a"), rec.RecordInput(None, b"b")])
    moved = rec.with_offset_and_epoch(batch, 100, 9)
    h = rec.validate(moved)
    assert (h.base_offset, h.last_offset, h.partition_leader_epoch) == (100, 101, 9)


def test_split_stops_at_a_torn_tail_and_keeps_what_came_before():
    a = rec.encode_batch([rec.RecordInput(None, b"a")], base_offset=0)
    b = rec.encode_batch([rec.RecordInput(None, b"b")], base_offset=1)
    batches, span = rec.split_batches(a + b[:-5])
    assert batches == [a] and span == len(a)
    batches, span = rec.split_batches(a + b)
    assert batches == [a, b] and span == len(a) + len(b)


def test_wrong_magic_is_rejected():
    batch = bytearray(rec.encode_batch([rec.RecordInput(None, b"a")]))
    batch[16] = 1
    with pytest.raises(rec.CorruptRecordError, match="magic"):
        rec.parse_header(bytes(batch))
