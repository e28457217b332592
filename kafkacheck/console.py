"""Human-readable output: the progress bar and the verdict (rich).

The verdict comes first, then the table of what ran, then each violation and each allowed
anomaly type with its count, one line each; the explanations (a worked example of every
type) are behind ``--explain`` (:func:`add_explain`) and in the run's report. Output to a file
or a pipe is not cut to a terminal's width: :func:`stdout_console` gives it the room it needs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console
from rich.table import Table

# output that is not a terminal's (a log, a pipe): lines as long as they are, never cut or wrapped
_PIPE_WIDTH = 1000
SHOWN = 5  # examples of a violation type with --explain


def stdout_console() -> Console:
    """The console for standard output: a terminal's width on a terminal (or $COLUMNS), and
    otherwise wide enough that no table cell is cut and no line is wrapped."""
    if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit():
        return Console()
    return Console(width=_PIPE_WIDTH, soft_wrap=True)


@contextlib.contextmanager
def progress_bar(disabled: bool, total: int) -> Iterator:
    if disabled:
        yield None
        return
    # here, not at the top: lin and check print through this module and never show a bar
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("ops"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as p:
        task = p.add_task("ops", total=total)
        yield lambda done, _total: p.update(task, completed=done)


def verdict_line(result: dict) -> str:
    """The verdict in one line (rich markup): valid, unknown, or INVALID with each violation
    type and its count."""
    valid = result.get("valid")
    if valid is True:
        return "[bold green]valid[/]: no anomaly found"
    if valid == "unknown":
        return "[bold yellow]unknown[/]: the checker could not decide"
    counts = result.get("counts", {})
    kinds = result.get("anomaly_types", [])
    return "[bold red]INVALID[/]: " + (", ".join(
        f"{kind} ({counts.get(kind, len(result['anomalies'].get(kind, [])))})" for kind in kinds) or "see below")


def _allowed_reasons() -> dict[str, str]:
    """Why each allowed type is allowed, from the checker's table."""
    from properties.check_table import allowed_reasons

    return allowed_reasons()


def add_explain(parser: argparse.ArgumentParser) -> None:
    """--explain, for the commands that print a verdict (run, check)."""
    parser.add_argument("--explain", action="store_true",
                        help="after the verdict, explain an example of every anomaly type found, allowed "
                             "ones included (report.html explains them too)")


def print_verdict(result: dict, run_dir: Path, meta: dict, explain: bool = False,
                  report: Path | None = None) -> None:
    """The verdict first, then the run's table, the violations and the allowed types (one line
    each); ``explain``: up to five examples of each violation type and one of each allowed type.
    ``report``: the report.html written for this verdict, if one was."""
    console = stdout_console()
    console.print(verdict_line(result))
    stats = result.get("stats", {})
    table = Table(title=f"kafkacheck: {meta.get('run_id', run_dir)}", show_header=False)
    table.add_column("", style="bold")
    table.add_column("")
    cfg = meta.get("config", {})
    if meta.get("target") == "jepsen":
        table.add_row("imported from", str(cfg.get("imported_from")))
    elif meta:
        table.add_row("seed", str(meta.get("seed")))
        table.add_row("cluster", f"{cfg.get('brokers', '?')} brokers, RF {cfg.get('replication_factor')}, "
                      f"min.insync.replicas {cfg.get('min_insync_replicas')}, acks={cfg.get('acks')}")
        table.add_row("faults", ", ".join(meta.get("faults", [])) or "none")
        table.add_row("bug switches", ", ".join(cfg.get("bugs", [])) or "none")
    table.add_row("client ops", f"{stats.get('client_ops', 0)} (ok {stats.get('ok', 0)}, "
                  f"fail {stats.get('fail', 0)}, info {stats.get('info', 0)})")
    table.add_row("nemesis ops", str(stats.get("nemesis_ops", 0)))
    sim = stats.get("simulation")
    if sim:
        table.add_row("virtual time", f"{sim['virtual_seconds']:.1f} s, "
                      f"{sim['messages_delivered']} messages delivered")
        if "engine" in sim:
            table.add_row("engine", sim["engine"])
    final = cfg.get("final_read") or {}
    if final.get("performed"):
        table.add_row("final read", ("reached the end" if final.get("reached_end") else
                                     "did NOT reach the end") + f" in {final.get('took_ms')} ms "
                      f"(bound {final.get('staleness_bound_ms')} ms)")
    live = cfg.get("liveness") or {}
    if live:
        # what the liveness phase demanded of the healed cluster, and within what bound
        table.add_row("liveness", (f"converged in {live.get('took_ms')} ms" if live.get("converged") else
                                   "did NOT converge") + f" (bound {live.get('bound_ms')} ms: every partition "
                      "led with a full ISR, every transaction ended, every group settled)")
    lin = stats.get("linearizability")
    if lin and lin.get("checked"):
        table.add_row("linearizability", f"{lin['verdict']}: {lin['partitions']} partition logs, "
                      f"{lin['operations']} appends and reads, {lin['iterations']:,} search steps "
                      f"({lin['seconds']:.1f} s)")
    console.print(table)
    counts = result.get("counts", {})
    for kind in result.get("anomaly_types", []):
        items = result["anomalies"].get(kind, [])
        n = counts.get(kind, len(items))
        shown = items[:SHOWN] if explain else items[:1]
        console.print(f"[bold red]{kind}[/] ({n})" + (f": {_example(shown[0])}" if shown and not explain else ""),
                      highlight=False)
        if explain:
            for a in shown:
                console.print(f"  - {_example(a)}", highlight=False)
            if n > len(shown):
                console.print(f"  ... {n - len(shown)} more in results.json", highlight=False)
    allowed = result.get("allowed") or {}
    if allowed:
        reasons = _allowed_reasons()
        width = max(len(k) for k in allowed)
        console.print("allowed, not violations ([bold]--explain[/] for examples, --forbid TYPE to forbid one):")
        examples = result.get("allowed_anomalies") or {}
        for kind, n in allowed.items():
            console.print(f"  [yellow]{kind:<{width}}[/] {n:>6}  {reasons.get(kind, '')}", highlight=False)
            if explain and examples.get(kind):
                console.print(f"      e.g. {_example(examples[kind][0])}", highlight=False)
    for reason in result.get("unknown") or []:
        console.print(f"[bold yellow]unknown[/]: {reason}")
    if result.get("valid") not in (True, "unknown") and result.get("reproduce"):
        console.print(f"reproduce with: {result['reproduce']}", highlight=False)
    console.print(f"run directory: {run_dir}" + (f" (open {report} for the timeline and plots)"
                                                if report else ""), highlight=False)


def _example(anomaly: dict) -> str:
    from rich.markup import escape

    ops = anomaly.get("ops") or []
    listed = ", ".join(map(str, ops[:6])) + (", ..." if len(ops) > 6 else "")
    return escape(str(anomaly.get("explanation")) + (f" [ops {listed}]" if ops else ""))
