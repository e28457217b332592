"""mkdocs hook: ``<!-- kafkacheck-help: NAME -->`` in a page becomes the ``--help`` of
``kafkacheck NAME``, so the command reference always says what the command says."""

from __future__ import annotations

import os
import re

MARKER = re.compile(r"<!-- kafkacheck-help: ([\w-]+) -->")


def _helps() -> dict[str, str]:
    os.environ["COLUMNS"] = "100"  # argparse wraps at the terminal's width: one width for the docs
    from kafkacheck.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return {name: p.format_help() for name, p in sub.choices.items()}


def on_page_markdown(markdown: str, page, config, files) -> str:
    if not MARKER.search(markdown):
        return markdown
    helps = _helps()

    def block(m: re.Match) -> str:
        name = m.group(1)
        if name not in helps:
            raise ValueError(f"{page.file.src_path}: no command {name!r}")
        return f"```text\n{helps[name].rstrip()}\n```"

    return MARKER.sub(block, markdown)
