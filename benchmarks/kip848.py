"""KIP-848's consumer groups on real brokers, measured: the group workloads with
``--group-protocol consumer`` on Apache Kafka (3 nodes) and on the reference broker, with each
client that speaks the protocol, under the default faults plus ``straggle`` of
ConsumerGroupHeartbeat and OffsetCommit (docs/measurements/kip848.md).

    python benchmarks/kip848.py [--tries N] [--only SUBSTRING] [--out DIR [--resume]]
    python benchmarks/kip848.py --out DIR --table   (the table of the tries DIR holds)

Each row is one ``kafkacheck conform --brokers 3 --group-protocol consumer --cases none``
command (20 s of workload), run ``--tries`` times (default 3). Every row expects the run to be
valid: a try is *clean* when the checker reported nothing. Prints a Markdown table and writes
every try to ``DIR/kip848.json``; run directories stay in ``DIR`` (default: a new temporary
directory). A try takes 1 to 2 minutes on a 2-core machine. Needs Java 17+ and Maven.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

from real_bugs import Row, one_try

FAULTS = "sigkill,pause,client-partition,client-delay,straggle"
BASE = ("--brokers", "3", "--group-protocol", "consumer", "--faults", FAULTS,
        "--straggle-api", "ConsumerGroupHeartbeat,OffsetCommit")
CLIENTS = ("java", "confluent")
WORKLOADS = ("groups", "at-most-once", "eos")
EARLIEST_4X = "4.0.0"  # the first release with the protocol generally available (Maven Central)


def _row(target: str, client: str, workload: str) -> Row:
    where = ("--spawn", "reference") if target == "reference" else ("--spawn", "kafka", "--kafka-version", target)
    name = "reference broker" if target == "reference" else f"Kafka {target}"
    return Row("KIP-848", f"{name}, {client}, {workload}", "clean", (*where, *BASE, "--client", client), 20, workload)


ROWS = [_row(t, c, w) for t in ("4.3.1", "4.4.0", EARLIEST_4X, "reference") for c in CLIENTS for w in WORKLOADS]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tries", type=int, default=3)
    p.add_argument("--only", default="", help="rows whose setup contains this")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--resume", action="store_true", help="keep the tries DIR/kip848.json has; run the rest")
    p.add_argument("--table", action="store_true", help="print the table of DIR/kip848.json; run nothing")
    a = p.parse_args()
    if a.table:
        if a.out is None or not (a.out / "kip848.json").exists():
            p.error("--table needs --out DIR holding a kip848.json")
        return _table(json.loads((a.out / "kip848.json").read_text()))
    if a.tries < 1:
        p.error("--tries must be at least 1")
    if a.resume and a.out is None:
        p.error("--resume needs --out DIR")
    out = a.out or Path(tempfile.mkdtemp(prefix="kafkacheck-kip848-"))
    out.mkdir(parents=True, exist_ok=True)
    saved = out / "kip848.json"
    recorded = json.loads(saved.read_text()) if a.resume and saved.exists() else []
    done = {r["setup"]: r["tries"] for r in recorded}
    # every row's entry, in ROWS order; rows --only leaves out keep what was recorded
    report = [{"setup": row.setup, "tries": list(done.get(row.setup, [])),
               "command": "kafkacheck " + shlex.join(row.argv(Path("runs/kip848")))} for row in ROWS]
    print(f"run directories in {out}", flush=True)
    for i, row in enumerate(ROWS):
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
    return _table([r for r in report if r["tries"]])


def exercised(run_dir: str | None) -> Counter | None:
    """What a try's history shows the protocol went through: requests straggle held, commits
    refused, member epochs reached, partitions revoked and lost (None: its history is gone)."""
    out: Counter = Counter()
    path = Path(run_dir or "/nonexistent") / "history.jsonl"
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        o = json.loads(line)
        if o["process"] == "nemesis":
            out["held"] += o["f"] == "straggle" and o["type"] == "info" and bool((o.get("value") or {}).get("held"))
            continue
        out["refused"] += o["f"] in ("commit", "txn") and o["type"] == "fail"
        out["txn offsets"] += o["f"] == "txn" and o["type"] == "ok" and bool(o.get("offsets"))
        for e in o.get("rebalance_log") or ():
            out["lost" if e.get("lost") else e["type"]] += 1
            out["epochs"] = max(out["epochs"], e.get("generation") or 0)
    return out


def _table(report: list[dict]) -> int:
    print("\n| setup | valid in | anomalies | held by straggle | refused commits | transactions with offsets | "
          "revoked / lost | highest member epoch | minutes a try |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    ok = True
    for r in report:
        clean = [t for t in r["tries"] if t["found"] is False]
        kinds = sorted({k for t in r["tries"] for k in t["anomalies"]})
        errors = sorted({t["error"] for t in r["tries"] if t.get("error")})
        ok &= len(clean) == len(r["tries"])
        minutes = ", ".join(str(t["minutes"]) for t in r["tries"])
        seen = [exercised(t.get("run_dir")) for t in r["tries"]]
        if None in seen:  # a try's run directory is gone: what it exercised is unknown
            print(f"| {r['setup']} | {len(clean)} of {len(r['tries'])} | {', '.join(kinds + errors) or '-'} | "
                  f"? | ? | ? | ? | ? | {minutes} |")
            continue
        total = sum(seen, Counter())
        print(f"| {r['setup']} | {len(clean)} of {len(r['tries'])} | {', '.join(kinds + errors) or '-'} | "
              f"{total['held']} | {total['refused']} | {total['txn offsets'] if 'eos' in r['setup'] else '-'} | "
              f"{total['revoked']} / {total['lost']} | "
              f"{max((c['epochs'] for c in seen), default=0)} | {minutes} |")
    print()
    for r in report:
        print(f"- {r['setup']}: `{r['command']}`")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
