"""KAFKA-20734, measured: the hanging transaction under ``--faults offline-partition`` on every
Apache Kafka version, client and workload of docs/measurements/kafka-20734.md, and on the
patched 4.3.1 build of benchmarks/kafka20734_fix.py.

    python benchmarks/kafka20734.py [--tries N] [--only SUBSTRING] [--out DIR [--resume [--rejudge]]]

Each row is one ``kafkacheck conform --spawn kafka --brokers 3 --faults offline-partition
--cases none`` command (the workload's default 20 s), run as many times as the row says
(``--tries`` overrides every row). A try *found* the bug when the checker reported
``hanging-transaction``; it is *clean* when the checker reported nothing at all. Rows that expect
"found" must find it in every try, rows that expect "clean" nothing in any. Prints a Markdown
table (with what became of the hanging transactions' records: open, committed-later, aborted)
and writes every try to ``DIR/kafka20734.json``; run directories stay in ``DIR`` (default: a
new temporary directory). The patched build is made first if it is not in the cache. A try
takes 0.6 to 1.1 minutes (2 when a transaction stays open: the final read waits for it), every
row about 21 minutes on a 2-core machine. Needs Java 17+ and Maven.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from real_bugs import Row, one_try

ROOT = Path(__file__).resolve().parent.parent
BASE = ("--spawn", "kafka", "--brokers", "3", "--faults", "offline-partition")
CLIENTS = ("kafka-python", "confluent", "java")
FOUND = "hanging-transaction"


def patched_home() -> Path:
    from kafkacheck.real.kafka_dist import cache_root

    return cache_root() / "kafka-4.3.1-kafka20734"


@dataclass(frozen=True)
class Case:
    row: Row
    tries: int


def _case(version: str, client: str, workload: str, expect: str, tries: int, home: bool = False) -> Case:
    where = ("--kafka-home", str(patched_home())) if home else ("--kafka-version", version)
    setup = f"{'patched 4.3.1 (KAFKA-20734 fix)' if home else 'Kafka ' + version}, {client}, {workload}"
    return Case(Row("KAFKA-20734", setup, expect, (*BASE, *where, "--client", client), 20, workload), tries)


CASES = [
    *(_case("4.4.0", c, "txn", "found", 3) for c in CLIENTS),
    *(_case(v, c, "txn", "found", 1) for v in ("4.3.1", "4.3.0") for c in CLIENTS),
    *(_case("4.4.0", c, "eos", "found", 1) for c in CLIENTS),
    _case("4.2.2", "kafka-python", "txn", "clean", 3),
    *(_case("4.2.2", c, "txn", "clean", 1) for c in CLIENTS[1:]),
    *(_case(v, "kafka-python", "txn", "clean", 1) for v in ("4.1.2", "4.0.2", "3.9.1")),
    _case("4.3.1", "kafka-python", "txn", "clean", 3, home=True),
    *(_case("4.3.1", c, "txn", "clean", 1, home=True) for c in CLIENTS[1:]),
]


def outcomes(run_dir: str | None) -> list[str]:
    """What became of each hanging transaction's records in a try."""
    try:
        results = json.loads((Path(run_dir or "/nonexistent") / "results.json").read_text())
    except (OSError, ValueError):
        return []
    return [a.get("outcome", "?") for a in results.get("anomalies", {}).get(FOUND, [])]


def rejudge(t: dict) -> None:
    """A recorded try judged again from its run directory (history.jsonl and run.json), its
    results.json rewritten: the verdicts of one table come from one checker."""
    from properties.checker import check
    from traces.history import iter_history

    run_dir = Path(t.get("run_dir") or "/nonexistent")
    if not (run_dir / "history.jsonl").exists():
        return
    config = json.loads((run_dir / "run.json").read_text())["config"]
    results = check(iter_history(run_dir / "history.jsonl"), config)
    (run_dir / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    t["anomalies"] = results.get("anomaly_types", [])
    t["found"] = bool(t["anomalies"])
    t["outcomes"] = outcomes(str(run_dir))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tries", type=int, default=0, help="tries of every row (default: the row's own)")
    p.add_argument("--only", default="", help="rows whose setup contains this")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--resume", action="store_true", help="keep the tries DIR/kafka20734.json has; run the rest")
    p.add_argument("--rejudge", action="store_true",
                   help="with --resume: judge every recorded try's history again with this checker first")
    a = p.parse_args()
    if (a.resume or a.rejudge) and a.out is None:
        p.error("--resume and --rejudge need --out DIR")
    out = a.out or Path(tempfile.mkdtemp(prefix="kafkacheck-kafka20734-"))
    out.mkdir(parents=True, exist_ok=True)
    cases = [c for c in CASES if a.only.lower() in c.row.setup.lower()]
    if any("--kafka-home" in c.row.args for c in cases) and not (patched_home() / "libs").is_dir():
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kafka20734_fix.py")], check=True)
    recorded = json.loads((out / "kafka20734.json").read_text()) if a.resume and (out / "kafka20734.json").exists() \
        else []
    if a.rejudge:
        for r in recorded:
            for t in r["tries"]:
                rejudge(t)
    done = {r["setup"]: r["tries"] for r in recorded}
    report = []
    print(f"run directories in {out}", flush=True)
    for case in cases:
        row, i = case.row, CASES.index(case)
        tries = list(done.get(row.setup, []))
        report.append({"setup": row.setup, "expect": row.expect, "tries": tries,
                       "command": "kafkacheck " + shlex.join(row.argv(Path("runs/kafka20734")))})
        for t in range(len(tries), a.tries or case.tries):
            run = out / f"row{i}-try{t + 1}"
            shutil.rmtree(run, ignore_errors=True)
            result = one_try(row, run)
            result["outcomes"] = outcomes(result.get("run_dir"))
            tries.append(result)
            print(f"{row.setup} | try {t + 1}: {result}", flush=True)
            (out / "kafka20734.json").write_text(json.dumps(report, indent=2) + "\n")
    return _table(report)


def _table(report: list[dict]) -> int:
    print("\n| setup | expected | found in | anomalies | hanging transactions (what became of them) | as expected |")
    print("| --- | --- | --- | --- | --- | --- |")
    ok = True
    for r in report:
        found = [t for t in r["tries"] if FOUND in t["anomalies"]]
        kinds = sorted({k for t in r["tries"] for k in t["anomalies"]})
        fates = Counter(o for t in r["tries"] for o in t.get("outcomes", []))
        good = (len(found) == len(r["tries"])) if r["expect"] == "found" else \
            all(t["found"] is False for t in r["tries"])
        ok &= good
        print(f"| {r['setup']} | {r['expect']} | {len(found)} of {len(r['tries'])} | {', '.join(kinds) or '-'} | "
              f"{', '.join(f'{n} {o}' for o, n in sorted(fates.items())) or '-'} | {'yes' if good else 'NO'} |")
    print()
    for r in report:
        print(f"- {r['setup']}: `{r['command']}`")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
