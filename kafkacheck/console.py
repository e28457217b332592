"""Human-readable output: the progress bar and the verdict table (rich)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


@contextlib.contextmanager
def progress_bar(disabled: bool, total: int) -> Iterator:
    if disabled:
        yield None
        return
    with Progress(TextColumn("simulating"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("ops"), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=True) as p:
        task = p.add_task("ops", total=total)
        yield lambda done, _total: p.update(task, completed=done)


def print_verdict(result: dict, run_dir: Path, meta: dict) -> None:
    console = Console()
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
    for kind, n in (result.get("allowed") or {}).items():
        table.add_row(f"allowed: {kind}", str(n))
    console.print(table)
    counts = result.get("counts", {})
    for kind in result.get("anomaly_types", []):
        items = result["anomalies"].get(kind, [])
        console.print(f"[bold red]{kind}[/]: {counts.get(kind, len(items))}")
        for a in items[:5]:
            ops = a.get("ops") or []
            console.print(f"  - {a.get('explanation')}" + (f" [ops {ops[:6]}]" if ops else ""))
        if len(items) > 5:
            console.print(f"  ... {counts.get(kind, len(items)) - 5} more in results.json")
    examples = result.get("allowed_anomalies") or {}
    if examples:
        console.print("[bold]allowed[/] (reported, not violations; --forbid TYPE makes one a violation):")
        for kind, items in examples.items():
            console.print(f"  [yellow]{kind}[/] ({(result.get('allowed') or {}).get(kind, len(items))}), "
                          f"e.g. {items[0].get('explanation')}")
    for reason in result.get("unknown") or []:
        console.print(f"[bold yellow]unknown[/]: {reason}")
    valid = result.get("valid")
    if valid is True:
        console.print("[bold green]valid[/]: no anomaly found")
    elif valid == "unknown":
        console.print("[bold yellow]unknown[/]: the checker could not decide")
    else:
        console.print("[bold red]INVALID[/]")
        if result.get("reproduce"):
            console.print(f"reproduce with: {result['reproduce']}")
    console.print(f"run directory: {run_dir}")
