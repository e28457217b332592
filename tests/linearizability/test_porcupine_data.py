"""Verdict parity with porcupine's own tests on its test data (tests/data/porcupine_data, MIT)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from linearizability import check_operations, get_model
from linearizability.formats import read_etcd_log, read_kv_edn

DATA = Path(__file__).resolve().parents[1] / "data" / "porcupine_data"
# porcupine_test.go: these etcd histories are linearizable, every other one is not
ETCD_OK = {2, 5, 7, 18, 25, 31, 38, 45, 48, 49, 51, 53, 56, 67, 75, 76, 80, 87, 92, 98, 100, 101, 102}
ETCD_FILES = sorted(DATA.glob("jepsen/etcd_*.log"))



def etcd_number(path: Path) -> int:
    return int(re.search(r"(\d+)", path.name).group(1))


def test_every_etcd_file_is_there():
    assert len(ETCD_FILES) == 103


@pytest.mark.parametrize("path", ETCD_FILES, ids=lambda p: p.stem)
def test_etcd_verdicts(path):
    ops = read_etcd_log(path)
    if etcd_number(path) == 95:  # empty upstream: "etcd cluster failed to start up in test 95"
        assert ops == []
        return
    result = check_operations(get_model("register"), ops)
    assert result.verdict == ("ok" if etcd_number(path) in ETCD_OK else "illegal")


@pytest.mark.parametrize("name", ["c01-ok", "c01-bad", "c10-ok", "c10-bad", "c50-ok", "c50-bad"])
def test_kv_verdicts_partitioned(name):
    result = check_operations(get_model("kv"), read_kv_edn(DATA / "kv" / f"{name}.txt"))
    assert result.verdict == ("ok" if name.endswith("ok") else "illegal")
    assert len(result.partitions) == (8 if name == "c01-bad" else 10)


@pytest.mark.parametrize("name", ["c01-ok", "c01-bad", "c10-ok", "c10-bad"])
def test_kv_verdicts_unpartitioned(name):
    result = check_operations(get_model("kv-map"), read_kv_edn(DATA / "kv" / f"{name}.txt"))
    assert result.verdict == ("ok" if name.endswith("ok") else "illegal")
    assert len(result.partitions) == 1


def test_c10_bad_illegal_keys_match_the_readme():
    """Checked one key at a time: 8 of the 10 keys are illegal, keys 4 and 8 are fine."""
    model = get_model("kv")
    ops = read_kv_edn(DATA / "kv" / "c10-bad.txt")
    verdicts = {}
    for key in sorted({op.input[1] for op in ops}):
        verdicts[key] = check_operations(model, [op for op in ops if op.input[1] == key]).verdict
    assert {k for k, v in verdicts.items() if v == "ok"} == {"4", "8"}
    assert sum(v == "illegal" for v in verdicts.values()) == 8


def test_the_python_oracle_agrees_on_the_etcd_files():
    model = get_model("register")
    for path in ETCD_FILES[::7]:
        ops = read_etcd_log(path)
        if ops:
            assert check_operations(model, ops, engine="python").verdict == check_operations(model, ops).verdict
