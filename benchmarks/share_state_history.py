"""What Kafka's share coordinator recorded of each share-partition during a conform run, read
back from ``__share_group_state`` with Kafka's own DumpLogSegments (``--share-group-state-decoder``),
and every write that moved a share-partition's start offset back: the evidence of the start
offset regression of Kafka 4.3 (MINOR #23074, fixed in 4.4.0: out-of-order WriteShareGroupState
requests lowered the start offset, and a new leader delivered accepted records again).

    python benchmarks/share_state_history.py RUN_DIR [--version 4.3.1] [--all]

RUN_DIR is a ``kafkacheck conform --spawn kafka --workload share --out RUN_DIR`` directory (its
``broker/kafka-N/data``; the first node's copy of the topic is read). Prints, per share-partition
whose start offset went back, its writes (seconds from the first record, record type, leader
epoch, start offset, the first state batches), ``--all`` every share-partition's. Exits 1 when a
start offset went back, 0 when none did, 3 on bad input. Needs Java 17+ and Maven (kafka-tools
VERSION, fetched once into ~/.cache/kafkacheck).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

from kafka20734_repro import fetch_tools

from kafkacheck.real import kafka_dist as kd

LINE = re.compile(r"CreateTime: (\d+).*key: (\{.*?\}\}) payload: (\{.*\})$")


def dump(files: list[Path], version: str) -> list[str]:
    """DumpLogSegments' lines of the share state records in ``files``."""
    tools = fetch_tools(version)
    dist = kd.KafkaDist(version)
    dist.fetch(lambda *a: None)
    classpath = ":".join(str(j) for j in [*sorted(dist.libs.glob("*.jar")), *sorted(tools.glob("*.jar"))])
    out = subprocess.run(["java", "-cp", classpath, "org.apache.kafka.tools.DumpLogSegments",
                          "--share-group-state-decoder", "--print-data-log", "--files", ",".join(map(str, files))],
                         capture_output=True, text=True, timeout=300, check=True)
    return [line for line in out.stdout.splitlines() if "payload:" in line]


def history(lines: list[str]) -> dict[str, list[dict]]:
    """Each share-partition's writes, in time order: (time ms, type, leader epoch, start offset, batches)."""
    by_key: dict[str, list[dict]] = {}
    for line in lines:
        m = LINE.search(line.strip())
        if m is None:
            continue
        key, value = json.loads(m.group(2))["data"], json.loads(m.group(3))["data"]
        name = f"{key['groupId']}:{key['topicId']}:{key['partition']}"
        by_key.setdefault(name, []).append({"ms": int(m.group(1)), "type": json.loads(m.group(2))["type"],
                                            "leader_epoch": value.get("leaderEpoch"),
                                            "start": value.get("startOffset"),
                                            "batches": value.get("stateBatches", [])})
    for writes in by_key.values():
        writes.sort(key=lambda w: w["ms"])
    return by_key


def regressions(writes: list[dict]) -> list[int]:
    """The indices of the writes whose start offset is below the highest set before them."""
    high, out = -1, []
    for i, w in enumerate(writes):
        if w["start"] is None or w["start"] < 0:
            continue
        if w["start"] < high:
            out.append(i)
        high = max(high, w["start"])
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", type=Path)
    p.add_argument("--version", default="4.3.1", help="the Kafka whose DumpLogSegments reads the records")
    p.add_argument("--all", action="store_true", help="every share-partition, not only those that went back")
    a = p.parse_args()
    files = sorted(a.run_dir.glob("broker/kafka-1/data/__share_group_state-*/*.log"))
    if not files:
        print(f"share_state_history.py: no __share_group_state log under {a.run_dir}/broker/kafka-1/data",
              file=sys.stderr)
        return 3
    by_key = history(dump(files, a.version))
    t0 = min((w["ms"] for ws in by_key.values() for w in ws), default=0)
    went_back = 0
    for name, writes in sorted(by_key.items()):
        back = regressions(writes)
        went_back += len(back)
        if not back and not a.all:
            continue
        print(f"{name}: {len(writes)} writes, {len(back)} moved the start offset back")
        for i, w in enumerate(writes):
            mark = "  <- start offset went back" if i in back else ""
            print(f"  {(w['ms'] - t0) / 1000:7.2f} s  type {w['type']}  leader epoch {w['leader_epoch']}  "
                  f"start {w['start']}  {json.dumps(w['batches'][:2])[:100]}{mark}")
    print(f"{went_back} write(s) moved a start offset back")
    return 1 if went_back else 0


if __name__ == "__main__":
    sys.exit(main())
