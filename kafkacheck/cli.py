"""The ``kafkacheck`` command.

Exit codes (ARCHITECTURE.md): 0 valid, 1 invalid (anomalies found), 2 unknown, 3 unusable
input or usage. Every error is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fault_injection.nemesis import FAULTS, ScheduleError, load_schedule, parse_faults
from kafkacheck.workloads import WORKLOADS
from properties.queue import check as check_queue
from properties.queue import with_invariant_violations
from reference.assignors import ASSIGNORS
from reference.bugs import BUGS, parse_bugs
from traces.history import HistoryError, load_run

EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_USAGE = 0, 1, 2, 3


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2; usage errors are 3 here
        self.print_usage(sys.stderr)
        print(f"kafkacheck: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _bug_help() -> str:
    return "\n".join(f"  {name}: {text}" for name, text in BUGS.items())


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kafkacheck", description=(
        "Verify the guarantees of Kafka and Kafka-compatible brokers: run workloads under "
        "faults and judge the histories."),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 valid, 1 invalid (anomalies found), 2 unknown, 3 unusable input.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser(
        "run", help="run a workload on the simulated reference cluster under faults and check it",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Run a workload (--workload; the queue workload by default: sends and polls over "
            "several partitions) on a simulated reference cluster of brokers and a controller, "
            "in virtual time, under a random fault schedule drawn from --seed; heal, read "
            "everything back, and check the history for durability, ordering, transaction, "
            "exactly-once, consumer-group and compaction anomalies. The same seed and options "
            "give a byte-identical history.jsonl."),
        epilog="faults:\n" + "\n".join(f"  {k}: {v}" for k, v in FAULTS.items())
        + "\n\nbug switches (--bug, repeatable; all off by default):\n" + _bug_help())
    run.add_argument("--workload", choices=list(WORKLOADS), default="queue",
                     help="; ".join(f"{k}: {v}" for k, v in WORKLOADS.items()).replace("%", "%%")
                     + " (default queue)")
    run.add_argument("--transaction-version", type=int, choices=[1, 2], default=1,
                     help="transactional workloads: 2 bumps the producer epoch at every "
                          "transaction end (KIP-890 part 2); default 1")
    run.add_argument("--assignor", choices=list(ASSIGNORS), default="range",
                     help="groups workload: the members' partition assignor (default range)")
    run.add_argument("--static-members", action="store_true",
                     help="groups workload: static membership (a group.instance.id per member)")
    run.add_argument("--seed", type=int, default=0, help="seed of the run's RNG (default 0)")
    run.add_argument("--ops", type=int, default=10_000,
                     help="client operations to perform (default 10000)")
    run.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    run.add_argument("--partitions", type=int, default=4, help="partitions of the topic (default 4)")
    run.add_argument("--replication-factor", type=int, default=None,
                     help="replication factor (default: min(3, brokers))")
    run.add_argument("--min-insync-replicas", type=int, default=None,
                     help="min.insync.replicas (default: min(2, replication factor))")
    run.add_argument("--acks", choices=["all", "1", "0"], default="all",
                     help="producer acks (default all)")
    run.add_argument("--faults", default="partition,kill,pause,disk",
                     help="comma-separated fault kinds, or 'none' (default partition,kill,pause,disk)")
    run.add_argument("--schedule", metavar="FILE",
                     help="a scripted fault schedule (JSON list, e.g. a run's schedule.json) "
                          "instead of a random one")
    run.add_argument("--bug", action="append", default=[], metavar="NAME",
                     help="turn on a bug switch (see below)")
    run.add_argument("--clients", type=int, default=5, help="client processes (default 5)")
    run.add_argument("--flush-messages", type=int, default=None,
                     help="broker flush.messages (default: never flush, as Kafka)")
    run.add_argument("--flush-ms", type=int, default=None,
                     help="broker flush.ms: flush every N ms of virtual time (default: never)")
    run.add_argument("--unclean-leader-election", action="store_true",
                     help="unclean.leader.election.enable=true")
    run.add_argument("--keep-going", action="store_true",
                     help="do not stop at the first invariant violation; run to the end so the "
                          "history shows its consequences")
    run.add_argument("--out", metavar="DIR", help="run directory (default runs/<run_id>)")
    run.add_argument("--format", choices=["table", "json"], default="table")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    chk = sub.add_parser(
        "check", help="check a run directory or a history.jsonl recorded anywhere",
        description="Re-check a run directory (run.json, history.jsonl, events.jsonl) or a "
                    "history.jsonl file for durability and ordering anomalies; writes "
                    "results.json beside it (for a directory).")
    chk.add_argument("path", help="a run directory or a history.jsonl")
    chk.add_argument("--format", choices=["table", "json"], default="table")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "check":
            return _check(args)
        parser.print_help()
        return EXIT_USAGE
    except (UsageError, HistoryError, ScheduleError) as e:
        print(f"kafkacheck: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:
        print(f"kafkacheck: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kafkacheck: interrupted", file=sys.stderr)
        return 130


def _options(args: argparse.Namespace):
    from kafkacheck.runner import RunOptions

    try:
        bugs = sorted(parse_bugs(args.bug))
        faults = parse_faults(args.faults)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.ops < 1:
        raise UsageError("--ops must be at least 1")
    if args.brokers < 1:
        raise UsageError("--brokers must be at least 1")
    for name in ("flush_messages", "flush_ms"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if args.partitions < 1 or args.clients < 1:
        raise UsageError("--partitions and --clients must be at least 1")
    if args.workload in ("eos", "groups") and args.clients < 2:
        raise UsageError(f"the {args.workload} workload needs --clients 2 or more "
                         "(a producer and consumers)")
    rf = args.replication_factor if args.replication_factor is not None else min(3, args.brokers)
    if not 1 <= rf <= args.brokers:
        raise UsageError(f"--replication-factor must be between 1 and --brokers ({args.brokers})")
    min_isr = args.min_insync_replicas if args.min_insync_replicas is not None else min(2, rf)
    if not 1 <= min_isr <= rf:
        raise UsageError(f"--min-insync-replicas must be between 1 and the replication factor ({rf})")
    if args.workload != "queue" and args.acks != "all":
        raise UsageError(f"the {args.workload} workload needs --acks all "
                         "(enable.idempotence implies it)")
    schedule = load_schedule(args.schedule) if args.schedule else None
    return RunOptions(workload=args.workload, seed=args.seed, ops=args.ops, brokers=args.brokers,
                      partitions=args.partitions, replication_factor=rf,
                      min_insync_replicas=min_isr, acks=args.acks, faults=faults, bugs=bugs,
                      clients=args.clients, schedule=schedule,
                      flush_messages=args.flush_messages, flush_ms=args.flush_ms,
                      unclean_leader_election=args.unclean_leader_election,
                      keep_going=args.keep_going,
                      transaction_version=args.transaction_version,
                      assignor=args.assignor, static_members=args.static_members)


def _reproduce_command(args: argparse.Namespace) -> str:
    parts = ["kafkacheck", "run", "--seed", str(args.seed), "--ops", str(args.ops)]
    if args.workload != "queue":
        parts += ["--workload", args.workload]
    if args.brokers != 3:
        parts += ["--brokers", str(args.brokers)]
    if args.partitions != 4:
        parts += ["--partitions", str(args.partitions)]
    if args.replication_factor is not None:
        parts += ["--replication-factor", str(args.replication_factor)]
    if args.min_insync_replicas is not None:
        parts += ["--min-insync-replicas", str(args.min_insync_replicas)]
    if args.acks != "all":
        parts += ["--acks", args.acks]
    if args.faults != "partition,kill,pause,disk":
        parts += ["--faults", args.faults]
    if args.schedule:
        parts += ["--schedule", args.schedule]
    for b in args.bug:
        parts += ["--bug", b]
    if args.clients != 5:
        parts += ["--clients", str(args.clients)]
    if args.flush_messages is not None:
        parts += ["--flush-messages", str(args.flush_messages)]
    if args.flush_ms is not None:
        parts += ["--flush-ms", str(args.flush_ms)]
    if args.unclean_leader_election:
        parts.append("--unclean-leader-election")
    if args.keep_going:
        parts.append("--keep-going")
    if args.transaction_version != 1:
        parts += ["--transaction-version", str(args.transaction_version)]
    if args.assignor != "range":
        parts += ["--assignor", args.assignor]
    if args.static_members:
        parts.append("--static-members")
    return " ".join(parts)


def _run(args: argparse.Namespace) -> int:
    from kafkacheck.report import print_verdict, progress_bar
    from kafkacheck.runner import run_id_for, simulate

    options = _options(args)
    out = Path(args.out) if args.out else Path("runs") / run_id_for(options)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    try:  # before simulating, so a bad --out costs nothing
        out.mkdir(parents=True, exist_ok=True)
        (out / ".write-test").write_text("")
        (out / ".write-test").unlink()
    except OSError as e:
        raise UsageError(f"cannot write the run directory {out}: {e.strerror or e}") from None
    with progress_bar(args.no_progress or args.format == "json", options.ops) as progress:
        outcome = simulate(options, out, progress)
    meta, ops, _ = load_run(out)
    result = _judge(out, meta, ops)
    result["stats"]["simulation"] = outcome.stats
    result["reproduce"] = _reproduce_command(args)
    (out / "results.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    if args.format == "json":
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print_verdict(result, out, outcome.run_meta)
    return EXIT_VALID if result["valid"] is True else EXIT_INVALID


def _judge(directory: Path | None, meta: dict, ops: list[dict]) -> dict:
    """The verdict on a history, with the white-box invariant violations of a run directory."""
    result = check_queue(ops, meta.get("config") or {})
    events_path = directory / "events.jsonl" if directory is not None else None
    if events_path is None or not events_path.exists():
        return result
    events = []
    for n, line in enumerate(events_path.read_text().splitlines(), 1):
        try:
            events.append(json.loads(line))
        except ValueError:
            raise HistoryError(f"{events_path}:{n}: not valid JSON") from None
    return with_invariant_violations(result, events)


def _check(args: argparse.Namespace) -> int:
    from kafkacheck.report import print_verdict

    meta, ops, directory = load_run(args.path)
    result = _judge(directory if Path(args.path).is_dir() else None, meta, ops)
    if Path(args.path).is_dir():
        (directory / "results.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    if args.format == "json":
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print_verdict(result, directory, meta)
    if result["valid"] == "unknown":
        return EXIT_UNKNOWN
    return EXIT_VALID if result["valid"] is True else EXIT_INVALID


if __name__ == "__main__":
    sys.exit(main())
