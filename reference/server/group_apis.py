"""The handlers of the coordinator APIs: FindCoordinator, the consumer-group APIs (JoinGroup,
SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups, ListGroups) and
the transaction APIs (InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn,
TxnOffsetCommit). Each turns a wire request into engine requests to the local broker (the
coordinator) and their answers into the wire response; :mod:`reference.server.apis` has the
table that routes requests here.
"""

from __future__ import annotations

import asyncio
from typing import Any

from reference.errors import Errors
from reference.group_messages import (
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
)
from reference.group_state import GroupState
from reference.messages import (
    COORDINATOR_GROUP,
    COORDINATOR_TRANSACTION,
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    FindCoordinatorRequest,
    InitProducerIdRequest,
    TopicPartition,
)
from reference.server import protocol
from reference.server.gateway import ENGINE_MARGIN_S, Connection


async def find_coordinator(c: Connection, req: Any, v: int) -> dict:
    key_type = req.key_type if v >= 1 else COORDINATOR_GROUP
    keys = list(req.coordinator_keys) if v >= 4 else [req.key]
    if key_type not in (COORDINATOR_GROUP, COORDINATOR_TRANSACTION):
        found = [None] * len(keys)
    else:
        found = await asyncio.gather(*(c.local(FindCoordinatorRequest, 30.0, key=k, key_type=key_type)
                                       for k in keys))
    coordinators = []
    for k, r in zip(keys, found, strict=True):
        if r is None:
            error = Errors.INVALID_REQUEST if key_type not in (0, 1) else Errors.COORDINATOR_NOT_AVAILABLE
            node = -1
        else:
            error, node = r.error, r.node_id
        host, port = c._endpoint(node) if error is Errors.NONE else ("", -1)
        coordinators.append({"key": k, "node_id": node, "host": host, "port": port,
                             "error_code": int(error), "error_message": None})
    if v >= 4:
        return {"throttle_time_ms": 0, "coordinators": coordinators}
    one = coordinators[0]
    return {"throttle_time_ms": 0, "error_code": one["error_code"], "error_message": None,
            "node_id": one["node_id"], "host": one["host"], "port": one["port"]}


async def join_group(c: Connection, req: Any, v: int) -> dict:
    r = await c.local(JoinGroupRequest, req.rebalance_timeout_ms / 1000 + ENGINE_MARGIN_S if v >= 1
                      else req.session_timeout_ms / 1000 + ENGINE_MARGIN_S,
                      group_id=req.group_id, member_id=req.member_id,
                      group_instance_id=req.group_instance_id if v >= 5 else None,
                      session_timeout_ms=req.session_timeout_ms,
                      rebalance_timeout_ms=req.rebalance_timeout_ms if v >= 1 else req.session_timeout_ms,
                      protocols=tuple((p.name, p.metadata) for p in req.protocols),
                      require_known_member_id=v >= 4)
    if r is None:
        return {"throttle_time_ms": 0, "error_code": int(Errors.REQUEST_TIMED_OUT), "generation_id": -1,
                "protocol_type": None, "protocol_name": "" if v < 7 else None, "leader": "",
                "member_id": req.member_id, "members": []}
    ok = r.error is Errors.NONE
    return {"throttle_time_ms": 0, "error_code": int(r.error), "generation_id": r.generation_id,
            "protocol_type": req.protocol_type if ok else None,
            "protocol_name": r.protocol_name if ok or v < 7 else None,
            "leader": r.leader, "skip_assignment": False, "member_id": r.member_id,
            "members": [{"member_id": m, "group_instance_id": None, "metadata": meta} for m, meta in r.members]}


async def sync_group(c: Connection, req: Any, v: int) -> dict:
    r = await c.local(SyncGroupRequest, 60.0, group_id=req.group_id, generation_id=req.generation_id,
                      member_id=req.member_id,
                      assignments=tuple((a.member_id, a.assignment) for a in req.assignments))
    error, assignment = (Errors.REQUEST_TIMED_OUT, b"") if r is None else (r.error, r.assignment)
    return {"throttle_time_ms": 0, "error_code": int(error), "protocol_type": req.protocol_type if v >= 5 else None,
            "protocol_name": req.protocol_name if v >= 5 else None, "assignment": assignment}


async def heartbeat(c: Connection, req: Any, v: int) -> dict:
    r = await c.local(HeartbeatRequest, 30.0, group_id=req.group_id, generation_id=req.generation_id,
                      member_id=req.member_id)
    return {"throttle_time_ms": 0, "error_code": int(Errors.REQUEST_TIMED_OUT if r is None else r.error)}


async def leave_group(c: Connection, req: Any, v: int) -> dict:
    members = [(m.member_id, m.group_instance_id) for m in req.members] if v >= 3 else [(req.member_id, None)]
    answers = await asyncio.gather(*(c.local(LeaveGroupRequest, 30.0, group_id=req.group_id, member_id=m)
                                     for m, _ in members))
    errors = [Errors.REQUEST_TIMED_OUT if r is None else r.error for r in answers]
    top = Errors.NONE
    if v < 3 or all(e is not Errors.NONE for e in errors):
        top = errors[0] if errors else Errors.NONE
    if any(e in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE, Errors.COORDINATOR_LOAD_IN_PROGRESS)
           for e in errors):
        top = next(e for e in errors if e is not Errors.NONE)
    return {"throttle_time_ms": 0, "error_code": int(top),
            "members": [{"member_id": m, "group_instance_id": i, "error_code": int(e)}
                        for (m, i), e in zip(members, errors, strict=True)]}


def _offsets_reply(topics: list[tuple[str, list[int]]], error: Errors) -> list[dict]:
    return [{"name": name, "partitions": [{"partition_index": p, "error_code": int(error)} for p in parts]}
            for name, parts in topics]


async def offset_commit(c: Connection, req: Any, v: int) -> dict:
    offsets = tuple((TopicPartition(t.name, p.partition_index), p.committed_offset)
                    for t in req.topics for p in t.partitions)
    modern = c.broker.groups.consumer.group(req.group_id)
    if v < 9 and modern is not None and req.member_id in modern.members:
        error = Errors.UNSUPPORTED_VERSION  # a consumer group's member commits with v9+ (as Kafka)
    else:
        r = await c.local(OffsetCommitRequest, 30.0, group_id=req.group_id,
                          generation_id=req.generation_id_or_member_epoch, member_id=req.member_id,
                          offsets=offsets)
        error = Errors.REQUEST_TIMED_OUT if r is None else r.error
    if error is Errors.TRANSACTION_ABORTABLE and v < 5:
        error = Errors.INVALID_TXN_STATE  # what producers before TxnOffsetCommit v5 expect (as Kafka)
    return {"throttle_time_ms": 0, "topics": _offsets_reply(
        [(t.name, [p.partition_index for p in t.partitions]) for t in req.topics], error)}


async def offset_fetch(c: Connection, req: Any, v: int) -> dict:
    require_stable = bool(req.require_stable) if v >= 7 else False
    if v < 8:
        error, topics = await _fetch_group(c, req.group_id, req.topics, require_stable, v)
        return {"throttle_time_ms": 0, "error_code": int(error), "topics": topics}
    groups = await asyncio.gather(*(_fetch_group(c, g.group_id, g.topics, require_stable, v,
                                                 g.member_id if v >= 9 else None, g.member_epoch if v >= 9 else -1)
                                    for g in req.groups))
    return {"throttle_time_ms": 0, "groups": [{"group_id": g.group_id, "error_code": int(error), "topics": topics}
                                              for g, (error, topics) in zip(req.groups, groups, strict=True)]}


async def _fetch_group(c: Connection, group: str, topics: Any, require_stable: bool, v: int,
                       member_id: str | None = None, member_epoch: int = -1) -> tuple[Errors, list[dict]]:
    """One group's committed offsets (all of them when ``topics`` is None): the group's error
    and its topics as the wire has them."""
    if topics is None:
        g = c.broker.groups.groups.get(group, GroupState())
        tps = tuple(sorted(g.committed))
    else:
        tps = tuple(TopicPartition(t.name, p) for t in topics for p in t.partition_indexes)
    r = await c.local(OffsetFetchRequest, 30.0, group_id=group, partitions=tps, require_stable=require_stable,
                      member_id=member_id, member_epoch=member_epoch)
    error = Errors.REQUEST_TIMED_OUT if r is None else r.error
    committed = dict(r.offsets) if r is not None else {}
    # pending transactional offsets (KIP-447) are a partition's error, as Kafka answers them;
    # a client that only looks at the top-level code would take -1 for "nothing committed"
    # and reset to the earliest offset
    partition_error = error if v < 2 or error is Errors.UNSTABLE_OFFSET_COMMIT else Errors.NONE
    group_error = Errors.NONE if error is Errors.UNSTABLE_OFFSET_COMMIT else error
    by_topic: dict[str, list[dict]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "committed_offset": committed.get(tp, -1),
            "committed_leader_epoch": -1, "metadata": "", "error_code": int(partition_error)})
    return group_error, [{"name": n, "partitions": ps} for n, ps in by_topic.items()]


async def describe_groups(c: Connection, req: Any, v: int) -> dict:
    out = []
    for group in req.groups:
        error = c.broker.groups._owns(group)
        g = c.broker.groups.groups.get(group) if error is Errors.NONE else None
        if g is None:
            out.append({"error_code": int(error), "group_id": group,
                        "group_state": "Dead" if error is Errors.NONE else "",
                        "protocol_type": "", "protocol_data": "", "members": []})
            continue
        out.append({
            "error_code": 0, "group_id": group, "group_state": g.state,
            "protocol_type": "consumer" if g.members or g.protocol else "", "protocol_data": g.protocol,
            "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": "",
                         "client_host": "", "member_metadata": dict(m.protocols).get(g.protocol, b""),
                         "member_assignment": m.assignment} for m in g.members.values()]})
    return {"throttle_time_ms": 0, "groups": out}


async def list_groups(c: Connection, req: Any, v: int) -> dict:
    states = set(req.states_filter) if v >= 4 and req.states_filter else None
    groups = []
    coordinator = c.broker.groups
    for name, g in sorted(coordinator.groups.items()):
        if coordinator.partition_of(name) not in coordinator.loaded:
            continue
        if states is not None and g.state not in states:
            continue
        groups.append({"group_id": name, "protocol_type": "consumer", "group_state": g.state})
    return {"throttle_time_ms": 0, "error_code": 0, "groups": groups}


# ---------------------------------------------------------------- transactions

async def init_producer_id(c: Connection, req: Any, v: int) -> dict:
    r = await c.local(InitProducerIdRequest, 30.0, transactional_id=req.transactional_id,
                      transaction_timeout_ms=req.transaction_timeout_ms,
                      producer_id=req.producer_id if v >= 3 else -1,
                      producer_epoch=req.producer_epoch if v >= 3 else -1)
    if r is None:
        return {"throttle_time_ms": 0, "error_code": int(Errors.REQUEST_TIMED_OUT), "producer_id": -1,
                "producer_epoch": -1}
    return {"throttle_time_ms": 0, "error_code": int(r.error), "producer_id": r.producer_id,
            "producer_epoch": r.producer_epoch}


async def add_partitions_to_txn(c: Connection, req: Any, v: int) -> dict:
    topics = [(t.name, list(t.partitions)) for t in req.v3_and_below_topics]
    r = await c.local(AddPartitionsToTxnRequest, 30.0, transactional_id=req.v3_and_below_transactional_id,
                      producer_id=req.v3_and_below_producer_id, producer_epoch=req.v3_and_below_producer_epoch,
                      partitions=tuple(TopicPartition(n, p) for n, ps in topics for p in ps))
    error = Errors.REQUEST_TIMED_OUT if r is None else r.error
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": n, "results_by_partition": [{"partition_index": p, "partition_error_code": int(error)}
                                             for p in ps]} for n, ps in topics]}


async def add_offsets_to_txn(c: Connection, req: Any, v: int) -> dict:
    r = await c.local(AddOffsetsToTxnRequest, 30.0, transactional_id=req.transactional_id,
                      producer_id=req.producer_id, producer_epoch=req.producer_epoch, group_id=req.group_id)
    return {"throttle_time_ms": 0, "error_code": int(Errors.REQUEST_TIMED_OUT if r is None else r.error)}


async def end_txn(c: Connection, req: Any, v: int) -> dict:
    tv2 = v >= protocol.TV2_VERSIONS[26]
    r = await c.local(EndTxnRequest, 60.0, transactional_id=req.transactional_id, producer_id=req.producer_id,
                      producer_epoch=req.producer_epoch, commit=bool(req.committed),
                      transaction_version=2 if tv2 else 1)
    out = {"throttle_time_ms": 0, "error_code": int(Errors.REQUEST_TIMED_OUT if r is None else r.error)}
    if tv2:  # the producer id and the epoch the producer uses next (bumped by this end)
        out["producer_id"] = r.producer_id if r is not None and r.error is Errors.NONE else -1
        out["producer_epoch"] = r.producer_epoch if r is not None and r.error is Errors.NONE else -1
    return out


async def txn_offset_commit(c: Connection, req: Any, v: int) -> dict:
    offsets = tuple((TopicPartition(t.name, p.partition_index), p.committed_offset)
                    for t in req.topics for p in t.partitions)
    r = await c.local(TxnOffsetCommitRequest, 30.0, transactional_id=req.transactional_id, group_id=req.group_id,
                      producer_id=req.producer_id, producer_epoch=req.producer_epoch, offsets=offsets,
                      generation_id=req.generation_id if v >= 3 else -1,
                      member_id=req.member_id if v >= 3 else "",
                      group_instance_id=req.group_instance_id if v >= 3 else None,
                      add_partition=v >= protocol.TV2_VERSIONS[28])
    error = Errors.REQUEST_TIMED_OUT if r is None else r.error
    if error is Errors.TRANSACTION_ABORTABLE and v < 5:
        error = Errors.INVALID_TXN_STATE  # what producers before TxnOffsetCommit v5 expect (as Kafka)
    return {"throttle_time_ms": 0, "topics": _offsets_reply(
        [(t.name, [p.partition_index for p in t.partitions]) for t in req.topics], error)}
