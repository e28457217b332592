"""``kafkacheck analyze``: the Spark report over a corpus (spark_analysis/report.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path


def cmd_analyze(args) -> int:
    from kafkacheck.cli import EXIT_VALID, UsageError

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
