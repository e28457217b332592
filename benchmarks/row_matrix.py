"""What the protocol matrices share (benchmarks/kip848.py, benchmarks/kip932.py): the command
line (rows of ``kafkacheck conform`` commands, :class:`real_bugs.Row`, each run ``--tries``
times, every try recorded in ``DIR/NAME.json``, ``--resume`` keeping them, ``--table`` printing
the table from DIR alone) and the table of rows that expect every try clean."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import tempfile
from collections import Counter
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


def clean_table(report: list[dict], columns: list[str], exercised: Callable[[str | None], Counter | None],
                cells: Callable[[dict, list[Counter]], list[object]]) -> int:
    """The Markdown table of rows that expect every try clean: setup, valid in, anomalies, the
    matrix's own ``columns`` (``cells(row, what each try exercised)``; ``?`` when a try's run
    directory is gone) and minutes a try; then each row's command. 0 when every try was clean."""
    print("\n| " + " | ".join(["setup", "valid in", "anomalies", *columns, "minutes a try"]) + " |")
    print("|" + " --- |" * (len(columns) + 4))
    ok = True
    for r in report:
        clean = [t for t in r["tries"] if t["found"] is False]
        kinds = sorted({k for t in r["tries"] for k in t["anomalies"]})
        errors = sorted({t["error"] for t in r["tries"] if t.get("error")})
        ok &= len(clean) == len(r["tries"])
        minutes = ", ".join(str(t["minutes"]) for t in r["tries"])
        seen = [exercised(t.get("run_dir")) for t in r["tries"]]
        # (a try's run directory gone: what it exercised is unknown)
        middle = ["?"] * len(columns) if None in seen else cells(r, seen)
        print(f"| {r['setup']} | {len(clean)} of {len(r['tries'])} | {', '.join(kinds + errors) or '-'} | "
              + " | ".join(map(str, middle)) + f" | {minutes} |")
    print()
    for r in report:
        print(f"- {r['setup']}: `{r['command']}`")
    return 0 if ok else 1
