"""``kafkacheck run``'s run: its options and their defaults, made into a run directory.

The options (:func:`add_options`, what the command's parser is made of) become a
:class:`~kafkacheck.runner.RunOptions` (or, with ``--swarm SEED``, the options that swarm seed
draws); :func:`make` simulates it into the run directory, writes run.json (the options it was
made with, :mod:`kafkacheck.reproduce`), results.json and the report, and prints the verdict.
The command (:mod:`kafkacheck.commands.run`) adds its help and ``--replay``; a hunt saves its
findings with :func:`make` too (:func:`kafkacheck.hunt.save_run`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fault_injection.nemesis import OFFLINE, load_schedule, offline_conflict, parse_faults
from kafkacheck.console import add_explain
from kafkacheck.exits import Parser, UsageError, verdict_exit
from kafkacheck.judge import judge_record
from kafkacheck.reproduce import ORDER, command_line, run_dir_name
from kafkacheck.workloads import RUN_GROUP_WORKLOADS, WORKLOADS, group_options_conflict
from reference.assignors import ASSIGNORS, SERVER_ASSIGNORS
from reference.bugs import parse_bugs
from reference.consumer_group import GROUP_PROTOCOLS

DEFAULT_OPS = 10_000
# what --swarm draws itself: none of these may be given with it
_SWARM_DRAWS = ("workload", "transaction_version", "assignor", "static_members", "group_protocol", "seed", "brokers",
                "partitions", "replication_factor", "min_insync_replicas", "acks", "faults",
                "schedule", "template", "clients", "flush_messages", "flush_ms", "unclean_leader_election",
                "producer_epoch_start")


def _epoch_start(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 32_766:
        raise argparse.ArgumentTypeError(f"{text!r} is not an epoch of 0-32766")
    return value


def add_options(run: argparse.ArgumentParser) -> None:
    """``kafkacheck run``'s options, each with its default and its help."""
    run.add_argument("--workload", choices=list(WORKLOADS), default="queue",
                     help="; ".join(f"{k}: {w.description}" for k, w in WORKLOADS.items()).replace("%", "%%")
                     + " (default queue)")
    run.add_argument("--transaction-version", type=int, choices=[1, 2], default=1,
                     help="transactional workloads: 2 bumps the producer epoch at every "
                          "transaction end (KIP-890 part 2); default 1")
    run.add_argument("--producer-epoch-start", type=_epoch_start, default=0, metavar="E",
                     help="transactional workloads: the epoch new transactional producer ids start at "
                          "(default 0, as Kafka's; 0-32766). Near 32766 a run reaches the end of a "
                          "producer's epochs within a few transactions, where transaction version 2 "
                          "gives the producer a new producer id (an aim, not a Kafka setting)")
    run.add_argument("--assignor", choices=sorted({*ASSIGNORS, *SERVER_ASSIGNORS}), default="range",
                     help="groups and at-most-once workloads, and eos with --group-protocol: the partition "
                          "assignor (default range): with the classic "
                          "protocol the members' (range, roundrobin, sticky, cooperative-sticky), with "
                          "the consumer protocol the coordinator's (uniform, range)")
    run.add_argument("--group-protocol", choices=list(GROUP_PROTOCOLS), default=None,
                     help="groups and at-most-once workloads: the consumer group protocol, classic "
                          "(JoinGroup/SyncGroup, the members assign) or consumer (KIP-848: "
                          "ConsumerGroupHeartbeat, the coordinator assigns with --assignor uniform or "
                          "range); default classic. eos workload: given, the processors subscribe to the "
                          "input topic as members of one consumer group of this protocol and commit their "
                          "offsets with its generation or member epoch (KIP-447, as Kafka Streams' "
                          "exactly-once v2); without it each assigns itself its share of the partitions")
    run.add_argument("--static-members", action="store_true",
                     help="groups workload: static membership (a group.instance.id per member)")
    run.add_argument("--seed", type=int, default=0, help="seed of the run's RNG (default 0)")
    run.add_argument("--ops", type=int, default=None,
                     help="client operations to perform (default 10000; with --swarm 2000, "
                          "500 for the transactional workloads)")
    run.add_argument("--swarm", type=int, default=None, metavar="SEED",
                     help="the run swarm seed SEED of kafkacheck hunt stands for: the seed draws the "
                          "workload, faults, configuration, timings and aimed nemeses (printed), and "
                          "a liveness phase follows the healing; goes with --ops, --bug, --keep-going "
                          "and the output options only")
    run.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    run.add_argument("--partitions", type=int, default=None,
                     help="partitions of the topic (default 4; share: 2, fewer than its consumers)")
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
    run.add_argument("--template", metavar="VARIANT", default=None,
                     help="instead of a random schedule, the shape of a z3 counterexample of the "
                          "replication model (kip101, kip279-hole, no-epoch-hw, unclean; see "
                          "kafkacheck model-check) with parameters drawn from --seed: which brokers "
                          "play its replicas, when it starts, how far apart its steps are")
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
    run.add_argument("--replay", metavar="DIR",
                     help="run again the run of DIR with the options its run.json records (give no "
                          "other option that makes a run), into --out (default DIR-replay), and say "
                          "whether its history.jsonl and events.jsonl are the same, byte for byte")
    run.add_argument("--out", metavar="DIR", help="run directory (default runs/<run_id>)")
    run.add_argument("--format", choices=["table", "json"], default="table")
    add_explain(run)
    run.add_argument("--no-progress", action="store_true", help="no progress bar")


def option_defaults() -> dict:
    """``kafkacheck run``'s options as it parses no argument: their defaults."""
    parser = Parser(prog="kafkacheck run")
    add_options(parser)
    return vars(parser.parse_args([]))


def make(args: argparse.Namespace) -> int:
    """The run of ``args`` (``kafkacheck run``'s arguments, every default included) simulated
    into its run directory, judged, written and its verdict printed; exit as its verdict."""
    from kafkacheck.console import print_verdict, progress_bar
    from kafkacheck.runner import run_id_for, simulate

    if args.swarm is not None:
        from kafkacheck.swarm import describe

        options = _swarm_options(args, option_defaults())
        if args.format != "json":
            print(f"swarm seed {args.swarm}: {describe(options)}", flush=True)
    else:
        options = _options(args)
    made_with = run_options(args)
    reproduce = command_line(made_with)
    out = Path(args.out) if args.out else Path("runs") / run_dir_name(run_id_for(options), made_with, DEFAULT_OPS)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    _refuse_other_run(out, reproduce)
    try:  # before simulating, so a bad --out costs nothing
        out.mkdir(parents=True, exist_ok=True)
        (out / ".write-test").write_text("")
        (out / ".write-test").unlink()
    except OSError as e:
        raise UsageError(f"cannot write the run directory {out}: {e.strerror or e}") from None
    with progress_bar(args.no_progress or args.format == "json", options.ops) as progress:
        outcome = simulate(options, out, progress)
    # the reproducer, as data: what --replay runs again
    (out / "run.json").write_text(json.dumps({**outcome.run_meta, "options": made_with}, indent=2,
                                             sort_keys=True) + "\n")
    record = outcome.record()  # what the run directory now holds, without reading it back
    result = judge_record(record)
    result["stats"]["simulation"] = outcome.stats
    result["reproduce"] = reproduce
    (out / "results.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    from kafkacheck.report import write_report  # report.json, report.html
    report = write_report(out)
    if args.format == "json":
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print_verdict(result, out, outcome.run_meta, explain=args.explain, report=report)
    return verdict_exit(result["valid"])


def _swarm_options(args: argparse.Namespace, parser_defaults: dict):
    from dataclasses import replace

    from kafkacheck import swarm

    for name in _SWARM_DRAWS:
        if getattr(args, name) != parser_defaults[name]:
            raise UsageError(f"--swarm draws --{name.replace('_', '-')} itself; with --swarm give only "
                             "--ops, --bug, --keep-going, --out, --format, --explain and --no-progress")
    if args.swarm < 0:
        raise UsageError("--swarm must be a seed of 0 or more")
    try:
        bugs = sorted(parse_bugs(args.bug))
    except ValueError as e:
        raise UsageError(str(e)) from None
    ops = args.ops if args.ops is not None else swarm.DEFAULT_OPS
    if ops < 1:
        raise UsageError("--ops must be at least 1")
    return replace(swarm.draw(args.swarm, ops), bugs=bugs, keep_going=args.keep_going)


def _options(args: argparse.Namespace):
    from kafkacheck.runner import RunOptions

    if args.ops is None:
        args.ops = DEFAULT_OPS
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
    partitions = args.partitions if args.partitions is not None else WORKLOADS[args.workload].default_partitions
    if partitions < 1 or args.clients < 1:
        raise UsageError("--partitions and --clients must be at least 1")
    if args.workload in ("eos", "groups") and args.clients < 2:
        raise UsageError(f"the {args.workload} workload needs --clients 2 or more "
                         "(a producer and consumers)")
    if (why := offline_conflict(faults)) is not None:
        raise UsageError(why)
    if (why := group_options_conflict(args.workload, args.group_protocol, args.assignor,
                                      RUN_GROUP_WORKLOADS)) is not None:
        raise UsageError(why)
    if OFFLINE in faults and args.replication_factor not in (None, 1):
        raise UsageError("--faults offline-partition places the workload's topics with one replica a partition: "
                         "leave out --replication-factor (or give 1)")
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
    if args.template is not None:
        from fault_injection.model_shapes import model_templates, seeded_template

        known = model_templates()
        if args.template not in known:
            raise UsageError(f"unknown --template {args.template!r}; known: {', '.join(known)}")
        if args.schedule:
            raise UsageError("--template and --schedule both replace the random schedule: give one")
        if args.brokers < known[args.template]["replicas"]:
            raise UsageError(f"--template {args.template} needs --brokers "
                             f"{known[args.template]['replicas']} or more")
        schedule = seeded_template(args.template, args.seed, args.brokers)
    return RunOptions(workload=args.workload, seed=args.seed, ops=args.ops, brokers=args.brokers,
                      partitions=partitions, replication_factor=rf,
                      min_insync_replicas=min_isr, acks=args.acks, faults=faults, bugs=bugs,
                      clients=args.clients, schedule=schedule,
                      flush_messages=args.flush_messages, flush_ms=args.flush_ms,
                      unclean_leader_election=args.unclean_leader_election,
                      keep_going=args.keep_going,
                      transaction_version=args.transaction_version,
                      producer_epoch_start=args.producer_epoch_start,
                      assignor=args.assignor, static_members=args.static_members,
                      group_protocol=args.group_protocol or "classic",
                      eos_subscribe=args.workload == "eos" and args.group_protocol is not None)


def run_options(args: argparse.Namespace) -> dict:
    """The options that make the run, as data (run.json's ``"options"``): the seed (or swarm
    seed), the op count, and every option that differs from its default."""
    if args.swarm is not None:
        given = {"swarm": args.swarm, "ops": args.ops, "bug": list(args.bug), "keep_going": args.keep_going}
        return {k: v for k, v in given.items() if v is not None and v is not False and v != []}  # (swarm 0 kept)
    defaults = option_defaults()
    return {"seed": args.seed, "ops": args.ops, **{name: getattr(args, name) for name in ORDER[2:]
                                                    if getattr(args, name) != defaults[name]}}


def _refuse_other_run(out: Path, reproduce: str) -> None:
    """A directory that holds a run made with other options is not overwritten."""
    try:
        old = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        return
    made_by = old.get("reproduce") if isinstance(old, dict) else None
    if made_by and made_by != reproduce:
        raise UsageError(f"{out} holds a run made with other options ({made_by}); "
                         f"choose another --out, or delete it first")
