"""The command line the protocol matrices share (benchmarks/kip848.py, benchmarks/kip932.py):
rows of ``kafkacheck conform`` commands (:class:`real_bugs.Row`), each run ``--tries`` times,
every try recorded in ``DIR/NAME.json`` (``--resume`` keeps them), and a table printed by the
matrix's own ``table`` function (``--table`` prints it from DIR alone)."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from real_bugs import Row, one_try


def matrix_main(doc: str, name: str, rows: list[Row], table: Callable[[list[dict]], int]) -> int:
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--tries", type=int, default=3)
    p.add_argument("--only", default="", help="rows whose setup contains this")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--resume", action="store_true", help=f"keep the tries DIR/{name}.json has; run the rest")
    p.add_argument("--table", action="store_true", help=f"print the table of DIR/{name}.json; run nothing")
    a = p.parse_args()
    saved_name = f"{name}.json"
    if a.table:
        if a.out is None or not (a.out / saved_name).exists():
            p.error(f"--table needs --out DIR holding a {saved_name}")
        return table(json.loads((a.out / saved_name).read_text()))
    if a.tries < 1:
        p.error("--tries must be at least 1")
    if a.resume and a.out is None:
        p.error("--resume needs --out DIR")
    out = a.out or Path(tempfile.mkdtemp(prefix=f"kafkacheck-{name}-"))
    out.mkdir(parents=True, exist_ok=True)
    saved = out / saved_name
    recorded = json.loads(saved.read_text()) if a.resume and saved.exists() else []
    done = {r["setup"]: r["tries"] for r in recorded}
    # every row's entry, in the rows' order; rows --only leaves out keep what was recorded
    report = [{"setup": row.setup, "tries": list(done.get(row.setup, [])),
               "command": "kafkacheck " + shlex.join(row.argv(Path(f"runs/{name}")))} for row in rows]
    print(f"run directories in {out}", flush=True)
    for i, row in enumerate(rows):
        if a.only.lower() not in row.setup.lower():
            continue
        tries = report[i]["tries"]
        for t in range(len(tries), a.tries):
            run = out / re.sub(r"[^a-z0-9.]+", "-", row.setup.lower()) / f"try{t + 1}"  # never another row's
            shutil.rmtree(run, ignore_errors=True)
            result = one_try(row, run)
            tries.append(result)
            print(f"{row.setup} | try {t + 1}: {result}", flush=True)
            saved.write_text(json.dumps(report, indent=2) + "\n")
    return table([r for r in report if r["tries"]])
