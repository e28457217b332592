"""KAFKA-20734: what becomes of a committed transaction's records at a partition whose marker
was skipped, when the same producer's next transaction there commits or aborts, for each client
and transaction version.

    python benchmarks/kafka20734_outcomes.py [--version 4.4.0] [--only CLIENT]

For each client (kafka-python and confluent-kafka speak transaction version 1; Apache Kafka's
Java client speaks 2 on a cluster at ``transaction.version=2``, Kafka 4.x's default, and 1 on
one formatted with ``transaction.version=1``), on a three-node Kafka cluster with a topic ``out``
whose partition 0 is on node 1 and partition 1 on node 2:

1. two transactional producers (``tx-commit`` and ``tx-abort``) each write one record to
   ``out-0`` and one to ``out-1`` (acknowledged);
2. node 2 is killed (kill -9); once ``out-1`` has no leader, both commit (acknowledged): Kafka
   4.3.0 to 4.4.0 skip ``out-1``'s markers ("likely deleted already and hence can be skipped");
3. node 2 is restarted; ``out-1``'s last stable offset and high watermark are read;
4. each producer's next transaction writes ``out-1`` again; ``tx-commit`` commits it,
   ``tx-abort`` aborts it;
5. ``out-1`` is read read_committed and read_uncommitted: a first transaction's record that
   read_committed returns was committed by the next marker; one that only read_uncommitted
   returns was aborted by it (a commit the client was told succeeded, undone at ``out-1`` while
   its ``out-0`` record stands); one still past the last stable offset is open.

Prints a Markdown table. About a minute a client. Needs Java 17+ and Maven.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from kafkacheck.conform.apache_kafka import KafkaCluster
from kafkacheck.conform.offline import create_placed_topics
from kafkacheck.real.kafka_dist import KafkaDist
from kafkacheck.real.kinds import make_txn_sender
from kafkacheck.serve import partition_states

CONFIGS = [("kafka-python", {}), ("confluent", {}), ("java", {}), ("java", {"transaction.version": 1})]
THEN = ("commit", "abort")


def _leaderless(cluster: KafkaCluster, timeout_s: float = 60.0) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            if partition_states(cluster.nodes[0].host, cluster.nodes[0].client_port, "out").get(1, (0,))[0] < 0:
                return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("out-1 kept a leader for a minute after its node was killed")


def _ids_away_from(bootstrap: str, node: int) -> list[str]:
    """Two transactional ids whose coordinator is not ``node`` (the one killed: a coordinator that
    moves while the commit waits is another story than this one)."""
    from kafkacheck.conform.txn_probe import TxnView

    view, deadline = TxnView(bootstrap, [1, 2, 3]), time.monotonic() + 60
    while time.monotonic() < deadline:  # (the first asks create __transaction_state)
        ids = [i for i in (f"tx-{n}" for n in range(20)) if view.coordinator(i, 1) not in (node, None)]
        if len(ids) >= 2:
            return ids[:2]
        time.sleep(1)
    raise RuntimeError(f"no two transactional ids with a coordinator other than node {node}")


def _read(bootstrap: str, isolation: str) -> dict[int, int]:
    """out-1 from the beginning: offset -> value."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, auto_offset_reset="earliest",
                      consumer_timeout_ms=3000, enable_auto_commit=False)
    try:
        c.assign([TopicPartition("out", 1)])
        return {m.offset: int(m.value) for m in c}
    finally:
        c.close()


def _stable(bootstrap: str) -> list[int]:
    from kafka import KafkaConsumer, TopicPartition

    tp, out = TopicPartition("out", 1), []
    for isolation in ("read_committed", "read_uncommitted"):
        c = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation)
        try:
            out.append(c.end_offsets([tp])[tp])
        finally:
            c.close()
    return out


def scenario(version: str, kind: str, features: dict, work: Path, log=print) -> list[dict]:
    """One client and feature set: what became of each producer's first record at out-1."""
    cluster = KafkaCluster(KafkaDist(version), work, 3, features=features)
    producers: dict = {}
    try:
        cluster.start()
        bs = cluster.bootstrap
        if error := create_placed_topics(bs, {"out:0": [1], "out:1": [2]}, None, 20.0):
            raise RuntimeError(f"could not create out: {error}")
        time.sleep(2)
        ids = _ids_away_from(bs, 2)
        producers = {then: make_txn_sender(kind, bs, ids[i], 20.0) for i, then in enumerate(THEN)}
        first = {then: 10 + i for i, then in enumerate(THEN)}
        for then, p in producers.items():
            p.begin()
            p.send("out", 0, first[then])
            p.send("out", 1, first[then])
        cluster.processes()["kafka-2"].kill()
        log(f"  {kind}: out-1 without a leader {_leaderless(cluster):.1f} s after node 2 was killed")
        for p in producers.values():
            p.commit()
        cluster.processes()["kafka-2"].start()
        cluster.wait_ready(90)
        time.sleep(3)
        stuck = _stable(bs)
        for i, (then, p) in enumerate(producers.items()):
            p.begin()
            p.send("out", 1, 20 + i)
            p.commit() if then == "commit" else p.abort()
        time.sleep(3)
        committed, logged = _read(bs, "read_committed"), _read(bs, "read_uncommitted")
        skipped = sum("likely deleted already" in (work / f"kafka-{n}.log").read_text(errors="replace")
                      for n in (1, 2, 3))
        return [{"then": then, "stuck": stuck, "skipped": skipped > 0,
                 "became": "committed" if first[then] in committed.values() else
                           "aborted" if first[then] in logged.values() else "lost",
                 "final": _stable(bs)} for then in THEN]
    finally:
        cluster.stop()  # first: a producer's close may wait for brokers that are gone
        for p in producers.values():
            p.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default="4.4.0")
    ap.add_argument("--only", default="", help="only this client (kafka-python, confluent, java)")
    a = ap.parse_args()
    rows = []
    for kind, features in CONFIGS:
        if a.only and a.only != kind:
            continue
        tv = features.get("transaction.version", 2 if kind == "java" else 1)
        if kind == "java":
            from kafkacheck.real.java import build_driver, stop_driver, use_driver

            dist = KafkaDist(a.version)
            build_driver(dist)
        with tempfile.TemporaryDirectory(prefix="kafka20734-outcomes-") as tmp:
            if kind == "java":
                use_driver(dist, Path(tmp) / "java-client.log")
            try:
                rows += [(kind, tv, r) for r in scenario(a.version, kind, features, Path(tmp) / "kafka")]
            finally:
                if kind == "java":
                    stop_driver()
    print(f"\nApache Kafka {a.version}: a committed transaction's record at a partition whose marker was skipped\n")
    print("| client | transaction version | marker skipped | out-1 [LSO, HW] after the restart | "
          "the producer's next transaction there | the first record became | out-1 [LSO, HW] at the end |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for kind, tv, r in rows:
        print(f"| {kind} | {tv} | {'yes' if r['skipped'] else 'no'} | {r['stuck']} | {r['then']}s | {r['became']} | "
              f"{r['final']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
