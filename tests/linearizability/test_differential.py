"""The C++ search against the pure-Python oracle on thousands of small random histories.

Histories are made the way real ones happen: a sequential execution of the model (so the
outputs are true), each operation given an interval around its moment, some left pending;
then, often, one output is changed. Both engines must give the same verdict and the same
longest linearizable prefix.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from linearizability import UNKNOWN, Operation, check_operations, get_model

EXAMPLES = 1000


def _true_register(state, f, draw):
    if f == "read":
        return ("read",), state, state
    if f == "write":
        v = draw(st.integers(0, 2))
        return ("write", v), None, v
    a, b = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    return ("cas", a, b), state == a, (b if state == a else state)


def _true_kv(state, f, draw, key):
    cur = state.get(key, "")
    if f == "get":
        return ("get", key), cur, state
    v = draw(st.sampled_from(["a", "b", "ab"]))
    return (f, key, v), None, {**state, key: v if f == "put" else cur + v}


def _true_log(state, f, draw, key):
    log = state
    if f == "append":
        end = log[-1][0] + 1 if log else 0
        offset = end + draw(st.integers(0, 1))    # gaps: markers, aborted records
        value = draw(st.integers(0, 3))
        return ("append", key, value), offset, (*log, (offset, value))
    if not log:
        position = draw(st.one_of(st.none(), st.integers(0, 2)))
        return ("read", key, position), (), log
    start = draw(st.integers(0, len(log) - 1))
    count = draw(st.integers(0, len(log) - start))
    records = log[start:start + count]
    position = draw(st.one_of(st.none(), st.just(records[0][0] if records else log[start][0])))
    return ("read", key, position), records, log


@st.composite
def histories(draw, model_name, sizes=(1, 9), pending=True, spread=25):
    n = draw(st.integers(*sizes))
    ops = []
    state = {} if model_name in ("kv", "kv-map", "partition-log") else None
    clients = draw(st.integers(1, 4))
    for moment in range(n):
        time = 10 * moment + 5
        key = draw(st.sampled_from(["x", "y"]))
        if model_name == "register":
            inp, out, state = _true_register(state, draw(st.sampled_from(["read", "write", "cas"])), draw)
        elif model_name == "committed-offsets":
            if draw(st.booleans()):
                v = draw(st.integers(0, 2))
                inp, out = ("commit", key, v), None
                state = {**(state or {}), key: v}
            else:
                inp, out = ("committed", key), (state or {}).get(key)
        elif model_name in ("kv", "kv-map"):
            inp, out, state = _true_kv(state, draw(st.sampled_from(["get", "put", "append"])), draw, key)
        else:
            log = state.get(key, ())
            inp, out, log = _true_log(log, draw(st.sampled_from(["append", "read"])), draw, key)
            state = {**state, key: log}
        call = time - draw(st.integers(0, spread))
        ret = None if pending and draw(st.integers(0, 9)) == 0 else time + draw(st.integers(0, spread))
        ops.append([draw(st.integers(0, clients - 1)), inp, call, out, ret])
    outputs = [i for i, op in enumerate(ops) if op[1][0] in ("read", "cas", "get", "committed", "append")]
    if outputs and draw(st.integers(0, 2)) > 0:
        i = draw(st.sampled_from(outputs))
        true = ops[i][3]
        ops[i][3] = draw(_wrong_output(model_name, ops[i][1]).filter(lambda out: out != true))
    for op in ops:
        if op[4] is None and draw(st.booleans()) and not (model_name == "partition-log" and op[1][0] == "read"):
            op[3] = UNKNOWN
    return [Operation(c, i, call, o, r) for c, i, call, o, r in ops]


def _wrong_output(model_name, inp):
    if model_name == "register":
        return st.booleans() if inp[0] == "cas" else st.one_of(st.none(), st.integers(0, 2))
    if model_name in ("kv", "kv-map"):
        return st.sampled_from(["", "a", "b", "ab", "ba"]) if inp[0] == "get" else st.just(None)
    if model_name == "committed-offsets":
        return st.one_of(st.none(), st.integers(0, 2)) if inp[0] == "committed" else st.just(None)
    if inp[0] == "append":
        return st.integers(0, 4)
    return st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), max_size=3).map(
        lambda rs: tuple(sorted(rs)))


@pytest.mark.parametrize("model_name", ["register", "kv", "kv-map", "partition-log", "committed-offsets"])
def test_cpp_and_python_agree(model_name):
    model = get_model(model_name)
    seen = {"ok": 0, "illegal": 0}

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(histories(model_name))
    def agree(history):
        native = check_operations(model, history, engine="c++", partial=True, threads=1)
        oracle = check_operations(model, history, engine="python", partial=True)
        assert native.verdict == oracle.verdict, history
        assert native.verdict in ("ok", "illegal")
        seen[native.verdict] += 1
        for a, b in zip(native.partitions, oracle.partitions, strict=True):
            assert a.verdict == b.verdict
            if a.verdict != "unknown" and b.verdict != "unknown":
                assert a.longest == b.longest, history
                assert a.blocked == b.blocked

    agree()
    # the generator makes both kinds of history, or the comparison would prove little
    assert seen["ok"] > EXAMPLES // 10 and seen["illegal"] > EXAMPLES // 10, seen


@pytest.mark.parametrize("model_name", ["register", "kv-map", "partition-log"])
def test_cpp_and_python_agree_across_the_set_representations(model_name):
    """The C++ search keeps the linearized set in two words up to 128 operations and in a
    general bitset beyond; histories on both sides of the boundary agree with the oracle."""
    model = get_model(model_name)
    sizes = set()

    @settings(max_examples=60, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(histories(model_name, sizes=(100, 160), pending=False, spread=50))
    def agree(history):
        native = check_operations(model, history, engine="c++", partitioned=False, threads=1)
        oracle = check_operations(model, history, engine="python", partitioned=False)
        assert native.verdict == oracle.verdict, history
        sizes.add(len(history) > 128)

    agree()
    assert sizes == {False, True}, "both representations were exercised"
