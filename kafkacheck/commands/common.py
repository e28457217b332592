"""What several commands' parsers share."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from kafkacheck.exits import Parser
from reference.bugs import BUGS


def bug_help() -> str:
    """The bug switches, one a line, for an epilog."""
    return "\n".join(f"  {name}: {text}" for name, text in BUGS.items())


def standalone(add_parser: Callable[[argparse._SubParsersAction], None], name: str,
               argv: list[str]) -> argparse.Namespace:
    """Parse ``kafkacheck NAME ARGV`` with that command's parser alone: its defaults, for a
    command that runs another (import-jepsen --check runs check) or compares with them."""
    p = Parser(prog="kafkacheck")
    add_parser(p.add_subparsers(dest="command", parser_class=Parser))
    return p.parse_args([name, *argv])
