"""``kafkacheck run``: a workload on the simulated reference cluster under faults, judged.

The options (:func:`kafkacheck.run.add_options`) become a :class:`~kafkacheck.runner.RunOptions`
(or, with ``--swarm SEED``, the options that swarm seed draws), the simulation writes the run
directory, and the verdict is printed with the command that reproduces the run
(:func:`kafkacheck.run.make`); ``--replay DIR`` makes a recorded run again and compares.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from fault_injection.nemesis import FAULTS
from kafkacheck.commands import SUMMARIES
from kafkacheck.commands.common import bug_help, standalone
from kafkacheck.exits import EXIT_UNKNOWN, UsageError
from kafkacheck.reproduce import ORDER, command_line
from kafkacheck.run import add_options, make


def add_parser(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser(
        "run", help=SUMMARIES["run"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Run a workload (--workload; the queue workload by default: sends and polls over "
            "several partitions) on a simulated reference cluster of brokers and a controller, "
            "in virtual time, under a random fault schedule drawn from --seed; heal, read "
            "everything back, and check the history for durability, ordering, transaction, "
            "exactly-once, consumer-group and compaction anomalies. The same seed and options "
            "give a byte-identical history.jsonl."),
        epilog="faults:\n" + "\n".join(f"  {k}: {v}" for k, v in FAULTS.items())
        + "\n\nbug switches (--bug, repeatable; all off by default):\n" + bug_help())
    add_options(run)


def parse(argv: list[str]) -> argparse.Namespace:
    """``kafkacheck run ARGV``'s arguments (its defaults, for ``argv`` empty)."""
    return standalone(add_parser, "run", argv)


def main(args: argparse.Namespace) -> int:
    if args.replay is not None:
        return _replay(args)
    return make(args)


def _replay(args: argparse.Namespace) -> int:
    """The run of ``--replay DIR`` made again from its recorded options; exit as its verdict,
    or 2 when its history or events differ from the recorded ones."""
    source = Path(args.replay)
    defaults = vars(parse([]))
    given = [name for name in (*ORDER, "swarm") if getattr(args, name) != defaults[name]]
    if given:
        raise UsageError(f"--replay runs the options {source}/run.json records: give no --"
                         + ", --".join(n.replace("_", "-") for n in given))
    try:
        options = json.loads((source / "run.json").read_text())["options"]
        command_line(options)  # only options of kafkacheck run
    except (OSError, ValueError, KeyError, TypeError) as e:
        detail = "no options recorded (a run of an older kafkacheck?)" if isinstance(e, KeyError) else \
            getattr(e, "strerror", None) or str(e)
        raise UsageError(f"--replay {source}: not a run directory of kafkacheck run: {detail}") from None
    if options.get("schedule") and (source / "schedule.json").exists():
        options = {**options, "schedule": str(source / "schedule.json")}  # the one that ran, wherever it was
    again = argparse.Namespace(**{**defaults, **options, "replay": None, "out": args.out or f"{source}-replay",
                                  "format": args.format, "no_progress": args.no_progress,
                                  "explain": args.explain})
    if Path(again.out).resolve() == source.resolve():
        raise UsageError("--replay DIR --out DIR: the replay needs a directory of its own")
    code = main(again)
    differ = [name for name in ("history.jsonl", "events.jsonl")
              if _digest(source / name) != _digest(Path(again.out) / name)]
    if differ:
        print(f"kafkacheck: the replay differs from {source}: {', '.join(differ)} (the run is not "
              "deterministic: a bug of kafkacheck, or the two were made by different versions)", file=sys.stderr)
        return EXIT_UNKNOWN
    if args.format != "json":
        print(f"replayed {source} into {again.out}: history.jsonl and events.jsonl the same, byte for byte")
    return code


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
