"""The workload's client handles for kafka-python and confluent-kafka (Apache Kafka's Java
client has its own in :mod:`kafkacheck.real.java`): a producer, a transactional producer,
a consumer assigned to partitions, a consumer-group member, and a share-group member
(KIP-932; confluent-kafka only: kafka-python has no share consumer).

A handle wraps one real client and speaks the workload's terms: integer values, ``topic:p``
keys, offsets or error strings. A call that fails raises (the workload records the op as
``fail`` or ``info``); closing never raises and never leaves the client's threads running.
:mod:`kafkacheck.real.kinds` picks the handles of the ``--client`` asked for.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from typing import Any

from kafkacheck.real.client_debug import rdkafka_debug
from kafkacheck.real.clients import close_kafka_python_producer


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


class Sender(_Producer):
    """A producer; ``idempotent`` False means acks=all without retries."""

    def __init__(self, kind: str, bootstrap: str, timeout_s: float, idempotent: bool = True) -> None:
        self.kind, self.timeout_s = kind, timeout_s
        if kind == "confluent":
            from confluent_kafka import Producer
            conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": idempotent,
                    "message.timeout.ms": int(timeout_s * 1000), "log_level": 2, **rdkafka_debug("producer")}
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



# A transactional producer's timeouts, as Jepsen's Kafka harness sets them (2024): a request
# times out well before the call waiting for it gives up, so that the Java client and
# librdkafka retry it (a commit whose EndTxn timed out is sent again, not abandoned;
# kafka-python gives a timed-out transactional request up: its producer turns fatal and the
# commit's outcome is unknown). The transaction timeout is longer than Jepsen's 1 s: the
# coordinator would abort, and fence, most transactions that pause (TXN_PAUSE_S) at its
# next sweep.
TXN_REQUEST_TIMEOUT_MS = 3000
TXN_DELIVERY_TIMEOUT_MS = 10_000
TXN_MAX_BLOCK_MS = 10_000
TXN_TIMEOUT_MS = 10_000

# Kafka's error names after which a commit certainly did not happen: the coordinator answered
# its EndTxn that it holds no transaction of this producer to commit (INVALID_TXN_STATE; a
# retried EndTxn that an earlier attempt applied is answered NONE), a newer epoch fenced and
# aborted it (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, librdkafka's _FENCED), or a send of the
# transaction failed (TRANSACTION_ABORTABLE, OUT_OF_ORDER_SEQUENCE_NUMBER: the transaction can
# only be aborted). Jepsen's Kafka client draws the same line.
NOT_COMMITTED_ERRORS = frozenset({"INVALID_TXN_STATE", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH", "_FENCED",
                                  "TRANSACTION_ABORTABLE", "OUT_OF_ORDER_SEQUENCE_NUMBER"})
# what kafka-python and the Java client raise when commit is called on a producer already in
# an error state: the EndTxn was never sent
_ERROR_STATE = "Cannot execute transactional method because we are in an error state"
# librdkafka, when a transaction failed locally while its EndTxn was in flight: the commit may
# have happened ("EndTxn failed with _TIMED_OUT but transaction had already failed") or did
# ("Transaction commit succeeded on the broker but the transaction had already failed locally")
_MAYBE_COMMITTED = ("EndTxn failed with", "succeeded on the broker")


class NotCommitted(Exception):
    """A commit that certainly did not commit: recorded as a definite failure."""


def not_committed(name: str, message: str, requires_abort: bool = False) -> bool:
    """Whether a commit that failed with Kafka's error ``name`` (kafka-python: its error
    class's name; the Java driver: its answer's first word; librdkafka: KafkaError.name())
    and ``message`` certainly did not commit: see NOT_COMMITTED_ERRORS; also a producer in an
    error state before the commit (its EndTxn never sent), and librdkafka's
    ``txn_requires_abort`` (the transaction failed before its commit) unless the message says
    the EndTxn may have committed it. Anything else (a timeout, a lost connection) leaves the
    outcome unknown."""
    if maybe_committed(message):
        return False
    return name in NOT_COMMITTED_ERRORS or _ERROR_STATE in message or requires_abort


def maybe_committed(message: str) -> bool:
    """Whether librdkafka's ``message`` says the EndTxn of a failed transaction may have
    committed it (then no error name in the message makes the outcome certain)."""
    return any(m in message for m in _MAYBE_COMMITTED)


def bounded(call, timeout_s: float):
    """``call()``'s result, or TimeoutError when it has not returned within ``timeout_s`` (it
    goes on in its own thread, until the client it waits on is closed)."""
    box: list = []

    def run() -> None:
        try:
            box.append((True, call()))
        except BaseException as e:  # handed to the caller
            box.append((False, e))

    thread = threading.Thread(target=run, name="kafkacheck-bounded", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if not box:
        raise TimeoutError(f"no answer within {timeout_s:.0f} s")
    ok, value = box[0]
    if not ok:
        raise value
    return value


class TxnSender(_Producer):
    """A transactional producer (timeouts: TXN_*). ``bounded``: kafka-python's commit, abort
    and send_offsets, which wait without a timeout while the coordinator cannot be reached,
    and librdkafka's send_offsets_to_transaction, whose timeout does not bound its wait for
    the group coordinator (its request to it has no deadline; librdkafka issues #5456 and
    #5511), raise TimeoutError after the call's timeout instead (the outcome of a commit is
    then unknown; the caller closes the producer)."""

    def __init__(self, kind: str, bootstrap: str, txn_id: str, timeout_s: float, bounded: bool = False) -> None:
        self.kind, self.timeout_s, self.bounded = kind, timeout_s, bounded
        if kind == "confluent":
            from confluent_kafka import Producer
            self.p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id, "log_level": 2,
                               "socket.timeout.ms": TXN_REQUEST_TIMEOUT_MS,
                               "message.timeout.ms": TXN_DELIVERY_TIMEOUT_MS,
                               "transaction.timeout.ms": TXN_TIMEOUT_MS, **rdkafka_debug("txn")})
            self.p.init_transactions(timeout_s)
        else:
            from kafka import KafkaProducer
            self.p = KafkaProducer(bootstrap_servers=bootstrap.split(","), transactional_id=txn_id,
                                   request_timeout_ms=TXN_REQUEST_TIMEOUT_MS, max_block_ms=TXN_MAX_BLOCK_MS,
                                   delivery_timeout_ms=TXN_DELIVERY_TIMEOUT_MS,
                                   transaction_timeout_ms=TXN_TIMEOUT_MS)
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

    def send_offsets(self, offsets: dict[tuple[str, int], int], poller: Poller | GroupMember) -> int:
        """Add the consumer group's next offsets to the transaction, with the group metadata of
        ``poller``'s consumer (KIP-447); the generation (member epoch) it named, -1 for none."""
        if self.kind == "confluent":
            from confluent_kafka import TopicPartition
            meta = poller.c.consumer_group_metadata()
            tps = [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
            self._wait(lambda: self.p.send_offsets_to_transaction(tps, meta, self.timeout_s))
            return confluent_generation(meta)
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata
        meta = poller.c.group_metadata()
        self._wait(lambda: self.p.send_offsets_to_transaction(
            {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in sorted(offsets.items())}, meta))
        return int(getattr(meta, "generation_id", -1))

    def _wait(self, call) -> None:
        """A transactional call that may wait past its timeout: bounded by it (and 2 s) when
        ``bounded``."""
        if self.bounded:
            bounded(call, self.timeout_s + 2)
        else:
            call()

    def commit(self) -> None:
        """Commit; :class:`NotCommitted` when it certainly did not commit, any other exception
        when the outcome is unknown."""
        try:
            if self.kind == "confluent":
                self.p.commit_transaction(self.timeout_s)
            else:
                self._wait(self.p.commit_transaction)
        except Exception as e:
            text = f"{type(e).__name__}: {e}"
            error = e.args[0] if self.kind == "confluent" and e.args else None
            if hasattr(error, "txn_requires_abort"):  # librdkafka's KafkaError
                definite = not_committed(error.name(), error.str(), error.txn_requires_abort())
            else:  # kafka-python: its error classes carry Kafka's name
                definite = not_committed(getattr(type(e), "message", type(e).__name__), str(e))
            if definite:
                raise NotCommitted(text) from e
            raise

    def abort(self) -> None:
        if self.kind == "confluent":
            self.p.abort_transaction(self.timeout_s)
        else:
            self._wait(self.p.abort_transaction)



class Poller:
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
                               "socket.timeout.ms": int(timeout_s * 1000), **rdkafka_debug("poller")})
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
    generation or member epoch is old or a rebalance is on), as opposed to an unknown outcome."""
    text = error.upper().replace(" ", "_")
    return any(w in text for w in ("ILLEGAL_GENERATION", "UNKNOWN_MEMBER", "REBALANCE_IN_PROGRESS", "FENCED_INSTANCE",
                                   "COMMITFAILED", "ILLEGALGENERATION", "STALE_MEMBER_EPOCH", "FENCED_MEMBER_EPOCH",
                                   "STALEMEMBEREPOCH", "FENCEDMEMBEREPOCH"))


def confluent_generation(metadata: bytes) -> int:
    """The generation in librdkafka's serialised consumer group metadata ("CGMDv2:" and an
    int32 copied in the host's byte order); -1 when unknown. With the consumer protocol it is
    the member epoch (librdkafka keeps the epoch of each ConsumerGroupHeartbeat answer there)."""
    if isinstance(metadata, bytes) and metadata.startswith(b"CGMDv2:") and len(metadata) >= 11:
        return int.from_bytes(metadata[7:11], sys.byteorder, signed=True)
    return -1


class GroupMember:
    """A consumer-group member: subscribe, poll, commit; rebalance callbacks go to ``log``.

    ``protocol`` classic: the range assignor, eager: every assignment is the whole of it, at
    a generation of the group. consumer (KIP-848): the coordinator's range assignor, and the
    assignment is incremental: an assignment callback names only the partitions added, a
    revocation only those taken away, and the generation is the member's own epoch. As the
    simulator's member does, the log then also notes, after a poll, an epoch reached or a
    revocation made without partitions added (an ``assigned`` entry without keys)."""

    def __init__(self, kind: str, bootstrap: str, topic: str, group: str, timeout_s: float,
                 protocol: str = "classic", isolation: str | None = None) -> None:
        self.kind, self.topic, self.timeout_s, self.protocol = kind, topic, timeout_s, protocol
        self._reset()
        extra = {} if isolation is None else {"isolation.level": isolation}  # None: the client's default
        if kind == "confluent":
            from confluent_kafka import Consumer
            conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
                    "auto.offset.reset": "earliest", "log_level": 2, "socket.timeout.ms": int(timeout_s * 1000),
                    **extra, **rdkafka_debug("member")}
            if protocol == "consumer":  # session and heartbeat are the broker's (group.consumer.*)
                conf.update({"group.protocol": "consumer", "group.remote.assignor": "range"})
            else:
                conf.update({"partition.assignment.strategy": "range", "session.timeout.ms": 6000,
                             "heartbeat.interval.ms": 500})
            self.c = Consumer(conf)
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
                                   heartbeat_interval_ms=500, request_timeout_ms=int(timeout_s * 1000) + 1000,
                                   **({} if isolation is None else {"isolation_level": isolation}))
            self.c.subscribe([topic], listener=Listener())

    def _reset(self) -> None:
        """The bookkeeping of a member that has not joined yet."""
        self.log: list[dict] = []
        self.owned: set[str] = set()
        self.positions: dict[str, int] = {}
        self.generation = -1
        self._noted: tuple[int, frozenset[str]] = (-1, frozenset())  # the last assigned entry's (epoch, owned)

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
        """An assignment callback: the whole assignment (classic, eager), or the partitions
        added to what the member owns (consumer)."""
        self.generation = generation
        self.owned = self.owned | keys if self.protocol == "consumer" else set(keys)
        self._note(sorted(keys))

    def _note(self, keys: list[str]) -> None:
        self._noted = (self.generation, frozenset(self.owned))
        self.log.append({"type": "assigned", "keys": keys, "generation": self.generation,
                         "owned": sorted(self.owned)})

    def note_epoch(self, epoch: int) -> None:
        """consumer protocol, after a poll: the member ``epoch`` the client holds now. When it
        or what the member owns changed since the last ``assigned`` entry (a new epoch with the
        same partitions, or partitions revoked and none added), an ``assigned`` entry without
        keys. Not while the member has no epoch of the group (below 1: joining, leaving)."""
        if self.protocol != "consumer" or epoch < 1 or self._noted == (epoch, frozenset(self.owned)):
            return
        self.generation = epoch
        self._note([])

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
        if self.protocol == "consumer":
            self.note_epoch(self._polled_epoch())
        return out

    def _polled_epoch(self) -> int:
        """The member epoch after the poll that just returned."""
        return self._current_generation()

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

    def rewind(self) -> None:
        """Back to the group's committed offsets in every partition the client has (after an
        aborted transaction; with read_committed the offset fetch waits for a transaction still
        carrying offsets, KIP-447's require_stable), or to the beginning where none is committed."""
        self.positions.clear()
        if self.kind == "confluent":
            from confluent_kafka import OFFSET_BEGINNING, TopicPartition
            assigned = self.c.assignment()
            for tp in self.c.committed(assigned, timeout=self.timeout_s) if assigned else ():
                self.c.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
            return
        for tp in self.c.assignment():
            offset = self.c.committed(tp, timeout_ms=int(self.timeout_s * 1000))
            if offset is None:
                self.c.seek_to_beginning(tp)
            else:
                self.c.seek(tp, offset)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.c.close()
