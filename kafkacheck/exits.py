"""Exit codes of every kafkacheck command, and how a command refuses bad input.

The codes are docs/explanation/architecture.md's: 0 valid (or passed), 1 invalid (anomalies found, a case
failed), 2 unknown (a search or a broker could not decide), 3 unusable input or usage, 130
interrupted (Ctrl-C). A command raises :class:`UsageError` for bad input; the dispatcher in
:mod:`kafkacheck.cli` prints it as one line on stderr and exits 3, never a traceback.
:class:`Parser` keeps argparse's own errors to that one line too.
"""

from __future__ import annotations

import argparse
import sys

EXIT_VALID = 0
EXIT_INVALID = 1
EXIT_UNKNOWN = 2
EXIT_USAGE = 3
EXIT_INTERRUPTED = 130


def verdict_exit(verdict: object) -> int:
    """The exit code of a verdict, the same for every command that gives one: valid (``True``,
    ``"pass"``, ``"ok"``, ``"valid"``) 0; invalid (``False``, ``"fail"``, ``"illegal"``,
    ``"invalid"``) 1; anything else (``"unknown"``, ``None``: nothing decided) 2."""
    if verdict is True or verdict in ("pass", "ok", "valid"):
        return EXIT_VALID
    if verdict is False or verdict in ("fail", "illegal", "invalid"):
        return EXIT_INVALID
    return EXIT_UNKNOWN


class UsageError(Exception):
    """Bad input: the message is the one line the user sees."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2; usage errors are 3 here
        # one line, and where to look (not argparse's usage block of 5-14 lines)
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)
