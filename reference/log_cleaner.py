"""The log cleaner: compaction of one partition log (Kafka's LogCleaner).

Rules, in the order :func:`clean` applies them:

1. Only whole closed segments below ``upper`` (the last stable offset, at most the high
   watermark: an open transaction's records are never cleaned) whose newest record is older
   than ``min.compaction.lag.ms`` are cleanable.
2. Cleaning is due when the dirty part (at or above the cleaner's checkpoint) is at least
   ``min.cleanable.dirty.ratio`` of the cleanable bytes, when a dirty batch is older than
   ``max.compaction.lag.ms``, or when a tombstone's delete horizon has passed.
3. The offset map holds each record key's newest offset in the cleanable range.
4. A record survives if it is its key's newest, is not a tombstone past its horizon
   (``delete.retention.ms`` after the cleaning that first kept it), and is not part of an
   aborted transaction. Control batches always survive, and so does a producer's last batch
   (emptied if need be: it carries the producer's state).
5. Offsets never change; the log swaps the cleaned segments in
   (:meth:`~reference.log.PartitionLog.replace_cleaned`).
"""

from __future__ import annotations

import bisect

from reference import records as rec
from reference.bugs import Bug
from reference.frozen import frozen
from reference.log import SEGMENT_OF, IndexEntry, PartitionLog
from reference.marks import mark


@frozen
class CleanResult:
    first_offset: int
    end_offset: int  # cleaned [first_offset, end_offset)
    records_removed: int
    tombstones_removed: int
    aborted_removed: int


def clean(log: PartitionLog, now_ms: int, upper: int) -> CleanResult | None:
    """Compact the cleanable segments of ``log`` below ``upper``; None when not due."""
    if not log.config.compact:
        return None
    end_segment, entries = _cleanable(log, now_ms, upper)
    if end_segment == 0:
        return None
    segments, _ = log.cleanable()
    end = segments[end_segment].base_offset
    if not _due(log, entries, end, now_ms):
        return None
    latest, decoded = _offset_map(log, entries)
    new_segments, removed, tombstones, aborted_removed = _filter(log, entries, latest, decoded, now_ms)
    first = log.clean_offset
    log.replace_cleaned(end, end_segment, new_segments)
    if removed:
        mark("cleaner-removed-records")
    if tombstones:
        mark("cleaner-removed-tombstone")
    if aborted_removed:
        mark("cleaner-removed-aborted")
    return CleanResult(first, end, removed, tombstones, aborted_removed)


def _cleanable(log: PartitionLog, now_ms: int, upper: int) -> tuple[int, list[IndexEntry]]:
    """Rule 1: the number of leading segments that may be cleaned, and their batches."""
    segments, entries = log.cleanable()
    if len(segments) < 2:
        return 0, []
    newest = log.closed_newest_timestamps()
    lag_bound = now_ms - log.config.min_compaction_lag_ms
    end_segment = 0
    for i in range(len(segments) - 1):
        if segments[i + 1].base_offset > upper or newest[i] > lag_bound:
            break
        end_segment = i + 1
    return end_segment, entries[:bisect.bisect_left(entries, end_segment, key=SEGMENT_OF)]


def _due(log: PartitionLog, entries: list[IndexEntry], end: int, now_ms: int) -> bool:
    """Rule 2."""
    cfg = log.config
    clean = log.clean_offset
    dirty = total = 0
    for e in entries:
        size = len(e.data)
        total += size
        if e.last_offset >= clean:
            dirty += size
    overdue = cfg.max_compaction_lag_ms is not None and any(
        e.last_offset >= clean
        and rec.parse_header(e.data).base_timestamp < now_ms - cfg.max_compaction_lag_ms
        for e in entries)
    expired = any(h <= now_ms for b, h in log.tombstone_horizons.items() if b < end)
    return expired or bool(dirty and (dirty / total >= cfg.min_cleanable_dirty_ratio or overdue))


def _offset_map(log: PartitionLog, entries: list[IndexEntry]) -> tuple[dict[bytes, int], dict[int, list[rec.Record]]]:
    """Rule 3: each key's newest offset; and the records of every data batch, decoded once."""
    latest: dict[bytes, int] = {}
    decoded: dict[int, list[rec.Record]] = {}
    last_batch = entries[-1].base_offset if entries else -1
    for e in entries:
        if rec.parse_header(e.data).is_control:
            continue
        decoded[e.base_offset] = rec.decode_records(e.data)
        if Bug.COMPACTION_DROPS_LATEST in log.bugs and e.base_offset == last_batch:
            continue  # the bug: the map misses the newest batch of the range
        for r in decoded[e.base_offset]:
            if r.key is not None:
                latest[r.key] = r.offset
    return latest, decoded


def _filter(log: PartitionLog, entries: list[IndexEntry], latest: dict[bytes, int],
            decoded: dict[int, list[rec.Record]], now_ms: int) -> tuple[dict[int, list[bytes]], int, int, int]:
    """Rule 4: each cleaned segment's batches, and how many records, tombstones and records
    of aborted transactions were removed. Records the tombstone horizons as it goes."""
    aborted = [(a.producer_id, a.first_offset, a.last_offset) for a in log.producer_state.aborted]
    last_of_producer: dict[int, int] = {}
    for e in log.cleanable()[1]:
        pid = rec.producer_id_of(e.data)
        if pid >= 0:
            last_of_producer[pid] = e.base_offset
    removed = tombstones = aborted_removed = 0
    new_segments: dict[int, list[bytes]] = {}
    for e in entries:
        h = rec.parse_header(e.data)
        if h.is_control:
            new_segments.setdefault(e.segment, []).append(e.data)
            continue
        records = decoded[e.base_offset]
        in_aborted = h.is_transactional and any(
            pid == h.producer_id and first <= h.base_offset <= last for pid, first, last in aborted)
        horizon = log.tombstone_horizons.get(e.base_offset)
        kept = []
        for r in records:
            if in_aborted:
                aborted_removed += 1
                continue
            if r.key is not None and latest.get(r.key, r.offset) != r.offset:
                removed += 1
                continue
            if r.key is not None and r.value is None and horizon is not None and horizon <= now_ms:
                tombstones += 1
                continue
            kept.append(r)
        if any(r.value is None and r.key is not None for r in kept):
            if horizon is None:
                log.tombstone_horizons[e.base_offset] = now_ms + log.config.delete_retention_ms
        else:
            log.tombstone_horizons.pop(e.base_offset, None)
        if len(kept) == len(records):
            new_segments.setdefault(e.segment, []).append(e.data)
        elif kept or last_of_producer.get(h.producer_id) == e.base_offset:
            new_segments.setdefault(e.segment, []).append(rec.rewrite_batch(h, kept))
        else:
            new_segments.setdefault(e.segment, [])
    return new_segments, removed, tombstones, aborted_removed
