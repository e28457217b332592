"""The share-partition state machine of KIP-932: what the leader of one topic-partition keeps
for one share group (Kafka's SharePartition), record by record.

Theory of operation
-------------------
Every offset the share group has fetched and not yet finished with is *in flight*: it is
AVAILABLE, ACQUIRED by one member under a time-limited lock, or done (ACKNOWLEDGED by an
accept, ARCHIVED by a reject, a gap, the delivery limit or the caller). The ids are the ones
Kafka persists (0, 1, 2, 4; ARCHIVING, 3, belongs to the 4.4 dead-letter queue and is not
modelled). Each in-flight offset carries its delivery count, its holder (``""`` unless
ACQUIRED), its lock deadline, an acknowledgement whose write is in flight (``pending``) and
the (state, count) last written for it (``saved``: what a reload would find).

Two offsets bound the window. The **start offset** (SPSO): every offset below it is done,
and it moves up over the longest prefix of done offsets with nothing pending
(:meth:`SharePartition._advance`), after every change. The **end offset** (SPEO) is Kafka's
"last offset fetched into the cache", or the start offset when the cache is empty; internally
``_next_new`` is one past the last offset ever fetched. Offsets between the two that are not
cached (the gaps between the batches a reload found, Kafka's persister gap window) are
fetched again as new records. :meth:`SharePartition.next_fetch_offset` is the first gap or
AVAILABLE offset with nothing pending, else ``_next_new``.

The caller reads the log: :meth:`SharePartition.acquire` gets the offsets present in the log
from ``next_fetch_offset()`` to the high watermark (or the LSO) and hands out, in offset
order and up to ``max_records``, every AVAILABLE one (count + 1) and every new one (count 1).
A new offset may be cached only while the span SPSO..SPEO stays within ``max_in_flight``
(Kafka's in-flight limit is this span, not a count of ACQUIRED records). Offsets absent from
the read (compaction holes, control records the caller left out) are archived with count 0
as the walk passes them, and :meth:`SharePartition.archive` archives what the caller must not
deliver (control records, aborted records under read_committed); neither is written (Kafka
archives these lazily, again after a reload).

Acknowledgement is two-phase, as Kafka's: :meth:`SharePartition.begin_acknowledge` checks the
request (Kafka's order, all or nothing per partition), marks the offsets pending and returns
the write to persist (:class:`Pending`); the caller answers the client after
:meth:`SharePartition.finish` with the write's outcome: commit, or roll back to ACQUIRED (to
AVAILABLE, or ARCHIVED at the limit, if the lock expired meanwhile; that rollback is not
written, as in Kafka). Lock expiry (:meth:`SharePartition.expire`) and a member's session end
(:meth:`SharePartition.release_member`) change memory at once and return the write; the
change stands whatever the write does. Every write (a :class:`ShareState`) carries only the
changed offsets and the start offset after the change; :func:`merge` is the share
coordinator's rule for folding a write into its state (higher delivery count wins, then the
higher state id), and :meth:`SharePartition.persisted` is the state the coordinator would
hold had every write of this life succeeded. A leader change is
:meth:`SharePartition.load` of that state: acquisitions and locks are forgotten, an offset
whose first delivery was never written is new again (count back to 1).

Where this deviates from Kafka: state is per offset, never per log batch, so ``max_records``
is exact (Kafka rounds up to whole log batches in batch_optimized mode and splits only when
it must); holes are archived by the walk instead of travelling inside AcquiredRecords for the
client to acknowledge as GAP; SPSO moves on every change (Kafka moves it when the write
completes), and a write carries the start offset as it is after the change (Kafka's carries
the one before: it reaches the coordinator one write late); a session-end release changes
memory at once (Kafka's is two-phase, rolled back if its write fails); a lock whose deadline
has passed cannot be acknowledged even before :meth:`SharePartition.expire` runs (Kafka's
timer thread may lag); a persisted ACQUIRED state is loaded as AVAILABLE (Kafka loads it
ACQUIRED with no holder and no timer). Not modelled: Kafka 4.2's throttling of poison records (from
``ceil(limit/2)`` deliveries on a batch is handed out in halving chunks, the last delivery alone),
``record_limit`` acquisition, RENEW acknowledgements, the dead-letter queue (ARCHIVING), the
log start offset moving (retention, DeleteRecords) and the fetch lock.

Bug switches (plain flags; each off by default):

* ``ack_any_holder``: an acknowledgement is applied to a record whose lock another member
  holds (the member check of Kafka's acknowledge skipped): a late ack from a former holder
  lands on the record's new holder.
* ``no_count_on_reacquire``: the delivery count is not incremented when an AVAILABLE record
  is acquired again (after a release or a lock expiry), so the delivery limit never bites.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from itertools import pairwise

from reference.errors import Errors
from reference.frozen import frozen

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4  # Kafka's RecordState ids, as persisted
TERMINAL = frozenset({ACKNOWLEDGED, ARCHIVED})
STATE_NAMES = {AVAILABLE: "available", ACQUIRED: "acquired", ACKNOWLEDGED: "acknowledged", ARCHIVED: "archived"}
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3  # Kafka's AcknowledgeType ids (RENEW, 4, is not modelled)

Batch = tuple[int, int, int, int]  # a persisted state batch: (first offset, last offset, state id, delivery count)
Range = tuple[int, int, int]  # an AcquiredRecords range: (first offset, last offset, delivery count)
AckBatch = tuple[int, int, Sequence[int]]  # (first offset, last offset, one type or one type per offset)


@frozen
class InFlight:
    """One cached offset."""

    state: int
    count: int  # deliveries so far (0: archived without ever being delivered)
    member: str = ""  # the holder, "" unless ACQUIRED
    deadline: int = -1  # the lock's deadline (ms), -1 unless ACQUIRED
    pending: int | None = None  # the state an acknowledgement whose write is in flight would set
    saved: tuple[int, int] | None = None  # (state, count) as last written; None: never written


@frozen
class ShareState:
    """What the share coordinator keeps for a share-partition, or one write to it (then
    ``batches`` holds only what the write changed)."""

    start_offset: int
    batches: tuple[Batch, ...] = ()


@frozen
class Pending:
    """An acknowledgement begun: the offsets with the states it sets, and the write that must
    succeed before it is answered."""

    seq: int
    member: str
    targets: tuple[tuple[int, int], ...]  # (offset, new state), ascending
    write: ShareState


class SharePartition:
    """One share group's state of one partition on its leader (Kafka's SharePartition)."""

    def __init__(self, start_offset: int, lock_ms: int = 30_000, delivery_limit: int = 5, max_in_flight: int = 2000,
                 ack_any_holder: bool = False,
                 no_count_on_reacquire: bool = False) -> None:
        if start_offset < 0:
            raise ValueError(f"start offset {start_offset}: an uninitialised one is the caller's to reset")
        self.start_offset = start_offset
        self.lock_ms = lock_ms
        self.delivery_limit = delivery_limit
        self.max_in_flight = max_in_flight
        self.ack_any_holder = ack_any_holder
        self.no_count_on_reacquire = no_count_on_reacquire
        self._records: dict[int, InFlight] = {}  # the cache: offsets >= start_offset
        self._next_new = start_offset  # one past the last offset ever fetched into the cache
        self._pending: dict[int, Pending] = {}
        self._seq = 0

    @classmethod
    def load(cls, start_offset: int, batches: Iterable[Batch], lock_ms: int = 30_000, delivery_limit: int = 5,
             max_in_flight: int = 2000, **switches: bool) -> SharePartition:
        """A share-partition from the persisted state (Kafka's maybeInitialize). A batch below
        the start offset, reversed or overlapping another makes initialisation fail (Kafka
        marks the partition FAILED): ValueError."""
        sp = cls(start_offset, lock_ms, delivery_limit, max_in_flight, **switches)
        for first, last, state, count in sorted(batches):
            if first < start_offset or last < first or state not in STATE_NAMES:
                raise ValueError(f"invalid state batch {(first, last, state, count)} at start offset {start_offset}")
            state = AVAILABLE if state == ACQUIRED else state
            for offset in range(first, last + 1):
                if offset in sp._records:
                    raise ValueError(f"state batches overlap at offset {offset}")
                sp._records[offset] = InFlight(state, count, saved=(state, count))
            sp._next_new = max(sp._next_new, last + 1)
        sp._advance()
        return sp

    # ------------------------------------------------------------ views

    @property
    def end_offset(self) -> int:
        """Kafka's endOffset: the last offset fetched into the cache, or the start offset when
        the cache is empty."""
        return self._next_new - 1 if self._next_new > self.start_offset else self.start_offset

    def in_flight(self, offset: int) -> InFlight | None:
        return self._records.get(offset)

    def cached(self) -> dict[int, InFlight]:
        return dict(self._records)

    def next_fetch_offset(self) -> int:
        """The first offset to read: a gap or an AVAILABLE offset with nothing pending, else one
        past the last fetched."""
        for offset in range(self.start_offset, self._next_new):
            r = self._records.get(offset)
            if r is None or self._fetchable(offset, r):
                return offset
        return self._next_new

    def next_deadline(self) -> int | None:
        """The earliest lock deadline that :meth:`expire` would act on, for the caller's timer."""
        return min((r.deadline for r in self._records.values() if r.state == ACQUIRED and r.pending is None),
                   default=None)

    def persisted(self) -> ShareState:
        """The state the share coordinator holds had every write of this life succeeded, from
        the start offset up: what a new leader would load."""
        saved = [(o, *r.saved) for o, r in sorted(self._records.items()) if r.saved is not None]
        return ShareState(self.start_offset, _coalesce(saved))

    def _fetchable(self, offset: int, r: InFlight) -> bool:
        if r.pending is not None:
            return False
        return r.state == AVAILABLE

    # ------------------------------------------------------------ acquisition

    def acquire(self, member: str, now_ms: int, offsets: Iterable[int], max_records: int) -> list[Range]:
        """Hand out records to ``member``: ``offsets`` are the log's offsets read from
        :meth:`next_fetch_offset` up (ascending). Returns AcquiredRecords ranges: consecutive
        offsets with equal delivery counts."""
        cursor = self.next_fetch_offset()  # every offset below it is dealt with
        cap = self.start_offset + self.max_in_flight  # a new offset must lie below it
        deadline = now_ms + self.lock_ms
        taken: list[tuple[int, int]] = []
        for offset in offsets:
            if offset < cursor:
                continue
            if len(taken) >= max_records:
                break
            if offset >= self._next_new and offset >= cap:
                self._archive_holes(cursor, cap)
                break
            self._archive_holes(cursor, offset)
            count = self._acquire_one(offset, member, deadline)
            if count:
                taken.append((offset, count))
            cursor = offset + 1
        self._advance()
        return _ranges(taken)

    def _acquire_one(self, offset: int, member: str, deadline: int) -> int:
        """Acquire one offset; its new delivery count, 0 if it cannot be acquired."""
        r = self._records.get(offset)
        if r is None:  # new, or a gap of the persisted state
            self._records[offset] = InFlight(ACQUIRED, 1, member, deadline)
            self._next_new = max(self._next_new, offset + 1)
            return 1
        if not self._fetchable(offset, r):
            return 0
        count = r.count if self.no_count_on_reacquire else r.count + 1
        self._records[offset] = replace(r, state=ACQUIRED, count=count, member=member, deadline=deadline)
        return count

    def _archive_holes(self, lo: int, hi: int) -> None:
        """Offsets in [lo, hi) that the read passed without finding them in the log."""
        for offset in range(lo, hi):
            if offset not in self._records:
                self._records[offset] = InFlight(ARCHIVED, 0)
                self._next_new = max(self._next_new, offset + 1)

    def archive(self, offsets: Iterable[int]) -> None:
        """Archive offsets that must not be delivered (control records; aborted records under
        read_committed): new ones, gaps and AVAILABLE ones; acquired, pending and done ones
        are left alone, as are offsets outside the in-flight window. Not written, as in
        Kafka."""
        cap = self.start_offset + self.max_in_flight
        for offset in sorted(set(offsets)):
            if not self.start_offset <= offset < cap:
                continue
            r = self._records.get(offset)
            if r is None:
                self._archive_holes(offset, offset + 1)
            elif r.state == AVAILABLE and r.pending is None:
                self._records[offset] = replace(r, state=ARCHIVED)
        self._advance()

    # ------------------------------------------------------------ acknowledgement

    def begin_acknowledge(self, member: str, batches: Sequence[AckBatch], now_ms: int) -> tuple[Errors, Pending | None]:
        """Start an acknowledgement (Kafka's SharePartition.acknowledge, with KafkaApis' batch
        validation first). On success the offsets are pending and the :class:`Pending`'s
        write must be persisted, then passed to :meth:`finish`; ``(NONE, None)`` when nothing
        changes (everything below the start offset). A lock whose deadline has passed is no
        longer held, whether or not :meth:`expire` has run."""
        if not _well_formed(batches):
            return Errors.INVALID_REQUEST, None
        targets: dict[int, int] = {}
        for first, last, types in batches:
            error = self._check_batch(member, first, last, types, now_ms, targets)
            if error is not Errors.NONE:
                return error, None
        if not targets:
            return Errors.NONE, None
        write = ShareState(self._start_if(targets),
                           _coalesce([(o, s, self._records[o].count) for o, s in sorted(targets.items())]))
        self._seq += 1
        pending = Pending(self._seq, member, tuple(sorted(targets.items())), write)
        for offset, state in targets.items():
            self._records[offset] = replace(self._records[offset], pending=state)
        self._pending[pending.seq] = pending
        return Errors.NONE, pending

    def _check_batch(self, member: str, first: int, last: int, types: Sequence[int], now_ms: int,
                     targets: dict[int, int]) -> Errors:
        """One batch's offsets into ``targets``, or the error that fails the partition."""
        if last < self.start_offset:
            return Errors.NONE  # done already: skipped silently (§3.6 step 2)
        lo = max(first, self.start_offset)
        if not any(o in self._records for o in range(self.start_offset, min(lo, self._next_new - 1) + 1)):
            return Errors.INVALID_RECORD_STATE  # no cached batch at or below it: "Batch record not found"
        if last >= self._next_new:
            return Errors.INVALID_REQUEST  # past the last cached offset
        for offset in range(lo, last + 1):
            r = self._records.get(offset)
            if r is None:
                continue  # a gap of the cache: Kafka's walk over cached batches never meets it
            if offset in targets or not self._holds(r, member, now_ms):
                return Errors.INVALID_RECORD_STATE
            kind = types[0] if len(types) == 1 else types[offset - first]
            targets[offset] = self._ack_state(r, kind)
        return Errors.NONE

    def _holds(self, r: InFlight, member: str, now_ms: int) -> bool:
        return (r.state == ACQUIRED and r.pending is None and r.deadline > now_ms
                and (self.ack_any_holder or r.member == member))

    def _ack_state(self, r: InFlight, kind: int) -> int:
        if kind == ACCEPT:
            return ACKNOWLEDGED
        if kind == RELEASE:
            return ARCHIVED if r.count >= self.delivery_limit else AVAILABLE
        return ARCHIVED  # GAP, REJECT

    def _start_if(self, targets: dict[int, int]) -> int:
        """The start offset once ``targets`` are committed."""
        offset = self.start_offset
        while offset < self._next_new:
            r = self._records.get(offset)
            if r is None or r.pending is not None or targets.get(offset, r.state) not in TERMINAL:
                break
            offset += 1
        return offset

    def finish(self, pending: Pending, ok: bool, now_ms: int) -> None:
        """The outcome of a pending acknowledgement's write: commit it, or roll it back (Kafka's
        completeStateTransition). A Pending of another life, or finished already, is ignored."""
        if self._pending.get(pending.seq) is not pending:
            return
        del self._pending[pending.seq]
        for offset, state in pending.targets:
            r = self._records[offset]
            if ok:
                self._records[offset] = InFlight(state, r.count, saved=(state, r.count))
            elif r.deadline <= now_ms:  # the lock expired meanwhile: released, not written
                back = ARCHIVED if r.count >= self.delivery_limit else AVAILABLE
                self._records[offset] = InFlight(back, r.count, saved=r.saved)
            else:
                self._records[offset] = replace(r, pending=None)
        self._advance()

    # ------------------------------------------------------------ locks

    def expire(self, now_ms: int) -> ShareState | None:
        """Release every lock whose deadline has passed (nothing pending): AVAILABLE, or ARCHIVED
        at the delivery limit or below the start offset. The write to persist, or None."""
        return self._release(lambda r: r.deadline <= now_ms)

    def release_member(self, member: str, now_ms: int) -> ShareState | None:
        """``member``'s session ended (closed, or its connection lost): what it holds is
        released as by lock expiry, the count unchanged (Kafka 4.2+). ``now_ms`` is unused:
        the release does not depend on the time."""
        return self._release(lambda r: r.member == member)

    def _release(self, which) -> ShareState | None:
        changed = []
        for offset, r in sorted(self._records.items()):
            if r.state == ACQUIRED and r.pending is None and which(r):
                limit = r.count >= self.delivery_limit or offset < self.start_offset
                state = ARCHIVED if limit else AVAILABLE
                self._records[offset] = InFlight(state, r.count, saved=(state, r.count))
                changed.append((offset, state, r.count))
        if not changed:
            return None
        self._advance()
        return ShareState(self.start_offset, _coalesce(changed))

    # ------------------------------------------------------------ start offset

    def _advance(self) -> None:
        """Move the start offset over the done offsets at it (Kafka's
        maybeUpdateCachedStateAndOffsets); a gap stops it."""
        offset = self.start_offset
        while offset < self._next_new:
            r = self._records.get(offset)
            if r is None or r.pending is not None or r.state not in TERMINAL:
                break
            del self._records[offset]
            offset += 1
        self.start_offset = offset


# ---------------------------------------------------------------- helpers


def _well_formed(batches: Sequence[AckBatch]) -> bool:
    """KafkaApis.validateAcknowledgementBatches: ordered batches (touching allowed), one type
    or one per offset, known types (RENEW is not modelled)."""
    previous_last = -1
    for first, last, types in batches:
        if first > last or first < previous_last or not types:
            return False
        if len(types) > 1 and len(types) != last - first + 1:
            return False
        if any(t not in (GAP, ACCEPT, RELEASE, REJECT) for t in types):
            return False
        previous_last = last
    return True


def _ranges(taken: list[tuple[int, int]]) -> list[Range]:
    """(offset, count) pairs, ascending, into ranges of consecutive offsets with equal counts."""
    out: list[Range] = []
    for offset, count in taken:
        if out and out[-1][1] == offset - 1 and out[-1][2] == count:
            out[-1] = (out[-1][0], offset, count)
        else:
            out.append((offset, offset, count))
    return out


def _coalesce(items: Iterable[tuple[int, int, int]]) -> tuple[Batch, ...]:
    """(offset, state, count), ascending, into batches of consecutive offsets with equal state
    and count."""
    return _join((o, o, state, count) for o, state, count in items)


def _join(batches: Iterable[Batch]) -> tuple[Batch, ...]:
    out: list[Batch] = []
    for first, last, state, count in batches:
        if out and out[-1][1] == first - 1 and out[-1][2:] == (state, count):
            out[-1] = (out[-1][0], last, state, count)
        else:
            out.append((first, last, state, count))
    return tuple(out)


def merge(current: ShareState, write: ShareState, keep_higher_start: bool = True) -> ShareState:
    """Fold a write into the share coordinator's state (Kafka's PersisterStateBatchCombiner):
    everything below the start offset is dropped; where batches overlap, the higher delivery
    count wins, then the higher state id; equal neighbours are joined. The start offset is
    the higher of the two (Kafka 4.4); ``keep_higher_start=False`` takes the write's as it
    is, as Kafka 4.3.x does (so it can go back: the bug fixed by #23074)."""
    start = max(current.start_offset, write.start_offset) if keep_higher_start else write.start_offset
    pieces = [b for b in current.batches + write.batches if b[1] >= start]
    cuts = sorted({max(b[0], start) for b in pieces} | {b[1] + 1 for b in pieces})
    out: list[Batch] = []
    for lo, hi in pairwise(cuts):
        covering = [(b[3], b[2]) for b in pieces if b[0] <= lo and hi - 1 <= b[1]]
        if covering:
            count, state = max(covering)
            out.append((lo, hi - 1, state, count))
    return ShareState(start, _join(out))
