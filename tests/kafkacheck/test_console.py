"""The terminal's verdict: first the verdict, then the table; each allowed type on one line with
its count; explanations only with --explain; nothing cut or wrapped when the output is a pipe."""

from __future__ import annotations

from pathlib import Path

import pytest

from kafkacheck.console import print_verdict, stdout_console

LONG = "op 4063 read t0:0 only up to 450, missing 528 written by op 4040; " * 6 + "so it is allowed"
META = {"run_id": "seed0-correct", "seed": 0, "faults": ["partition"],
        "config": {"brokers": 3, "replication_factor": 3, "min_insync_replicas": 2, "acks": "all", "bugs": []}}


def result(valid=True, **extra) -> dict:
    base = {"valid": valid, "stats": {"client_ops": 10, "ok": 10}, "anomaly_types": [], "anomalies": {},
            "counts": {}, "allowed": {"G-single": 31, "G0": 1},
            "allowed_anomalies": {"G-single": [{"explanation": LONG, "ops": [4040, 4042, 4063]}],
                                  "G0": [{"explanation": "a write cycle", "ops": list(range(8))}]}}
    return {**base, **extra}


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)


def lines_of(capsys, res: dict, explain: bool = False) -> list[str]:
    print_verdict(res, Path("/nowhere"), META, explain=explain)
    return capsys.readouterr().out.splitlines()


def test_the_verdict_comes_first_and_each_allowed_type_is_one_line(capsys):
    out = lines_of(capsys, result())
    assert out[0] == "valid: no anomaly found"
    single = [line for line in out if "G-single" in line]
    assert single == ["  G-single     31  read skew: Kafka does not promise to prevent it"]
    assert not any("4063" in line for line in out)  # the example waits for --explain
    assert out[-1] == "run directory: /nowhere"


def test_explain_shows_an_example_of_each_type_unwrapped_in_a_pipe(capsys):
    out = lines_of(capsys, result(), explain=True)
    example = [line for line in out if "4063 read" in line]
    assert len(example) == 1 and example[0].endswith("so it is allowed [ops 4040, 4042, 4063]")
    assert any(line.endswith("a write cycle [ops 0, 1, 2, 3, 4, 5, ...]") for line in out)


def test_an_invalid_verdict_names_each_violation_and_its_count_first(capsys):
    res = result(False, anomaly_types=["lost-write", "G1c"], counts={"lost-write": 3, "G1c": 1},
                 anomalies={"lost-write": [{"explanation": f"value {i} lost", "ops": [i]} for i in range(3)],
                            "G1c": [{"explanation": "a read cycle", "ops": [1, 2]}]},
                 reproduce="kafkacheck run --seed 3")
    out = lines_of(capsys, res)
    assert out[0] == "INVALID: lost-write (3), G1c (1)"
    assert "lost-write (3): value 0 lost [ops 0]" in out and "value 1 lost" not in "\n".join(out)
    assert "reproduce with: kafkacheck run --seed 3" in out
    out = lines_of(capsys, res, explain=True)
    assert [line for line in out if line.startswith("  - value")] == [f"  - value {i} lost [ops {i}]"
                                                                       for i in range(3)]


def test_markup_in_an_explanation_is_printed_as_it_is(capsys):
    res = result(False, anomaly_types=["lost-write"], counts={"lost-write": 1},
                 anomalies={"lost-write": [{"explanation": "value [bold]x[/bold] lost", "ops": []}]})
    assert "lost-write (1): value [bold]x[/bold] lost" in lines_of(capsys, res)


def test_a_pipe_gets_lines_as_long_as_they_are(monkeypatch):
    monkeypatch.setattr("sys.stdout.isatty", lambda: False, raising=False)
    assert stdout_console().width >= 1000
    monkeypatch.setenv("COLUMNS", "60")
    assert stdout_console().width == 60  # the user's width wins
