"""``kafkacheck differential``: the same scripted requests to the reference broker and
Apache Kafka, every answer compared."""

from __future__ import annotations

import argparse

from kafkacheck.commands import SUMMARIES
from kafkacheck.conform.differential import DEVIATIONS, SCRIPTS, Result, Wire, common_versions, run
from kafkacheck.exits import EXIT_UNKNOWN, UsageError, verdict_exit


def add_parser(sub: argparse._SubParsersAction) -> None:
    dif = sub.add_parser(
        "differential", help=SUMMARIES["differential"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Start the reference broker (or --target tansu) and Apache Kafka, one node each, send both "
                    "the same scripted request sequences on raw sockets (one protocol version per API, the "
                    "highest both serve), and compare the answers field by field after dropping what differs "
                    "between any two clusters (addresses, ids, throttle times, messages). Every difference must "
                    "be declared in the deviations table (docs/reference/deviations.md); exit 0 when none is undeclared and "
                    "every declared one is still seen, 1 otherwise, 2 when a broker could not start, 3 on "
                    "usage errors. Writes differential.json (every answer and difference) into --out.",
        epilog="scripts:\n" + "\n".join(f"  {sc.name}: {sc.what}" for sc in SCRIPTS))
    dif.add_argument("--target", choices=["reference", "tansu"], default="reference",
                     help="the broker compared with Kafka (default reference; tansu has no declared deviations)")
    dif.add_argument("--kafka-version", default="4.3.1", metavar="V", help="the Apache Kafka version (default 4.3.1)")
    dif.add_argument("--scripts", metavar="A,B", help="run only these scripts (default: all)")
    dif.add_argument("--out", metavar="DIR", default="runs/differential",
                     help="where differential.json and the brokers' logs go (default runs/differential)")


def main(args: argparse.Namespace) -> int:
    import json
    import signal
    import sys
    from pathlib import Path

    from kafkacheck.conform.targets import TargetError, spawn
    from kafkacheck.console import stdout_console
    from kafkacheck.real.kafka_dist import KafkaUnavailable, check_version

    try:
        check_version(args.kafka_version)
    except ValueError as e:
        raise UsageError(str(e)) from None
    chosen = SCRIPTS
    if args.scripts:
        wanted = [x.strip() for x in args.scripts.split(",") if x.strip()]
        unknown = [x for x in wanted if x not in {sc.name for sc in SCRIPTS}]
        if unknown:
            raise UsageError(f"unknown script(s) {', '.join(unknown)}; known: {', '.join(sc.name for sc in SCRIPTS)}")
        chosen = [sc for sc in SCRIPTS if sc.name in wanted]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    console = stdout_console()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    targets = []
    try:
        try:
            console.print(f"starting {args.target} and Apache Kafka {args.kafka_version} (one node each)")
            targets.append(spawn(args.target, out / args.target, 1, log=console.print))
            targets.append(spawn("kafka", out / "kafka", 1, kafka_version=args.kafka_version, log=console.print))
            for t in targets:
                t.probe()
        except (TargetError, KafkaUnavailable) as e:
            print(f"kafkacheck: error: {e}", file=sys.stderr)
            return EXIT_UNKNOWN
        target, kafka = targets
        versions = common_versions(target.apis, kafka.apis)
        wires = [Wire(target.bootstrap, versions), Wire(kafka.bootstrap, versions)]
        try:
            result = run(wires[0], wires[1], chosen, log=console.print,
                         deviations=DEVIATIONS if args.target == "reference" else [])
        finally:
            for w in wires:
                w.close()
    finally:
        for t in targets:
            t.close()
        signal.signal(signal.SIGTERM, previous)
    report = {"target": args.target, "target_version": target.version, "kafka_version": kafka.version,
              "versions": {str(k): v for k, v in sorted(versions.items())},
              "scripts": [sc.name for sc in chosen], "errors": result.errors,
              "differences": [vars(d) for d in result.differences],
              "stale_deviations": [d.id for d in result.stale], "steps": result.steps}
    (out / "differential.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    _print_result(console, result, args.target)
    console.print(f"wrote {out / 'differential.json'}")
    return verdict_exit(not (result.undeclared or result.stale or result.errors))


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _print_result(console, result: Result, target: str) -> None:
    declared = [d for d in result.differences if d.declared]
    for d in result.undeclared[:60]:
        console.print(f"[red]undeclared[/] {d.line(target)}")
    if len(result.undeclared) > 60:
        console.print(f"... and {len(result.undeclared) - 60} more (differential.json has them all)")
    for dev in result.stale:
        console.print(f"[yellow]declared but not seen[/] {dev.id}: the deviation is gone; remove it from "
                      "kafkacheck/conform/differential/compare.py and docs/reference/deviations.md")
    for script_name, error in result.errors.items():
        console.print(f"[magenta]error[/] {script_name}: {error}")
    ids = sorted({d.declared for d in declared})
    console.print(f"{target} vs Apache Kafka: {len(result.differences)} differences, "
                  f"{len(declared)} declared ({', '.join(ids) or 'none'}), {len(result.undeclared)} undeclared; "
                  f"{len(result.stale)} stale declarations; {len(result.errors)} scripts broke")
