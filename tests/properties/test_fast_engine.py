"""The checker's compiled engine (``fast``, properties/_fastcheck) against its oracle, the pure-Python
checker (``python``): the whole verdict (anomaly lists and counts, the cycles' evidence, the
statistics) is the same one on the benchmark's histories, with and without injected anomalies,
on simulated runs, and on the property tests' model histories; where the fast engine is meant
to judge alone (a correct queue), it does, rather than handing the history to Python."""

from __future__ import annotations

import copy
import importlib.util
import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from properties.checker import check, check_fast
from tests.properties.test_checker_properties import CONFIG, STEPS, TXN_CONFIG, TXN_STEPS, play
from traces.history import HistoryError, iter_history, write_jsonl

ROOT = Path(__file__).resolve().parents[2]
ASSIGN = {"sub_via": ["assign"]}


def _generator():
    spec = importlib.util.spec_from_file_location("check_speed", ROOT / "benchmarks" / "check_speed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.generate


generate = _generator()


def bench_ops(tmp_path: Path, n: int, seed: int) -> list[dict]:
    path = tmp_path / f"bench-{n}-{seed}.jsonl"
    generate(path, n, seed)
    return [json.loads(line) for line in path.read_text().splitlines()]


def same(ops, config: dict, tmp_path: Path | None = None, **options) -> dict:
    """Both engines' verdicts, asserted equal (and equal read from a file, when ``tmp_path``)."""
    py = check(ops, config, engine="python", **options)
    fast = check(ops, config, engine="fast", **options)
    assert fast == py
    if tmp_path is not None:
        path = tmp_path / "history.jsonl"
        write_jsonl(path, ops)
        assert check(iter_history(path), config, engine="fast", **options) == py
    return py


def judged_fast(ops, config: dict, **options) -> dict:
    """The fast engine's own verdict: it must not hand this history to Python."""
    out = check_fast(ops, config, **options)
    assert isinstance(out, dict), out
    return out


def reindex(ops: list[dict]) -> list[dict]:
    for i, op in enumerate(ops):
        op["index"] = i
    return ops


def reported(result: dict) -> set[str]:
    return set(result["anomaly_types"]) | set(result["allowed"])


# what the fast engine reports itself; any other anomaly found hands the history to Python
FAST_KINDS = {"G0", "G0-process", "G0-realtime", "G1c", "G1c-process", "G1c-realtime", "G-single", "G2",
              "int-poll-skip", "int-nonmonotonic-poll", "int-send-skip", "int-nonmonotonic-send", "poll-skip",
              "nonmonotonic-poll", "nonmonotonic-send", "G1b", "inconsistent-offsets", "duplicate", "G1a",
              "precommitted-read", "lost-write", "stale-read", "nonatomic-read", "unread-after-heal",
              "stale-after-heal", "idempotence-error", "empty-history", "unseen", "stalled"}


GROUP_KINDS = {"double-ownership", "fenced-commit", "cooperative-revoked-unmoved", "reassigned-before-revoked",
               "expired-member-commit", "committed-offset-regressed", "unowned-partition", "processed-twice"}


def same_and_fast_where_covered(ops, config: dict) -> dict:
    result = same(ops, config)
    if reported(result) <= FAST_KINDS:
        assert judged_fast(ops, config) == result
    return result


# ---------------------------------------------------------------- the benchmark's histories


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_correct_queue_is_judged_by_the_fast_engine_alone_and_as_python_does(tmp_path, seed):
    ops = bench_ops(tmp_path, 3000, seed)
    result = same(ops, ASSIGN, tmp_path)
    assert result["valid"] is True
    assert judged_fast(ops, ASSIGN) == result
    assert judged_fast(iter_history(tmp_path / "history.jsonl"), ASSIGN) == result
    # read skew is there, explained step by step: the cycle search's evidence is compared too
    assert result["allowed_anomalies"]["G-single"][0]["steps"]
    assert result["stats"]["cycles"]["cycle_steps"] > 0


def test_the_engines_agree_without_ww_edges_with_forbidden_types_and_a_small_staleness_bound(tmp_path):
    ops = bench_ops(tmp_path, 1500, 3)
    assert same(ops, {**ASSIGN, "ww_deps": False})["valid"] is True
    assert same(ops, ASSIGN, forbid=("G-single", "unseen"))["anomaly_types"] == ["G-single"]
    assert "stale-read" in same(ops, {**ASSIGN, "staleness_bound_ms": 1})["anomaly_types"]


@pytest.mark.parametrize("steps", [1, 200, 2_000, 6_000])
def test_a_cycle_search_that_runs_out_of_budget_stops_where_pythons_does(tmp_path, steps):
    ops = bench_ops(tmp_path, 1500, 4)
    result = same(ops, ASSIGN, cycle_steps=steps)
    assert result["valid"] == "unknown"
    assert result["stats"]["cycles"]["budget_exhausted"] is True
    judged_fast(ops, ASSIGN, cycle_steps=steps)


def _polls(ops: list[dict]) -> list[tuple[dict, str, list]]:
    """(op, key, records) of every non-empty ok poll."""
    return [(op, k, recs) for op in ops if op["type"] == "ok" and op["f"] == "poll"
            for k, recs in op["value"][0][1].items() if recs]


def _lose(ops, rng):  # an acknowledged record vanishes from every read of it
    _op, key, recs = rng.choice([p for p in _polls(ops) if len(p[2]) >= 2])
    off = recs[0][1]
    for _p, k, rs in _polls(ops):
        if k == key:
            rs[:] = [r for r in rs if r[1] != off]
    return {"lost-write"}


def _duplicate(ops, rng):  # a record read again at the next offset
    recs = rng.choice([p for p in _polls(ops) if len(p[2]) >= 2])[2]
    recs[1][1] = recs[0][1]
    return {"duplicate"}


def _reorder(ops, rng):  # a poll returns two records in reverse
    recs = rng.choice([p for p in _polls(ops) if len(p[2]) >= 2])[2]
    recs[0], recs[1] = recs[1], recs[0]
    return {"int-nonmonotonic-poll"}


def _aborted(ops, rng):  # a send that was read says it failed
    read = {r[1] for _op, _k, recs in _polls(ops) for r in recs}
    op = rng.choice([o for o in ops if o["f"] == "send" and o["type"] == "ok"
                     and all(m[2][1] in read for m in o["value"])])
    op["type"] = "fail"
    op["value"] = [["send", m[1], m[2][1]] for m in op["value"]]
    return {"G1a"}


def _crashed(ops, rng):  # sends of unknown outcome
    for op in rng.sample([o for o in ops if o["f"] == "send" and o["type"] == "ok"], 5):
        op["type"] = "info"
    return set()


def _faults(ops, rng):  # a nemesis partitions the cluster twice
    at = sorted(rng.sample(range(len(ops)), 4))
    for j, i in enumerate(reversed(at)):
        t = ops[i]["time"]
        ops.insert(i, {"index": 0, "time": t, "process": "nemesis", "type": "info" if j % 2 == 0 else "invoke",
                       "f": "partition", "value": {"nodes": [1, 2]} if j % 2 else None})
    reindex(ops)
    return set()


def _skip(ops, rng):  # a consumer misses a record between two of its polls
    recs = rng.choice([p for p in _polls(ops) if len(p[2]) >= 2])[2]
    del recs[0]
    return {"poll-skip"}


@pytest.mark.parametrize("inject", [_lose, _duplicate, _reorder, _aborted, _crashed, _faults, _skip])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_engines_agree_on_a_history_with_an_injected_anomaly(tmp_path, inject, seed):
    ops = bench_ops(tmp_path, 600, seed)
    rng = random.Random(seed)
    expect = inject(ops, rng)
    result = same(ops, ASSIGN, tmp_path)
    assert expect <= reported(result), (expect, result["anomaly_types"])
    same_and_fast_where_covered(ops, ASSIGN)
    same_and_fast_where_covered(ops, {"sub_via": ["subscribe"]})


@pytest.mark.parametrize("reached_end", [True, False])
def test_a_final_read_is_judged_alike(tmp_path, reached_end):
    ops = bench_ops(tmp_path, 800, 5)
    start = ops[len(ops) // 2]["time"]  # the polls after it count as the final read
    final = {"performed": True, "reached_end": reached_end, "start_ns": start, "staleness_bound_ms": 5000,
             "end_offsets": {f"t0:{i}": 40 + i for i in range(0, 16, 2)}}
    result = same_and_fast_where_covered(ops, {**ASSIGN, "final_read": final})
    assert "unread-after-heal" in result["anomaly_types"]
    assert ("stale-after-heal" in result["anomaly_types"]) == (not reached_end)
    empty = same_and_fast_where_covered([], ASSIGN)
    assert empty["anomaly_types"] == ["empty-history"]


def test_an_idempotence_error_is_judged_alike(tmp_path):
    ops = bench_ops(tmp_path, 300, 6)
    t = ops[-1]["time"]
    for error in ("NOT_LEADER", "REQUEST_TIMED_OUT,OUT_OF_ORDER_SEQUENCE_NUMBER", "ProducerFenced"):
        ops += [{"index": len(ops), "time": t + 1, "process": 99, "type": "invoke", "f": "send",
                 "value": [["send", "t0:1", 10**6 + len(ops)]]},
                {"index": len(ops) + 1, "time": t + 2, "process": 99, "type": "info", "f": "send",
                 "value": [["send", "t0:1", 10**6 + len(ops)]], "error": error}]
    result = same_and_fast_where_covered(ops, {**ASSIGN, "idempotence": True})
    assert result["counts"]["idempotence-error"] == 2
    same_and_fast_where_covered(ops, {**ASSIGN, "idempotence": True, "acks": "1"})


# ---------------------------------------------------------------- cycles the fast engine reports


def _txn(ops, process, t, value, invoke=None, type_="ok"):
    ops.append({"index": len(ops), "time": t, "process": process, "type": "invoke", "f": "txn",
                "value": invoke if invoke is not None else value})
    ops.append({"index": len(ops), "time": t + 1, "process": process, "type": type_, "f": "txn", "value": value})


def test_a_read_only_dependency_cycle_is_g1c_in_both_engines():
    ops: list[dict] = []
    # each transaction reads the other's write: G1c, a violation the fast engine reports itself
    ops.append({"index": 0, "time": 0, "process": 0, "type": "invoke", "f": "txn",
                "value": [["send", "x", 1], ["poll"]]})
    ops.append({"index": 1, "time": 1, "process": 1, "type": "invoke", "f": "txn",
                "value": [["send", "y", 2], ["poll"]]})
    ops.append({"index": 2, "time": 5, "process": 0, "type": "ok", "f": "txn",
                "value": [["send", "x", [0, 1]], ["poll", {"y": [[0, 2]]}]]})
    ops.append({"index": 3, "time": 6, "process": 1, "type": "ok", "f": "txn",
                "value": [["send", "y", [0, 2]], ["poll", {"x": [[0, 1]]}]]})
    result = same(ops, ASSIGN)
    assert "G1c" in result["anomaly_types"]
    assert result == judged_fast(ops, ASSIGN)


def test_write_cycles_and_realtime_cycles_are_reported_alike():
    ops: list[dict] = []
    # G0: two transactions' writes land in opposite orders in two partitions
    _txn(ops, 0, 0, [["send", "x", [0, 1]], ["send", "y", [1, 2]]], [["send", "x", 1], ["send", "y", 2]])
    _txn(ops, 1, 10, [["send", "x", [1, 3]], ["send", "y", [0, 4]]], [["send", "x", 3], ["send", "y", 4]])
    # a later reader reads everything, then one reads what was written after it completed
    _txn(ops, 2, 20, [["poll", {"x": [[0, 1], [1, 3]], "y": [[0, 4], [1, 2]]}]], [["poll"]])
    _txn(ops, 3, 30, [["poll", {"z": [[0, 9]]}]], [["poll"]])
    _txn(ops, 4, 40, [["send", "z", [0, 9]]], [["send", "z", 9]])
    result = same(ops, ASSIGN)
    assert {"G0", "G1c-realtime"} <= reported(result)
    assert result == judged_fast(ops, ASSIGN)


# ---------------------------------------------------------------- Jepsen's cases (tests/data)

JEPSEN = ROOT / "tests" / "data" / "jepsen_kafka_cases"


def _numbered(ops: list[dict]) -> list[dict]:
    """A Jepsen case with its named values numbered (Jepsen's tests name them; ours are integers)."""
    ops = copy.deepcopy(ops)
    number: dict = {}

    def n(v):
        return v if v is None or isinstance(v, int) else number.setdefault(v, 1000 + len(number))

    for op in ops:
        for mop in op.get("value") or []:
            if not isinstance(mop, list) or not mop:
                continue
            if mop[0] == "send":
                mop[2] = [mop[2][0], n(mop[2][1])] if isinstance(mop[2], list) else n(mop[2])
            elif mop[0] == "poll" and len(mop) == 2:
                for recs in mop[1].values():
                    for rec in recs:
                        rec[1] = n(rec[1])
    return ops


@pytest.mark.parametrize("name", sorted(p.stem for p in JEPSEN.glob("*.json")))
def test_the_engines_agree_on_jepsens_own_cases(name):
    from traces.jepsen import convert

    expect = json.loads((JEPSEN / f"{name}.json").read_text())
    config = {"ww_deps": bool(expect["options"].get("ww-deps")), "sub_via": ["assign"]}
    ops = convert((JEPSEN / f"{name}.edn").read_text(), name)
    same(ops, config)  # named values: the fast engine hands them to Python
    numbered = _numbered(ops)
    result = same_and_fast_where_covered(numbered, config)
    assert reported(result) == reported(check(ops, config, engine="python"))


# ---------------------------------------------------------------- inputs and fallbacks


def test_a_bad_line_gets_pythons_error_from_either_engine(tmp_path):
    ops = bench_ops(tmp_path, 50, 0)
    path = tmp_path / "history.jsonl"
    write_jsonl(path, ops)
    path.write_text(path.read_text() + '{"index": 1e400}\n')
    errors = []
    for engine in ("python", "fast"):
        with pytest.raises(HistoryError) as e:
            check(iter_history(path), ASSIGN, engine=engine)
        errors.append(str(e.value))
    assert errors[0] == errors[1]
    assert check_fast(iter_history(path), ASSIGN).startswith("fallback:")


def test_wall_clock_times_and_integers_beyond_64_bits_are_read_as_python_reads_them(tmp_path):
    ops = bench_ops(tmp_path, 300, 1)
    for op in ops:
        op["time"] += 1_764_000_000_000_000_000  # nanoseconds since 1970: 19 digits
    assert judged_fast(ops, ASSIGN) == same(ops, ASSIGN, tmp_path)
    sends = [op for op in ops if op["f"] == "send"]
    sends[-1]["value"][0][2] = [sends[-1]["value"][0][2][0], 2**70]  # an integer no int64 holds
    assert check_fast(ops, ASSIGN).startswith("fallback:")
    same(ops, ASSIGN, tmp_path)


def test_an_integer_python_refuses_is_an_error_from_either_engine(tmp_path):
    """Python's int() refuses a literal of more than 4,300 digits, even in a field the checker
    never reads: the line is unusable, and the fast engine must not judge it valid."""
    path = tmp_path / "history.jsonl"
    path.write_text(json.dumps({"f": "send", "index": 0, "process": 0, "time": 1, "type": "invoke",
                                "value": [["send", "t:0", 1]]})[:-1] + ', "note": 1' + "0" * 5000 + "}\n"
                    + json.dumps({"f": "send", "index": 1, "process": 0, "time": 2, "type": "ok",
                                  "value": [["send", "t:0", [0, 1]]]}) + "\n")
    assert check_fast(iter_history(path), {}).startswith("fallback:")
    assert _outcome(path, "fast") == _outcome(path, "python")
    assert _outcome(path, "python")[0] == "HistoryError"


def test_stale_reads_after_faults_that_ended_before_time_zero(tmp_path):
    """Times are the recorder's clock, negative ones included: the faults' end is the last
    fault's, not 0 (Python's max(..., default=0) gives 0 only without faults)."""
    t = 10_000_000
    rows = [("nemesis", "invoke", "partition", None, -100), ("nemesis", "info", "partition", None, -90),
            (0, "invoke", "send", [["send", "k", 1]], -80), (0, "ok", "send", [["send", "k", [0, 1]]], -79),
            (1, "invoke", "assign", ["k"], -78), (1, "ok", "assign", ["k"], -77),
            (1, "invoke", "poll", [["poll"]], -70), (1, "ok", "poll", [["poll", {"k": [[0, 1]]}]], -69),
            (0, "invoke", "send", [["send", "k", 2]], -60), (0, "ok", "send", [["send", "k", [1, 2]]], -59),
            (1, "invoke", "poll", [["poll"]], -20), (1, "ok", "poll", [["poll", {}]], -19)]
    ops = [{"index": i, "time": when * t, "process": p, "type": type_, "f": f, "value": value}
           for i, (p, type_, f, value, when) in enumerate(rows)]
    config = {**ASSIGN, "staleness_bound_ms": 1}
    result = same(ops, config, tmp_path)
    assert result["anomaly_types"] == ["stale-read"]
    assert judged_fast(ops, config) == result


def _outcome(path: Path, engine: str):
    try:
        return check(iter_history(path), ASSIGN, engine=engine)
    except Exception as e:  # the same error, word for word, from either engine
        return type(e).__name__, str(e)


FUZZ_TEXT = None


PIECES = [*'{}[],:"0123456789-.e \n\\aknpstu', "null", "1e400", "\u00e9", "\r", "9" * 20, "9" * 5000]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(["delete", "insert", "replace"]),
                          st.sampled_from(PIECES)), min_size=1, max_size=4))
def test_a_damaged_history_gets_one_verdict_or_one_error_from_either_engine(tmp_path, edits):
    global FUZZ_TEXT
    if FUZZ_TEXT is None:
        generate(tmp_path / "fuzz.jsonl", 40, 7)
        FUZZ_TEXT = (tmp_path / "fuzz.jsonl").read_text()
    text = FUZZ_TEXT
    for at, what, piece in edits:
        i = at % (len(text) + 1)
        if what == "delete":
            text = text[:i] + text[i + len(piece):]
        elif what == "insert":
            text = text[:i] + piece + text[i:]
        else:
            text = text[:i] + piece + text[i + len(piece):]
    path = tmp_path / "damaged.jsonl"
    path.write_text(text)
    assert _outcome(path, "fast") == _outcome(path, "python")


def test_what_the_fast_engine_does_not_cover_it_hands_over_and_says_why(tmp_path):
    ops = bench_ops(tmp_path, 100, 0)
    assert check_fast(ops, {**ASSIGN, "compacted": True}) == "fallback: compaction"
    assert check_fast(ops, ASSIGN, linearizable=True) == "fallback: linearizability"
    as_tuples = copy.deepcopy(ops)
    as_tuples[-1]["value"] = tuple(as_tuples[-1]["value"])  # JSON would make it a list: Python sees a tuple
    assert check_fast(as_tuples, ASSIGN) == "fallback: ops that JSON would change"
    same(as_tuples, ASSIGN)
    tombstone = copy.deepcopy(ops)
    send = next(op for op in tombstone if op["f"] == "send" and op["type"] == "ok")
    send["value"][0][2][1] = None  # a tombstone: Python's value for it is made per offset
    assert check_fast(tombstone, ASSIGN) == "fallback: a sent value that is not an integer"
    same(tombstone, ASSIGN)


def test_simulated_runs_get_one_verdict(tmp_path):
    from kafkacheck.runner import RunOptions, simulate
    from traces.history import locate_run

    for i, (workload, bugs) in enumerate([("queue", []), ("txn", []), ("queue", ["truncate-to-high-watermark"]),
                                          ("idempotent", []), ("groups", []), ("groups", ["group-generation-unfenced"])]):
        d = tmp_path / f"run{i}"
        simulate(RunOptions(seed=i, ops=200, workload=workload, bugs=bugs), d)
        meta, history, _ = locate_run(d)
        config = meta.get("config") or {}
        py = check(iter_history(history), config, engine="python")
        assert check(iter_history(history), config, engine="fast") == py
        if reported(py) <= FAST_KINDS | GROUP_KINDS and workload != "idempotent":
            assert judged_fast(iter_history(history), config) == py


# ---------------------------------------------------------------- the property tests' models

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _corrupt(ops: list[dict], data) -> None:
    """One random change to a record, an outcome or an offset."""
    polls = [(op, k, recs) for op in ops if op["type"] == "ok" and op["f"] in ("poll", "txn")
             for mop in op["value"] if mop[0] == "poll" and len(mop) == 2 for k, recs in mop[1].items() if recs]
    what = data.draw(st.sampled_from(["drop", "swap", "offset", "outcome", "value"]))
    if what == "outcome":
        done = [op for op in ops if op["type"] != "invoke"]
        if done:
            data.draw(st.sampled_from(done))["type"] = data.draw(st.sampled_from(["ok", "fail", "info"]))
        return
    if not polls:
        return
    _op, _k, recs = data.draw(st.sampled_from(polls))
    i = data.draw(st.integers(0, len(recs) - 1))
    if what == "drop":
        del recs[i]
    elif what == "swap" and len(recs) > 1:
        recs[0], recs[-1] = recs[-1], recs[0]
    elif what == "offset":
        recs[i][0] += data.draw(st.integers(-2, 2))
    else:
        recs[i][1] = data.draw(st.integers(1, 40))


@SETTINGS
@given(STEPS, st.data())
def test_the_engines_agree_on_queue_model_histories(steps, data):
    m = play(steps)
    same_and_fast_where_covered(m.ops, CONFIG)
    _corrupt(m.ops, data)
    same_and_fast_where_covered(m.ops, CONFIG)


@SETTINGS
@given(TXN_STEPS, st.data())
def test_the_engines_agree_on_transactional_model_histories(steps, data):
    m = play(steps)
    same_and_fast_where_covered(m.ops, TXN_CONFIG)
    _corrupt(m.ops, data)
    same_and_fast_where_covered(m.ops, TXN_CONFIG)
