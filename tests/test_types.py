"""What pip compiles with mypyc type-checks with mypy (``[tool.mypy]`` in pyproject.toml
names what; tests/test_compiled.py checks that it names every compiled module): mypyc trusts
the annotations it compiles (docs/measurements/speed.md, issue 45)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_finds_nothing(tmp_path):
    mypy = shutil.which("mypy") or str(Path(sys.executable).parent / "mypy")
    if not Path(mypy).exists():
        pytest.skip("mypy is not installed (pip install -e '.[test]' installs it)")
    proc = subprocess.run([mypy, "--cache-dir", str(tmp_path / "cache")], cwd=ROOT, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
