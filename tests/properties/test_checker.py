"""The durability and ordering checker: each anomaly on a small history that has it, and a
history that has none."""

from __future__ import annotations

import pytest

from properties.checker import check


class H:
    """Builds histories op by op, with dense indices."""

    def __init__(self) -> None:
        self.ops: list[dict] = []

    def _op(self, process, type_, f, value, **extra):
        op = {"index": len(self.ops), "time": len(self.ops) * 1000, "process": process,
              "type": type_, "f": f, "value": value, **extra}
        self.ops.append(op)
        return op

    def send(self, p, key, value, offset, type_="ok"):
        self._op(p, "invoke", "send", [["send", key, value]])
        done = [["send", key, [offset, value]]] if offset is not None else [["send", key, value]]
        self._op(p, type_, "send", done)
        return self

    def sends(self, p, pairs, type_="ok"):
        self._op(p, "invoke", "send", [["send", k, v] for k, v, _o in pairs])
        self._op(p, type_, "send", [["send", k, [o, v]] for k, v, o in pairs])
        return self

    def poll(self, p, reads, type_="ok"):
        self._op(p, "invoke", "poll", [["poll"]])
        self._op(p, type_, "poll", [["poll", reads]])
        return self

    def assign(self, p, keys):
        self._op(p, "invoke", "assign", keys)
        self._op(p, "ok", "assign", keys)
        return self


def kinds(history: H, config=None) -> list[str]:
    return check(history.ops, config or {"sub_via": ["assign"]})["anomaly_types"]


def test_a_clean_history_is_valid():
    h = H().assign(1, ["x"]).send(0, "x", 1, 0).send(0, "x", 2, 1).poll(1, {"x": [[0, 1], [1, 2]]})
    result = check(h.ops, {"sub_via": ["assign"]})
    assert result["valid"] is True and result["anomaly_types"] == []
    assert result["stats"]["ok"] == 4


def test_two_values_at_one_offset_are_inconsistent_offsets():
    h = H().send(0, "x", 1, 0).poll(1, {"x": [[0, 2]]})
    result = check(h.ops)
    assert "inconsistent-offsets" in result["anomaly_types"]
    a = result["anomalies"]["inconsistent-offsets"][0]
    assert a["offset"] == 0 and a["values"] == [1, 2] and a["ops"] == [1, 3]


def test_one_value_at_two_offsets_is_a_duplicate():
    h = H().send(0, "x", 1, 0).poll(1, {"x": [[0, 1], [1, 1]]})
    assert "duplicate" in kinds(h)


def test_an_acknowledged_value_skipped_by_readers_is_a_lost_write():
    h = H().send(0, "x", 1, 0).send(0, "x", 2, 1).send(0, "x", 3, 2).poll(1, {"x": [[0, 1], [2, 3]]})
    result = check(h.ops)
    assert "lost-write" in result["anomaly_types"]
    lost = result["anomalies"]["lost-write"][0]
    assert lost["value"] == 2 and lost["ops"] == [3, 7]  # the writer, and who read past it
    assert "no ok poll ever read it" in lost["explanation"]


def test_an_unread_value_after_the_last_read_is_not_a_lost_write_without_a_final_read():
    h = H().send(0, "x", 1, 0).send(0, "x", 2, 1).poll(1, {"x": [[0, 1]]})
    result = check(h.ops)
    assert result["valid"] is True
    assert result["allowed"] == {"unseen": 1}


def test_with_a_final_read_an_unread_acknowledged_value_is_lost():
    h = H().send(0, "x", 1, 0).send(0, "x", 2, 1).poll(1, {"x": [[0, 1]]})
    config = {"final_read": {"performed": True, "reached_end": True, "start_ns": 10**9,
                             "end_offsets": {"x": 1}, "staleness_bound_ms": 1000}}
    result = check(h.ops, config)
    assert result["anomaly_types"] == ["unread-after-heal"]


def test_with_a_final_read_a_value_read_during_the_run_and_gone_at_the_end_is_lost():
    """The zombie-leader loss on Kafka with unclean elections: readers saw the acknowledged
    value, then a leader without it was elected and the old leader truncated: the final
    read, which read the partition to its end, does not find it (it is unread-after-heal, as
    the definition says, even though a poll once read it)."""
    h = H().send(0, "x", 1, 0).send(0, "x", 2, 1).poll(1, {"x": [[0, 1], [1, 2]]})
    start = len(h.ops) * 1000
    h.poll(2, {"x": [[0, 1]]})  # the final read: value 2 is gone
    config = {"final_read": {"performed": True, "reached_end": True, "start_ns": start,
                             "end_offsets": {"x": 1}, "staleness_bound_ms": 1000}}
    result = check(h.ops, config)
    assert result["anomaly_types"] == ["unread-after-heal"]
    lost = result["anomalies"]["unread-after-heal"][0]
    assert lost["value"] == 2 and "read by op" in lost["explanation"]
    still_there = H().send(0, "x", 1, 0).send(0, "x", 2, 1).poll(1, {"x": [[0, 1], [1, 2]]})
    still_there.poll(2, {"x": [[0, 1], [1, 2]]})
    assert check(still_there.ops, config)["valid"] is True


def test_a_final_read_that_missed_its_bound_is_reported():
    h = H().send(0, "x", 1, 0).poll(1, {"x": [[0, 1]]})
    config = {"final_read": {"performed": True, "reached_end": False, "start_ns": 10**9,
                             "end_offsets": {}, "staleness_bound_ms": 1000}}
    assert kinds(h, config) == ["stale-after-heal"]


def test_reading_a_failed_write_is_g1a():
    h = H().send(0, "x", 1, None, type_="fail").poll(1, {"x": [[0, 1]]})
    assert "G1a" in kinds(h)


def test_an_info_send_that_was_read_counts_as_committed():
    h = (H().send(0, "x", 1, 0).send(2, "x", 2, None, type_="info").send(0, "x", 3, 2)
         .poll(1, {"x": [[0, 1], [1, 2], [2, 3]]}))
    assert kinds(h) == []


def test_a_gap_inside_one_poll_is_an_int_poll_skip():
    h = H().sends(0, [("x", 1, 0), ("x", 2, 1), ("x", 3, 2)]).poll(1, {"x": [[0, 1], [2, 3]]})
    h.poll(2, {"x": [[0, 1], [1, 2], [2, 3]]})
    assert kinds(h) == ["int-poll-skip"]


def test_going_back_inside_one_poll_is_int_nonmonotonic():
    h = H().sends(0, [("x", 1, 0), ("x", 2, 1)]).poll(1, {"x": [[1, 2], [0, 1]]})
    assert kinds(h) == ["int-nonmonotonic-poll"]


def test_skips_and_regressions_across_polls_of_one_process():
    base = H().sends(0, [("x", 1, 0), ("x", 2, 1), ("x", 3, 2)]).poll(9, {"x": [[0, 1], [1, 2], [2, 3]]})
    skip = H()
    skip.ops = [dict(o) for o in base.ops]
    skip.assign(1, ["x"]).poll(1, {"x": [[0, 1]]}).poll(1, {"x": [[2, 3]]})
    assert kinds(skip) == ["poll-skip"]
    back = H()
    back.ops = [dict(o) for o in base.ops]
    back.assign(1, ["x"]).poll(1, {"x": [[1, 2]]}).poll(1, {"x": [[0, 1]]})
    assert kinds(back) == ["nonmonotonic-poll"]


def test_poll_skips_are_allowed_with_subscribe_and_reset_by_assign():
    h = (H().sends(0, [("x", 1, 0), ("x", 2, 1), ("x", 3, 2)])
         .poll(9, {"x": [[0, 1], [1, 2], [2, 3]]})
         .poll(1, {"x": [[0, 1]]}).poll(1, {"x": [[2, 3]]}))
    result = check(h.ops, {"sub_via": ["subscribe"]})
    assert result["valid"] is True and result["allowed"]["poll-skip"] == 1
    reassigned = (H().sends(0, [("x", 1, 0), ("x", 2, 1), ("x", 3, 2)])
                  .poll(9, {"x": [[0, 1], [1, 2], [2, 3]]})
                  .poll(1, {"x": [[0, 1]]}).assign(1, ["y"]).poll(1, {"x": [[2, 3]]}))
    assert kinds(reassigned) == []
    # an assign that still covers x keeps the consumer's position (Jepsen's rule)
    kept = (H().sends(0, [("x", 1, 0), ("x", 2, 1), ("x", 3, 2)])
            .poll(9, {"x": [[0, 1], [1, 2], [2, 3]]})
            .poll(1, {"x": [[0, 1]]}).assign(1, ["x", "y"]).poll(1, {"x": [[2, 3]]}))
    assert kinds(kept) == ["poll-skip"]


def test_a_later_send_at_an_earlier_offset_is_nonmonotonic():
    h = H().send(0, "x", 1, 1).send(0, "x", 2, 0).poll(1, {"x": [[0, 2], [1, 1]]})
    assert kinds(h) == ["nonmonotonic-send"]
    inside = H().sends(0, [("x", 1, 1), ("x", 2, 0)]).poll(1, {"x": [[0, 2], [1, 1]]})
    assert kinds(inside) == ["int-nonmonotonic-send"]


def test_offsets_are_dense_so_gaps_in_the_log_are_not_skips():
    h = H().send(0, "x", 1, 0).send(0, "x", 2, 5).poll(1, {"x": [[0, 1], [5, 2]]})
    assert kinds(h) == []


def test_degenerate_histories_get_a_verdict():
    # a history that shows nothing about the broker is not valid (as in Jepsen)
    assert check([], {})["anomaly_types"] == ["empty-history"]
    failures = H().send(0, "x", 1, None, type_="fail")
    assert check(failures.ops, {})["anomaly_types"] == ["empty-history"]
    # nor is one whose only op never completed
    only_invokes = H()
    only_invokes._op(0, "invoke", "send", [["send", "x", 1]])
    assert check(only_invokes.ops, {})["anomaly_types"] == ["empty-history"]


def test_a_stalled_run_is_reported_from_its_config():
    h = H().send(0, "x", 1, 0).poll(1, {"x": [[0, 1]]})
    config = {"ops": 100, "stalled": {"at_ns": 5 * 10**9, "idle_ms": 60_000, "ops_completed": 2}}
    result = check(h.ops, config)
    assert result["anomaly_types"] == ["stalled"]
    assert "2 of 100 ops" in result["anomalies"]["stalled"][0]["explanation"]


TXN_CONFIG = {"isolation_level": "read_committed", "txn": True, "sub_via": ["assign"]}


def txn(h: H, p, mops_done, type_="ok"):
    invoke = [[*m[:2], m[2][1] if isinstance(m[2], list) else m[2]] if m[0] == "send" else ["poll"]
              for m in mops_done]
    h._op(p, "invoke", "txn", invoke)
    h._op(p, type_, "txn", mops_done)
    return h


def test_a_transaction_reading_its_own_uncommitted_send_is_a_precommitted_read():
    h = H()
    txn(h, 0, [["send", "k", [0, 1]], ["poll", {"k": [[0, 1]]}]])
    r = check(h.ops, TXN_CONFIG)
    assert r["anomaly_types"] == ["precommitted-read"]
    assert r["anomalies"]["precommitted-read"][0]["ops"] == [1]
    # read_uncommitted consumers may see their own writes
    assert check(h.ops, {**TXN_CONFIG, "isolation_level": "read_uncommitted"})["valid"] is True


def test_reading_part_of_a_committed_transaction_and_then_past_it_is_nonatomic():
    h = H()
    txn(h, 0, [["send", "k", [0, 1]], ["send", "k", [1, 2]]])
    h.send(1, "k", 3, 2)
    # process 2 reads value 1 and value 3, never value 2: the skip is also a poll-skip
    h.poll(2, {"k": [[0, 1]]}).poll(2, {"k": [[2, 3]]})
    r = check(h.ops, TXN_CONFIG)
    assert "nonatomic-read" in r["anomaly_types"]
    [a] = r["anomalies"]["nonatomic-read"]
    assert a["values"] == [1] and a["missing"] == [2]


def test_a_reader_that_starts_inside_a_transaction_is_no_evidence_of_nonatomicity():
    h = H()
    txn(h, 0, [["send", "k", [0, 1]], ["send", "k", [1, 2]]])
    h.send(1, "k", 3, 2)
    h.poll(2, {"k": [[0, 1], [1, 2], [2, 3]]})
    h.poll(3, {"k": [[1, 2], [2, 3]]})  # a new process that continues mid-transaction
    assert check(h.ops, TXN_CONFIG)["valid"] is True


def test_polls_of_a_failed_transaction_still_move_the_consumer():
    h = H()
    h.sends(1, [("k", 1, 0), ("k", 2, 1), ("k", 3, 2)])
    txn(h, 0, [["poll", {"k": [[0, 1], [1, 2]]}], ["send", "k", 9]], type_="fail")
    h.poll(0, {"k": [[2, 3]]})  # continues after what the failed transaction read
    h.poll(2, {"k": [[0, 1], [1, 2], [2, 3]]})
    assert check(h.ops, TXN_CONFIG)["valid"] is True


S = 1 << 24
EOS_CONFIG = {**TXN_CONFIG, "eos": {"input": "in", "output": "out", "group": "g", "source_shift": S},
              "final_read": {"performed": True, "reached_end": True, "start_ns": 10**12,
                             "end_offsets": {}}}


def eos_history(copies: list[tuple[int, int]], committed: int | None) -> H:
    """Input value 5 at in:0 offset 0 and 6 at offset 1; ``copies`` are (output offset,
    attempt) of committed copies of value 5; the final read reads both topics."""
    h = H()
    h.sends(0, [("in:0", 5, 0), ("in:0", 6, 1)])
    out = []
    for i, (off, attempt) in enumerate(copies):
        w = 5 * S + attempt
        txn(h, 10 + i, [["poll", {"in:0": [[0, 5]]}], ["send", "out:0", [off, w]]])
        out.append([off, w])
    h.poll(2, {"in:0": [[0, 5], [1, 6]], "out:0": out})
    if committed is not None:
        h._op(2, "invoke", "committed", ["in:0"])
        h._op(2, "ok", "committed", {"in:0": committed})
    return h


def test_eos_each_input_below_the_commit_reaches_the_output_once():
    assert check(eos_history([(0, 1)], 1).ops, EOS_CONFIG)["valid"] is True
    r = check(eos_history([(0, 1), (1, 2)], 1).ops, EOS_CONFIG)
    assert r["anomaly_types"] == ["eos-duplicate"]
    assert r["anomalies"]["eos-duplicate"][0]["value"] == 5
    r = check(eos_history([], 1).ops, EOS_CONFIG)
    assert r["anomaly_types"] == ["eos-lost"]
    r = check(eos_history([(0, 1)], 0).ops, EOS_CONFIG)
    assert r["anomaly_types"] == ["eos-output-beyond-commit"]
    r = check(eos_history([], 0).ops, EOS_CONFIG)
    assert r["valid"] is True and r["allowed"]["eos-unprocessed"] == 2


GROUPS_CONFIG = {"sub_via": ["subscribe"],
                 "groups": {"group": "g", "assignor": "range", "final_polls": True,
                            "keys": ["k:0", "k:1"]},
                 "final_read": {"performed": True, "reached_end": True, "heal_ns": 10_000,
                                "start_ns": 10**9, "end_offsets": {}}}


def member_poll(h: H, p, log, reads=None):
    h._op(p, "invoke", "poll", [["poll"]])
    h._op(p, "ok", "poll", [["poll", reads or {}]], rebalance_log=log)
    return h


def assigned(gen, owned, keys=None):
    return {"type": "assigned", "generation": gen, "owned": owned, "keys": keys or owned}


def test_two_members_owning_a_partition_in_one_generation_is_double_ownership():
    h = H()
    member_poll(h, 1, [assigned(1, ["k:0"])])
    member_poll(h, 2, [assigned(1, ["k:0", "k:1"])])
    member_poll(h, 1, [])  # member 1 is still there, still owning k:0
    r = check(h.ops, {**GROUPS_CONFIG, "groups": {**GROUPS_CONFIG["groups"], "final_polls": False}})
    assert r["anomaly_types"] == ["double-ownership"]


def test_a_commit_from_an_older_generation_after_a_newer_one_existed_is_fenced_commit():
    h = H()
    member_poll(h, 1, [assigned(1, ["k:0", "k:1"])])
    member_poll(h, 2, [assigned(2, ["k:1"])])
    h._op(1, "invoke", "commit", {"k:0": 3}, generation=1)
    h._op(1, "ok", "commit", {"k:0": 3}, generation=1)
    config = {**GROUPS_CONFIG, "groups": {**GROUPS_CONFIG["groups"], "final_polls": False}}
    assert check(h.ops, config)["anomaly_types"] == ["fenced-commit"]
    h.ops[-1]["type"] = "fail"  # refused: fine
    assert check(h.ops, config)["valid"] is True


def test_a_partition_nobody_owns_after_healing_is_reported():
    h = H()
    for t in (0, 20_000):  # the second round of polls comes after healing
        member_poll(h, 1, [assigned(3, ["k:0"])])
        member_poll(h, 2, [assigned(3, [])])
        for op in h.ops[-4:]:
            op["time"] = max(op["time"], t)
    r = check(h.ops, GROUPS_CONFIG)
    assert r["anomaly_types"] == ["unowned-partition"]
    assert r["anomalies"]["unowned-partition"][0]["missing"] == ["k:1"]


def test_kip848_after_healing_each_member_at_its_own_epoch_owns_its_partitions():
    """Consumer protocol: a member whose partitions did not change learns the group's newest
    epoch only at its next heartbeat, so the final assignments are judged each at its own
    epoch: every partition owned, by one member, each member with an epoch of the group."""
    consumer = {**GROUPS_CONFIG, "groups": {**GROUPS_CONFIG["groups"], "protocol": "consumer"}}

    def final(config, owned_1, epoch_1, owned_2, epoch_2):
        h = H()
        for t in (0, 20_000):  # the second round of polls comes after healing
            member_poll(h, 1, [assigned(epoch_1, owned_1)])
            member_poll(h, 2, [assigned(epoch_2, owned_2)])
            for op in h.ops[-4:]:
                op["time"] = max(op["time"], t)
        return check(h.ops, config)

    assert final(consumer, ["k:0"], 7, ["k:1"], 5)["valid"] is True
    assert final(GROUPS_CONFIG, ["k:0"], 7, ["k:1"], 5)["anomaly_types"] == ["unowned-partition"]  # classic: behind
    r = final(consumer, ["k:0"], 7, [], 7)
    assert r["anomaly_types"] == ["unowned-partition"] and r["anomalies"]["unowned-partition"][0]["missing"] == ["k:1"]
    r = final(consumer, ["k:0", "k:1"], 7, ["k:1"], 5)
    assert r["anomaly_types"] == ["unowned-partition"] and r["anomalies"]["unowned-partition"][0]["shared"] == ["k:1"]
    r = final(consumer, ["k:0"], 7, ["k:1"], 0)
    assert r["anomaly_types"] == ["unowned-partition"] and r["anomalies"]["unowned-partition"][0]["behind"] == ["2"]


def test_members_that_never_reported_an_assignment_are_judged_by_whether_the_run_says_they_settled():
    """A run with real clients whose members polled after healing but never got an assignment
    (a broker that refuses their protocol) has nothing to judge in their logs: the run's
    ``groups.settled`` says whether they settled. A simulated member that goes on as a new
    process has no assignment of its own either, and no ``settled``: no verdict."""
    h = H()
    for t in (0, 20_000):
        for p in (1, 2):
            h._op(p, "invoke", "subscribe", ["k:0", "k:1"])
            h._op(p, "ok", "subscribe", ["k:0", "k:1"])
            member_poll(h, p, [])
        for op in h.ops[-8:]:
            op["time"] = max(op["time"], t)
    assert check(h.ops, GROUPS_CONFIG)["valid"] is True
    for settled, valid in ((True, True), (False, False)):
        r = check(h.ops, {**GROUPS_CONFIG, "groups": {**GROUPS_CONFIG["groups"], "settled": settled}})
        assert r["valid"] is valid
    assert r["anomalies"]["unowned-partition"][0]["missing"] == ["k:0", "k:1"]


def test_a_cooperative_revocation_of_a_partition_that_does_not_move_is_reported():
    config = {**GROUPS_CONFIG, "groups": {**GROUPS_CONFIG["groups"], "assignor": "cooperative-sticky",
                                          "final_polls": False}}

    def history(revoked_in, next_owned):
        h = H()
        member_poll(h, 1, [assigned(1, ["k:0", "k:1"])])
        member_poll(h, 1, [{"type": "revoked", "generation": revoked_in, "keys": ["k:1"]},
                           assigned(2, next_owned)])
        return h

    # revoked before the join (eager-style) and handed straight back
    assert check(history(1, ["k:0", "k:1"]).ops, config)["anomaly_types"] == [
        "cooperative-revoked-unmoved"]
    assert check(history(2, ["k:0"]).ops, config)["valid"] is True  # revoked because it moved
    assert check(history(1, ["k:0"]).ops, config)["valid"] is True  # early, but it did move


def test_a_partition_given_away_in_the_generation_its_owner_revoked_it_in_is_reported():
    """Cooperative: member 1 revokes k:1 in generation 2; member 2 may have it in generation 3,
    not in 2. Eager: member 1 revokes everything in generation 1, before joining 2."""
    config = {**GROUPS_CONFIG, "groups": {**GROUPS_CONFIG["groups"], "final_polls": False}}

    def history(revoked_in, handed_over_in):
        h = H()
        member_poll(h, 1, [assigned(1, ["k:0", "k:1"])])
        member_poll(h, 2, [assigned(1, [])])
        member_poll(h, 1, [{"type": "revoked", "generation": revoked_in, "keys": ["k:1"]}, assigned(2, ["k:0"])])
        member_poll(h, 2, [assigned(handed_over_in, ["k:1"], [])] if handed_over_in == 2 else
                    [assigned(2, []), assigned(3, ["k:1"])])
        return h

    r = check(history(2, 2).ops, config)
    assert r["anomaly_types"] == ["reassigned-before-revoked"]
    assert r["anomalies"]["reassigned-before-revoked"][0]["generation"] == 2
    assert check(history(2, 3).ops, config)["valid"] is True  # KIP-429's second phase
    assert check(history(1, 2).ops, config)["valid"] is True  # eager: revoked before joining 2
    h = history(2, 2)
    h.ops[5]["rebalance_log"][0]["lost"] = "fenced"  # dropped from the group: released at once
    assert check(h.ops, config)["valid"] is True
    # a member that left the group (and joined again: a subscribe op) released everything, even
    # where its closing client reported no revocation (Kafka's Java client, found on Kafka 4.3.1)
    h = history(2, 2)
    left = h.ops[5]
    del h.ops[4:6]
    h._op(1, "invoke", "subscribe", ["k:0", "k:1"])
    h._op(1, "ok", "subscribe", ["k:0", "k:1"])
    member_poll(h, 1, [assigned(2, ["k:0"])])
    assert left["rebalance_log"][0]["type"] == "revoked"
    assert check(h.ops, config)["valid"] is True


def test_kip848_a_partition_handed_over_before_its_owner_released_it_is_reported():
    """Consumer protocol: member 1 owns k:1 from op 1 on; member 2 reports owning it (op 3);
    member 1's next poll (op 5) still has nothing to report, so member 1 revoked k:1 after that
    (reported in op 7) and goes on as a member."""
    config = {**GROUPS_CONFIG, "groups": {**GROUPS_CONFIG["groups"], "final_polls": False, "protocol": "consumer"}}

    def history(member_1_next, poll_between=True):
        h = H()
        member_poll(h, 1, [assigned(3, ["k:0", "k:1"])])
        member_poll(h, 2, [assigned(5, ["k:1"])])
        if poll_between:
            member_poll(h, 1, [])
        member_poll(h, 1, [{"type": "revoked", "generation": 3, "keys": ["k:1"]}, assigned(3, ["k:0"], [])])
        member_poll(h, 1, member_1_next)
        return h

    r = check(history([assigned(5, ["k:0"], [])]).ops, config)
    assert r["anomaly_types"] == ["assigned-before-released"]
    assert r["anomalies"]["assigned-before-released"][0]["ops"] == [1, 3, 7]
    # without that poll the revocation may have come before member 2's report: a member logs
    # it when it revokes, its next op reports it
    assert check(history([assigned(5, ["k:0"], [])], poll_between=False).ops, config)["valid"] is True
    # member 1 had been fenced meanwhile (the coordinator removed it): it learns so next
    fenced = [{"type": "revoked", "generation": 3, "keys": ["k:0"], "lost": "UNKNOWN_MEMBER_ID"}]
    assert check(history(fenced).ops, config)["valid"] is True
    # member 1 was paused in its revocation callback past its session: it completes the
    # revocation (and that reconciliation's assignment, at its old epoch), then learns in the
    # same op that it was removed; its later rejoin is no evidence that it stayed
    h = H()
    member_poll(h, 1, [assigned(3, ["k:0", "k:1"])])
    member_poll(h, 2, [assigned(5, ["k:1"])])
    member_poll(h, 1, [])
    member_poll(h, 1, [{"type": "revoked", "generation": 3, "keys": ["k:1"]}, assigned(3, ["k:0"], []),
                       {"type": "revoked", "generation": 3, "keys": ["k:0"], "lost": "UNKNOWN_MEMBER_ID"}])
    member_poll(h, 1, [assigned(7, ["k:0"])])
    assert check(h.ops, config)["valid"] is True
    # the classic protocol's generations mean something else: not judged there
    assert "assigned-before-released" not in check(history([assigned(5, ["k:0"], [])]).ops,
                                                   {**config, "groups": {**config["groups"], "protocol": None}}
                                                   )["anomaly_types"]
    # member 2's ownership began and ended within one op: not surely at the same time
    h = H()
    member_poll(h, 1, [assigned(3, ["k:1"])])
    member_poll(h, 2, [assigned(5, ["k:1"]), {"type": "revoked", "generation": 5, "keys": ["k:1"]},
                       assigned(5, [], [])])
    member_poll(h, 1, [])
    member_poll(h, 1, [{"type": "revoked", "generation": 3, "keys": ["k:1"]}, assigned(3, [], [])])
    member_poll(h, 1, [assigned(6, [], [])])
    assert check(h.ops, config)["valid"] is True


def test_kip848_a_commit_from_a_member_that_released_its_partition_is_a_fenced_commit():
    """Consumer protocol, where commits record the epoch their request carried (the
    simulator): member 1 owned k:1 at epoch 3, member 2 reported owning it at epoch 5, and
    member 1's commit of k:1 at epoch 3, sent after that, was accepted."""
    groups = {**GROUPS_CONFIG["groups"], "final_polls": False, "protocol": "consumer", "commit_epochs": "sent"}
    config = {**GROUPS_CONFIG, "groups": groups}

    def history(commit_first=False, commit_type="ok"):
        h = H()
        member_poll(h, 1, [assigned(3, ["k:0", "k:1"])])
        if commit_first:
            h._op(1, "invoke", "commit", {"k:1": 4}, generation=3)
        member_poll(h, 2, [assigned(5, ["k:1"])])
        if not commit_first:
            h._op(1, "invoke", "commit", {"k:1": 4}, generation=3)
        h._op(1, commit_type, "commit", {"k:1": 4}, generation=3)
        return h

    r = check(history().ops, config)
    assert r["anomaly_types"] == ["fenced-commit"]
    assert r["anomalies"]["fenced-commit"][0]["key"] == "k:1" and r["anomalies"]["fenced-commit"][0]["ops"] == [3, 5]
    # sent before member 2 reported owning k:1, or refused: nothing to say
    assert check(history(commit_first=True).ops, config)["valid"] is True
    assert check(history(commit_type="fail").ops, config)["valid"] is True
    # real clients: the recorded epoch may be older than the one a retried request carried
    real = {**config, "groups": {k: v for k, v in groups.items() if k != "commit_epochs"}}
    assert check(history().ops, real)["valid"] is True


def pause_then_commit(pause_ms, commit_type="ok", other_fault=None):
    h = H()
    member_poll(h, 1, [assigned(4, ["k:0"])])
    if other_fault is not None:
        h._op("nemesis", "invoke", other_fault, {"nodes": [2]})
        h._op("nemesis", "info", other_fault, {"nodes": [2]})
    h._op("nemesis", "invoke", "pause", {"nodes": [101], "processes": [1]})
    h._op("nemesis", "info", "pause", {"nodes": [101], "processes": [1]})
    h.ops[-1]["time"] = h.ops[-2]["time"]
    h._op("nemesis", "invoke", "resume", {"nodes": [101], "processes": [1]})
    h.ops[-1]["time"] = h.ops[-2]["time"] + pause_ms * 1_000_000
    h._op("nemesis", "info", "resume", {"nodes": [101], "processes": [1]})
    h._op(1, "invoke", "commit", {"k:0": 3}, generation=4)
    h._op(1, commit_type, "commit", {"k:0": 3}, generation=4)
    for i in range(len(h.ops) - 3, len(h.ops)):
        h.ops[i]["time"] = max(h.ops[i]["time"], h.ops[i - 1]["time"] + 1)
    return h


def test_a_commit_of_a_member_paused_past_its_session_timeout_is_an_expired_member_commit():
    config = {**GROUPS_CONFIG, "timings_ms": {"member_session_timeout_ms": 3_000},
              "groups": {**GROUPS_CONFIG["groups"], "final_polls": False, "static": True}}
    r = check(pause_then_commit(6_000).ops, config)
    assert r["anomaly_types"] == ["expired-member-commit"]
    assert check(pause_then_commit(6_000, "fail").ops, config)["valid"] is True  # refused: right
    assert check(pause_then_commit(2_000).ops, config)["valid"] is True  # within the session
    # a broker crashed meanwhile (the coordinator may have moved and given its members a fresh
    # session): no verdict
    assert check(pause_then_commit(6_000, other_fault="kill").ops, config)["valid"] is True


def test_a_commit_that_sets_the_offset_back_is_reported():
    config = {**GROUPS_CONFIG, "groups": {**GROUPS_CONFIG["groups"], "final_polls": False}}

    def history(second, unknown=None):
        h = H()
        member_poll(h, 1, [assigned(1, ["k:0", "k:1"])])
        if unknown is not None:  # a commit whose answer never came may land any time
            h._op(1, "invoke", "commit", {"k:0": unknown}, generation=1)
            h._op(1, "info", "commit", {"k:0": unknown}, generation=1)
        h._op(2, "invoke", "commit", {"k:0": 5}, generation=1)
        h._op(2, "ok", "commit", {"k:0": 5}, generation=1)
        h._op(3, "invoke", "commit", {"k:0": second}, generation=1)
        h._op(3, "ok", "commit", {"k:0": second}, generation=1)
        return h

    r = check(history(4).ops, config)
    assert r["anomaly_types"] == ["committed-offset-regressed"]
    assert r["anomalies"]["committed-offset-regressed"][0]["offsets"] == [5, 4]
    assert check(history(5).ops, config)["valid"] is True
    assert check(history(4, unknown=3).ops, config)["valid"] is True


def test_an_info_op_ends_a_process_and_its_claims():
    h = H()
    member_poll(h, 1, [assigned(5, ["k:0"])])
    h._op(1, "invoke", "commit", {"k:0": 1}, generation=5)
    h._op(1, "info", "commit", {"k:0": 1}, generation=5)
    member_poll(h, 11, [assigned(5, ["k:0"])])  # the same consumer, as the next process
    config = {**GROUPS_CONFIG, "groups": {**GROUPS_CONFIG["groups"], "final_polls": False}}
    assert check(h.ops, config)["valid"] is True


def _keyed(sends, reads, unknown=()):
    """A compacted-topic history: ``sends`` (value, record key, offset) acknowledged, those in
    ``unknown`` ended info; one poll reads ``reads`` (offset, value, record key)."""
    h = H()
    for v, rk, off in sends:
        h._op(0, "invoke", "send", [["send", "x", v, rk]])
        h._op(0, "info" if v in unknown else "ok", "send",
              [["send", "x", v, rk]] if v in unknown else [["send", "x", [off, v], rk]])
    h.assign(1, ["x"])
    h.poll(1, {"x": [list(r) for r in reads]})
    return h


def test_a_value_compacted_away_behind_a_read_newer_value_of_its_key_is_not_lost():
    """Found by the compaction machine: value 1 of record key k0 was replaced by value 3, whose
    send ended info (a network error) but which a poll read at a later offset; the cleaner
    removed value 1, as it must. Without that later record of k0, value 1 is lost."""
    config = {"sub_via": ["assign"], "compacted": True}
    sends = [(1, "k0", 0), (2, "k1", 1), (3, "k0", 2)]
    h = _keyed(sends, [(1, 2, "k1"), (2, 3, "k0")], unknown={3})
    result = check(h.ops, config)
    assert result["valid"] is True, result["anomalies"]
    assert result["allowed"].get("compacted-away") == 1
    h = _keyed(sends[:2], [(1, 2, "k1")])  # nothing replaced value 1
    assert "lost-write" in check(h.ops, config)["anomaly_types"]


def _scan(sends, reads, retention_ms=None, later=None):
    """Keyed sends acknowledged (value or None, record key, offset), then a reader that goes
    back to the beginning and reads ``reads`` (offset, value, record key), ``later`` ms after
    the sends; ``retention_ms``: the topic's delete.retention.ms."""
    h = H()
    for v, rk, off in sends:
        h._op(0, "invoke", "send", [["send", "x", v, rk]])
        h._op(0, "ok", "send", [["send", "x", [off, v], rk]])
    h._op(1, "invoke", "assign", ["x"], seek_to_beginning=True)
    h._op(1, "ok", "assign", ["x"], seek_to_beginning=True)
    h.poll(1, {"x": [list(r) for r in reads]})
    if later is not None:
        for op in h.ops[-4:]:
            op["time"] += later * 1_000_000
    config = {"sub_via": ["assign"], "compacted": True, "idempotence": True,
              "topic_configs": {} if retention_ms is None else {"delete.retention.ms": str(retention_ms)}}
    return h, config


def test_a_reader_from_the_beginning_missing_the_newest_value_of_a_key_is_scan_missed_latest():
    sends = [(1, "k0", 0), (2, "k1", 1), (3, "k0", 2)]
    h, config = _scan(sends, [(1, 2, "k1"), (2, 3, "k0")])  # value 1 replaced by 3: may be gone
    assert check(h.ops, config)["valid"] is True
    h, config = _scan(sends, [(0, 1, "k0"), (2, 3, "k0")])  # value 2 of k1 is the newest of k1
    r = check(h.ops, config)
    assert "scan-missed-latest" in r["anomaly_types"]
    assert r["anomalies"]["scan-missed-latest"][0]["value"] == 2


def test_a_skipped_record_is_excused_only_by_a_send_of_its_key_that_could_have_replaced_it():
    """A reader from the beginning passes record key k0's value at offset 1. Another send of k0
    excuses that only if it began before the poll ended and landed later (or its offset is
    unknown): one at an earlier offset, or begun after the poll, could not have replaced it."""

    def verdict(other: str) -> list[str]:
        h = H()
        if other == "earlier offset":
            h._op(2, "invoke", "send", [["send", "x", 9, "k0"]])
            h._op(2, "ok", "send", [["send", "x", [0, 9], "k0"]])
        h._op(0, "invoke", "send", [["send", "x", 1, "k0"]])
        h._op(0, "ok", "send", [["send", "x", [1, 1], "k0"]])
        h._op(0, "invoke", "send", [["send", "x", 2, "k1"]])
        h._op(0, "ok", "send", [["send", "x", [2, 2], "k1"]])
        if other == "unknown, begun before the poll ended":
            h._op(2, "invoke", "send", [["send", "x", 5, "k0"]])  # never answered
        h._op(1, "invoke", "assign", ["x"], seek_to_beginning=True)
        h._op(1, "ok", "assign", ["x"], seek_to_beginning=True)
        h.poll(1, {"x": [[2, 2, "k1"]]})
        if other == "unknown, begun after the poll":
            h._op(2, "invoke", "send", [["send", "x", 5, "k0"]])
        config = {"sub_via": ["assign"], "compacted": True, "idempotence": True}
        return check(h.ops, config)["anomaly_types"]

    # (value 1 is still a lost write: an unknown send nobody read excuses no loss)
    assert "scan-missed-latest" not in verdict("unknown, begun before the poll ended")
    assert "scan-missed-latest" in verdict("unknown, begun after the poll")
    assert "scan-missed-latest" in verdict("earlier offset")
    assert "scan-missed-latest" in verdict("none")


def test_a_reader_from_the_beginning_missing_a_young_delete_marker_is_tombstone_missing():
    sends = [(1, "k0", 0), (None, "k0", 1), (2, "k1", 2)]
    reads = [(2, 2, "k1")]  # the marker of k0 (and value 1, which it replaced) gone
    h, config = _scan(sends, reads, retention_ms=5_000, later=1_000)
    r = check(h.ops, config)
    assert r["anomaly_types"] == ["tombstone-missing"] and r["anomalies"]["tombstone-missing"][0]["offset"] == 1
    h, config = _scan(sends, reads, retention_ms=5_000, later=6_000)  # older than delete.retention.ms
    assert check(h.ops, config)["valid"] is True
    h, config = _scan(sends, [(1, None, "k0"), (2, 2, "k1")], retention_ms=5_000, later=1_000)
    assert check(h.ops, config)["valid"] is True  # read: fine


def test_an_idempotent_producer_told_out_of_order_sequence_is_reported_unless_records_were_lost():
    config = {"sub_via": ["assign"], "idempotence": True}

    def history(lost):
        h = H()
        h._op(0, "invoke", "send", [["send", "x", 1]])
        h._op(0, "ok", "send", [["send", "x", [0, 1]]])
        h._op(0, "invoke", "send", [["send", "x", 2]])
        h._op(0, "ok", "send", [["send", "x", [1, 2]]])
        h._op(0, "invoke", "send", [["send", "x", 3]])
        h._op(0, "fail", "send", [["send", "x", 3]], error="OUT_OF_ORDER_SEQUENCE_NUMBER")
        h.assign(1, ["x"])
        h.poll(1, {"x": [[1, 2]] if lost else [[0, 1], [1, 2]]})
        return h

    r = check(history(lost=False).ops, config)
    assert r["anomaly_types"] == ["idempotence-error"]
    # value 1 lost (the poll read past it): the sequence error follows from the loss, which is
    # the violation reported
    assert check(history(lost=True).ops, config)["anomaly_types"] == ["lost-write"]
    assert check(history(lost=False).ops, {**config, "acks": "1"})["valid"] is True
    # a network that reorders or loses single messages of a connection (TCP never does) may
    # bring a batch to its broker ahead of the one before it: no promise then (found by the
    # swarm on the correct engine, seeds 30 and 282)
    for fault in ("reorder", "loss"):
        h = history(lost=False)
        h._op("nemesis", "invoke", fault, {})
        h._op("nemesis", "info", fault, {})
        assert check(h.ops, config)["valid"] is True
    h = history(lost=False)
    h._op("nemesis", "invoke", "sigkill", {"nodes": ["kafka-1"]})  # a real fault: judged
    h._op("nemesis", "info", "sigkill", {"nodes": ["kafka-1"]})
    assert check(h.ops, config)["anomaly_types"] == ["idempotence-error"]


def _process(h: H, p, reads, commit, type_="ok"):
    """A member of an at-most-once group polls ``reads``, then commits ``commit``."""
    member_poll(h, p, [], reads)
    h._op(p, "invoke", "commit", commit, generation=1)
    h._op(p, type_, "commit", commit, generation=1)
    return h


AT_MOST_ONCE = {**GROUPS_CONFIG, "groups": {**GROUPS_CONFIG["groups"], "final_polls": False,
                                            "delivery": "at-most-once"}}


def test_a_record_two_members_processed_at_most_once_is_processed_twice():
    h = H()
    member_poll(h, 1, [assigned(1, ["k:0", "k:1"])])
    _process(h, 1, {"k:0": [[0, 10], [1, 20]]}, {"k:0": 2})
    _process(h, 2, {"k:0": [[1, 20], [2, 30]]}, {"k:0": 3})  # 20 again: its commit succeeded
    r = check(h.ops, AT_MOST_ONCE)
    assert r["anomaly_types"] == ["processed-twice"] and r["counts"]["processed-twice"] == 1
    assert r["anomalies"]["processed-twice"][0]["value"] == 20
    assert check(h.ops, GROUPS_CONFIG | {"groups": {**AT_MOST_ONCE["groups"], "delivery": None}})["valid"] is True


@pytest.mark.parametrize("why", ["refused", "unanswered", "not covered", "crashed before"])
def test_records_whose_commit_did_not_succeed_were_not_processed(why):
    """The same second poll, but its records were never processed: lost to the group, which
    at-most-once allows."""
    h = H()
    member_poll(h, 1, [assigned(1, ["k:0", "k:1"])])
    # (not covered: neither commit covers 20; a lower second commit would set the offset back)
    _process(h, 1, {"k:0": [[0, 10], [1, 20]]}, {"k:0": 1 if why == "not covered" else 2})
    if why == "crashed before":
        member_poll(h, 2, [], {"k:0": [[1, 20]]})
        h._op(2, "invoke", "crash", None)
        h._op(2, "info", "crash", None)
        _process(h, 2, {}, {"k:0": 2})
    else:
        commit = {"k:0": 1} if why == "not covered" else {"k:0": 2}
        _process(h, 2, {"k:0": [[1, 20]]}, commit, type_={"refused": "fail", "unanswered": "info"}.get(why, "ok"))
    assert check(h.ops, AT_MOST_ONCE)["valid"] is True

