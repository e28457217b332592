"""The conformance report: a terminal table, ``report.json``, JUnit XML and one HTML page."""

from __future__ import annotations

import html
import json
import os
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Entry:
    kind: str  # "case" or "workload"
    name: str
    guarantee: str
    source: str
    status: str  # pass, fail, skip, error
    evidence: str
    seconds: float
    details: dict = field(default_factory=dict)


@dataclass
class Report:
    target: str
    bootstrap: str
    client: str
    started: str
    apis: dict[str, list[int]]
    target_version: str = "unknown"  # "Apache Kafka 4.3.1", "reference 0.1.0", ...
    brokers: int = 1
    features: dict[str, int] = field(default_factory=dict)  # Apache Kafka's --feature levels, as formatted
    bugs: list[str] = field(default_factory=list)  # the reference broker's bug switches (--bug)
    group_protocol: str | None = None  # the group workloads' members' protocol (--group-protocol); None: no group
    entries: list[Entry] = field(default_factory=list)
    nemesis: list[dict] = field(default_factory=list)
    unusable: str | None = None  # the broker stopped answering: why; the report is partial

    def counts(self) -> dict[str, int]:
        out = {"pass": 0, "fail": 0, "skip": 0, "error": 0}
        for e in self.entries:
            out[e.status] = out.get(e.status, 0) + 1
        return out

    @property
    def verdict(self) -> str:
        if self.unusable is not None:
            return "unusable"
        c = self.counts()
        return "fail" if c["fail"] or c["error"] else "pass"


STYLE = {"pass": "green", "fail": "red", "skip": "yellow", "error": "magenta"}


def print_table(report: Report, console) -> None:
    """The verdict with its counts, then a row a case."""
    from rich.table import Table

    c = report.counts()
    console.print(f"[bold]{report.verdict.upper()}[/]: {c['pass']} passed, {c['fail']} failed, "
                  f"{c['error']} errors, {c['skip']} skipped")
    table = Table(title=f"conformance: {report.target_version} ({report.brokers} broker"
                        f"{'s' if report.brokers != 1 else ''}, {report.bootstrap}) with {report.client}"
                        + (f", {report.group_protocol} group protocol" if report.group_protocol else ""))
    table.add_column("kind")
    table.add_column("name")
    table.add_column("result")
    table.add_column("s", justify="right")
    table.add_column("evidence", overflow="fold")
    for e in report.entries:
        table.add_row(e.kind, e.name, f"[{STYLE[e.status]}]{e.status}[/]", f"{e.seconds:.1f}", e.evidence)
    console.print(table)


def write_json(report: Report, path: Path) -> None:
    d = asdict(report)
    d["counts"] = report.counts()
    d["verdict"] = report.verdict
    d["unusable"] = report.unusable
    path.write_text(json.dumps(d, indent=2, default=str) + "\n")


def write_junit(report: Report, path: Path) -> None:
    c = report.counts()
    suite = ET.Element("testsuite", name=f"kafkacheck-conform-{report.target}", tests=str(len(report.entries)),
                       failures=str(c["fail"]), errors=str(c["error"]), skipped=str(c["skip"]),
                       time=f"{sum(e.seconds for e in report.entries):.3f}", timestamp=report.started)
    props = ET.SubElement(suite, "properties")
    for k, v in (("bootstrap", report.bootstrap), ("client", report.client), ("target_version", report.target_version),
                 ("brokers", str(report.brokers)), ("bug_switches", ",".join(report.bugs) or "none"),
                 *((("group_protocol", report.group_protocol),) if report.group_protocol else ())):
        ET.SubElement(props, "property", name=k, value=v)
    for e in report.entries:
        tc = ET.SubElement(suite, "testcase", classname=f"conform.{e.kind}", name=e.name, time=f"{e.seconds:.3f}")
        if e.status == "fail":
            ET.SubElement(tc, "failure", message=e.evidence[:500]).text = json.dumps(e.details, default=str)[:20000]
        elif e.status == "error":
            ET.SubElement(tc, "error", message=e.evidence[:500]).text = json.dumps(e.details, default=str)[:20000]
        elif e.status == "skip":
            ET.SubElement(tc, "skipped", message=e.evidence[:500])
        ET.SubElement(tc, "system-out").text = f"{e.guarantee} ({e.source})\n{e.evidence}"
    ET.ElementTree(suite).write(path, encoding="utf-8", xml_declaration=True)


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
h1{font-size:1.5em} .meta{color:#555}
.summary span{display:inline-block;margin-right:1em;padding:.2em .6em;border-radius:4px;color:#fff}
table{border-collapse:collapse;width:100%;margin-top:1em}
th,td{border-bottom:1px solid #ddd;padding:.45em;text-align:left;vertical-align:top}
th{background:#f4f4f4}
.pass{background:#2e7d32}.fail{background:#c62828}.skip{background:#f9a825}.error{background:#6a1b9a}
td.status span{color:#fff;padding:.1em .5em;border-radius:3px}
details pre{white-space:pre-wrap;background:#fafafa;padding:.5em;border:1px solid #eee;max-height:20em;overflow:auto}
.guarantee{color:#444}.source{color:#777;font-size:.85em}
"""


def write_html(report: Report, path: Path) -> None:
    c = report.counts()
    rows = []
    for e in report.entries:
        detail = ""
        if e.details:
            detail = ("<details><summary>details</summary><pre>"
                      + html.escape(json.dumps(e.details, indent=2, default=str)) + "</pre></details>")
        run_dir = e.details.get("run_dir") if e.details else None
        if run_dir and (Path(run_dir) / "report.html").exists():  # the workload's own report (kafkacheck/report.py)
            page = os.path.relpath(Path(run_dir) / "report.html", path.parent)
            detail = f"<div><a href='{html.escape(page)}'>the run's report: timeline, anomalies</a></div>" + detail
        rows.append(
            f"<tr><td>{html.escape(e.kind)}</td><td><b>{html.escape(e.name)}</b>"
            f"<div class='guarantee'>{html.escape(e.guarantee)}</div>"
            f"<div class='source'>{html.escape(e.source)}</div></td>"
            f"<td class='status'><span class='{e.status}'>{e.status}</span></td>"
            f"<td>{e.seconds:.1f}</td><td>{html.escape(e.evidence)}{detail}</td></tr>")
    nemesis = ""
    if report.nemesis:
        rows_n = "".join(
            f"<tr><td>{n.get('at_s', '')}</td><td>{html.escape(str(n.get('f', '')))}</td>"
            f"<td>{html.escape(str(n.get('node', '')))}</td><td>"
            + html.escape(", ".join(f"{k} {v}" for k, v in n.items() if k not in ("at_s", "f", "node")))
            + "</td></tr>" for n in report.nemesis)
        nemesis = ("<h2>Faults injected during the workload</h2><table><tr><th>at (s)</th><th>fault</th>"
                   f"<th>target</th><th></th></tr>{rows_n}</table>")
    from reference.server.protocol import REQUESTS

    def api_name(key: str) -> str:
        cls = REQUESTS.get(int(key))
        return cls.__name__.removesuffix("Request") if cls is not None else f"key {key}"

    protocol = f" ({report.group_protocol} group protocol)" if report.group_protocol else ""
    apis = ", ".join(f"{api_name(k)} {v[0]}-{v[1]}" for k, v in sorted(report.apis.items(), key=lambda kv: int(kv[0])))
    page = f"""<!doctype html><html><head><meta charset="utf-8">
<title>kafkacheck conformance: {html.escape(report.target)}</title><style>{_CSS}</style></head><body>
<h1>kafkacheck conformance: {html.escape(report.target_version)} &mdash; {report.verdict.upper()}</h1>
<p class="meta">{report.brokers} broker(s) &middot; bootstrap {html.escape(report.bootstrap)}
&middot; client {html.escape(report.client)}{html.escape(protocol)}
&middot; bug switches {html.escape(", ".join(report.bugs) or "none")}
&middot; started {html.escape(report.started)}</p>
<p class="summary"><span class="pass">{c['pass']} passed</span><span class="fail">{c['fail']} failed</span>
<span class="error">{c['error']} errors</span><span class="skip">{c['skip']} skipped</span></p>
<table><tr><th>kind</th><th>case / guarantee</th><th>result</th><th>s</th><th>evidence</th></tr>
{''.join(rows)}</table>{nemesis}
<p class="meta">APIs the broker advertises (versions): {html.escape(apis)}</p>
</body></html>
"""
    path.write_text(page)
