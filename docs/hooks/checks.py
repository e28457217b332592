"""mkdocs hook: ``<!-- kafkacheck-checks -->`` in a page becomes the checker's table of checks
(``properties/check_table.py``'s ``CHECKS``): what each reports, when it applies, and what of it is
allowed when, so that the page is always the table the checker runs."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = "<!-- kafkacheck-checks -->"


def _when(when: str) -> str:
    return "always" if when == "always" else f"with {when}"


def table() -> str:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from properties.check_table import CHECKS

    rows = ["| check | reports | applies | allowed |", "| --- | --- | --- | --- |"]
    for c in CHECKS:
        reports = ", ".join(f"`{k}`" for k in c.reports)
        allowed = "; ".join(", ".join(f"`{k}`" for k in a.kinds) + f" {_when(a.when)}: {a.why}"
                            for a in c.allows) or "-"
        rows.append(f"| {c.name} | {reports} | {c.when} | {allowed} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    return markdown.replace(MARKER, table()) if MARKER in markdown else markdown
