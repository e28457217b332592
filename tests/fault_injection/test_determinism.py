"""Same seed and options, same history.jsonl byte for byte, across processes."""

from __future__ import annotations

import os
import subprocess
import sys


def run(tmp_path, name, hashseed, seed, extra=()):
    out = tmp_path / name
    env = {**os.environ, "PYTHONHASHSEED": str(hashseed)}
    proc = subprocess.run(
        [sys.executable, "-m", "kafkacheck.cli", "run", "--seed", str(seed), "--ops", "1500",
         "--no-progress", "--out", str(out), *extra],
        capture_output=True, text=True, env=env)
    assert proc.returncode in (0, 1), proc.stderr
    return (out / "history.jsonl").read_bytes(), (out / "events.jsonl").read_bytes()


def test_two_processes_with_different_hash_seeds_write_identical_histories(tmp_path):
    a = run(tmp_path, "a", 1, 11)
    b = run(tmp_path, "b", 987654, 11)
    assert a[0] == b[0]
    assert a[1] == b[1]
    assert len(a[0]) > 100_000


def test_another_seed_gives_another_history(tmp_path):
    a = run(tmp_path, "a", 1, 11, ["--faults", "partition"])
    b = run(tmp_path, "b", 1, 12, ["--faults", "partition"])
    assert a[0] != b[0]
