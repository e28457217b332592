"""``kafkacheck lin``: linearizability of a history (porcupine's search, in C++)."""

from __future__ import annotations

import argparse
import json

from kafkacheck.commands import SUMMARIES
from kafkacheck.exits import EXIT_INVALID, UsageError, verdict_exit


def add_parser(sub: argparse._SubParsersAction) -> None:
    lin = sub.add_parser(
        "lin", help=SUMMARIES["lin"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Check that a history is linearizable with respect to a model, with porcupine's "
            "search (Wing-Gong/Lowe with a cache) written in C++. PATH is a run directory or "
            "history.jsonl (models partition-log, the default: sends are appends and polls are "
            "reads of each topic-partition's log; committed-offsets: commits and committed "
            "reads of each partition's group offset), a Jepsen etcd log as porcupine's tests use "
            "(model register), or a porcupine kv file (model kv, partitioned by key, or kv-map, "
            "the whole map at once). Partitions are searched on all cores; the first illegal one "
            "stops the rest."),
        epilog="Exit codes: 0 linearizable, 1 not linearizable, 2 unknown (time or memory ran "
               "out), 3 unusable input.")
    lin.add_argument("path", help="a run directory, history.jsonl, Jepsen etcd log or porcupine kv file")
    lin.add_argument("--model", default=None, help="register, kv, kv-map, partition-log or committed-offsets "
                                                   "(default: the one the file's format implies)")
    lin.add_argument("--iterations-max", type=int, default=None, metavar="N",
                     help="give up on a partition after N search steps with verdict unknown: a budget "
                          "of work, so the verdict does not depend on the machine's load (default: no limit)")
    lin.add_argument("--timeout", type=float, default=None, metavar="S",
                     help="wall-clock safety net: give up after S seconds with verdict unknown "
                          "(default: no limit)")
    lin.add_argument("--memory-max", type=float, default=4096, metavar="MB",
                     help="give up with verdict unknown when the search caches pass MB megabytes (default 4096)")
    lin.add_argument("--engine", choices=["auto", "c++", "python"], default="auto",
                     help="the C++ search (auto) or the pure-Python oracle (slow)")
    lin.add_argument("--html", metavar="FILE", default=None,
                     help="write a page showing each client's operations on a time axis, the longest "
                          "linearization found and where it fails")
    lin.add_argument("--format", choices=["table", "json"], default="table")


def main(args: argparse.Namespace) -> int:
    from kafkacheck import lin

    if args.timeout is not None and args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if args.memory_max <= 0:
        raise UsageError("--memory-max must be positive")
    if args.iterations_max is not None and args.iterations_max < 1:
        raise UsageError("--iterations-max must be at least 1")
    try:
        result = lin.run(args.path, args.model, args.timeout, args.memory_max, args.engine, args.html, args.format,
                         iterations_max=args.iterations_max)
    except lin.NothingChecked as e:
        if args.format == "json":
            print(json.dumps({"verdict": "empty-history", "explanation": str(e), "partitions": []}, indent=2))
        else:
            print(f"empty-history: {e}")
        return EXIT_INVALID  # as `check` judges an empty history: it cannot be called valid
    return verdict_exit(result.verdict)
