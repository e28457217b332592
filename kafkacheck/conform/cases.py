"""The catalogue of conformance cases: each one a documented Kafka guarantee, checked through
a real client against the broker under test.

A case returns an :class:`Outcome`: ``pass``, ``fail`` with the evidence (what was sent,
what came back), or ``skip`` with the reason (an API the broker does not advertise, or a
precondition this broker cannot meet, such as a replication factor above its broker count).
An exception inside a case is reported as ``error`` with its message: a case never stops the
run.
"""

from __future__ import annotations

import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafkacheck.real.clients import Rec

PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR = 0, 1, 2, 3, 8, 9, 10
JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
CREATE_TOPICS, DELETE_RECORDS, INIT_PRODUCER_ID = 19, 21, 22
ADD_PARTITIONS_TO_TXN, END_TXN = 24, 26
GROUP_APIS = (FIND_COORDINATOR, JOIN_GROUP, SYNC_GROUP, HEARTBEAT, OFFSET_COMMIT, OFFSET_FETCH)
TXN_APIS = (INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN, FIND_COORDINATOR)


@dataclass
class Outcome:
    status: str  # pass, fail, skip, error
    evidence: str = ""
    details: dict = field(default_factory=dict)


@dataclass
class Context:
    client: Any
    brokers: int
    apis: dict[int, tuple[int, int]]
    target: Any = None  # a targets.Target: the cases that stop a broker need one kafkacheck controls
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    @property
    def rf(self) -> int:
        return min(3, self.brokers)

    def topic(self, case: str, partitions: int = 1, configs: dict | None = None, rf: int | None = None) -> str:
        name = f"conform-{case}-{self.run_id}"
        error = self.client.create_topic(name, partitions, rf or self.rf, configs)
        if error is not None:
            raise CaseSetupError(f"could not create topic {name}: {error}")
        time.sleep(0.3)  # let every broker learn the topic before the first request
        return name


class CaseSetupError(Exception):
    pass


@dataclass(frozen=True)
class Case:
    name: str
    guarantee: str
    source: str  # where Kafka documents it: the KIP, JIRA or documentation page
    since: str  # the Apache Kafka version since which it holds
    needs: tuple[int, ...]
    run: Callable[[Context], Outcome]

    @property
    def reference(self) -> str:
        return f"{self.source}; Apache Kafka {self.since} and later"


def _sent_summary(sent) -> str:
    errors = sorted({s.error for s in sent if s.error})
    return f"{sum(s.ok for s in sent)}/{len(sent)} acknowledged" + (f"; errors: {errors[:3]}" if errors else "")


def _values(recs: list[Rec]) -> list[bytes | None]:
    return [r.value for r in recs]


# ---------------------------------------------------------------- the cases

def produce_offsets_dense(ctx: Context) -> Outcome:
    t = ctx.topic("dense")
    sent = ctx.client.produce(t, 0, [b"v%d" % i for i in range(50)])
    offsets = [s.offset for s in sent if s.ok]
    if len(offsets) != 50:
        return Outcome("fail", _sent_summary(sent))
    if offsets != list(range(50)):
        return Outcome("fail", f"offsets of 50 sends in order to an empty partition: {offsets[:12]}...",
                       {"offsets": offsets})
    return Outcome("pass", "offsets 0..49, in send order")


def read_after_ack(ctx: Context) -> Outcome:
    t = ctx.topic("read")
    headers = [("origin", b"kafkacheck"), ("n", b"1")]
    sent = ctx.client.produce(t, 0, [b"r%d" % i for i in range(30)], key=b"key", headers=headers)
    if not all(s.ok for s in sent):
        return Outcome("fail", _sent_summary(sent))
    got = ctx.client.read(t, 0, 0, want=30)
    if isinstance(got, str):
        return Outcome("fail", f"reading from offset 0 failed: {got}")
    expect = [(s.offset, b"key", s.value, tuple(headers)) for s in sent]
    seen = [(r.offset, r.key, r.value, tuple(r.headers)) for r in got]
    if seen != expect:
        missing = [e for e in expect if e not in seen][:3]
        return Outcome("fail", f"read {len(seen)} records, expected {len(expect)}; first differences: {missing}",
                       {"read": [list(map(str, s)) for s in seen[:50]]})
    return Outcome("pass", "30 acknowledged records read back at their offsets with key and headers")


def list_offsets_latest(ctx: Context) -> Outcome:
    t = ctx.topic("lo")
    sent = ctx.client.produce(t, 0, [b"x%d" % i for i in range(17)])
    if not all(s.ok for s in sent):
        return Outcome("fail", _sent_summary(sent))
    offs = ctx.client.offsets(t, 0)
    if isinstance(offs, str):
        return Outcome("fail", f"ListOffsets failed: {offs}")
    earliest, latest = offs
    expected = max(s.offset for s in sent) + 1
    if latest != expected or earliest != 0:
        return Outcome("fail", f"earliest {earliest}, latest {latest}; expected 0 and {expected} "
                               "(the next offset to be written)")
    return Outcome("pass", f"earliest 0, latest {latest} = last acknowledged offset + 1")


def partition_state(ctx: Context, topic: str, partition: int = 0) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, ISR) of a partition, from a Metadata request on a raw socket (what
    the case needs to know to pick a broker to stop, independent of the client under test)."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    from kafkacheck.conform.targets import parse_bootstrap
    from reference.server.protocol import round_trip

    request = MetadataRequest[12](topics=[MetadataRequest[12].MetadataRequestTopic(topic_id=None, name=topic)],
                                  allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    error: OSError | None = None
    for host, port in parse_bootstrap(ctx.target.bootstrap):  # the first that answers: one may be down
        try:
            resp = round_trip(host, port, request, MetadataResponse, "kafkacheck-conform", 5.0)
        except OSError as e:
            error = e
            continue
        for t in resp.topics:
            for p in t.partitions:
                if t.name == topic and p.partition_index == partition:
                    return p.leader_id, list(p.replica_nodes), list(p.isr_nodes)
        raise CaseSetupError(f"Metadata does not list {topic}:{partition}")
    raise CaseSetupError(f"no broker answered Metadata: {error}")


def min_insync_refused(ctx: Context) -> Outcome:
    target = ctx.target
    if ctx.brokers < 2 or target is None or not target.controllable:
        return Outcome("skip", "needs two brokers or more that kafkacheck started (--spawn): a follower is "
                               "stopped to shrink the ISR below min.insync.replicas")
    t = ctx.topic("minisr", rf=2, configs={"min.insync.replicas": "2"})
    leader, replicas, _isr = partition_state(ctx, t)
    follower = next(r for r in replicas if r != leader)
    proc = target.node_process(follower)
    if proc is None:
        return Outcome("skip", f"kafkacheck does not control the process of broker {follower}")
    proc.kill()
    try:
        deadline = time.monotonic() + 60
        isr: list[int] = []
        while time.monotonic() < deadline:
            leader, _replicas, isr = partition_state(ctx, t)
            if follower not in isr and leader >= 0:
                break
            time.sleep(0.5)
        else:
            return Outcome("error", f"broker {follower} was killed but stayed in the ISR {isr} for 60 s")
        # NOT_ENOUGH_REPLICAS is retriable: with retries a client keeps trying until it times out
        refused = ctx.client.produce(t, 0, [b"must-not-be-acked"], acks="all", retries=0)
        accepted = ctx.client.produce(t, 0, [b"acks-1"], acks="1")
    finally:
        proc.start()
        target.wait_ready(90)
    details = {"isr": isr, "stopped": follower, "acks=all": refused[0].error or refused[0].offset,
               "acks=1": accepted[0].error or accepted[0].offset}
    ok_all = [s for s in refused if s.ok]
    if ok_all:
        return Outcome("fail", f"acks=all was acknowledged at offset {ok_all[0].offset} with the ISR {isr} "
                               "and min.insync.replicas=2", details)
    text = (refused[0].error or "").upper().replace(" ", "_")
    if "NOT_ENOUGH_REPLICAS" not in text and "NOTENOUGHREPLICAS" not in text:
        return Outcome("fail", f"acks=all refused, but not with NOT_ENOUGH_REPLICAS: {refused[0].error}", details)
    if not accepted[0].ok:
        return Outcome("fail", f"acks=1 was refused too: {accepted[0].error}", details)
    return Outcome("pass", f"with the ISR {isr} below min.insync.replicas=2: acks=all refused with "
                           "NOT_ENOUGH_REPLICAS, acks=1 accepted", details)


def min_insync_capped_by_rf(ctx: Context) -> Outcome:
    t = ctx.topic("minisr-rf", rf=1, configs={"min.insync.replicas": "2"})
    sent = ctx.client.produce(t, 0, [b"acks-all"], acks="all", retries=0)
    details = {"acks=all": sent[0].error or sent[0].offset}
    if not sent[0].ok:
        return Outcome("fail", "acks=all to a topic of replication factor 1 with min.insync.replicas=2 was refused "
                               f"({sent[0].error}): Kafka takes min(min.insync.replicas, replication factor)", details)
    return Outcome("pass", "acks=all accepted: the effective min.insync.replicas is min(2, replication factor 1)",
                   details)


def idempotent_no_duplicates(ctx: Context) -> Outcome:
    t = ctx.topic("idem")
    sent = ctx.client.produce(t, 0, [b"i%d" % i for i in range(200)], idempotent=True)
    if not all(s.ok for s in sent):
        return Outcome("fail", _sent_summary(sent))
    got = ctx.client.read(t, 0, 0, want=200)
    if isinstance(got, str):
        return Outcome("fail", f"read failed: {got}")
    values = _values(got)
    dups = len(values) - len(set(values))
    if dups or sorted(values) != sorted(s.value for s in sent) or [s.offset for s in sent] != list(range(200)):
        return Outcome("fail", f"{len(values)} records read for 200 sends, {dups} duplicates")
    return Outcome("pass", "200 idempotent sends: offsets 0..199, each value once")


def read_committed_skips_aborted(ctx: Context) -> Outcome:
    t = ctx.topic("rc")
    txn = ctx.client.transactional(f"conform-rc-{ctx.run_id}")
    try:
        steps = [("init", txn.init()), ("begin", txn.begin()), ("send", txn.send(t, 0, b"aborted")),
                 ("abort", txn.abort()), ("begin", txn.begin()), ("send", txn.send(t, 0, b"committed")),
                 ("commit", txn.commit())]
    finally:
        txn.close()
    failed = [(s, e) for s, e in steps if e]
    if failed:
        return Outcome("fail", f"the transaction steps failed: {failed}")
    rc = ctx.client.read(t, 0, 0, "read_committed")
    ru = ctx.client.read(t, 0, 0, "read_uncommitted")
    if isinstance(rc, str) or isinstance(ru, str):
        return Outcome("fail", f"read failed: {rc if isinstance(rc, str) else ru}")
    details = {"read_committed": [str(v) for v in _values(rc)], "read_uncommitted": [str(v) for v in _values(ru)]}
    if b"aborted" in _values(rc):
        return Outcome("fail", "read_committed returned a record of an aborted transaction", details)
    if _values(rc) != [b"committed"]:
        return Outcome("fail", f"read_committed returned {_values(rc)}, expected [b'committed']", details)
    if b"aborted" not in _values(ru):
        return Outcome("fail", "read_uncommitted did not return the aborted record", details)
    return Outcome("pass", "read_committed: only the committed record; read_uncommitted: both", details)


def lso_bounds_read_committed(ctx: Context) -> Outcome:
    t = ctx.topic("lso")
    plain = ctx.client.produce(t, 0, [b"p0", b"p1", b"p2"])
    if not all(s.ok for s in plain):
        return Outcome("fail", _sent_summary(plain))
    txn = ctx.client.transactional(f"conform-lso-{ctx.run_id}")
    try:
        error = txn.init() or txn.begin() or txn.send(t, 0, b"open")
        if error:
            return Outcome("fail", f"could not open a transaction: {error}")
        during = ctx.client.read(t, 0, 0, "read_committed", idle_s=1.5)
        error = txn.commit()
    finally:
        txn.close()
    after = ctx.client.read(t, 0, 0, "read_committed", want=4)
    for problem in (during, after, error):
        if isinstance(problem, str):
            return Outcome("fail", f"a step failed: {problem}")
    details = {"during": [str(v) for v in _values(during)], "after": [str(v) for v in _values(after)]}
    if _values(during) != [b"p0", b"p1", b"p2"]:
        return Outcome("fail", "while the transaction was open read_committed returned "
                               f"{_values(during)} (it must stop at the last stable offset)", details)
    if _values(after) != [b"p0", b"p1", b"p2", b"open"]:
        return Outcome("fail", f"after the commit read_committed returned {_values(after)}", details)
    return Outcome("pass", "an open transaction holds read_committed at the last stable offset until it commits",
                   details)


def fenced_producer(ctx: Context) -> Outcome:
    t = ctx.topic("fence")
    txn_id = f"conform-fence-{ctx.run_id}"
    old = ctx.client.transactional(txn_id)
    new = None
    try:
        error = old.init() or old.begin() or old.send(t, 0, b"before")
        if error:
            return Outcome("fail", f"the first producer could not start: {error}")
        new = ctx.client.transactional(txn_id)
        error = new.init()
        if error:
            return Outcome("fail", f"the second producer's InitProducerId failed: {error}")
        zombie = old.send(t, 0, b"zombie") or old.commit()
        if zombie is None:
            return Outcome("fail", "the fenced producer committed a transaction after a newer producer "
                                   "with its transactional.id initialised")
        error = new.begin() or new.send(t, 0, b"successor") or new.commit()
        if error:
            return Outcome("fail", f"the new producer could not commit: {error}")
    finally:
        old.close()
        if new is not None:
            new.close()
    got = ctx.client.read(t, 0, 0, "read_committed")
    if isinstance(got, str):
        return Outcome("fail", f"read failed: {got}")
    if b"zombie" in _values(got) or b"before" in _values(got):
        return Outcome("fail", f"read_committed shows the fenced producer's records: {_values(got)}")
    return Outcome("pass", f"the old producer was refused ({zombie[:80]}); the new one committed")


def offset_commit_fetch(ctx: Context) -> Outcome:
    t = ctx.topic("commit", partitions=2)
    group = f"conform-commit-{ctx.run_id}"
    sent = ctx.client.produce(t, 1, [b"c%d" % i for i in range(10)])
    if not all(s.ok for s in sent):
        return Outcome("fail", _sent_summary(sent))
    error = ctx.client.commit(group, t, 1, 7)
    if error:
        return Outcome("fail", f"OffsetCommit failed: {error}")
    got = ctx.client.committed(group, t, 1)
    other = ctx.client.committed(group, t, 0)
    if got != 7:
        return Outcome("fail", f"committed 7, OffsetFetch returned {got}")
    if other not in (-1, -1001, None) and not isinstance(other, str):
        return Outcome("fail", f"partition 0 was never committed but OffsetFetch returned {other}")
    return Outcome("pass", "OffsetFetch returned the committed offset 7 (and nothing for an uncommitted partition)")


def _group_case(strategy: str) -> Callable[[Context], Outcome]:
    def run(ctx: Context) -> Outcome:
        t = ctx.topic(f"group-{strategy}", partitions=6)
        view = ctx.client.group(t, f"conform-{strategy}-{ctx.run_id}", 3, 6, strategy)
        owned = view.assignments
        counts: dict[int, int] = {}
        for a in owned:
            for p in a:
                counts[p] = counts.get(p, 0) + 1
        details = {"assignments": [sorted(a) for a in owned], "errors": view.errors[:5]}
        twice = sorted(p for p, n in counts.items() if n > 1)
        if twice:
            return Outcome("fail", f"partitions {twice} were assigned to two members at once", details)
        if sorted(counts) != list(range(6)):
            return Outcome("fail", f"after settling, partitions {sorted(set(range(6)) - set(counts))} had no owner",
                           details)
        return Outcome("pass", f"3 members own {[sorted(a) for a in owned]}: each partition exactly once", details)
    return run


def delete_records_log_start(ctx: Context) -> Outcome:
    t = ctx.topic("delrec")
    sent = ctx.client.produce(t, 0, [b"d%d" % i for i in range(10)])
    if not all(s.ok for s in sent):
        return Outcome("fail", _sent_summary(sent))
    low = ctx.client.delete_records(t, 0, 4)
    if isinstance(low, str):
        return Outcome("fail", f"DeleteRecords failed: {low}")
    offs = ctx.client.offsets(t, 0)
    got = ctx.client.read(t, 0, 4, want=6)
    if isinstance(offs, str) or isinstance(got, str):
        return Outcome("fail", f"a read after DeleteRecords failed: {offs if isinstance(offs, str) else got}")
    if offs[0] != 4 or low != 4:
        return Outcome("fail", f"after DeleteRecords(4): low watermark {low}, earliest offset {offs[0]}")
    if [r.offset for r in got] != list(range(4, 10)):
        return Outcome("fail", f"reading from 4 returned offsets {[r.offset for r in got]}")
    return Outcome("pass", "DeleteRecords(4): low watermark and earliest offset 4, records 4..9 still readable")


def compaction_keeps_latest(ctx: Context) -> Outcome:
    # segments roll by time (segment.ms): Kafka 4.0 refuses segment.bytes below 1 MiB (KIP-1030)
    configs = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.ms": "100",
               "delete.retention.ms": "100"}
    t = ctx.topic("compact", configs=configs)
    latest: dict[bytes, bytes] = {}
    for version in range(6):
        for k in range(10):
            key = b"k%d" % k
            value = b"%s-v%d" % (key, version)
            [s] = ctx.client.produce(t, 0, [value], key=key)
            if not s.ok:
                return Outcome("fail", f"send of {value!r} failed: {s.error}")
            latest[key] = value
    # a final record so that the segment holding the last versions can roll and be cleaned
    end = time.monotonic() + 20
    cleaned = False
    got: list[Rec] | str = []
    while time.monotonic() < end:
        got = ctx.client.read(t, 0, 0)
        if isinstance(got, str):
            return Outcome("fail", f"read failed: {got}")
        if len(got) < 60:
            cleaned = True
            break
        time.sleep(1)
    assert not isinstance(got, str)
    last_by_key: dict[bytes | None, tuple[int, bytes | None]] = {}
    for r in got:
        last_by_key[r.key] = (r.offset, r.value)
    missing = {k: v for k, v in latest.items() if last_by_key.get(k, (0, None))[1] != v}
    details = {"records_left": len(got), "cleaned": cleaned}
    if missing:
        return Outcome("fail", f"keys whose latest value is not the last one read: {sorted(missing)[:5]}", details)
    how = f"cleaned down to {len(got)} of 60 records" if cleaned else "no cleaning seen within 20 s"
    return Outcome("pass", f"every key's latest value is readable ({how})", details)


def invalid_replication_factor_refused(ctx: Context) -> Outcome:
    name = f"conform-badrf-{ctx.run_id}"
    error = ctx.client.create_topic(name, 1, ctx.brokers + 1)
    if error is None:
        return Outcome("fail", f"a topic with replication factor {ctx.brokers + 1} on {ctx.brokers} broker(s) "
                               "was created")
    if "REPLICATION" not in error.upper():
        return Outcome("fail", f"refused, but not with INVALID_REPLICATION_FACTOR: {error}")
    return Outcome("pass", f"refused: {error[:100]}")


CASES: list[Case] = [
    Case("produce-offsets-dense", "a partition gives acknowledged records consecutive offsets in send order",
         "Kafka docs, Design: the log (offsets are sequential per partition)", "0.8.0", (PRODUCE, CREATE_TOPICS),
         produce_offsets_dense),
    Case("read-after-ack", "an acknowledged record is read back at its offset with its key and headers",
         "Kafka docs, Design: guarantees (committed records are not lost); KIP-82 record headers", "0.11.0",
         (PRODUCE, FETCH, CREATE_TOPICS), read_after_ack),
    Case("list-offsets-latest", "ListOffsets latest is the next offset to be written; earliest the log start",
         "Kafka protocol guide, ListOffsets (timestamp -1 latest, -2 earliest); KIP-79", "0.10.1",
         (PRODUCE, LIST_OFFSETS, CREATE_TOPICS), list_offsets_latest),
    Case("min-insync-refused", "acks=all is refused with NOT_ENOUGH_REPLICAS while the ISR is smaller than "
         "min.insync.replicas (acks=1 is still accepted)",
         "Kafka docs, topic config min.insync.replicas; KAFKA-1555", "0.8.2", (PRODUCE, METADATA, CREATE_TOPICS),
         min_insync_refused),
    Case("min-insync-capped-by-rf", "min.insync.replicas above the replication factor counts as the replication "
         "factor: acks=all to a fully replicated partition is accepted",
         "KAFKA-15583 (apache/kafka#14594): the effective min ISR is min(min.insync.replicas, replication factor)",
         "3.7.0", (PRODUCE, CREATE_TOPICS), min_insync_capped_by_rf),
    Case("idempotent-no-duplicates", "an idempotent producer writes each record once, in order",
         "KIP-98, idempotent producer", "0.11.0", (PRODUCE, FETCH, INIT_PRODUCER_ID, CREATE_TOPICS),
         idempotent_no_duplicates),
    Case("read-committed-skips-aborted", "read_committed never returns records of aborted transactions",
         "KIP-98, consumer isolation.level", "0.11.0", (*TXN_APIS, PRODUCE, FETCH, CREATE_TOPICS),
         read_committed_skips_aborted),
    Case("lso-bounds-read-committed", "read_committed stops at the last stable offset while a transaction is open",
         "KIP-98, last stable offset", "0.11.0", (*TXN_APIS, PRODUCE, FETCH, CREATE_TOPICS),
         lso_bounds_read_committed),
    Case("fenced-producer", "a producer fenced by a newer one with its transactional.id cannot write",
         "KIP-98, zombie fencing by producer epoch", "0.11.0", (*TXN_APIS, PRODUCE, FETCH, CREATE_TOPICS),
         fenced_producer),
    Case("offset-commit-fetch", "a committed offset is returned by OffsetFetch",
         "Kafka protocol guide, OffsetCommit / OffsetFetch (offsets kept by Kafka)", "0.8.2",
         (*GROUP_APIS, PRODUCE, CREATE_TOPICS), offset_commit_fetch),
    Case("group-exclusive-range", "a consumer group assigns each partition to exactly one member (eager, range)",
         "Kafka docs, consumer groups (the group membership protocol)", "0.9.0", (*GROUP_APIS, FETCH, CREATE_TOPICS),
         _group_case("range")),
    Case("group-exclusive-cooperative", "the same with incremental cooperative rebalancing (cooperative-sticky)",
         "KIP-429, incremental cooperative rebalancing", "2.4.0", (*GROUP_APIS, FETCH, CREATE_TOPICS),
         _group_case("cooperative-sticky")),
    Case("delete-records-log-start", "DeleteRecords moves the log start offset; later records stay readable",
         "KIP-107, DeleteRecords", "0.11.0", (PRODUCE, FETCH, LIST_OFFSETS, DELETE_RECORDS, CREATE_TOPICS),
         delete_records_log_start),
    Case("compaction-keeps-latest", "a compacted topic keeps the latest value of every key",
         "Kafka docs, Design: log compaction guarantees", "0.8.1", (PRODUCE, FETCH, CREATE_TOPICS),
         compaction_keeps_latest),
    Case("invalid-replication-factor", "a topic with more replicas than brokers is refused",
         "Kafka protocol guide, CreateTopics (INVALID_REPLICATION_FACTOR); KIP-4", "0.10.1", (CREATE_TOPICS,),
         invalid_replication_factor_refused),
]
CASE_NAMES = [c.name for c in CASES]
# the test suite's profile: every case except the two that wait longest (cleaning, a second
# group protocol)
SHORT = [n for n in CASE_NAMES if n not in ("compaction-keeps-latest", "group-exclusive-cooperative")]


def run_case(case: Case, ctx: Context) -> tuple[Outcome, float]:
    missing = [k for k in case.needs if k not in ctx.apis]
    start = time.monotonic()
    if missing:
        from reference.server.protocol import API_NAMES

        names = [API_NAMES.get(k, str(k)) for k in missing]
        return Outcome("skip", f"the broker does not advertise {', '.join(names)}"), 0.0
    try:
        outcome = case.run(ctx)
    except CaseSetupError as e:
        outcome = Outcome("error", str(e))
    except Exception as e:
        outcome = Outcome("error", f"{type(e).__name__}: {e}", {"traceback": traceback.format_exc(limit=4)})
    return outcome, time.monotonic() - start
