"""Differential testing: the same scripted request sequences sent to the reference broker and to
Apache Kafka, and their answers compared field by field.

Theory of operation
-------------------
A *script* (:data:`SCRIPTS`) is a short sequence of raw Kafka requests, written once, with
names and values that do not depend on the broker: it creates its own topics and groups (with
a run suffix), and each request it sends is a *step* whose answer is recorded. :class:`Wire`
sends them on raw sockets with kafka-python's protocol classes, at one version per API: the
highest that both brokers serve (``ApiVersions``) and kafka-python encodes, so both answers have
the same schema. Requests go where a client would send them: partition requests to the leader,
group and transaction requests to the coordinator (found with FindCoordinator).

An answer is *normalised* before the comparison (:func:`normalise`): what differs between any
two clusters is dropped (addresses, node ids, cluster and topic ids, throttle times, error
messages, timestamps the broker stamps) and what a broker invents is renamed in order of first
appearance (``producer-1``, ``member-1``), so two answers that mean the same compare equal.
Record sets are decoded into batches (offsets, control and transactional flags, records).
Then both answers are flattened into ``path: value`` and compared (:func:`compare`).

Every difference must be fixed in the engine or declared in :data:`DEVIATIONS` (the table of
the docs' "Deviations from Kafka"), with the reason; a declared deviation that no longer
differs is reported too, so the table stays true. ``kafkacheck differential`` runs it;
``tests/kafkacheck/test_differential.py`` runs it in the default test suite.
"""

from __future__ import annotations

import fnmatch
import socket
import struct
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reference import records as rec

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 8, 9, 10, 11, 12, 13, 14
API_VERSIONS, CREATE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID = 18, 19, 21, 22
OFFSET_FOR_LEADER_EPOCH, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN, END_TXN, TXN_OFFSET_COMMIT = 23, 24, 25, 26, 28

# fields that differ between any two clusters, whatever the broker: dropped before comparing
DROPPED = {"throttle_time_ms", "error_message", "cluster_id", "controller_id", "brokers", "node_endpoints",
           "host", "port", "rack", "node_id", "topic_id", "log_append_time_ms", "current_leader", "leader_id",
           "authorized_operations", "topic_authorized_operations", "cluster_authorized_operations",
           "session_id", "preferred_read_replica", "unknown_tags", "tags", "coordinator_key", "key",
           "timestamp"}
# values a broker invents: renamed in order of first appearance within a script
RENAMED = {"producer_id": "producer", "member_id": "member", "leader": "member"}


class WireError(Exception):
    pass


def _frame(request: Any, corr: int) -> bytes:
    request.with_header(correlation_id=corr, client_id="kafkacheck-differential")
    return bytes(request.encode(header=True, framed=True))


class Wire:
    """Raw requests to one cluster, one socket per broker, at fixed versions."""

    def __init__(self, bootstrap: str, versions: dict[int, int], timeout_s: float = 15.0) -> None:
        host, _, port = bootstrap.split(",")[0].rpartition(":")
        self.bootstrap = (host, int(port))
        self.versions = versions
        self.timeout_s = timeout_s
        self.sockets: dict[tuple[str, int], socket.socket] = {}
        self.corr = 0

    def close(self) -> None:
        for s in self.sockets.values():
            s.close()
        self.sockets.clear()

    def _socket(self, addr: tuple[str, int]) -> socket.socket:
        s = self.sockets.get(addr)
        if s is None:
            s = self.sockets[addr] = socket.create_connection(addr, timeout=self.timeout_s)
        return s

    def send(self, key: int, values: dict, to: tuple[str, int] | None = None) -> dict:
        """Send one request; its response as a plain dict."""
        from reference.server.protocol import REQUESTS, RESPONSES, build

        if key not in self.versions:
            from reference.server.protocol import API_NAMES

            raise WireError(f"API {API_NAMES.get(key, key)} is not served by both brokers")
        version = self.versions[key]
        addr = to or self.bootstrap
        self.corr += 1
        frame = _frame(build(REQUESTS[key][version], values), self.corr)
        s = self._socket(addr)
        try:
            s.sendall(frame)
            size = struct.unpack(">i", _recv(s, 4))[0]
            body = _recv(s, size)
        except OSError as e:
            self.sockets.pop(addr, None)
            s.close()
            raise WireError(f"{type(e).__name__} talking to {addr[0]}:{addr[1]}: {e}") from e
        return RESPONSES[key].decode(body, version=version, header=True).to_dict(json=False)

    # ------------------------------------------------------------ routing

    def metadata(self, topics: list[str] | None) -> dict:
        return self.send(METADATA, {"topics": None if topics is None else [{"name": t} for t in topics],
                                    "allow_auto_topic_creation": False})

    def leader(self, topic: str, partition: int = 0) -> tuple[str, int]:
        md = self.metadata([topic])
        brokers = {b["node_id"]: (b["host"], b["port"]) for b in md["brokers"]}
        for t in md["topics"]:
            for p in t["partitions"]:
                if t["name"] == topic and p["partition_index"] == partition and p["leader_id"] in brokers:
                    return brokers[p["leader_id"]]
        raise WireError(f"no leader for {topic}:{partition}")

    def coordinator(self, key: str, key_type: int) -> tuple[str, int]:
        """The group (0) or transaction (1) coordinator of ``key``, asked until it is known."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            version = self.versions[FIND_COORDINATOR]
            if version >= 4:
                resp = self.send(FIND_COORDINATOR, {"key_type": key_type, "coordinator_keys": [key]})
                c = resp["coordinators"][0]
            else:
                c = self.send(FIND_COORDINATOR, {"key": key, "key_type": key_type})
            if c["error_code"] == 0:
                return c["host"], c["port"]
            if time.monotonic() > deadline:
                raise WireError(f"FindCoordinator({key}) answered error {c['error_code']} for {self.timeout_s:.0f} s")
            time.sleep(0.2)


def _recv(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


def common_versions(*servers: dict[int, tuple[int, int]]) -> dict[int, int]:
    """Per API the highest version every server serves and kafka-python encodes."""
    from reference.server.protocol import REQUESTS

    out = {}
    for key in set.intersection(*(set(s) for s in servers)):
        if key not in REQUESTS:
            continue
        low = max(s[key][0] for s in servers)
        high = min([s[key][1] for s in servers] + [REQUESTS[key].max_version])
        if low <= high:
            out[key] = high
    return out


# ---------------------------------------------------------------- normalisation


def decode_record_set(data: bytes | None) -> list[dict]:
    """A fetched record set as batches a person can compare."""
    if not data:
        return []
    batches, _end = rec.split_batches(bytes(data))
    out = []
    for b in batches:
        h = rec.parse_header(b)
        control = bool(h.attributes & rec.ATTR_CONTROL)
        entry: dict[str, Any] = {"base_offset": h.base_offset, "last_offset": rec.last_offset_of(b),
                                 "transactional": bool(h.attributes & rec.ATTR_TRANSACTIONAL), "control": control,
                                 "producer_id": h.producer_id, "producer_epoch": h.producer_epoch,
                                 "base_sequence": h.base_sequence}
        if control:
            entry["commit"] = rec.control_is_commit(b)
        else:
            entry["records"] = [[h.base_offset + i, _text(r.key), _text(r.value)]
                                for i, r in enumerate(rec.decode_records(b))]
        out.append(entry)
    return out


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode(errors="replace")


@dataclass
class Names:
    """Renames invented values (producer ids, member ids) in order of first appearance, and
    the run suffix of topic and group names."""

    suffix: str
    seen: dict[tuple[str, Any], str] = field(default_factory=dict)

    def rename(self, kind: str, value: Any) -> Any:
        if value in (None, "", -1):
            return value
        name = self.seen.get((kind, value))
        if name is None:
            name = self.seen[(kind, value)] = f"{kind}-{sum(k == kind for k, _ in self.seen) + 1}"
        return name


def normalise(value: Any, names: Names, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: normalise(v, names, k) for k, v in sorted(value.items()) if k not in DROPPED}
    if isinstance(value, list):
        out = [normalise(v, names, key) for v in value]
        if key == "members":  # a group's members come in no particular order
            out.sort(key=lambda m: str(m.get("member_id")) if isinstance(m, dict) else "")
        return out
    if isinstance(value, (bytes, bytearray, memoryview)):
        if key == "records":
            return normalise(decode_record_set(bytes(value)), names)
        return bytes(value).hex()
    if key in RENAMED:
        return names.rename(RENAMED[key], value)
    if isinstance(value, str) and names.suffix in value:
        return value.replace(names.suffix, "")
    return value


def flatten(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{path}.{k}" if path else k))
        return out or {path: {}}
    if isinstance(value, list):
        out = {f"{path}#len": len(value)}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{path}[{i}]"))
        return out
    return {path: value}


# ---------------------------------------------------------------- scripts


@dataclass
class Session:
    """One script against one cluster: its steps' normalised answers."""

    wire: Wire
    names: Names
    steps: dict[str, Any] = field(default_factory=dict)

    def t(self, name: str) -> str:
        return f"{name}{self.names.suffix}"

    def step(self, name: str, key: int, values: dict, to: tuple[str, int] | None = None,
             retry: tuple[int, ...] = ()) -> dict:
        """Send a request and record its answer; ``retry``: error codes after which it is sent
        again (for up to 15 s) before the answer counts, as a client would (a coordinator still
        loading, a transaction still completing)."""
        deadline = time.monotonic() + 15
        while True:
            raw = self.wire.send(key, values, to)
            if raw.get("error_code") not in retry or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.steps[name] = normalise(raw, self.names)
        return raw

    def note(self, name: str, value: Any) -> None:
        """Record a derived observation (what a sequence of requests showed)."""
        self.steps[name] = normalise(value, self.names)

    # the requests the scripts use, built once here

    def step_join(self, step: str, group: str, member_id: str, coordinator: tuple[str, int],
                  protocols: tuple[str, ...] = ("range",)) -> dict:
        return _join(self, step, group, member_id, coordinator, list(protocols))

    def create_topic(self, name: str, partitions: int = 1, rf: int = 1, configs: dict | None = None,
                     step: str | None = None) -> dict:
        values = {"topics": [{"name": self.t(name), "num_partitions": partitions, "replication_factor": rf,
                              "assignments": [], "configs": [{"name": k, "value": v}
                                                             for k, v in (configs or {}).items()]}],
                  "timeout_ms": 10_000, "validate_only": False}
        raw = self.step(step, CREATE_TOPICS, values) if step else self.wire.send(CREATE_TOPICS, values)
        self.wait_for_leader(name, partitions)
        return raw

    def wait_for_leader(self, name: str, partitions: int = 1) -> None:
        """Until every partition's leader answers ListOffsets: Metadata may name a leader
        before that broker has taken the partition up (a client would retry; a script must
        not start before)."""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                if all(self._leads(name, p) for p in range(partitions)):
                    return
            except WireError:
                pass
            time.sleep(0.1)
        raise WireError(f"{self.t(name)} had no leader that answers within 15 s")

    def _leads(self, name: str, partition: int) -> bool:
        values = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": self.t(name), "partitions": [
            {"partition_index": partition, "current_leader_epoch": -1, "timestamp": -1}]}]}
        answer = self.wire.send(LIST_OFFSETS, values, self.wire.leader(self.t(name), partition))
        return answer["topics"][0]["partitions"][0]["error_code"] == 0

    def produce(self, step: str, topic: str, batches: list[bytes], acks: int = -1, partition: int = 0,
                transactional_id: str | None = None) -> dict:
        values = {"transactional_id": transactional_id, "acks": acks, "timeout_ms": 5000,
                  "topic_data": [{"name": self.t(topic), "partition_data": [
                      {"index": partition, "records": b"".join(batches)}]}]}
        return self.step(step, PRODUCE, values, self._leader(topic, partition))

    def fetch(self, step: str, topic: str, offset: int, isolation: int = 0, partition: int = 0,
              max_wait_ms: int = 0) -> dict:
        values = {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 0, "max_bytes": 1 << 20,
                  "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
                  "topics": [{"topic": self.t(topic), "partitions": [
                      {"partition": partition, "current_leader_epoch": -1, "fetch_offset": offset,
                       "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
                  "forgotten_topics_data": [], "rack_id": ""}
        return self.step(step, FETCH, values, self._leader(topic, partition))

    def list_offsets(self, step: str, topic: str, timestamp: int, isolation: int = 0, partition: int = 0) -> dict:
        values = {"replica_id": -1, "isolation_level": isolation, "topics": [
            {"name": self.t(topic), "partitions": [
                {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp}]}]}
        return self.step(step, LIST_OFFSETS, values, self._leader(topic, partition))

    def _leader(self, topic: str, partition: int) -> tuple[str, int]:
        """The partition's leader; any broker for a partition that does not exist."""
        try:
            return self.wire.leader(self.t(topic), partition)
        except WireError:
            return self.wire.bootstrap


def batch(*values: str, key: str | None = None, producer_id: int = -1, epoch: int = -1, sequence: int = -1,
          transactional: bool = False, timestamp: int | None = None) -> bytes:
    stamp = int(time.time() * 1000) if timestamp is None else timestamp
    return rec.encode_batch([rec.RecordInput(None if key is None else key.encode(), v.encode(), timestamp=stamp)
                             for v in values], producer_id=producer_id, producer_epoch=epoch,
                            base_sequence=sequence, transactional=transactional)


@dataclass(frozen=True)
class Script:
    name: str
    what: str
    run: Callable[[Session], None]


SCRIPTS: list[Script] = []


def script(what: str) -> Callable[[Callable[[Session], None]], Callable[[Session], None]]:
    def register(fn: Callable[[Session], None]) -> Callable[[Session], None]:
        SCRIPTS.append(Script(fn.__name__.replace("_", "-"), what, fn))
        return fn
    return register


@script("produce and fetch at both isolation levels, ListOffsets latest/earliest/by time, out-of-range fetches")
def produce_fetch(s: Session) -> None:
    s.create_topic("basic")
    s.produce("produce-1", "basic", [batch("a", "b", timestamp=1000)])
    s.produce("produce-2", "basic", [batch("c", timestamp=2000)])
    s.produce("produce-acks-1", "basic", [batch("d", timestamp=3000)], acks=1)
    s.fetch("fetch-from-0", "basic", 0)
    s.fetch("fetch-read-committed", "basic", 0, isolation=1)
    s.fetch("fetch-from-2", "basic", 2)
    s.fetch("fetch-at-end", "basic", 4)
    s.fetch("fetch-past-end", "basic", 7)
    s.list_offsets("list-latest", "basic", -1)
    s.list_offsets("list-earliest", "basic", -2)
    s.list_offsets("list-by-time-1500", "basic", 1500)
    s.list_offsets("list-by-time-after-all", "basic", 9000)
    s.list_offsets("list-max-timestamp", "basic", -3)


@script("bad produce and fetch requests: unknown topic and partition, acks=2")
def bad_requests(s: Session) -> None:
    s.create_topic("bad")
    s.produce("acks-2", "bad", [batch("x")], acks=2)
    values = {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
              "topic_data": [{"name": s.t("bad"), "partition_data": [{"index": 7, "records": batch("x")}]}]}
    s.step("produce-unknown-partition", PRODUCE, values)
    values["topic_data"][0]["name"] = s.t("never-created")
    values["topic_data"][0]["partition_data"][0]["index"] = 0
    s.step("produce-unknown-topic", PRODUCE, values)
    s.fetch("fetch-unknown-partition", "bad", 0, partition=3)
    s.list_offsets("list-offsets-unknown-partition", "bad", -1, partition=3)


@script("min.insync.replicas above the replication factor (KAFKA-15583), and at it")
def min_insync(s: Session) -> None:
    s.create_topic("minisr-above-rf", configs={"min.insync.replicas": "2"}, step="create-rf1-minisr2")
    s.produce("acks-all-rf1-minisr2", "minisr-above-rf", [batch("a")])
    s.fetch("fetch-rf1-minisr2", "minisr-above-rf", 0)
    s.create_topic("minisr-at-rf", configs={"min.insync.replicas": "1"})
    s.produce("acks-all-rf1-minisr1", "minisr-at-rf", [batch("a")])


def _init_idempotent(s: Session, step: str) -> dict:
    raw = s.step(step, INIT_PRODUCER_ID, {"transactional_id": None, "transaction_timeout_ms": -1,
                                          "producer_id": -1, "producer_epoch": -1}, retry=RETRIABLE)
    if raw["producer_id"] < 0:
        raise WireError(f"InitProducerId answered error {raw['error_code']}")
    return raw


@script("the idempotent producer: sequences, duplicates, gaps, an unknown producer id, wrap-around")
def idempotence(s: Session) -> None:
    s.create_topic("idem")
    raw = _init_idempotent(s, "init-producer-id")
    pid, epoch = raw["producer_id"], raw["producer_epoch"]
    first = batch("a", "b", producer_id=pid, epoch=epoch, sequence=0)
    s.produce("seq-0", "idem", [first])
    s.produce("seq-2", "idem", [batch("c", producer_id=pid, epoch=epoch, sequence=2)])
    s.produce("retry-seq-0", "idem", [first])
    s.produce("gap-seq-5", "idem", [batch("d", producer_id=pid, epoch=epoch, sequence=5)])
    s.produce("old-epoch", "idem", [batch("e", producer_id=pid, epoch=epoch - 1 if epoch > 0 else 32767,
                                          sequence=3)])
    raw2 = _init_idempotent(s, "init-producer-id-2")
    s.produce("new-producer-first-seq-7", "idem", [batch("f", producer_id=raw2["producer_id"],
                                                         epoch=raw2["producer_epoch"], sequence=7)])
    raw3 = _init_idempotent(s, "init-producer-id-3")
    p3, e3 = raw3["producer_id"], raw3["producer_epoch"]
    # sequences wrap from 2**31 - 1 to 0 (Kafka's DefaultRecordBatch.incrementSequence)
    s.produce("first-seq-near-max", "idem", [batch("g", "h", producer_id=p3, epoch=e3, sequence=2**31 - 2)])
    s.produce("seq-wrapped-to-0", "idem", [batch("i", producer_id=p3, epoch=e3, sequence=0)])
    s.fetch("fetch-all", "idem", 0)
    s.list_offsets("latest", "idem", -1)


# COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS
RETRIABLE = (14, 15, 16, 51)


def _txn(s: Session, txn_id: str, step: str) -> tuple[dict, tuple[str, int]]:
    coordinator = s.wire.coordinator(txn_id, 1)
    raw = s.step(step, INIT_PRODUCER_ID, {"transactional_id": txn_id, "transaction_timeout_ms": 60_000,
                                          "producer_id": -1, "producer_epoch": -1}, coordinator, retry=RETRIABLE)
    return raw, coordinator


def _add_partitions(s: Session, step: str, txn_id: str, pid: int, epoch: int, topic: str,
                    coordinator: tuple[str, int]) -> dict:
    if s.wire.versions[ADD_PARTITIONS_TO_TXN] >= 4:
        values = {"transactions": [{"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                    "verify_only": False, "topics": [{"name": s.t(topic), "partitions": [0]}]}]}
    else:
        values = {"v3_and_below_transactional_id": txn_id, "v3_and_below_producer_id": pid,
                  "v3_and_below_producer_epoch": epoch,
                  "v3_and_below_topics": [{"name": s.t(topic), "partitions": [0]}]}
    return s.step(step, ADD_PARTITIONS_TO_TXN, values, coordinator)


def _end_txn(s: Session, step: str, txn_id: str, pid: int, epoch: int, commit: bool,
             coordinator: tuple[str, int]) -> dict:
    return s.step(step, END_TXN, {"transactional_id": txn_id, "producer_id": pid, "producer_epoch": epoch,
                                  "committed": commit}, coordinator)


@script("transactions: an abort, the last stable offset, read_committed, a commit, fencing by a new epoch")
def transactions(s: Session) -> None:
    s.create_topic("txn")
    txn_id = s.t("txn-a")
    raw, coordinator = _txn(s, txn_id, "init")
    pid, epoch = raw["producer_id"], raw["producer_epoch"]
    s.produce("plain-before", "txn", [batch("p0")])
    _add_partitions(s, "add-partitions-1", txn_id, pid, epoch, "txn", coordinator)
    s.produce("txn-send-1", "txn", [batch("t1", producer_id=pid, epoch=epoch, sequence=0, transactional=True)],
              transactional_id=txn_id)
    s.fetch("open-read-committed", "txn", 0, isolation=1)
    s.fetch("open-read-uncommitted", "txn", 0, isolation=0)
    s.list_offsets("open-latest-committed", "txn", -1, isolation=1)
    s.list_offsets("open-latest-uncommitted", "txn", -1, isolation=0)
    _end_txn(s, "abort-1", txn_id, pid, epoch, False, coordinator)
    time.sleep(0.5)  # markers are written after EndTxn answers
    s.fetch("after-abort-read-committed", "txn", 0, isolation=1)
    s.fetch("after-abort-read-uncommitted", "txn", 0, isolation=0)
    _end_txn(s, "end-without-txn", txn_id, pid, epoch, True, coordinator)
    _add_partitions(s, "add-partitions-2", txn_id, pid, epoch, "txn", coordinator)
    s.produce("txn-send-2", "txn", [batch("t2", producer_id=pid, epoch=epoch, sequence=1, transactional=True)],
              transactional_id=txn_id)
    _end_txn(s, "commit-2", txn_id, pid, epoch, True, coordinator)
    time.sleep(0.5)
    s.fetch("after-commit-read-committed", "txn", 0, isolation=1)
    s.list_offsets("after-commit-latest-committed", "txn", -1, isolation=1)
    # a new producer with the same transactional id fences the old epoch
    _add_partitions(s, "add-partitions-3", txn_id, pid, epoch, "txn", coordinator)
    s.produce("txn-send-3", "txn", [batch("t3", producer_id=pid, epoch=epoch, sequence=2, transactional=True)],
              transactional_id=txn_id)
    _txn(s, txn_id, "init-again")
    s.produce("zombie-send", "txn", [batch("z", producer_id=pid, epoch=epoch, sequence=3, transactional=True)],
              transactional_id=txn_id)
    _end_txn(s, "zombie-commit", txn_id, pid, epoch, True, coordinator)
    _add_partitions(s, "zombie-add-partitions", txn_id, pid, epoch, "txn", coordinator)
    time.sleep(0.5)
    s.fetch("after-fence-read-committed", "txn", 0, isolation=1)
    s.fetch("after-fence-read-uncommitted", "txn", 0, isolation=0)


@script("a transactional write to a partition never added to the transaction")
def txn_unadded_partition(s: Session) -> None:
    s.create_topic("txn-unadded")
    txn_id = s.t("txn-b")
    raw, _coordinator = _txn(s, txn_id, "init")
    pid, epoch = raw["producer_id"], raw["producer_epoch"]
    s.produce("send-unadded", "txn-unadded", [batch("u", producer_id=pid, epoch=epoch, sequence=0,
                                                    transactional=True)], transactional_id=txn_id)
    s.fetch("read-uncommitted", "txn-unadded", 0, isolation=0)


def _join(s: Session, step: str, group: str, member_id: str, coordinator: tuple[str, int],
          protocols: list[str] = ("range",), metadata: bytes = b"m") -> dict:
    return s.step(step, JOIN_GROUP, {"group_id": group, "session_timeout_ms": 10_000,
                                     "rebalance_timeout_ms": 10_000, "member_id": member_id,
                                     "group_instance_id": None, "protocol_type": "consumer",
                                     "protocols": [{"name": p, "metadata": metadata} for p in protocols],
                                     "reason": None}, coordinator, retry=RETRIABLE[:3])


def _commit(s: Session, step: str, group: str, generation: int, member_id: str, topic: str, offset: int,
            coordinator: tuple[str, int]) -> dict:
    return s.step(step, OFFSET_COMMIT, {"group_id": group, "generation_id_or_member_epoch": generation,
                                        "member_id": member_id, "group_instance_id": None,
                                        "retention_time_ms": -1, "topics": [{"name": s.t(topic), "partitions": [
                                            {"partition_index": 0, "committed_offset": offset,
                                             "committed_leader_epoch": -1, "committed_metadata": ""}]}]},
                  coordinator)


def _offset_fetch(s: Session, step: str, group: str, topic: str, coordinator: tuple[str, int]) -> dict:
    if s.wire.versions[OFFSET_FETCH] >= 8:
        values = {"groups": [{"group_id": group, "topics": [{"name": s.t(topic), "partition_indexes": [0]}]}],
                  "require_stable": True}
    else:
        values = {"group_id": group, "topics": [{"name": s.t(topic), "partition_indexes": [0]}],
                  "require_stable": True}
    return s.step(step, OFFSET_FETCH, values, coordinator)


@script("a consumer group of one: KIP-394 member ids, generations, commits with stale and unknown members, "
        "a rejoin, a leave")
def group_single_member(s: Session) -> None:
    s.create_topic("grp")
    group = s.t("group-a")
    coordinator = s.wire.coordinator(group, 0)
    first = _join(s, "join-without-member-id", group, "", coordinator)
    member = first["member_id"]
    joined = _join(s, "join-with-member-id", group, member, coordinator)
    member, generation = joined["member_id"], joined["generation_id"]
    s.step("sync", SYNC_GROUP, {"group_id": group, "generation_id": generation, "member_id": member,
                                "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
                                "assignments": [{"member_id": member, "assignment": b"assignment"}]}, coordinator)
    s.step("heartbeat", HEARTBEAT, {"group_id": group, "generation_id": generation, "member_id": member,
                                    "group_instance_id": None}, coordinator)
    _commit(s, "commit-current", group, generation, member, "grp", 5, coordinator)
    _commit(s, "commit-stale-generation", group, generation - 1, member, "grp", 6, coordinator)
    _commit(s, "commit-unknown-member", group, generation, "nobody", "grp", 7, coordinator)
    _commit(s, "commit-no-generation", group, -1, "", "grp", 8, coordinator)
    _offset_fetch(s, "offset-fetch", group, "grp", coordinator)
    _join(s, "rejoin-same-metadata", group, member, coordinator)
    s.step("heartbeat-after-rejoin", HEARTBEAT, {"group_id": group, "generation_id": generation,
                                                 "member_id": member, "group_instance_id": None}, coordinator)
    s.step("leave", LEAVE_GROUP, {"group_id": group, "members": [{"member_id": member, "group_instance_id": None,
                                                                  "reason": None}]}, coordinator)
    _offset_fetch(s, "offset-fetch-after-leave", group, "grp", coordinator)


@script("three members join one group: MEMBER_ID_REQUIRED, a rebalance that waits for the old member, "
        "the protocol most members prefer")
def group_rebalance(s: Session) -> None:
    import threading

    s.create_topic("grp-3")
    group = s.t("group-c")
    coordinator = s.wire.coordinator(group, 0)
    host, port = s.wire.bootstrap
    wires = [Wire(f"{host}:{port}", s.wire.versions) for _ in range(3)]
    try:
        ids = []
        for i, w in enumerate(wires):
            ids.append(Session(w, s.names, s.steps).step_join(f"m{i}-join-without-id", group, "", coordinator)
                       ["member_id"])
        first = Session(wires[0], s.names, s.steps).step_join("m0-join", group, ids[0], coordinator,
                                                              ("range", "roundrobin"))
        generation = first["generation_id"]
        s.step("m0-sync", SYNC_GROUP, {"group_id": group, "generation_id": generation, "member_id": ids[0],
                                       "group_instance_id": None, "protocol_type": "consumer",
                                       "protocol_name": first["protocol_name"],
                                       "assignments": [{"member_id": ids[0], "assignment": b"all"}]}, coordinator)
        # two more members prefer roundrobin; their joins wait until the first member rejoins
        joins = [threading.Thread(target=lambda i=i: Session(wires[i], s.names, s.steps).step_join(
            f"m{i}-join", group, ids[i], coordinator, ("roundrobin", "range")), daemon=True) for i in (1, 2)]
        for t in joins:
            t.start()
        time.sleep(1.0)
        s.step("m0-heartbeat-during-rebalance", HEARTBEAT, {"group_id": group, "generation_id": generation,
                                                            "member_id": ids[0], "group_instance_id": None},
               coordinator)
        rejoined = s.step_join("m0-rejoin", group, ids[0], coordinator, ("range", "roundrobin"))
        for t in joins:
            t.join(20)
        # a follower that joins again with the same protocols while the group completes, and
        # again once it is stable, gets the current generation without a rebalance
        Session(wires[1], s.names, s.steps).step_join("m1-rejoin-while-completing", group, ids[1], coordinator,
                                                      ("roundrobin", "range"))
        s.step("m0-sync-generation-2", SYNC_GROUP, {
            "group_id": group, "generation_id": rejoined["generation_id"], "member_id": ids[0],
            "group_instance_id": None, "protocol_type": "consumer", "protocol_name": rejoined["protocol_name"],
            "assignments": [{"member_id": m, "assignment": b"p%d" % i} for i, m in enumerate(ids)]}, coordinator)
        Session(wires[1], s.names, s.steps).step_join("m1-rejoin-while-stable", group, ids[1], coordinator,
                                                      ("roundrobin", "range"))
        s.step("m0-heartbeat-after", HEARTBEAT, {"group_id": group, "generation_id": rejoined["generation_id"],
                                                 "member_id": ids[0], "group_instance_id": None}, coordinator)
    finally:
        for w in wires:
            w.close()


@script("a transactional offset commit with a stale generation (KIP-447)")
def txn_offset_commit_fencing(s: Session) -> None:
    s.create_topic("txn-grp")
    group = s.t("group-b")
    gc = s.wire.coordinator(group, 0)
    member = _join(s, "join-without-member-id", group, "", gc)["member_id"]
    joined = _join(s, "join", group, member, gc)
    generation = joined["generation_id"]
    txn_id = s.t("txn-c")
    raw, tc = _txn(s, txn_id, "init")
    pid, epoch = raw["producer_id"], raw["producer_epoch"]
    s.step("add-offsets", ADD_OFFSETS_TO_TXN, {"transactional_id": txn_id, "producer_id": pid,
                                               "producer_epoch": epoch, "group_id": group}, tc)

    def txn_commit(step: str, gen: int, member_id: str) -> None:
        s.step(step, TXN_OFFSET_COMMIT, {"transactional_id": txn_id, "group_id": group, "producer_id": pid,
                                         "producer_epoch": epoch, "generation_id": gen, "member_id": member_id,
                                         "group_instance_id": None, "topics": [{"name": s.t("txn-grp"), "partitions": [
                                             {"partition_index": 0, "committed_offset": 3,
                                              "committed_leader_epoch": -1, "committed_metadata": ""}]}]}, gc)

    txn_commit("txn-commit-stale-generation", generation + 5, member)
    txn_commit("txn-commit-unknown-member", generation, "nobody")
    txn_commit("txn-commit-current", generation, member)
    _end_txn(s, "commit", txn_id, pid, epoch, True, tc)
    time.sleep(0.5)
    _offset_fetch(s, "offset-fetch", group, "txn-grp", gc)


@script("OffsetForLeaderEpoch for the current epoch, one above it, one below the first, and a fenced epoch")
def offset_for_leader_epoch(s: Session) -> None:
    s.create_topic("ofle")
    s.produce("produce", "ofle", [batch("a", "b", "c")])
    leader = s.wire.leader(s.t("ofle"))

    def ask(step: str, epoch: int, current: int = -1) -> None:
        s.step(step, OFFSET_FOR_LEADER_EPOCH, {"replica_id": -1, "topics": [{"topic": s.t("ofle"), "partitions": [
            {"partition": 0, "current_leader_epoch": current, "leader_epoch": epoch}]}]}, leader)

    ask("epoch-0", 0)
    ask("epoch-above-latest", 5)
    ask("epoch-below-first", -1)
    ask("current-epoch-fenced", 0, current=7)


@script("DeleteRecords: a new log start, reads below it, a delete past the high watermark, -1")
def delete_records(s: Session) -> None:
    s.create_topic("delrec")
    s.produce("produce", "delrec", [batch(*(f"v{i}" for i in range(10)))])
    leader = s.wire.leader(s.t("delrec"))

    def delete(step: str, offset: int) -> None:
        s.step(step, DELETE_RECORDS, {"topics": [{"name": s.t("delrec"), "partitions": [
            {"partition_index": 0, "offset": offset}]}], "timeout_ms": 5000}, leader)

    delete("delete-to-4", 4)
    s.list_offsets("earliest", "delrec", -2)
    s.fetch("fetch-from-2", "delrec", 2)
    s.fetch("fetch-from-4", "delrec", 4)
    delete("delete-past-hw", 20)
    delete("delete-to-hw", -1)
    s.list_offsets("earliest-after-hw", "delrec", -2)


@script("CreateTopics: bad replication factor, partitions, names, configs; an existing topic")
def create_topics(s: Session) -> None:
    def create(step: str, name: str, partitions: int = 1, rf: int = 1, configs: dict | None = None) -> None:
        s.step(step, CREATE_TOPICS, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf,
                                                 "assignments": [], "configs": [
                                                     {"name": k, "value": v} for k, v in (configs or {}).items()]}],
                                     "timeout_ms": 10_000, "validate_only": False})

    create("ok", s.t("ct"))
    create("exists", s.t("ct"))
    create("rf-too-big", s.t("ct-rf"), rf=9)
    create("zero-partitions", s.t("ct-zero"), partitions=0)
    create("bad-name", "bad/name" + s.names.suffix)
    create("unknown-config", s.t("ct-cfg"), configs={"no.such.config": "1"})
    create("bad-config-value", s.t("ct-val"), configs={"cleanup.policy": "sometimes"})


# ---------------------------------------------------------------- deviations and comparison


@dataclass(frozen=True)
class Deviation:
    """A declared difference: ``path`` of ``step`` in ``script`` (fnmatch patterns)."""

    id: str
    script: str
    step: str
    path: str
    reason: str


# The "Deviations from Kafka" of docs/kafka.md that the scripts observe; each must still differ
# (a deviation that no longer does is reported, so the table stays true).
DEVIATIONS: list[Deviation] = [
    Deviation("create-topics-configs", "*", "*", "topics[0].configs*",
              "CreateTopics v5+ answers a created topic with its configs (KIP-525): Kafka lists all of "
              "its 33 topic configs with Kafka's defaults; the reference lists the ones its engine "
              "applies, with the engine's defaults (segment.bytes 1 MiB, no time-based retention). "
              "The list must be there: when it was null the Java AdminClient failed every "
              "createTopics (found by --client java)."),
]


@dataclass
class Difference:
    script: str
    step: str
    path: str
    target: Any  # the broker compared with Kafka (the reference by default)
    kafka: Any
    declared: str | None = None  # the Deviation id

    def line(self, target: str = "reference") -> str:
        return f"{self.script} / {self.step} / {self.path}: {target} {self.target!r}, kafka {self.kafka!r}"


def _match(text: str, pattern: str) -> bool:
    """fnmatch with ``*`` as the only wildcard (paths have brackets: ``topics[0].configs``)."""
    return fnmatch.fnmatchcase(text, pattern.replace("[", "[[]").replace("?", "[?]"))


def compare(script_name: str, target: dict[str, Any], kafka: dict[str, Any],
            deviations: list[Deviation] | None = None) -> list[Difference]:
    out = []
    for step in sorted(set(target) | set(kafka), key=lambda k: (list(target) + list(kafka)).index(k)):
        a, b = flatten(target.get(step, "<no answer>")), flatten(kafka.get(step, "<no answer>"))
        for path in sorted(set(a) | set(b)):
            if a.get(path, "<absent>") != b.get(path, "<absent>"):
                d = Difference(script_name, step, path, a.get(path, "<absent>"), b.get(path, "<absent>"))
                for dev in DEVIATIONS if deviations is None else deviations:
                    if _match(script_name, dev.script) and _match(step, dev.step) and _match(path, dev.path):
                        d.declared = dev.id
                        break
                out.append(d)
    return out


@dataclass
class Result:
    differences: list[Difference]
    errors: dict[str, str]  # script -> what broke while running it
    steps: dict[str, dict[str, dict[str, Any]]]  # script -> "target"/"kafka" -> step -> answer
    deviations: list[Deviation] = field(default_factory=lambda: list(DEVIATIONS))

    @property
    def undeclared(self) -> list[Difference]:
        return [d for d in self.differences if d.declared is None]

    @property
    def stale(self) -> list[Deviation]:
        """Declared deviations no difference matched: fixed, or the script changed."""
        seen = {d.declared for d in self.differences}
        ran = [s for s in self.steps if s not in self.errors]
        return [dev for dev in self.deviations if dev.id not in seen and any(_match(s, dev.script) for s in ran)]


def run(target: Wire, kafka: Wire, scripts: list[Script] | None = None, log=print,
        deviations: list[Deviation] | None = None) -> Result:
    """Run each script against both brokers and compare; ``deviations``: the declared ones
    (the reference broker's by default; pass [] for another broker)."""
    deviations = DEVIATIONS if deviations is None else deviations
    differences: list[Difference] = []
    errors: dict[str, str] = {}
    steps: dict[str, dict[str, dict[str, Any]]] = {}
    for sc in scripts or SCRIPTS:
        suffix = "-" + uuid.uuid4().hex[:8]
        sides = {}
        for side, wire in (("target", target), ("kafka", kafka)):
            session = Session(wire, Names(suffix))
            try:
                sc.run(session)
            except Exception as e:
                errors[sc.name] = f"{side}: {type(e).__name__}: {e}"
            sides[side] = session.steps
        steps[sc.name] = sides
        found = compare(sc.name, sides["target"], sides["kafka"], deviations)
        differences += found
        log(f"{sc.name}: {len(sides['kafka'])} steps, {len(found)} differences "
            f"({sum(d.declared is None for d in found)} undeclared)"
            + (f"; error: {errors[sc.name]}" if sc.name in errors else ""))
    return Result(differences, errors, steps, list(deviations))


# ---------------------------------------------------------------- the command


def cmd_differential(args) -> int:
    """``kafkacheck differential``: the scripts against a broker and Apache Kafka (both
    started here, one node each), compared field by field."""
    import json
    import signal
    import sys
    from pathlib import Path

    from rich.console import Console

    from kafkacheck.cli import UsageError
    from kafkacheck.conform.kafka import KafkaUnavailable, check_version
    from kafkacheck.conform.targets import TargetError, spawn

    try:
        check_version(args.kafka_version)
    except ValueError as e:
        raise UsageError(str(e)) from None
    chosen = SCRIPTS
    if args.scripts:
        wanted = [x.strip() for x in args.scripts.split(",") if x.strip()]
        unknown = [x for x in wanted if x not in {sc.name for sc in SCRIPTS}]
        if unknown:
            raise UsageError(f"unknown script(s) {', '.join(unknown)}; known: {', '.join(sc.name for sc in SCRIPTS)}")
        chosen = [sc for sc in SCRIPTS if sc.name in wanted]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    console = Console()
    previous = signal.signal(signal.SIGTERM, _interrupt)
    targets = []
    try:
        try:
            console.print(f"starting {args.target} and Apache Kafka {args.kafka_version} (one node each)")
            targets.append(spawn(args.target, out / args.target, 1, log=console.print))
            targets.append(spawn("kafka", out / "kafka", 1, kafka_version=args.kafka_version, log=console.print))
            for t in targets:
                t.probe()
        except (TargetError, KafkaUnavailable) as e:
            print(f"kafkacheck: error: {e}", file=sys.stderr)
            return 2
        target, kafka = targets
        versions = common_versions(target.apis, kafka.apis)
        wires = [Wire(target.bootstrap, versions), Wire(kafka.bootstrap, versions)]
        try:
            result = run(wires[0], wires[1], chosen, log=console.print,
                         deviations=DEVIATIONS if args.target == "reference" else [])
        finally:
            for w in wires:
                w.close()
    finally:
        for t in targets:
            t.close()
        signal.signal(signal.SIGTERM, previous)
    report = {"target": args.target, "target_version": target.version, "kafka_version": kafka.version,
              "versions": {str(k): v for k, v in sorted(versions.items())},
              "scripts": [sc.name for sc in chosen], "errors": result.errors,
              "differences": [vars(d) for d in result.differences],
              "stale_deviations": [d.id for d in result.stale], "steps": result.steps}
    (out / "differential.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    _print_result(console, result, args.target)
    console.print(f"wrote {out / 'differential.json'}")
    return 1 if result.undeclared or result.stale or result.errors else 0


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def _print_result(console, result: Result, target: str) -> None:
    declared = [d for d in result.differences if d.declared]
    for d in result.undeclared[:60]:
        console.print(f"[red]undeclared[/] {d.line(target)}")
    if len(result.undeclared) > 60:
        console.print(f"... and {len(result.undeclared) - 60} more (differential.json has them all)")
    for dev in result.stale:
        console.print(f"[yellow]declared but not seen[/] {dev.id}: the deviation is gone; remove it from "
                      "kafkacheck/conform/differential.py and docs/kafka.md")
    for script_name, error in result.errors.items():
        console.print(f"[magenta]error[/] {script_name}: {error}")
    ids = sorted({d.declared for d in declared})
    console.print(f"{target} vs Apache Kafka: {len(result.differences)} differences, "
                  f"{len(declared)} declared ({', '.join(ids) or 'none'}), {len(result.undeclared)} undeclared; "
                  f"{len(result.stale)} stale declarations; {len(result.errors)} scripts broke")
