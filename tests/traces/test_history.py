"""History files: malformed input is named by file, line and problem."""

from __future__ import annotations

import json

import pytest

from traces.history import HistoryError, Recorder, load_run, read_history, write_jsonl


def write(tmp_path, lines):
    p = tmp_path / "history.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


GOOD = [
    '{"index":0,"time":1,"process":0,"type":"invoke","f":"send","value":[["send","t:0",1]]}',
    '{"index":1,"time":2,"process":0,"type":"ok","f":"send","value":[["send","t:0",[0,1]]]}',
]


def test_a_recorded_history_reads_back_identically(tmp_path):
    r = Recorder()
    r.op(5, 0, "invoke", "poll", [["poll"]])
    r.op(9, 0, "ok", "poll", [["poll", {"t:0": [[0, 1]]}]], node=2)
    write_jsonl(tmp_path / "history.jsonl", r.ops)
    assert read_history(tmp_path / "history.jsonl") == r.ops


@pytest.mark.parametrize(("line", "problem"), [
    ("{not json", "not valid JSON"),
    ('{"index":1,"time":2,"process":0,"type":"ok","f":"send"}', "the value of a send op"),
    ('{"index":1,"time":2,"process":0,"type":"done","f":"send","value":[]}', "type 'done'"),
    ('{"index":1,"time":"x","process":0,"type":"ok","f":"send","value":[]}', "time must be an integer"),
    ('{"index":1,"time":2,"process":0,"type":"ok","f":"sned","value":[]}', "unknown client function"),
    ('{"index":1,"time":2,"process":0,"type":"ok","f":"send","value":[["fly"]]}', "micro-op"),
    ('[1,2]', "must be a JSON object"),
    ('{"time":2,"process":0,"type":"ok","f":"send","value":[]}', "missing field 'index'"),
])
def test_a_malformed_line_names_its_line_and_problem(tmp_path, line, problem):
    p = write(tmp_path, [GOOD[0], line])
    with pytest.raises(HistoryError) as e:
        read_history(p)
    assert f"{p}:2:" in str(e.value)
    assert problem in str(e.value)


def test_indices_must_be_dense_and_processes_must_alternate(tmp_path):
    with pytest.raises(HistoryError, match=r"index 5 where 1"):
        read_history(write(tmp_path, [GOOD[0], GOOD[1].replace('"index":1', '"index":5')]))
    twice = GOOD[0].replace('"index":0', '"index":1')
    with pytest.raises(HistoryError, match="invokes again"):
        read_history(write(tmp_path, [GOOD[0], twice]))
    orphan = GOOD[1].replace('"index":1', '"index":0')
    with pytest.raises(HistoryError, match="no open invoke"):
        read_history(write(tmp_path, [orphan]))


def test_load_run_accepts_a_directory_or_a_file(tmp_path):
    write(tmp_path, GOOD)
    (tmp_path / "run.json").write_text(json.dumps({"seed": 3, "config": {}}))
    meta, ops, d = load_run(tmp_path)
    assert meta["seed"] == 3 and len(ops) == 2 and d == tmp_path
    meta2, ops2, _ = load_run(tmp_path / "history.jsonl")
    assert meta2 == meta and ops2 == ops
    with pytest.raises(HistoryError, match="no such file"):
        load_run(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(HistoryError, match=r"no history\.jsonl"):
        load_run(empty)
