"""``kafkacheck explore``: a Hypothesis state machine against the simulated cluster
(:mod:`kafkacheck.explore`), or a saved program replayed."""

from __future__ import annotations

import argparse
from pathlib import Path

from kafkacheck.commands import SUMMARIES
from kafkacheck.commands.common import bug_help
from kafkacheck.exits import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID, UsageError
from kafkacheck.explore import MACHINES
from reference.bugs import BUGS


def add_parser(sub: argparse._SubParsersAction) -> None:
    exp = sub.add_parser(
        "explore", help=SUMMARIES["explore"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Hypothesis generates programs of rules against a simulated reference "
                    "cluster: client ops, faults (kill, restart, pause, partitions, message loss, "
                    "disk faults, clock skew) and time passing. After every rule the broker's "
                    "white-box invariants must hold; at the end every fault is healed, a reader "
                    "reads everything, and the history checker must find no violation. The first "
                    "failing program is shrunk, printed, and saved (--out) for --replay.",
        epilog="machines (one a workload of kafkacheck run):\n" + "".join(
            f"  {name:<13} {' '.join((cls.__doc__ or '').split())}\n" for name, cls in MACHINES.items())
               + "\nbug switches:\n" + bug_help() + "\n\nExit codes: 0 nothing found in --examples programs, "
               "1 a violation found (or, with --replay, the program fails), 2 unknown (--time-limit "
               "stopped it first), 3 bad input.")
    exp.add_argument("--machine", choices=list(MACHINES), default="queue")
    exp.add_argument("--examples", type=int, default=100, metavar="N", help="programs to try (default 100)")
    exp.add_argument("--steps", type=int, default=25, metavar="S", help="rules per program, at most (default 25)")
    exp.add_argument("--bug", action="append", default=[], metavar="NAME", help="a bug switch to turn on (repeatable)")
    exp.add_argument("--time-limit", type=float, default=None, metavar="S",
                     help="stop after S wall seconds; if that comes before --examples programs the "
                          "outcome is unknown (exit 2)")
    exp.add_argument("--out", metavar="FILE", default=None,
                     help="where to save a failing program (default explore-MACHINE.json)")
    exp.add_argument("--replay", metavar="FILE", default=None, help="run a saved program again instead")
    exp.add_argument("--no-progress", action="store_true", help="no progress display")


def main(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from kafkacheck import explore

    console = Console(stderr=True)
    if args.replay:
        try:
            name, bugs, found, _result = explore.run_replay(Path(args.replay))
        except ValueError as e:
            raise UsageError(str(e)) from None
        what = f"machine {name}" + (f" with {', '.join(bugs)}" if bugs else "")
        if found:
            print(f"replayed {args.replay} ({what}): {found}")
            return EXIT_INVALID
        print(f"replayed {args.replay} ({what}): no violation")
        return EXIT_VALID
    for b in args.bug:
        if b not in BUGS:
            raise UsageError(f"unknown bug switch {b!r}; choose from {', '.join(BUGS)}")
    if args.examples < 1 or args.steps < 1:
        raise UsageError("--examples and --steps must be at least 1")
    if args.time_limit is not None and args.time_limit <= 0:
        raise UsageError("--time-limit must be positive")
    out = Path(args.out or f"explore-{args.machine}.json")
    with Progress(SpinnerColumn(), TextColumn(f"exploring {args.machine}"), TextColumn("{task.completed} programs"),
                  TimeElapsedColumn(), console=console, transient=True, disable=args.no_progress) as p:
        task = p.add_task("programs", total=None)
        result = explore.explore(args.machine, args.bug, args.examples, args.steps, args.time_limit,
                                 on_example=lambda n: p.update(task, completed=n))
    if result.found is None and result.timed_out:
        # a search cut short by the clock is not a verdict: how far it got depends on the machine
        print(f"unknown: the time limit stopped machine {args.machine} after {result.examples} of "
              f"{args.examples} programs ({result.seconds:.1f} s); no violation in those")
        return EXIT_UNKNOWN
    if result.found is None:
        print(f"explored {result.examples} programs of machine {args.machine} in {result.seconds:.1f} s: "
              f"no violation")
        return EXIT_VALID
    explore.save(out, args.machine, args.bug, result.steps)
    if result.found_after is not None and result.found_seconds is not None:
        print(f"found after {result.found_after} programs ({result.found_seconds:.1f} s; shrunk by "
              f"{result.examples} programs in all, {result.seconds:.1f} s): {result.found}")
    else:
        print(f"found after {result.examples} programs ({result.seconds:.1f} s): {result.found}")
    print("shrunk program:")
    for rule_name, rule_args in result.steps:
        print(f"  {rule_name}({', '.join(f'{k}={v!r}' for k, v in rule_args.items())})")
    print(f"saved to {out}; replay it with: kafkacheck explore --replay {out}")
    return EXIT_INVALID
