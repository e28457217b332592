"""The partition log: appends, reads, epochs, truncation, recovery of torn and corrupt tails."""

from __future__ import annotations

import random

from fault_injection.disk import SimDisk
from reference import records as rec
from reference.log import PartitionLog
from reference.log_config import LogConfig
from reference.storage import MemoryStorage


def batch(*values: bytes) -> bytes:
    return rec.encode_batch([rec.RecordInput(None, v) for v in values])


def values(log: PartitionLog) -> list[bytes]:
    return [r.value for b in log.batches() for r in rec.decode_records(b)]


def test_leader_appends_assign_offsets_and_epochs():
    log = PartitionLog(MemoryStorage(), "t-0")
    assert log.append_as_leader(batch(b"a", b"b"), 0) == (0, 1)
    assert log.append_as_leader(batch(b"c"), 2) == (2, 2)
    assert log.log_end_offset == 3
    assert log.epochs == [(0, 0), (2, 2)]
    assert log.end_offset_for_epoch(0) == (0, 2)
    assert log.end_offset_for_epoch(1) == (0, 2)  # largest epoch <= 1 is 0
    assert log.end_offset_for_epoch(2) == (2, 3)
    assert log.end_offset_for_epoch(-5) == (-1, -1)


def test_reads_return_whole_batches_below_the_upper_bound():
    log = PartitionLog(MemoryStorage(), "t-0")
    for v in (b"a", b"b", b"c"):
        log.append_as_leader(batch(v), 0)
    assert [rec.base_offset_of(b) for b in log.read(1, 1 << 20, 3)] == [1, 2]
    assert [rec.base_offset_of(b) for b in log.read(0, 1 << 20, 2)] == [0, 1]
    assert log.read(2, 1 << 20, 2) == []


def test_truncation_removes_batches_and_epochs_at_or_above_the_offset():
    log = PartitionLog(MemoryStorage(), "t-0")
    log.append_as_leader(batch(b"a"), 0)
    log.append_as_leader(batch(b"b", b"c"), 1)
    log.update_high_watermark(3)
    assert log.truncate_to(2) == 1  # batch granularity: [1, 2] goes entirely
    assert values(log) == [b"a"]
    assert log.epochs == [(0, 0)]
    assert log.high_watermark == 1


def test_recovery_cuts_a_torn_tail_and_keeps_everything_before_it():
    storage = MemoryStorage()
    log = PartitionLog(storage, "t-0", LogConfig(segment_bytes=150))
    for i in range(6):
        log.append_as_leader(batch(b"v%d" % i), i // 3)
    name = storage.list("t-0/")[-2]
    assert name.endswith(".log")
    storage.files[name] = storage.files[name][:-7]  # a crash in the middle of the last batch
    recovered = PartitionLog.open(storage, "t-0", LogConfig(segment_bytes=150))
    assert values(recovered) == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    assert recovered.recovered_bytes_cut > 0
    assert recovered.log_end_offset == 5
    assert recovered.epochs == [(0, 0), (1, 3)]


def test_recovery_cuts_at_a_corrupt_batch_and_drops_later_segments():
    storage = MemoryStorage()
    log = PartitionLog(storage, "t-0", LogConfig(segment_bytes=100))
    for i in range(6):
        log.append_as_leader(batch(b"v%d" % i), 0)
    segments = [n for n in storage.list("t-0/") if n.endswith(".log")]
    assert len(segments) > 2
    storage.files[segments[1]][-3] ^= 0x01  # bit flip in the last batch of segment 2
    recovered = PartitionLog.open(storage, "t-0", LogConfig(segment_bytes=100))
    kept = values(recovered)
    assert kept == [b"v%d" % i for i in range(len(kept))]
    assert 0 < len(kept) < 6
    assert [n for n in storage.list("t-0/") if n.endswith(".log")][-1] <= segments[1]


def test_high_watermark_checkpoint_survives_a_restart_clamped_to_the_log():
    storage = MemoryStorage()
    log = PartitionLog(storage, "t-0")
    log.append_as_leader(batch(b"a", b"b"), 0)
    log.update_high_watermark(2)
    log.checkpoint()
    log.truncate_to(0)
    recovered = PartitionLog.open(storage, "t-0")
    assert recovered.log_end_offset == 0 and recovered.high_watermark == 0


def test_follower_append_rejects_an_overlap_and_accepts_a_gap_left_by_the_cleaner():
    log = PartitionLog(MemoryStorage(), "t-0")
    log.append_as_follower(rec.with_offset_and_epoch(batch(b"a"), 0, 0))
    try:
        log.append_as_follower(rec.with_offset_and_epoch(batch(b"b"), 0, 0))
    except ValueError as e:
        assert "ends at 1" in str(e)
    else:
        raise AssertionError("a batch overlapping the log was appended")
    log.append_as_follower(rec.with_offset_and_epoch(batch(b"c"), 5, 0))  # 1..4 were compacted
    assert log.log_end_offset == 6


def test_recovery_cuts_at_a_corrupt_base_offset_the_crc_does_not_cover():
    storage = MemoryStorage()
    log = PartitionLog(storage, "t-0")
    for v in (b"a", b"b", b"c", b"d"):
        log.append_as_leader(batch(v), 0)
    name = next(n for n in storage.list("t-0/") if n.endswith(".log"))
    data = bytearray(storage.read(name))
    third = sum(len(b) for b in log.batches()[:2])
    data[third + 7] ^= 0x04  # base offset 2 becomes 6: the CRC still matches
    storage.replace(name, bytes(data))
    again = PartitionLog.open(storage, "t-0")
    assert again.log_end_offset == 2  # cut there, not a silent jump to offset 6


def test_recovery_cuts_a_corrupt_base_offset_on_the_first_batch_too():
    """The first batch has no batch before it to continue: it must start its segment. (The txn
    workload at seed 5 corrupted byte 7 of t0:1's first segment; the replica recovered its
    offset-0 batch as offset 16 and held it below its high watermark: log-matching broke.)"""
    storage = MemoryStorage()
    log = PartitionLog(storage, "t-0")
    for v in (b"a", b"b", b"c"):
        log.append_as_leader(batch(v), 0)
    name = next(n for n in storage.list("t-0/") if n.endswith(".log"))
    data = bytearray(storage.read(name))
    data[7] ^= 0x10  # base offset 0 becomes 16: the CRC still matches
    storage.replace(name, bytes(data))
    again = PartitionLog.open(storage, "t-0")
    assert again.log_end_offset == 0 and again.batches() == []


def stamped(value: bytes, timestamp_ms: int) -> bytes:
    return rec.encode_batch([rec.RecordInput(None, value, timestamp=timestamp_ms)])


def test_segment_ms_rolls_a_segment_once_a_batch_is_more_than_that_younger_than_its_first():
    """Kafka's LogSegment.shouldRoll: the time waited is the incoming batch's max timestamp
    minus the active segment's first batch's; it rolls when that exceeds segment.ms."""
    storage = MemoryStorage()
    log = PartitionLog(storage, "t-0", LogConfig(segment_ms=100))
    for value, ts in ((b"a", 1000), (b"b", 1050), (b"c", 1100), (b"d", 1101), (b"e", 1150), (b"f", 1202)):
        log.append_as_leader(stamped(value, ts), 0)
    # a, b, c: c waited exactly 100 ms (not more); d opens a segment at 1101; f waited 101 ms
    assert [s.base_offset for s in log._segments] == [0, 3, 5]
    reopened = PartitionLog.open(storage, "t-0", LogConfig(segment_ms=100))
    assert [s.first_timestamp for s in reopened._segments] == [1000, 1101, 1202]
    reopened.append_as_leader(stamped(b"g", 1302), 0)
    assert [s.base_offset for s in reopened._segments] == [0, 3, 5]  # 100 ms after f: not more
    reopened.append_as_leader(stamped(b"h", 1303), 0)
    assert [s.base_offset for s in reopened._segments] == [0, 3, 5, 7]
    assert values(reopened) == [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"]


def test_without_segment_ms_only_size_rolls_segments():
    log = PartitionLog(MemoryStorage(), "t-0", LogConfig())
    for i, ts in enumerate((0, 10**9, 2 * 10**9)):
        log.append_as_leader(stamped(b"%d" % i, ts), 0)
    assert len(log._segments) == 1
    assert LogConfig.from_topic(LogConfig(), {"segment.ms": "100"}).segment_ms == 100


def test_a_rolled_segment_is_flushed_only_when_its_roll_flush_runs():
    """Kafka flushes a rolled segment on its scheduler thread, a moment after the roll: a power
    loss before then loses the segment's unflushed tail, and recovery cuts the log there (the
    newer segment no longer continues it); once the flush ran, only the active segment's
    unflushed records are lost."""
    for flushed in (False, True):
        disk = SimDisk(1)
        log = PartitionLog(disk, "t-0", LogConfig(segment_bytes=150))
        rolled: list[str] = []
        log.roll_flush = rolled.append
        for i in range(4):
            log.append_as_leader(batch(b"v%d" % i), 0)
        assert rolled == [n for n in disk.list("t-0/") if n.endswith(".log")][:-1] != []
        active = int(max(n for n in disk.list("t-0/") if n.endswith(".log")).rsplit("/", 1)[1][:-4])
        if flushed:
            for name in rolled:
                disk.flush(name)
        disk.crash(random.Random(0))
        kept = values(PartitionLog.open(disk, "t-0", LogConfig(segment_bytes=150)))
        assert kept == [b"v%d" % i for i in range(active if flushed else 0)]
        assert (len(kept) > 0) is flushed


def test_a_checkpoint_is_written_again_only_when_what_it_holds_changed():
    class Counting(MemoryStorage):
        def __init__(self) -> None:
            super().__init__()
            self.replaced: list[str] = []

        def replace(self, name: str, data: bytes) -> None:
            self.replaced.append(name)
            super().replace(name, data)

    storage = Counting()
    log = PartitionLog(storage, "t-0")
    log.append_as_leader(batch(b"a", b"b"), 0)
    log.checkpoint()
    log.checkpoint()
    assert storage.replaced.count("t-0/meta") == 1
    log.update_high_watermark(2)
    log.checkpoint()
    log.checkpoint()
    assert storage.replaced.count("t-0/meta") == 2
    log.tombstone_horizons[0] = 99
    log.checkpoint()
    assert storage.replaced.count("t-0/meta") == 3
    reopened = PartitionLog.open(storage, "t-0")
    assert (reopened.high_watermark, reopened.tombstone_horizons) == (2, {0: 99})


def test_a_flush_with_nothing_new_does_not_fsync_and_every_change_flushes_again():
    """Kafka's flush does nothing unless the log end is past the recovery point (what the last
    flush covered): no fsync, no event. Truncation moves the recovery point back, so bytes
    written again at the same offsets are flushed, and survive a power loss, like any others."""
    disk = SimDisk(1)
    log = PartitionLog(disk, "t-0")
    log.append_as_leader(batch(b"a"), 0)
    log.append_as_leader(batch(b"b"), 0)
    assert log.flush() is True
    fsyncs = disk.flushes
    assert log.flush() is False and disk.flushes == fsyncs  # nothing new: no fsync
    log.truncate_to(1)
    log.append_as_leader(batch(b"c"), 1)  # the LEO is back where the last flush left it
    assert log.flush() is True and disk.flushes > fsyncs
    log.truncate_fully_and_start_at(1)  # below the recovery point (2)
    log.append_as_leader(batch(b"d"), 2)
    assert log.flush() is True
    assert log.flush() is False
    assert log.flush(force=True) is True  # a clean shutdown flushes all the same
    disk.crash(random.Random(0))
    assert values(PartitionLog.open(disk, "t-0")) == [b"d"]


def test_a_reopened_log_flushes_at_its_first_flush():
    """After a restart nothing is known to be flushed (the page cache may hold what the old
    process wrote): the first flush fsyncs whatever the log holds."""
    disk = SimDisk(1)
    log = PartitionLog(disk, "t-0")
    log.append_as_leader(batch(b"a"), 0)
    reopened = PartitionLog.open(disk, "t-0")  # a process restart: the bytes are not durable yet
    assert reopened.flush() is True
    disk.crash(random.Random(0))
    assert values(PartitionLog.open(disk, "t-0")) == [b"a"]


def test_an_empty_truncation_that_drops_an_epoch_counts_a_change():
    """The epochs are what a follower's fetch is checked against (divergence): dropping one
    is a change the broker counts, even when no batch goes (a waiting fetch is read again)."""
    log = PartitionLog(MemoryStorage(), "t-0")
    log.append_as_leader(batch(b"a"), 0)
    log.assign_epoch(3, 1)  # a leader's epoch begun at its LEO, with no record in it
    before = log.changes[0]
    assert log.truncate_to(1) == 1
    assert log.epochs == [(0, 0)] and log.changes[0] > before
