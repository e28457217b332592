"""The share-partition state machine of KIP-932 (reference/share_partition.py): each rule by
example, then a Hypothesis state machine that compares it with a small sequential model of
its own and checks the promises of a share partition (spec §8) on the history."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from reference.errors import Errors
from reference.share_partition import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    GAP,
    REJECT,
    RELEASE,
    SharePartition,
    ShareState,
    merge,
)

IRS = Errors.INVALID_RECORD_STATE


def partition(**kw) -> SharePartition:
    kw = {"lock_ms": 100, "delivery_limit": 3, "max_in_flight": 20} | kw
    return SharePartition(kw.pop("start_offset", 0), **kw)


def state(sp: SharePartition, offset: int) -> tuple[int, int, str]:
    r = sp.in_flight(offset)
    assert r is not None, offset
    return r.state, r.count, r.member


def ack(sp: SharePartition, member: str, batches, now: int = 0, ok: bool = True) -> Errors:
    """An acknowledgement whose write has the outcome ``ok``."""
    error, pending = sp.begin_acknowledge(member, batches, now)
    if pending is not None:
        sp.finish(pending, ok, now)
    return error


# ---------------------------------------------------------------- acquisition


def test_new_records_are_acquired_with_count_one_and_a_lock_each():
    sp = partition()
    assert sp.next_fetch_offset() == 0 and sp.end_offset == 0
    assert sp.acquire("a", 5, range(0, 10), 4) == [(0, 3, 1)]
    assert state(sp, 2) == (ACQUIRED, 1, "a")
    assert sp.in_flight(2).deadline == 105 and sp.next_deadline() == 105
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (0, 3, 4)
    assert sp.acquire("b", 6, range(4, 10), 10) == [(4, 9, 1)]
    assert sp.acquire("c", 7, range(10, 10), 10) == []  # nothing new in the log


def test_released_records_are_acquired_again_with_count_plus_one_in_ranges_of_equal_counts():
    sp = partition()
    sp.acquire("a", 0, range(0, 6), 10)
    assert ack(sp, "a", [(1, 2, [RELEASE]), (4, 4, [RELEASE])]) is Errors.NONE
    assert sp.next_fetch_offset() == 1
    assert sp.acquire("b", 1, range(1, 9), 10) == [(1, 2, 2), (4, 4, 2), (6, 8, 1)]
    assert state(sp, 4) == (ACQUIRED, 2, "b") and state(sp, 3) == (ACQUIRED, 1, "a")


def test_max_records_is_a_cap_on_everything_acquired():
    sp = partition()
    sp.acquire("a", 0, range(0, 4), 10)
    ack(sp, "a", [(0, 1, [RELEASE])])
    assert sp.acquire("b", 0, range(0, 10), 3) == [(0, 1, 2), (4, 4, 1)]
    assert sp.acquire("b", 0, range(0, 10), 0) == []


def test_the_in_flight_limit_is_the_span_from_the_start_offset():
    sp = partition(max_in_flight=5)
    assert sp.acquire("a", 0, range(0, 10), 10) == [(0, 4, 1)]
    assert sp.acquire("b", 0, range(5, 10), 10) == []  # at capacity
    ack(sp, "a", [(1, 4, [ACCEPT])])  # offset 0 still in flight holds the span
    assert sp.start_offset == 0 and sp.acquire("b", 0, range(5, 10), 10) == []
    ack(sp, "a", [(0, 0, [RELEASE])])  # re-acquisition inside the span is possible at capacity
    assert sp.acquire("b", 0, range(0, 10), 10) == [(0, 0, 2)]
    ack(sp, "b", [(0, 0, [ACCEPT])])
    assert sp.start_offset == 5 and sp.acquire("b", 0, range(5, 20), 10) == [(5, 9, 1)]


def test_offsets_missing_from_the_read_are_archived_as_holes():
    sp = partition()
    assert sp.acquire("a", 0, [0, 3, 4, 7], 10) == [(0, 0, 1), (3, 4, 1), (7, 7, 1)]
    assert state(sp, 1) == (ARCHIVED, 0, "") and state(sp, 6) == (ARCHIVED, 0, "")
    ack(sp, "a", [(0, 0, [ACCEPT])])
    assert sp.start_offset == 3  # over the holes


def test_a_hole_reaching_past_the_in_flight_limit_is_archived_up_to_the_limit():
    sp = partition(max_in_flight=4)
    assert sp.acquire("a", 0, [0, 9], 10) == [(0, 0, 1)]
    assert state(sp, 3) == (ARCHIVED, 0, "") and sp.in_flight(4) is None and sp.end_offset == 3
    ack(sp, "a", [(0, 0, [ACCEPT])])
    assert sp.start_offset == 4 and sp.acquire("a", 0, [9], 10) == []  # 4..7 archived, 8 beyond the limit
    assert sp.start_offset == 8 and sp.acquire("a", 0, [9], 10) == [(9, 9, 1)]


def test_archive_skips_control_and_aborted_records_without_delivering_them():
    sp = partition()
    sp.archive([0, 2])
    assert sp.start_offset == 1 and state(sp, 2) == (ARCHIVED, 0, "")
    assert sp.next_fetch_offset() == 1  # offset 1 is a gap: fetched as new
    assert sp.acquire("a", 0, [1, 2, 3], 10) == [(1, 1, 1), (3, 3, 1)]
    sp.archive([1, 3])  # acquired ones are left alone
    assert state(sp, 1) == (ACQUIRED, 1, "a")
    assert sp.persisted() == ShareState(1)  # archiving is not written


# ---------------------------------------------------------------- acknowledgement


def test_accept_reject_and_gap_are_terminal_and_release_makes_available():
    sp = partition()
    sp.acquire("a", 0, range(0, 4), 10)
    error, pending = sp.begin_acknowledge("a", [(0, 3, [ACCEPT, REJECT, GAP, RELEASE])], 1)
    assert error is Errors.NONE
    assert pending.targets == ((0, ACKNOWLEDGED), (1, ARCHIVED), (2, ARCHIVED), (3, AVAILABLE))
    assert pending.write == ShareState(3, ((0, 0, ACKNOWLEDGED, 1), (1, 2, ARCHIVED, 1), (3, 3, AVAILABLE, 1)))
    assert sp.start_offset == 0 and sp.in_flight(0).pending == ACKNOWLEDGED  # nothing moves before the write
    sp.finish(pending, True, 2)
    assert sp.start_offset == 3 and state(sp, 3) == (AVAILABLE, 1, "")
    assert sp.persisted() == ShareState(3, ((3, 3, AVAILABLE, 1),))


def test_release_at_the_delivery_limit_archives():
    sp = partition(delivery_limit=2)
    sp.acquire("a", 0, [0], 10)
    ack(sp, "a", [(0, 0, [RELEASE])])
    assert sp.acquire("a", 0, [0], 10) == [(0, 0, 2)]
    ack(sp, "a", [(0, 0, [RELEASE])])
    assert sp.start_offset == 1 and sp.in_flight(0) is None


def test_only_the_holder_may_acknowledge_and_the_request_is_all_or_nothing():
    sp = partition()
    sp.acquire("a", 0, range(0, 2), 10)
    sp.acquire("b", 0, range(2, 4), 10)
    assert ack(sp, "b", [(0, 0, [ACCEPT])]) is IRS
    assert ack(sp, "a", [(0, 1, [ACCEPT]), (2, 2, [ACCEPT])]) is IRS  # 2 is b's
    assert state(sp, 0) == (ACQUIRED, 1, "a") and sp.in_flight(0).pending is None


def test_ack_any_holder_applies_an_acknowledgement_to_another_members_record():
    sp = partition(ack_any_holder=True)
    sp.acquire("a", 0, [0], 10)
    assert ack(sp, "b", [(0, 0, [ACCEPT])]) is Errors.NONE
    assert sp.start_offset == 1


def test_acknowledging_what_is_not_acquired_is_an_invalid_record_state():
    sp = partition()
    sp.acquire("a", 0, range(0, 3), 10)
    ack(sp, "a", [(1, 1, [RELEASE])])
    assert ack(sp, "a", [(1, 1, [ACCEPT])]) is IRS  # available
    ack(sp, "a", [(2, 2, [ACCEPT])])
    assert ack(sp, "a", [(2, 2, [ACCEPT])]) is IRS  # acknowledged, not below the start offset
    assert ack(sp, "a", [(0, 0, [ACCEPT]), (0, 0, [ACCEPT])]) is IRS  # the same offset twice
    assert ack(sp, "a", [(0, 0, [ACCEPT])], now=100) is IRS  # the lock's deadline has passed


def test_offsets_not_cached_give_invalid_record_state_below_and_invalid_request_past_the_end():
    sp = partition()
    assert ack(sp, "a", [(0, 0, [ACCEPT])]) is IRS  # empty cache: no batch found
    sp = SharePartition.load(5, [(8, 9, AVAILABLE, 1)], lock_ms=100)
    assert ack(sp, "a", [(5, 6, [ACCEPT])]) is IRS  # a gap with nothing cached below it
    assert ack(sp, "a", [(9, 10, [ACCEPT])]) is Errors.INVALID_REQUEST
    assert ack(sp, "a", [(11, 12, [ACCEPT])]) is Errors.INVALID_REQUEST


@pytest.mark.parametrize("batches", [
    [(3, 2, [ACCEPT])],  # first > last
    [(4, 5, [ACCEPT]), (2, 3, [ACCEPT])],  # out of order
    [(0, 1, [])],  # no types
    [(0, 2, [ACCEPT, ACCEPT])],  # neither one type nor one per offset
    [(0, 0, [4])],  # RENEW is not modelled
    [(0, 0, [-1])],
])
def test_malformed_acknowledgements_are_invalid_requests(batches):
    sp = partition()
    sp.acquire("a", 0, range(0, 6), 10)
    assert ack(sp, "a", batches) is Errors.INVALID_REQUEST


def test_touching_batches_are_well_formed():
    sp = partition()
    sp.acquire("a", 0, range(0, 6), 10)
    assert ack(sp, "a", [(0, 2, [ACCEPT]), (3, 5, [ACCEPT])]) is Errors.NONE


def test_late_acks_below_the_start_offset_succeed_silently_from_anyone():
    sp = partition()
    sp.acquire("a", 0, range(0, 3), 10)
    ack(sp, "a", [(0, 1, [ACCEPT])])
    assert sp.begin_acknowledge("z", [(0, 1, [REJECT])], 0) == (Errors.NONE, None)
    # straddling the start offset: the part below is skipped offset by offset
    error, pending = sp.begin_acknowledge("a", [(0, 2, [RELEASE, RELEASE, ACCEPT])], 0)
    assert error is Errors.NONE and pending.targets == ((2, ACKNOWLEDGED),)


def test_a_pending_acknowledgement_blocks_acquisition_expiry_and_other_acks():
    sp = partition()
    sp.acquire("a", 0, range(0, 2), 10)
    _, pending = sp.begin_acknowledge("a", [(0, 1, [RELEASE])], 0)
    assert sp.next_fetch_offset() == 2 and sp.acquire("b", 0, range(0, 4), 10) == [(2, 3, 1)]
    assert ack(sp, "a", [(0, 0, [ACCEPT])]) is IRS
    assert sp.expire(500) == ShareState(0, ((2, 3, AVAILABLE, 1),))
    assert state(sp, 0) == (ACQUIRED, 1, "a") and sp.release_member("a", 500) is None
    assert sp.next_deadline() is None
    sp.finish(pending, True, 500)
    assert state(sp, 0) == (AVAILABLE, 1, "") and sp.next_fetch_offset() == 0


def test_a_failed_write_rolls_back_to_acquired_while_the_lock_runs():
    sp = partition()
    sp.acquire("a", 0, [0], 10)
    assert ack(sp, "a", [(0, 0, [ACCEPT])], now=10, ok=False) is Errors.NONE
    assert state(sp, 0) == (ACQUIRED, 1, "a") and sp.in_flight(0).deadline == 100
    assert ack(sp, "a", [(0, 0, [ACCEPT])], now=20) is Errors.NONE
    assert sp.start_offset == 1


def test_a_failed_write_after_the_lock_expired_rolls_back_to_available_or_archived_unwritten():
    sp = partition(delivery_limit=2)
    sp.acquire("a", 0, [0, 1], 10)
    ack(sp, "a", [(1, 1, [RELEASE])])
    sp.acquire("a", 0, [1], 10)  # offset 1 on its last delivery
    _, pending = sp.begin_acknowledge("a", [(0, 1, [ACCEPT])], 50)
    assert sp.expire(150) is None  # pending: the timer leaves it
    sp.finish(pending, False, 150)
    assert state(sp, 0) == (AVAILABLE, 1, "") and sp.in_flight(0).saved is None
    assert sp.in_flight(1) is None or state(sp, 1)[0] == ARCHIVED
    assert sp.persisted() == ShareState(0, ((1, 1, AVAILABLE, 1),))  # the last write of offset 1


def test_finishing_twice_or_a_pending_of_another_life_does_nothing():
    sp = partition()
    sp.acquire("a", 0, [0], 10)
    _, pending = sp.begin_acknowledge("a", [(0, 0, [RELEASE])], 0)
    sp.finish(pending, True, 0)
    sp.acquire("a", 0, [0], 10)
    sp.finish(pending, False, 0)
    assert state(sp, 0) == (ACQUIRED, 2, "a")
    fresh = SharePartition.load(0, [], lock_ms=100)
    fresh.acquire("b", 0, [0], 10)
    _, other = fresh.begin_acknowledge("b", [(0, 0, [ACCEPT])], 0)
    assert other.seq == pending.seq
    fresh.finish(pending, True, 0)  # the same sequence number, not the same Pending
    assert fresh.in_flight(0).pending == ACKNOWLEDGED


# ---------------------------------------------------------------- locks and sessions


def test_lock_expiry_makes_records_available_again_and_writes_it():
    sp = partition()
    sp.acquire("a", 0, range(0, 3), 10)
    sp.acquire("b", 50, range(3, 5), 10)
    assert sp.expire(99) is None
    assert sp.expire(100) == ShareState(0, ((0, 2, AVAILABLE, 1),))
    assert state(sp, 3) == (ACQUIRED, 1, "b") and sp.next_deadline() == 150
    assert sp.acquire("b", 120, range(0, 5), 10) == [(0, 2, 2)]


def test_lock_expiry_at_the_delivery_limit_archives():
    sp = partition(delivery_limit=2)
    sp.acquire("a", 0, [0], 10)
    sp.expire(100)
    assert sp.acquire("b", 100, [0], 10) == [(0, 0, 2)]
    assert sp.expire(200) == ShareState(1, ((0, 0, ARCHIVED, 2),))
    assert sp.start_offset == 1 and sp.acquire("c", 200, [0], 10) == []


def test_a_session_end_releases_only_the_members_records_keeping_their_counts():
    sp = partition(delivery_limit=2)
    sp.acquire("a", 0, [0], 10)
    ack(sp, "a", [(0, 0, [RELEASE])])
    sp.acquire("a", 0, [0, 1, 2], 10)
    sp.acquire("b", 0, [3], 10)
    assert sp.release_member("a", 5) == ShareState(1, ((0, 0, ARCHIVED, 2), (1, 2, AVAILABLE, 1)))
    assert state(sp, 1) == (AVAILABLE, 1, "") and state(sp, 3) == (ACQUIRED, 1, "b")
    assert sp.release_member("a", 5) is None


def test_no_count_on_reacquire_keeps_the_count_after_a_lock_expiry():
    sp = partition(no_count_on_reacquire=True, delivery_limit=2)
    for now in (0, 100, 200, 300):
        sp.expire(now)
        assert sp.acquire("a", now, [0], 10) == [(0, 0, 1)]


# ---------------------------------------------------------------- start offset


def test_the_start_offset_moves_over_the_terminal_prefix_only():
    sp = partition()
    sp.acquire("a", 0, range(0, 5), 10)
    ack(sp, "a", [(1, 2, [ACCEPT]), (4, 4, [REJECT])])
    assert sp.start_offset == 0
    ack(sp, "a", [(0, 0, [ACCEPT])])
    assert sp.start_offset == 3 and sorted(sp.cached()) == [3, 4]
    ack(sp, "a", [(3, 3, [GAP])])
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset(), sp.cached()) == (5, 5, 5, {})


# ---------------------------------------------------------------- persistence


def test_load_keeps_the_persisted_states_and_fetches_the_gaps_as_new():
    batches = [(12, 13, AVAILABLE, 2), (16, 16, ACKNOWLEDGED, 1), (18, 19, ARCHIVED, 3)]
    sp = SharePartition.load(10, batches, lock_ms=100, delivery_limit=3)
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (10, 19, 10)
    assert sp.acquire("a", 0, range(10, 25), 20) == [(10, 11, 1), (12, 13, 3), (14, 15, 1), (17, 17, 1), (20, 24, 1)]
    assert state(sp, 16) == (ACKNOWLEDGED, 1, "") and state(sp, 19) == (ARCHIVED, 3, "")
    sp.release_member("a", 0)
    assert sp.start_offset == 10
    ack(sp, "a", [(10, 10, [ACCEPT])])
    assert sp.acquire("b", 0, range(10, 25), 1) == [(10, 10, 2)]


def test_load_advances_over_a_terminal_prefix_and_refuses_bad_batches():
    sp = SharePartition.load(0, [(0, 4, ACKNOWLEDGED, 1), (5, 5, ARCHIVED, 2)])
    assert (sp.start_offset, sp.end_offset, sp.cached()) == (6, 6, {})
    assert state(SharePartition.load(0, [(0, 0, ACQUIRED, 1)]), 0) == (AVAILABLE, 1, "")
    for bad in ([(3, 4, AVAILABLE, 1)], [(6, 5, AVAILABLE, 1)], [(5, 6, 3, 1)], [(5, 6, 0, 1), (6, 7, 0, 1)]):
        with pytest.raises(ValueError):
            SharePartition.load(5, bad)
    with pytest.raises(ValueError):
        SharePartition(-1)


def test_persisted_holds_what_was_written_and_a_reload_restores_it():
    sp = partition()
    sp.acquire("a", 0, range(0, 6), 10)
    ack(sp, "a", [(1, 1, [ACCEPT]), (2, 2, [RELEASE]), (3, 3, [REJECT])])
    sp.acquire("b", 0, [2], 10)  # count 2, not written: the last write says (available, 1)
    assert sp.persisted() == ShareState(0, ((1, 1, ACKNOWLEDGED, 1), (2, 2, AVAILABLE, 1), (3, 3, ARCHIVED, 1)))
    again = SharePartition.load(*_args(sp.persisted()), lock_ms=100)
    assert again.persisted() == sp.persisted()
    assert again.acquire("c", 0, range(0, 6), 10) == [(0, 0, 1), (2, 2, 2), (4, 5, 1)]


def _args(s: ShareState):
    return s.start_offset, s.batches


def test_folding_the_writes_with_merge_gives_persisted():
    sp = partition()
    coordinator = sp.persisted()
    sp.acquire("a", 0, range(0, 6), 10)
    for batches in ([(0, 1, [ACCEPT])], [(2, 3, [RELEASE])]):
        _, pending = sp.begin_acknowledge("a", batches, 0)
        coordinator = merge(coordinator, pending.write)
        sp.finish(pending, True, 0)
    sp.acquire("b", 0, range(0, 6), 10)
    coordinator = merge(coordinator, sp.expire(100))
    assert coordinator == sp.persisted() == ShareState(2, ((2, 3, AVAILABLE, 2), (4, 5, AVAILABLE, 1)))


def test_merge_prefers_the_higher_count_then_the_higher_state_and_clips_at_the_start():
    current = ShareState(0, ((0, 9, ACKNOWLEDGED, 1),))
    write = ShareState(3, ((2, 5, AVAILABLE, 2), (6, 7, AVAILABLE, 1), (8, 12, ARCHIVED, 1)))
    assert merge(current, write) == ShareState(3, ((3, 5, AVAILABLE, 2), (6, 7, ACKNOWLEDGED, 1),
                                                   (8, 12, ARCHIVED, 1)))
    assert merge(write, current).batches == merge(current, write).batches  # the rule, not arrival order
    joined = merge(ShareState(0, ((0, 1, AVAILABLE, 1),)), ShareState(0, ((2, 3, AVAILABLE, 1),)))
    assert joined.batches == ((0, 3, AVAILABLE, 1),)


def test_merge_keeps_the_higher_start_offset_unless_asked_to_regress_as_kafka_4_3():
    current = ShareState(5, ((5, 6, AVAILABLE, 1),))
    late = ShareState(2, ((2, 2, ACKNOWLEDGED, 1),))
    assert merge(current, late) == ShareState(5, ((5, 6, AVAILABLE, 1),))
    assert merge(current, late, keep_higher_start=False) == ShareState(2, ((2, 2, ACKNOWLEDGED, 1),
                                                                           (5, 6, AVAILABLE, 1)))


# ---------------------------------------------------------------- the state machine

LIMIT, LOCK_MS, CAP = 3, 100, 8
MEMBERS = ("a", "b", "c")
TERM = {"acknowledged", "archived"}
NAME = {AVAILABLE: "available", ACQUIRED: "acquired", ACKNOWLEDGED: "acknowledged", ARCHIVED: "archived"}
ID = {v: k for k, v in NAME.items()}


class Rec:
    """The model's view of one offset."""

    def __init__(self, state: str, count: int, saved: tuple[str, int] | None = None):
        self.state, self.count, self.saved = state, count, saved
        self.member, self.deadline, self.pending = "", -1, None

    def free(self, state: str, write: bool) -> None:
        self.state, self.member, self.deadline, self.pending = state, "", -1, None
        if write:
            self.saved = (state, self.count)


class Model:
    """A share partition, per offset, kept the plain way: records of the whole life (also
    below the start offset), the start offset recomputed from the front."""

    def __init__(self, start: int, saved=()):
        self.start = start
        self.recs: dict[int, Rec] = {}
        for first, last, state_id, count in saved:
            for o in range(first, last + 1):
                self.recs[o] = Rec(NAME[state_id], count, (NAME[state_id], count))
        self.top = max([start, *(o + 1 for o in self.recs)])
        self.settle()

    def live(self) -> dict[int, Rec]:
        return {o: r for o, r in self.recs.items() if o >= self.start}

    def settle(self) -> None:
        while self.start in self.recs and self.recs[self.start].state in TERM and self.recs[self.start].pending is None:
            self.start += 1

    def next_fetch(self) -> int:
        for o in range(self.start, self.top):
            r = self.recs.get(o)
            if r is None or (r.state == "available" and r.pending is None):
                return o
        return self.top

    def hole(self, o: int) -> None:
        if o not in self.recs:
            self.recs[o] = Rec("archived", 0)
            self.top = max(self.top, o + 1)

    def acquire(self, member: str, now: int, offsets: list[int], max_records: int) -> list[tuple[int, int]]:
        at, got = self.next_fetch(), []
        for o in [o for o in offsets if o >= at]:
            if len(got) == max_records:
                break
            if o >= max(self.top, self.start + CAP):
                for h in range(at, self.start + CAP):
                    self.hole(h)
                break
            for h in range(at, o):
                self.hole(h)
            r = self.recs.get(o)
            if r is None:
                r = self.recs[o] = Rec("acquired", 0)
                self.top = max(self.top, o + 1)
            elif r.state != "available" or r.pending is not None:
                at = o + 1
                continue
            r.state, r.count, r.member, r.deadline = "acquired", r.count + 1, member, now + LOCK_MS
            got.append((o, r.count))
            at = o + 1
        self.settle()
        return got

    def archive(self, offsets) -> None:
        for o in sorted(set(offsets)):
            if self.start <= o < self.start + CAP:
                r = self.recs.get(o)
                if r is None:
                    self.hole(o)
                elif r.state == "available" and r.pending is None:
                    r.state = "archived"
        self.settle()

    def begin(self, member: str, batches, now: int):
        last_end = -1
        for first, last, types in batches:
            if (first > last or first < last_end or not types or any(t not in (0, 1, 2, 3) for t in types)
                    or len(types) not in (1, last - first + 1)):
                return Errors.INVALID_REQUEST, None
            last_end = last
        plan: dict[int, str] = {}
        for first, last, types in batches:
            if last < self.start:
                continue
            cached = sorted(self.live())
            lo = max(first, self.start)
            if not cached or cached[0] > lo:
                return IRS, None
            if last > cached[-1]:
                return Errors.INVALID_REQUEST, None
            for o in range(lo, last + 1):
                r = self.recs.get(o)
                if r is None:
                    continue
                if (o in plan or r.state != "acquired" or r.pending is not None or r.deadline <= now
                        or r.member != member):
                    return IRS, None
                kind = types[0] if len(types) == 1 else types[o - first]
                plan[o] = {ACCEPT: "acknowledged", RELEASE: "available" if r.count < LIMIT else "archived"}.get(
                    kind, "archived")
        if not plan:
            return Errors.NONE, None
        start = self.start
        while start in self.recs and (plan.get(start) or self.recs[start].state) in TERM and (
                start in plan or self.recs[start].pending is None):
            start += 1
        write = ShareState(start, tuple(_batches([(o, plan[o], self.recs[o].count) for o in sorted(plan)])))
        for o, s in plan.items():
            self.recs[o].pending = s
        return Errors.NONE, (plan, write)

    def finish(self, plan: dict[int, str], ok: bool, now: int) -> None:
        for o, s in plan.items():
            r = self.recs[o]
            if ok:
                r.free(s, write=True)
            elif r.deadline <= now:
                r.free("archived" if r.count >= LIMIT else "available", write=False)
            else:
                r.pending = None
        self.settle()

    def release(self, which) -> ShareState | None:
        changed = []
        for o, r in sorted(self.live().items()):
            if r.state == "acquired" and r.pending is None and which(r):
                r.free("archived" if r.count >= LIMIT else "available", write=True)
                changed.append((o, r.state, r.count))
        self.settle()
        return ShareState(self.start, tuple(_batches(changed))) if changed else None

    def persisted(self) -> ShareState:
        return ShareState(self.start, tuple(_batches([(o, *r.saved) for o, r in sorted(self.live().items())
                                                      if r.saved is not None])))

    def deadline(self) -> int | None:
        ds = [r.deadline for r in self.live().values() if r.state == "acquired" and r.pending is None]
        return min(ds) if ds else None


def _batches(items):
    """(offset, state name, count) ascending into persisted batches."""
    out: list[list] = []
    for o, s, count in items:
        if out and out[-1][1] == o - 1 and out[-1][2:] == [ID[s], count]:
            out[-1][1] = o
        else:
            out.append([o, o, ID[s], count])
    return [tuple(b) for b in out]


def _ranges(pairs):
    out: list[list[int]] = []
    for o, c in pairs:
        if out and out[-1][1] == o - 1 and out[-1][2] == c:
            out[-1][1] = o
        else:
            out.append([o, o, c])
    return [tuple(r) for r in out]


class SharePartitionMachine(RuleBasedStateMachine):
    """SharePartition against :class:`Model`, and the promises of spec §8 on the history."""

    @initialize(start=st.integers(0, 3), layout=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 3),
                                                                     st.sampled_from([AVAILABLE, ACKNOWLEDGED, ARCHIVED]),
                                                                     st.integers(1, LIMIT)), max_size=3))
    def setup(self, start, layout):
        batches, at = [], start
        for skip, length, state_id, count in layout:  # a persisted state with gaps
            count = min(count, LIMIT - 1) if state_id == AVAILABLE else count
            batches.append((at + skip, at + skip + length - 1, state_id, count))
            at += skip + length
        self.log = list(range(at + 2))
        self.now = 0
        self.coordinator = ShareState(start, tuple(batches))
        self.sp = SharePartition.load(start, batches, LOCK_MS, LIMIT, CAP)
        self.model = Model(start, batches)
        self.pendings: list = []  # (Pending, plan, member)
        self.stale: list = []  # Pendings of an earlier life
        self.sent: list[tuple[str, int, int]] = []  # (member, first, last) delivered
        self.holder: dict[int, str] = {}  # offset -> member whose lock on it has not ended (this life)
        self.counts: dict[int, int] = {}  # offset -> its last delivery count (this life)
        self.accepted: set[int] = set()
        self.last_start = self.sp.start_offset

    def write(self, delta: ShareState | None) -> None:
        if delta is not None:
            self.coordinator = merge(self.coordinator, delta)
            for first, last, _s, _c in delta.batches:
                for o in range(first, last + 1):
                    self.holder.pop(o, None)

    @rule(n=st.integers(1, 5), skip=st.integers(0, 2))
    def produce(self, n, skip):
        base = self.log[-1] + 1 + skip if self.log else skip
        self.log.extend(range(base, base + n))

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 6), cut=st.integers(0, 12))
    def acquire(self, member, max_records, cut):
        nfo = self.sp.next_fetch_offset()
        read = [o for o in self.log if o >= nfo][:cut or None]  # a read may stop short (fetch bytes)
        got = self.sp.acquire(member, self.now, read, max_records)
        assert got == _ranges(self.model.acquire(member, self.now, read, max_records))
        for first, last, count in got:
            self.sent.append((member, first, last))
            for o in range(first, last + 1):
                assert 1 <= count <= LIMIT, "delivered beyond the delivery limit"
                assert count > self.counts.get(o, 0), "delivery count did not go up within a life"
                assert o not in self.holder, f"offset {o} handed to {member} while {self.holder.get(o)} holds it"
                assert o not in self.accepted, f"accepted offset {o} delivered again"
                self.counts[o], self.holder[o] = count, member
        self.sent = self.sent[-8:]

    @rule(data=st.data())
    def archive(self, data):
        offs = data.draw(st.lists(st.integers(self.sp.start_offset, self.sp.start_offset + CAP), max_size=3))
        self.sp.archive(offs)
        self.model.archive(offs)

    @rule(data=st.data(), member=st.sampled_from(MEMBERS), own=st.booleans())
    def acknowledge(self, data, member, own):
        spans = data.draw(st.lists(st.sampled_from(self.sent), min_size=1, max_size=2)) if self.sent and own else \
            [(member, f, f + data.draw(st.integers(0, 3)))
             for f in data.draw(st.lists(st.integers(max(0, self.sp.start_offset - 3), self.sp.start_offset + CAP),
                                         min_size=1, max_size=2))]
        if own:
            member = spans[0][0] if data.draw(st.booleans()) else member
        batches = []
        for _m, first, last in sorted(spans, key=lambda s: s[1]):
            n = 1 if data.draw(st.booleans()) else last - first + 1
            batches.append((first, last, data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))))
        error, pending = self.sp.begin_acknowledge(member, batches, self.now)
        want, plan_write = self.model.begin(member, batches, self.now)
        assert error is want
        assert (pending is None) == (plan_write is None)
        if pending is not None:
            plan, write = plan_write
            assert pending.write == write
            assert dict(pending.targets) == {o: ID[s] for o, s in plan.items()}
            for o in plan:
                assert self.holder.get(o) == member, f"{member} acknowledged offset {o} held by {self.holder.get(o)}"
            self.pendings.append((pending, plan, member))

    @precondition(lambda self: self.pendings)
    @rule(data=st.data(), ok=st.booleans())
    def finish(self, data, ok):
        pending, plan, _member = self.pendings.pop(data.draw(st.integers(0, len(self.pendings) - 1)))
        if ok:
            self.write(pending.write)
            self.accepted |= {o for o, s in plan.items() if s == "acknowledged"}
        else:
            self.holder = {o: m for o, m in self.holder.items()
                           if not (o in plan and self.model.recs[o].deadline <= self.now)}
        self.sp.finish(pending, ok, self.now)
        self.model.finish(plan, ok, self.now)

    @rule(dt=st.integers(0, 3 * LOCK_MS // 2))
    def tick(self, dt):
        self.now += dt
        delta = self.sp.expire(self.now)
        assert delta == self.model.release(lambda r: r.deadline <= self.now)
        self.write(delta)

    @rule(member=st.sampled_from(MEMBERS))
    def release(self, member):
        delta = self.sp.release_member(member, self.now)
        assert delta == self.model.release(lambda r: r.member == member)
        self.write(delta)

    @rule()
    def reload(self):
        """A leader change: the new leader loads what was written."""
        saved = self.sp.persisted()
        before = self.sp.cached()
        self.sp = SharePartition.load(saved.start_offset, saved.batches, LOCK_MS, LIMIT, CAP)
        self.model = Model(saved.start_offset, saved.batches)
        self.stale += [p for p, _plan, _m in self.pendings]
        self.pendings, self.sent, self.holder, self.counts = [], [], {}, {}
        for o, r in before.items():
            if r.saved is not None and r.saved[0] in (ACKNOWLEDGED, ARCHIVED):
                now = self.sp.in_flight(o)
                assert o < self.sp.start_offset or (now.state, now.count) == r.saved, f"offset {o} lost its state"

    @precondition(lambda self: self.stale)
    @rule(data=st.data(), ok=st.booleans())
    def finish_stale(self, data, ok):
        self.sp.finish(data.draw(st.sampled_from(self.stale)), ok, self.now)  # ignored: the model is unchanged

    @invariant()
    def agrees_with_the_model(self):
        sp, model = self.sp, self.model
        assert sp.start_offset == model.start
        assert sp.next_fetch_offset() == model.next_fetch()
        assert sp.end_offset == (model.top - 1 if model.top > model.start else model.start)
        assert sp.next_deadline() == model.deadline()
        cached = sp.cached()
        assert set(cached) == set(model.live())
        for o, r in model.live().items():
            c = cached[o]
            assert (NAME[c.state], c.count, c.member, c.deadline) == (r.state, r.count, r.member, r.deadline), o
            assert (c.pending is None and r.pending is None) or NAME[c.pending] == r.pending
        assert sp.persisted() == model.persisted()

    @invariant()
    def start_offset_only_moves_up_over_done_offsets(self):
        assert self.sp.start_offset >= self.last_start
        self.last_start = self.sp.start_offset
        for o, r in self.model.recs.items():
            assert o >= self.sp.start_offset or r.state in TERM

    @invariant()
    def the_writes_fold_into_what_persisted_says(self):
        folded = merge(self.coordinator, ShareState(self.sp.start_offset))
        assert folded == self.sp.persisted()


SharePartitionMachine.TestCase.settings = settings(max_examples=400, stateful_step_count=50, deadline=None,
                                                   suppress_health_check=[HealthCheck.too_slow])
test_share_partition_machine = SharePartitionMachine.TestCase


class DeepSharePartitionMachine(SharePartitionMachine):
    pass


DeepSharePartitionMachine.TestCase.settings = settings(max_examples=3000, stateful_step_count=80, deadline=None,
                                                       suppress_health_check=[HealthCheck.too_slow])
test_share_partition_machine_deep = pytest.mark.slow(DeepSharePartitionMachine.TestCase)
