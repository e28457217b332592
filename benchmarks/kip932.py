"""KIP-932's share groups on real brokers, measured: the share workload on Apache Kafka (3 nodes)
and on the reference broker, with each client that has a share consumer (Apache Kafka's Java
client, confluent-kafka's), under the default faults and under ``straggle`` of ShareFetch and
ShareAcknowledge (docs/measurements/kip932.md).

    python benchmarks/kip932.py [--tries N] [--only SUBSTRING] [--out DIR [--resume]]
    python benchmarks/kip932.py --out DIR --table   (the table of the tries DIR holds)

Each row is one ``kafkacheck conform --brokers 3 --cases none --workload share`` command (60 s
of workload), run ``--tries`` times (default 3). Every row expects the run to be valid: a try
is *clean* when the checker reported nothing. Prints a Markdown table and writes every try to
``DIR/kip932.json``; run directories stay in ``DIR`` (default: a new temporary directory). A
try takes about 1.5 minutes on a 2-core machine. Needs Java 17+ and Maven.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from real_bugs import Row
from row_matrix import clean_table, matrix_main

DEFAULT_FAULTS = "sigkill,pause,client-partition,client-delay"  # kafkacheck conform's default
STRAGGLE = ("--faults", "straggle", "--straggle-api", "ShareFetch,ShareAcknowledge")
CLIENTS = ("java", "confluent")
TARGETS = ("4.3.1", "4.4.0", "4.2.2", "reference")  # 4.2: share groups generally available


def _row(target: str, client: str, straggle: bool) -> Row:
    where = ("--spawn", "reference") if target == "reference" else ("--spawn", "kafka", "--kafka-version", target)
    name = "reference broker" if target == "reference" else f"Kafka {target}"
    faults = STRAGGLE if straggle else ("--faults", DEFAULT_FAULTS)
    return Row("KIP-932", f"{name}, {client}, {'straggle' if straggle else 'default faults'}", "clean",
               (*where, "--brokers", "3", *faults, "--client", client), 60, "share")


ROWS = [_row(t, c, s) for t in TARGETS for c in CLIENTS for s in (False, True)]


def main() -> int:
    return matrix_main(__doc__, "kip932", ROWS, _table)


def exercised(run_dir: str | None) -> Counter | None:
    """What a try's history shows the share group went through: records acquired and acquired
    again (a delivery count above 1), acknowledgements refused (INVALID_RECORD_STATE) and of
    unknown outcome, requests straggle held back, and the allowed anomalies (None: gone)."""
    out: Counter = Counter()
    base = Path(run_dir or "/nonexistent")
    if not (base / "history.jsonl").exists():
        return None
    for line in (base / "history.jsonl").read_text().splitlines():
        o = json.loads(line)
        if o["process"] == "nemesis":
            out["held"] += o["f"] == "straggle" and o["type"] == "info" and bool((o.get("value") or {}).get("held"))
            continue
        if o["f"] == "acquire" and o["type"] == "ok":
            counts = [n for records in o["value"].values() for _off, _v, n in records]
            out["acquired"] += len(counts)
            out["again"] += sum(n > 1 for n in counts)
        elif o["f"] == "ack" and o["type"] == "ok":
            for error in o["value"]["errors"].values():
                out["refused" if error == "INVALID_RECORD_STATE" else "unknown" if error != "NONE" else "applied"] += 1
    results = base / "results.json"
    if results.exists():
        out.update({f"allowed {k}": n for k, n in json.loads(results.read_text()).get("allowed", {}).items()
                    if k.startswith("share-")})
    return out


COLUMNS = ["records acquired", "again (count > 1)", "acks applied / refused / unknown", "held by straggle",
           "allowed"]


def _cells(r: dict, seen: list[Counter]) -> list[object]:
    t = sum(seen, Counter())
    allowed = ", ".join(f"{k.removeprefix('allowed ')} {n}" for k, n in sorted(t.items())
                        if k.startswith("allowed ")) or "-"
    return [t["acquired"], t["again"], f"{t['applied']} / {t['refused']} / {t['unknown']}", t["held"], allowed]


def _table(report: list[dict]) -> int:
    return clean_table(report, COLUMNS, exercised, _cells)

if __name__ == "__main__":
    sys.exit(main())
