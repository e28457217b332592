"""`kafkacheck check`'s checker on small hand-written histories: for every anomaly type one
history that has it and one close to it that does not."""

from __future__ import annotations

import pytest

from properties.check_table import ALWAYS_ALLOWED
from properties.checker import check


class B:
    """A history builder: invocations and completions with explicit order, 1 ms apart."""

    def __init__(self) -> None:
        self.ops: list[dict] = []
        self.t = 0

    def _add(self, process, type_, f, value):
        self.t += 1_000_000
        self.ops.append({"index": len(self.ops), "time": self.t, "process": process,
                         "type": type_, "f": f, "value": value})
        return self

    def at(self, seconds: float):
        self.t = int(seconds * 1e9)
        return self

    def inv(self, p, f, mops):
        invoke = mops if f in ("assign", "subscribe") else [
            ["poll"] if m[0] == "poll" else ["send", m[1], m[2][1] if isinstance(m[2], list) else m[2]]
            for m in mops]
        return self._add(p, "invoke", f, invoke)

    def done(self, p, f, mops, type_="ok"):
        return self._add(p, type_, f, mops)

    def op(self, p, f, mops, type_="ok"):
        return self.inv(p, f, mops).done(p, f, mops, type_)

    def send(self, p, *triples, type_="ok"):  # (key, value, offset)
        return self.op(p, "send", [["send", k, [o, v]] for k, v, o in triples], type_)

    def poll(self, p, reads, type_="ok"):
        return self.op(p, "poll", [["poll", reads]], type_)

    def nemesis(self, f):
        self._add("nemesis", "invoke", f, None)
        return self._add("nemesis", "info", f, None)


def s(*triples):
    return [["send", k, [o, v]] for k, v, o in triples]


CASES = {
    "inconsistent-offsets": (
        lambda: B().send(0, ("x", 1, 0)).send(1, ("x", 2, 0)).poll(2, {"x": [[0, 1]]}),
        lambda: B().send(0, ("x", 1, 0)).send(1, ("x", 2, 1)).poll(2, {"x": [[0, 1], [1, 2]]})),
    "duplicate": (
        lambda: B().send(0, ("x", 1, 0)).poll(1, {"x": [[3, 1]]}),
        lambda: B().send(0, ("x", 1, 0)).poll(1, {"x": [[0, 1]]})),
    "lost-write": (
        lambda: B().send(0, ("x", 1, 0)).send(0, ("x", 2, 1)).poll(1, {"x": [[1, 2]]}),
        lambda: B().send(0, ("x", 1, 0)).send(0, ("x", 2, 1)).poll(1, {"x": [[0, 1], [1, 2]]})),
    "G1a": (
        lambda: B().send(0, ("x", 1, 0), type_="fail").poll(1, {"x": [[0, 1]]}),
        lambda: B().send(0, ("x", 1, 0), type_="info").poll(1, {"x": [[0, 1]]})),
    "precommitted-read": (
        lambda: B().op(0, "txn", [*s(("x", 1, 0)), ["poll", {"x": [[0, 1]]}]]),
        lambda: B().op(0, "txn", s(("x", 1, 0))).op(0, "txn", [["poll", {"x": [[0, 1]]}]])),
    "poll-skip": (
        lambda: B().send(0, ("x", 1, 0), ("x", 2, 1), ("x", 3, 2))
                   .poll(1, {"x": [[0, 1]]}).poll(1, {"x": [[2, 3]]}).poll(2, {"x": [[0, 1], [1, 2], [2, 3]]}),
        lambda: B().send(0, ("x", 1, 0), ("x", 2, 1), ("x", 3, 2))
                   .poll(1, {"x": [[0, 1]]}).poll(1, {"x": [[1, 2], [2, 3]]})),
    "nonmonotonic-poll": (
        lambda: B().send(0, ("x", 1, 0), ("x", 2, 1)).poll(1, {"x": [[0, 1], [1, 2]]}).poll(1, {"x": [[1, 2]]}),
        lambda: B().send(0, ("x", 1, 0), ("x", 2, 1)).poll(1, {"x": [[0, 1], [1, 2]]})
                   .op(1, "assign", ["y"]).op(1, "assign", ["x"]).poll(1, {"x": [[1, 2]]})),
    "int-poll-skip": (
        lambda: B().send(0, ("x", 1, 0), ("x", 2, 1), ("x", 3, 2)).poll(1, {"x": [[0, 1], [2, 3]]})
                   .poll(2, {"x": [[0, 1], [1, 2], [2, 3]]}),
        lambda: B().send(0, ("x", 1, 0), ("x", 2, 1), ("x", 3, 2)).poll(1, {"x": [[0, 1], [1, 2], [2, 3]]})),
    "int-nonmonotonic-poll": (
        lambda: B().send(0, ("x", 1, 0), ("x", 2, 1)).poll(1, {"x": [[1, 2], [0, 1]]}),
        lambda: B().send(0, ("x", 1, 0), ("x", 2, 1)).poll(1, {"x": [[0, 1], [1, 2]]})),
    "int-send-skip": (
        lambda: B().inv(0, "send", s(("x", 1, 0), ("x", 3, 2))).op(1, "send", s(("x", 2, 1)))
                   .done(0, "send", s(("x", 1, 0), ("x", 3, 2))).poll(2, {"x": [[0, 1], [1, 2], [2, 3]]}),
        lambda: B().send(0, ("x", 1, 0), ("x", 3, 1)).send(1, ("x", 2, 2))
                   .poll(2, {"x": [[0, 1], [1, 3], [2, 2]]})),
    "int-nonmonotonic-send": (
        lambda: B().send(0, ("x", 1, 1), ("x", 2, 0)).poll(1, {"x": [[0, 2], [1, 1]]}),
        lambda: B().send(0, ("x", 1, 0), ("x", 2, 1)).poll(1, {"x": [[0, 1], [1, 2]]})),
    "nonmonotonic-send": (
        lambda: B().send(0, ("x", 1, 1)).send(0, ("x", 2, 0)).poll(1, {"x": [[0, 2], [1, 1]]}),
        lambda: B().send(0, ("x", 1, 0)).send(0, ("x", 2, 1)).poll(1, {"x": [[0, 1], [1, 2]]})),
    "G0": (  # two concurrent writers land in opposite orders in x and y
        lambda: B().inv(0, "send", s(("x", 1, 0), ("y", 1, 1))).inv(1, "send", s(("x", 2, 1), ("y", 2, 0)))
                   .done(0, "send", s(("x", 1, 0), ("y", 1, 1))).done(1, "send", s(("x", 2, 1), ("y", 2, 0))),
        lambda: B().inv(0, "send", s(("x", 1, 0), ("y", 1, 0))).inv(1, "send", s(("x", 2, 1), ("y", 2, 1)))
                   .done(0, "send", s(("x", 1, 0), ("y", 1, 0))).done(1, "send", s(("x", 2, 1), ("y", 2, 1)))),
    "G1c": (  # each of two transactions read the other's write
        lambda: B().inv(0, "txn", [*s(("x", 1, 0)), ["poll", {"y": [[0, 1]]}]])
                   .inv(1, "txn", [*s(("y", 1, 0)), ["poll", {"x": [[0, 1]]}]])
                   .done(0, "txn", [*s(("x", 1, 0)), ["poll", {"y": [[0, 1]]}]])
                   .done(1, "txn", [*s(("y", 1, 0)), ["poll", {"x": [[0, 1]]}]]),
        lambda: B().op(0, "txn", [*s(("x", 1, 0)), ["poll", {}]])
                   .op(1, "txn", [*s(("y", 1, 0)), ["poll", {"x": [[0, 1]]}]])),
    "G1c-process": (  # a process read a value that it only sent in its next op
        lambda: B().op(0, "poll", [["poll", {"y": [[0, 1]]}]]).op(0, "send", s(("y", 1, 0))),
        lambda: B().op(0, "send", s(("y", 1, 0))).op(0, "poll", [["poll", {"y": [[0, 1]]}]])),
    "G1c-realtime": (  # a read of a value whose send began only after the read ended
        lambda: B().op(0, "poll", [["poll", {"y": [[0, 1]]}]]).op(1, "send", s(("y", 1, 0))),
        lambda: B().op(1, "send", s(("y", 1, 0))).op(0, "poll", [["poll", {"y": [[0, 1]]}]])),
    "G-single": (  # read skew: saw the writer's x but not its y
        lambda: B().send(0, ("y", 0, 0)).send(1, ("x", 1, 0), ("y", 1, 1))
                   .poll(2, {"x": [[0, 1]], "y": [[0, 0]]}),
        lambda: B().send(0, ("y", 0, 0)).send(1, ("x", 1, 0), ("y", 1, 1))
                   .poll(2, {"x": [[0, 1]], "y": [[0, 0], [1, 1]]})),
    "G2": (  # write skew: each transaction missed the other's write
        lambda: B().send(9, ("x", 10, 0), ("y", 20, 0))
                   .inv(0, "txn", [["poll", {"x": [[0, 10]]}], *s(("y", 21, 1))])
                   .inv(1, "txn", [["poll", {"y": [[0, 20]]}], *s(("x", 11, 1))])
                   .done(0, "txn", [["poll", {"x": [[0, 10]]}], *s(("y", 21, 1))])
                   .done(1, "txn", [["poll", {"y": [[0, 20]]}], *s(("x", 11, 1))]),
        lambda: B().send(9, ("x", 10, 0), ("y", 20, 0))
                   .op(1, "txn", [["poll", {"y": [[0, 20]]}], *s(("x", 11, 1))])
                   .op(0, "txn", [["poll", {"x": [[0, 10], [1, 11]]}], *s(("y", 21, 1))])),
    "G1b": (  # read the first of a transaction's two writes to x, and stopped
        lambda: B().send(0, ("x", 1, 0), ("x", 2, 1)).poll(1, {"x": [[0, 1]]}),
        lambda: B().send(0, ("x", 1, 0), ("x", 2, 1)).poll(1, {"x": [[0, 1], [1, 2]]})),
    "stale-read": (  # long after the faults ended a consumer behind the log reads nothing
        lambda: B().op(1, "assign", ["x"]).send(0, ("x", 0, 0)).poll(1, {"x": [[0, 0]]})
                   .nemesis("kill").at(2).send(0, ("x", 1, 1)).at(10).poll(1, {}),
        lambda: B().op(1, "assign", ["x"]).send(0, ("x", 0, 0)).poll(1, {"x": [[0, 0]]})
                   .nemesis("kill").at(2).send(0, ("x", 1, 1)).at(10).poll(1, {"x": [[1, 1]]})),
    "empty-history": (
        lambda: B().op(0, "assign", ["x"]).send(1, ("x", 1, None), type_="fail"),
        lambda: B().op(0, "assign", ["x"]).send(1, ("x", 1, 0)).poll(0, {"x": [[0, 1]]})),
}
CONFIG = {"sub_via": ["assign"], "staleness_bound_ms": 1000}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_each_anomaly_is_found_in_a_history_that_has_it(kind):
    bad, _good = CASES[kind]
    result = check(bad().ops, CONFIG)
    found = result["anomaly_types"] if kind not in ALWAYS_ALLOWED else list(result["allowed_anomalies"])
    assert kind in found, (result["anomaly_types"], result["allowed"])
    items = (result["anomalies"] if kind not in ALWAYS_ALLOWED else result["allowed_anomalies"])[kind]
    assert items[0]["explanation"] and "ops" in items[0]
    if kind not in ALWAYS_ALLOWED:
        assert result["valid"] is False


@pytest.mark.parametrize("kind", sorted(CASES))
def test_and_not_in_a_close_history_that_does_not(kind):
    _bad, good = CASES[kind]
    result = check(good().ops, CONFIG)
    assert result["valid"] is True and result["anomaly_types"] == [], result["anomalies"]
    assert kind not in result["allowed"]


def test_cycles_come_with_their_edges():
    result = check(CASES["G1c"][0]().ops, CONFIG)
    cyc = result["anomalies"]["G1c"][0]
    assert [s["type"] for s in cyc["steps"]] == ["wr", "wr"] and sorted(cyc["cycle"]) == [2, 3]
    g2 = check(CASES["G2"][0]().ops, CONFIG)["allowed_anomalies"]["G2"][0]
    assert sorted(s["type"] for s in g2["steps"]) == ["rw", "rw"]


def test_ww_cycles_are_allowed_but_can_be_forbidden():
    bad = CASES["G0"][0]().ops
    assert check(bad, CONFIG)["valid"] is True
    assert check(bad, CONFIG, forbid=("G0",))["anomaly_types"] == ["G0"]
    assert "G0" not in check(bad, {**CONFIG, "ww_deps": False})["allowed"]


def test_a_cycle_search_out_of_budget_gives_unknown_and_says_which_budget():
    ops = CASES["G0"][0]().ops
    result = check(ops, CONFIG, cycle_steps=1)
    assert result["valid"] == "unknown" and "budget of 1 steps" in result["unknown"][0]
    result = check(ops, CONFIG, cycle_time_limit_s=1e-12)
    assert result["valid"] == "unknown" and "wall-clock safety net" in result["unknown"][0]


def test_a_busy_machine_gives_the_same_verdict(monkeypatch):
    """The budget that decides a verdict counts work: a clock that runs 1000 s per reading (a
    machine so busy that each step takes minutes) changes nothing below the safety net."""
    import properties.cycles as cycles

    ops = CASES["G0"][0]().ops
    idle = check(ops, CONFIG)
    clock = iter(range(0, 10**9, 1000))
    monkeypatch.setattr(cycles.time, "monotonic", lambda: next(clock))
    busy = check(ops, CONFIG, cycle_time_limit_s=10**8)
    assert busy["valid"] is idle["valid"] is True
    assert busy["stats"]["cycles"]["cycle_steps"] == idle["stats"]["cycles"]["cycle_steps"] > 0


def test_non_unique_values_are_refused_clearly():
    from properties.analysis import HistoryShapeError
    h = B().send(0, ("x", 1, 0)).send(1, ("x", 1, 1))
    with pytest.raises(HistoryShapeError, match="unique"):
        check(h.ops, CONFIG)


def test_a_readers_first_poll_after_its_assignment_may_be_empty_but_not_the_second():
    """A consumer's first poll returns before its first fetch can answer: long after the faults
    ended, a reader that has just been assigned and polls nothing once is not stale yet (the
    txn machine's final read, started late behind queued transactions, was once reported)."""
    def history(*polls):
        b = B().send(0, ("x", 0, 0)).nemesis("kill").at(10).op(1, "assign", ["x"])
        for assign in b.ops[-2:]:  # a final reader: from the beginning
            assign["seek_to_beginning"] = True
        for reads in polls:
            b = b.poll(1, reads)
        return b.ops

    fresh = check(history({}, {"x": [[0, 0]]}), CONFIG)
    assert "stale-read" not in fresh["anomaly_types"]
    stale = check(history({}, {}), CONFIG)
    assert "stale-read" in stale["anomaly_types"]
