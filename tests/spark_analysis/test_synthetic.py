"""The synthetic corpus of benchmarks/spark_speed.py, small: every planted anomaly found
exactly by the product's detectors, and nothing else."""

from __future__ import annotations

import importlib.util
from collections import Counter
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "spark_speed.py"


def test_planted_counts(spark, tmp_path):
    from spark_analysis.detect import DETECTORS, detect, load

    spec = importlib.util.spec_from_file_location("spark_speed", BENCH)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    info = bench.generate(tmp_path / "c", rows=200 * 3 * 8 * 12, runs=200, per_file=70, rate=0.1, seed=3)
    assert sum(info["planted"].values()) > 0
    c = load(spark, str(tmp_path / "c"))
    found = Counter()
    for name in DETECTORS:
        for row in detect(c, (name,))[name].groupBy("anomaly").count().collect():
            found[row["anomaly"]] += row["count"]
    assert dict(found) == {k: v for k, v in info["planted"].items() if v}
