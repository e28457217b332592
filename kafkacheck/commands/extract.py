"""``kafkacheck extract``: one run of a corpus back out as a run directory."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kafkacheck.commands import SUMMARIES
from kafkacheck.exits import EXIT_VALID, UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    ext = sub.add_parser("extract", help=SUMMARIES["extract"],
                         description="Write run RUN_ID of corpus CORPUS as a run directory (run.json, "
                                     "history.jsonl, events.jsonl) that kafkacheck check, lin and "
                                     "friends read; the corpus keeps only anomaly counts, so "
                                     "results.json is left to kafkacheck check.")
    ext.add_argument("corpus", help="a corpus directory")
    ext.add_argument("run_id", help="the run's id (the runs table's run_id)")
    ext.add_argument("--out", metavar="DIR", required=True, help="the run directory to write")


def main(args: argparse.Namespace) -> int:
    from traces.history import write_jsonl
    from traces.parquet import read_run

    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"--out {out} exists and is not an empty directory")
    record = read_run(Path(args.corpus), args.run_id)
    out.mkdir(parents=True, exist_ok=True)
    (out / "run.json").write_text(json.dumps(record.meta, indent=2, sort_keys=True) + "\n")
    # results.json is left to kafkacheck check: the corpus keeps only the anomaly counts
    write_jsonl(out / "history.jsonl", record.ops)
    if record.events:
        write_jsonl(out / "events.jsonl", record.events)
    print(f"wrote run {args.run_id} ({len(record.ops)} ops) to {out}")
    return EXIT_VALID
