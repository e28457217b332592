"""Spark detection on small corpora with planted anomalies of known count, and the whole
report on a simulated corpus."""

from __future__ import annotations

import pytest

from traces.parquet import RunRecord, part_name, run_rows, to_tables, write_part

pytestmark = pytest.mark.spark


class H:
    """Builds a history: each op an invoke and its completion."""

    def __init__(self) -> None:
        self.ops: list[dict] = []
        self.t = 1_000

    def op(self, process, f, inv, comp, type_="ok", **extra):
        self.t += 10
        self.ops.append({"index": len(self.ops), "time": self.t, "process": process, "type": "invoke", "f": f,
                         "value": inv})
        self.t += 10
        self.ops.append({"index": len(self.ops), "time": self.t, "process": process, "type": type_, "f": f,
                         "value": comp, **extra})

    def send(self, p, key, value, offset, type_="ok"):
        self.op(p, "send", [["send", key, value]], [["send", key, [offset, value]]], type_)

    def poll(self, p, reads):
        self.op(p, "poll", [["poll"]], [["poll", reads]])


def meta(run_id, **config):
    base = {"acks": "all", "isolation_level": "read_committed", "txn": True, "sub_via": ["assign"],
            "replication_factor": 3, "bugs": [],
            "final_read": {"performed": True, "reached_end": True, "start_ns": 10**9,
                           "end_offsets": {"t0:0": 3, "t0:1": 5}}}
    base.update(config)
    return {"format": 1, "run_id": run_id, "seed": 0, "target": "sim", "workload": "queue", "config": base,
            "faults": ["kill"]}


def planted() -> RunRecord:
    h = H()
    h.send(1, "t0:0", 1, 0)
    h.send(1, "t0:0", 2, 1)
    h.send(1, "t0:0", 3, 2)                       # lost-write: never read
    h.send(1, "t0:0", 4, None, "fail")            # failed ...
    h.poll(2, {"t0:0": [[0, 1], [1, 2]]})
    h.poll(2, {"t0:0": [[0, 1]]})                 # nonmonotonic-poll: back to offset 0
    h.poll(4, {"t0:1": [[0, 10], [1, 11], [2, 12]]})
    h.poll(3, {"t0:1": [[0, 10], [2, 12]]})       # poll-skip over offset 1
    h.poll(4, {"t0:1": [[3, 11]]})                # duplicate: 11 at offsets 1 and 3
    h.poll(5, {"t0:1": [[2, 99]]})                # inconsistent-offsets: 12 and 99 at offset 2
    h.poll(6, {"t0:0": [[3, 4]]})                 # ... yet read (aborted-read); offset 3 >= end 3 (hw-regression-seen)
    log = [{"type": "assigned", "generation": 5, "keys": ["t0:0"], "owned": ["t0:0"]}]
    h.op(7, "poll", [["poll"]], [["poll", {}]], rebalance_log=log)
    h.op(8, "poll", [["poll"]], [["poll", {}]], rebalance_log=log)   # double-ownership with 7 ...
    h.op(7, "poll", [["poll"]], [["poll", {}]])                       # ... which still polls
    h.op(9, "poll", [["poll"]], [["poll", {}]],
         rebalance_log=[{"type": "assigned", "generation": 6, "keys": ["t0:0"], "owned": ["t0:0"]}])
    events = [
        {"time": 100, "node": 1, "kind": "leader-elected", "key": "t0:0", "leader_epoch": 2},
        {"time": 150, "node": 1, "kind": "hw-advance", "key": "t0:0", "from": 0, "to": 5, "leader_epoch": 2},
        {"time": 160, "node": 1, "kind": "hw-advance", "key": "t0:0", "from": 5, "to": 3, "leader_epoch": 2},
        {"time": 170, "node": 3, "kind": "hw-advance", "key": "t0:0", "from": 5, "to": 2, "leader_epoch": 2,
         "follower": True},                       # a follower's HW may go down
        {"time": 200, "node": 2, "kind": "leader-elected", "key": "t0:0", "leader_epoch": 2},
    ]
    return RunRecord(meta("planted"), h.ops, events, {"valid": False, "anomaly_types": ["lost-write"],
                                                      "counts": {"lost-write": 1}})


def clean() -> RunRecord:
    h = H()
    h.send(1, "t0:0", 1, 0)
    h.send(1, "t0:0", 2, 1)
    h.poll(2, {"t0:0": [[0, 1]]})
    h.poll(2, {"t0:0": [[1, 2]]})
    events = [{"time": 100, "node": 1, "kind": "leader-elected", "key": "t0:0", "leader_epoch": 1},
              {"time": 300, "node": 2, "kind": "leader-elected", "key": "t0:0", "leader_epoch": 2}]
    return RunRecord(meta("clean"), h.ops, events, {"valid": True, "anomaly_types": [], "counts": {}})


def weak() -> RunRecord:
    """acks=1: a plain send's offset is only the leader's word, a transactional one counts."""
    h = H()
    h.send(1, "t0:0", 1, 0)                       # read back as 7: not an inconsistency with acks=1
    h.send(1, "t0:0", 2, 1)                       # never read: not a lost write with acks=1
    h.op(1, "txn", [["send", "t0:0", 3]], [["send", "t0:0", [2, 3]]])   # never read: lost
    h.op(1, "txn", [["send", "t0:0", 4]], [["send", "t0:0", [3, 4]]])   # offset 3 read as 5 (4: lost too)
    h.poll(2, {"t0:0": [[0, 7]]})
    h.poll(3, {"t0:0": [[3, 5]]})
    m = meta("weak", acks="1")
    m["config"]["final_read"] = {**m["config"]["final_read"], "end_offsets": {"t0:0": 4}}
    return RunRecord(m, h.ops, [], {"valid": False, "anomaly_types": [], "counts": {}})


EXPECTED = {
    ("weak", "lost-write", "t0:0"): 2, ("weak", "inconsistent-offsets", "t0:0"): 1,
    ("planted", "lost-write", "t0:0"): 1, ("planted", "nonmonotonic-poll", "t0:0"): 1,
    ("planted", "poll-skip", "t0:1"): 1, ("planted", "duplicate", "t0:1"): 1,
    ("planted", "inconsistent-offsets", "t0:1"): 1, ("planted", "aborted-read", "t0:0"): 1,
    ("planted", "hw-regression-seen", "t0:0"): 1, ("planted", "double-ownership", "t0:0"): 1,
    ("planted", "leader-epoch-regression", "t0:0"): 1, ("planted", "hw-regression", "t0:0"): 1,
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    runs = [planted(), clean(), weak()]
    write_part(d, part_name(["planted", "clean", "weak"], 0), to_tables(run_rows(r) for r in runs))
    return d


@pytest.mark.parametrize("pushdown", [True, False], ids=["few-runs-filter", "join"])
def test_every_planted_anomaly_is_found_exactly(spark, corpus, monkeypatch, pushdown):
    from collections import Counter

    from spark_analysis import detect as d
    from spark_analysis.detect import detect, load

    if not pushdown:  # the path for corpora where failed sends or jumping reads are in many runs
        monkeypatch.setattr(d, "_PUSHDOWN_RUNS", 0)
    c = load(spark, str(corpus))
    found = Counter()
    for df in detect(c).values():
        for row in df.collect():
            found[(row.run_id, row.anomaly, row.key)] += 1
    assert dict(found) == EXPECTED


def test_allowed_with_subscribe_and_agreement(spark, tmp_path):
    from spark_analysis import jobs
    from spark_analysis.detect import load

    r = planted()
    r.meta["config"]["sub_via"] = ["subscribe"]
    write_part(tmp_path, "part-00000-s", to_tables([run_rows(r)]))
    c = load(spark, str(tmp_path))
    found = {(x.anomaly, x.allowed) for x in jobs.anomalies(c).collect()}
    assert ("poll-skip", True) in found and ("nonmonotonic-poll", True) in found
    assert ("lost-write", False) in found
    summary, dis = jobs.agreement(c, jobs.per_run(c, jobs.anomalies(c)), None)
    fams = {row.family: row for row in summary.collect()}
    assert fams["lost-write"].both == 1                       # the verdict said lost-write too
    assert fams["duplicate"].spark_only == 1                  # it did not say duplicate
    assert {row.family for row in dis.collect()} >= {"duplicate", "inconsistent-offsets"}


def test_the_checkers_families_without_a_spark_detector_reach_every_table(spark, tmp_path):
    """A run the checker judged invalid through a white-box invariant (no Spark detection
    covers that) shows in the rates, the bug table, the counts and the agreement table."""
    from spark_analysis.report import analyze

    broken = clean()
    broken.meta["run_id"] = "broken"
    broken.meta["config"]["bugs"] = ["ack-before-isr"]
    broken.results = {"valid": False, "anomaly_types": ["invariant-violation"], "counts": {"invariant-violation": 2}}
    runs = [clean(), broken]
    write_part(tmp_path / "c", part_name(["clean", "broken"], 0), to_tables(run_rows(r) for r in runs))
    r = analyze(str(tmp_path / "c"), tmp_path / "r", spark, cycles=False)
    bug = r.tables["rate_by_bug"].set_index("bug")
    assert bug.loc["ack-before-isr", "anomaly_rate"] == 1.0 and bug.loc["ack-before-isr", "invariant-violation"] == 1
    assert "invariant-violation" in set(r.tables["bug_reveals"]["anomaly"])
    counts = r.tables["anomaly_counts"].set_index("anomaly")
    assert counts.loc["invariant-violation", "runs"] == 1
    agree = r.tables["agreement"].set_index("family")
    assert agree.loc["invariant-violation", "checker_only"] == 1
    assert "no Spark detector" in agree.loc["invariant-violation", "source"]
    assert "invariant-violation" not in set(r.tables["disagreements"].get("family", []))
