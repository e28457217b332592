"""``kafkacheck corpus``: many simulated runs (or run directories) into a Parquet corpus."""

from __future__ import annotations

import argparse
from pathlib import Path

from kafkacheck.commands import SUMMARIES
from kafkacheck.corpus import convert_runs, generate_local, generate_spark, plan, write_manifest
from kafkacheck.exits import EXIT_INVALID, EXIT_VALID, UsageError
from kafkacheck.workloads import WORKLOADS


def add_parser(sub: argparse._SubParsersAction) -> None:
    cor = sub.add_parser(
        "corpus", help=SUMMARIES["corpus"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Simulate --runs runs drawn at random (or, with --grid, walked in order) from the "
            "workloads, fault mixes, acks, replication factors and bug switches given, judge each "
            "with the history checker, and write the Parquet tables runs, ops, mops, events and "
            "verdicts into --out, about --runs-per-file runs to a file. Runs already in --out are "
            "skipped, so an interrupted command resumes where it stopped. --engine spark runs the "
            "same plan as Spark tasks (local mode on this machine, or --master / spark-submit on a "
            "cluster, where --out must be a directory every executor can write). --from-runs "
            "converts existing run directories (simulated or recorded against real brokers) instead."),
        epilog="Example: kafkacheck corpus --runs 1000 --out corpus --bugs all --jobs 2\n"
               "Then: kafkacheck analyze corpus --out report")
    cor.add_argument("--out", metavar="DIR", required=True, help="the corpus directory (created or extended)")
    cor.add_argument("--runs", type=int, default=None, metavar="N", help="runs in the plan (default 100)")
    cor.add_argument("--workloads", default=",".join(WORKLOADS),
                     help="comma-separated workloads to draw from (default: all)")
    cor.add_argument("--faults", default="none,partition,kill,pause,disk",
                     help="comma-separated faults a run's mix is drawn from; 'none' allows runs "
                          "without faults (default none,partition,kill,pause,disk)")
    cor.add_argument("--max-faults", type=int, default=2, metavar="K",
                     help="at most K faults in one run's mix (default 2)")
    cor.add_argument("--bugs", default="", help="comma-separated bug switches, or 'all'; each run "
                     "gets one of them or none (default: none, the correct engine only)")
    cor.add_argument("--acks", default="all,1", help="acks values to draw from (default all,1; "
                     "idempotent and transactional workloads always use all)")
    cor.add_argument("--replication-factors", default="3,2", help="replication factors (default 3,2)")
    cor.add_argument("--ops", type=int, default=300, help="client ops per run (default 300)")
    cor.add_argument("--grid", action="store_true",
                     help="walk every combination (single faults) in order instead of sampling")
    cor.add_argument("--plan-seed", type=int, default=0, help="seed of the random sample (default 0)")
    cor.add_argument("--engine", choices=["local", "spark"], default="local",
                     help="local: --jobs processes (default); spark: Spark tasks")
    cor.add_argument("--jobs", type=int, default=None, metavar="J",
                     help="local engine: runs in parallel (default: the CPU count)")
    cor.add_argument("--master", default=None, metavar="URL", help="spark engine: the Spark master (default local[*])")
    cor.add_argument("--runs-per-file", type=int, default=100, metavar="R",
                     help="runs per Parquet file (default 100)")
    cor.add_argument("--from-runs", nargs="+", metavar="DIR", default=None,
                     help="convert these run directories (or folders of them) instead of simulating")
    cor.add_argument("--no-progress", action="store_true", help="no progress bar")


def main(args: argparse.Namespace) -> int:
    import os
    import sys

    from fault_injection.nemesis import parse_faults
    from reference.bugs import BUGS, parse_bugs

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    if args.runs_per_file < 1:
        raise UsageError("--runs-per-file must be at least 1")
    options = {k: v for k, v in vars(args).items() if k not in ("command", "no_progress")}
    if args.from_runs:
        if args.runs is not None:
            raise UsageError("--from-runs converts run directories: --runs does not apply")
        with _progress_bar(args.no_progress, "converting runs") as p:
            task = p.add_task("convert", total=None, last="")
            outcome = convert_runs(out, [Path(d) for d in args.from_runs], args.runs_per_file,
                                   lambda i, n, last: p.update(task, completed=i, total=n, last=Path(last).name))
    else:
        runs = 100 if args.runs is None else args.runs
        if runs < 1:
            raise UsageError("--runs must be at least 1")
        workloads = _csv(args.workloads)
        for w in workloads:
            if w not in WORKLOADS:
                raise UsageError(f"unknown workload {w!r}; choose from {', '.join(WORKLOADS)}")
        bugs = list(BUGS) if args.bugs.strip() == "all" else _csv(args.bugs)
        try:
            faults = parse_faults(args.faults) + (["none"] if "none" in _csv(args.faults) else [])
            parse_bugs(bugs)
        except ValueError as e:
            raise UsageError(str(e)) from None
        acks = _csv(args.acks)
        for a in acks:
            if a not in ("all", "1", "0"):
                raise UsageError(f"--acks: {a!r} is not one of all, 1, 0")
        try:
            rfs = [int(x) for x in _csv(args.replication_factors)]
        except ValueError:
            raise UsageError("--replication-factors takes integers, e.g. 3,2") from None
        if not workloads or not faults or not acks or not rfs or any(not 1 <= r <= 3 for r in rfs):
            raise UsageError("--workloads, --faults, --acks and --replication-factors need at least one "
                             "value each (replication factors 1 to 3: the simulated cluster has 3 brokers)")
        if args.ops < 10:
            raise UsageError("--ops must be at least 10")
        if args.max_faults < 1:
            raise UsageError("--max-faults must be at least 1")
        specs = plan(runs, workloads, faults, acks, rfs, bugs, args.ops, args.grid, args.plan_seed, args.max_faults)
        jobs = args.jobs if args.jobs is not None else (os.cpu_count() or 1)
        if jobs < 1:
            raise UsageError("--jobs must be at least 1")
        with _progress_bar(args.no_progress, f"simulating ({args.engine})") as p:
            task = p.add_task("runs", total=len(specs), last="")

            def progress(i: int, n: int, last: str) -> None:
                p.update(task, completed=i, total=n, last=last)

            if args.engine == "spark":
                outcome = generate_spark(out, specs, args.runs_per_file, args.master, progress)
            else:
                outcome = generate_local(out, specs, jobs, args.runs_per_file, progress)
    write_manifest(out, options, outcome)
    rate = outcome.written / outcome.seconds * 60 if outcome.seconds > 0 and outcome.written else 0.0
    print(f"{outcome.written} runs written, {outcome.skipped} already there, {len(outcome.failures)} failed; "
          f"{outcome.total_runs} runs in {out} ({outcome.seconds:.1f} s, {rate:.0f} runs/minute)")
    for run_id, err in outcome.failures:
        last = err.strip().splitlines()[-1] if err.strip() else "unknown error"
        print(f"  failed: {run_id}: {last}", file=sys.stderr)
    return EXIT_INVALID if outcome.failures else EXIT_VALID


def _csv(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _progress_bar(disabled: bool, what: str):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(TextColumn(what), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
                    TextColumn("{task.fields[last]}"), console=Console(stderr=True), transient=False,
                    disable=disabled)
