"""One ``kafkacheck conform`` run of checked :class:`~kafkacheck.conform.options.ConformOptions`:
:func:`conform_once`.

It starts the broker (or reaches it), asks what it serves, runs the cases
(:mod:`kafkacheck.conform.cases`), then the workload with real clients under faults
(:mod:`kafkacheck.conform.workload`), and writes report.json, junit.xml and report.html into
``--out`` (:mod:`kafkacheck.conform.report`); the workload's run directory gets its report
page with the command that repeats the run. The command (:mod:`kafkacheck.commands.conform`)
checks the options and calls it once, or once per Kafka version (a matrix).
"""

from __future__ import annotations

import datetime
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from kafkacheck.conform.options import ConformOptions
from kafkacheck.conform.protocols import check_broker_protocol, check_broker_share
from kafkacheck.exits import EXIT_UNKNOWN, UsageError, verdict_exit
from kafkacheck.workloads import WORKLOADS

REPORT_FILES = ("report.json", "junit.xml", "report.html")


@dataclass
class Outcome:
    """One conform run: its exit code, its report (None when the target never started), and why
    the target was unusable (None when it was usable)."""

    code: int
    report: object | None = None
    problem: str | None = None


def conform_once(options: ConformOptions) -> Outcome:
    """Start (or reach) the target, run the cases and the workload, write the reports into --out."""
    from kafkacheck.console import stdout_console

    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    for stale in REPORT_FILES:  # an earlier run's verdict never stands for this one's
        (out / stale).unlink(missing_ok=True)
    console = stdout_console()
    console.print(f"target: {options.spawn or options.bootstrap}; starting..." if options.spawn else
                  f"target: {options.bootstrap}")
    target = _start_target(options, out, console)
    if isinstance(target, Outcome):
        return target
    try:
        report = _run(options, target, out, console)
    finally:
        if options.client == "java":
            from kafkacheck.real.java import stop_driver
            stop_driver()
        target.close()
    _write_reports(report, out, console)
    if report.unusable is not None:
        if not report.entries:  # it could not even be probed
            print(f"kafkacheck: error: {report.unusable}", file=sys.stderr)
        else:
            print(f"kafkacheck: error: unusable target: {report.unusable} (a partial report was written)",
                  file=sys.stderr)
        return Outcome(EXIT_UNKNOWN, report, report.unusable)
    return Outcome(verdict_exit(report.verdict), report)


def _start_target(options: ConformOptions, out: Path, console):
    """The target, spawned or external; an Outcome when it could not start."""
    from kafkacheck.conform.apache_kafka import FeatureRefused
    from kafkacheck.conform.real_nemesis import NETWORK_FAULTS, REQUEST_FAULTS
    from kafkacheck.conform.targets import TargetError, external, spawn
    from kafkacheck.real.kafka_dist import KafkaUnavailable, KafkaVersionUnknown

    faults = options.fault_list
    try:
        if not options.spawn:
            return external(options.bootstrap)
        proxied = options.workload != "none" and any(f in NETWORK_FAULTS + REQUEST_FAULTS for f in faults)
        return spawn(options.spawn, out / "broker", options.brokers, proxied, options.bugs, options.kafka_version,
                     log=console.print, namespaces=bool(options.node_faults), broker_config=options.broker_settings,
                     features=options.feature_levels,
                     power_loss=any(f in ("lose-unflushed", "last-replica-standing") for f in faults),
                     kafka_dist=options.kafka_dist() if options.spawn == "kafka" else None)
    except (FeatureRefused, KafkaVersionUnknown) as e:
        raise UsageError(str(e)) from None
    except (TargetError, KafkaUnavailable) as e:
        print(f"kafkacheck: error: {e}", file=sys.stderr)
        return Outcome(EXIT_UNKNOWN, None, str(e))


def _report(options: ConformOptions, target, client_name: str, **extra):
    from kafkacheck.conform.report import Report

    return Report(target.name if options.spawn else "external", target.bootstrap, client_name,
                  datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                  {str(k): list(v) for k, v in sorted(target.apis.items())}, **extra)


def _run(options: ConformOptions, target, out: Path, console):
    """The cases, then the workload, against a started target; the report."""
    from kafkacheck.conform.targets import TargetError
    from kafkacheck.real.kafka_dist import KafkaUnavailable, KafkaVersionUnknown
    from kafkacheck.real.kinds import CLIENTS

    try:
        target.probe(options.timeout)
        check_broker_protocol(options, target)
        check_broker_share(options, target)
        if options.client == "java":
            _start_java(options.kafka_dist(), out, console)
    except KafkaVersionUnknown as e:
        raise UsageError(str(e)) from None
    except (TargetError, KafkaUnavailable) as e:
        return _report(options, target, options.client, unusable=str(e))
    try:
        client = CLIENTS[options.client](target.bootstrap, timeout_s=options.timeout)
    except ImportError as e:
        raise UsageError(f"--client {options.client} is not installed: {e}") from None
    report = _report(options, target, client.name, target_version=target.version or "unknown",
                     brokers=target.brokers, features=dict(target.features), bugs=list(target.bugs),
                     group_protocol=options.members_protocol)
    _run_cases(options, target, client, report, console)
    if options.workload != "none" and report.unusable is None:
        _run_workload(options, target, client, out, report, console)
    return report


def _run_cases(options: ConformOptions, target, client, report, console) -> None:
    from kafkacheck.conform import cases as catalogue
    from kafkacheck.conform.report import Entry

    selected = options.case_list
    ctx = catalogue.Context(client, target.brokers, target.apis, target)
    console.print(f"bootstrap {target.bootstrap}; {len(target.apis)} APIs advertised; "
                  f"{len(selected)} cases with {client.name}")
    for i, case in enumerate(selected, 1):
        with console.status(f"[{i}/{len(selected)}] {case.name}"):
            outcome, seconds = catalogue.run_case(case, ctx)
        console.print(f"[{i}/{len(selected)}] {case.name}: {outcome.status} ({seconds:.1f} s)")
        report.entries.append(Entry("case", case.name, case.guarantee, case.reference, outcome.status,
                                    outcome.evidence, round(seconds, 3), outcome.details))
        if outcome.status == "error" and (problem := target.responsive(min(options.timeout, 10.0))):
            # not one failed case among many: the broker stopped answering
            report.unusable = f"the broker stopped answering during {case.name}: {problem}"
            for rest in selected[i:]:
                report.entries.append(Entry("case", rest.name, rest.guarantee, rest.reference, "skip",
                                            "not run: the broker stopped answering", 0.0))
            break


def _write_reports(report, out: Path, console) -> None:
    from kafkacheck.conform.report import print_table, write_html, write_json, write_junit

    print_table(report, console)
    write_json(report, out / "report.json")
    write_junit(report, out / "junit.xml")
    write_html(report, out / "report.html")
    console.print(f"wrote {out / 'report.json'}, {out / 'junit.xml'}, {out / 'report.html'}")


def _start_java(dist, out: Path, console) -> None:
    """The Java client driver, built against the jars of ``dist`` (fetched if needed)."""
    from kafkacheck.real.java import build_driver, use_driver

    build_driver(dist, console.print)
    use_driver(dist, out / "java-client.log")


def _run_workload(options: ConformOptions, target, client, out: Path, report, console) -> None:
    """The workload, its verdict an entry of the report; its run directory gets its report page."""
    from kafkacheck.conform.report import Entry
    from kafkacheck.conform.workload import run_workload

    faults = options.fault_list if target.controllable else []
    note = f" with faults {', '.join(faults)}" if faults else " (no faults: kafkacheck does not control this broker)"
    start = time.monotonic()
    name = options.workload
    with console.status(f"workload {name} for {options.workload_seconds:.0f} s{note}"):
        try:
            result = run_workload(target, options.client, client.create_topic, out / name, options.workload_seconds,
                                  faults, timeout_s=min(options.timeout, 10.0), log=console.print, workload=name,
                                  straggle_apis=tuple(options.straggle_api) if options.straggle_api else None,
                                  group_protocol=options.group_protocol or "classic",
                                  eos_subscribe=name == "eos" and options.group_protocol is not None)
        except Exception as e:
            report.entries.append(Entry("workload", name, WORKLOADS[name].guarantee,
                                        "Kafka docs, Design: guarantees", "error", f"{type(e).__name__}: {e}",
                                        round(time.monotonic() - start, 3)))
            return
    seconds = time.monotonic() - start
    from kafkacheck.report import write_report
    command, changed = options.command()
    write_report(result["run_dir"], reproduce=command, options=changed)
    report.nemesis.extend(result["summary"]["nemesis"])
    entry = _workload_entry(name, result, seconds)
    report.entries.append(entry)
    console.print(f"workload {name}: {entry.status} ({seconds:.1f} s), history in {result['run_dir']}")


def _workload_entry(name: str, result: dict, seconds: float):
    """The report's entry of a workload that ran: its verdict and the evidence."""
    from kafkacheck.conform.report import Entry

    summary = result["summary"]
    valid = result["valid"]
    status = "pass" if valid is True else "fail" if valid is False else "error"
    counts = {k: v for k, v in result.get("counts", {}).items() if v}
    what = "committed sends" if WORKLOADS[name].transactional else "sends"
    evidence = (f"{summary['acknowledged_sends']} acknowledged {what}, {summary['ops']} ops, "
                f"{len(summary['nemesis'])} faults; checker: {'valid' if valid is True else valid}"
                + (f"; anomalies {result['anomaly_types']}" if result.get("anomaly_types") else "")
                + ("" if summary["final_read_reached_end"] else "; the final read did not reach the end"))
    details = {"run_dir": result["run_dir"], "counts": counts, "allowed": result.get("allowed", {}),
               "anomalies": {k: v[:3] for k, v in result.get("anomalies", {}).items()}, "summary": summary}
    return Entry("workload", name, WORKLOADS[name].guarantee + " (the simulator's checker on a real history)",
                 "Kafka docs, Design: guarantees; KIP-98; Jepsen's queue anomalies", status, evidence,
                 round(seconds, 3), details)
