"""``kafkacheck conform --kafka-version A,B,C``: the same conform command once per version, then
one table of verdicts (:mod:`kafkacheck.conform.matrix`).

Every version is fetched (and so known to Maven Central) before the first starts. Each runs
with the same options and the workload's fixed seed into ``--out/VERSION/`` (its report.json,
junit.xml, report.html and run directory), and its command line, as run.json records it, is
the one that repeats that version alone. Ctrl-C stops the version that runs (its brokers and
clients, as for a single run) and the matrix with it: the unfinished version has no verdict and
no ``matrix.json`` is written.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from kafkacheck.conform.options import ConformOptions
from kafkacheck.exits import EXIT_UNKNOWN, UsageError

MATRIX_FILE = "matrix.json"


def run_matrix(options: ConformOptions) -> int:
    """Run :func:`kafkacheck.conform.suite.conform_once` for each of ``options.versions``, then
    write matrix.json (with the command line of the whole matrix)."""
    from kafkacheck.conform.matrix import bisect, matrix_exit, print_matrix, write_matrix
    from kafkacheck.console import stdout_console

    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MATRIX_FILE).unlink(missing_ok=True)  # an earlier matrix's table never stands for this one's
    console = stdout_console()
    if (code := _fetch_all(options.versions, console)) is not None:
        return code
    rows = []
    what = "Apache Kafka" if options.spawn == "kafka" else "the Java client of Apache Kafka"  # (--client java)
    for i, version in enumerate(options.versions, 1):
        console.print(f"== [{i}/{len(options.versions)}] {what} {version} ==")
        one = replace(options, kafka_version=version, out=str(out / version), versions=[version])
        try:
            rows.append(_row(version, one))
        except KeyboardInterrupt:
            if rows:
                print_matrix(rows, None, console, title="verdicts so far")
            console.print(f"interrupted during {what} {version}: no verdict for it; {MATRIX_FILE} not written")
            raise
    bisection = bisect(rows)
    print_matrix(rows, bisection, console, title=f"verdicts by version of {what} ({len(rows)} versions)")
    write_matrix(rows, bisection, options.command()[0], out / MATRIX_FILE)
    console.print(f"wrote {out / MATRIX_FILE}")
    return matrix_exit(rows)


def _row(version: str, options: ConformOptions):
    """One version run: its row of the matrix."""
    from kafkacheck.conform.matrix import row_from_report, unusable_row
    from kafkacheck.conform.suite import conform_once

    out = Path(options.out)
    try:
        outcome = conform_once(options)
    except UsageError as e:  # this version refuses the command (e.g. a --feature level it lacks)
        print(f"kafkacheck: error: Apache Kafka {version}: {e}", file=sys.stderr)
        return unusable_row(version, str(e), out)
    if outcome.report is None:
        return unusable_row(version, outcome.problem or "the target did not start", out)
    return row_from_report(version, outcome.report, out)


def _fetch_all(versions: list[str], console) -> int | None:
    """Every version's jars in the cache before anything starts: a version Maven Central does
    not have is a usage error; a fetch that fails otherwise is exit 2 (None: all there)."""
    from kafkacheck.real.kafka_dist import KafkaDist, KafkaUnavailable, KafkaVersionUnknown

    for version in versions:
        try:
            KafkaDist(version).fetch(console.print)
        except KafkaVersionUnknown as e:
            raise UsageError(str(e)) from None
        except KafkaUnavailable as e:
            print(f"kafkacheck: error: {e}", file=sys.stderr)
            return EXIT_UNKNOWN
    return None
