"""The simulator's workloads with real clients against a real broker, recorded as a history.

Theory of operation
-------------------
Client threads run ops against one topic of :data:`PARTITIONS` partitions (the keys of the
history); every op is recorded as an invoke and its completion in TRACE_FORMAT.md (time:
wall-clock nanoseconds since the start): ``ok`` with offsets, ``fail`` when the broker
certainly refused, ``info`` when the outcome is unknown (a timeout, a lost connection), after
which the client is rebuilt under a new process id. The workloads:

* ``queue``: producer threads send unique integers, one send per op, acks=all and no retries
  (a send whose outcome is unknown is never retried); consumer threads are assigned every
  partition and poll;
* ``idempotent``: the same with ``enable.idempotence`` (the client retries, up to 5 batches
  in flight): no duplicate may appear;
* ``txn``: transactional producers; one op is a transaction of 1-3 sends, about one in five
  aborted on purpose; consumers read with read_committed;
* ``eos``: consume-transform-produce: idempotent producers write an input topic; processor
  ``j`` of ``m`` owns the input partitions ``p % m == j``, polls them (read_committed, from
  the group's committed offsets), copies every record to the same partition of an output
  topic as ``input * 2**24 + attempt`` and commits the input offsets with the output in one
  transaction (``sendOffsetsToTransaction``); after an abort or an unknown outcome it rewinds
  to the committed offsets. At the end a ``committed`` op reads the group's offsets;
* ``compaction``: keyed updates (a few record keys per partition, about one in eight a
  tombstone) to a compacted topic whose segments roll every 100 ms; consumers sometimes seek back to the
  beginning to see what the cleaner left;
* ``groups``: a producer writes every partition while members of one consumer group
  (subscribe, the range assignor) poll, commit the positions they reached (with the
  generation they hold) and sometimes leave and join again; every poll's completion carries
  the member's ``rebalance_log`` (revocations and assignments with their generation, taken
  from the client's rebalance callbacks). After healing the members poll until they agree
  on one generation that covers every partition.

A nemesis thread, when kafkacheck started the broker, kills (kill -9) and restarts, or
pauses (SIGSTOP) and resumes, broker processes, recorded as nemesis ops; with a fault proxy in
front of each broker it also cuts clients off (both ways or one), delays or resets their
connections. At the end every fault is healed, the cluster is waited for, and a final reader
reads every partition from the beginning up to its end offset. The history is written as a
run directory and judged by the same checker as the simulator's runs
(:func:`properties.queue.check`, with the transaction, exactly-once and compaction checks the
config enables).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

import kafkacheck
from kafkacheck.conform.clients import close_kafka_python_producer
from traces.history import Recorder, write_jsonl

PARTITIONS = 4
PROCESS_FAULTS = ["kill", "pause"]
NETWORK_FAULTS = ["partition", "one-way", "delay", "drop"]
# between the nodes of a spawned cluster, each in its network namespace (fault_injection/netns.py)
NODE_FAULTS = ["isolate", "split", "one-way-nodes", "lossy-nodes", "slow-nodes"]
WORKLOADS = {
    "queue": "acknowledged sends are read back, once, in order",
    "idempotent": "an idempotent producer's retries never duplicate or reorder a send",
    "txn": "committed transactions are read whole, aborted ones never (read_committed)",
    "eos": "consume-transform-produce copies every input record to the output exactly once",
    "compaction": "a compacted topic keeps the newest value of every record key",
    "groups": "a consumer group gives each partition to one member per generation and refuses fenced commits",
}
EOS_GROUP = "kafkacheck-eos"
SOURCE_SHIFT = 1 << 24  # an eos output value: input * SOURCE_SHIFT + attempt
RECORD_KEYS = 6  # compaction: record keys per partition
TOMBSTONE_P = 0.125
# segments roll by time: Kafka 4.0 refuses segment.bytes below 1 MiB (KIP-1030)
COMPACTED_CONFIGS = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.ms": "100",
                     "delete.retention.ms": "600000"}


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


def _encode(value: int | None) -> bytes | None:
    return None if value is None else str(value).encode()


def _decode(data: bytes | None) -> int | None:
    return None if data is None else int(data)


# ---------------------------------------------------------------- client handles


class _Producer:
    """What both producer handles share: ``kind``, ``timeout_s`` and the client ``p``."""

    kind: str
    timeout_s: float
    p: Any

    def close(self) -> None:
        if self.kind == "confluent":
            with contextlib.suppress(Exception):
                self.p.flush(1)
        else:
            close_kafka_python_producer(self.p, 1)


class _Sender(_Producer):
    """A producer; ``idempotent`` False means acks=all without retries."""

    def __init__(self, kind: str, bootstrap: str, timeout_s: float, idempotent: bool = True) -> None:
        self.kind, self.timeout_s = kind, timeout_s
        if kind == "confluent":
            from confluent_kafka import Producer
            conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": idempotent,
                    "message.timeout.ms": int(timeout_s * 1000), "log_level": 2}
            if not idempotent:
                conf["retries"] = 0
            self.p = Producer(conf)
        else:
            from kafka import KafkaProducer
            self.p = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all", enable_idempotence=idempotent,
                                   retries=2**31 - 1 if idempotent else 0,
                                   request_timeout_ms=int(timeout_s * 1000),
                                   delivery_timeout_ms=int(timeout_s * 1000) + 1000,
                                   max_block_ms=int(timeout_s * 1000))

    def send(self, topic: str, partition: int, value: int | None,
             key: str | None = None) -> tuple[int | None, str | None]:
        """(offset, None) when acknowledged; (None, error) otherwise."""
        data, kdata = _encode(value), key.encode() if key is not None else None
        if self.kind == "confluent":
            result: list = []
            try:
                self.p.produce(topic, value=data, key=kdata, partition=partition,
                               on_delivery=lambda e, m: result.append((m.offset(), None) if e is None
                                                                      else (None, str(e))))
                self.p.flush(self.timeout_s + 2)
            except Exception as e:
                return None, str(e)
            return result[0] if result else (None, "timeout")
        try:
            return self.p.send(topic, value=data, key=kdata, partition=partition).get(self.timeout_s + 2).offset, None
        except Exception as e:
            return None, type(e).__name__



class _TxnSender(_Producer):
    """A transactional producer."""

    def __init__(self, kind: str, bootstrap: str, txn_id: str, timeout_s: float) -> None:
        self.kind, self.timeout_s = kind, timeout_s
        if kind == "confluent":
            from confluent_kafka import Producer
            self.p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "log_level": 2,
                               "message.timeout.ms": int(timeout_s * 1000),
                               "transaction.timeout.ms": int(timeout_s * 3000)})
            self.p.init_transactions(timeout_s)
        else:
            from kafka import KafkaProducer
            self.p = KafkaProducer(bootstrap_servers=bootstrap.split(","), transactional_id=txn_id,
                                   request_timeout_ms=int(timeout_s * 1000), max_block_ms=int(timeout_s * 1000),
                                   transaction_timeout_ms=int(timeout_s * 3000))
            self.p.init_transactions()

    def begin(self) -> None:
        self.p.begin_transaction()

    def send(self, topic: str, partition: int, value: int) -> int:
        """The offset; raises when the send failed."""
        [result] = self.send_many(topic, [(partition, value)])
        if not isinstance(result, int):
            raise RuntimeError(result)
        return result

    def send_many(self, topic: str, sends: list[tuple[int, int]]) -> list[int | str]:
        """Send (partition, value) pairs together, then wait: an offset or an error each."""
        if self.kind == "confluent":
            out: list[int | str] = ["timeout"] * len(sends)

            def done(i: int):
                def cb(e, m) -> None:
                    out[i] = m.offset() if e is None else str(e)
                return cb

            for i, (p, v) in enumerate(sends):
                self.p.produce(topic, value=str(v).encode(), partition=p, on_delivery=done(i))
            self.p.flush(self.timeout_s)
            return out
        futures = [self.p.send(topic, value=str(v).encode(), partition=p) for p, v in sends]
        results: list[int | str] = []
        for f in futures:
            try:
                results.append(f.get(self.timeout_s).offset)
            except Exception as e:
                results.append(str(e) or type(e).__name__)
        return results

    def send_offsets(self, offsets: dict[tuple[str, int], int], poller: _Poller) -> None:
        """Add the consumer group's next offsets to the transaction."""
        if self.kind == "confluent":
            from confluent_kafka import TopicPartition
            self.p.send_offsets_to_transaction([TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())],
                                               poller.c.consumer_group_metadata(), self.timeout_s)
        else:
            from kafka import TopicPartition
            from kafka.structs import OffsetAndMetadata
            self.p.send_offsets_to_transaction(
                {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in sorted(offsets.items())},
                poller.c.group_metadata())

    def commit(self) -> None:
        if self.kind == "confluent":
            self.p.commit_transaction(self.timeout_s)
        else:
            self.p.commit_transaction()

    def abort(self) -> None:
        if self.kind == "confluent":
            self.p.abort_transaction(self.timeout_s)
        else:
            self.p.abort_transaction()



class _Poller:
    """A consumer assigned to ``tps``: from the beginning, or (``group`` given) from the
    group's committed offsets. ``keyed`` polls return ``[offset, value, record key]``."""

    def __init__(self, kind: str, bootstrap: str, tps: list[tuple[str, int]], timeout_s: float,
                 isolation: str = "read_uncommitted", group: str | None = None, keyed: bool = False) -> None:
        self.kind, self.tps, self.keyed = kind, tps, keyed
        if kind == "confluent":
            from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
            self.c = Consumer({"bootstrap.servers": bootstrap, "enable.auto.commit": False, "log_level": 2,
                               "group.id": group or f"kafkacheck-q-{time.monotonic_ns()}",
                               "isolation.level": isolation, "auto.offset.reset": "earliest",
                               "socket.timeout.ms": int(timeout_s * 1000)})
            self.c.assign([TopicPartition(t, p) if group else TopicPartition(t, p, OFFSET_BEGINNING)
                           for t, p in tps])
        else:
            from kafka import KafkaConsumer, TopicPartition
            self.c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False, group_id=group,
                                   auto_offset_reset="earliest", isolation_level=isolation,
                                   request_timeout_ms=int(timeout_s * 1000) + 1000)
            self.c.assign([TopicPartition(t, p) for t, p in tps])
            if group is None:
                self.c.seek_to_beginning()

    def seek_to_beginning(self) -> None:
        if self.kind == "confluent":
            from confluent_kafka import OFFSET_BEGINNING, TopicPartition
            for t, p in self.tps:
                self.c.seek(TopicPartition(t, p, OFFSET_BEGINNING))
        else:
            self.c.seek_to_beginning()

    def poll(self, max_records: int = 500) -> dict[str, list[list]]:
        out: dict[str, list[list]] = {}

        def add(topic: str, partition: int, offset: int, value: bytes | None, key: bytes | None) -> None:
            entry = [offset, _decode(value)] + ([key.decode() if key is not None else None] if self.keyed else [])
            out.setdefault(f"{topic}:{partition}", []).append(entry)

        if self.kind == "confluent":
            for m in self.c.consume(max_records, 0.5):
                if m.error() is None:
                    add(m.topic(), m.partition(), m.offset(), m.value(), m.key())
        else:
            for tp, msgs in self.c.poll(500, max_records=max_records).items():
                for m in msgs:
                    add(tp.topic, tp.partition, m.offset, m.value, m.key)
        return out

    def positions(self, last: dict[str, int]) -> dict[str, int]:
        """Each partition's next offset to read (the previous value where unknown)."""
        out = dict(last)
        if self.kind == "confluent":
            for tp in self.c.position(self.c.assignment()):
                if tp.offset >= 0:
                    out[f"{tp.topic}:{tp.partition}"] = tp.offset
        else:
            for tp in self.c.assignment():
                pos = self.c.position(tp, timeout_ms=1000)
                if pos is not None:
                    out[f"{tp.topic}:{tp.partition}"] = pos
        return out

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.c.close()


def commit_refused(error: str) -> bool:
    """Whether a failed group commit was certainly refused (the member was fenced, its
    generation is old or a rebalance is on), as opposed to an unknown outcome."""
    text = error.upper().replace(" ", "_")
    return any(w in text for w in ("ILLEGAL_GENERATION", "UNKNOWN_MEMBER", "REBALANCE_IN_PROGRESS", "FENCED_INSTANCE",
                                   "COMMITFAILED", "ILLEGALGENERATION"))


def confluent_generation(metadata: bytes) -> int:
    """The generation in librdkafka's serialised consumer group metadata ("CGMDv2:" and an
    int32 copied in the host's byte order); -1 when unknown."""
    if isinstance(metadata, bytes) and metadata.startswith(b"CGMDv2:") and len(metadata) >= 11:
        return int.from_bytes(metadata[7:11], sys.byteorder, signed=True)
    return -1


class GroupMember:
    """A consumer-group member: subscribe, poll, commit; rebalance callbacks go to ``log``."""

    def __init__(self, kind: str, bootstrap: str, topic: str, group: str, timeout_s: float) -> None:
        self.kind, self.topic, self.timeout_s = kind, topic, timeout_s
        self.log: list[dict] = []
        self.owned: set[str] = set()
        self.positions: dict[str, int] = {}
        self.generation = -1
        if kind == "confluent":
            from confluent_kafka import Consumer
            self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                               "auto.offset.reset": "earliest", "partition.assignment.strategy": "range",
                               "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "log_level": 2,
                               "socket.timeout.ms": int(timeout_s * 1000)})
            self.c.subscribe([topic], on_assign=lambda c, tps: self._assigned(tps),
                             on_revoke=lambda c, tps: self._revoked(tps, False),
                             on_lost=lambda c, tps: self._revoked(tps, True))
        else:
            from kafka import KafkaConsumer
            from kafka.consumer.subscription_state import ConsumerRebalanceListener

            member = self

            class Listener(ConsumerRebalanceListener):
                def on_partitions_revoked(self, revoked):
                    member._revoked(revoked, False)

                def on_partitions_assigned(self, assigned):
                    member._assigned(assigned)

                def on_partitions_lost(self, lost):
                    member._revoked(lost, True)

            self.c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=group, enable_auto_commit=False,
                                   auto_offset_reset="earliest", session_timeout_ms=6000,
                                   heartbeat_interval_ms=500, request_timeout_ms=int(timeout_s * 1000) + 1000)
            self.c.subscribe([topic], listener=Listener())

    def _current_generation(self) -> int:
        with contextlib.suppress(Exception):
            if self.kind == "confluent":
                return confluent_generation(self.c.consumer_group_metadata())
            return int(self.c.group_metadata().generation_id)
        return -1

    def _assigned(self, tps) -> None:
        self.assigned_keys({f"{tp.topic}:{tp.partition}" for tp in tps}, self._current_generation())

    def _revoked(self, tps, lost: bool) -> None:
        self.revoked_keys({f"{tp.topic}:{tp.partition}" for tp in tps}, lost)

    def assigned_keys(self, keys: set[str], generation: int) -> None:
        self.generation = generation
        self.owned = keys  # eager (range): the whole assignment
        self.log.append({"type": "assigned", "keys": sorted(keys), "generation": self.generation,
                         "owned": sorted(self.owned)})

    def revoked_keys(self, keys: set[str], lost: bool) -> None:
        entry: dict = {"type": "revoked", "keys": sorted(keys), "generation": self.generation}
        if lost:
            entry["lost"] = "lost"
        self.log.append(entry)
        self.owned -= keys
        for k in keys:
            self.positions.pop(k, None)

    def take_log(self) -> list[dict]:
        out, self.log = self.log, []
        return out

    def _fetch(self) -> list[tuple[str, int, int, int | None]]:
        """One poll of the client: (topic, partition, offset, value); callbacks run in it."""
        if self.kind == "confluent":
            return [(m.topic(), m.partition(), m.offset(), _decode(m.value())) for m in self.c.consume(200, 0.5)
                    if m.error() is None]
        return [(tp.topic, tp.partition, m.offset, _decode(m.value))
                for tp, ms in self.c.poll(500, max_records=200).items() for m in ms]

    def poll(self) -> dict[str, list[list]]:
        out: dict[str, list[list]] = {}
        for t, p, off, v in self._fetch():
            key = f"{t}:{p}"
            out.setdefault(key, []).append([off, v])
            if key in self.owned:
                self.positions[key] = off + 1
        return out

    def reached(self) -> dict[str, int]:
        """The positions reached in the partitions the member owns: what a commit sends."""
        return {k: o for k, o in sorted(self.positions.items()) if k in self.owned}

    def commit(self, offsets: dict[str, int]) -> tuple[str | None, bool]:
        """(error, definite): commit ``offsets``; definite when the outcome is certain."""
        try:
            if self.kind == "confluent":
                from confluent_kafka import TopicPartition
                self.c.commit(offsets=[TopicPartition(k.rsplit(":", 1)[0], int(k.rsplit(":", 1)[1]), o)
                                       for k, o in offsets.items()], asynchronous=False)
            else:
                from kafka import TopicPartition
                from kafka.structs import OffsetAndMetadata
                self.c.commit({TopicPartition(k.rsplit(":", 1)[0], int(k.rsplit(":", 1)[1])): OffsetAndMetadata(o, "", -1)
                               for k, o in offsets.items()})
        except Exception as e:
            text = str(e) or type(e).__name__
            return text[:80], commit_refused(f"{type(e).__name__} {text}")
        return None, True

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.c.close()


def make_sender(kind: str, bootstrap: str, timeout_s: float, idempotent: bool):
    if kind == "java":
        from kafkacheck.conform.java import JavaSender
        return JavaSender(bootstrap, timeout_s, idempotent)
    return _Sender(kind, bootstrap, timeout_s, idempotent)


def make_txn_sender(kind: str, bootstrap: str, txn_id: str, timeout_s: float):
    if kind == "java":
        from kafkacheck.conform.java import JavaTxnSender
        return JavaTxnSender(bootstrap, txn_id, timeout_s)
    return _TxnSender(kind, bootstrap, txn_id, timeout_s)


def make_poller(kind: str, bootstrap: str, tps: list[tuple[str, int]], timeout_s: float,
            isolation: str = "read_uncommitted", group: str | None = None, keyed: bool = False):
    if kind == "java":
        from kafkacheck.conform.java import JavaPoller
        return JavaPoller(bootstrap, tps, timeout_s, isolation, group, keyed)
    return _Poller(kind, bootstrap, tps, timeout_s, isolation, group, keyed)


def make_member(kind: str, bootstrap: str, topic: str, group: str, timeout_s: float) -> GroupMember:
    if kind == "java":
        from kafkacheck.conform.java import JavaMember
        return JavaMember(bootstrap, topic, group, timeout_s)
    return GroupMember(kind, bootstrap, topic, group, timeout_s)


# ---------------------------------------------------------------- the workloads


class _Run:
    """One workload run: its topics, history, counters and client loops."""

    def __init__(self, workload: str, target, kind: str, timeout_s: float, seed: int) -> None:
        self.workload, self.target, self.kind, self.timeout_s = workload, target, kind, timeout_s
        self.rng = random.Random(seed)
        self.h = History()
        self.stop = threading.Event()
        self.counters: dict[str, int] = {}
        self.lock = threading.Lock()
        stamp = int(time.time())
        self.topic = f"conform-{workload}-{stamp}"
        self.output = f"conform-{workload}-out-{stamp}" if workload == "eos" else None
        self.isolation = "read_committed" if workload in ("txn", "eos") else "read_uncommitted"
        self.keyed = workload == "compaction"
        self.group = f"kafkacheck-groups-{stamp}"
        self.healed = threading.Event()  # groups: faults healed, members converge
        self.done = threading.Event()  # groups: members stop
        self.member_state: dict[int, tuple[int, int, frozenset]] = {}  # member -> (process, generation, owned)
        self.stopped_members: list[GroupMember] = []  # groups: closed after the last member stopped

    def next_value(self, key: str) -> int:
        with self.lock:
            self.counters[key] = self.counters.get(key, 0) + 1
            return self.counters[key]

    def keys(self, topic: str | None = None) -> list[str]:
        return [f"{topic or self.topic}:{p}" for p in range(PARTITIONS)]

    # ------------------------------------------------------------ producers

    def producer_loop(self) -> None:
        """queue, idempotent, compaction, and the eos input: one send per op."""
        h, rng, topic = self.h, self.rng, self.topic
        idempotent = self.workload != "queue"
        process = h.new_process()
        sender = self._sender(idempotent)
        while sender is not None and not self.stop.is_set():
            p = rng.randrange(PARTITIONS)
            key = f"{topic}:{p}"
            value = self.next_value(key)
            rk = None
            if self.keyed:
                rk = f"k{rng.randrange(RECORD_KEYS)}"
                if rng.random() < TOMBSTONE_P:
                    value = None
            tail = [rk] if self.keyed else []
            h.op(process, "invoke", "send", [["send", key, value, *tail]])
            offset, err = sender.send(topic, p, value, rk)
            if err is None:
                h.op(process, "ok", "send", [["send", key, [offset, value], *tail]])
                continue
            definite = "NOT_ENOUGH_REPLICAS" in err.upper().replace(" ", "_") and "AFTER" not in err.upper()
            h.op(process, "fail" if definite else "info", "send", [["send", key, [None, value], *tail]],
                 error=err[:80])
            if not definite:  # unknown outcome: a new client under a new process
                sender.close()
                process = h.new_process()
                sender = self._sender(idempotent)
        if sender is not None:
            sender.close()

    def _sender(self, idempotent: bool):
        """A new producer client; while the brokers cannot be reached (a fault), try again until
        the run stops (None then) instead of ending this producer's thread."""
        while not self.stop.is_set():
            try:
                return make_sender(self.kind, self.target.bootstrap, self.timeout_s, idempotent)
            except Exception:
                time.sleep(0.5)
        return None

    def _txn_sender(self, txn_id: str) -> _TxnSender | None:
        try:
            return make_txn_sender(self.kind, self.target.bootstrap, txn_id, self.timeout_s)
        except Exception:
            time.sleep(0.5)
            return None

    def txn_loop(self) -> None:
        """txn: one op is a transaction of 1-3 sends."""
        h, rng, topic = self.h, self.rng, self.topic
        process = h.new_process()
        txn_id = f"kafkacheck-{topic}-{process}"
        sender = None
        while not self.stop.is_set():
            if sender is None:
                sender = self._txn_sender(txn_id)
                continue
            sends = [(p, self.next_value(f"{topic}:{p}"))
                     for p in (rng.randrange(PARTITIONS) for _ in range(rng.randint(1, 3)))]
            h.op(process, "invoke", "txn", [["send", f"{topic}:{p}", v] for p, v in sends])
            done: list = []
            abort_on_purpose = rng.random() < 0.2
            try:
                sender.begin()
                for p, v in sends:
                    done.append(["send", f"{topic}:{p}", [sender.send(topic, p, v), v]])
            except Exception as e:
                rest = [["send", f"{topic}:{p}", [None, v]] for p, v in sends[len(done):]]
                sender = self._abort(sender)
                h.op(process, "fail", "txn", done + rest, error=str(e)[:80])
                continue
            if abort_on_purpose:
                sender = self._abort(sender)
                h.op(process, "fail", "txn", done, error="aborted on purpose")
                continue
            try:
                sender.commit()
                h.op(process, "ok", "txn", done)
            except Exception as e:
                h.op(process, "info", "txn", done, error=str(e)[:80])
                sender.close()
                sender = None
                process = h.new_process()
        if sender is not None:
            sender.close()

    @staticmethod
    def _abort(sender: _TxnSender) -> _TxnSender | None:
        """Abort; a producer that cannot abort is closed (None: build a new one, which fences
        and aborts the old transaction)."""
        try:
            sender.abort()
            return sender
        except Exception:
            sender.close()
            return None

    def eos_loop(self, j: int, m: int) -> None:
        """eos processor ``j`` of ``m``."""
        h, rng = self.h, self.rng
        assert self.output is not None
        inputs = [(self.topic, p) for p in range(PARTITIONS) if p % m == j]
        in_keys = [f"{t}:{p}" for t, p in inputs]
        process = h.new_process()
        sender: _TxnSender | None = None
        poller: _Poller | None = None
        seq = 0
        while not self.stop.is_set():
            if sender is None:
                sender = self._txn_sender(f"kafkacheck-{self.output}-{j}")  # fences its predecessor
                continue
            if poller is None:  # (re)start at the group's committed offsets
                try:
                    poller = make_poller(self.kind, self.target.bootstrap, inputs, self.timeout_s, "read_committed",
                                     group=EOS_GROUP)
                except Exception:
                    time.sleep(0.5)
                    continue
                h.op(process, "invoke", "assign", in_keys)
                h.op(process, "ok", "assign", in_keys)
            seq += 1
            attempt = seq * m + j
            abort_on_purpose = rng.random() < 0.1
            h.op(process, "invoke", "txn", [["poll"]])
            got: dict = {}
            done: list = []
            planned: list = []
            nxt: dict[tuple[str, int], int] = {}
            try:
                sender.begin()
                got = poller.poll(100)
                for key, pairs in got.items():
                    p = int(key.rsplit(":", 1)[1])
                    for off, v in pairs:
                        nxt[(self.topic, p)] = off + 1
                        if v is not None:
                            planned.append((p, v * SOURCE_SHIFT + attempt))
                results = sender.send_many(self.output, planned) if planned else []
                for (p, w), r in zip(planned, results, strict=True):
                    done.append(["send", f"{self.output}:{p}", [r if isinstance(r, int) else None, w]])
                failed = [r for r in results if not isinstance(r, int)]
                if failed:
                    raise RuntimeError(failed[0])
                if nxt:
                    sender.send_offsets(nxt, poller)
            except Exception as e:
                rest = [["send", f"{self.output}:{p}", [None, w]] for p, w in planned[len(done):]]
                sender = self._abort(sender)
                h.op(process, "fail", "txn", [["poll", got], *done, *rest], error=str(e)[:80],
                     offsets={f"{t}:{p}": o for (t, p), o in sorted(nxt.items())})
                poller.close()
                poller = None
                continue
            offsets = {f"{t}:{p}": o for (t, p), o in sorted(nxt.items())}
            if abort_on_purpose:
                sender = self._abort(sender)
                h.op(process, "fail", "txn", [["poll", got], *done], error="intentional-abort", offsets=offsets)
                poller.close()
                poller = None
                continue
            try:
                sender.commit()
                h.op(process, "ok", "txn", [["poll", got], *done], offsets=offsets)
            except Exception as e:
                h.op(process, "info", "txn", [["poll", got], *done], error=str(e)[:80], offsets=offsets)
                sender.close()
                sender = None
                poller.close()
                poller = None
                process = h.new_process()
        if sender is not None:
            sender.close()
        if poller is not None:
            poller.close()

    # ------------------------------------------------------------ consumers

    def consumer_loop(self) -> None:
        h, rng = self.h, self.rng
        topics = [self.topic] if self.output is None else [self.topic, self.output]
        tps = [(t, p) for t in topics for p in range(PARTITIONS)]
        keys = [f"{t}:{p}" for t, p in tps]
        process = h.new_process()

        def fresh() -> _Poller:
            poller = make_poller(self.kind, self.target.bootstrap, tps, self.timeout_s, self.isolation, keyed=self.keyed)
            h.op(process, "invoke", "assign", keys, seek_to_beginning=True)
            h.op(process, "ok", "assign", keys, seek_to_beginning=True)
            return poller

        poller = fresh()
        while not self.stop.is_set():
            if self.keyed and rng.random() < 0.2:  # compaction: see what the cleaner left
                poller.seek_to_beginning()
                h.op(process, "invoke", "assign", keys, seek_to_beginning=True)
                h.op(process, "ok", "assign", keys, seek_to_beginning=True)
            h.op(process, "invoke", "poll", [["poll"]])
            try:
                got = poller.poll()
            except Exception as e:
                h.op(process, "info", "poll", [["poll", {}]], error=type(e).__name__)
                poller.close()
                process = h.new_process()
                poller = fresh()
                continue
            h.op(process, "ok", "poll", [["poll", got]])
        poller.close()

    def member_loop(self, i: int) -> None:
        """groups: member ``i`` polls, commits, sometimes leaves and joins again."""
        h, rng, keys = self.h, self.rng, self.keys()
        process = h.new_process()

        def join() -> GroupMember | None:
            try:
                member = make_member(self.kind, self.target.bootstrap, self.topic, self.group, self.timeout_s)
            except Exception:
                time.sleep(0.5)
                return None
            h.op(process, "invoke", "subscribe", keys)
            h.op(process, "ok", "subscribe", keys)
            return member

        m = join()
        while not self.done.is_set():
            if m is None:
                m = join()
                continue
            healed = self.healed.is_set()
            r = rng.random()
            if not healed and r < 0.02:  # leave cleanly and join again
                h.op(process, "invoke", "subscribe", keys)
                m.close()
                log = m.take_log()
                h.op(process, "ok", "subscribe", keys, **({"rebalance_log": log} if log else {}))
                m = join()
                continue
            offsets = m.reached()
            if not healed and r < 0.2 and offsets:
                generation = m._current_generation()
                h.op(process, "invoke", "commit", offsets, generation=generation)
                err, definite = m.commit(offsets)
                log = m.take_log()
                extra = {"rebalance_log": log} if log else {}
                if err is None:
                    h.op(process, "ok", "commit", offsets, generation=generation, **extra)
                    continue
                h.op(process, "fail" if definite else "info", "commit", offsets, generation=generation,
                     error=err, **extra)
                if not definite:  # unknown outcome: a new member under a new process
                    m.close()
                    process = self._abandon(process)
                    m = None
                continue
            h.op(process, "invoke", "poll", [["poll"]])
            try:
                got = m.poll()
            except Exception as e:
                h.op(process, "info", "poll", [["poll", {}]], error=type(e).__name__)
                m.close()
                process = self._abandon(process)
                m = None
                continue
            log = m.take_log()
            h.op(process, "ok", "poll", [["poll", got]], **({"rebalance_log": log} if log else {}))
            with self.lock:
                self.member_state[i] = (process, m.generation, frozenset(m.owned))
        if m is not None:  # closed once every member stopped: a leave now would start a
            with self.lock:   # rebalance that the members still polling would report
                self.stopped_members.append(m)

    def _abandon(self, process: int) -> int:
        """A member client given up on: its process ends (a crash, for the group checker, so
        it is not counted among the members after healing); the next one is a new process."""
        self.h.op(process, "invoke", "crash", None)
        self.h.op(process, "info", "crash", None)
        return self.h.new_process()

    def converged(self) -> bool:
        """groups: every member polled after healing, all in one generation covering every partition."""
        with self.lock:
            states = list(self.member_state.values())
        gens = {g for _p, g, _o in states}
        owned = set().union(*(o for _p, _g, o in states)) if states else set()
        return len(gens) == 1 and min(gens) >= 0 and owned == set(self.keys())

    def threads(self, producers: int, consumers: int) -> list[threading.Thread]:
        loops: list = []
        if self.workload == "groups":
            return [threading.Thread(target=self.producer_loop, daemon=True)]
        if self.workload == "txn":
            loops += [self.txn_loop] * producers
        elif self.workload == "eos":
            m = max(1, min(PARTITIONS, producers))
            loops += [self.producer_loop] * producers
            loops += [lambda j=j: self.eos_loop(j, m) for j in range(m)]
        else:
            loops += [self.producer_loop] * producers
        loops += [self.consumer_loop] * consumers
        return [threading.Thread(target=f, daemon=True) for f in loops]


def run_queue(target, client_kind: str, create_topic, out_dir: Path, seconds: float, faults: list[str],
              timeout_s: float = 10.0, producers: int = 3, consumers: int = 2, seed: int = 0, log=print,
              workload: str = "queue") -> dict:
    """Run ``workload`` (a key of :data:`WORKLOADS`) for ``seconds`` under ``faults``, heal,
    read everything back, and judge the history; returns the checker's result with
    ``summary`` and ``run_dir`` added."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")
    run = _Run(workload, target, client_kind, timeout_s, seed)
    h, rng = run.h, run.rng
    rf = min(3, target.brokers)
    for topic in [run.topic] + ([run.output] if run.output else []):
        configs = COMPACTED_CONFIGS if workload == "compaction" else None
        error = create_topic(topic, PARTITIONS, rf, configs)
        if error:
            raise RuntimeError(f"could not create the workload topic {topic}: {error}")
    time.sleep(1)
    nemesis_log: list[dict] = []
    threads = run.threads(producers, consumers)
    members = ([threading.Thread(target=run.member_loop, args=(i,), daemon=True) for i in range(3)]
               if workload == "groups" else [])
    nemesis = threading.Thread(target=_nemesis_loop, args=(target, faults, h, rng, run.stop, nemesis_log,
                                                           run.topic), daemon=True)
    for t in [*threads, *members, nemesis]:
        t.start()
    try:
        time.sleep(seconds)
    except BaseException:  # Ctrl-C: the nemesis ends its fault before the brokers are stopped
        run.stop.set()
        run.done.set()
        nemesis.join(10)
        raise
    run.stop.set()
    nemesis.join(30)
    deadline = time.monotonic() + timeout_s * 3  # one deadline for all: a hung client is reported, not waited on
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
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
    converged = None
    if members:  # members poll on until the group settles (or 60 s pass)
        with run.lock:
            run.member_state.clear()
        run.healed.set()
        settle = time.monotonic() + 60
        stable_since = None
        while time.monotonic() < settle:
            if run.converged() and len(run.member_state) == len(members):
                stable_since = stable_since or time.monotonic()
                if time.monotonic() - stable_since >= 2:
                    break
            else:
                stable_since = None
            time.sleep(0.2)
        converged = stable_since is not None
        run.done.set()
        for t in members:
            t.join(max(1.0, timeout_s))
        hung += sum(t.is_alive() for t in members)
        for m in run.stopped_members:
            m.close()
    start_ns = h.now()
    topics = [run.topic] + ([run.output] if run.output else [])
    if workload == "eos":
        _final_committed(run, client_kind, target.bootstrap, timeout_s)
    end_offsets: dict[str, int] = {}
    end_errors: dict[str, str] = {}
    ends_deadline = time.monotonic() + 60
    for t in topics:
        ends, errors = _end_offsets(client_kind, target.bootstrap, t, timeout_s, run.isolation, ends_deadline)
        end_offsets.update(ends)
        end_errors.update(errors)
    if end_errors:
        log(f"no end offset for {', '.join(sorted(end_errors))} within 60 s after healing: "
            f"{next(iter(end_errors.values()))}")
    reached = _final_read(run, [(t, p) for t in topics for p in range(PARTITIONS)], end_offsets)
    config = {
        "acks": "all", "idempotence": workload != "queue", "isolation_level": run.isolation,
        "txn": workload in ("txn", "eos"), "sub_via": ["assign"], "replication_factor": rf,
        "partitions": PARTITIONS, "brokers": target.brokers, "compacted": workload == "compaction",
        "client": client_kind, "seconds": seconds, "staleness_bound_ms": 60_000,
        **({"min_insync_replicas": target.min_insync_replicas} if target.min_insync_replicas is not None else {}),
        **({"broker_config": dict(target.broker_config)} if target.broker_config else {}),
        "final_read": {"performed": True, "start_ns": start_ns, "heal_ns": heal_ns, "reached_end": reached,
                       "took_ms": (h.now() - start_ns) // 1_000_000, "staleness_bound_ms": 60_000,
                       "end_offsets": end_offsets, **({"end_offset_errors": end_errors} if end_errors else {})},
    }
    if workload == "eos":
        config["eos"] = {"input": run.topic, "output": run.output, "group": EOS_GROUP, "source_shift": SOURCE_SHIFT}
    if workload == "compaction":
        config["topic_configs"] = dict(COMPACTED_CONFIGS)
    if workload == "groups":
        config["sub_via"] = ["subscribe"]
        config["groups"] = {"group": run.group, "assignor": "range", "static": False, "keys": run.keys(),
                            "final_polls": True}
    run_meta = {"format": 1, "run_id": out_dir.name, "seed": seed, "target": target.name, "workload": workload,
                "started_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "config": config, "faults": faults,
                "versions": {"kafkacheck": kafkacheck.__version__,
                             "broker": getattr(target, "version", "") or target.name}}
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "run.json").write_text(json.dumps(run_meta, indent=2, sort_keys=True) + "\n")
    write_jsonl(out_dir / "history.jsonl", h.recorder.ops)
    from properties.queue import check

    result = check(h.recorder.ops, config)
    (out_dir / "results.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    acked = sum(1 for op in h.recorder.ops if op["f"] in ("send", "txn") and op["type"] == "ok"
                for mop in op["value"] if mop[0] == "send")
    result["summary"] = {"ops": len(h.recorder.ops), "acknowledged_sends": acked, "hung_clients": hung,
                         "final_read_reached_end": reached, "nemesis": nemesis_log}
    if converged is not None:
        result["summary"]["group_converged"] = converged
    result["run_dir"] = str(out_dir)
    return result


def _final_committed(run: _Run, kind: str, bootstrap: str, timeout_s: float) -> None:
    """eos: the group's committed input offsets, as a ``committed`` op."""
    from kafkacheck.conform.clients import CLIENTS

    h = run.h
    process = h.new_process()
    keys = run.keys()
    h.op(process, "invoke", "committed", keys)
    client = CLIENTS[kind](bootstrap, timeout_s)
    got: dict[str, int | None] = {}
    for p in range(PARTITIONS):
        off = client.committed(EOS_GROUP, run.topic, p)
        if isinstance(off, str):
            h.op(process, "fail", "committed", keys, error=off[:80])
            return
        got[f"{run.topic}:{p}"] = off if off >= 0 else None
    h.op(process, "ok", "committed", got)


def _final_read(run: _Run, tps: list[tuple[str, int]], end_offsets: dict[str, int]) -> bool:
    """Read every partition from the beginning up to its end offset; True when it got there
    (never for a partition whose end offset the broker did not tell)."""
    h = run.h
    process = h.new_process()
    keys = [f"{t}:{p}" for t, p in tps]
    reader = make_poller(run.kind, run.target.bootstrap, tps, run.timeout_s, run.isolation, keyed=run.keyed)
    h.op(process, "invoke", "assign", keys, seek_to_beginning=True)
    h.op(process, "ok", "assign", keys, seek_to_beginning=True)
    positions = {k: 0 for k in keys}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(positions[k] < end_offsets.get(k, 0) for k in keys):
        h.op(process, "invoke", "poll", [["poll"]])
        try:
            got = reader.poll()
            positions = reader.positions(positions)
        except Exception as e:
            h.op(process, "info", "poll", [["poll", {}]], error=type(e).__name__)
            break
        h.op(process, "ok", "poll", [["poll", got]])
    reader.close()
    # positions, not the last offset read: transaction markers take offsets too
    return all(k in end_offsets and positions[k] >= end_offsets[k] for k in keys)


def _leader_node(target, topic: str, rng: random.Random) -> str | None:
    """The process name of the leader of a random partition of ``topic`` (None if unknown)."""
    from kafkacheck.conform.targets import parse_bootstrap
    from kafkacheck.serve import metadata_probe

    for host, port in parse_bootstrap(target.bootstrap):
        try:
            _brokers, topics = metadata_probe(host, port, 2.0)
        except Exception:
            continue
        leaders = [b for b in topics.get(topic, []) if b >= 0]
        if leaders:
            b = rng.choice(leaders)
            for name in (f"broker-{b}", f"kafka-{b}"):
                if name in target.netns.nodes:
                    return name
    return None


def _plan_node_fault(target, fault: str, topic: str, rng: random.Random) -> dict:
    """The targets of one fault between nodes, as the history records them (``nodes``)."""
    names = sorted(target.netns.nodes)
    if fault in ("isolate", "one-way-nodes"):
        # by default the leader of a partition the workload writes: the zombie leader
        return {"nodes": [_leader_node(target, topic, rng) or rng.choice(names)]}
    if fault == "split":
        # a minority of the nodes against the majority; clients reach both sides
        minority = sorted(rng.sample(names, (len(names) - 1) // 2))
        return {"nodes": minority, "majority": [n for n in names if n not in minority]}
    if fault == "lossy-nodes":
        return {"nodes": names, "loss_pct": rng.choice([5, 10, 20]), "dup_pct": rng.choice([2, 5])}
    return {"nodes": names}


def _node_timings(target) -> tuple[float, float]:
    """(replica lag time, broker session timeout) of the spawned cluster, in seconds: how long
    a leader takes to drop silent followers from the ISR, and the controller to fence a
    silent broker."""
    cluster = target.cluster
    if hasattr(cluster, "nodes"):  # Apache Kafka
        props = cluster.properties(cluster.nodes[0])
        return (int(props.get("replica.lag.time.max.ms", "30000")) / 1000,
                int(props.get("broker.session.timeout.ms", "9000")) / 1000)
    from reference.server.cluster import SERVER_TIMINGS

    return SERVER_TIMINGS["replica_lag_time_max_ms"] / 1000, SERVER_TIMINGS["session_timeout_ms"] / 1000


def _replication_cut(target, node: str) -> dict:
    """The first stage of ``isolate``: how to cut ``node`` off from the replication links of
    the other nodes while it still reaches the controllers (as the history records it)."""
    cluster = target.cluster
    if hasattr(cluster, "nodes"):  # Apache Kafka: each node broker and controller; INTERNAL is replication
        return {"ports": sorted(n.internal_port for n in cluster.nodes)}
    return {"among": sorted(n for n in target.netns.nodes if n != "controller" and n != node)}


def _apply_node_fault(target, fault: str, value: dict) -> None:
    net = target.netns
    if fault == "isolate":
        net.isolate(value["nodes"][0], among=value.get("among"), ports=value.get("ports"))
    elif fault == "one-way-nodes":
        net.one_way(value["nodes"][0])
    elif fault == "split":
        net.split(value["nodes"])
    elif fault == "lossy-nodes":
        net.lossy(value["loss_pct"], value["dup_pct"])
    else:
        net.slow()


def _nemesis_loop(target, faults: list[str], h: History, rng: random.Random, stop: threading.Event,
                  nemesis_log: list[dict], topic: str = "") -> None:
    def note(f: str, name: str, **extra: Any) -> None:
        nemesis_log.append({"at_s": round(h.now() / 1e9, 2), "f": f, "node": name, **extra})

    def hold_then(undo: str, name: str, action) -> bool:
        """Wait 2-4 s, then undo; False when the run ended first."""
        if stop.wait(rng.uniform(2.0, 4.0)):
            return False
        h.op("nemesis", "invoke", undo, {"nodes": [name]})
        action()
        h.op("nemesis", "info", undo, {"nodes": [name]})
        note(undo, name)
        return True

    procs = {name: p for name, p in target.processes.items() if name != "controller"}
    usable = [f for f in faults if (f in PROCESS_FAULTS and procs) or (f in NETWORK_FAULTS and target.proxies)
              or (f in NODE_FAULTS and target.netns is not None)]
    if not usable:
        return
    lag, session = _node_timings(target) if target.netns is not None else (0.0, 0.0)
    while not stop.wait(rng.uniform(2.0, 4.0)):
        fault = rng.choice(usable)
        if fault in NODE_FAULTS:
            value = _plan_node_fault(target, fault, topic, rng)
            if fault == "isolate":
                # the zombie leader, the way it comes about: its followers are cut off first
                # (it still reaches the controllers, and may shrink the ISR to itself), then
                # everything
                cut = _replication_cut(target, value["nodes"][0])
                first = {**value, "stage": "replication", **cut}
                h.op("nemesis", "invoke", fault, first)
                _apply_node_fault(target, fault, first)
                h.op("nemesis", "info", fault, first)
                note(fault, value["nodes"][0], stage="replication", **cut)
                # long enough for the leader to drop its silent followers from the ISR (Kafka
                # checks every half lag time, so a follower goes between 1 and 1.5 lag times
                # after it fell silent)
                if stop.wait(1.5 * lag + 4):
                    break
                value = {**value, "stage": "all"}
            h.op("nemesis", "invoke", fault, value)
            _apply_node_fault(target, fault, value)
            if fault == "slow-nodes":
                value = {**value, "how": target.netns.faults[-1]}
            h.op("nemesis", "info", fault, value)
            note(fault, ",".join(value["nodes"]), **{k: v for k, v in value.items() if k != "nodes"})
            # held longer than a broker's session timeout, so that elections happen under it
            # (an isolated leader is fenced, and another elected, before the heal)
            hold = rng.uniform(6.0, 12.0)
            if fault == "isolate":
                hold = max(hold, session + rng.uniform(3.0, 8.0))
            if stop.wait(hold):
                break
            h.op("nemesis", "invoke", "heal", {"nodes": value["nodes"]})
            target.netns.heal()
            h.op("nemesis", "info", "heal", {"nodes": value["nodes"]})
            note("heal", ",".join(value["nodes"]))
            continue
        if fault in NETWORK_FAULTS:
            name = rng.choice(sorted(target.proxies))
            proxy = target.proxies[name]
            value: dict = {"nodes": [name]}
            if fault == "one-way":
                value["direction"] = rng.choice(["in", "out"])
            elif fault == "delay":
                value["ms"] = 300
            h.op("nemesis", "invoke", fault, value)
            if fault == "partition":
                proxy.blackhole("both")
            elif fault == "one-way":
                proxy.blackhole(value["direction"])
            elif fault == "delay":
                proxy.delay(300)
            else:
                proxy.drop()
            h.op("nemesis", "info", fault, value)
            note(fault, name, **{k: v for k, v in value.items() if k != "nodes"})
            if fault != "drop" and not hold_then("heal", name, proxy.heal):
                break
            continue
        name = rng.choice(sorted(procs))
        proc = procs[name]
        h.op("nemesis", "invoke", fault, {"nodes": [name]})
        if fault == "kill":
            proc.kill()
        else:
            proc.pause()
        h.op("nemesis", "info", fault, {"nodes": [name]})
        note(fault, name)
        undo, action = ("restart", proc.start) if fault == "kill" else ("resume", proc.resume)
        if not hold_then(undo, name, action):
            break


def _end_offsets(kind: str, bootstrap: str, topic: str, timeout_s: float, isolation: str,
                 deadline: float) -> tuple[dict[str, int], dict[str, str]]:
    """Every partition's end offset, asked again until `deadline` (time.monotonic()) for those
    the broker could not answer yet (right after a restart leadership may still move) or, with
    read_committed, whose last stable offset is still below the high watermark; the end
    offsets, and the last error of every partition still without one."""
    from kafkacheck.conform.clients import CLIENTS

    client = CLIENTS[kind](bootstrap, timeout_s)
    out: dict[str, int] = {}
    errors: dict[str, str] = {}
    pending = list(range(PARTITIONS))
    while True:
        for p in list(pending):
            key = f"{topic}:{p}"
            offs = client.offsets(topic, p, isolation)
            if isinstance(offs, str):
                errors[key] = offs
                continue
            if isolation == "read_committed":
                # the read_committed end is the last stable offset: below the high watermark
                # while a transaction is open (one whose producer vanished stays open until
                # the coordinator times it out and aborts it), and committed records past it
                # cannot be read yet
                high = client.offsets(topic, p, "read_uncommitted")
                if isinstance(high, str):
                    errors[key] = high
                    continue
                if offs[1] < high[1]:
                    errors[key] = (f"the last stable offset {offs[1]} is below the high watermark {high[1]}: "
                                   "a transaction is still open")
                    continue
            out[key] = offs[1]
            errors.pop(key, None)
            pending.remove(p)
        if not pending or time.monotonic() >= deadline:
            return out, errors
        time.sleep(0.5)
