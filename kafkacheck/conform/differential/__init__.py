"""Differential testing: the same scripted request sequences sent to the reference broker and to
Apache Kafka, and their answers compared field by field.

Theory of operation
-------------------
A *script* (:data:`SCRIPTS`) is a short sequence of raw Kafka requests, written once, with
names and values that do not depend on the broker: it creates its own topics and groups (with
a run suffix), and each request it sends is a *step* whose answer is recorded. :class:`Wire`
sends them on raw sockets with kafka-python's protocol classes, at one version per API: the
highest that both brokers serve (``ApiVersions``) and kafka-python encodes, so both answers have
the same schema. Requests go where a client would send them: partition requests to the leader,
group and transaction requests to the coordinator (found with FindCoordinator).

An answer is *normalised* before the comparison (:func:`normalise`): what differs between any
two clusters is dropped (addresses, node ids, cluster and topic ids, throttle times, error
messages, timestamps the broker stamps) and what a broker invents is renamed in order of first
appearance (``producer-1``, ``member-1``), so two answers that mean the same compare equal.
Record sets are decoded into batches (offsets, control and transactional flags, records).
Then both answers are flattened into ``path: value`` and compared (:func:`compare`).

Every difference must be fixed in the engine or declared in :data:`DEVIATIONS` (the table of
the docs' "Deviations from Kafka"), with the reason; a declared deviation that no longer
differs is reported too, so the table stays true. ``kafkacheck differential`` runs it;
``tests/kafkacheck/test_differential.py`` runs it in the default test suite.

* :mod:`~kafkacheck.conform.differential.wire` -- raw requests, one version per API;
* :mod:`~kafkacheck.conform.differential.scripts` -- the scripts;
* :mod:`~kafkacheck.conform.differential.compare` -- normalisation, comparison, the deviations;
* this module -- running the scripts on both brokers, and ``kafkacheck differential``.
"""

from __future__ import annotations

import uuid
from typing import Any

from kafkacheck.conform.differential.compare import (
    DEVIATIONS,
    Deviation,
    Difference,
    Names,
    Result,
    compare,
    decode_record_set,
    flatten,
    normalise,
)
from kafkacheck.conform.differential.scripts import SCRIPTS, Script, Session
from kafkacheck.conform.differential.wire import Wire, WireError, common_versions

__all__ = ["DEVIATIONS", "SCRIPTS", "Deviation", "Difference", "Names", "Result", "Script", "Session", "Wire",
           "WireError", "cmd_differential", "common_versions", "compare", "decode_record_set", "flatten",
           "normalise", "run"]


def run(target: Wire, kafka: Wire, scripts: list[Script] | None = None, log=print,
        deviations: list[Deviation] | None = None) -> Result:
    """Run each script against both brokers and compare; ``deviations``: the declared ones
    (the reference broker's by default; pass [] for another broker)."""
    deviations = DEVIATIONS if deviations is None else deviations
    differences: list[Difference] = []
    errors: dict[str, str] = {}
    steps: dict[str, dict[str, dict[str, Any]]] = {}
    for sc in scripts or SCRIPTS:
        suffix = "-" + uuid.uuid4().hex[:8]
        sides = {}
        for side, wire in (("target", target), ("kafka", kafka)):
            session = Session(wire, Names(suffix))
            try:
                sc.run(session)
            except Exception as e:
                errors[sc.name] = f"{side}: {type(e).__name__}: {e}"
            sides[side] = session.steps
        steps[sc.name] = sides
        found = compare(sc.name, sides["target"], sides["kafka"], deviations)
        differences += found
        log(f"{sc.name}: {len(sides['kafka'])} steps, {len(found)} differences "
            f"({sum(d.declared is None for d in found)} undeclared)"
            + (f"; error: {errors[sc.name]}" if sc.name in errors else ""))
    return Result(differences, errors, steps, list(deviations))


# ---------------------------------------------------------------- the command


def cmd_differential(args) -> int:
    """``kafkacheck differential``: the scripts against a broker and Apache Kafka (both
    started here, one node each), compared field by field."""
    import json
    import signal
    import sys
    from pathlib import Path

    from rich.console import Console

    from kafkacheck.cli import UsageError
    from kafkacheck.conform.kafka import KafkaUnavailable, check_version
    from kafkacheck.conform.targets import TargetError, spawn

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
    console = Console()
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
            return 2
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
    return 1 if result.undeclared or result.stale or result.errors else 0


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
                      "kafkacheck/conform/differential/compare.py and docs/kafka.md")
    for script_name, error in result.errors.items():
        console.print(f"[magenta]error[/] {script_name}: {error}")
    ids = sorted({d.declared for d in declared})
    console.print(f"{target} vs Apache Kafka: {len(result.differences)} differences, "
                  f"{len(declared)} declared ({', '.join(ids) or 'none'}), {len(result.undeclared)} undeclared; "
                  f"{len(result.stale)} stale declarations; {len(result.errors)} scripts broke")
