"""Fixtures shared by every test directory: one Spark session per test run."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from spark_analysis.session import get_spark

    session = get_spark(app_name="kafkacheck-tests", shuffle_partitions=2)
    yield session
    session.stop()
