"""The ``kafkacheck`` command: a dispatcher over the commands of :mod:`kafkacheck.commands`.

Exit codes (:mod:`kafkacheck.exits`, docs/explanation/architecture.md): 0 valid, 1 invalid (anomalies found),
2 unknown, 3 unusable input or usage, 130 interrupted. Every error is one line on stderr,
never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from fault_injection.nemesis import ScheduleError
from kafkacheck.commands import COMMANDS, command
from kafkacheck.exits import EXIT_INTERRUPTED, EXIT_USAGE, Parser, UsageError
from linearizability.operations import HistoryError as LinHistoryError
from properties.analysis import HistoryShapeError
from traces.history import CorpusError, HistoryError

# what a command raises for input it cannot use: one line, exit 3
_BAD_INPUT = (UsageError, HistoryError, ScheduleError, HistoryShapeError, LinHistoryError, CorpusError)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="kafkacheck", description=(
        "Verify the guarantees of Kafka and Kafka-compatible brokers: run workloads under "
        "faults and judge the histories."),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 valid, 1 invalid (anomalies found), 2 unknown, 3 unusable input.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name in COMMANDS:
        command(name).add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        return command(args.command).main(args)
    except _BAD_INPUT as e:
        print(f"kafkacheck: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:
        print(f"kafkacheck: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
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
