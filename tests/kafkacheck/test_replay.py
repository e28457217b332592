"""Reproduction as data: run.json records the options a run was made with, ``kafkacheck run
--replay DIR`` makes the run again from them, byte for byte, and every printed command is
derived from such options (kafkacheck/reproduce.py), never parsed back."""

from __future__ import annotations

import json

import pytest

from kafkacheck.cli import main
from kafkacheck.hunt import command
from kafkacheck.reproduce import command_line, run_dir_name
from kafkacheck.swarm_hunt import swarm_command


def test_a_run_is_replayed_byte_for_byte_from_its_recorded_options(tmp_path, capsys):
    first = tmp_path / "first"
    code = main(["run", "--seed", "4", "--ops", "1200", "--workload", "idempotent", "--bug", "no-sequence-check",
                 "--faults", "partition,kill,duplicate", "--no-progress", "--out", str(first)])
    recorded = json.loads((first / "run.json").read_text())["options"]
    assert recorded == {"seed": 4, "ops": 1200, "workload": "idempotent", "bug": ["no-sequence-check"],
                        "faults": "partition,kill,duplicate"}
    reproduce = json.loads((first / "results.json").read_text())["reproduce"]
    assert reproduce == command_line(recorded)
    capsys.readouterr()
    assert main(["run", "--replay", str(first), "--no-progress"]) == code
    out = capsys.readouterr().out
    assert f"replayed {first} into {first}-replay: history.jsonl and events.jsonl the same, byte for byte" in out
    assert (first.parent / "first-replay" / "history.jsonl").read_bytes() == (first / "history.jsonl").read_bytes()
    # a recorded history that differs (here: edited) is not reproduced, and says so
    with (first / "history.jsonl").open("a") as f:
        f.write("\n")
    assert main(["run", "--replay", str(first), "--no-progress", "--out", str(tmp_path / "again")]) == 2
    assert "the replay differs from" in capsys.readouterr().err


def test_replay_refuses_options_that_would_make_another_run(tmp_path, capsys):
    assert main(["run", "--replay", str(tmp_path), "--seed", "3"]) == 3
    assert main(["run", "--replay", str(tmp_path / "nothing-here")]) == 3
    (tmp_path / "run.json").write_text(json.dumps({"options": {"seed": 1, "colour": "blue"}}))
    assert main(["run", "--replay", str(tmp_path)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "give no --seed" in err[0] and "not a run directory" in err[1]
    assert "colour" in err[2] and "Traceback" not in "".join(err)


def test_printed_commands_and_run_directories_derive_from_the_options():
    assert command_line({"seed": 0, "ops": 10000, "bug": ["ack-before-isr"]}) == \
        "kafkacheck run --seed 0 --ops 10000 --bug ack-before-isr"
    assert command_line({"swarm": 155}) == "kafkacheck run --swarm 155"
    assert swarm_command(7, 700, "ack-before-isr") == "kafkacheck run --swarm 7 --ops 700 --bug ack-before-isr"
    from kafkacheck.hunt import SCENARIOS
    assert command("ack-before-isr", SCENARIOS["ack-before-isr"], 3, 500).startswith("kafkacheck run --seed 3 --ops 500")
    assert run_dir_name("seed0-queue", {"seed": 0, "ops": 10000}, 10000) == "seed0-queue"
    other = run_dir_name("seed0-queue", {"seed": 0, "ops": 10000, "brokers": 5}, 10000)
    assert other.startswith("seed0-queue-") and other != run_dir_name("seed0-queue", {"seed": 0, "ops": 10000,
                                                                                       "brokers": 4}, 10000)
    from kafkacheck.commands.run import parse
    from kafkacheck.run import run_options
    assert run_options(parse(["--swarm", "0"])) == {"swarm": 0}  # a seed of 0 is a seed
    assert command_line(run_options(parse(["--swarm", "0", "--keep-going"]))) == "kafkacheck run --swarm 0 --keep-going"
    with pytest.raises(ValueError, match="colour"):
        command_line({"seed": 0, "colour": "blue"})
