"""The broker's idempotent-producer state for one partition (Kafka's ProducerStateManager).

Rules
-----
* Per producer id the broker keeps the producer epoch and the metadata of its last
  ``BATCHES_KEPT_MAX`` (5, as Kafka) batches: first and last sequence, first and last offset.
* A batch is accepted when its base sequence follows the last one (``last + 1``); a new
  producer, or a new epoch, starts at sequence 0.
* A batch equal in sequences to a kept one is a duplicate (a retry of something already
  written): the leader answers it with the original offsets and appends nothing.
* An older epoch is ``INVALID_PRODUCER_EPOCH``; a gap is ``OUT_OF_ORDER_SEQUENCE_NUMBER``. A
  producer the partition has no state for (new, or its batches deleted by retention or
  DeleteRecords) may start at any sequence, as Kafka's ProducerAppendInfo.checkSequence allows
  (Apache Kafka 4.3.1 accepts it: the differential suite's ``idempotence`` script).
* Sequences wrap from 2**31 - 1 to 0 (Kafka's DefaultRecordBatch.incrementSequence).

Transactions
------------
* A producer's first transactional batch in this partition opens its transaction here
  (``txn_first_offset``); the end marker (a control batch) closes it. An abort marker
  adds ``(producer id, first offset, marker offset)`` to the aborted-transaction index that
  read_committed fetches return.
* The last stable offset is the high watermark, or the first offset of the earliest
  transaction that is open or whose marker is not yet below the high watermark.
* A marker may carry a newer epoch (the coordinator bumped it to fence a producer, or
  transaction version 2): the producer's sequence numbers then start again at 0.
* A non-transactional batch from a producer with an open transaction here is
  ``INVALID_TXN_STATE``; a marker from an older epoch is ``INVALID_PRODUCER_EPOCH``, one from an
  older transaction coordinator (a lower coordinator epoch than the last marker's)
  ``TRANSACTION_COORDINATOR_FENCED``.

The state is derived from the log: every append (leader or follower) updates it, and it is
rebuilt from the batch headers after recovery or truncation, so it survives leader changes
and restarts.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Final

from reference import records as rec
from reference.errors import Errors
from reference.frozen import frozen

BATCHES_KEPT_MAX = 5
SEQUENCE_MAX: Final = 2**31 - 1


def last_sequence_of(h: rec.BatchHeader) -> int:
    """The sequence of a batch's last record, wrapping past SEQUENCE_MAX to 0."""
    last = h.base_sequence + h.last_offset_delta
    return last - SEQUENCE_MAX - 1 if last > SEQUENCE_MAX else last


def next_sequence(sequence: int) -> int:
    return 0 if sequence == SEQUENCE_MAX else sequence + 1


@frozen
class BatchMetadata:
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    producer_epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT_MAX))
    txn_first_offset: int = -1  # first offset of the transaction open here, -1 when none
    coordinator_epoch: int = -1  # of the last marker: an older coordinator is fenced
    last_timestamp: int = -1  # the max timestamp of its last batch or marker (DescribeProducers)


@frozen
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.aborted: list[AbortedTxn] = []
        # KIP-890 part 1's verification guards: producer id -> the token of its verification in
        # flight; a marker for the producer removes it, so a write verified before the marker
        # cannot land after it and open a transaction nobody will end
        self.verification_guards: dict[int, int] = {}
        self._last_guard = 0
        # transactions whose marker is written but maybe not yet below the HW: (first, marker)
        self._completed: list[tuple[int, int]] = []

    def check(self, h: rec.BatchHeader) -> tuple[Errors, BatchMetadata | None]:
        """Validate a producer's batch before the leader appends it.

        Returns (NONE, None) to append, (DUPLICATE_SEQUENCE_NUMBER, original) for a retry of a
        batch already in the log, or (error, None) to refuse it.
        """
        if h.producer_id < 0:
            return Errors.NONE, None  # not an idempotent producer
        e = self.producers.get(h.producer_id)
        if e is not None and not h.is_transactional and e.txn_first_offset >= 0:
            return Errors.INVALID_TXN_STATE, None
        if e is None:
            return Errors.NONE, None  # no state for this producer: any first sequence
        if h.producer_epoch < e.producer_epoch:
            return Errors.INVALID_PRODUCER_EPOCH, None
        if h.producer_epoch > e.producer_epoch:
            if h.base_sequence != 0:
                return Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, None
            return Errors.NONE, None
        last_sequence = last_sequence_of(h)
        for b in e.batches:
            if b.first_sequence == h.base_sequence and b.last_sequence == last_sequence:
                return Errors.DUPLICATE_SEQUENCE_NUMBER, b
        expected = next_sequence(e.batches[-1].last_sequence) if e.batches else 0
        if h.base_sequence != expected:
            return Errors.OUT_OF_ORDER_SEQUENCE_NUMBER, None
        return Errors.NONE, None

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int = -1) -> Errors:
        """A marker's fencing (Kafka's ProducerAppendInfo.appendEndTxnMarker): an older producer
        epoch, then a marker from an older transaction coordinator than the last one's."""
        e = self.producers.get(producer_id)
        if e is not None and producer_epoch < e.producer_epoch:
            return Errors.INVALID_PRODUCER_EPOCH
        if e is not None and 0 <= coordinator_epoch < e.coordinator_epoch:
            return Errors.TRANSACTION_COORDINATOR_FENCED
        return Errors.NONE

    def start_verification(self, producer_id: int) -> int:
        self._last_guard += 1
        self.verification_guards[producer_id] = self._last_guard
        return self._last_guard

    def guard_holds(self, producer_id: int, guard: int) -> bool:
        """Whether no marker for the producer came since its verification ``guard`` started."""
        return self.verification_guards.get(producer_id) == guard

    def stale_epoch(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether ``producer_epoch`` is older than the producer's latest here."""
        e = self.producers.get(producer_id)
        return e is not None and producer_epoch < e.producer_epoch

    def txn_open(self, producer_id: int, producer_epoch: int | None = None) -> bool:
        """Whether a transaction of the producer is open here (with ``producer_epoch``: one of
        that epoch, as Kafka's UnifiedLog.hasOngoingTransaction asks; a transaction of an
        older epoch whose marker has not arrived yet is not the producer's current one)."""
        e = self.producers.get(producer_id)
        return (e is not None and e.txn_first_offset >= 0
                and (producer_epoch is None or e.producer_epoch == producer_epoch))

    def update(self, h: rec.BatchHeader, batch: bytes | None = None) -> None:
        """Record an appended batch (leader or follower); ``h`` carries its final offsets.
        Control batches need their bytes (``batch``) to tell commit from abort."""
        if h.producer_id < 0:
            return
        e = self.producers.get(h.producer_id)
        if h.is_control:
            if batch is None:
                return
            commit = rec.control_is_commit(batch)
            if e is None:
                e = self.producers[h.producer_id] = ProducerEntry(h.producer_epoch)
            elif h.producer_epoch > e.producer_epoch:
                e.producer_epoch = h.producer_epoch  # a fencing bump: sequences restart
                e.batches.clear()
            e.coordinator_epoch = rec.control_coordinator_epoch(batch)
            e.last_timestamp = h.max_timestamp
            self.verification_guards.pop(h.producer_id, None)
            first, e.txn_first_offset = e.txn_first_offset, -1
            if first >= 0:
                if not commit:
                    self.aborted.append(AbortedTxn(h.producer_id, first, h.base_offset))
                self._completed.append((first, h.base_offset))
            return
        if e is None or h.producer_epoch > e.producer_epoch:
            first = e.txn_first_offset if e is not None else -1
            e = self.producers[h.producer_id] = ProducerEntry(h.producer_epoch, txn_first_offset=first)
        e.batches.append(BatchMetadata(h.base_sequence, last_sequence_of(h),
                                       h.base_offset, h.last_offset))
        e.last_timestamp = h.max_timestamp
        if h.is_transactional and e.txn_first_offset < 0:
            e.txn_first_offset = h.base_offset
            self.verification_guards.pop(h.producer_id, None)  # the transaction is open here now

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction that is open, or whose marker is not
        yet below ``high_watermark``; None when there is none."""
        self._completed = [c for c in self._completed if c[1] >= high_watermark]
        firsts = [e.txn_first_offset for e in self.producers.values() if e.txn_first_offset >= 0]
        firsts.extend(first for first, _marker in self._completed)
        return min(firsts) if firsts else None

    def active_producers(self) -> list[tuple[int, ProducerEntry]]:
        """(producer id, its entry) of every producer the partition keeps, by id (KIP-664's
        DescribeProducers: Kafka's ProducerStateManager.activeProducers)."""
        return sorted(self.producers.items())

    def open_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction here."""
        return {pid: e.txn_first_offset for pid, e in self.producers.items()
                if e.txn_first_offset >= 0}

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions overlapping [start, end)."""
        return sorted((a.producer_id, a.first_offset) for a in self.aborted
                      if a.last_offset >= start and a.first_offset < end)

    @classmethod
    def rebuild(cls, batches: list[bytes]) -> ProducerStateManager:
        state = cls()
        for b in batches:
            state.update(rec.parse_header(b), b)
        return state
