"""Apache Kafka's Java client as the rest of conform knows a client: :class:`JavaClient` for
the cases (the interface of :mod:`~kafkacheck.real.clients`) and the workload handles
:class:`JavaSender`, :class:`JavaTxnSender`, :class:`JavaPoller`, :class:`JavaMember` and
:class:`JavaShareMember` (those of :mod:`~kafkacheck.real.handles`), each a client object
inside the driver process of :mod:`~kafkacheck.real.java`. The cases' consumer groups use the classic
protocol (the Java client's default in 4.x), as for the other two clients; the workloads'
members the one ``--group-protocol`` names (:class:`JavaMember`).
"""

from __future__ import annotations

import base64
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from kafkacheck.real.clients import GroupView, Rec, Sent, ShareRec, settle
from kafkacheck.real.handles import (
    TXN_DELIVERY_TIMEOUT_MS,
    TXN_MAX_BLOCK_MS,
    TXN_REQUEST_TIMEOUT_MS,
    TXN_TIMEOUT_MS,
    GroupMember,
    NotCommitted,
    commit_refused,
    not_committed,
)
from kafkacheck.real.java import (
    ASSIGNORS,
    MARGIN_S,
    Handle,
    JavaError,
    admin_conf,
    b64,
    consumer_conf,
    driver,
    producer_conf,
    share_conf,
    unb64,
)
from kafkacheck.real.share_handles import ACK_TYPES, share_client_id

# ---------------------------------------------------------------- the cases' interface


class JavaClient:
    name = "java"

    def __init__(self, bootstrap: str, timeout_s: float = 20.0) -> None:
        driver()  # raises when conform did not start it
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s

    @contextlib.contextmanager
    def _client(self, kind: str, **extra: Any) -> Iterator[Handle]:
        """A client object in the driver for one call: an admin client, or a producer or
        consumer with ``extra`` settings; closed afterwards."""
        make_conf = {"admin": admin_conf, "producer": producer_conf, "consumer": consumer_conf}[kind]
        conf = make_conf(self.bootstrap, self.timeout_s, **extra)
        handle = Handle(kind, conf, self.timeout_s)
        try:
            yield handle
        finally:
            handle.close()

    def create_topic(self, topic: str, partitions: int, rf: int, configs: dict | None = None) -> str | None:
        try:
            with self._client("admin") as admin:
                admin.call("create_topic", topic=topic, partitions=partitions, rf=rf, configs=configs or {})
        except JavaError as e:
            return str(e)
        return None

    def produce(self, topic: str, partition: int, values: list[bytes], acks: str = "all",
                idempotent: bool = False, key: bytes | None = None,
                headers: list[tuple[str, bytes]] | None = None, retries: int | None = None) -> list[Sent]:
        out = [Sent(v) for v in values]
        extra: dict[str, Any] = {"acks": acks, "enable.idempotence": str(idempotent).lower()}
        if retries is not None:
            extra["retries"] = retries
        records = [{"topic": topic, "partition": partition, "key": b64(key), "value": b64(v),
                    "headers": [[k, b64(hv)] for k, hv in headers or []]} for v in values]
        try:
            with self._client("producer", **extra) as p:
                for s, r in zip(out, p.call("send", self.timeout_s + 2, records=records), strict=True):
                    if "offset" in r:
                        s.offset = r["offset"]
                    else:
                        s.error = r["error"]
        except JavaError as e:
            for s in out:
                if s.offset < 0:
                    s.error = str(e)
        return out

    def read(self, topic: str, partition: int, start: int, isolation: str = "read_uncommitted",
             want: int | None = None, idle_s: float = 2.0) -> list[Rec] | str:
        out: list[Rec] = []
        try:
            with self._client("consumer", **{"isolation.level": isolation, "auto.offset.reset": "none"}) as c:
                c.call("assign", tps=[[topic, partition]], seek=[[topic, partition, start]])
                end = time.monotonic() + self.timeout_s
                last = time.monotonic()
                while time.monotonic() < end and (want is None or len(out) < want):
                    got = c.call("poll", poll_ms=200)["records"]
                    if not got:
                        if time.monotonic() - last > idle_s:
                            break
                        continue
                    last = time.monotonic()
                    out += [Rec(r[2], unb64(r[3]), unb64(r[4]), tuple((k, unb64(v)) for k, v in r[5]))
                            for r in got]
        except JavaError as e:
            return str(e)
        return out

    def offsets(self, topic: str, partition: int, isolation: str = "read_uncommitted") -> tuple[int, int] | str:
        try:
            with self._client("consumer", **{"isolation.level": isolation}) as c:
                [[_t, _p, begin, end]] = c.call("offsets", tps=[[topic, partition]])
        except JavaError as e:
            return str(e)
        return begin, end

    def delete_records(self, topic: str, partition: int, offset: int) -> int | str:
        try:
            with self._client("admin") as admin:
                return admin.call("delete_records", topic=topic, partition=partition, offset=offset)
        except JavaError as e:
            return str(e)

    def commit(self, group: str, topic: str, partition: int, offset: int) -> str | None:
        try:
            with self._client("consumer", **{"group.id": group}) as c:
                c.call("commit", offsets=[[topic, partition, offset]])
        except JavaError as e:
            return str(e)
        return None

    def committed(self, group: str, topic: str, partition: int) -> int | str:
        try:
            with self._client("consumer", **{"group.id": group}) as c:
                [[_t, _p, offset]] = c.call("committed", tps=[[topic, partition]])
        except JavaError as e:
            return str(e)
        return -1 if offset is None else offset

    def alter_group_configs(self, group: str, configs: dict[str, str]) -> str | None:
        """Set ``group``'s dynamic configs (Admin.incrementalAlterConfigs, SET, on
        ConfigResource.Type.GROUP), e.g. a share group's ``share.auto.offset.reset``; an error
        string or None (UNSUPPORTED_VERSION from a driver built against kafka-clients 3.x)."""
        try:
            with self._client("admin") as admin:
                admin.call("alter_group_configs", group=group, configs={k: str(v) for k, v in configs.items()})
        except JavaError as e:
            return str(e)
        return None

    def transactional(self, txn_id: str) -> JavaTxn:
        return JavaTxn(self, txn_id)

    def group(self, topic: str, group: str, members: int, partitions: int,
              strategy: str = "range", settle_s: float = 30.0) -> GroupView:
        view = GroupView()
        consumers = [Handle("consumer", consumer_conf(self.bootstrap, self.timeout_s, **{
            "group.id": group, "partition.assignment.strategy": ASSIGNORS[strategy],
            "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest"}),
            self.timeout_s) for _ in range(members)]
        stop = threading.Event()
        owned: list[set[int]] = [set() for _ in consumers]

        def poll(i: int, c: Handle) -> None:
            with contextlib.suppress(JavaError):
                c.call("subscribe", topics=[topic])
            while not stop.is_set():
                try:
                    c.call("poll", poll_ms=300)
                    owned[i] = {p for _t, p in c.call("assignment")}
                except JavaError as e:
                    view.errors.append(str(e))
                    time.sleep(0.2)

        threads = [threading.Thread(target=poll, args=(i, c), daemon=True) for i, c in enumerate(consumers)]
        for t in threads:
            t.start()
        try:
            view.assignments = settle(lambda: [set(o) for o in owned], partitions, settle_s)
            return view
        finally:
            stop.set()
            for t in threads:
                t.join(self.timeout_s + MARGIN_S)
            for c in consumers:
                c.close()


class JavaTxn:
    """A transactional producer for the cases."""

    def __init__(self, client: JavaClient, txn_id: str) -> None:
        self.t = client.timeout_s
        self.p = Handle("producer", producer_conf(client.bootstrap, client.timeout_s, **{
            "transactional.id": txn_id, "transaction.timeout.ms": 60_000}), client.timeout_s)

    def _do(self, op: str, **fields: Any) -> str | None:
        try:
            self.p.call(op, **fields)
        except JavaError as e:
            return str(e)
        return None

    def init(self) -> str | None:
        return self._do("init")

    def begin(self) -> str | None:
        return self._do("begin")

    def send(self, topic: str, partition: int, value: bytes) -> str | None:
        try:
            [r] = self.p.call("send", self.t + 2, records=[{"topic": topic, "partition": partition, "key": None,
                                                            "value": b64(value), "headers": []}])
        except JavaError as e:
            return str(e)
        return r.get("error")

    def commit(self) -> str | None:
        return self._do("commit")

    def abort(self) -> str | None:
        return self._do("abort")

    def close(self) -> None:
        self.p.close()


# ---------------------------------------------------------------- the workloads' handles


def _encode(value: int | None) -> str | None:
    return None if value is None else b64(str(value).encode())


def _decode(text: str | None) -> int | None:
    return None if text is None else int(base64.b64decode(text))


class JavaSender:
    """A producer of the workloads; ``idempotent`` False means acks=all without retries."""

    kind = "java"

    def __init__(self, bootstrap: str, timeout_s: float, idempotent: bool = True) -> None:
        self.timeout_s = timeout_s
        extra: dict[str, Any] = {"acks": "all", "enable.idempotence": str(idempotent).lower()}
        if not idempotent:
            extra["retries"] = 0
        self.p = Handle("producer", producer_conf(bootstrap, timeout_s, **extra), timeout_s)

    def send(self, topic: str, partition: int, value: int | None,
             key: str | None = None) -> tuple[int | None, str | None]:
        record = {"topic": topic, "partition": partition, "key": b64(key.encode()) if key is not None else None,
                  "value": _encode(value), "headers": []}
        try:
            [r] = self.p.call("send", self.timeout_s + 2, records=[record])
        except JavaError as e:
            return None, str(e)
        return (r["offset"], None) if "offset" in r else (None, r["error"])

    def close(self) -> None:
        self.p.close(1.0)


class JavaTxnSender:
    """A transactional producer of the workloads (raises on every refusal, as the others)."""

    kind = "java"

    def __init__(self, bootstrap: str, txn_id: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        # the request timeout below max.block.ms: a commit whose EndTxn timed out is retried
        # within the call, not abandoned (TXN_* of handles.py, as Jepsen's harness)
        self.p = Handle("producer", producer_conf(bootstrap, timeout_s, **{
            "transactional.id": txn_id, "transaction.timeout.ms": TXN_TIMEOUT_MS,
            "request.timeout.ms": TXN_REQUEST_TIMEOUT_MS, "delivery.timeout.ms": TXN_DELIVERY_TIMEOUT_MS,
            "max.block.ms": TXN_MAX_BLOCK_MS}), timeout_s)
        try:
            self.p.call("init")
        except JavaError:
            self.p.close(1.0)
            raise

    def begin(self) -> None:
        self.p.call("begin")

    def send(self, topic: str, partition: int, value: int) -> int:
        [result] = self.send_many(topic, [(partition, value)])
        if not isinstance(result, int):
            raise JavaError(result)
        return result

    def send_many(self, topic: str, sends: list[tuple[int, int]]) -> list[int | str]:
        records = [{"topic": topic, "partition": p, "key": None, "value": _encode(v), "headers": []} for p, v in sends]
        try:
            answers = self.p.call("send", self.timeout_s + 2, records=records)
        except JavaError as e:
            return [str(e)] * len(sends)
        return [r["offset"] if "offset" in r else r["error"] for r in answers]

    def send_offsets(self, offsets: dict[tuple[str, int], int], poller: JavaPoller | JavaMember) -> int:
        """The offsets, with the group metadata the consumer holds (read on its own thread); the
        generation (member epoch) they went with."""
        generation = self.p.call("send_offsets", consumer=poller.c.h,
                                 offsets=[[t, p, o] for (t, p), o in sorted(offsets.items())])
        return -1 if generation is None else int(generation)

    def commit(self) -> None:
        """Commit; :class:`NotCommitted` when it certainly did not commit."""
        try:
            self.p.call("commit")
        except JavaError as e:
            text = str(e)
            if not_committed(text.split(":", 1)[0].strip(), text):
                raise NotCommitted(text) from e
            raise

    def abort(self) -> None:
        self.p.call("abort")

    def close(self) -> None:
        self.p.close(1.0)


class JavaPoller:
    """A consumer assigned to ``tps``, from the beginning or from ``group``'s committed offsets."""

    kind = "java"

    def __init__(self, bootstrap: str, tps: list[tuple[str, int]], timeout_s: float,
                 isolation: str = "read_uncommitted", group: str | None = None, keyed: bool = False) -> None:
        self.tps, self.keyed = tps, keyed
        conf = consumer_conf(bootstrap, timeout_s, **{"isolation.level": isolation, "auto.offset.reset": "earliest"})
        if group is not None:
            conf["group.id"] = group
        self.c = Handle("consumer", conf, timeout_s)
        try:
            self.c.call("assign", tps=[list(tp) for tp in tps], from_beginning=group is None)
        except JavaError:
            self.c.close(1.0)
            raise

    def seek_to_beginning(self) -> None:
        self.c.call("seek_to_beginning")

    def poll(self, max_records: int = 500) -> dict[str, list[list]]:
        out: dict[str, list[list]] = {}
        for t, p, off, key, value, _headers in self.c.call("poll", poll_ms=500, max=max_records)["records"]:
            entry = [off, _decode(value)] + ([unb64(key).decode() if key is not None else None] if self.keyed else [])
            out.setdefault(f"{t}:{p}", []).append(entry)
        return out

    def positions(self, last: dict[str, int]) -> dict[str, int]:
        out = dict(last)
        with contextlib.suppress(JavaError):
            for t, p, pos in self.c.call("positions", 1.0):
                out[f"{t}:{p}"] = pos
        return out

    def close(self) -> None:
        self.c.close(1.0)


class JavaMember(GroupMember):
    """A consumer-group member (subscribe): the bookkeeping of the workload's members, with
    the rebalance callbacks reported by the driver after each poll. With ``protocol``
    consumer (KIP-848) the client refuses the classic settings (session and heartbeat are the
    broker's, the assignor the coordinator's: ``group.remote.assignor``)."""

    def __init__(self, bootstrap: str, topic: str, group: str, timeout_s: float, protocol: str = "classic",
                 isolation: str | None = None) -> None:
        self.kind, self.topic, self.timeout_s, self.protocol = "java", topic, timeout_s, protocol
        self._reset()
        self._epoch = -1  # the member epoch the last poll's answer named
        group_conf: dict[str, Any] = (
            {"group.protocol": "consumer", "group.remote.assignor": "range"} if protocol == "consumer" else
            {"partition.assignment.strategy": ASSIGNORS["range"], "session.timeout.ms": 6000,
             "heartbeat.interval.ms": 500})
        self.c = Handle("consumer", consumer_conf(bootstrap, timeout_s, **{
            "group.id": group, "auto.offset.reset": "earliest", **group_conf,
            **({} if isolation is None else {"isolation.level": isolation})}), timeout_s)
        try:
            self.c.call("subscribe", topics=[topic])
        except JavaError:
            self.c.close(1.0)
            raise

    def _current_generation(self) -> int:
        try:
            return int(self.c.call("group_metadata", 2.0)["generation"])
        except JavaError:
            return -1

    def _polled_epoch(self) -> int:
        return self._epoch

    def _fetch(self) -> list[tuple[str, int, int, int | None]]:
        answer = self.c.call("poll", poll_ms=500, max=200, with_generation=True)
        for event in answer["log"]:  # the callbacks ran inside that poll, before its records
            keys = set(event["keys"])
            if event["type"] == "assigned":
                self.assigned_keys(keys, event["generation"])
            else:
                self.revoked_keys(keys, event["type"] == "lost")
        self._epoch = answer.get("generation", -1)
        return [(t, p, off, _decode(value)) for t, p, off, _k, value, _h in answer["records"]]

    def commit(self, offsets: dict[str, int]) -> tuple[str | None, bool]:
        try:
            self.c.call("commit", offsets=[[k.rsplit(":", 1)[0], int(k.rsplit(":", 1)[1]), o]
                                           for k, o in offsets.items()])
        except JavaError as e:
            return str(e)[:80], commit_refused(str(e))
        return None, True

    def rewind(self) -> None:
        self.positions.clear()
        self.c.call("seek_to_committed")

    def close(self) -> None:
        self.c.close(2.0)


class JavaShareMember:
    """A member of the share group ``group`` (KIP-932) subscribed to ``topic``: a
    KafkaShareConsumer in explicit acknowledgement mode inside the driver (its ``share.*``
    ops, in ``java/KafkacheckShare.java``; kafka-clients 4.1 and later: a driver built against
    an older one refuses to create it, UNSUPPORTED_VERSION). The interface of
    :class:`~kafkacheck.real.share_handles.ShareMember`:

    * :meth:`poll`: the records acquired, each with ``ConsumerRecord.deliveryCount()`` (1 the
      first time; -1 when the client has none). In explicit mode the client refuses a poll
      (IllegalStateException) while a record of the previous poll is unacknowledged.
    * :meth:`acknowledge`: ``KafkaShareConsumer.acknowledge(record, type)``, local; the record
      must be one of the last poll's (the driver keeps them by topic, partition and offset).
    * :meth:`commit`: ``commitSync(timeout)``: ``"topic:partition"`` -> None when applied, else
      Kafka's error name (``Errors.forException``: ``INVALID_RECORD_STATE``, ...). A commit that
      fails as a whole (a timeout, a closed client) raises :class:`JavaError`.
    * :meth:`close`: ``close(timeout)``: leaves the group; never raises.

    Every call waits at most ``timeout_s`` in the client (a poll its own timeout), and the
    driver's answer at most that plus the driver's margin."""

    kind = "java"

    def __init__(self, bootstrap: str, topic: str, group: str, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.c = Handle("share", share_conf(bootstrap, timeout_s, **{"group.id": group,
                                                                     "client.id": share_client_id(group)}), timeout_s)
        try:
            self.c.call("subscribe", topics=[topic])
        except JavaError:
            self.c.close(1.0)
            raise

    def poll(self, timeout_s: float) -> list[ShareRec]:
        return [ShareRec(t, p, off, unb64(value), count)
                for t, p, off, _key, value, count in self.c.call("poll", timeout_s)]

    def acknowledge(self, rec: ShareRec, ack_type: str) -> None:
        if ack_type not in ACK_TYPES:
            raise ValueError(f"ack_type must be one of {', '.join(ACK_TYPES)}, not {ack_type!r}")
        self.c.call("acknowledge", topic=rec.topic, partition=rec.partition, offset=rec.offset, type=ack_type)

    def commit(self) -> dict[str, str | None]:
        return dict(self.c.call("commit"))

    def close(self) -> None:
        self.c.close(self.timeout_s)
