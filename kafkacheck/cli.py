"""The ``kafkacheck`` command: a dispatcher over the commands of :mod:`kafkacheck.commands`.

Exit codes (:mod:`kafkacheck.exits`, docs/explanation/architecture.md): 0 valid, 1 invalid (anomalies found),
2 unknown, 3 unusable input or usage, 130 interrupted. Every error is one line on stderr,
never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from kafkacheck.commands import COMMANDS, SUMMARIES, command
from kafkacheck.exits import EXIT_INTERRUPTED, EXIT_USAGE, Parser, UsageError

# what a command raises for input it cannot use: one line, exit 3. Named, not imported: the
# dispatcher imports only the command that runs, and an error of a module never imported
# cannot have been raised
_BAD_INPUT = (("traces.history", "HistoryError"), ("traces.history", "CorpusError"),
              ("fault_injection.nemesis", "ScheduleError"), ("properties.analysis", "HistoryShapeError"),
              ("linearizability.operations", "HistoryError"),
              ("reference.compiled", "EngineUnavailable"))  # a bad KAFKACHECK_ENGINE


def _bad_input(e: BaseException) -> bool:
    return isinstance(e, UsageError) or any(
        isinstance(e, getattr(sys.modules[module], name))
        for module, name in _BAD_INPUT if module in sys.modules)


def _command_in(argv: list[str]) -> str | None:
    """The command ``argv`` runs (the top level has no option but --help)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in SUMMARIES else None


def build_parser(only: str | None = None, *, lazy: bool = False) -> argparse.ArgumentParser:
    """The whole command line; with ``lazy``, only command ``only`` gets its own parser (and
    its module is the only one imported), the others just their line in ``--help``."""
    p = Parser(prog="kafkacheck", description=(
        "Verify the guarantees of Kafka and Kafka-compatible brokers: run workloads under "
        "faults and judge the histories."),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 valid, 1 invalid (anomalies found), 2 unknown, 3 unusable input.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name in COMMANDS:
        if lazy and name != only:
            sub.add_parser(name, help=SUMMARIES[name], add_help=False)
        else:
            command(name).add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    try:  # a command's module imports the engine: a bad KAFKACHECK_ENGINE is said then
        parser = build_parser(_command_in(sys.argv[1:] if argv is None else argv), lazy=True)
    except ImportError as e:
        if not _bad_input(e):
            raise
        print(f"kafkacheck: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return command(args.command).main(args)
    except OSError as e:
        print(f"kafkacheck: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:
        if not _bad_input(e):
            raise
        print(f"kafkacheck: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kafkacheck: interrupted", file=sys.stderr)
        if args.command in ("conform", "differential") and argv is None:
            # the brokers and the Java driver are stopped already (their finally blocks ran);
            # skip the client libraries' exit hooks, which would flush producers to brokers
            # that are gone (kafka-python waits a second for each, and prints a traceback)
            sys.stderr.flush()
            sys.stdout.flush()
            os._exit(EXIT_INTERRUPTED)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
