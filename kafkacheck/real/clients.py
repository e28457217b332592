"""What a conformance case asks of a Kafka client, for kafka-python and confluent-kafka (and,
through :mod:`kafkacheck.real.java`, Apache Kafka's Java client).

Every call has a timeout and returns its outcome (records, offsets, or an error string);
none raises for a broker's refusal, so a case can show the error as evidence. Each adapter
creates the real client objects per call (or per producer) and closes them, so a case never
inherits another case's state.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple


def close_kafka_python_producer(p: Any, timeout_s: float) -> None:
    """Close a kafka-python producer and stop its I/O thread whatever happens. Its ``close``
    flushes first and raises when the flush times out (a broker down, a batch unanswered)
    before it has stopped its sender thread, which then retries for ever: stop that thread
    as ``close`` itself does when a graceful close runs out of time."""
    try:
        p.close(timeout=timeout_s)
    except Exception:
        sender = getattr(p, "_sender", None)
        if sender is not None:
            sender.force_close()
            sender.join(timeout_s)


@dataclass(frozen=True)
class Rec:
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


class ShareRec(NamedTuple):
    """A record a share consumer (KIP-932) acquired: ``delivery_count`` is how many times the
    share group has delivered it, this delivery included (1 the first time), as the client
    reports it; -1 when the client reports none."""

    topic: str
    partition: int
    offset: int
    value: bytes | None
    delivery_count: int


@dataclass
class Sent:
    """The outcome of one send: an offset, or an error (None when no answer came)."""

    value: bytes
    offset: int = -1
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.offset >= 0


@dataclass
class GroupView:
    assignments: list[set[int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class ClientError(Exception):
    pass


def settle(assignments, partitions: int, settle_s: float) -> list[set[int]]:
    """Poll ``assignments()`` (each member's partitions) until they cover ``partitions`` and
    stay the same for 2 s, or ``settle_s`` passes; the last seen."""
    end = time.monotonic() + settle_s
    last, stable_since = None, time.monotonic()
    while time.monotonic() < end:
        current = assignments()
        if current != last:
            last, stable_since = current, time.monotonic()
        elif sum(map(len, current)) >= partitions and time.monotonic() - stable_since > 2:
            break
        time.sleep(0.1)
    return last or []


# ---------------------------------------------------------------- confluent-kafka


class ConfluentClient:
    name = "confluent"

    def __init__(self, bootstrap: str, timeout_s: float = 20.0) -> None:
        import confluent_kafka  # noqa: F401 - fail early when it is not installed

        self.bootstrap = bootstrap
        self.timeout_s = timeout_s

    def _conf(self, **extra: Any) -> dict:
        # librdkafka logs connection trouble to stderr at level 3 and above; the cases report
        # what matters as evidence, so only critical messages are let through
        return {"bootstrap.servers": self.bootstrap, "socket.timeout.ms": int(self.timeout_s * 1000),
                "log_level": 2, **extra}

    def create_topic(self, topic: str, partitions: int, rf: int, configs: dict | None = None) -> str | None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(self._conf())
        try:
            admin.create_topics([NewTopic(topic, partitions, rf, config=configs or {})],
                                operation_timeout=self.timeout_s)[topic].result(self.timeout_s)
        except Exception as e:
            return str(e) or repr(e)  # (a future that timed out has an empty message)
        return None

    def produce(self, topic: str, partition: int, values: list[bytes], acks: str = "all",
                idempotent: bool = False, key: bytes | None = None,
                headers: list[tuple[str, bytes]] | None = None, retries: int | None = None) -> list[Sent]:
        from confluent_kafka import Producer

        extra = {} if retries is None else {"retries": retries}
        p = Producer(self._conf(**{"acks": acks, "enable.idempotence": idempotent,
                                   "message.timeout.ms": int(self.timeout_s * 1000), "linger.ms": 2, **extra}))
        out = [Sent(v) for v in values]

        def done(i: int):
            def cb(err, msg) -> None:
                if err is not None:
                    out[i].error = str(err)
                else:
                    out[i].offset = msg.offset()
            return cb

        for i, v in enumerate(values):
            p.produce(topic, value=v, key=key, partition=partition, headers=headers, on_delivery=done(i))
            p.poll(0)
        left = p.flush(self.timeout_s + 5)
        for s in out:
            if s.offset < 0 and s.error is None:
                s.error = "no answer" if left else "unknown"
        return out

    def read(self, topic: str, partition: int, start: int, isolation: str = "read_uncommitted",
             want: int | None = None, idle_s: float = 2.0) -> list[Rec] | str:
        """Records from ``start`` until ``want`` arrived or nothing came for ``idle_s``."""
        from confluent_kafka import Consumer, KafkaError, TopicPartition

        c = Consumer(self._conf(**{"group.id": f"kafkacheck-reader-{time.monotonic_ns()}",
                                   "enable.auto.commit": False, "isolation.level": isolation,
                                   "auto.offset.reset": "error"}))
        try:
            c.assign([TopicPartition(topic, partition, start)])
            out: list[Rec] = []
            end = time.monotonic() + self.timeout_s
            last = time.monotonic()
            while time.monotonic() < end and (want is None or len(out) < want):
                m = c.poll(0.2)
                if m is None:
                    if time.monotonic() - last > idle_s:
                        break
                    continue
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    return str(m.error())
                last = time.monotonic()
                out.append(Rec(m.offset(), m.key(), m.value(), tuple(m.headers() or ())))
            return out
        finally:
            c.close()

    def offsets(self, topic: str, partition: int, isolation: str = "read_uncommitted") -> tuple[int, int] | str:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer(self._conf(**{"group.id": "kafkacheck-offsets", "isolation.level": isolation}))
        try:
            return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=self.timeout_s, cached=False)
        except Exception as e:
            return str(e)
        finally:
            c.close()

    def delete_records(self, topic: str, partition: int, offset: int) -> int | str:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self._conf())
        tp = TopicPartition(topic, partition, offset)
        try:
            result = admin.delete_records([tp], operation_timeout=self.timeout_s)[tp].result(self.timeout_s)
            return result.low_watermark
        except Exception as e:
            return str(e)

    def commit(self, group: str, topic: str, partition: int, offset: int) -> str | None:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer(self._conf(**{"group.id": group, "enable.auto.commit": False}))
        try:
            result = c.commit(offsets=[TopicPartition(topic, partition, offset)], asynchronous=False)
            errors = [str(tp.error) for tp in result or () if tp.error]
            return "; ".join(errors) or None
        except Exception as e:
            return str(e)
        finally:
            c.close()

    def committed(self, group: str, topic: str, partition: int) -> int | str:
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer(self._conf(**{"group.id": group, "enable.auto.commit": False}))
        try:
            [tp] = c.committed([TopicPartition(topic, partition)], timeout=self.timeout_s)
            return tp.offset if tp.error is None else str(tp.error)
        except Exception as e:
            return str(e)
        finally:
            c.close()

    def alter_group_configs(self, group: str, configs: dict[str, str]) -> str | None:
        """Set ``group``'s dynamic configs (IncrementalAlterConfigs, SET, on the GROUP config
        resource: librdkafka sends its ResourceType.GROUP as Kafka's config resource type 32),
        e.g. a share group's ``share.auto.offset.reset``, before or after members join; an error
        string or None."""
        from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

        admin = AdminClient(self._conf())
        resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
            ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()])
        try:
            admin.incremental_alter_configs([resource], request_timeout=self.timeout_s)[resource].result(self.timeout_s)
        except Exception as e:
            return str(e) or repr(e)
        return None

    def transactional(self, txn_id: str) -> ConfluentTxn:
        return ConfluentTxn(self, txn_id)

    def group(self, topic: str, group: str, members: int, partitions: int,
              strategy: str = "range", settle_s: float = 30.0) -> GroupView:
        from confluent_kafka import Consumer

        strategies = {"range": "range", "roundrobin": "roundrobin", "cooperative-sticky": "cooperative-sticky"}
        consumers = [Consumer(self._conf(**{"group.id": group, "partition.assignment.strategy": strategies[strategy],
                                            "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500,
                                            "auto.offset.reset": "earliest"})) for _ in range(members)]
        view = GroupView()
        try:
            for c in consumers:
                c.subscribe([topic])
            end = time.monotonic() + settle_s
            stable_since = None
            last = None
            while time.monotonic() < end:
                for c in consumers:
                    m = c.poll(0.05)
                    if m is not None and m.error():
                        view.errors.append(str(m.error()))
                current = [{tp.partition for tp in c.assignment()} for c in consumers]
                if current != last:
                    last, stable_since = current, time.monotonic()
                elif sum(map(len, current)) >= partitions and time.monotonic() - stable_since > 2:
                    break
            view.assignments = last or []
            return view
        finally:
            for c in consumers:
                c.close()


class ConfluentTxn:
    def __init__(self, client: ConfluentClient, txn_id: str) -> None:
        from confluent_kafka import Producer

        self.client = client
        self.p = Producer(client._conf(**{"transactional.id": txn_id,
                                          "transaction.timeout.ms": 60_000}))
        self.t = client.timeout_s

    def init(self) -> str | None:
        return self._do(lambda: self.p.init_transactions(self.t))

    def begin(self) -> str | None:
        return self._do(self.p.begin_transaction)

    def send(self, topic: str, partition: int, value: bytes) -> str | None:
        """Send and wait for the broker's answer (an aborted transaction would otherwise purge a
        record still in the client's queue, and the broker would never see it)."""
        errors: list[str] = []

        def done(err, msg) -> None:
            if err is not None:
                errors.append(str(err))

        def go() -> None:
            self.p.produce(topic, value=value, partition=partition, on_delivery=done)
            if self.p.flush(self.t):
                errors.append("no answer to the send")

        return self._do(go) or (errors[0] if errors else None)

    def commit(self) -> str | None:
        return self._do(lambda: self.p.commit_transaction(self.t))

    def abort(self) -> str | None:
        return self._do(lambda: self.p.abort_transaction(self.t))

    @staticmethod
    def _do(fn) -> str | None:
        try:
            fn()
        except Exception as e:
            return str(e)
        return None

    def close(self) -> None:
        self.p.flush(1)


# ---------------------------------------------------------------- kafka-python


class KafkaPythonClient:
    name = "kafka-python"

    def __init__(self, bootstrap: str, timeout_s: float = 20.0) -> None:
        self.bootstrap = bootstrap.split(",")
        self.timeout_s = timeout_s
        self.ms = int(timeout_s * 1000)

    def create_topic(self, topic: str, partitions: int, rf: int, configs: dict | None = None) -> str | None:
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic

        admin = None
        try:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=self.ms)
            result = admin.create_topics([NewTopic(topic, partitions, rf, topic_configs=configs or {})],
                                         timeout_ms=self.ms)
            for t in getattr(result, "topics", None) or (result.get("topics", []) if isinstance(result, dict) else []):
                code = t["error_code"] if isinstance(t, dict) else t.error_code
                if code:
                    return f"error code {code}: {t.get('error_message') if isinstance(t, dict) else t.error_message}"
        except Exception as e:
            return str(e) or type(e).__name__
        finally:
            if admin is not None:
                admin.close()
        return None

    def produce(self, topic: str, partition: int, values: list[bytes], acks: str = "all",
                idempotent: bool = False, key: bytes | None = None,
                headers: list[tuple[str, bytes]] | None = None, retries: int | None = None) -> list[Sent]:
        from kafka import KafkaProducer

        out = [Sent(v) for v in values]
        try:
            extra = {} if retries is None else {"retries": retries}
            p = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all" if acks == "all" else int(acks),
                              enable_idempotence=idempotent, request_timeout_ms=self.ms,
                              delivery_timeout_ms=self.ms + 1000, linger_ms=2, max_block_ms=self.ms, **extra)
        except Exception as e:
            for s in out:
                s.error = str(e) or type(e).__name__
            return out
        try:
            futures = [p.send(topic, value=v, key=key, partition=partition, headers=headers) for v in values]
            for s, f in zip(out, futures, strict=True):
                try:
                    s.offset = f.get(self.timeout_s + 2).offset
                except Exception as e:
                    s.error = str(e) or type(e).__name__
        finally:
            close_kafka_python_producer(p, 2)
        return out

    def read(self, topic: str, partition: int, start: int, isolation: str = "read_uncommitted",
             want: int | None = None, idle_s: float = 2.0) -> list[Rec] | str:
        from kafka import KafkaConsumer, TopicPartition

        try:
            c = KafkaConsumer(bootstrap_servers=self.bootstrap, isolation_level=isolation, enable_auto_commit=False,
                              request_timeout_ms=self.ms + 1000, auto_offset_reset="none")
        except Exception as e:
            return str(e)
        try:
            tp = TopicPartition(topic, partition)
            c.assign([tp])
            c.seek(tp, start)
            out: list[Rec] = []
            end = time.monotonic() + self.timeout_s
            last = time.monotonic()
            while time.monotonic() < end and (want is None or len(out) < want):
                batch = c.poll(200)
                got = batch.get(tp, [])
                if not got:
                    if time.monotonic() - last > idle_s:
                        break
                    continue
                last = time.monotonic()
                out += [Rec(m.offset, m.key, m.value, tuple(m.headers or ())) for m in got]
            return out
        except Exception as e:
            return str(e) or type(e).__name__
        finally:
            c.close()

    def offsets(self, topic: str, partition: int, isolation: str = "read_uncommitted") -> tuple[int, int] | str:
        from kafka import KafkaConsumer, TopicPartition

        try:
            c = KafkaConsumer(bootstrap_servers=self.bootstrap, isolation_level=isolation,
                              request_timeout_ms=self.ms + 1000)
        except Exception as e:
            return str(e)
        try:
            tp = TopicPartition(topic, partition)
            return c.beginning_offsets([tp], self.ms)[tp], c.end_offsets([tp], self.ms)[tp]
        except Exception as e:
            return str(e) or type(e).__name__
        finally:
            c.close()

    def delete_records(self, topic: str, partition: int, offset: int) -> int | str:
        from kafka import KafkaAdminClient, TopicPartition

        admin = None
        try:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=self.ms)
            result = admin.delete_records({TopicPartition(topic, partition): offset}, timeout_ms=self.ms)
            entry = result[TopicPartition(topic, partition)] if isinstance(result, dict) else result
            return entry.get("low_watermark", offset) if isinstance(entry, dict) else offset
        except Exception as e:
            return str(e) or type(e).__name__
        finally:
            if admin is not None:
                admin.close()

    def commit(self, group: str, topic: str, partition: int, offset: int) -> str | None:
        from kafka import KafkaConsumer, TopicPartition
        from kafka.structs import OffsetAndMetadata

        try:
            c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=group, enable_auto_commit=False,
                              request_timeout_ms=self.ms + 1000)
        except Exception as e:
            return str(e)
        try:
            c.commit({TopicPartition(topic, partition): OffsetAndMetadata(offset, "", -1)})
            return None
        except Exception as e:
            return str(e) or type(e).__name__
        finally:
            c.close()

    def committed(self, group: str, topic: str, partition: int) -> int | str:
        from kafka import KafkaConsumer, TopicPartition

        try:
            c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=group, enable_auto_commit=False,
                              request_timeout_ms=self.ms + 1000)
        except Exception as e:
            return str(e)
        try:
            value = c.committed(TopicPartition(topic, partition))
            return -1 if value is None else value
        except Exception as e:
            return str(e) or type(e).__name__
        finally:
            c.close()

    def alter_group_configs(self, group: str, configs: dict[str, str]) -> str | None:
        """Set ``group``'s dynamic configs (IncrementalAlterConfigs, SET, on the GROUP config
        resource, type 32); an error string or None."""
        from kafka import KafkaAdminClient
        from kafka.admin import ConfigResource, ConfigResourceType

        admin = None
        try:
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=self.ms)
            result = admin.alter_configs([ConfigResource(ConfigResourceType.GROUP, group,
                                                         {k: str(v) for k, v in configs.items()})],
                                         raise_on_unknown=False, incremental=True)
            errors = [f"{name}: {r}" for per_type in result.values() for name, r in per_type.items() if r != "OK"]
            return "; ".join(errors) or None
        except Exception as e:
            return str(e) or type(e).__name__
        finally:
            if admin is not None:
                admin.close()

    def transactional(self, txn_id: str) -> KafkaPythonTxn:
        return KafkaPythonTxn(self, txn_id)

    def group(self, topic: str, group: str, members: int, partitions: int,
              strategy: str = "range", settle_s: float = 30.0) -> GroupView:
        from kafka import KafkaConsumer
        from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
        from kafka.coordinator.assignors.range import RangePartitionAssignor
        from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

        assignor = {"range": RangePartitionAssignor, "roundrobin": RoundRobinPartitionAssignor,
                    "cooperative-sticky": CooperativeStickyAssignor}[strategy]
        view = GroupView()
        consumers = [KafkaConsumer(topic, bootstrap_servers=self.bootstrap, group_id=group,
                                   partition_assignment_strategy=[assignor], session_timeout_ms=10_000,
                                   heartbeat_interval_ms=500, request_timeout_ms=self.ms + 1000)
                     for _ in range(members)]
        stop = threading.Event()

        def poll(c) -> None:
            while not stop.is_set():
                try:
                    c.poll(300)
                except Exception as e:
                    view.errors.append(str(e) or type(e).__name__)
                    time.sleep(0.2)

        threads = [threading.Thread(target=poll, args=(c,), daemon=True) for c in consumers]
        for t in threads:
            t.start()
        try:
            view.assignments = settle(lambda: [{tp.partition for tp in c.assignment()} for c in consumers],
                                      partitions, settle_s)
            return view
        finally:
            stop.set()
            for t in threads:
                t.join(5)
            for c in consumers:
                c.close()


class KafkaPythonTxn:
    def __init__(self, client: KafkaPythonClient, txn_id: str) -> None:
        from kafka import KafkaProducer

        self.p = KafkaProducer(bootstrap_servers=client.bootstrap, transactional_id=txn_id,
                               request_timeout_ms=client.ms, max_block_ms=client.ms)
        self.t = client.timeout_s

    def init(self) -> str | None:
        return self._do(self.p.init_transactions)

    def begin(self) -> str | None:
        return self._do(self.p.begin_transaction)

    def send(self, topic: str, partition: int, value: bytes) -> str | None:
        return self._do(lambda: self.p.send(topic, value=value, partition=partition).get(self.t))

    def commit(self) -> str | None:
        return self._do(self.p.commit_transaction)

    def abort(self) -> str | None:
        return self._do(self.p.abort_transaction)

    @staticmethod
    def _do(fn) -> str | None:
        try:
            fn()
        except Exception as e:
            return str(e) or type(e).__name__
        return None

    def close(self) -> None:
        close_kafka_python_producer(self.p, 2)
