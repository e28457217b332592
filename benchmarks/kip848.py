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

import json
import sys
from collections import Counter
from pathlib import Path

from real_bugs import Row
from row_matrix import clean_table, matrix_main

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
    return matrix_main(__doc__, "kip848", ROWS, _table)


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


COLUMNS = ["held by straggle", "refused commits", "transactions with offsets", "revoked / lost",
           "highest member epoch"]


def _cells(r: dict, seen: list[Counter]) -> list[object]:
    total = sum(seen, Counter())
    return [total["held"], total["refused"], total["txn offsets"] if "eos" in r["setup"] else "-",
            f"{total['revoked']} / {total['lost']}", max((c["epochs"] for c in seen), default=0)]


def _table(report: list[dict]) -> int:
    return clean_table(report, COLUMNS, exercised, _cells)

if __name__ == "__main__":
    sys.exit(main())
