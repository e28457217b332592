"""One mapping from a verdict to an exit code, for every command (kafkacheck/exits.py)."""

from __future__ import annotations

import json

import pytest

import kafkacheck.run as run_module
from kafkacheck.cli import main
from kafkacheck.exits import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID, verdict_exit


@pytest.mark.parametrize(("verdict", "code"), [
    (True, EXIT_VALID), ("pass", EXIT_VALID), ("ok", EXIT_VALID),
    (False, EXIT_INVALID), ("fail", EXIT_INVALID), ("illegal", EXIT_INVALID),
    ("unknown", EXIT_UNKNOWN), (None, EXIT_UNKNOWN), ("unusable", EXIT_UNKNOWN)])
def test_each_verdict_has_one_exit_code(verdict, code):
    assert verdict_exit(verdict) == code


def test_run_exits_2_when_its_verdict_is_unknown(tmp_path, monkeypatch, capsys):
    """The checker says unknown when its cycle search runs out of budget, which a run's
    options cannot ask for; the verdict is made unknown after the real judgement."""
    real = run_module.judge_record

    def undecided(record):
        result = real(record)
        return {**result, "valid": "unknown"}

    monkeypatch.setattr(run_module, "judge_record", undecided)
    out = tmp_path / "r"
    assert main(["run", "--ops", "300", "--no-progress", "--format", "json", "--out", str(out)]) == EXIT_UNKNOWN
    assert json.loads((out / "results.json").read_text())["valid"] == "unknown"
    capsys.readouterr()
    monkeypatch.setattr(run_module, "judge_record", real)
    assert main(["run", "--ops", "300", "--no-progress", "--format", "json", "--out", str(tmp_path / "v")]) == 0
