"""The checker is one table (properties/check_table.py's CHECKS): the docs and the Spark jobs take
their anomaly names and allowances from it, and the table decides what is allowed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from properties.check_table import ANOMALY_TYPES, CHECKS, allowances, allowed_kinds
from properties.checker import check
from properties.judging import RunConfig

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = ROOT / "docs" / "reference" / "anomalies.md"


def test_every_anomaly_type_is_in_the_catalogue_and_reported_by_one_check():
    text = CATALOGUE.read_text()
    assert [k for k in ANOMALY_TYPES if f"`{k}`" not in text] == []
    reported = [k for c in CHECKS for k in c.reports]
    assert len(reported) == len(set(reported)), "two checks report one type"


def test_the_catalogue_shows_the_table_through_its_hook():
    assert "<!-- kafkacheck-checks -->" in CATALOGUE.read_text()
    spec = importlib.util.spec_from_file_location("checks_hook", ROOT / "docs" / "hooks" / "checks.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    table = hook.table()
    assert all(f"| {c.name} |" in table for c in CHECKS)


def test_an_allowance_covers_only_types_its_check_reports():
    for c in CHECKS:
        for a in c.allows:
            assert set(a.kinds) <= set(c.reports), (c.name, a.kinds)
            assert a.when == "always" or isinstance(getattr(RunConfig(), a.when), bool), a.when


def test_the_spark_jobs_name_the_checkers_types():
    import pytest

    pytest.importorskip("pyspark")
    from spark_analysis.detect import CHECKER_TYPES

    assert {t for types in CHECKER_TYPES.values() for t in types} <= set(ANOMALY_TYPES)


def test_what_is_allowed_follows_the_run_config():
    plain, sub, compacted = RunConfig(), RunConfig(subscribe=True), RunConfig(compacted=True)
    assert "poll-skip" not in allowed_kinds(plain) and "G1b" in allowed_kinds(plain)
    assert {"poll-skip", "nonmonotonic-poll", "nonatomic-read"} <= allowed_kinds(sub)
    assert {"poll-skip", "int-poll-skip"} <= allowed_kinds(compacted) and "nonmonotonic-poll" not in allowed_kinds(
        compacted)
    assert {a.when for a in allowances()} == {"always", "subscribe", "compacted"}


def test_a_skip_is_a_violation_with_assign_and_allowed_with_subscribe():
    ops = []
    for i, (p, t, f, v) in enumerate([
            (0, "invoke", "send", [["send", "k", 1]]), (0, "ok", "send", [["send", "k", [0, 1]]]),
            (0, "invoke", "send", [["send", "k", 2]]), (0, "ok", "send", [["send", "k", [1, 2]]]),
            (0, "invoke", "send", [["send", "k", 3]]), (0, "ok", "send", [["send", "k", [2, 3]]]),
            (1, "invoke", "poll", [["poll"]]), (1, "ok", "poll", [["poll", {"k": [[0, 1]]}]]),
            (1, "invoke", "poll", [["poll"]]), (1, "ok", "poll", [["poll", {"k": [[2, 3]]}]]),
            (2, "invoke", "poll", [["poll"]]), (2, "ok", "poll", [["poll", {"k": [[0, 1], [1, 2], [2, 3]]}]])]):
        ops.append({"index": i, "time": i * 1_000_000, "process": p, "type": t, "f": f, "value": v})
    assert check(ops, {"sub_via": ["assign"]})["anomaly_types"] == ["poll-skip"]
    r = check(ops, {"sub_via": ["subscribe"]})
    assert r["valid"] is True and r["allowed"]["poll-skip"] == 1
