"""The checker's API: models, pending operations, events, unknown verdicts, partial
linearizations, Python-defined models, the Kafka conversion and the HTML page."""

from __future__ import annotations

import json

import pytest

from linearizability import (
    UNKNOWN,
    Event,
    HistoryError,
    Model,
    Operation,
    check_events,
    check_operations,
    get_model,
    native_available,
)
from linearizability.kafka_histories import log_operations, offset_operations
from linearizability.visualize import render_html

REGISTER = get_model("register")
LOG = get_model("partition-log")


def test_the_extension_is_built():
    assert native_available()


def test_a_stale_read_after_a_write_returned_is_illegal_and_a_concurrent_one_is_not():
    history = [Operation(0, ("write", 1), 0, None, 10), Operation(1, ("read",), 20, None, 30)]
    assert check_operations(REGISTER, history).verdict == "illegal"
    concurrent = [Operation(0, ("write", 1), 0, None, 25), Operation(1, ("read",), 20, None, 30)]
    assert check_operations(REGISTER, concurrent).verdict == "ok"


def test_a_pending_write_may_take_effect_any_time_after_its_call():
    history = [Operation(0, ("write", 1), 0, None, None), Operation(1, ("read",), 50, None, 60),
               Operation(1, ("read",), 70, 1, 80)]
    assert check_operations(REGISTER, history).verdict == "ok"
    before_call = [Operation(1, ("read",), 0, 1, 5), Operation(0, ("write", 1), 10, None, None)]
    assert check_operations(REGISTER, before_call).verdict == "illegal"


def test_cas_and_unknown_outputs():
    ok = [Operation(0, ("write", 1), 0, None, 1), Operation(1, ("cas", 1, 2), 2, True, 3),
          Operation(2, ("cas", 1, 3), 4, False, 5), Operation(3, ("read",), 6, UNKNOWN, 7), Operation(3, ("read",), 8, 2, 9)]
    assert check_operations(REGISTER, ok).verdict == "ok"
    bad = [*ok[:2], Operation(2, ("cas", 1, 3), 4, True, 5)]
    assert check_operations(REGISTER, bad).verdict == "illegal"


def test_events_are_matched_by_id_and_unreturned_calls_are_pending():
    events = [Event(0, "call", ("write", 1), 0), Event(1, "call", ("read",), 1),
              Event(1, "return", 1, 1), Event(2, "call", ("write", 2), 2)]
    assert check_events(REGISTER, events).verdict == "ok"
    with pytest.raises(HistoryError):
        check_events(REGISTER, [Event(0, "return", None, 7)])


def test_bad_histories_are_refused_with_a_message():
    with pytest.raises(HistoryError, match="returns"):
        check_operations(REGISTER, [Operation(0, ("read",), 10, None, 5)])
    with pytest.raises(HistoryError, match="unknown input"):
        check_operations(REGISTER, [Operation(0, ("increment",), 0, None, 5)])
    with pytest.raises(HistoryError, match="64-bit"):
        check_operations(REGISTER, [Operation(0, ("write", 2**70), 0, None, 5)])


def _hard_history(n):
    """Many concurrent writes and a final read of a value nobody wrote: illegal, but only
    after trying every order of the writes."""
    ops = [Operation(i, ("write", i), 0, None, 100) for i in range(n)]
    return [*ops, Operation(n, ("read",), 200, -1, 300)]


def test_a_time_budget_gives_unknown():
    result = check_operations(REGISTER, _hard_history(40), timeout_s=0.2)
    assert result.verdict == "unknown"
    assert result.partitions[0].reason == "timeout"


def test_a_memory_cap_gives_unknown():
    result = check_operations(REGISTER, _hard_history(40), memory_max_mb=5)
    assert result.verdict == "unknown"
    assert result.partitions[0].reason == "memory"
    python = check_operations(REGISTER, _hard_history(40), memory_max_mb=1, engine="python")
    assert python.verdict == "unknown" and python.partitions[0].reason == "memory"


def test_the_first_illegal_partition_stops_the_others():
    kv = get_model("kv")
    hard = [Operation(i, ("put", "a", str(i)), 0, None, 100) for i in range(40)]
    hard.append(Operation(99, ("get", "a"), 200, "nope", 300))
    easy = [Operation(0, ("put", "b", "x"), 0, None, 1), Operation(1, ("get", "b"), 2, "y", 3)]
    result = check_operations(kv, hard + easy, threads=1)
    assert result.verdict == "illegal"
    verdicts = sorted(p.verdict for p in result.partitions)
    assert verdicts == ["illegal", "unknown"]
    assert [p.reason for p in result.partitions if p.verdict == "unknown"] == ["cancelled"]


def test_partial_linearization_is_the_longest_prefix():
    history = [Operation(0, ("write", 1), 0, None, 10), Operation(1, ("read",), 20, 1, 30),
               Operation(1, ("read",), 40, 2, 50)]
    result = check_operations(REGISTER, history, partial=True)
    p = result.partitions[0]
    assert result.verdict == "illegal"
    assert p.longest == [0, 1] and p.blocked == 2


def test_a_model_written_in_python_runs_on_the_oracle():
    counter = Model("counter", init=lambda: 0,
                    step=lambda s, inp, out: (True, s + 1) if inp == "inc" else (out == s, s))
    ok = [Operation(0, "inc", 0, None, 10), Operation(1, "inc", 5, None, 15), Operation(2, "get", 20, 2, 30)]
    result = check_operations(counter, ok)
    assert result.verdict == "ok" and result.engine == "python"
    assert check_operations(counter, [*ok, Operation(2, "get", 40, 1, 50)]).verdict == "illegal"


def test_the_log_model():
    def append(c, v, call, off, ret):
        return Operation(c, ("append", "t:0", v), call, off, ret)

    def read(c, pos, call, records, ret):
        return Operation(c, ("read", "t:0", pos), call, tuple(records), ret)

    good = [append(0, 10, 0, 0, 5), append(0, 11, 6, 2, 9), read(1, 0, 10, [(0, 10), (2, 11)], 12)]
    assert check_operations(LOG, good).verdict == "ok"   # offset 1 is a gap (a marker)
    lost = [append(0, 10, 0, 0, 5), append(0, 11, 6, 1, 9), read(1, 0, 10, [(0, 10), (2, 12)], 12)]
    assert check_operations(LOG, lost).verdict == "illegal"  # skipped offset 1 and read an unwritten value
    backwards = [append(0, 10, 0, 5, 5), append(0, 11, 6, 3, 9)]
    assert check_operations(LOG, backwards).verdict == "illegal"  # a later append at a lower offset
    nothing_yet = [append(0, 10, 0, 0, 5), read(1, 0, 10, [], 12)]
    assert check_operations(LOG, nothing_yet).verdict == "illegal"  # acknowledged, then not there


def _op(index, process, type_, f, value, time, **extra):
    return {"index": index, "process": process, "type": type_, "f": f, "value": value, "time": time, **extra}


def test_kafka_sends_and_polls_become_appends_and_reads():
    ops = [
        _op(0, 0, "invoke", "send", [["send", "t:0", 1]], 0),
        _op(1, 0, "ok", "send", [["send", "t:0", [0, 1]]], 10),
        _op(2, 1, "invoke", "send", [["send", "t:0", 2]], 11),
        _op(3, 1, "info", "send", [["send", "t:0", [None, 2]]], 20),
        _op(4, 2, "invoke", "send", [["send", "t:0", 3]], 21),
        _op(5, 2, "fail", "send", [["send", "t:0", [None, 3]]], 22),
        _op(6, 3, "invoke", "poll", [["poll"]], 30),
        _op(7, 3, "ok", "poll", [["poll", {"t:0": [[0, 1], [1, 2]]}]], 40),
        _op(8, 3, "invoke", "poll", [["poll"]], 41),
        _op(9, 3, "ok", "poll", [["poll", {}]], 50),
    ]
    converted = log_operations(ops, {"acks": "all", "idempotence": True, "sub_via": ["assign"]})
    inputs = [(op.input, op.output) for op in converted]
    assert (("append", "t:0", 1), 0) in inputs
    assert (("append", "t:0", 2), 1) in inputs         # info, resolved by the read
    assert all(op.input != ("append", "t:0", 3) for op in converted)  # fail: did not happen
    assert (("read", "t:0", None), ((0, 1), (1, 2))) in inputs
    assert len(converted) == 3                          # the empty poll says nothing
    assert check_operations(LOG, converted).verdict == "ok"
    info_append = next(op for op in converted if op.input[2] == 2)
    assert info_append.return_time is not None and info_append.return_time <= 40


def test_kafka_commits_become_offset_register_operations():
    ops = [
        _op(0, 0, "invoke", "commit", {"t:0": 5}, 0), _op(1, 0, "ok", "commit", {"t:0": 5}, 10),
        _op(2, 1, "invoke", "committed", ["t:0"], 20), _op(3, 1, "ok", "committed", {"t:0": 4}, 30),
    ]
    converted = offset_operations(ops)
    assert [op.input for op in converted] == [("commit", "t:0", 5), ("committed", "t:0")]
    assert check_operations(get_model("committed-offsets"), converted).verdict == "illegal"


def test_the_html_page_shows_the_failure(tmp_path):
    history = [Operation(0, ("write", 1), 0, None, 10), Operation(1, ("read",), 20, 1, 30),
               Operation(2, ("read",), 40, 2, 50)]
    result = check_operations(REGISTER, history, partial=True)
    page = render_html(result, REGISTER, tmp_path / "lin.html").read_text()
    data = json.loads(page.split("const DATA = ", 1)[1].split(";\n", 1)[0])
    rows = {r["id"]: r for r in data[0]["rows"]}
    assert data[0]["verdict"] == "illegal" and data[0]["blocked"] == 2
    assert rows[0]["step"] == 0 and rows[1]["step"] == 1 and rows[2]["step"] == -1
    assert rows[1]["state"] == "1" and rows[2]["desc"] == "read() -> 2"


def _hard_register_history(n: int) -> list[Operation]:
    """n concurrent writes and a concurrent read of a value nobody wrote: illegal, and the
    search must try every subset of the writes first (2^n states)."""
    ops = [Operation(i, ("write", i + 1), 0, None, 1000) for i in range(n)]
    return [*ops, Operation(n, ("read",), 0, 999, 1000)]


@pytest.mark.parametrize("engine", ["c++", "python"])
def test_an_iteration_budget_gives_the_same_unknown_on_any_machine(engine):
    """The budget that decides "unknown" counts search steps: the same history stops at the
    same place however busy the machine (a timeout would not)."""
    ops = _hard_register_history(12)
    runs = [check_operations(REGISTER, ops, engine=engine, iterations_max=20_000) for _ in range(2)]
    for r in runs:
        assert r.verdict == "unknown" and r.partitions[0].reason == "iterations"
    assert runs[0].partitions[0].iterations == runs[1].partitions[0].iterations
    assert 20_000 <= runs[0].partitions[0].iterations < 20_000 + 4096
    assert check_operations(REGISTER, ops, engine=engine).verdict == "illegal"  # no budget: decided


def test_ctrl_c_stops_the_cpp_search_promptly():
    import os
    import signal
    import subprocess
    import sys
    import time

    code = ("from linearizability import check_operations, get_model, Operation\n"
            "ops = [Operation(i, ('write', i + 1), 0, None, 1000) for i in range(30)]\n"
            "ops.append(Operation(30, ('read',), 0, 999, 1000))\n"
            "print('searching', flush=True)\n"
            "check_operations(get_model('register'), ops, engine='c++')\n"
            "print('finished')\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "searching\n"
    time.sleep(1.5)
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert time.monotonic() - sent < 5, "the search did not poll for the interrupt"
    assert "KeyboardInterrupt" in err and "finished" not in out


def test_the_html_page_survives_values_that_are_markup(tmp_path):
    """A value '<!--<script>' (or '</script>') inside the page's data once left the page blank:
    the HTML parser took it for the start of a comment inside the script."""
    hostile = "<!--<script></script>__TITLE__&\u2028"
    history = [Operation(0, ("write", hostile), 0, None, 10), Operation(1, ("read",), 20, hostile, 30),
               Operation(2, ("read",), 40, "other", 50)]
    result = check_operations(REGISTER, history, engine="python", partial=True)
    page = render_html(result, REGISTER, tmp_path / "lin.html", title="<b>__DATA__</b>").read_text()
    body = page.split("<script>", 1)[1].rsplit("</script>", 1)[0]
    assert "<" not in body.split("const DATA = ", 1)[1].split(";\n", 1)[0]
    assert "<!--" not in body and "<script" not in body and "</script" not in body
    data = json.loads(body.split("const DATA = ", 1)[1].split(";\n", 1)[0])
    assert any(hostile in (r.get("desc") or "") for r in data[0]["rows"])
    assert "<title>&lt;b&gt;__DATA__&lt;/b&gt;</title>" in page
