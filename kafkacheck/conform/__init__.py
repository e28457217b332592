"""``kafkacheck conform``: the conformance suite against a real broker over TCP.

* :mod:`~kafkacheck.conform.targets` -- the broker (``--bootstrap``, ``--spawn reference``,
  ``--spawn tansu``, ``--spawn kafka``) and the APIs it advertises;
* :mod:`~kafkacheck.conform.kafka` -- Apache Kafka's jars from Maven Central and a KRaft cluster;
* :mod:`~kafkacheck.conform.clients` -- kafka-python and confluent-kafka behind one small
  interface, every call with a timeout;
* :mod:`~kafkacheck.conform.cases` -- the catalogue of cases, each a documented guarantee;
* :mod:`~kafkacheck.conform.report` -- terminal table, report.json, JUnit XML, HTML.
"""

from __future__ import annotations

import datetime
import signal
import sys
from pathlib import Path

EXIT_PASS, EXIT_FAIL, EXIT_UNKNOWN, EXIT_USAGE = 0, 1, 2, 3
DEFAULT_KAFKA_VERSION = "4.3.1"  # kafkacheck.conform.kafka.DEFAULT_VERSION, without importing it


def cmd_conform(args) -> int:
    # kill PID (SIGTERM) stops the brokers and clients kafkacheck started, as Ctrl-C does
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        return _conform(args)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _conform(args) -> int:
    from rich.console import Console

    from kafkacheck.cli import UsageError
    from kafkacheck.conform import cases as catalogue
    from kafkacheck.conform.clients import CLIENTS
    from kafkacheck.conform.kafka import KafkaUnavailable
    from kafkacheck.conform.report import Entry, Report
    from kafkacheck.conform.targets import TargetError, external, parse_bootstrap, spawn

    if (args.bootstrap is None) == (args.spawn is None):
        raise UsageError("give exactly one of --bootstrap HOST:PORT and --spawn reference|tansu|kafka")
    if args.spawn == "kafka" or args.client == "java":
        from kafkacheck.conform.kafka import check_version
        try:
            check_version(args.kafka_version)
        except ValueError as e:
            raise UsageError(str(e)) from None
    if args.spawn == "kafka":
        if args.brokers not in (1, 3):
            raise UsageError("--spawn kafka runs 1 node or 3 (each broker and controller): --brokers 1 or 3")
    elif args.kafka_version != DEFAULT_KAFKA_VERSION and args.client != "java":
        raise UsageError("--kafka-version goes with --spawn kafka or --client java")
    if args.bootstrap is not None:
        try:
            parse_bootstrap(args.bootstrap)
        except TargetError as e:
            raise UsageError(str(e)) from None
    faults = [f.strip() for f in (args.faults or "").split(",") if f.strip()]
    from kafkacheck.conform.workload import NETWORK_FAULTS, NODE_FAULTS, PROCESS_FAULTS

    known = PROCESS_FAULTS + NETWORK_FAULTS + NODE_FAULTS
    bad = [f for f in faults if f not in known]
    if bad:
        raise UsageError(f"unknown --faults {', '.join(bad)}: {', '.join(known)}")
    args.fault_list = faults
    node_faults = [f for f in faults if f in NODE_FAULTS] if args.workload != "none" else []
    if node_faults:
        if args.spawn not in ("reference", "kafka"):
            raise UsageError(f"--faults {','.join(node_faults)} act between the nodes of a cluster kafkacheck "
                             "starts: --spawn reference or --spawn kafka (Tansu is one node)")
        if args.spawn == "kafka" and args.brokers < 3:
            raise UsageError(f"--faults {','.join(node_faults)} need several nodes: --brokers 3")
        from fault_injection.netns import unavailable
        if (problem := unavailable()) is not None:
            raise UsageError(problem)
    broker_config: dict[str, str] = {}
    for item in args.broker_config:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--broker-config {item!r}: expected KEY=VALUE")
        broker_config[key.strip()] = value.strip()
    if broker_config and args.spawn not in ("reference", "kafka"):
        raise UsageError("--broker-config sets up a broker kafkacheck starts: --spawn reference or --spawn kafka")
    if broker_config and args.spawn == "reference":
        from kafkacheck.conform.targets import TargetError, reference_config
        from reference.server.cluster import ServerOptions
        try:
            reference_config(ServerOptions(data_dir=Path(".")), broker_config)
        except TargetError as e:
            raise UsageError(str(e)) from None
    bugs: frozenset[str] = frozenset()
    if args.bug:
        if args.spawn != "reference":
            raise UsageError("--bug switches on a bug of the reference broker: use it with --spawn reference")
        from reference.bugs import parse_bugs
        try:
            bugs = parse_bugs([b.strip() for b in args.bug.split(",") if b.strip()])
        except ValueError as e:
            raise UsageError(str(e)) from None
    if args.workload_seconds <= 0:
        raise UsageError("--workload-seconds must be positive")
    if args.brokers < 1 or args.timeout <= 0:
        raise UsageError("--brokers must be at least 1 and --timeout positive")
    selected = catalogue.CASES
    if args.profile == "short" and not args.cases:
        selected = [c for c in catalogue.CASES if c.name in catalogue.SHORT]
    if args.cases:
        wanted = [c.strip() for c in args.cases.split(",") if c.strip()]
        unknown = [c for c in wanted if c not in catalogue.CASE_NAMES]
        if unknown:
            raise UsageError(f"unknown case(s) {', '.join(unknown)}; known: {', '.join(catalogue.CASE_NAMES)}")
        selected = [c for c in catalogue.CASES if c.name in wanted]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=False)
    try:
        client_cls = CLIENTS[args.client]
    except KeyError:
        raise UsageError(f"unknown --client {args.client}") from None
    console.print(f"target: {args.spawn or args.bootstrap}; starting..." if args.spawn else
                  f"target: {args.bootstrap}")
    try:
        proxied = args.workload != "none" and any(f in NETWORK_FAULTS for f in faults)
        target = (spawn(args.spawn, out / "broker", args.brokers, proxied, bugs, args.kafka_version,
                        log=console.print, namespaces=bool(node_faults), broker_config=broker_config)
                  if args.spawn
                  else external(args.bootstrap))
    except (TargetError, KafkaUnavailable) as e:
        print(f"kafkacheck: error: {e}", file=sys.stderr)
        return EXIT_UNKNOWN
    try:
        try:
            target.probe(args.timeout)
            if args.client == "java":
                _start_java(args, out, console)
        except (TargetError, KafkaUnavailable) as e:
            report = Report(target.name if args.spawn else "external", target.bootstrap, args.client,
                            datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                            {str(k): list(v) for k, v in sorted(target.apis.items())}, unusable=str(e))
            _write_reports(report, out, console)
            print(f"kafkacheck: error: {e}", file=sys.stderr)
            return EXIT_UNKNOWN
        try:
            client = client_cls(target.bootstrap, timeout_s=args.timeout)
        except ImportError as e:
            raise UsageError(f"--client {args.client} is not installed: {e}") from None
        report = Report(target.name if args.spawn else "external", target.bootstrap, client.name,
                        datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                        {str(k): list(v) for k, v in sorted(target.apis.items())},
                        target_version=target.version or "unknown", brokers=target.brokers)
        ctx = catalogue.Context(client, target.brokers, target.apis, target)
        console.print(f"bootstrap {target.bootstrap}; {len(target.apis)} APIs advertised; "
                      f"{len(selected)} cases with {client.name}")
        for i, case in enumerate(selected, 1):
            with console.status(f"[{i}/{len(selected)}] {case.name}"):
                outcome, seconds = catalogue.run_case(case, ctx)
            console.print(f"[{i}/{len(selected)}] {case.name}: {outcome.status} ({seconds:.1f} s)")
            report.entries.append(Entry("case", case.name, case.guarantee, case.reference, outcome.status,
                                        outcome.evidence, round(seconds, 3), outcome.details))
            if outcome.status == "error" and (problem := target.responsive(min(args.timeout, 10.0))):
                # not one failed case among many: the broker stopped answering
                report.unusable = f"the broker stopped answering during {case.name}: {problem}"
                for rest in selected[i:]:
                    report.entries.append(Entry("case", rest.name, rest.guarantee, rest.reference, "skip",
                                                "not run: the broker stopped answering", 0.0))
                break
        if args.workload != "none" and report.unusable is None:
            _run_workload(args, target, client, out, report, console)
    finally:
        if args.client == "java":
            from kafkacheck.conform.java import stop_driver
            stop_driver()
        target.close()
    _write_reports(report, out, console)
    if report.unusable is not None:
        print(f"kafkacheck: error: unusable target: {report.unusable} (a partial report was written)",
              file=sys.stderr)
        return EXIT_UNKNOWN
    return EXIT_PASS if report.verdict == "pass" else EXIT_FAIL


def _write_reports(report, out: Path, console) -> None:
    from kafkacheck.conform.report import print_table, write_html, write_json, write_junit

    print_table(report, console)
    write_json(report, out / "report.json")
    write_junit(report, out / "junit.xml")
    write_html(report, out / "report.html")
    console.print(f"wrote {out / 'report.json'}, {out / 'junit.xml'}, {out / 'report.html'}")


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _start_java(args, out: Path, console) -> None:
    """The Java client driver, built against the jars of --kafka-version (fetched if needed)."""
    from kafkacheck.conform.java import build_driver, use_driver
    from kafkacheck.conform.kafka import KafkaDist

    dist = KafkaDist(args.kafka_version)
    build_driver(dist, console.print)
    use_driver(dist, out / "java-client.log")


def _run_workload(args, target, client, out: Path, report, console) -> None:
    import time

    from kafkacheck.conform.report import Entry
    from kafkacheck.conform.workload import WORKLOADS, run_queue

    faults = args.fault_list if target.controllable else []
    note = f" with faults {', '.join(faults)}" if faults else " (no faults: kafkacheck does not control this broker)"
    start = time.monotonic()
    name = args.workload
    guarantee = WORKLOADS[name]
    with console.status(f"workload {name} for {args.workload_seconds:.0f} s{note}"):
        try:
            result = run_queue(target, args.client, client.create_topic, out / name, args.workload_seconds,
                               faults, timeout_s=min(args.timeout, 10.0), log=console.print, workload=name)
        except Exception as e:
            report.entries.append(Entry("workload", name, guarantee,
                                        "Kafka docs, Design: guarantees", "error", f"{type(e).__name__}: {e}",
                                        round(time.monotonic() - start, 3)))
            return
    seconds = time.monotonic() - start
    summary = result["summary"]
    report.nemesis.extend(summary["nemesis"])
    valid = result["valid"]
    status = "pass" if valid is True else "fail" if valid is False else "error"
    counts = {k: v for k, v in result.get("counts", {}).items() if v}
    what = "committed sends" if name in ("txn", "eos") else "sends"
    evidence = (f"{summary['acknowledged_sends']} acknowledged {what}, {summary['ops']} ops, "
                f"{len(summary['nemesis'])} faults; checker: {'valid' if valid is True else valid}"
                + (f"; anomalies {result['anomaly_types']}" if result.get("anomaly_types") else "")
                + ("" if summary["final_read_reached_end"] else "; the final read did not reach the end"))
    details = {"run_dir": result["run_dir"], "counts": counts, "allowed": result.get("allowed", {}),
               "anomalies": {k: v[:3] for k, v in result.get("anomalies", {}).items()}, "summary": summary}
    report.entries.append(Entry("workload", name, guarantee + " (the simulator's checker on a real history)",
                                "Kafka docs, Design: guarantees; KIP-98; Jepsen's queue anomalies", status, evidence,
                                round(seconds, 3), details))
    console.print(f"workload {name}: {status} ({seconds:.1f} s), history in {result['run_dir']}")
