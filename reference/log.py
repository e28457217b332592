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
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass

from reference import records as rec
from reference.producer_state import ProducerStateManager
from reference.storage import Storage

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


@dataclass(slots=True)
class _Entry:
    base_offset: int
    last_offset: int
    leader_epoch: int
    data: bytes
    segment: int  # index into PartitionLog._segments
    position: int  # byte position in that segment file


@dataclass(slots=True)
class _Segment:
    base_offset: int
    name: str
    size: int


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1 << 20
    flush_messages: int | None = None  # Kafka's flush.messages; None = never (the default)


class PartitionLog:
    """One replica's log of one partition."""

    def __init__(self, storage: Storage, directory: str, config: LogConfig | None = None) -> None:
        self.storage = storage
        self.directory = directory
        self.config = config or LogConfig()
        self._entries: list[_Entry] = []
        self._bases: list[int] = []
        self._segments: list[_Segment] = []
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.high_watermark = 0
        self.epochs: list[tuple[int, int]] = []  # (leader_epoch, start_offset), ascending
        self._unflushed_messages = 0
        self.recovered_bytes_cut = 0
        self.producer_state = ProducerStateManager()

    # ------------------------------------------------------------ recovery

    @classmethod
    def open(cls, storage: Storage, directory: str, config: LogConfig | None = None) -> PartitionLog:
        """Rebuild a log from storage, cutting a torn or corrupt tail."""
        log = cls(storage, directory, config)
        names = [n for n in storage.list(directory + "/") if n.endswith(".log")]
        names.sort(key=lambda n: int(n.rsplit("/", 1)[1][:-4]))
        broken = False
        for name in names:
            if broken:
                storage.delete(name)  # everything after a corrupt batch is unusable
                continue
            data = storage.read(name)
            batches, _span = rec.split_batches(data)
            seg = _Segment(int(name.rsplit("/", 1)[1][:-4]), name, 0)
            # a segment must continue the log exactly where the previous one ended
            if log._segments and batches and rec.base_offset_of(batches[0]) != log.log_end_offset:
                batches = []
            log._segments.append(seg)
            for b in batches:
                if log._entries and rec.base_offset_of(b) != log.log_end_offset:
                    break
                log._index(b, len(log._segments) - 1, seg.size)
                seg.size += len(b)
            if seg.size < len(data):
                log.recovered_bytes_cut += len(data) - seg.size
                storage.truncate(name, seg.size)
                storage.flush(name)
                broken = True
        if log._segments and log._segments[-1].size == 0 and len(log._segments) > 1:
            storage.delete(log._segments.pop().name)
        log._load_checkpoints()
        log.producer_state = ProducerStateManager.rebuild(log.batches())
        return log

    def _load_checkpoints(self) -> None:
        meta = self._read_json("meta")
        if self._entries:
            self.log_start_offset = self._entries[0].base_offset
        elif self._segments:
            self.log_start_offset = self.log_end_offset = self._segments[-1].base_offset
        self.log_start_offset = max(self.log_start_offset, meta.get("log_start_offset", 0))
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
        return rec.base_offset_of(stored), rec.last_offset_of(stored)

    def append_as_follower(self, batch: bytes) -> None:
        """Append a batch fetched from the leader; it must start at our LEO."""
        base = rec.base_offset_of(batch)
        if base != self.log_end_offset:
            raise ValueError(f"follower append at {base} but the log ends at {self.log_end_offset}")
        rec.validate(batch)
        self._append(batch)

    def _append(self, batch: bytes) -> None:
        seg = self._active_segment(len(batch))
        self.storage.append(seg.name, batch)  # may raise StorageError: nothing changed yet
        epoch = rec.leader_epoch_of(batch)
        self._index(batch, len(self._segments) - 1, seg.size)
        if rec.producer_id_of(batch) >= 0:
            self.producer_state.update(rec.parse_header(batch), batch)
        seg.size += len(batch)
        if not self.epochs or epoch > self.epochs[-1][0]:
            self.assign_epoch(epoch, rec.base_offset_of(batch))
        flush_messages = self.config.flush_messages
        if flush_messages is not None:
            self._unflushed_messages += rec.records_count_of(batch)
            if self._unflushed_messages >= flush_messages:
                self.flush()

    def _index(self, batch: bytes, segment: int, position: int) -> None:
        base, last = rec.base_offset_of(batch), rec.last_offset_of(batch)
        self._entries.append(_Entry(base, last, rec.leader_epoch_of(batch), batch, segment, position))
        self._bases.append(base)
        self.log_end_offset = last + 1

    def _active_segment(self, incoming: int) -> _Segment:
        if not self._segments:
            return self._roll()
        seg = self._segments[-1]
        if seg.size > 0 and seg.size + incoming > self.config.segment_bytes:
            self.storage.flush(seg.name)  # Kafka flushes a segment when it rolls
            return self._roll()
        return seg

    def _roll(self) -> _Segment:
        seg = _Segment(self.log_end_offset, f"{self.directory}/{self.log_end_offset:020d}.log", 0)
        self._segments.append(seg)
        return seg

    def flush(self) -> None:
        for seg in self._segments:
            self.storage.flush(seg.name)
        self._unflushed_messages = 0

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

    def read(self, fetch_offset: int, max_bytes: int, upper_bound: int) -> list[bytes]:
        """Whole batches from the one holding ``fetch_offset``, ending below ``upper_bound``.

        The first batch is returned even when larger than ``max_bytes`` (as Kafka does).
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
                if out and size + len(e.data) > max_bytes:
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
        return self.log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything and restart the log at ``offset`` (the leader's log start)."""
        for seg in self._segments:
            self.storage.delete(seg.name)
        self._segments.clear()
        self._entries.clear()
        self._bases.clear()
        self.producer_state = ProducerStateManager()
        self.epochs = []
        self._write_epochs()
        self.log_start_offset = self.log_end_offset = self.high_watermark = offset
        self.checkpoint()

    def update_high_watermark(self, hw: int) -> bool:
        """Set the HW (clamped to the LEO); True when it changed."""
        hw = min(hw, self.log_end_offset)
        if hw == self.high_watermark:
            return False
        self.high_watermark = hw
        return True

    def checkpoint(self) -> None:
        """Persist HW and log start offset (Kafka's replication-offset-checkpoint)."""
        self.storage.replace(
            f"{self.directory}/meta",
            json.dumps(
                {"high_watermark": self.high_watermark, "log_start_offset": self.log_start_offset}
            ).encode(),
        )
