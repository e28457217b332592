"""Every checker test runs against both engines of the history checker (properties/checker.py):
``fast`` (the compiled engine, which hands what it does not cover to Python) and ``python``
(the pure-Python oracle). The modules below run twice, once with $KAFKACHECK_CHECKER set to
each; tests/properties/test_fast_engine.py compares the two engines' whole verdicts. On the fast
engine a module must have had some of its histories judged by the compiled engine itself, not
all handed to Python."""

from __future__ import annotations

import pytest

from properties.checker import ENGINES

CHECKER_TESTS = ("test_checker", "test_checker_properties", "test_checker_table", "test_jepsen_cases",
                 "test_anomaly_types", "test_hanging")


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
    import properties.checker as checker

    judged = {"fast": 0, "python": 0}
    compiled = checker._check_fast

    def counted(*args, **kwargs):
        result = compiled(*args, **kwargs)
        judged["fast" if isinstance(result, dict) else "python"] += 1
        return result

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KAFKACHECK_CHECKER", engine)
        mp.setattr(checker, "_check_fast", counted)
        yield engine
    if engine == "python":  # the oracle never consults the compiled engine
        assert not sum(judged.values()), judged
    elif sum(judged.values()):
        assert judged["fast"], f"{request.module.__name__}: every history went to the Python checker ({judged})"
