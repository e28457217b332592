"""hanging-transaction (properties/txn_checks.py): a transaction that never ended at a partition,
from the final read's last stable offsets and from the broker's own state (probe sightings);
and what became of its records."""

from __future__ import annotations

from properties.checker import check


class H:
    """A transactional history, op by op, with dense indices and a nanosecond clock."""

    def __init__(self) -> None:
        self.ops: list[dict] = []

    def _op(self, process, type_, f, value, **extra):
        self.ops.append({"index": len(self.ops), "time": len(self.ops) * 1_000_000, "process": process,
                         "type": type_, "f": f, "value": value, **extra})
        return self

    def txn(self, p, sends, type_="ok", txn_id=None, aborted=None):
        """``sends``: (key, value, offset)."""
        extra = {"transactional_id": txn_id} if txn_id else {}
        extra |= {"aborted": aborted} if aborted is not None else {}
        self._op(p, "invoke", "txn", [["send", k, v] for k, v, _o in sends], **extra)
        return self._op(p, type_, "txn", [["send", k, [o, v]] for k, v, o in sends], **extra)

    def poll(self, p, reads):
        self._op(p, "invoke", "poll", [["poll"]])
        return self._op(p, "ok", "poll", [["poll", reads]])

    def assign(self, p, keys):
        self._op(p, "invoke", "assign", keys, seek_to_beginning=True)
        return self._op(p, "ok", "assign", keys, seek_to_beginning=True)


def config(stable=None, ends=None, reached=True, sightings=None, broker_log=None, start_ns=0, uncommitted=None) -> dict:
    c = {"txn": True, "isolation_level": "read_committed", "sub_via": ["assign"],
         "final_read": {"performed": True, "start_ns": start_ns, "reached_end": reached, "staleness_bound_ms": 60_000,
                        "end_offsets": ends or {}, "stable_offsets": stable or {}}}
    if uncommitted is not None:
        c["final_read"]["uncommitted"] = uncommitted
    if sightings is not None:
        c["txn_probe"] = {"open_transactions": sightings}
    if broker_log is not None:
        c["broker_log"] = broker_log
    return c


def sighting(partition, start, at_ns=5_000_000, state="CompleteCommit", here=False) -> dict:
    """What the probe records of a transaction open at ``partition`` since ``start``: the
    coordinator said ``state`` (with the partition in it: ``here``) at ``at_ns``."""
    return {"partition": partition, "producer_id": 7, "producer_epoch": 0, "start_offset": start,
            "transactional_id": "tx-7", "seen": [[at_ns - 100, at_ns, state, here]]}


def test_a_commit_whose_partition_stayed_open_is_a_hanging_transaction():
    h = H().txn(1, [("t:0", 1, 0), ("t:1", 1, 0)]).assign(9, ["t:0", "t:1"]).poll(9, {"t:0": [[0, 1]]})
    log = [{"node": "kafka-1", "line": "Couldn't find leader endpoint for partitions Set(t-1) while trying to send"}]
    result = check(h.ops, config({"t:0": [2, 2], "t:1": [0, 1]}, {"t:0": 2}, reached=False, broker_log=log,
                                 start_ns=h.ops[-1]["time"]))
    assert result["valid"] is False and "hanging-transaction" in result["anomaly_types"]
    a = result["anomalies"]["hanging-transaction"][0]
    assert (a["key"], a["first_offset"], a["outcome"], a["values"]) == ("t:1", 0, "open", [1])
    assert a["ops"] == [1] and a["final_stable_offsets"] == [0, 1]
    assert a["broker_log"] == log and "Couldn't find leader endpoint" in a["explanation"]
    assert "client was told it committed" in a["explanation"]


def test_markers_that_came_leave_no_finding():
    h = H().txn(1, [("t:0", 1, 0), ("t:1", 1, 0)]).assign(9, ["t:0", "t:1"]).poll(9, {"t:0": [[0, 1]], "t:1": [[0, 1]]})
    result = check(h.ops, config({"t:0": [2, 2], "t:1": [2, 2]}, {"t:0": 2, "t:1": 2}))
    assert result["valid"] is True, result["anomaly_types"]


def test_a_commit_acknowledged_after_the_final_read_began_may_still_be_writing_its_markers():
    # a coordinator answers EndTxn before it writes the markers; a simulated run's clients go on
    # while the final read reads, and the last stable offsets are taken as it ends
    h = H().txn(1, [("t:0", 1, 0), ("t:1", 1, 0)]).assign(9, ["t:0", "t:1"]).poll(9, {"t:0": [[0, 1]]})
    result = check(h.ops, config({"t:0": [2, 2], "t:1": [0, 1]}, {"t:0": 2}, start_ns=500_000))
    assert "hanging-transaction" not in result["anomaly_types"]
    result = check(h.ops, config({"t:0": [2, 2], "t:1": [0, 1]}, {"t:0": 2}, start_ns=1_500_000))
    assert "hanging-transaction" in result["anomaly_types"]


def test_an_open_transaction_whose_end_was_not_acknowledged_is_not_one():
    # a producer that vanished mid-transaction: the coordinator aborts it when it times out
    h = H().txn(1, [("t:1", 1, 0)], type_="info").assign(9, ["t:1"]).poll(9, {})
    result = check(h.ops, config({"t:1": [0, 1]}, {}, reached=False, start_ns=h.ops[-1]["time"]))
    assert "hanging-transaction" not in result["anomaly_types"]


def test_the_open_transaction_is_the_one_at_the_last_stable_offset():
    # the txn at offset 0 failed (its end unknown); the committed one at 1 is blocked behind it, not hanging
    h = H().txn(1, [("t:1", 1, 0)], type_="info").txn(2, [("t:1", 2, 1)]).assign(9, ["t:1"]).poll(9, {})
    result = check(h.ops, config({"t:1": [0, 2]}, {}, reached=False, start_ns=h.ops[-1]["time"]))
    assert "hanging-transaction" not in result["anomaly_types"]


def test_a_sighting_then_a_later_read_is_committed_later():
    h = (H().txn(1, [("t:0", 1, 0), ("t:1", 1, 0)]).txn(1, [("t:1", 2, 1)]).assign(9, ["t:0", "t:1"])
         .poll(9, {"t:0": [[0, 1]], "t:1": [[0, 1], [1, 2]]}))
    result = check(h.ops, config({"t:0": [2, 2], "t:1": [3, 3]}, {"t:0": 2, "t:1": 3}, sightings=[sighting("t:1", 0)]))
    assert result["valid"] is False
    a = result["anomalies"]["hanging-transaction"][0]
    assert a["outcome"] == "committed-later" and a["ops"] == [1, 7]
    assert "CompleteCommit without" not in a["explanation"] and "was CompleteCommit" in a["explanation"]


def test_a_sighting_then_a_read_to_the_end_without_the_records_is_an_aborted_commit():
    h = H().txn(1, [("t:0", 1, 0), ("t:1", 1, 0)]).txn(1, [("t:1", 2, 1)], type_="fail")
    start = len(h.ops) * 1_000_000  # the final read begins
    h.assign(9, ["t:0", "t:1"]).poll(9, {"t:0": [[0, 1]]})
    result = check(h.ops, config({"t:0": [2, 2], "t:1": [3, 3]}, {"t:0": 2, "t:1": 3},
                                 sightings=[sighting("t:1", 0, state="Ongoing")], start_ns=start,
                                 uncommitted={"t:0": [[0, 1]], "t:1": [[0, 1], [1, 2]]}))
    a = result["anomalies"]["hanging-transaction"][0]
    assert a["outcome"] == "aborted" and "undoing a commit the client was told succeeded" in a["explanation"]
    assert "Ongoing without t:1" in a["explanation"]
    assert "unread-after-heal" in result["anomaly_types"] or "lost-write" in result["anomaly_types"]


def test_a_sighting_of_an_offset_no_op_names_is_still_reported():
    h = H().txn(1, [("t:0", 1, 0)]).assign(9, ["t:0"]).poll(9, {"t:0": [[0, 1]]})
    result = check(h.ops, config({"t:0": [2, 2]}, {"t:0": 2}, sightings=[sighting("t:3", 5)]))
    a = result["anomalies"]["hanging-transaction"][0]
    assert a["key"] == "t:3" and a["ops"] == [] and a["outcome"] == "unknown"


def test_one_finding_per_open_transaction_with_both_kinds_of_evidence():
    h = H().txn(1, [("t:1", 1, 0)]).assign(9, ["t:1"]).poll(9, {})
    result = check(h.ops, config({"t:1": [0, 1]}, {}, reached=False, sightings=[sighting("t:1", 0)] * 2))
    assert result["counts"]["hanging-transaction"] == 1
    a = result["anomalies"]["hanging-transaction"][0]
    assert a["sighting"]["producer_id"] == 7 and a["outcome"] == "open"


def test_the_next_write_right_after_a_commit_shows_its_marker_never_came():
    # op 1 committed t:1 offset 0; the same process's next transaction wrote t:1 at 2, and offset
    # 1 holds another producer's record: no offset between them is free for a marker
    h = (H().txn(1, [("t:0", 1, 0), ("t:1", 1, 0)]).txn(2, [("t:1", 10, 1)]).txn(1, [("t:1", 2, 2)], type_="fail"))
    start = len(h.ops) * 1_000_000
    h.assign(9, ["t:0", "t:1"]).poll(9, {"t:0": [[0, 1]]})
    log = {"t:0": [[0, 1]], "t:1": [[0, 1], [1, 10], [2, 2]]}
    result = check(h.ops, config({"t:0": [2, 2], "t:1": [4, 4]}, {"t:0": 2, "t:1": 4}, start_ns=start, uncommitted=log))
    a = result["anomalies"]["hanging-transaction"][0]
    assert (a["key"], a["first_offset"], a["next_op"], a["outcome"]) == ("t:1", 0, 5, "aborted")
    assert "offsets 1-1 between holding data records only" in a["explanation"]


def test_a_marker_between_two_transactions_of_a_process_is_no_finding():
    # offset 1 holds no data record: the marker of op 1's commit
    h = H().txn(1, [("t:1", 1, 0)]).txn(1, [("t:1", 2, 2)])
    start = len(h.ops) * 1_000_000
    h.assign(9, ["t:1"]).poll(9, {"t:1": [[0, 1], [2, 2]]})
    result = check(h.ops, config({"t:1": [4, 4]}, {"t:1": 4}, start_ns=start,
                                 uncommitted={"t:1": [[0, 1], [2, 2]]}))
    assert result["valid"] is True, result["anomaly_types"]


def test_a_later_commit_that_carried_an_unmarked_one_is_committed_later():
    h = H().txn(1, [("t:1", 1, 0)]).txn(1, [("t:1", 2, 1)])
    start = len(h.ops) * 1_000_000
    h.assign(9, ["t:1"]).poll(9, {"t:1": [[0, 1], [1, 2]]})
    result = check(h.ops, config({"t:1": [3, 3]}, {"t:1": 3}, start_ns=start, uncommitted={"t:1": [[0, 1], [1, 2]]}))
    a = result["anomalies"]["hanging-transaction"][0]
    assert a["outcome"] == "committed-later" and a["ops"] == [1, 3, 7]


def test_the_producer_is_its_transactional_id_across_processes():
    # process 1 lost track of its commit (info) and went on as process 2 with the same id; its
    # next records follow with no marker between. Process 3, another id, is no such producer.
    h = (H().txn(1, [("t:1", 1, 0)], type_="info", txn_id="a").txn(3, [("t:1", 7, 1)], txn_id="b")
         .txn(2, [("t:1", 2, 2)], txn_id="a"))
    start = len(h.ops) * 1_000_000
    h.assign(9, ["t:1"]).poll(9, {"t:1": [[1, 7], [2, 2]]})
    log = {"t:1": [[0, 1], [1, 7], [2, 2]]}
    result = check(h.ops, config({"t:1": [4, 4]}, {"t:1": 4}, start_ns=start, uncommitted=log))
    [a] = result["anomalies"]["hanging-transaction"]
    assert (a["first_offset"], a["next_op"], a["outcome"]) == (0, 5, "aborted")
    assert "outcome was unknown to the client" in a["explanation"]


def test_records_missing_from_the_log_say_nothing_of_markers():
    # op 1's record is not in the log read uncommitted (lost): no claim about what lay between
    h = H().txn(1, [("t:1", 1, 0)]).txn(1, [("t:1", 2, 1)])
    start = len(h.ops) * 1_000_000
    h.assign(9, ["t:1"]).poll(9, {"t:1": [[1, 2]]})
    result = check(h.ops, config({"t:1": [3, 3]}, {"t:1": 3}, start_ns=start, uncommitted={"t:1": [[1, 2]]}))
    assert "hanging-transaction" not in result["anomaly_types"]


def test_an_acknowledged_abort_that_left_its_partition_open_is_one_too():
    h = H().txn(1, [("t:1", 1, 0)], type_="fail", aborted=True).assign(9, ["t:1"]).poll(9, {})
    result = check(h.ops, config({"t:1": [0, 1]}, {}, reached=False, start_ns=h.ops[-1]["time"]))
    [a] = result["anomalies"]["hanging-transaction"]
    assert a["outcome"] == "open" and "its abort succeeded" in a["explanation"]
    h = H().txn(1, [("t:1", 1, 0)], type_="fail", aborted=False).assign(9, ["t:1"]).poll(9, {})
    result = check(h.ops, config({"t:1": [0, 1]}, {}, reached=False, start_ns=h.ops[-1]["time"]))
    assert "hanging-transaction" not in result["anomaly_types"]


def test_open_since_an_acknowledged_commit_while_the_producer_went_on_is_hanging():
    # op 1 committed t:1 (ack at 1 ms); later the leader still had it open since offset 0 while the
    # coordinator was on the producer's next transaction, which had t:1 in it (added before its write)
    h = H().txn(1, [("t:1", 1, 0)]).assign(9, ["t:1"]).poll(9, {})
    later = [sighting("t:1", 0, at_ns=3_000_000, state="Ongoing", here=True)]
    [a] = check(h.ops, config({"t:1": [0, 1]}, {}, reached=False, sightings=later))["anomalies"]["hanging-transaction"]
    assert a["sighting"]["coordinator"] == {"state": "Ongoing", "has_partition": True}
    assert "a later transaction of the producer" in a["explanation"]


def test_the_coordinator_on_the_transaction_itself_says_nothing():
    # the writer's outcome is unknown (it may be the coordinator's Ongoing one), or its end is
    # still under way (PrepareCommit with the partition), or the answer came before the ack
    h = H().txn(1, [("t:1", 1, 0)], type_="info").assign(9, ["t:1"]).poll(9, {})
    ongoing = [sighting("t:1", 0, at_ns=3_000_000, state="Ongoing", here=True)]
    assert "hanging-transaction" not in check(h.ops, config({"t:1": [2, 2]}, {"t:1": 2}, sightings=ongoing))[
        "anomaly_types"]
    h = H().txn(1, [("t:1", 1, 0)]).assign(9, ["t:1"]).poll(9, {"t:1": [[0, 1]]})
    for seen in ([sighting("t:1", 0, at_ns=3_000_000, state="PrepareCommit", here=True)],
                 [sighting("t:1", 0, at_ns=500_000, state="Ongoing", here=True)]):
        assert check(h.ops, config({"t:1": [2, 2]}, {"t:1": 2}, sightings=seen))["valid"] is True
