"""``kafkacheck hunt``: the swarm hunt for bugs nobody planted, or the proof that every bug
switch is found (:mod:`kafkacheck.swarm_hunt` and :mod:`kafkacheck.hunt` do the hunting)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kafkacheck.commands import SUMMARIES
from kafkacheck.commands.common import bug_help
from kafkacheck.exits import EXIT_INVALID, EXIT_UNKNOWN, EXIT_VALID, UsageError
from reference.bugs import BUGS


def add_parser(sub: argparse._SubParsersAction) -> None:
    hunt = sub.add_parser(
        "hunt", help=SUMMARIES["hunt"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Without --bug or --all: a swarm hunt for bugs nobody planted. Each swarm seed draws "
            "a run (workload, fault kinds and rates, acks, replication factor, "
            "min.insync.replicas, transaction version, assignor, static members, compaction "
            "settings, flush policy, timings, aimed nemeses or a z3 counterexample's shape) and "
            "ends with a liveness phase (the healed cluster must converge). The hunt runs seeds "
            "until --time-limit (default 120 s) or --runs, --jobs at a time, steering toward "
            "seeds whose choices reached rare coverage marks, stops at the first finding, "
            "shrinks it and prints `kafkacheck run --swarm SEED` to reproduce it, then the "
            "coverage marks reached and those never reached. --with-switch NAME turns a bug "
            "switch on in the engine without telling the swarm (a test of the swarm's power).\n\n"
            "With --bug or --all: run seeds 0, 1, ..., --runs - 1 of a scenario that exercises "
            "the engine part a bug switch breaks, --jobs runs at a time, until the first invalid "
            "verdict; print the seed, the anomaly, the time to detection and a shrunk "
            "reproduction. --all does every switch and then the correct engine over the same "
            "scenarios, and prints one table. That verdict counts runs, never seconds: "
            "--time-limit (default 900 s) is a safety net whose expiry makes the outcome unknown.\n\n"
            "--spark MASTER (both kinds of hunt): the runs are Spark tasks (local[2], "
            "spark://host:7077...), --jobs at a time (default: the cluster's cores), each returning "
            "its verdict and coverage marks to this process, which steers, stops, shrinks and prints "
            "as it does without Spark: the same seed gives the same verdict. Every worker needs the "
            "same kafkacheck installed (see docs/how-to/hunt.md)."),
        epilog="bug switches:\n" + bug_help() + "\n\nExit codes: swarm: 0 nothing found (with "
               "--with-switch: the switch found), 1 a finding (with --with-switch: missed), 2 "
               "--runs given and the time limit came first. --bug/--all: 0 every switch detected "
               "(and nothing found without one), 1 a switch missed in its runs or a finding "
               "without a switch, 2 unknown (the time limit stopped a hunt first). 3 bad input.")
    hunt.add_argument("--bug", action="append", default=[], metavar="NAME",
                      help="a bug switch to hunt (repeatable)")
    hunt.add_argument("--all", action="store_true", help="every bug switch, then none")
    hunt.add_argument("--with-switch", metavar="NAME", default=None,
                      help="swarm: turn this bug switch on in the engine the swarm hunts")
    hunt.add_argument("--ops", type=int, default=None, metavar="N",
                      help="swarm: client operations a run (default 2000; 500 for txn and eos)")
    hunt.add_argument("--runs", type=int, default=None, metavar="N",
                      help="seeds a switch, and runs without one: the budget that decides (default 60)")
    hunt.add_argument("--time-limit", type=float, default=None, metavar="S",
                      help="wall seconds a switch, a safety net: if it expires first the outcome is "
                           "unknown (exit 2), not missed (default 900)")
    hunt.add_argument("--jobs", type=int, default=None, metavar="N",
                      help="runs in parallel (default: the CPU count, at most 4; with --spark, the "
                           "cluster's task slots)")
    hunt.add_argument("--quiet", action="store_true", help="only the final table")
    hunt.add_argument("--spark", metavar="MASTER", default=None,
                      help="run the seeds as Spark tasks at this master (local[2], spark://host:7077, "
                           "yarn...; needs the spark extra); --jobs: tasks in flight (default: its cores)")
    hunt.add_argument("--machines", action="store_true",
                      help="after the seeds, run the Hypothesis state machine that reaches each switch "
                           "(and every machine without a switch) for --machine-programs programs, the "
                           "same ones every time: each switch must be found by its machine too")
    hunt.add_argument("--machine-programs", type=int, default=None, metavar="N",
                      help="programs a machine with --machines: the budget that decides (default 2000)")
    hunt.add_argument("--out", metavar="DIR", default="runs/hunt",
                      help="where findings are saved (default runs/hunt): a run's as a run directory "
                           "finding-... (kafkacheck run --replay DIR runs it again, byte for byte), a "
                           "machine's program as hunt-SWITCH-MACHINE.json (kafkacheck explore --replay)")
    hunt.add_argument("--machine-time", type=float, default=None, metavar="S",
                      help="wall seconds a machine at most, a safety net: if it expires first the "
                           "outcome is unknown (default 1200)")


def main(args: argparse.Namespace) -> int:
    from kafkacheck import hunt, hunt_tasks

    for b in args.bug:
        if b not in BUGS:
            raise UsageError(f"unknown bug switch {b!r}; choose from {', '.join(BUGS)}")
    if args.with_switch is not None and args.with_switch not in BUGS:
        raise UsageError(f"unknown bug switch {args.with_switch!r}; choose from {', '.join(BUGS)}")
    swarm = not args.bug and not args.all
    if not swarm and (args.with_switch or args.ops is not None):
        raise UsageError("--with-switch and --ops go with the swarm hunt (no --bug, no --all)")
    if swarm and args.machines:
        raise UsageError("--machines goes with --bug or --all")
    if args.spark is not None:
        _need_pyspark(args.spark)
    if swarm:
        return _swarm_hunt(args)
    runs = args.runs if args.runs is not None else hunt.DEFAULT_RUNS
    time_limit = args.time_limit if args.time_limit is not None else hunt.DEFAULT_TIME_LIMIT_S
    machine_time = args.machine_time if args.machine_time is not None else hunt.DEFAULT_MACHINE_TIME_S
    machine_programs = (args.machine_programs if args.machine_programs is not None
                        else hunt.DEFAULT_MACHINE_PROGRAMS)
    if runs < 1 or machine_programs < 1:
        raise UsageError("--runs and --machine-programs must be at least 1")
    if time_limit <= 0 or machine_time <= 0:
        raise UsageError("--time-limit and --machine-time must be positive")
    jobs = _jobs(args)
    try:
        return hunt.main(args.bug, args.all, args.all or not args.bug, runs, jobs, args.quiet,
                         args.machines, time_limit, machine_time, machine_programs, Path(args.out),
                         spark_master=args.spark)
    except hunt_tasks.SparkWorkerError as e:
        raise UsageError(str(e)) from None


def _need_pyspark(master: str) -> None:
    import re

    # the masters spark-submit takes (it answers others with a JVM stack trace); not Spark
    # Connect (sc://): the hunt's tasks are RDD jobs
    if not re.fullmatch(r"local(\[(\d+|\*)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|yarn|(spark|k8s)://\S+",
                        master):
        raise UsageError(f"--spark {master!r}: a master is local, local[N], local[*], yarn, spark://HOST:PORT "
                         f"or k8s://URL")
    import importlib.util

    # asked whether it is there, not imported: the Spark session is spark_analysis's to start
    if importlib.util.find_spec("pyspark") is None:
        raise UsageError("--spark needs PySpark: pip install 'kafkacheck[spark]'")


def _jobs(args: argparse.Namespace) -> int | None:
    """Runs at once: --jobs; without it the CPU count (at most 4), or with --spark the
    cluster's task slots (None: the pool asks Spark)."""
    from kafkacheck import hunt_tasks

    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if args.jobs is not None:
        return args.jobs
    return None if args.spark is not None else hunt_tasks.default_jobs()



def _swarm_hunt(args: argparse.Namespace) -> int:
    from kafkacheck import hunt_tasks, swarm_hunt

    time_limit = args.time_limit if args.time_limit is not None else swarm_hunt.DEFAULT_SWARM_TIME_S
    if time_limit <= 0:
        raise UsageError("--time-limit must be positive")
    if args.runs is not None and args.runs < 1:
        raise UsageError("--runs must be at least 1")
    if args.ops is not None and args.ops < 100:
        raise UsageError("--ops must be at least 100")
    jobs = _jobs(args)

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    engine = f"the engine with {args.with_switch} on" if args.with_switch else "the engine"
    at_once = f"{jobs} at a time" if jobs else "as many at a time as Spark has task slots"
    log(f"swarm hunt on {engine}: up to {time_limit:g} s" + (f" or {args.runs} runs" if args.runs else "")
        + f", {at_once}" + (f", as Spark tasks (--spark {args.spark})" if args.spark else ""))
    try:
        with hunt_tasks.spark_session(args.spark, log) as spark:
            out = swarm_hunt.swarm(time_limit, args.runs, jobs, args.with_switch, args.ops, log,
                                   out_dir=Path(args.out), spark=spark)
    except hunt_tasks.SparkWorkerError as e:
        raise UsageError(str(e)) from None
    swarm_hunt.print_swarm(out)
    if args.with_switch:
        return EXIT_VALID if out.found else (EXIT_UNKNOWN if out.unfinished else EXIT_INVALID)
    return EXIT_INVALID if out.found else (EXIT_UNKNOWN if out.unfinished else EXIT_VALID)
