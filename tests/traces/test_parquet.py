"""Parquet corpora: run directories to tables and back, batches, resuming."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from kafkacheck.runner import RunOptions, simulate
from traces.history import CorpusError
from traces.parquet import (
    RunRecord,
    existing_runs,
    load_run_dir,
    open_corpus,
    part_name,
    read_run,
    run_rows,
    to_tables,
    write_part,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = []
    for workload, seed in (("txn", 1), ("groups", 2), ("compaction", 3)):
        d = tmp_path_factory.mktemp(workload)
        simulate(RunOptions(seed=seed, ops=120, workload=workload), d)
        out.append(load_run_dir(d))
    return out


def test_round_trip_gives_the_same_operations_and_events(runs, tmp_path):
    write_part(tmp_path, part_name([r.meta["run_id"] for r in runs], 0), to_tables(run_rows(r) for r in runs))
    assert existing_runs(tmp_path) == {r.meta["run_id"] for r in runs}
    for r in runs:
        back = read_run(tmp_path, r.meta["run_id"])
        assert back.ops == r.ops
        assert back.meta == r.meta
        assert back.events == sorted(r.events, key=lambda e: e["time"])
    # groups ops carry rebalance logs, compaction sends record keys: both survived
    assert any("rebalance_log" in op for op in runs[1].ops)


def test_micro_ops_flatten_sends_and_every_record_read(runs):
    r = runs[0]
    rows = run_rows(r)["mops"]
    sends = sum(1 for op in r.ops if op["type"] != "invoke" and op["f"] in ("send", "txn")
                for m in op["value"] if m[0] == "send")
    reads = sum(len(recs) for op in r.ops if op["type"] != "invoke" and op["f"] in ("poll", "txn")
                for m in op["value"] if m[0] == "poll" for recs in m[1].values())
    assert sum(1 for m in rows if m["kind"] == "send") == sends
    assert sum(1 for m in rows if m["kind"] == "poll" and m["key"] is not None) == reads


def test_files_are_sorted_by_run_and_time(runs, tmp_path):
    write_part(tmp_path, "part-00000-x", to_tables(run_rows(r) for r in runs))
    ops = pq.read_table(tmp_path / "ops" / "part-00000-x.parquet").to_pylist()
    keys = [(o["run_id"], o["index"]) for o in ops]
    assert keys == sorted(keys)
    mops = pq.read_table(tmp_path / "mops" / "part-00000-x.parquet").to_pylist()
    assert [(m["run_id"], m["time"]) for m in mops] == sorted((m["run_id"], m["time"]) for m in mops)


def test_an_unfinished_batch_is_dropped_on_resume(runs, tmp_path):
    write_part(tmp_path, "part-00000-a", to_tables([run_rows(runs[0])]))
    tables = to_tables([run_rows(runs[1])])
    pq.write_table(tables["ops"], tmp_path / "ops" / "part-00001-b.parquet")  # cut before runs/
    (tmp_path / "mops" / ".part-00001-b.parquet.tmp").write_text("half")
    assert open_corpus(tmp_path) == {runs[0].meta["run_id"]}
    assert not (tmp_path / "ops" / "part-00001-b.parquet").exists()
    assert not (tmp_path / "mops" / ".part-00001-b.parquet.tmp").exists()


def test_verdicts_hold_anomalies_and_allowed_counts(runs):
    r = RunRecord(runs[0].meta, runs[0].ops, [], {
        "valid": False, "anomaly_types": ["lost-write"], "counts": {"lost-write": 2, "poll-skip": 1},
        "allowed": {"poll-skip": 1, "G0": 3}})
    v = {x["anomaly"]: (x["count"], x["allowed"]) for x in run_rows(r)["verdicts"]}
    assert v == {"lost-write": (2, False), "poll-skip": (1, True), "G0": (3, True)}
    assert json.loads(run_rows(r)["runs"][0]["valid"]) is False


def test_bad_input_is_a_clear_error(runs, tmp_path):
    bad = RunRecord({**runs[0].meta}, [dict(runs[0].ops[0])], [], None)
    bad.meta.pop("run_id")
    with pytest.raises(CorpusError, match="run_id"):
        run_rows(bad)
    with pytest.raises(CorpusError, match="not in"):
        write_part(tmp_path, "part-00000-a", to_tables([run_rows(runs[0])]))
        read_run(tmp_path, "nope")
    (tmp_path / "runs" / "part-00009-z.parquet").write_text("not parquet")
    with pytest.raises(CorpusError, match="not a readable Parquet file"):
        existing_runs(tmp_path)
