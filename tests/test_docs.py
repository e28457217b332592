"""The documentation: the site builds with warnings as errors (broken links, pages missing
from the navigation, a command without its page), and the README stays an entrance."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kafkacheck.commands import COMMANDS

ROOT = Path(__file__).resolve().parent.parent


def test_the_site_builds_without_a_warning(tmp_path):
    pytest.importorskip("mkdocs")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # each command's page carries its --help, as the command prints it
    page = (tmp_path / "site" / "reference" / "commands" / "hunt" / "index.html").read_text()
    assert "usage: kafkacheck hunt" in page and "--machine-programs" in page


def test_every_command_has_a_reference_page():
    pages = ROOT / "docs" / "reference" / "commands"
    for name in COMMANDS:
        text = (pages / f"{name}.md").read_text()
        assert f"<!-- kafkacheck-help: {name} -->" in text, name
    assert set(COMMANDS) <= {p.stem for p in pages.glob("*.md")}


def test_the_readme_opens_with_the_two_commands_and_stays_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 350
    assert lines[3].endswith(".venv/bin/kafkacheck run")
    assert lines[4].endswith(".venv/bin/pytest")
