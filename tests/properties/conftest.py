"""Every checker test runs against both engines of the history checker (properties/checker.py):
``fast`` (the compiled engine, which hands what it does not cover to Python) and ``python``
(the pure-Python oracle). The modules below run twice, once with $KAFKACHECK_CHECKER set to
each; tests/properties/test_fast_engine.py compares the two engines' whole verdicts."""

from __future__ import annotations

import pytest

from properties.checker import ENGINES

CHECKER_TESTS = ("test_checker", "test_checker_properties", "test_checker_table", "test_jepsen_cases",
                 "test_anomaly_types")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__.rsplit(".", 1)[-1] in CHECKER_TESTS:
        metafunc.parametrize("checker_engine", ENGINES, indirect=True, scope="module")


@pytest.fixture(scope="module", autouse=True)
def checker_engine(request):
    """The engine this module's checks run on (None outside the checker tests: the default)."""
    engine = getattr(request, "param", None)
    if engine is None:
        yield None
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KAFKACHECK_CHECKER", engine)
        yield engine
