"""``kafkacheck check``: judge a run directory or a history.jsonl recorded anywhere."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kafkacheck.commands import SUMMARIES
from kafkacheck.commands.common import standalone
from kafkacheck.console import add_explain
from kafkacheck.exits import UsageError, verdict_exit
from kafkacheck.judge import judge, read_events, write_results
from properties.cycles import DEFAULT_STEPS, DEFAULT_TIME_LIMIT_S
from traces.history import iter_history, locate_run, named_values


def add_parser(sub: argparse._SubParsersAction) -> None:
    chk = sub.add_parser(
        "check", help=SUMMARIES["check"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Judge a run directory (run.json, history.jsonl, events.jsonl) or a history.jsonl "
            "file, recorded by kafkacheck or imported from Jepsen (import-jepsen), for every "
            "anomaly of Jepsen's Kafka checker (inconsistent-offsets, duplicate, lost-write, G1a, "
            "precommitted-read, poll-skip, nonmonotonic-poll, int-poll-skip, "
            "int-nonmonotonic-poll, int-send-skip, int-nonmonotonic-send, nonmonotonic-send, G0, "
            "G1c and their -process and -realtime variants) and beyond it: G-single, G2 and G1b "
            "from read-write edges, stale-read after the faults end, and the exactly-once, "
            "consumer-group and compaction checks where the run's config carries them. Writes "
            "results.json, and report.json and report.html (docs/how-to/report.md) beside it, "
            "into a run directory."),
        epilog="allowed by default (reported, not violations): int-send-skip, G0*, G1c cycles "
               "with write-write edges, G-single, G2, G1b; poll-skip and nonmonotonic-poll when "
               "the run used subscribe.\nExit codes: 0 valid, 1 invalid, 2 unknown (the cycle "
               "search ran out of its budget), 3 unusable input.")
    chk.add_argument("path", help="a run directory or a history.jsonl")
    chk.add_argument("--format", choices=["table", "json"], default="table",
                     help="a readable table (default) or the results.json object")
    add_explain(chk)
    chk.add_argument("--no-ww-deps", action="store_true",
                     help="do not infer write-write edges from offsets (Jepsen's default; with "
                          "them, which is ours, G0 and write-write G1c cycles are found)")
    chk.add_argument("--cycle-budget", type=int, default=DEFAULT_STEPS, metavar="STEPS",
                     help="work the cycle search may do, in steps (edges and path-search nodes "
                          "examined); past it the verdict is unknown unless a violation was "
                          f"already found. Work, not seconds, so a busy machine gives the same "
                          f"verdict (default {DEFAULT_STEPS:,})")
    chk.add_argument("--cycle-time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, metavar="S",
                     help="wall-clock safety net for the cycle search; hitting it makes the "
                          f"verdict unknown and says so (default {DEFAULT_TIME_LIMIT_S:g})")
    chk.add_argument("--staleness-bound", type=int, default=None, metavar="MS",
                     help="after the last fault ends, acknowledged data must be readable within "
                          "this many ms (stale-read; default: the run's, else 30000)")
    chk.add_argument("--sub-via", choices=["assign", "subscribe"], default=None,
                     help="how consumers got partitions, if run.json does not say (subscribe "
                          "allows poll-skip and nonmonotonic-poll)")
    chk.add_argument("--lin", action="store_true",
                     help="also check each partition's log for linearizability (the partition-log model "
                          "of kafkacheck lin); a failure is the anomaly nonlinearizable-log")
    chk.add_argument("--checker", choices=["fast", "python"], default=None,
                     help="the checker's engine: fast (compiled; it hands what it does not cover to "
                          "python) or python (the pure-Python checker, the oracle the fast one is tested "
                          "against); both give the same verdict (default $KAFKACHECK_CHECKER, else fast)")
    chk.add_argument("--forbid", action="append", default=[], metavar="TYPE",
                     help="treat an allowed anomaly type as a violation (repeatable), e.g. "
                          "--forbid G-single")


def parse(argv: list[str]) -> argparse.Namespace:
    """``kafkacheck check ARGV``'s arguments, every default included."""
    return standalone(add_parser, "check", argv)


def main(args: argparse.Namespace) -> int:
    from kafkacheck.console import print_verdict

    meta, history, directory = locate_run(args.path)
    ops = iter_history(history, named_values(meta))  # streamed: a million-op history is never a list of dicts
    from properties.checker import engine_of

    engine_of(args.checker)  # a bad $KAFKACHECK_CHECKER is refused before the history is read
    if args.cycle_budget <= 0:
        raise UsageError("--cycle-budget must be positive")
    if args.cycle_time_limit <= 0:
        raise UsageError("--cycle-time-limit must be positive")
    config = dict(meta.get("config") or {})
    if args.no_ww_deps:
        config["ww_deps"] = False
    if args.staleness_bound is not None:
        if args.staleness_bound < 1:
            raise UsageError("--staleness-bound must be at least 1 ms")
        config["staleness_bound_ms"] = args.staleness_bound
    if args.sub_via:
        config["sub_via"] = [args.sub_via]
    meta = {**meta, "config": config}
    is_dir = Path(args.path).is_dir()
    report = None
    result = judge(meta, ops, read_events(directory) if is_dir else None,
                   cycle_steps=args.cycle_budget, cycle_time_limit_s=args.cycle_time_limit,
                   forbid=tuple(args.forbid), linearizable=args.lin, engine=args.checker)
    if is_dir:
        write_results(directory / "results.json", result)
        from kafkacheck.report import write_report  # report.json, report.html
        report = write_report(directory)
    if args.format == "json":
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print_verdict(result, directory, meta, explain=args.explain, report=report)
    return verdict_exit(result["valid"])
