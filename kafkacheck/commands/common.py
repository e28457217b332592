"""What several commands' parsers share."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from kafkacheck.exits import Parser
from reference.assignors import ASSIGNORS, SERVER_ASSIGNORS
from reference.bugs import BUGS

GROUP_WORKLOADS = ("groups", "at-most-once")  # the workloads whose members join a consumer group
# also eos, whose processors (run's simulated ones, conform's real ones) join one when
# --group-protocol is given (without it they assign themselves their partitions)
RUN_GROUP_WORKLOADS = (*GROUP_WORKLOADS, "eos")


def add_explain(parser: argparse.ArgumentParser) -> None:
    """--explain, for the commands that print a verdict (run, check)."""
    parser.add_argument("--explain", action="store_true",
                        help="after the verdict, explain an example of every anomaly type found, allowed "
                             "ones included (report.html explains them too)")


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


def group_options_conflict(workload: str, protocol: str | None, assignor: str,
                           workloads: tuple[str, ...] = GROUP_WORKLOADS) -> str | None:
    """The one-line refusal of a group protocol and assignor that do not go together (or go
    with a workload whose clients join no group), or None; run's and conform's. ``protocol``
    None: not given (classic); ``workloads`` beyond :data:`GROUP_WORKLOADS` join a group only
    when it is given (run's eos)."""
    joins = workload in (workloads if protocol is not None else GROUP_WORKLOADS)
    protocol = protocol or "classic"
    if protocol == "consumer" and not joins:
        names = ", ".join(workloads[:-1]) + " and " + workloads[-1]
        return (f"--group-protocol consumer goes with the {names} workloads: the "
                f"{workload} workload's clients do not join a consumer group")
    known = SERVER_ASSIGNORS if protocol == "consumer" else ASSIGNORS
    if joins and assignor not in known:
        return (f"--assignor {assignor} is not an assignor of the {protocol} protocol; "
                f"choose from {', '.join(known)}")
    return None
