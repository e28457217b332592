"""The scripts of the differential suite: short sequences of raw requests, written once and
run against both brokers. Each :class:`Session` records its steps' normalised answers."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafkacheck.conform.differential.compare import Names, normalise
from kafkacheck.conform.differential.wire import (
    ADD_OFFSETS_TO_TXN,
    ADD_PARTITIONS_TO_TXN,
    CREATE_TOPICS,
    DELETE_RECORDS,
    END_TXN,
    FETCH,
    HEARTBEAT,
    INIT_PRODUCER_ID,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_OFFSETS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    OFFSET_FOR_LEADER_EPOCH,
    PRODUCE,
    SYNC_GROUP,
    TXN_OFFSET_COMMIT,
    Wire,
    WireError,
)
from reference import records as rec


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


def _txn_on(s: Session, topic: str, name: str) -> tuple[str, int, int, tuple[str, int]]:
    """A topic and a transactional producer: (transactional id, producer id, epoch, coordinator)."""
    s.create_topic(topic)
    txn_id = s.t(name)
    raw, coordinator = _txn(s, txn_id, "init")
    return txn_id, raw["producer_id"], raw["producer_epoch"], coordinator


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
    txn_id, pid, epoch, coordinator = _txn_on(s, "txn", "txn-a")
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
    txn_id, pid, epoch, _coordinator = _txn_on(s, "txn-unadded", "txn-b")
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


def _heartbeat(s: Session, step: str, group: str, generation: int, member: str, coordinator: tuple[str, int]) -> dict:
    return s.step(step, HEARTBEAT, {"group_id": group, "generation_id": generation, "member_id": member,
                                    "group_instance_id": None}, coordinator)


def _sync(s: Session, step: str, group: str, generation: int, member: str, protocol: str,
          assignments: dict[str, bytes], coordinator: tuple[str, int]) -> dict:
    return s.step(step, SYNC_GROUP, {"group_id": group, "generation_id": generation, "member_id": member,
                                     "group_instance_id": None, "protocol_type": "consumer", "protocol_name": protocol,
                                     "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()]},
                  coordinator)


def _group(s: Session, topic: str, name: str) -> tuple[str, tuple[str, int]]:
    """A topic, and a group's name and coordinator."""
    s.create_topic(topic)
    group = s.t(name)
    return group, s.wire.coordinator(group, 0)


@script("a consumer group of one: KIP-394 member ids, generations, commits with stale and unknown members, "
        "a rejoin, a leave")
def group_single_member(s: Session) -> None:
    group, coordinator = _group(s, "grp", "group-a")
    first = _join(s, "join-without-member-id", group, "", coordinator)
    member = first["member_id"]
    joined = _join(s, "join-with-member-id", group, member, coordinator)
    member, generation = joined["member_id"], joined["generation_id"]
    _sync(s, "sync", group, generation, member, "range", {member: b"assignment"}, coordinator)
    _heartbeat(s, "heartbeat", group, generation, member, coordinator)
    _commit(s, "commit-current", group, generation, member, "grp", 5, coordinator)
    _commit(s, "commit-stale-generation", group, generation - 1, member, "grp", 6, coordinator)
    _commit(s, "commit-unknown-member", group, generation, "nobody", "grp", 7, coordinator)
    _commit(s, "commit-no-generation", group, -1, "", "grp", 8, coordinator)
    _offset_fetch(s, "offset-fetch", group, "grp", coordinator)
    _join(s, "rejoin-same-metadata", group, member, coordinator)
    _heartbeat(s, "heartbeat-after-rejoin", group, generation, member, coordinator)
    s.step("leave", LEAVE_GROUP, {"group_id": group, "members": [{"member_id": member, "group_instance_id": None,
                                                                  "reason": None}]}, coordinator)
    _offset_fetch(s, "offset-fetch-after-leave", group, "grp", coordinator)


@script("three members join one group: MEMBER_ID_REQUIRED, a rebalance that waits for the old member, "
        "the protocol most members prefer")
def group_rebalance(s: Session) -> None:
    import threading

    group, coordinator = _group(s, "grp-3", "group-c")
    host, port = s.wire.bootstrap
    wires = [Wire(f"{host}:{port}", s.wire.versions) for _ in range(3)]
    members = [Session(w, s.names, s.steps) for w in wires]  # one connection each, one record
    try:
        ids = [m.step_join(f"m{i}-join-without-id", group, "", coordinator)["member_id"]
               for i, m in enumerate(members)]
        first = members[0].step_join("m0-join", group, ids[0], coordinator, ("range", "roundrobin"))
        generation = first["generation_id"]
        _sync(s, "m0-sync", group, generation, ids[0], first["protocol_name"], {ids[0]: b"all"}, coordinator)
        # two more members prefer roundrobin; their joins wait until the first member rejoins
        joins = [threading.Thread(target=members[i].step_join, daemon=True,
                                  args=(f"m{i}-join", group, ids[i], coordinator, ("roundrobin", "range")))
                 for i in (1, 2)]
        for t in joins:
            t.start()
        time.sleep(1.0)
        _heartbeat(s, "m0-heartbeat-during-rebalance", group, generation, ids[0], coordinator)
        rejoined = s.step_join("m0-rejoin", group, ids[0], coordinator, ("range", "roundrobin"))
        for t in joins:
            t.join(20)
        # a follower that joins again with the same protocols while the group completes, and
        # again once it is stable, gets the current generation without a rebalance
        members[1].step_join("m1-rejoin-while-completing", group, ids[1], coordinator, ("roundrobin", "range"))
        generation = rejoined["generation_id"]
        _sync(s, "m0-sync-generation-2", group, generation, ids[0], rejoined["protocol_name"],
              {m: b"p%d" % i for i, m in enumerate(ids)}, coordinator)
        members[1].step_join("m1-rejoin-while-stable", group, ids[1], coordinator, ("roundrobin", "range"))
        _heartbeat(s, "m0-heartbeat-after", group, generation, ids[0], coordinator)
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


