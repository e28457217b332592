"""The fault vocabulary (fault_injection/vocabulary.py): one name, one fault."""

from __future__ import annotations

from pathlib import Path

from fault_injection.nemesis import FAULTS
from fault_injection.vocabulary import REAL, SHARED, SIMULATED, unknown
from kafkacheck.conform.real_nemesis import NETWORK_FAULTS, NODE_FAULTS, PROCESS_FAULTS, REQUEST_FAULTS

DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "faults.md"


def test_a_name_both_take_is_declared_the_same_fault():
    assert set(SIMULATED) & set(REAL) == SHARED


def test_the_commands_take_exactly_the_vocabulary():
    assert FAULTS is SIMULATED
    assert sorted(PROCESS_FAULTS + NETWORK_FAULTS + REQUEST_FAULTS + NODE_FAULTS) == sorted(REAL)


def test_every_name_of_one_side_that_the_other_lacks_gets_an_answer():
    for name in set(SIMULATED) - set(REAL):
        assert not unknown(name, real=True).startswith("unknown"), name
    for name in set(REAL) - set(SIMULATED):
        assert not unknown(name, real=False).startswith("unknown"), name


def test_the_faults_page_lists_every_name():
    text = DOC.read_text()
    missing = [n for n in {*SIMULATED, *REAL} if f"`{n}`" not in text]
    assert not missing, missing
