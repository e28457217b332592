"""Compaction and retention: the cleaner keeps each key's newest record at its offset, drops
tombstones after delete.retention.ms and aborted transactions' records, respects the lag
and the dirty ratio; retention by time and size, DeleteRecords, ListOffsets by time; and
the bug switch that makes the cleaner drop a key's newest record."""

from __future__ import annotations

from reference import records as rec
from reference.errors import Errors
from reference.log import PartitionLog
from reference.log_cleaner import clean
from reference.log_config import LogConfig
from reference.messages import (
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
    TopicPartition,
)
from reference.storage import MemoryStorage
from tests.reference.test_broker import Router

COMPACT = LogConfig(segment_bytes=200, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0,
                    delete_retention_ms=1_000)


def write(log: PartitionLog, key: bytes, value: bytes | None, ts: int) -> int:
    base, _last = log.append_as_leader(rec.encode_batch([rec.RecordInput(key, value, (), ts)]), 0)
    return base


def state(log: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for b in log.batches() if not rec.parse_header(b).is_control
            for r in rec.decode_records(b)]


def filled(config: LogConfig = COMPACT, bugs=frozenset()) -> PartitionLog:
    log = PartitionLog(MemoryStorage(), "c-0", config)
    log.bugs = bugs
    for i in range(30):
        write(log, b"k%d" % (i % 3), b"v%d" % i, ts=i)
    write(log, b"k1", None, ts=30)  # a tombstone for k1
    for i in range(31, 40):
        write(log, b"z", b"v%d" % i, ts=i)  # fill so that the above sits in closed segments
    log.high_watermark = log.log_end_offset
    return log


def test_the_cleaner_keeps_the_newest_record_of_each_key_at_its_offset():
    log = filled()
    before = {o: (k, v) for o, k, v in state(log)}
    result = clean(log, now_ms=100, upper=log.high_watermark)
    assert result is not None and result.records_removed > 0
    after = state(log)
    for o, k, v in after:
        assert before[o] == (k, v)  # offsets and contents of kept records unchanged
    latest = {}
    for o, (k, v) in sorted(before.items()):
        if o < result.end_offset:
            latest[k] = (o, v)
    kept = {(o, k) for o, k, _v in after if o < result.end_offset}
    assert kept == {(o, k) for k, (o, _v) in latest.items()}
    assert (30, b"k1", None) in after  # the tombstone survives its delete horizon...
    assert log.log_end_offset == 40 and log.read(0, 1 << 20, 40)  # the LEO never moves
    # ...and goes once the horizon passed
    clean(log, now_ms=5_000, upper=log.high_watermark)
    clean(log, now_ms=5_000, upper=log.high_watermark)
    assert not [x for x in state(log) if x[1] == b"k1"]
    # a restart recovers the cleaned log, gaps and all
    again = PartitionLog.open(log.storage, "c-0", COMPACT)
    assert state(again) == state(log) and again.log_end_offset == 40


def test_the_cleaner_waits_for_the_lag_the_ratio_and_stays_below_the_upper_bound():
    log = filled(LogConfig(segment_bytes=200, cleanup_policy="compact", min_compaction_lag_ms=1_000))
    assert clean(log, now_ms=100, upper=log.high_watermark) is None  # too young
    assert clean(log, now_ms=100_000, upper=0) is None  # nothing below the bound
    result = clean(log, now_ms=100_000, upper=12)
    assert result is not None and result.end_offset <= 12
    assert clean(log, now_ms=100_000, upper=12) is None  # nothing dirty left below it
    deleting = filled(LogConfig(segment_bytes=200, cleanup_policy="delete"))
    assert clean(deleting, now_ms=100_000, upper=40) is None  # not a compacted topic


def test_the_bug_switch_drops_the_newest_record_of_a_key():
    log = filled(bugs=frozenset({"compaction-drops-latest"}))
    before = state(log)
    result = clean(log, now_ms=100, upper=log.high_watermark)
    assert result is not None
    newest = {}
    for o, k, v in before:
        if o < result.end_offset:
            newest[k] = (o, v)
    after = {o for o, _k, _v in state(log)}
    assert any(o not in after for o, _v in newest.values())


def test_records_of_aborted_transactions_are_cleaned_and_committed_ones_kept():
    log = PartitionLog(MemoryStorage(), "c-0", COMPACT)
    for pid, commit in ((7, False), (8, True)):
        data = rec.encode_batch([rec.RecordInput(b"t%d" % pid, b"x", (), 1)], producer_id=pid,
                                producer_epoch=0, base_sequence=0, transactional=True)
        log.append_as_leader(data, 0)
        log.append_as_leader(rec.encode_control_batch(pid, 0, commit, 0, 1), 0)
    for i in range(20):
        write(log, b"f", b"%d" % i, ts=2)
    log.high_watermark = log.log_end_offset
    result = clean(log, now_ms=10, upper=log.high_watermark)
    assert result is not None and result.aborted_removed == 1
    keys = {k for _o, k, _v in state(log)}
    assert b"t8" in keys and b"t7" not in keys


def test_retention_by_time_and_size_moves_the_log_start_below_the_high_watermark_only():
    log = PartitionLog(MemoryStorage(), "r-0", LogConfig(segment_bytes=200, retention_ms=1_000))
    for i in range(40):
        write(log, b"k", b"v%d" % i, ts=i * 100)
    log.high_watermark = 10
    assert log.apply_retention(now_ms=100_000) <= 10  # never past the HW
    log.high_watermark = log.log_end_offset
    start = log.apply_retention(now_ms=100_000)
    assert 0 < start < 40 and log.read(0, 1 << 20, 40)[0] == log.read(start, 1 << 20, 40)[0]
    sized = PartitionLog(MemoryStorage(), "s-0", LogConfig(segment_bytes=200, retention_bytes=400))
    for i in range(40):
        write(sized, b"k", b"v%d" % i, ts=i)
    sized.high_watermark = sized.log_end_offset
    sized.apply_retention(now_ms=0)
    assert sum(len(b) for b in sized.batches()) <= 400 + 200


def test_offsets_by_timestamp():
    log = PartitionLog(MemoryStorage(), "t-0")
    for i in range(5):
        write(log, b"k", b"v", ts=1_000 + i * 10)
    log.high_watermark = 5
    epoch = log.epochs[-1][0]
    assert log.offset_for_timestamp(1_015, 5) == (2, 1_020, epoch)
    assert log.offset_for_timestamp(0, 5) == (0, 1_000, epoch)
    assert log.offset_for_timestamp(9_999, 5) is None
    assert log.offset_for_timestamp(1_035, 3) is None  # offset 4 is not below the bound


def test_max_timestamp_is_the_first_record_with_the_largest_timestamp():
    """ListOffsets -3 (KIP-734), as Kafka's UnifiedLog answers it."""
    log = PartitionLog(MemoryStorage(), "t-0")
    for ts in (1_000, 3_000, 2_000, 3_000):
        write(log, b"k", b"v", ts=ts)
    epoch = log.epochs[-1][0]
    assert log.offset_of_max_timestamp(4) == (1, 3_000, epoch)
    assert log.offset_of_max_timestamp(1) is None  # not below the high watermark
    assert PartitionLog(MemoryStorage(), "e-0").offset_of_max_timestamp(10) is None


def test_delete_records_and_compacted_topic_rules_on_brokers():
    r = Router()
    r.request(0, CreateTopicsRequest(5, "c", 1, 3, (("cleanup.policy", "compact"),)))
    for _ in range(10):
        r.tick(200)
    ctp = TopicPartition("c", 0)
    leader = r.nodes[0].partitions[ctp].leader
    r.request(leader, ProduceRequest(1, -1, 5_000, ctp, rec.encode_batch([rec.RecordInput(None, b"x")])))
    assert r.replies(ProduceResponse)[0].error is Errors.INVALID_RECORD  # keys required
    tp = TopicPartition("t", 0)
    for i in range(5):
        r.request(1, ProduceRequest(i, -1, 5_000, tp, rec.encode_batch(
            [rec.RecordInput(None, b"%d" % i, (), 100 * i)])))
        r.tick(10)
    r.replies(ProduceResponse)
    r.request(1, DeleteRecordsRequest(9, tp, 3))
    [resp] = r.replies(DeleteRecordsResponse)
    assert resp.error is Errors.NONE and resp.low_watermark == 3
    r.request(1, DeleteRecordsRequest(10, tp, 99))
    assert r.replies(DeleteRecordsResponse)[0].error is Errors.OFFSET_OUT_OF_RANGE
    r.request(1, FetchRequest(11, -1, -1, 0, 0, (FetchPartition(tp, -1, 0, -1),)))
    assert r.replies(FetchResponse)[0].partitions[0].error is Errors.OFFSET_OUT_OF_RANGE
    r.request(1, ListOffsetsRequest(12, tp, -2))
    assert r.replies(ListOffsetsResponse)[0].offset == 3
    r.request(1, ListOffsetsRequest(13, tp, 150))
    found = r.replies(ListOffsetsResponse)[0]
    assert (found.offset, found.timestamp) == (3, 300)  # 2 was deleted; 3 is the first left
    for _ in range(10):
        r.tick(300)
    for b in (2, 3):  # followers follow the leader's log start
        assert r.nodes[b].partitions[tp].log.log_start_offset == 3


def _newest_by_scan(log: PartitionLog) -> list[int]:
    segments, entries = log.cleanable()
    return [max((rec.parse_header(e.data).max_timestamp for e in entries if e.segment == i), default=-1)
            for i in range(len(segments) - 1)]


def test_closed_segments_newest_timestamps_follow_rolls_cleaning_truncation_and_the_log_start():
    """The cleaner's lag rule reads each closed segment's newest timestamp, remembered: what
    it remembers is what a scan of the index gives after every change of the segments."""
    log = PartitionLog(MemoryStorage(), "t-0", COMPACT)
    ts = 0

    def grow(n: int) -> None:
        nonlocal ts
        for i in range(n):
            ts += 7 if i % 3 else -3  # not in order: the newest is not always the last batch
            write(log, b"k%d" % (i % 4), b"v" * (i % 5 + 1), max(ts, 0))
        log.update_high_watermark(log.log_end_offset)
        assert log.closed_newest_timestamps() == _newest_by_scan(log)

    grow(40)
    assert len(log.cleanable()[0]) > 3
    assert clean(log, 10_000, log.high_watermark) is not None  # the cleaner swaps in new segments
    assert log.closed_newest_timestamps() == _newest_by_scan(log)
    grow(10)
    log.truncate_to(log.log_end_offset - 12)  # later segments deleted, an older one active again
    assert log.closed_newest_timestamps() == _newest_by_scan(log)
    grow(15)
    assert log.increment_log_start_offset(log.cleanable()[0][2].base_offset)  # leading segments go
    assert log.closed_newest_timestamps() == _newest_by_scan(log)
    grow(5)
    log.truncate_fully_and_start_at(log.log_end_offset)  # a follower behind the leader's log start
    grow(20)
