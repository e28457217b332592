"""Fixtures shared by every test directory: one Spark session per test run, and Apache Kafka's
jars (fetched once into the cache, with the Java client driver built) for the tests marked
``kafka``."""

from __future__ import annotations

import os
import signal

import pytest

# A test run started in the background of a non-interactive shell (`cmd &`) inherits SIGINT
# ignored, and so would every process it starts (an ignored signal stays ignored across exec,
# and Python then installs no KeyboardInterrupt handler): the tests that press Ctrl-C on a
# kafkacheck process would see it ignored. Take Python's handler back, so that the processes
# the tests start get SIGINT's default, as from a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# The tests exercise the Python engine, the oracle, in this process and in every kafkacheck
# process they start: they monkeypatch its modules and classes, which compiled code would not
# see (or refuse). tests/test_compiled.py holds the compiled engine to it byte for byte.
os.environ["KAFKACHECK_ENGINE"] = "python"

KAFKA_SKIP_HINT = "skip the Apache Kafka tests with -m 'not kafka'"


@pytest.fixture(scope="session")
def spark():
    from spark_analysis.session import get_spark

    session = get_spark(app_name="kafkacheck-tests", shuffle_partitions=2)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_dist():
    """Apache Kafka (the default version) in the cache, and the Java client driver built.

    Without Java or Maven the tests that need them are skipped with the reason, unless
    KAFKACHECK_REQUIRE_KAFKA is set (CI sets it): then they fail, so that a CI machine
    without Java never passes by skipping."""
    from kafkacheck.real.java import build_driver
    from kafkacheck.real.kafka_dist import KafkaDist, KafkaUnavailable

    dist = KafkaDist()
    try:
        build_driver(dist, log=lambda *a: None)
    except KafkaUnavailable as e:
        if os.environ.get("KAFKACHECK_REQUIRE_KAFKA"):
            pytest.fail(f"{e} (KAFKACHECK_REQUIRE_KAFKA is set)")
        pytest.skip(f"{e}; {KAFKA_SKIP_HINT}")
    return dist


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if KAFKA_SKIP_HINT in str(r.longrepr)]
    if skipped:
        terminalreporter.write_line(f"{len(skipped)} Apache Kafka test(s) skipped: Java 17+ and Maven are needed "
                                    f"to run Apache Kafka ({KAFKA_SKIP_HINT} to leave them out on purpose)")


@pytest.fixture(autouse=True)
def _no_client_left_running():
    """A Kafka client a test leaves open keeps I/O threads that reconnect to a stopped broker
    for the rest of the run and draw from the global ``random``, which Hypothesis then reports
    in whatever property test runs meanwhile (HypothesisDeprecationWarning). Close them."""
    import threading
    import time

    def clients() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("kafka-")}

    before = clients()
    yield
    # A closed client's threads finish on their own, but on a busy machine that can take
    # seconds (a heartbeat thread wakes on its own interval): join each with a generous
    # deadline, so only a thread that nobody stopped fails the test.
    end = time.monotonic() + 30
    for thread in clients() - before:
        thread.join(max(0.0, end - time.monotonic()))
    left = {t for t in clients() - before if t.is_alive()}
    assert not left, f"a kafka-python client was left open: threads {sorted(t.name for t in left)}"
