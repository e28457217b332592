"""The partition log: batches at offsets, segments, high watermark, leader-epoch cache.

Theory of operation
-------------------
Offsets are half-open: ``log_end_offset`` (LEO) and ``high_watermark`` (HW) are "the next
offset". The log keeps every batch's bytes in memory (the page cache) and writes them to
segment files through :class:`~reference.storage.Storage`; files are read back only by
:meth:`PartitionLog.open` (recovery), which scans every segment, validates each batch
(framing and CRC-32C) and cuts the log at the first torn or corrupt batch. Nothing before
that point is lost.

The leader-epoch cache maps each leader epoch to the first offset written in it (KIP-101).
``end_offset_for_epoch`` answers OffsetForLeaderEpoch: for the largest epoch <= the one
asked, the offset where the next epoch starts (or the LEO for the latest epoch).

Truncation is at batch granularity, as Kafka's: every batch whose last offset is at or
above the target is removed, so the resulting LEO may be lower than the target.

Durability: a segment that rolls is flushed a moment later, as Kafka's UnifiedLog.roll
schedules its ``flush-log`` task on the broker's scheduler thread: through :attr:`roll_flush`
when the host set it (the broker does, with a timer of :data:`ROLL_FLUSH_MS`; a crash before
it fires loses the rolled segment's unflushed tail), at once otherwise. The active segment is
flushed only by ``flush.messages``, ``flush.ms`` (the broker) or a clean shutdown.

Compaction is decided by :mod:`reference.log_cleaner`, which reads the log's index and swaps
the cleaned segments in through :meth:`PartitionLog.replace_cleaned`; offsets never change.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Final

from reference import records as rec
from reference.log_config import LogConfig
from reference.marks import mark
from reference.producer_state import ProducerStateManager
from reference.storage import Storage

UNDEFINED_EPOCH: Final = -1
UNDEFINED_OFFSET: Final = -1
# how long after a roll the rolled segment is flushed: Kafka's flush-log task runs on the
# scheduler thread at once, and its fsync takes about this long
ROLL_FLUSH_MS = 2


@dataclass(init=False, slots=True)  # its own __init__: compiled, a native one (reference/frozen.py)
class IndexEntry:
    base_offset: int
    last_offset: int
    leader_epoch: int
    data: bytes
    segment: int  # index into PartitionLog._segments
    position: int  # byte position in that segment file

    def __init__(self, base_offset: int, last_offset: int, leader_epoch: int, data: bytes, segment: int,
                 position: int) -> None:
        self.base_offset = base_offset
        self.last_offset = last_offset
        self.leader_epoch = leader_epoch
        self.data = data
        self.segment = segment
        self.position = position


SEGMENT_OF: Final = attrgetter("segment")


@dataclass(slots=True)
class Segment:
    base_offset: int
    name: str
    size: int
    first_timestamp: int = -1  # the first batch's max timestamp: segment.ms counts from it


class PartitionLog:
    """One replica's log of one partition."""

    def __init__(self, storage: Storage, directory: str, config: LogConfig | None = None) -> None:
        self.storage = storage
        self.directory = directory
        self.config = config or LogConfig()
        self._entries: list[IndexEntry] = []
        self._bases: list[int] = []
        self._segments: list[Segment] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.epochs: list[tuple[int, int]] = []  # (leader_epoch, start_offset), ascending
        self._unflushed_messages = 0
        # Kafka's recovery point: every offset below it is flushed (-1: nothing known to be,
        # as after a restart); a flush with the LEO at it has nothing to do and does nothing
        self.recovery_point = -1
        self.recovered_bytes_cut = 0
        self.producer_state = ProducerStateManager()
        self.clean_offset = 0  # the cleaner's checkpoint: [log start, clean_offset) is clean
        self.tombstone_horizons: dict[int, int] = {}  # batch base offset -> delete horizon (ms)
        self.bugs: frozenset[str] = frozenset()
        # flushes a rolled segment (by name) a moment later; None: at once
        self.roll_flush: Callable[[str], None] | None = None
        # each closed segment's newest batch timestamp, as far as asked (Kafka's maxTimestampSoFar;
        # appends never change a closed segment, and what does forgets them: _segments_changed)
        self._closed_newest: list[int] = []
        # one more at every change of the LEO, the HW, the log start, the batches or the
        # producers' state: the invariant checker looks again only after one (a broker shares
        # one count among its logs and partitions)
        self.changes: list[int] = [0]
        self._checkpointed: tuple | None = None  # what checkpoint() last wrote

    # ------------------------------------------------------------ recovery

    @classmethod
    def open(cls, storage: Storage, directory: str, config: LogConfig | None = None) -> PartitionLog:
        """Rebuild a log from storage, cutting a torn or corrupt tail."""
        log = cls(storage, directory, config)
        # gaps between batches are the cleaner's doing, and only below its checkpoint; a gap
        # anywhere else is a corrupt base offset (a field the CRC does not cover)
        clean = log._read_json("meta").get("clean_offset", 0)
        names = [n for n in storage.list(directory + "/") if n.endswith(".log")]
        names.sort(key=lambda n: int(n.rsplit("/", 1)[1][:-4]))
        broken = False
        for name in names:
            if broken:
                storage.delete(name)  # everything after a corrupt batch is unusable
                continue
            data = storage.read(name)
            batches, _span = rec.split_batches(data)
            seg = Segment(int(name.rsplit("/", 1)[1][:-4]), name, 0)
            log._segments.append(seg)
            if not log._entries:
                log.log_end_offset = seg.base_offset  # the log's first batch starts its segment
            # every batch must continue the log where it ended (gaps are compacted or aborted
            # records the cleaner removed)
            for b in batches:
                if not log._continues(rec.base_offset_of(b), clean):
                    break
                log._index(b, len(log._segments) - 1, seg.size)
                if seg.size == 0:
                    seg.first_timestamp = rec.max_timestamp_of(b)
                seg.size += len(b)
            if seg.size < len(data):
                mark("log-recovery-truncated")
                log.recovered_bytes_cut += len(data) - seg.size
                storage.truncate(name, seg.size)
                storage.flush(name)
                broken = True
        if log._segments and log._segments[-1].size == 0 and len(log._segments) > 1:
            storage.delete(log._segments.pop().name)
        log._load_checkpoints()
        log.producer_state = ProducerStateManager.rebuild(log.batches())
        return log

    def _continues(self, base: int, clean: int) -> bool:
        """During recovery: may a batch at ``base`` follow the log as recovered so far?"""
        return base == self.log_end_offset or self.log_end_offset < base <= clean

    def _load_checkpoints(self) -> None:
        meta = self._read_json("meta")
        if self._entries:
            self.log_start_offset = self._entries[0].base_offset
        elif self._segments:
            self.log_start_offset = self.log_end_offset = self._segments[-1].base_offset
        self.log_start_offset = max(self.log_start_offset, meta.get("log_start_offset", 0))
        self.clean_offset = meta.get("clean_offset", 0)
        self.tombstone_horizons = {int(k): v for k, v in meta.get("tombstone_horizons", {}).items()}
        self.log_end_offset = max(self.log_end_offset, self.log_start_offset)
        self.high_watermark = min(max(meta.get("high_watermark", 0), self.log_start_offset),
                                  self.log_end_offset)
        epochs = [tuple(e) for e in self._read_json("leader-epoch-checkpoint").get("epochs", [])]
        # KIP-101: entries for offsets the log no longer holds are dropped; epochs seen in
        # batches but missing from the checkpoint (unflushed) are re-assigned.
        self.epochs = [(e, o) for e, o in epochs if o <= self.log_end_offset]
        for entry in self._entries:
            if not self.epochs or entry.leader_epoch > self.epochs[-1][0]:
                self.epochs.append((entry.leader_epoch, entry.base_offset))
        self._write_epochs()

    def _read_json(self, suffix: str) -> dict:
        name = f"{self.directory}/{suffix}"
        if not self.storage.exists(name):
            return {}
        try:
            return json.loads(self.storage.read(name).decode())
        except (ValueError, UnicodeDecodeError):
            return {}  # a corrupt checkpoint is rebuilt from the log

    # ------------------------------------------------------------ appends

    def append_as_leader(self, batch: bytes, leader_epoch: int) -> tuple[int, int]:
        """Assign offsets and the epoch to a producer's batch and append it.

        Returns (base_offset, last_offset). Raises StorageError when the disk refuses.
        """
        stored = rec.with_offset_and_epoch(batch, self.log_end_offset, leader_epoch)
        self._append(stored)
        return rec.offsets_of(stored)

    def append_as_follower(self, batch: bytes) -> None:
        """Append a batch fetched from the leader; it must start at or after our LEO (after:
        the leader's cleaner removed the records in between)."""
        base = rec.base_offset_of(batch)
        if base < self.log_end_offset:
            raise ValueError(f"follower append at {base} but the log ends at {self.log_end_offset}")
        rec.validate(batch)
        self._append(batch)

    def _append(self, batch: bytes) -> None:
        base, epoch, last_delta, timestamp, producer_id = rec.log_fields_of(batch)
        seg = self._active_segment(len(batch), timestamp)
        self.storage.append(seg.name, batch)  # may raise StorageError: nothing changed yet
        last = base + last_delta
        self._entries.append(IndexEntry(base, last, epoch, batch, len(self._segments) - 1, seg.size))
        self._bases.append(base)
        self.log_end_offset = last + 1
        self.changes[0] += 1
        if producer_id >= 0:
            self.producer_state.update(rec.parse_header(batch), batch)
        if seg.size == 0:
            seg.first_timestamp = timestamp
        seg.size += len(batch)
        if not self.epochs or epoch > self.epochs[-1][0]:
            self.assign_epoch(epoch, base)
        flush_messages = self.config.flush_messages
        if flush_messages is not None:
            self._unflushed_messages += rec.records_count_of(batch)
            if self._unflushed_messages >= flush_messages:
                self.flush()

    def _index(self, batch: bytes, segment: int, position: int) -> None:
        base, last = rec.offsets_of(batch)
        self._entries.append(IndexEntry(base, last, rec.leader_epoch_of(batch), batch, segment, position))
        self._bases.append(base)
        self.log_end_offset = last + 1

    def _active_segment(self, incoming: int, timestamp: int) -> Segment:
        """The segment for a batch of ``incoming`` bytes with max timestamp ``timestamp``:
        a new one when it would overflow segment.bytes or, as Kafka's LogSegment.shouldRoll,
        when it is more than segment.ms younger than the active segment's first batch."""
        if not self._segments:
            return self._roll()
        seg = self._segments[-1]
        segment_ms = self.config.segment_ms
        too_old = segment_ms is not None and seg.first_timestamp >= 0 and timestamp - seg.first_timestamp > segment_ms
        if seg.size > 0 and (seg.size + incoming > self.config.segment_bytes or too_old):
            if self.roll_flush is None:
                self.storage.flush(seg.name)
            else:
                self.roll_flush(seg.name)  # Kafka flushes a segment when it rolls, asynchronously
            return self._roll()
        return seg

    def _roll(self) -> Segment:
        seg = Segment(self.log_end_offset, f"{self.directory}/{self.log_end_offset:020d}.log", 0)
        self._segments.append(seg)
        return seg

    def flush(self, force: bool = False) -> bool:
        """Flush the segments, unless nothing was appended since the last flush (Kafka's
        ``UnifiedLog.flush``: only past the recovery point); ``force``: flush all the same
        (Kafka's clean shutdown, ``flush(true)``). True when it flushed."""
        self._unflushed_messages = 0
        if self.log_end_offset <= self.recovery_point and not force:
            return False
        for seg in self._segments:
            self.storage.flush(seg.name)
        self.recovery_point = self.log_end_offset
        return True

    # ------------------------------------------------------------ epochs

    def assign_epoch(self, leader_epoch: int, start_offset: int) -> None:
        """Record that ``leader_epoch`` begins at ``start_offset`` (a new leader's LEO)."""
        if self.epochs and leader_epoch <= self.epochs[-1][0]:
            return
        # an earlier epoch that began at the same offset never wrote anything: replace it
        while self.epochs and self.epochs[-1][1] >= start_offset:
            self.epochs.pop()
        self.epochs.append((leader_epoch, start_offset))
        self._write_epochs()

    def _write_epochs(self) -> None:
        self.storage.replace(
            f"{self.directory}/leader-epoch-checkpoint",
            json.dumps({"epochs": [list(e) for e in self.epochs]}).encode(),
        )

    @property
    def latest_epoch(self) -> int:
        return self.epochs[-1][0] if self.epochs else UNDEFINED_EPOCH

    def epoch_start_offset(self, leader_epoch: int) -> int | None:
        for e, o in self.epochs:
            if e == leader_epoch:
                return o
        return None

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= asked, the offset where it ends)."""
        if not self.epochs or leader_epoch < self.epochs[0][0]:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        for i in range(len(self.epochs) - 1, -1, -1):
            e, _start = self.epochs[i]
            if e <= leader_epoch:
                if i + 1 < len(self.epochs):
                    return e, self.epochs[i + 1][1]
                return e, self.log_end_offset
        return UNDEFINED_EPOCH, UNDEFINED_OFFSET

    # ------------------------------------------------------------ reads

    def read(self, fetch_offset: int, max_bytes: int, upper_bound: int, min_one: bool = True) -> list[bytes]:
        """Whole batches from the one holding ``fetch_offset``, ending below ``upper_bound``.

        The first batch is returned even when larger than ``max_bytes`` (as Kafka does), unless
        ``min_one`` is false (Kafka's minOneMessage: only the first partition of a fetch that
        returns anything may exceed its limit).
        """
        if fetch_offset >= upper_bound or not self._entries:
            return []
        i = bisect.bisect_right(self._bases, fetch_offset) - 1
        if i < 0:
            i = 0
        out: list[bytes] = []
        size = 0
        entries = self._entries
        while i < len(entries):
            e = entries[i]
            if e.last_offset >= upper_bound:
                break
            if e.last_offset >= fetch_offset:
                if (out or not min_one) and size + len(e.data) > max_bytes:
                    break
                out.append(e.data)
                size += len(e.data)
            i += 1
        return out

    def batch_at(self, offset: int) -> bytes | None:
        """The stored batch that holds ``offset``, if any."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0 or offset > self._entries[i].last_offset:
            return None
        return self._entries[i].data

    def batches(self) -> list[bytes]:
        return [e.data for e in self._entries]

    # ------------------------------------------------------------ truncation & HW

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding an offset >= ``offset``; return the new LEO."""
        if offset >= self.log_end_offset:
            # nothing to remove, but an epoch that starts at or after ``offset`` covers no
            # record (a leader's epoch assigned at its LEO, kept on demotion): without dropping
            # it the follower keeps sending it, the leader keeps answering "diverging", and
            # replication loops on an empty truncation
            if any(o >= offset for _e, o in self.epochs):
                self.epochs = [(e, o) for e, o in self.epochs if o < offset]
                self._write_epochs()
                self.changes[0] += 1  # what a fetch's divergence check reads
            return self.log_end_offset
        i = bisect.bisect_right(self._bases, offset - 1) - 1 if offset > 0 else -1
        # keep entries[0..i] only if entry i ends below offset
        keep = i + 1
        if i >= 0 and self._entries[i].last_offset >= offset:
            keep = i
        if keep < len(self._entries):
            first_removed = self._entries[keep]
            seg_idx = first_removed.segment
            for seg in self._segments[seg_idx + 1 :]:
                self.storage.delete(seg.name)
            del self._segments[seg_idx + 1 :]
            seg = self._segments[seg_idx]
            seg.size = first_removed.position
            self.storage.truncate(seg.name, seg.size)
            del self._entries[keep:]
            del self._bases[keep:]
            self._segments_changed()
            self.producer_state = ProducerStateManager.rebuild(self.batches())
        self.log_end_offset = self._entries[-1].last_offset + 1 if self._entries else (
            self.log_start_offset
        )
        if self.log_end_offset < self.log_start_offset:
            self.log_start_offset = self.log_end_offset
        # Kafka's truncateFromEnd: epochs that start at or after the new LEO are gone
        self.epochs = [(e, o) for e, o in self.epochs if o < self.log_end_offset]
        self._write_epochs()
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.changes[0] += 1
        return self.log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything and restart the log at ``offset`` (the leader's log start)."""
        for seg in self._segments:
            self.storage.delete(seg.name)
        self._segments.clear()
        self._entries.clear()
        self._bases.clear()
        self._segments_changed()
        self.producer_state = ProducerStateManager()
        self.epochs = []
        self._write_epochs()
        self.log_start_offset = self.log_end_offset = self.high_watermark = offset
        self.recovery_point = min(self.recovery_point, offset)
        self.changes[0] += 1
        self.checkpoint()

    def update_high_watermark(self, hw: int) -> bool:
        """Set the HW (clamped to the LEO); True when it changed."""
        hw = min(hw, self.log_end_offset)
        if hw == self.high_watermark:
            return False
        self.high_watermark = hw
        self.changes[0] += 1
        return True

    def checkpoint(self) -> None:
        """Persist HW and log start offset (Kafka's replication-offset-checkpoint); not again
        when nothing in it changed since this log last wrote it."""
        state = (self.high_watermark, self.log_start_offset, self.clean_offset, sorted(self.tombstone_horizons.items()))
        if state == self._checkpointed:
            return
        self.storage.replace(
            f"{self.directory}/meta",
            json.dumps(
                {"high_watermark": state[0], "log_start_offset": state[1], "clean_offset": state[2],
                 "tombstone_horizons": {str(k): v for k, v in state[3]}}
            ).encode(),
        )
        self._checkpointed = state

    # ------------------------------------------------------------ log start, retention

    def increment_log_start_offset(self, offset: int) -> bool:
        """Move the log start forward (DeleteRecords, retention, or the leader's log start);
        segments entirely below it are deleted. Never past the HW. True when it moved."""
        offset = min(offset, self.high_watermark)
        if offset <= self.log_start_offset:
            return False
        self.log_start_offset = offset
        self.changes[0] += 1
        drop = 0
        while drop + 1 < len(self._segments) and self._segments[drop + 1].base_offset <= offset:
            drop += 1
        if drop:
            for seg in self._segments[:drop]:
                self.storage.delete(seg.name)
            del self._segments[:drop]
            keep = [e for e in self._entries if e.segment >= drop]
            for e in keep:
                e.segment -= drop
            self._entries = keep
            self._bases = [e.base_offset for e in keep]
            self._segments_changed()
        # leader epochs: the first kept entry now starts at the log start (truncateFromStart)
        while len(self.epochs) > 1 and self.epochs[1][1] <= offset:
            self.epochs.pop(0)
        if self.epochs and self.epochs[0][1] < offset:
            self.epochs[0] = (self.epochs[0][0], offset)
        self._write_epochs()
        self.clean_offset = max(self.clean_offset, offset)
        self.tombstone_horizons = {b: h for b, h in self.tombstone_horizons.items() if b >= offset}
        self.checkpoint()
        return True

    def apply_retention(self, now_ms: int) -> int:
        """Delete closed segments, entirely below the HW, that are older than retention.ms
        or beyond retention.bytes; returns the new log start offset."""
        cfg = self.config
        if (not cfg.delete or len(self._segments) < 2
                or (cfg.retention_ms is None and cfg.retention_bytes is None)):
            return self.log_start_offset
        sizes = [seg.size for seg in self._segments]
        total = sum(sizes)
        new_start = self.log_start_offset
        by_segment: dict[int, list[IndexEntry]] = {}
        for e in self._entries:
            by_segment.setdefault(e.segment, []).append(e)
        for i in range(len(self._segments) - 1):  # never the active segment
            end = self._segments[i + 1].base_offset
            if end > self.high_watermark:
                break
            entries = by_segment.get(i, [])
            newest = max((rec.parse_header(e.data).max_timestamp for e in entries), default=-1)
            too_old = self.config.retention_ms is not None and newest < now_ms - self.config.retention_ms
            too_big = (self.config.retention_bytes is not None
                       and total - sizes[i] >= self.config.retention_bytes)
            if not (too_old or too_big):
                break
            total -= sizes[i]
            new_start = end
        if new_start > self.log_start_offset:
            self.increment_log_start_offset(new_start)
        return self.log_start_offset

    # ------------------------------------------------------------ timestamps

    def offset_for_timestamp(self, timestamp: int, upper: int) -> tuple[int, int, int] | None:
        """ListOffsets by time: the first record at or after ``timestamp`` and below ``upper``
        (the HW, or the last stable offset for read_committed): (offset, its timestamp, its
        batch's leader epoch), or None."""
        for e in self._entries:
            if e.base_offset >= upper:
                break
            h = rec.parse_header(e.data)
            if h.is_control or h.max_timestamp < timestamp or e.last_offset < self.log_start_offset:
                continue
            for r in rec.decode_records(e.data):
                if self.log_start_offset <= r.offset < upper and r.timestamp >= timestamp:
                    return r.offset, r.timestamp, e.leader_epoch
        return None

    def offset_of_max_timestamp(self, upper: int) -> tuple[int, int, int] | None:
        """ListOffsets MAX_TIMESTAMP (-3, KIP-734) as Kafka's UnifiedLog answers it: the first
        batch whose max timestamp is the log's largest, and in it the first record with that
        timestamp: (offset, timestamp, the batch's leader epoch); None when that offset is not
        below ``upper`` or the log is empty."""
        best: IndexEntry | None = None
        best_ts = -1
        for e in self._entries:
            if e.last_offset < self.log_start_offset:
                continue
            ts = rec.max_timestamp_of(e.data)
            if best is None or ts > best_ts:
                best, best_ts = e, ts
        if best is None:
            return None
        offset = best.base_offset
        if not rec.parse_header(best.data).is_control:
            offset = next(r.offset for r in rec.decode_records(best.data) if r.timestamp == best_ts)
        return (offset, best_ts, best.leader_epoch) if offset < upper else None

    # ------------------------------------------------------------ the cleaner's access

    def cleanable(self) -> tuple[list[Segment], list[IndexEntry]]:
        """The segments (the last one active) and every batch's index entry, in offset order
        (so in segment order), for the cleaner (:mod:`reference.log_cleaner`) to read; it
        changes them only through :meth:`replace_cleaned`."""
        return self._segments, self._entries

    def closed_newest_timestamps(self) -> list[int]:
        """The newest (largest) batch timestamp of each closed segment, every one but the
        active; -1 for a segment the cleaner emptied."""
        known, entries = self._closed_newest, self._entries
        for k in range(len(known), len(self._segments) - 1):
            first = bisect.bisect_left(entries, k, key=SEGMENT_OF)
            end = bisect.bisect_left(entries, k + 1, lo=first, key=SEGMENT_OF)
            known.append(max((rec.parse_header(e.data).max_timestamp for e in entries[first:end]), default=-1))
        return known

    def _segments_changed(self) -> None:
        self._closed_newest = []

    def replace_cleaned(self, end_offset: int, end_segment: int, new_segments: dict[int, list[bytes]]) -> None:
        """Swap in the cleaned batches of segments ``[0, end_segment)``, which hold the
        offsets below ``end_offset``: the cleaner's checkpoint first (recovery accepts gaps
        only below it), then each segment whose bytes changed (atomically, as Kafka swaps in
        .cleaned files), then the index, and the checkpoint again (the tombstone horizons)."""
        self.clean_offset = end_offset
        self.changes[0] += 1
        self.checkpoint()
        held: dict[int, list[bytes]] = {}  # segment -> its batches now
        for e in self._entries:
            if e.segment < end_segment:
                held.setdefault(e.segment, []).append(e.data)
        for i in range(end_segment):
            seg = self._segments[i]
            data = b"".join(new_segments.get(i, []))
            if data == b"".join(held.get(i, [])):
                continue
            self.storage.replace(seg.name, data)
            seg.size = len(data)
        self._reindex()
        self.checkpoint()

    def _reindex(self) -> None:
        """Rebuild the in-memory index from the segment files (after the cleaner)."""
        self._entries = []
        self._bases = []
        self._segments_changed()
        end = self.log_end_offset
        for i, seg in enumerate(self._segments):
            batches, _span = rec.split_batches(self.storage.read(seg.name))
            pos = 0
            for b in batches:
                self._entries.append(IndexEntry(rec.base_offset_of(b), rec.last_offset_of(b),
                                            rec.leader_epoch_of(b), b, i, pos))
                self._bases.append(rec.base_offset_of(b))
                pos += len(b)
        self.log_end_offset = end  # cleaning never changes the LEO
