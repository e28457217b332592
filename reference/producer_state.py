"""The broker's idempotent-producer state for one partition (Kafka's ProducerStateManager).

Rules
-----
* Per producer id the broker keeps the producer epoch and the metadata of its last
  ``BATCHES_KEPT_MAX`` (5, as Kafka) batches: first and last sequence, first and last offset.
* A batch is accepted when its base sequence follows the last one (``last + 1``); a new
  producer, or a new epoch, starts at sequence 0.
* A batch equal in sequences to a kept one is a duplicate (a retry of something already
  written): the leader answers it with the original offsets and appends nothing.
* An older epoch is ``INVALID_PRODUCER_EPOCH``; a gap is ``OUT_OF_ORDER_SEQUENCE_NUMBER``; a
  non-zero first sequence from a producer the partition does not know is
  ``UNKNOWN_PRODUCER_ID``.

The state is derived from the log: every append (leader or follower) updates it, and it is
rebuilt from the batch headers after recovery or truncation, so it survives leader changes
and restarts.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from reference import records as rec
from reference.errors import Errors

BATCHES_KEPT_MAX = 5


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    producer_epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT_MAX))


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, h: rec.BatchHeader) -> tuple[Errors, BatchMetadata | None]:
        """Validate a producer's batch before the leader appends it.

        Returns (NONE, None) to append, (DUPLICATE_SEQUENCE_NUMBER, original) for a retry of a
        batch already in the log, or (error, None) to refuse it.
        """
        if h.producer_id < 0:
            return Errors.NONE, None  # not an idempotent producer
        e = self.producers.get(h.producer_id)
        if e is None:
            if h.base_sequence != 0:
                return Errors.UNKNOWN_PRODUCER_ID, None
            return Errors.NONE, None
        if h.producer_epoch < e.producer_epoch:
            return Errors.INVALID_PRODUCER_EPOCH, None
        if h.producer_epoch > e.producer_epoch:
            if h.base_sequence != 0:
                return Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, None
            return Errors.NONE, None
        last_sequence = h.base_sequence + h.last_offset_delta
        for b in e.batches:
            if b.first_sequence == h.base_sequence and b.last_sequence == last_sequence:
                return Errors.DUPLICATE_SEQUENCE_NUMBER, b
        expected = e.batches[-1].last_sequence + 1 if e.batches else 0
        if h.base_sequence != expected:
            return Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return Errors.NONE, None

    def update(self, h: rec.BatchHeader) -> None:
        """Record an appended batch (leader or follower); ``h`` carries its final offsets."""
        if h.producer_id < 0 or h.is_control:
            return
        e = self.producers.get(h.producer_id)
        if e is None or h.producer_epoch > e.producer_epoch:
            e = self.producers[h.producer_id] = ProducerEntry(h.producer_epoch)
        e.batches.append(BatchMetadata(h.base_sequence, h.base_sequence + h.last_offset_delta,
                                       h.base_offset, h.last_offset))

    @classmethod
    def rebuild(cls, batches: list[bytes]) -> ProducerStateManager:
        state = cls()
        for b in batches:
            state.update(rec.parse_header(b))
        return state
