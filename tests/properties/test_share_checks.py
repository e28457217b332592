"""KIP-932 share groups (properties/share_checks.py): each anomaly on a minimal history that has
it, and the near misses that must not have it, judged by both engines of the checker (the
compiled one hands share histories to Python); the history format's new ops round trip."""

from __future__ import annotations

import json
import re

import pytest

from properties.checker import ENGINES, check
from tests.properties.test_checker import H
from traces.history import HistoryError, iter_history, read_history, read_run_json, write_jsonl

K = "t0:0"
SHARE = {"group": "g", "keys": [K], "lock_ms": 30_000, "delivery_limit": 5, "clock_slack_ms": 0, "final": False}
MS = 1_000_000


def config(**share):
    return {"acks": "all", "share": {**SHARE, **share}}


class S(H):
    """:class:`H` with a clock (ms steps, ``wait``) and the share ops."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0

    def _op(self, process, type_, f, value, **extra):
        self.now += MS  # each op 1 ms after the one before
        op = {"index": len(self.ops), "time": self.now, "process": process, "type": type_, "f": f,
              "value": value, **extra}
        self.ops.append(op)
        return op

    def wait(self, ms: int) -> S:
        self.now += ms * MS
        return self

    def acquire(self, p, records, key=K, type_="ok", **extra):
        """``records``: [(offset, value, count)]; ``extra``: op fields of the completion."""
        self._op(p, "invoke", "acquire", None)
        self._op(p, type_, "acquire", {key: [list(r) for r in records]} if type_ == "ok" else None, **extra)
        return self

    def ack(self, p, acks, error="NONE", type_="ok", key=K):
        """``acks``: [(offset, "accept" | "release" | "reject")]."""
        value = {key: [list(a) for a in acks]}
        self._op(p, "invoke", "ack", value)
        self._op(p, type_, "ack", {**value, "errors": {key: error}} if type_ == "ok" else None)
        return self

    def crash(self, p, **extra):
        self._op(p, "invoke", "crash", None)
        self._op(p, "info", "crash", None, **extra)
        return self

    def subscribe(self, p):
        self._op(p, "invoke", "subscribe", [K])
        self._op(p, "ok", "subscribe", [K])
        return self

    def nemesis(self, f, value):
        self._op("nemesis", "invoke", f, value)
        self._op("nemesis", "info", f, value)
        return self


@pytest.fixture(params=ENGINES)
def engine(request):
    return request.param


def judge(h: S, engine: str, **share) -> dict:
    return check(h.ops, config(**share), engine=engine)


def written(n: int = 1) -> S:
    """Values 100.. acknowledged at offsets 0..n-1."""
    h = S()
    for o in range(n):
        h.send(0, K, 100 + o, o)
    return h


def test_a_clean_share_history_is_valid(engine):
    h = written(2).acquire(1, [(0, 100, 1), (1, 101, 1)]).ack(1, [(0, "accept"), (1, "release")])
    h.acquire(2, [(1, 101, 2)]).ack(2, [(1, "accept")])
    r = judge(h, engine, final=True)
    assert r["valid"] is True, r["anomalies"]
    assert not any(k.startswith("share") for k in r["allowed"])


# ------------------------------------------------------------------ share-double-acquired


def test_a_record_acquired_again_within_its_lock_is_double_acquired(engine):
    h = written().acquire(1, [(0, 100, 1)]).wait(1000).acquire(2, [(0, 100, 2)])
    r = judge(h, engine)
    assert r["anomaly_types"] == ["share-double-acquired"]
    a = r["anomalies"]["share-double-acquired"][0]
    assert a["key"] == K and a["offset"] == 0 and a["ops"] == [3, 5] and a["processes"] == [1, 2]


def test_a_record_redelivered_to_its_own_holder_within_the_lock_is_double_acquired(engine):
    h = written().acquire(1, [(0, 100, 1)]).acquire(1, [(0, 100, 2)])
    assert judge(h, engine)["anomaly_types"] == ["share-double-acquired"]


def test_after_the_lock_could_have_expired_a_second_acquisition_is_fine(engine):
    h = written().acquire(1, [(0, 100, 1)]).wait(30_000).acquire(2, [(0, 100, 2)])
    assert judge(h, engine)["valid"] is True
    # the clock slack widens the window the lock may have ended in
    h = written().acquire(1, [(0, 100, 1)]).wait(29_000).acquire(2, [(0, 100, 2)])
    assert judge(h, engine)["anomaly_types"] == ["share-double-acquired"]
    assert judge(h, engine, clock_slack_ms=2_000)["valid"] is True


@pytest.mark.parametrize("kind", ["release", "accept", "reject"])
def test_an_ack_of_the_holder_that_may_have_applied_releases_it(engine, kind):
    for error, type_ in (("NONE", "ok"), ("REQUEST_TIMED_OUT", "ok"), (None, "info")):
        h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, kind)], error=error, type_=type_)
        h.acquire(2, [(0, 100, 2)])
        anomalies = judge(h, engine)["anomaly_types"]
        assert "share-double-acquired" not in anomalies, (kind, error, type_)


@pytest.mark.parametrize("error", ["INVALID_RECORD_STATE", "NOT_LEADER_OR_FOLLOWER", "InvalidRecordStateException"])
def test_an_ack_refused_definitely_does_not_release_it(engine, error):
    h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, "release")], error=error).acquire(2, [(0, 100, 2)])
    assert judge(h, engine)["anomaly_types"] == ["share-double-acquired"]
    h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, "release")], type_="fail").acquire(2, [(0, 100, 2)])
    assert judge(h, engine)["anomaly_types"] == ["share-double-acquired"]


def test_an_ack_of_another_record_or_by_another_process_does_not_release_it(engine):
    h = written(2).acquire(1, [(0, 100, 1), (1, 101, 1)]).ack(1, [(1, "release")]).ack(3, [(0, "release")])
    h.acquire(2, [(0, 100, 2)])
    assert judge(h, engine)["anomaly_types"] == ["share-double-acquired"]


def test_a_release_that_succeeded_before_the_acquisition_does_not_release_it(engine):
    h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, "release")]).acquire(1, [(0, 100, 2)])
    h.acquire(2, [(0, 100, 3)])
    r = judge(h, engine)
    assert r["anomaly_types"] == ["share-double-acquired"]
    assert r["anomalies"]["share-double-acquired"][0]["ops"] == [7, 9]


@pytest.mark.parametrize("leave", ["crash", "subscribe"])
def test_a_crash_or_leave_of_the_holder_releases_it(engine, leave):
    h = written().acquire(1, [(0, 100, 1)])
    getattr(h, leave)(1)
    h.acquire(2, [(0, 100, 2)])
    assert judge(h, engine)["valid"] is True


def test_a_holder_that_went_on_as_a_new_process_may_have_released_it(engine):
    h = written().acquire(1, [(0, 100, 1)]).acquire(1, [], type_="info").acquire(2, [(0, 100, 2)])
    assert judge(h, engine)["valid"] is True


def test_a_crash_before_the_acquisition_does_not_release_it(engine):
    h = written().crash(1).subscribe(1).acquire(1, [(0, 100, 1)]).acquire(2, [(0, 100, 2)])
    assert judge(h, engine)["anomaly_types"] == ["share-double-acquired"]


def test_records_fetched_before_the_op_began_are_judged_from_their_fetch(engine):
    h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, "accept")]).wait(60_000).acquire(2, [(0, 100, 2)])
    h.ops[-1]["fetch_time"] = h.ops[5]["time"] - 1  # the ShareFetch went out before the accept's answer
    assert judge(h, engine)["valid"] is True
    h.ops[-1]["fetch_time"] = h.ops[5]["time"] + 1
    assert judge(h, engine)["anomaly_types"] == ["share-redelivered-accepted"]
    h = written().acquire(1, [(0, 100, 1)]).acquire(2, [(0, 100, 2)])
    h.ops[-1]["fetch_time"] = h.ops[2]["time"]  # fetched while the first acquisition was under way
    assert judge(h, engine)["valid"] is True


def test_a_second_acquisition_not_surely_after_the_first_is_fine(engine):
    h = written()
    h._op(1, "invoke", "acquire", None)
    h._op(2, "invoke", "acquire", None)
    h._op(1, "ok", "acquire", {K: [[0, 100, 1]]})
    h._op(2, "ok", "acquire", {K: [[0, 100, 2]]})
    assert judge(h, engine)["valid"] is True


@pytest.mark.parametrize("fault", [("kill", {"nodes": [2]}), ("pause", {"nodes": [1]}), ("partition", {"grudge": {}}),
                                   ("client-drop", {"nodes": ["n1"]})])
def test_a_broker_fault_between_allows_it_as_share_lock_forgotten(engine, fault):
    h = written().acquire(1, [(0, 100, 1)]).nemesis(*fault).acquire(2, [(0, 100, 1)])
    r = judge(h, engine)
    assert r["valid"] is True and r["allowed"]["share-lock-forgotten"] == 1
    assert r["allowed"]["share-count-forgotten"] == 1  # the count restarted at 1 too
    assert check(h.ops, config(), engine=engine, forbid=("share-lock-forgotten",))["anomaly_types"] == [
        "share-lock-forgotten"]


def test_a_fault_in_force_across_the_window_allows_it_and_one_healed_before_does_not(engine):
    h = written().nemesis("kill", {"nodes": [2]}).acquire(1, [(0, 100, 1)]).acquire(2, [(0, 100, 2)])
    h.nemesis("restart", {"nodes": [2]})
    assert judge(h, engine)["valid"] is True
    h = written().nemesis("kill", {"nodes": [2]}).nemesis("restart", {"nodes": [2]})
    h.acquire(1, [(0, 100, 1)]).acquire(2, [(0, 100, 2)])
    assert judge(h, engine)["valid"] is True  # leadership settles for a while after the restart
    assert judge(h, engine, settle_ms=0)["anomaly_types"] == ["share-double-acquired"]
    h = written().nemesis("kill", {"nodes": [2]}).nemesis("restart", {"nodes": [2]}).wait(10_000)
    h.acquire(1, [(0, 100, 1)]).acquire(2, [(0, 100, 2)])
    assert judge(h, engine)["anomaly_types"] == ["share-double-acquired"]


def test_a_pause_of_consumers_only_is_no_broker_fault(engine):
    h = written().acquire(1, [(0, 100, 1)]).nemesis("pause", {"nodes": [102], "processes": [3]})
    h.acquire(2, [(0, 100, 2)])
    assert judge(h, engine)["anomaly_types"] == ["share-double-acquired"]


# ------------------------------------------------------------------ share-redelivered-accepted


def test_an_accepted_record_acquired_again_is_redelivered_accepted(engine):
    h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, "accept")]).wait(60_000).acquire(2, [(0, 100, 2)])
    r = judge(h, engine)
    assert r["anomaly_types"] == ["share-redelivered-accepted"]
    assert r["anomalies"]["share-redelivered-accepted"][0]["ops"] == [5, 7]


def test_an_accept_sent_after_the_lock_may_have_expired_promises_nothing(engine):
    """A late accept may be answered NONE silently, for a record already done (archived at the
    limit, its start offset passed): a redelivery after it is no finding."""
    h = written().acquire(1, [(0, 100, 5)]).wait(31_000).ack(1, [(0, "accept")]).nemesis("kill", {"nodes": [1]})
    assert judge(h.acquire(2, [(0, 100, 1)]), engine)["anomaly_types"] == []  # (a new leader: the count restarts)
    # within the lock, the same accept is a promise
    h = written().acquire(1, [(0, 100, 5)]).ack(1, [(0, "accept")]).nemesis("kill", {"nodes": [1]})
    assert judge(h.acquire(2, [(0, 100, 1)]), engine)["anomaly_types"] == ["share-redelivered-accepted"]


def test_an_accepted_record_acquired_again_after_a_leader_change_is_still_redelivered_accepted(engine):
    h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, "accept")]).nemesis("kill", {"nodes": [1]})
    h.acquire(2, [(0, 100, 1)])
    assert judge(h, engine)["anomaly_types"] == ["share-redelivered-accepted"]


@pytest.mark.parametrize(("error", "type_"), [("REQUEST_TIMED_OUT", "ok"), ("INVALID_RECORD_STATE", "ok"),
                                              (None, "info"), (None, "fail")])
def test_an_accept_not_surely_applied_allows_a_redelivery(engine, error, type_):
    h = written().acquire(1, [(0, 100, 1)]).wait(30_000).ack(1, [(0, "accept")], error=error, type_=type_)
    h.acquire(2, [(0, 100, 2)])
    assert judge(h, engine)["valid"] is True


def test_an_acquisition_invoked_before_the_accept_answered_is_not_redelivered_accepted(engine):
    h = written().acquire(1, [(0, 100, 1)]).wait(30_000)
    h._op(1, "invoke", "ack", {K: [[0, "accept"]]})
    h._op(2, "invoke", "acquire", None)
    h._op(1, "ok", "ack", {K: [[0, "accept"]], "errors": {K: "NONE"}})
    h._op(2, "ok", "acquire", {K: [[0, 100, 2]]})
    assert judge(h, engine)["valid"] is True


def _from(h: S, node: int) -> S:
    """The last completion came from broker ``node`` (its op's ``nodes``)."""
    h.ops[-1]["nodes"] = {K: node}
    return h


def test_an_accepted_record_delivered_again_by_another_broker_while_one_was_cut_off_is_a_stale_leader(engine):
    h = written().nemesis("partition", {"grudge": {"1": [2, 3], "2": [1], "3": [1]}, "kind": "isolate"})
    _from(h.acquire(1, [(0, 100, 1)]), 2)
    _from(h.ack(1, [(0, "accept")]), 2).wait(1_000)
    _from(h.acquire(2, [(0, 100, 1)]), 1)  # broker 1, cut off, still thinks it leads
    r = judge(h, engine)
    assert r["valid"] is True and r["allowed"]["share-redelivered-stale-leader"] == 1, r
    # the broker that took the accept gave it again: no excuse
    h = written().nemesis("partition", {"grudge": {"1": [2, 3], "2": [1], "3": [1]}, "kind": "isolate"})
    _from(h.acquire(1, [(0, 100, 1)]), 2)
    _from(h.ack(1, [(0, "accept")]), 2).wait(1_000)
    _from(h.acquire(2, [(0, 100, 2)]), 2)
    assert judge(h, engine)["anomaly_types"] == ["share-redelivered-accepted"]


def test_a_cut_off_that_healed_before_the_accept_or_began_after_the_redelivery_excuses_nothing(engine):
    """Found on Kafka 4.3.1: accepted records delivered again 30 s after the accept, with a
    pause of one broker before the accept (healed) and of another just before the redelivery.
    A stale leader serves what it had while it is cut off: one window must span the accept
    (taken by the new leader) and the redelivery, settle time included; the windows used to
    lack the ops that end them, and never ended."""
    h = written().nemesis("pause", {"nodes": [3]}).nemesis("resume", {"nodes": [3]}).wait(11_000)
    h.acquire(1, [(0, 100, 1)]).ack(1, [(0, "accept")]).wait(1_000)
    h.acquire(2, [(0, 100, 2)])
    assert judge(h, engine)["anomaly_types"] == ["share-redelivered-accepted"]  # healed (and settled) before
    h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, "accept")]).wait(1_000)
    h.nemesis("pause", {"nodes": [2]}).acquire(2, [(0, 100, 2)])
    assert judge(h, engine)["anomaly_types"] == ["share-redelivered-accepted"]  # began after the accept
    h = written().nemesis("pause", {"nodes": [3]}).acquire(1, [(0, 100, 1)]).ack(1, [(0, "accept")])
    h.wait(1_000).acquire(2, [(0, 100, 1)]).nemesis("resume", {"nodes": [3]})
    r = judge(h, engine)
    assert r["valid"] is True and r["allowed"]["share-redelivered-stale-leader"] == 1  # one window spans both

def test_an_ack_applied_to_a_record_another_consumer_acquired_since_is_not_held(engine):
    h = written().acquire(1, [(0, 100, 1)]).wait(31_000).acquire(2, [(0, 100, 2)])
    h.ack(1, [(0, "release")])  # its lock ran out, and consumer 2 holds it: Kafka refuses this
    r = judge(h, engine)
    assert r["anomaly_types"] == ["share-ack-not-held"] and r["anomalies"]["share-ack-not-held"][0]["ops"] == [3, 5, 7]
    # refused, as Kafka refuses it: fine
    h = written().acquire(1, [(0, 100, 1)]).wait(31_000).acquire(2, [(0, 100, 2)])
    assert judge(h.ack(1, [(0, "release")], error="INVALID_RECORD_STATE"), engine)["valid"] is True
    # consumer 2 accepted it first: the start offset may have passed it, a late ack succeeds silently
    h = written().acquire(1, [(0, 100, 1)]).wait(31_000).acquire(2, [(0, 100, 2)]).ack(2, [(0, "accept")])
    assert judge(h.ack(1, [(0, "accept")]), engine)["valid"] is True


# ------------------------------------------------------------------ share-lost


def test_an_acknowledged_write_never_accepted_is_lost_after_the_final_phase(engine):
    h = written(2).acquire(1, [(0, 100, 1)]).ack(1, [(0, "accept")])
    r = judge(h, engine, final=True)
    assert r["anomaly_types"] == ["share-lost"]
    lost = r["anomalies"]["share-lost"][0]
    assert lost["offset"] == 1 and lost["value"] == 101 and lost["ops"] == [3]
    assert judge(h, engine, final=False)["valid"] is True  # without a final phase: not judged


def test_a_write_never_delivered_is_lost_on_both_engines(tmp_path, engine):
    h = written()  # no share op: the compiled engine judges the rest, the share check runs beside it
    r = judge(h, engine, final=True)
    assert r["anomaly_types"] == ["share-lost"] and "never delivered" in r["anomalies"]["share-lost"][0]["explanation"]
    write_jsonl(tmp_path / "history.jsonl", h.ops)  # streamed from the file, as kafkacheck check does
    assert check(iter_history(tmp_path / "history.jsonl"), config(final=True), engine=engine)["anomaly_types"] == [
        "share-lost"]


def test_a_record_released_and_never_delivered_again_is_lost(engine):
    h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, "release")])
    assert judge(h, engine, final=True)["anomaly_types"] == ["share-lost"]


def test_a_record_delivered_up_to_the_limit_or_rejected_or_possibly_accepted_is_not_lost(engine):
    h = written()
    for n in range(1, 6):
        h.acquire(n, [(0, 100, n)]).ack(n, [(0, "release")])
    assert judge(h, engine, final=True)["valid"] is True
    h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, "reject")])
    assert judge(h, engine, final=True)["valid"] is True
    h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, "accept")], type_="info")
    assert judge(h, engine, final=True)["valid"] is True
    h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, "accept")], error="INVALID_RECORD_STATE")
    assert judge(h, engine, final=True)["anomaly_types"] == ["share-lost"]


def test_acquisitions_whose_answer_was_lost_may_have_reached_the_limit_unseen(engine):
    h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, "release")]).acquire(2, [(0, 100, 2)])
    h.ack(2, [(0, "release")]).acquire(3, [(0, 100, 3)]).ack(3, [(0, "release")])
    assert judge(h, engine, final=True)["anomaly_types"] == ["share-lost"]
    h.acquire(4, [], type_="info")
    assert judge(h, engine, final=True)["anomaly_types"] == ["share-lost"]
    h.acquire(5, [], type_="info")
    assert judge(h, engine, final=True)["valid"] is True


def test_sharefetch_answers_a_consumer_lost_count_as_unseen_deliveries(engine):
    """Found by swarm seed 137: every ShareFetch timed out under a delay longer than the
    request timeout, yet each acquired records at the leader; their counts reached the limit
    and they were archived, never seen. The ops say how many answers were lost."""
    h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, "release")])
    h.acquire(2, [], lost_fetches=3)
    assert judge(h, engine, final=True)["anomaly_types"] == ["share-lost"]  # 1 + 3 < 5
    h.crash(3, lost_fetches=1)  # gone with a fetch out: its answer may land any time
    assert judge(h, engine, final=True)["valid"] is True
    early = written().acquire(2, [], lost_fetches=4)  # lost before the write began: no allowance
    early.ops = [*early.ops[2:], *early.ops[:2]]  # (the acquire first, then the write)
    for i, op in enumerate(early.ops):
        op["index"], op["time"] = i, (i + 1) * MS
    assert judge(early, engine, final=True)["anomaly_types"] == ["share-lost"]
    with pytest.raises(HistoryError, match="lost_fetches"):
        judge(written().acquire(2, [], lost_fetches=-1), engine, final=True)


def test_share_lost_is_not_judged_with_weak_acks(engine):
    h = written()
    assert check(h.ops, {**config(final=True), "acks": "1"}, engine=engine)["valid"] is True


# ------------------------------------------------------------------ counts and values


def test_a_count_above_the_limit_or_below_one_is_share_delivery_limit(engine):
    h = written(2).acquire(1, [(0, 100, 6), (1, 101, 0)])
    r = judge(h, engine)
    assert r["anomaly_types"] == ["share-delivery-limit"] and r["counts"]["share-delivery-limit"] == 2
    assert judge(written().acquire(1, [(0, 100, 5)]), engine)["valid"] is True


def test_a_count_that_does_not_rise_is_share_count_regressed(engine):
    h = written().acquire(1, [(0, 100, 2)]).ack(1, [(0, "release")]).acquire(2, [(0, 100, 2)])
    r = judge(h, engine)
    assert r["anomaly_types"] == ["share-count-regressed"]
    assert r["anomalies"]["share-count-regressed"][0]["counts"] == [2, 2]
    h = written().acquire(1, [(0, 100, 2)]).ack(1, [(0, "release")]).acquire(2, [(0, 100, 3)])
    assert judge(h, engine)["valid"] is True


def test_a_count_that_went_back_over_a_broker_fault_is_allowed(engine):
    h = written().acquire(1, [(0, 100, 2)]).ack(1, [(0, "release")]).nemesis("restart", {"nodes": [1]})
    h.acquire(2, [(0, 100, 1)])
    r = judge(h, engine)
    assert r["valid"] is True and r["allowed"]["share-count-forgotten"] == 1


def test_a_delivered_value_that_is_not_the_written_one_is_a_value_mismatch(engine):
    assert judge(written().acquire(1, [(0, 999, 1)]), engine)["anomaly_types"] == ["share-value-mismatch"]
    assert judge(written(2).acquire(1, [(0, 101, 1)]), engine)["anomaly_types"] == ["share-value-mismatch"]
    h = S().send(0, K, 100, None, type_="fail").send(0, K, 101, 1).acquire(1, [(0, 100, 1)])
    assert judge(h, engine)["anomaly_types"] == ["share-value-mismatch"]
    h = S().send(0, K, 100, None, type_="info").send(0, K, 101, None, type_="info")
    h.acquire(1, [(0, 100, 1)]).ack(1, [(0, "release")]).acquire(2, [(0, 101, 2)])
    assert judge(h, engine)["anomaly_types"] == ["share-value-mismatch"]
    h = S().send(0, K, 100, None, type_="info").acquire(1, [(0, 100, 1)])
    assert judge(h, engine)["valid"] is True


# ------------------------------------------------------------------ the format


@pytest.mark.parametrize(("f", "type_", "value", "says"), [
    ("acquire", "ok", [[0, 1, 1]], "an ok acquire's value"),
    ("acquire", "ok", {K: [[0, 1]]}, "an acquired record is [offset, value, delivery count]"),
    ("acquire", "ok", {K: [[0, 1.5, 1]]}, "a value must be an integer"),
    ("acquire", "info", {K: []}, "an acquire's info value must be null"),
    ("ack", "ok", {K: [[0, "accept"]]}, "must carry \"errors\""),
    ("ack", "ok", {K: [[0, "keep"]], "errors": {K: "NONE"}}, "an acknowledgement is [offset"),
    ("ack", "ok", {K: [[0, "accept"]], "errors": {K: 3}}, "an ack's errors"),
    ("acquire", "ok-fetch", {K: []}, "fetch_time must be an integer"),
])
def test_a_malformed_share_op_is_one_line_of_history_error(tmp_path, engine, f, type_, value, says):
    invoke = None if f == "acquire" else {K: [[0, "accept"]]}
    ops = [{"index": 0, "time": 1, "process": 1, "type": "invoke", "f": f, "value": invoke},
           {"index": 1, "time": 2, "process": 1, "type": type_, "f": f, "value": value}]
    if type_ == "ok-fetch":
        ops[1].update(type="ok", fetch_time="soon")
    with pytest.raises(HistoryError, match=re.escape(says)):
        check(ops, config(), engine=engine)
    write_jsonl(tmp_path / "history.jsonl", ops)
    with pytest.raises(HistoryError, match=rf"history.jsonl:2: .*{re.escape(says)}"):
        read_history(tmp_path / "history.jsonl")


@pytest.mark.parametrize("share", [{"lock_ms": 0}, {"lock_ms": "30s"}, {"delivery_limit": None}, {"final": "yes"},
                                   {"keys": "t0:0"}, {"settle_ms": -1}])
def test_a_malformed_share_config_is_a_history_error(engine, share):
    with pytest.raises(HistoryError, match=r"config\.share"):
        judge(written(), engine, **share)


def test_run_json_with_a_share_config_that_is_not_an_object_is_refused(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps({"config": {"share": [1]}}))
    with pytest.raises(HistoryError, match=r"config\.share must be a JSON object"):
        read_run_json(tmp_path / "run.json")


def share_run() -> S:
    h = written(2).acquire(1, [(0, 100, 1), (1, 101, 1)]).ack(1, [(0, "accept"), (1, "release")])
    h.nemesis("kill", {"nodes": [2]}).acquire(2, [(1, 101, 1)]).ack(2, [(1, "accept")], error="NONE")
    h.acquire(3, [(0, 100, 2)]).crash(3)
    return h


def test_a_share_history_round_trips_through_jsonl_and_parquet(tmp_path, engine):
    h = share_run()
    meta = {"format": 1, "run_id": "share-1", "seed": 0, "target": "sim", "workload": "share",
            "config": config(final=True)}
    (tmp_path / "run.json").write_text(json.dumps(meta))
    write_jsonl(tmp_path / "history.jsonl", h.ops)
    ops = read_history(tmp_path / "history.jsonl")
    assert ops == h.ops
    r = check(ops, meta["config"], engine=engine)
    assert r["anomaly_types"] == ["share-redelivered-accepted"] and r["allowed"]["share-count-forgotten"] == 1
    pytest.importorskip("pyarrow")
    from traces.history import RunRecord
    from traces.parquet import read_run, run_rows, to_tables, write_part

    write_part(tmp_path / "corpus", "part-00000-test", to_tables([run_rows(RunRecord(meta, ops))]))
    back = read_run(tmp_path / "corpus", "share-1")
    assert back.ops == ops and back.meta == meta


def test_kafkacheck_check_judges_a_share_run_directory(tmp_path):
    from kafkacheck.cli import main

    meta = {"format": 1, "run_id": "share-1", "seed": 0, "target": "sim", "workload": "share",
            "config": config(final=True)}
    (tmp_path / "run.json").write_text(json.dumps(meta))
    write_jsonl(tmp_path / "history.jsonl", share_run().ops)
    assert main(["check", str(tmp_path), "--format", "json"]) == 1
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["anomaly_types"] == ["share-redelivered-accepted"]


def test_with_real_clients_a_fault_after_the_write_may_have_spent_its_deliveries_unseen(engine):
    """Java's and librdkafka's share consumers retry a fetch whose answer a fault lost without
    telling the application: with config.share.unseen_in_faults a record written before the
    last fault ended and never seen again is share-lost-unseen, allowed; one written after
    it is still share-lost."""
    h = written().acquire(1, [(0, 100, 1)]).ack(1, [(0, "release")])
    h.nemesis("partition", {"nodes": [1]}).nemesis("heal", None)
    assert judge(h, engine, final=True)["anomaly_types"] == ["share-lost"]
    r = judge(h, engine, final=True, unseen_in_faults=True)
    assert r["valid"] is True and r["allowed"]["share-lost-unseen"] == 1
    h.send(0, K, 101, 1)  # after the fault (and its settle time): no allowance
    h.wait(20_000).send(0, K, 102, 2)
    r = judge(h, engine, final=True, unseen_in_faults=True)
    assert r["anomaly_types"] == ["share-lost"] and [a["offset"] for a in r["anomalies"]["share-lost"]] == [2]
    with pytest.raises(HistoryError, match="unseen_in_faults"):
        judge(h, engine, final=True, unseen_in_faults="yes")


def test_read_committed_a_record_of_an_aborted_transaction_is_never_delivered(engine):
    """share-aborted-delivered: the transaction wrote offset 0 and aborted; read_committed it
    must never be delivered (read_uncommitted it may be: Kafka's default isolation)."""
    from tests.properties.test_checker import txn

    h = S()
    txn(h, 0, [["send", K, [0, 100]]], type_="fail")
    txn(h, 0, [["send", K, [2, 101]]])
    h.acquire(1, [(0, 100, 1), (2, 101, 1)]).ack(1, [(0, "accept"), (2, "accept")])
    r = judge(h, engine, isolation="read_committed")
    assert r["anomaly_types"] == ["share-aborted-delivered"]
    assert r["anomalies"]["share-aborted-delivered"][0]["ops"] == [1, 5]
    assert judge(h, engine)["valid"] is True  # read_uncommitted: an aborted record may be delivered
    with pytest.raises(HistoryError, match="isolation"):
        judge(h, engine, isolation="serializable")

