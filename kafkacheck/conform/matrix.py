"""One conform command over several Apache Kafka versions (``--kafka-version A,B,C``): the list
checked, and the table of verdicts with the version where the verdict changes.

Theory of operation
-------------------
``kafkacheck conform`` runs the same command (same options; the workload's seed is fixed) once
per version, each into ``--out/VERSION/`` with its own report and run directory
(:mod:`kafkacheck.commands.conform_matrix`, each a :func:`kafkacheck.conform.suite.conform_once`).
This module owns what is around those runs:

* :func:`parse_versions` -- every entry checked before anything starts (the form ``X.Y.Z``, 3.7
  or later, no duplicates); that Maven Central has each is the command's fetch.
* :class:`Row` -- one version's verdict (``pass``, ``fail``, ``unusable``), what failed (the
  workload's anomaly types, failed cases as ``case NAME``) and where its evidence is.
* :func:`bisect` -- the versions in version order (not the order given): the first failing
  version and the last passing one before it when the verdicts go from pass to fail once; when
  they do not (a failure that comes and goes), it says so and names no first failing version.
  Unusable versions have no verdict and are left out of that order, and named.
* :func:`matrix_exit` -- 1 if a version failed, else 2 if one was unusable, else 0.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from kafkacheck.real.kafka_dist import check_version, version_tuple

VERDICTS = ("pass", "fail", "unusable")


def parse_versions(text: str) -> list[str]:
    """The versions of ``--kafka-version A,B,C`` in the order given; ValueError (one line) for
    the first bad entry."""
    entries = [x.strip() for x in text.split(",")]
    if not all(entries):
        raise ValueError(f"--kafka-version {text!r}: an empty entry (expected A,B,C, e.g. 4.2.2,4.3.0)")
    for version in entries:
        check_version(version)
    twice = [v for i, v in enumerate(entries) if v in entries[:i]]
    if twice:
        raise ValueError(f"--kafka-version {text}: {twice[0]} is listed twice")
    return entries


@dataclass(frozen=True)
class Row:
    version: str
    verdict: str  # one of VERDICTS
    anomalies: tuple[str, ...]  # the workload's anomaly types; failed cases as "case NAME"
    run_dir: str  # the workload's run directory, else the version's --out
    reason: str = ""  # why it was unusable

    def __post_init__(self) -> None:
        assert self.verdict in VERDICTS, self.verdict


def row_from_report(version: str, report, out: Path) -> Row:
    """The row of one version's conformance :class:`~kafkacheck.conform.report.Report`."""
    found: list[str] = []
    run_dir = str(out)
    for e in report.entries:
        if e.kind == "workload":
            run_dir = e.details.get("run_dir", run_dir)
        if e.status not in ("fail", "error"):
            continue
        if e.kind == "workload" and e.status == "fail" and e.details.get("anomalies"):
            found += sorted(e.details["anomalies"])
        else:
            found.append(f"{'case' if e.kind == 'case' else 'workload'} {e.name}"
                         + (" (error)" if e.status == "error" else ""))
    verdict = report.verdict
    return Row(version, verdict, tuple(found), run_dir, report.unusable or "")


def unusable_row(version: str, reason: str, out: Path) -> Row:
    """A version whose target could not be started or used: no verdict."""
    return Row(version, "unusable", (), str(out), reason)


@dataclass(frozen=True)
class Bisection:
    first_failing: str | None
    last_passing_before: str | None
    monotonic: bool  # in version order, the verdicts go from pass to fail at most once
    sentence: str


def bisect(rows: list[Row]) -> Bisection:
    """Where, in version order, the verdict turns from pass to fail (see the module's docstring)."""
    decided = sorted((r for r in rows if r.verdict != "unusable"), key=lambda r: version_tuple(r.version))
    unusable = [r.version for r in rows if r.verdict == "unusable"]
    note = f" (no verdict for {', '.join(unusable)}: unusable)" if unusable else ""
    if not decided:
        return Bisection(None, None, True, "no version gave a verdict" + note)
    runs = _runs(decided)
    if all(r.verdict == "pass" for r in decided):
        return Bisection(None, None, True, f"every version passed ({_span(decided)})" + note)
    if len(runs) > 2 or (runs[0][0] == "fail" and len(runs) > 1):
        shown = ", ".join(f"{verdict} {_span(group)}" for verdict, group in runs)
        return Bisection(None, None, False, f"the verdicts are not monotonic in version order ({shown}): no single "
                                            "first failing version" + note)
    first = runs[-1][1][0]
    last = runs[0][1][-1] if len(runs) == 2 else None
    return Bisection(first.version, last.version if last else None, True,
                     f"first failing: {first.version}; "
                     + (f"last passing before it: {last.version}" if last else "no version before it passed") + note)


def _runs(rows: list[Row]) -> list[tuple[str, list[Row]]]:
    """Consecutive rows of the same verdict, grouped."""
    out: list[tuple[str, list[Row]]] = []
    for r in rows:
        if out and out[-1][0] == r.verdict:
            out[-1][1].append(r)
        else:
            out.append((r.verdict, [r]))
    return out


def _span(rows: list[Row]) -> str:
    return rows[0].version if len(rows) == 1 else f"{rows[0].version} to {rows[-1].version}"


def matrix_exit(rows: list[Row]) -> int:
    if any(r.verdict == "fail" for r in rows):
        return 1
    return 2 if any(r.verdict == "unusable" for r in rows) else 0


def matrix_json(rows: list[Row], bisection: Bisection, command: str) -> dict:
    return {"command": command, "versions": [asdict(r) | {"anomalies": list(r.anomalies)} for r in rows],
            "first_failing": bisection.first_failing, "last_passing_before": bisection.last_passing_before,
            "monotonic": bisection.monotonic, "summary": bisection.sentence, "exit": matrix_exit(rows)}


def write_matrix(rows: list[Row], bisection: Bisection, command: str, path: Path) -> None:
    path.write_text(json.dumps(matrix_json(rows, bisection, command), indent=2) + "\n")


STYLE = {"pass": "green", "fail": "red", "unusable": "magenta"}


def print_matrix(rows: list[Row], bisection: Bisection | None, console, title: str = "verdicts by version") -> None:
    from rich.table import Table

    table = Table(title=title)
    for name in ("version", "verdict", "anomalies", "run directory"):
        table.add_column(name, overflow="fold")
    for r in rows:
        what = ", ".join(r.anomalies) or (r.reason if r.verdict == "unusable" else "")
        table.add_row(r.version, f"[{STYLE[r.verdict]}]{r.verdict}[/]", what, r.run_dir)
    console.print(table)
    if bisection is not None:
        console.print(bisection.sentence)
