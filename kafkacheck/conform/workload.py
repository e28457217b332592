"""The ``queue`` workload with real clients against a real broker, recorded as a history.

Theory of operation
-------------------
Producer threads send unique integers to the keys (partitions) of one topic, one send per
op, with an idempotent acks=all producer; consumer threads are assigned every key and poll.
Each op is recorded as an invoke and its completion in TRACE_FORMAT.md (time: wall-clock
nanoseconds since the start): ``ok`` with the offset, ``fail`` when the broker certainly
refused, ``info`` when the outcome is unknown (a timeout, a lost connection), after which
the client is rebuilt under a new process id. A nemesis thread, when kafkacheck started the
broker, kills (kill -9) and restarts, or pauses (SIGSTOP) and resumes, broker processes,
recorded as nemesis ops; with a fault proxy in front of each broker it also cuts clients off
(both ways or one), delays or resets their connections. At the end every fault is healed, the cluster is waited for, and a
final reader reads every key from the beginning up to its end offset. The history is
written as a run directory and judged by the same checker as the simulator's runs
(:func:`properties.queue.check`): lost acknowledged writes, duplicates, reordering, reads
of values never written...
"""

from __future__ import annotations

import contextlib
import datetime
import json
import random
import threading
import time
from pathlib import Path
from typing import Any

import kafkacheck
from traces.history import Recorder, write_jsonl

PARTITIONS = 4
PROCESS_FAULTS = ["kill", "pause"]
NETWORK_FAULTS = ["partition", "one-way", "delay", "drop"]


class History:
    """A thread-safe recorder on the wall clock."""

    def __init__(self) -> None:
        self.recorder = Recorder()
        self.lock = threading.Lock()
        self.t0 = time.monotonic_ns()
        self.next_process = 0

    def now(self) -> int:
        return time.monotonic_ns() - self.t0

    def op(self, process: int | str, type_: str, f: str, value: Any, **extra: Any) -> None:
        with self.lock:
            self.recorder.op(self.now(), process, type_, f, value, **extra)

    def new_process(self) -> int:
        with self.lock:
            self.next_process += 1
            return self.next_process


# ---------------------------------------------------------------- client handles


class _Sender:
    def __init__(self, kind: str, bootstrap: str, timeout_s: float) -> None:
        self.kind, self.timeout_s = kind, timeout_s
        if kind == "confluent":
            from confluent_kafka import Producer
            self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                               "message.timeout.ms": int(timeout_s * 1000), "log_level": 2})
        else:
            from kafka import KafkaProducer
            self.p = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", enable_idempotence=True,
                                   request_timeout_ms=int(timeout_s * 1000),
                                   delivery_timeout_ms=int(timeout_s * 1000) + 1000,
                                   max_block_ms=int(timeout_s * 1000))

    def send(self, topic: str, partition: int, value: int) -> tuple[int | None, str | None]:
        """(offset, None) when acknowledged; (None, error) otherwise."""
        data = str(value).encode()
        if self.kind == "confluent":
            result: list = []
            try:
                self.p.produce(topic, value=data, partition=partition,
                               on_delivery=lambda e, m: result.append((m.offset(), None) if e is None
                                                                      else (None, str(e))))
                self.p.flush(self.timeout_s + 2)
            except Exception as e:
                return None, str(e)
            return result[0] if result else (None, "timeout")
        try:
            return self.p.send(topic, value=data, partition=partition).get(self.timeout_s + 2).offset, None
        except Exception as e:
            return None, type(e).__name__

    def close(self) -> None:
        try:
            if self.kind == "confluent":
                self.p.flush(1)
            else:
                self.p.close(timeout=1)
        except Exception:
            pass


class _Poller:
    def __init__(self, kind: str, bootstrap: str, topic: str, timeout_s: float) -> None:
        self.kind, self.topic = kind, topic
        if kind == "confluent":
            from confluent_kafka import Consumer, TopicPartition
            self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kafkacheck-q-{time.monotonic_ns()}",
                               "enable.auto.commit": False, "log_level": 2,
                               "socket.timeout.ms": int(timeout_s * 1000)})
            self.c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        else:
            from kafka import KafkaConsumer, TopicPartition
            self.c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False,
                                   request_timeout_ms=int(timeout_s * 1000) + 1000)
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            self.c.assign(tps)
            self.c.seek_to_beginning(*tps)

    def poll(self) -> dict[str, list[list[int]]]:
        out: dict[str, list[list[int]]] = {}
        if self.kind == "confluent":
            for m in self.c.consume(500, 0.5):
                if m.error() is None:
                    out.setdefault(f"{self.topic}:{m.partition()}", []).append([m.offset(), int(m.value())])
        else:
            for tp, msgs in self.c.poll(500, max_records=500).items():
                out.setdefault(f"{tp.topic}:{tp.partition}", []).extend([m.offset, int(m.value)] for m in msgs)
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.c.close()


# ---------------------------------------------------------------- the workload


def run_queue(target, client_kind: str, create_topic, out_dir: Path, seconds: float, faults: list[str],
              timeout_s: float = 10.0, producers: int = 3, consumers: int = 2, seed: int = 0, log=print) -> dict:
    """Run the workload; returns the checker's result with ``run_dir`` added."""
    rng = random.Random(seed)
    topic = f"conform-queue-{int(time.time())}"
    rf = min(3, target.brokers)
    error = create_topic(topic, PARTITIONS, rf)
    if error:
        raise RuntimeError(f"could not create the workload topic: {error}")
    time.sleep(1)
    h = History()
    stop = threading.Event()
    counters = [0] * PARTITIONS
    counter_lock = threading.Lock()

    def producer_loop() -> None:
        process = h.new_process()
        sender = _Sender(client_kind, target.bootstrap, timeout_s)
        while not stop.is_set():
            p = rng.randrange(PARTITIONS)
            with counter_lock:
                counters[p] += 1
                value = counters[p]
            key = f"{topic}:{p}"
            h.op(process, "invoke", "send", [["send", key, value]])
            offset, err = sender.send(topic, p, value)
            if err is None:
                h.op(process, "ok", "send", [["send", key, [offset, value]]])
            else:
                definite = "NOT_ENOUGH_REPLICAS" in err.upper().replace(" ", "_") and "AFTER" not in err.upper()
                h.op(process, "fail" if definite else "info", "send", [["send", key, [None, value]]], error=err[:80])
                if not definite:  # unknown outcome: a new client under a new process
                    sender.close()
                    process = h.new_process()
                    sender = _Sender(client_kind, target.bootstrap, timeout_s)
        sender.close()

    def consumer_loop() -> None:
        process = h.new_process()
        keys = [f"{topic}:{p}" for p in range(PARTITIONS)]
        poller = _Poller(client_kind, target.bootstrap, topic, timeout_s)
        h.op(process, "invoke", "assign", keys, seek_to_beginning=True)
        h.op(process, "ok", "assign", keys, seek_to_beginning=True)
        while not stop.is_set():
            h.op(process, "invoke", "poll", [["poll"]])
            try:
                got = poller.poll()
            except Exception as e:
                h.op(process, "info", "poll", [["poll", {}]], error=type(e).__name__)
                poller.close()
                process = h.new_process()
                poller = _Poller(client_kind, target.bootstrap, topic, timeout_s)
                h.op(process, "invoke", "assign", keys, seek_to_beginning=True)
                h.op(process, "ok", "assign", keys, seek_to_beginning=True)
                continue
            h.op(process, "ok", "poll", [["poll", got]])
        poller.close()

    nemesis_log: list[dict] = []

    def note(f: str, name: str, **extra: Any) -> None:
        nemesis_log.append({"at_s": round(h.now() / 1e9, 2), "f": f, "node": name, **extra})

    def nemesis_loop() -> None:
        procs = {name: p for name, p in target.processes.items() if name != "controller"}
        usable = [f for f in faults if (f in PROCESS_FAULTS and procs) or (f in NETWORK_FAULTS and target.proxies)]
        if not usable:
            return
        while not stop.wait(rng.uniform(2.0, 4.0)):
            fault = rng.choice(usable)
            if fault in NETWORK_FAULTS:
                name = rng.choice(sorted(target.proxies))
                proxy = target.proxies[name]
                value: dict = {"nodes": [name]}
                if fault == "one-way":
                    value["direction"] = rng.choice(["in", "out"])
                h.op("nemesis", "invoke", fault, value)
                if fault == "partition":
                    proxy.blackhole("both")
                elif fault == "one-way":
                    proxy.blackhole(value["direction"])
                elif fault == "delay":
                    value["ms"] = 300
                    proxy.delay(300)
                else:
                    proxy.drop()
                h.op("nemesis", "info", fault, value)
                note(fault, name, **{k: v for k, v in value.items() if k != "nodes"})
                if fault != "drop":
                    if stop.wait(rng.uniform(2.0, 4.0)):
                        break
                    h.op("nemesis", "invoke", "heal", {"nodes": [name]})
                    proxy.heal()
                    h.op("nemesis", "info", "heal", {"nodes": [name]})
                    note("heal", name)
                continue
            name = rng.choice(sorted(procs))
            proc = procs[name]
            h.op("nemesis", "invoke", fault, {"nodes": [name]})
            if fault == "kill":
                proc.kill()
                h.op("nemesis", "info", fault, {"nodes": [name]})
                note("kill", name)
                if stop.wait(rng.uniform(2.0, 4.0)):
                    break
                h.op("nemesis", "invoke", "restart", {"nodes": [name]})
                proc.start()
                h.op("nemesis", "info", "restart", {"nodes": [name]})
                note("restart", name)
            elif fault == "pause":
                proc.pause()
                h.op("nemesis", "info", fault, {"nodes": [name]})
                note("pause", name)
                if stop.wait(rng.uniform(2.0, 4.0)):
                    break
                h.op("nemesis", "invoke", "resume", {"nodes": [name]})
                proc.resume()
                h.op("nemesis", "info", "resume", {"nodes": [name]})
                note("resume", name)

    threads = [threading.Thread(target=producer_loop, daemon=True) for _ in range(producers)]
    threads += [threading.Thread(target=consumer_loop, daemon=True) for _ in range(consumers)]
    nemesis = threading.Thread(target=nemesis_loop, daemon=True)
    for t in [*threads, nemesis]:
        t.start()
    time.sleep(seconds)
    stop.set()
    nemesis.join(30)
    for t in threads:
        t.join(timeout_s * 3)
    hung = sum(t.is_alive() for t in threads)
    # heal: every process running and unpaused, the cluster ready
    heal_ns = h.now()
    target.heal_network()
    for p in target.processes.values():
        if not p.alive:
            p.start()
        p.resume()
    try:
        target.wait_ready(60)
    except Exception as e:
        log(f"the broker did not come back after healing: {e}")
    # the final read
    start_ns = h.now()
    process = h.new_process()
    keys = [f"{topic}:{p}" for p in range(PARTITIONS)]
    end_offsets = _end_offsets(client_kind, target.bootstrap, topic, timeout_s)
    reader = _Poller(client_kind, target.bootstrap, topic, timeout_s)
    h.op(process, "invoke", "assign", keys, seek_to_beginning=True)
    h.op(process, "ok", "assign", keys, seek_to_beginning=True)
    seen = {k: -1 for k in keys}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(seen[k] + 1 < end_offsets.get(k, 0) for k in keys):
        h.op(process, "invoke", "poll", [["poll"]])
        try:
            got = reader.poll()
        except Exception as e:
            h.op(process, "info", "poll", [["poll", {}]], error=type(e).__name__)
            break
        h.op(process, "ok", "poll", [["poll", got]])
        for k, pairs in got.items():
            if pairs:
                seen[k] = max(seen[k], pairs[-1][0])
    reader.close()
    reached = all(seen[k] + 1 >= end_offsets.get(k, 0) for k in keys)
    config = {
        "acks": "all", "idempotence": True, "isolation_level": "read_uncommitted", "txn": False,
        "sub_via": ["assign"], "replication_factor": rf, "partitions": PARTITIONS, "brokers": target.brokers,
        "compacted": False, "client": client_kind, "seconds": seconds,
        "staleness_bound_ms": 60_000,
        "final_read": {"performed": True, "start_ns": start_ns, "heal_ns": heal_ns, "reached_end": reached,
                       "took_ms": (h.now() - start_ns) // 1_000_000, "staleness_bound_ms": 60_000,
                       "end_offsets": end_offsets},
    }
    run_meta = {"format": 1, "run_id": out_dir.name, "seed": seed, "target": target.name, "workload": "queue",
                "started_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "config": config, "faults": faults,
                "versions": {"kafkacheck": kafkacheck.__version__, "broker": target.name}}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "run.json").write_text(json.dumps(run_meta, indent=2, sort_keys=True) + "\n")
    write_jsonl(out_dir / "history.jsonl", h.recorder.ops)
    from properties.queue import check

    result = check(h.recorder.ops, config)
    (out_dir / "results.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    acked = sum(1 for op in h.recorder.ops if op["f"] == "send" and op["type"] == "ok")
    result["summary"] = {"ops": len(h.recorder.ops), "acknowledged_sends": acked, "hung_clients": hung,
                         "final_read_reached_end": reached, "nemesis": nemesis_log}
    result["run_dir"] = str(out_dir)
    return result


def _end_offsets(kind: str, bootstrap: str, topic: str, timeout_s: float) -> dict[str, int]:
    from kafkacheck.conform.clients import CLIENTS

    client = CLIENTS[kind](bootstrap, timeout_s)
    out = {}
    for p in range(PARTITIONS):
        offs = client.offsets(topic, p)
        if not isinstance(offs, str):
            out[f"{topic}:{p}"] = offs[1]
    return out
