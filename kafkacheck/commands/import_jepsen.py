"""``kafkacheck import-jepsen``: a Jepsen Kafka-workload history.edn as a run directory."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kafkacheck.commands import SUMMARIES, check
from kafkacheck.exits import EXIT_VALID, UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    imp = sub.add_parser(
        "import-jepsen", help=SUMMARIES["import-jepsen"],
        description="Convert a Jepsen Kafka-workload history (EDN, one op map per line, as "
                    "Jepsen's history.edn) into a run directory of this project's trace format, "
                    "so that `kafkacheck check DIR` can judge it. Keyword keys and values become "
                    "their names, integer keys their decimal string.")
    imp.add_argument("history", help="a Jepsen history.edn")
    imp.add_argument("--out", metavar="DIR", required=True, help="the run directory to write")
    imp.add_argument("--check", action="store_true", help="check it right away")


def main(args: argparse.Namespace) -> int:
    from traces.jepsen import import_history

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    out, n = import_history(args.history, out)
    print(f"imported {n} ops from {args.history} into {out}", file=sys.stderr)
    if not args.check:  # check writes the report with the verdict
        from kafkacheck.report import write_report
        write_report(out)
        return EXIT_VALID
    return check.main(check.parse([str(out)]))  # check's own defaults, all of them
