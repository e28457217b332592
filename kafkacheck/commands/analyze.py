"""``kafkacheck analyze``: the Spark report over a corpus."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from kafkacheck.commands import SUMMARIES
from kafkacheck.exits import EXIT_INTERRUPTED, EXIT_VALID, UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    ana = sub.add_parser(
        "analyze", help=SUMMARIES["analyze"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Run the Spark jobs of spark_analysis over corpus DIR: corpus-wide anomaly detection "
            "from the raw tables, per-run dependency-cycle checks (applyInPandas), anomaly rates by "
            "fault, fault mix, workload, configuration and bug switch, time from fault to first "
            "anomaly, and the agreement between Spark's findings and the per-run verdicts. Writes "
            "CSV and Markdown tables, PNG plots and an index.html into --out."),
        epilog="On a cluster: spark-submit --master URL path/to/kafkacheck/cli.py analyze DIR --out "
               "REPORT, or --master URL here (see docs/how-to/corpora-and-spark.md).")
    ana.add_argument("corpus", help="a corpus directory (kafkacheck corpus --out)")
    ana.add_argument("--out", metavar="DIR", required=True, help="the report directory")
    ana.add_argument("--master", default=None, metavar="URL", help="the Spark master (default local[*])")
    ana.add_argument("--no-cycles", action="store_true", help="skip the per-run cycle checks")
    ana.add_argument("--no-progress", action="store_true", help="no progress display")


def _exit_on_interrupt(spark, out: Path) -> None:
    """Ctrl-C: one line and exit 130, at once.

    PySpark's own SIGINT handler cancels the jobs and raises KeyboardInterrupt inside py4j's
    socket read, which then logs dozens of lines of tracebacks while the gateway unwinds. Ours
    replaces it (installed after the SparkContext, which installs PySpark's): nothing is left to
    save, as the report is only written whole at the end, and the Spark JVM exits by itself when
    this process's end closes its standard input (PythonGatewayServer watches it).
    """
    import os
    import signal
    import threading

    def quiet() -> None:
        # the tasks under way fail as the JVM exits: nothing in that is news to the user
        try:
            jvm = spark.sparkContext._jvm
            log4j = jvm.org.apache.logging.log4j
            # every logger, Spark's own (configured apart from the root) included
            log4j.core.config.Configurator.setAllLevels(log4j.LogManager.getRootLogger().getName(),
                                                        log4j.Level.OFF)
        except Exception:
            pass

    def stop(signum, frame):
        # another thread, hence another py4j connection: this one may be inside a call
        t = threading.Thread(target=quiet, daemon=True)
        t.start()
        t.join(2.0)
        sys.stdout.flush()
        print(f"kafkacheck analyze: interrupted; no report written to {out}/index.html", file=sys.stderr,
              flush=True)
        os._exit(EXIT_INTERRUPTED)

    signal.signal(signal.SIGINT, stop)


def main(args: argparse.Namespace) -> int:
    corpus = Path(args.corpus)
    if not (corpus / "runs").is_dir():
        raise UsageError(f"{corpus} is not a corpus (no runs/ table); make one with kafkacheck corpus")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    try:
        from spark_analysis.report import analyze
        from spark_analysis.session import get_spark
    except ImportError as e:
        raise UsageError(f"the analysis needs PySpark, pandas and matplotlib ({e.name} is missing): "
                         f"pip install 'kafkacheck[spark]'") from None
    start = time.monotonic()
    quiet = args.no_progress

    def progress(job: str, state: str) -> None:
        if quiet:
            return
        if state == "start":
            print(f"  {job} ...", file=sys.stderr, flush=True)
        else:
            print(f"  {job}: {state}", file=sys.stderr, flush=True)

    if not quiet:
        print("starting Spark ...", file=sys.stderr, flush=True)
    spark = get_spark(master=args.master, app_name="kafkacheck-analyze")
    # a report from an earlier analysis must not pass for this one if this one is interrupted
    (out / "index.html").unlink(missing_ok=True)
    _exit_on_interrupt(spark, out)
    try:
        report = analyze(str(corpus.resolve()), out, spark, cycles=not args.no_cycles, progress=progress)
    except ValueError as e:
        raise UsageError(str(e)) from None
    except Exception as e:  # a failed Spark job: its first line, not a JVM stack trace
        if type(e).__module__.startswith(("pyspark", "py4j")):
            first = next((ln for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
            raise UsageError(f"a Spark job failed: {first[:400]}") from None
        raise
    agree = report.tables.get("agreement")
    dis = report.tables.get("disagreements")
    print(f"report written to {out}/index.html ({time.monotonic() - start:.0f} s)")
    if agree is not None:
        n = 0 if dis is None else len(dis)
        print(f"agreement with the per-run verdicts: {n} disagreement(s) over "
              f"{len(agree)} anomaly families (see {out}/disagreements.csv)")
    return EXIT_VALID
