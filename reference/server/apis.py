"""The handlers of the wire APIs, and the table that routes each request to its handler.

A handler gets the :class:`~reference.server.gateway.Connection` the request came on, the
decoded request and its version, and returns the wire response as a dict (None for acks=0).
It turns the request into engine messages (one engine request per partition of a wire
request that names several), sends them to the broker this listener belongs to (or to the
controller, for topic changes) under the connection's node id, awaits the engine's answers,
and reports them with the wire's error codes. A few read-only APIs (Metadata,
DescribeConfigs, DescribeCluster) read the local broker's state directly, as a broker
answers them from its metadata cache. This module has the partition and admin APIs; the
coordinator, group and transaction APIs are in :mod:`reference.server.group_apis`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from reference import records as rec
from reference.errors import Errors
from reference.log_config import LogConfig
from reference.messages import (
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    FetchPartition,
    FetchRequest,
    ListOffsetsRequest,
    OffsetForLeaderEpochRequest,
    ProduceRequest,
    TopicPartition,
)
from reference.server import protocol
from reference.server.consumer_group_apis import consumer_group_describe, consumer_group_heartbeat
from reference.server.gateway import ENGINE_MARGIN_S, YIELD_EVERY, Connection
from reference.server.group_apis import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    describe_groups,
    end_txn,
    find_coordinator,
    heartbeat,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    offset_commit,
    offset_fetch,
    sync_group,
    txn_offset_commit,
)
from reference.server.share_group_apis import (
    share_acknowledge,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
)
from reference.server.txn_admin_apis import describe_producers, describe_transactions, list_transactions
from reference.topics import INTERNAL_TOPICS, legal_topic_name

# topic configs the engine applies, and those it accepts without acting on them
TOPIC_CONFIGS = ("cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes", "segment.ms",
                 "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "max.compaction.lag.ms",
                 "delete.retention.ms", "min.insync.replicas")
IGNORED_TOPIC_CONFIGS = ("compression.type", "message.timestamp.type",
                         "max.message.bytes", "file.delete.delay.ms", "flush.messages", "flush.ms",
                         "unclean.leader.election.enable",
                         "message.downconversion.enable", "index.interval.bytes",
                         "segment.index.bytes", "segment.jitter.ms", "preallocate")


def validate_topic_configs(configs: dict[str, str | None]) -> str | None:
    """None if the engine can take these topic configs, else why not."""
    for name, value in configs.items():
        if name not in TOPIC_CONFIGS and name not in IGNORED_TOPIC_CONFIGS:
            return f"unknown or unsupported topic config {name}"
        if value is None:
            return f"config {name} has no value"
    if "cleanup.policy" in configs and not set(configs["cleanup.policy"].split(",")) <= {"delete", "compact"}:
        return f"cleanup.policy must be delete, compact or both, not {configs['cleanup.policy']!r}"
    if "min.insync.replicas" in configs and not (configs["min.insync.replicas"] or "").isdigit():
        return "min.insync.replicas must be a positive integer"
    try:
        LogConfig.from_topic(LogConfig(), {k: v for k, v in configs.items() if k in TOPIC_CONFIGS})
    except (TypeError, ValueError) as e:
        return f"bad config value: {e}"
    return None


async def api_versions(c: Connection, req: Any, v: int) -> dict:
    out: dict[str, Any] = {"error_code": 0, "throttle_time_ms": 0,
                           "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                                        for k, (lo, hi) in sorted(protocol.SUPPORTED.items())]}
    if v >= 3:  # the feature levels (KIP-584): the transaction version the cluster runs
        level = c.info.transaction_version
        out["supported_features"] = [{"name": protocol.GROUP_VERSION_FEATURE, "min_version": 0, "max_version": 1},
                                     {"name": protocol.SHARE_VERSION_FEATURE, "min_version": 0, "max_version": 1},
                                     {"name": protocol.TRANSACTION_VERSION_FEATURE, "min_version": 0,
                                      "max_version": 2}]
        out["finalized_features_epoch"] = 1
        out["finalized_features"] = [{"name": protocol.GROUP_VERSION_FEATURE, "max_version_level": 1,
                                      "min_version_level": 1},
                                     {"name": protocol.SHARE_VERSION_FEATURE, "max_version_level": 1,
                                      "min_version_level": 1},
                                     {"name": protocol.TRANSACTION_VERSION_FEATURE, "max_version_level": level,
                                      "min_version_level": level}]
    return out


async def metadata(c: Connection, req: Any, v: int) -> dict:
    image = c.broker.metadata
    topics = c._image_partitions()
    live = [b for b in image.live_brokers if b in c.info.endpoints]
    wanted: list[str | None]
    if req.topics is None or (v == 0 and not req.topics):
        wanted = sorted(topics)
    else:
        # each topic once, as Kafka (a set); v10+ may name a topic by its id alone (name null)
        by_id = v >= 10 and any(t.name is None for t in req.topics)
        ids = protocol.names_by_id(topics) if by_id else {}
        wanted = list(dict.fromkeys(t.name if t.name is not None or v < 10 else ids.get(t.topic_id)
                                    for t in req.topics))
    auto = c.info.auto_create_topics and (v < 4 or req.allow_auto_topic_creation)
    out = []
    for i, name in enumerate(wanted):
        if i and i % YIELD_EVERY == 0:
            await asyncio.sleep(0)  # a request naming many topics does not stall the broker
        if name is None:
            out.append({"error_code": int(Errors.UNKNOWN_TOPIC_ID), "name": None, "partitions": []})
            continue
        parts = topics.get(name)
        if parts is None:
            error = Errors.UNKNOWN_TOPIC_OR_PARTITION
            if not legal_topic_name(name):
                error = Errors.INVALID_TOPIC_EXCEPTION
            elif auto and name not in INTERNAL_TOPICS:
                c.post(c.info.controller_id, CreateTopicsRequest, name=name,
                       num_partitions=c.info.default_partitions,
                       replication_factor=min(c.info.default_replication_factor, len(live) or 1))
                error = Errors.LEADER_NOT_AVAILABLE
            out.append({"error_code": int(error), "name": name, "partitions": [],
                        "topic_id": protocol.topic_id(name)})
            continue
        out.append({
            "error_code": 0, "name": name, "topic_id": protocol.topic_id(name),
            "is_internal": name in INTERNAL_TOPICS,
            "partitions": [{
                "error_code": int(Errors.NONE if s.leader >= 0 else Errors.LEADER_NOT_AVAILABLE),
                "partition_index": s.tp.partition, "leader_id": s.leader,
                "leader_epoch": s.leader_epoch, "replica_nodes": list(s.replicas),
                "isr_nodes": list(s.isr),
                "offline_replicas": [r for r in s.replicas if r not in image.live_brokers],
            } for s in sorted(parts, key=lambda s: s.tp.partition)],
        })
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": b, "host": c._endpoint(b)[0], "port": c._endpoint(b)[1], "rack": None}
                    for b in live],
        "cluster_id": c.info.cluster_id,
        "controller_id": live[0] if live else -1,
        "topics": out,
    }


async def produce(c: Connection, req: Any, v: int) -> dict | None:
    acks = req.acks
    jobs: list[tuple[str, int, Any]] = []
    for t in req.topic_data:
        for p in t.partition_data:
            tp = TopicPartition(t.name, p.index)
            records = p.records or b""
            error = None
            try:
                header = rec.parse_header(records)
                if header.size != len(records):
                    error = Errors.INVALID_RECORD  # exactly one batch per partition (v3+)
            except rec.CorruptRecordError:
                error = Errors.CORRUPT_MESSAGE
            add = v >= protocol.TV2_VERSIONS[0] and req.transactional_id is not None
            if error is None and acks == 0:
                c.post(c.broker.node_id, ProduceRequest, acks=0, timeout_ms=req.timeout_ms, tp=tp,
                       records=records, transactional_id=req.transactional_id, add_partition=add)
            elif error is None:
                jobs.append((t.name, p.index, c.local(
                    ProduceRequest, req.timeout_ms / 1000 + ENGINE_MARGIN_S, acks=acks,
                    timeout_ms=req.timeout_ms, tp=tp, records=records,
                    transactional_id=req.transactional_id, add_partition=add)))
            else:
                jobs.append((t.name, p.index, error))
    if acks == 0:
        return None

    def entry(index: int, r: Any) -> dict:
        if isinstance(r, Errors) or r is None:
            error, base, start = (r if r is not None else Errors.REQUEST_TIMED_OUT), -1, -1
        else:
            error, base, start = r.error, r.base_offset, r.log_start_offset
        if error is Errors.TRANSACTION_ABORTABLE and v < 11:
            error = Errors.INVALID_TXN_STATE  # what producers before Produce v11 expect (as Kafka)
        return {"index": index, "error_code": int(error), "base_offset": base, "log_append_time_ms": -1,
                "log_start_offset": start, "record_errors": [], "error_message": None}

    by_topic = await _per_partition(jobs, entry)
    return {"throttle_time_ms": 0, "responses": [
        {"name": name, "partition_responses": parts} for name, parts in by_topic.items()]}


async def fetch(c: Connection, req: Any, v: int) -> dict:
    parts = []
    for t in req.topics:
        for p in t.partitions:
            parts.append(FetchPartition(TopicPartition(t.topic, p.partition),
                                        p.current_leader_epoch if v >= 9 else -1,
                                        p.fetch_offset, -1, max(p.partition_max_bytes, 1)))
    wait_ms = max(0, min(req.max_wait_ms, 30_000))
    resp = await c.local(FetchRequest, wait_ms / 1000 + ENGINE_MARGIN_S, replica_id=-1,
                         replica_epoch=-1, max_wait_ms=wait_ms,
                         isolation_level=req.isolation_level, partitions=tuple(parts))
    fetched = {r.tp: r for r in resp.partitions} if resp is not None else {}
    by_topic: dict[str, list[dict]] = {}
    for fp in parts:
        r = fetched.get(fp.tp)
        if r is None:
            entry = {"partition_index": fp.tp.partition, "error_code": int(Errors.REQUEST_TIMED_OUT),
                     "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                     "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}
        elif r.error is not Errors.NONE:  # Kafka answers an error without offsets
            entry = {"partition_index": fp.tp.partition, "error_code": int(r.error),
                     "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                     # a partition Kafka does not know is refused before any read (an empty
                     # list); a failed read has no aborted transactions (null)
                     "aborted_transactions": [] if r.error is Errors.UNKNOWN_TOPIC_OR_PARTITION else None,
                     "preferred_read_replica": -1, "records": b""}
        else:
            entry = {"partition_index": fp.tp.partition, "error_code": int(r.error),
                     "high_watermark": r.high_watermark,
                     "last_stable_offset": r.last_stable_offset if r.last_stable_offset >= 0 else r.high_watermark,
                     "log_start_offset": r.log_start_offset,
                     "aborted_transactions": [{"producer_id": pid, "first_offset": first}
                                              for pid, first in r.aborted_transactions]
                     if req.isolation_level == 1 else None,
                     "preferred_read_replica": -1, "records": b"".join(r.records)}
        by_topic.setdefault(fp.tp.topic, []).append(entry)
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
            "responses": [{"topic": name, "partitions": ps} for name, ps in by_topic.items()]}


async def _per_partition(jobs: list[tuple[str, int, Any]], entry: Callable[[int, Any], dict]) -> dict[str, list[dict]]:
    """Await every partition's engine call at once and group the replies by topic. ``jobs``
    are (topic, partition, an awaitable, or an Errors answered without the engine);
    ``entry(partition, answer)`` builds a partition's reply (answer None: none came in time)."""
    answers = iter(await asyncio.gather(*(j for *_, j in jobs if not isinstance(j, Errors))))
    by_topic: dict[str, list[dict]] = {}
    for name, index, job in jobs:
        by_topic.setdefault(name, []).append(entry(index, job if isinstance(job, Errors) else next(answers)))
    return by_topic


async def list_offsets(c: Connection, req: Any, v: int) -> dict:
    jobs = []
    for t in req.topics:
        for p in t.partitions:
            jobs.append((t.name, p.partition_index, c.local(
                ListOffsetsRequest, 30.0, tp=TopicPartition(t.name, p.partition_index),
                timestamp=p.timestamp, current_leader_epoch=p.current_leader_epoch if v >= 4 else -1,
                isolation_level=req.isolation_level if v >= 2 else 0)))

    def entry(index: int, r: Any) -> dict:
        if r is None:
            return {"partition_index": index, "error_code": int(Errors.REQUEST_TIMED_OUT),
                    "timestamp": -1, "offset": -1, "leader_epoch": -1}
        return {"partition_index": index, "error_code": int(r.error), "timestamp": r.timestamp,
                "offset": r.offset, "leader_epoch": r.leader_epoch}

    by_topic = await _per_partition(jobs, entry)
    return {"throttle_time_ms": 0,
            "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}


async def offset_for_leader_epoch(c: Connection, req: Any, v: int) -> dict:
    jobs = []
    for t in req.topics:
        for p in t.partitions:
            jobs.append((t.topic, p.partition, c.local(
                OffsetForLeaderEpochRequest, 30.0, replica_id=-1,
                tp=TopicPartition(t.topic, p.partition),
                current_leader_epoch=p.current_leader_epoch, leader_epoch=p.leader_epoch)))

    def entry(index: int, r: Any) -> dict:
        error, epoch, end = (Errors.REQUEST_TIMED_OUT, -1, -1) if r is None else (r.error, r.leader_epoch, r.end_offset)
        return {"error_code": int(error), "partition": index, "leader_epoch": epoch, "end_offset": end}

    by_topic = await _per_partition(jobs, entry)
    return {"throttle_time_ms": 0,
            "topics": [{"topic": n, "partitions": ps} for n, ps in by_topic.items()]}


# ---------------------------------------------------------------- topics and admin

async def create_topics(c: Connection, req: Any, v: int) -> dict:
    live = len(c.broker.metadata.live_brokers)
    existing = c._image_partitions()
    results = []
    created = []
    for t in req.topics:
        # manual replica assignments (num_partitions and replication_factor -1, as Kafka
        # requires): the controller checks them as Kafka's does
        assigned = tuple((a.partition_index, tuple(a.broker_ids)) for a in t.assignments or ())
        if assigned:
            partitions, rf = len(assigned), len(assigned[0][1])
        else:
            partitions = c.info.default_partitions if t.num_partitions == -1 else t.num_partitions
            rf = min(c.info.default_replication_factor, max(live, 1)) if t.replication_factor == -1 \
                else t.replication_factor
        configs = {cfg.name: cfg.value for cfg in t.configs}
        error, message = Errors.NONE, None
        if not legal_topic_name(t.name):
            error, message = Errors.INVALID_TOPIC_EXCEPTION, f"illegal topic name {t.name!r}"
        elif t.name in INTERNAL_TOPICS or t.name in existing:
            error, message = Errors.TOPIC_ALREADY_EXISTS, f"topic {t.name} already exists"
        elif partitions < 1 and not assigned:
            error, message = Errors.INVALID_PARTITIONS, "the number of partitions must be at least 1"
        elif (rf < 1 or rf > live) and not assigned:
            error, message = Errors.INVALID_REPLICATION_FACTOR, \
                f"replication factor {rf} with {live} live brokers"
        elif (why := validate_topic_configs(configs)) is not None:
            error, message = Errors.INVALID_CONFIG, why
        # v5+ (KIP-525): the new topic's configs; the Java AdminClient needs the list
        entry = {"name": t.name, "topic_id": protocol.topic_id(t.name), "error_code": int(error),
                 "error_message": message, "num_partitions": partitions, "replication_factor": rf,
                 "configs": [{"name": n, "value": val, "read_only": False, "config_source": src, "is_sensitive": False}
                             for n, val, src in _topic_config_entries(configs)]}
        if error is not Errors.NONE:  # Kafka tells nothing of a topic it refused
            entry.update(num_partitions=-1, replication_factor=-1, configs=[])
        results.append(entry)
        if error is Errors.NONE and not req.validate_only:
            cfg = tuple(sorted((k, v) for k, v in configs.items() if k in TOPIC_CONFIGS))
            created.append((entry, c._create(t.name, t.num_partitions, t.replication_factor, cfg, assigned)
                            if assigned else c._create(t.name, partitions, rf, cfg)))
    answers = await asyncio.gather(*(job for _, job in created))
    for (entry, _), r in zip(created, answers, strict=True):
        if r is None:
            entry["error_code"], entry["error_message"] = int(Errors.REQUEST_TIMED_OUT), "the controller did not answer"
        elif r.error is not Errors.NONE:
            entry["error_code"], entry["error_message"] = int(r.error), r.message or r.error.name
        if entry["error_code"]:
            entry.update(num_partitions=-1, replication_factor=-1, configs=[])
    wait = max(req.timeout_ms, 0) / 1000
    await asyncio.gather(*(c._await_topic(e["name"], True, wait) for e, _ in created if e["error_code"] == 0))
    return {"throttle_time_ms": 0, "topics": results}


async def delete_topics(c: Connection, req: Any, v: int) -> dict:
    existing = c._image_partitions()
    out = []
    jobs = []
    for name in req.topic_names:
        entry = {"name": name, "error_code": 0, "error_message": None}
        out.append(entry)
        if name in INTERNAL_TOPICS:
            entry["error_code"], entry["error_message"] = int(Errors.INVALID_TOPIC_EXCEPTION), "internal topic"
        elif name not in existing:
            entry["error_code"] = int(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        else:
            jobs.append((entry, c.call(c.info.controller_id, DeleteTopicsRequest, 30.0, name=name)))
    answers = await asyncio.gather(*(j for _, j in jobs))
    for (entry, _), r in zip(jobs, answers, strict=True):
        entry["error_code"] = int(Errors.REQUEST_TIMED_OUT if r is None else r.error)
    wait = max(req.timeout_ms, 0) / 1000
    await asyncio.gather(*(c._await_topic(e["name"], False, wait) for e, _ in jobs if e["error_code"] == 0))
    return {"throttle_time_ms": 0, "responses": out}


async def delete_records(c: Connection, req: Any, v: int) -> dict:
    jobs = []
    for t in req.topics:
        for p in t.partitions:
            jobs.append((t.name, p.partition_index, c.local(
                DeleteRecordsRequest, 30.0, tp=TopicPartition(t.name, p.partition_index), offset=p.offset)))

    def entry(index: int, r: Any) -> dict:
        error, low = (Errors.REQUEST_TIMED_OUT, -1) if r is None else (r.error, r.low_watermark)
        return {"partition_index": index, "low_watermark": low, "error_code": int(error)}

    by_topic = await _per_partition(jobs, entry)
    return {"throttle_time_ms": 0, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}


RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
SOURCE_TOPIC, SOURCE_DEFAULT, SOURCE_STATIC_BROKER = 1, 5, 4


def _topic_config_entries(configs: dict[str, str]) -> list[tuple[str, str | None, int]]:
    base = LogConfig()
    defaults = {
        "cleanup.policy": base.cleanup_policy,
        "retention.ms": "-1" if base.retention_ms is None else str(base.retention_ms),
        "retention.bytes": "-1" if base.retention_bytes is None else str(base.retention_bytes),
        "segment.bytes": str(base.segment_bytes),
        "min.cleanable.dirty.ratio": str(base.min_cleanable_dirty_ratio),
        "min.compaction.lag.ms": str(base.min_compaction_lag_ms),
        "max.compaction.lag.ms": "-1" if base.max_compaction_lag_ms is None else str(base.max_compaction_lag_ms),
        "delete.retention.ms": str(base.delete_retention_ms),
    }
    for name in ("min.insync.replicas", "segment.ms"):  # listed when the topic sets them
        if name in configs:
            defaults[name] = configs[name]
    return [(name, configs.get(name, default), SOURCE_TOPIC if name in configs else SOURCE_DEFAULT)
            for name, default in sorted(defaults.items())]


async def describe_configs(c: Connection, req: Any, v: int) -> dict:
    image = c.broker.metadata
    topic_configs = dict(image.topic_configs)
    topics = c._image_partitions()
    results = []
    for r in req.resources:
        keys = None if r.configuration_keys is None else set(r.configuration_keys)
        entries: list[tuple[str, str | None, int]] = []
        error, message = Errors.NONE, None
        if r.resource_type == RESOURCE_TOPIC:
            if r.resource_name not in topics:
                error, message = Errors.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {r.resource_name}"
            else:
                entries = _topic_config_entries(dict(topic_configs.get(r.resource_name, ())))
        elif r.resource_type == RESOURCE_BROKER:
            if r.resource_name not in ("", str(c.broker.node_id)):
                error, message = Errors.INVALID_REQUEST, f"ask broker {r.resource_name} itself"
            else:
                entries = [(k, val, SOURCE_STATIC_BROKER) for k, val in sorted(c.info.broker_configs.items())]
        else:
            error, message = Errors.INVALID_REQUEST, f"resource type {r.resource_type} is not supported"
        results.append({
            "error_code": int(error), "error_message": message, "resource_type": r.resource_type,
            "resource_name": r.resource_name,
            "configs": [{"name": n, "value": val, "read_only": r.resource_type == RESOURCE_BROKER,
                         "config_source": src, "is_default": src == SOURCE_DEFAULT, "is_sensitive": False,
                         "synonyms": [], "config_type": 0, "documentation": None}
                        for n, val, src in entries if keys is None or n in keys],
        })
    return {"throttle_time_ms": 0, "results": results}


async def describe_cluster(c: Connection, req: Any, v: int) -> dict:
    live = [b for b in c.broker.metadata.live_brokers if b in c.info.endpoints]
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
            "cluster_id": c.info.cluster_id, "controller_id": live[0] if live else -1,
            "brokers": [{"broker_id": b, "host": c._endpoint(b)[0], "port": c._endpoint(b)[1], "rack": None}
                        for b in live]}


# ---------------------------------------------------------------- coordinators and groups


Handler = Callable[[Connection, Any, int], Awaitable[dict | None]]
HANDLERS: dict[int, Handler] = {
    0: produce, 1: fetch, 2: list_offsets, 3: metadata, 8: offset_commit, 9: offset_fetch,
    10: find_coordinator, 11: join_group, 12: heartbeat, 13: leave_group, 14: sync_group,
    15: describe_groups, 16: list_groups, 18: api_versions, 19: create_topics, 20: delete_topics,
    21: delete_records, 22: init_producer_id, 23: offset_for_leader_epoch, 24: add_partitions_to_txn,
    25: add_offsets_to_txn, 26: end_txn, 28: txn_offset_commit, 32: describe_configs, 60: describe_cluster,
    61: describe_producers, 65: describe_transactions, 66: list_transactions,
    68: consumer_group_heartbeat, 69: consumer_group_describe,
    76: share_group_heartbeat, 77: share_group_describe, 78: share_fetch, 79: share_acknowledge,
}
assert set(HANDLERS) == set(protocol.SUPPORTED), "every served API needs a handler"
