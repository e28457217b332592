"""The handlers of KIP-932's share-group APIs: ShareGroupHeartbeat (a member's one request to
the group coordinator: join, heartbeat, leave; the coordinator assigns), ShareGroupDescribe
(what the coordinator holds of a share group), ShareFetch and ShareAcknowledge (to a
partition's leader, in a share session: records acquired under a lock, and their
acknowledgements).

The wire names topics by id (:func:`reference.server.protocol.topic_id`), the engine by name.
A share session belongs to the connection it was opened on as well as to its member: when the
connection closes, the sessions opened on it are closed and what their members held is
released, as Kafka does (KAFKA-19015). A ShareFetch that acquires nothing is answered after
its MaxWaitMs (at most :data:`MAX_WAIT_S`), where Kafka answers as soon as records come: a
client polling an empty partition waits instead of spinning (docs/reference/deviations.md).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from reference.errors import Errors
from reference.messages import TopicPartition
from reference.server import protocol
from reference.server.consumer_group_apis import described_group, heartbeat_answer, refusal, wire_partitions
from reference.server.gateway import ENGINE_MARGIN_S, Connection
from reference.share_messages import (
    FINAL_SESSION_EPOCH,
    INITIAL_SESSION_EPOCH,
    ShareAcknowledgeRequest,
    ShareFetchRequest,
    ShareGroupHeartbeatRequest,
)

REQUEST_TIMEOUT_S = 30.0
MAX_WAIT_S = 0.5


# ---------------------------------------------------------------- membership


async def share_group_heartbeat(c: Connection, req: Any, v: int) -> dict:
    if not req.member_id.strip():
        return refusal(Errors.INVALID_REQUEST, "MemberId can't be empty.")
    topics = None if req.subscribed_topic_names is None else tuple(req.subscribed_topic_names)
    r = await c.local(ShareGroupHeartbeatRequest, REQUEST_TIMEOUT_S, group_id=req.group_id,
                      member_id=req.member_id, member_epoch=req.member_epoch, subscribed_topics=topics)
    return heartbeat_answer(r)


async def share_group_describe(c: Connection, req: Any, v: int) -> dict:
    return {"throttle_time_ms": 0, "groups": [_described(c, g) for g in req.group_ids]}


def _described(c: Connection, group: str) -> dict:
    out, sg = described_group(c, group, c.broker.groups.share.group)
    if sg is None:
        return out
    members = [{"member_id": m.member_id, "rack_id": None, "member_epoch": m.member_epoch, "client_id": "",
                "client_host": "", "subscribed_topic_names": list(m.subscribed),
                "assignment": {"topic_partitions": wire_partitions(m.assigned, True)}}
               for m in sg.members.values()]
    return {**out, "group_state": sg.state(), "group_epoch": sg.group_epoch,
            "assignment_epoch": sg.assignment_epoch, "assignor_name": "simple", "members": members}


# ---------------------------------------------------------------- records


def _acks(topics, names: dict) -> tuple:
    """The wire's acknowledgement batches as the engine's, per partition (topics it does not
    know left out)."""
    out = []
    for t in topics:
        for p in t.partitions:
            batches = tuple((b.first_offset, b.last_offset, tuple(b.acknowledge_types))
                            for b in p.acknowledgement_batches)
            if batches and t.topic_id in names:
                out.append((TopicPartition(names[t.topic_id], p.partition_index), batches))
    return tuple(out)


def _leader(c: Connection, tp: TopicPartition, leader: int) -> dict:
    epoch = next((s.leader_epoch for s in c.broker.metadata.partitions if s.tp == tp), -1)
    return {"leader_id": leader, "leader_epoch": epoch if leader >= 0 else -1}


def _endpoints(c: Connection, nodes: set[int]) -> list[dict]:
    out = []
    for n in sorted(nodes):
        host, port = c._endpoint(n)
        if port >= 0:
            out.append({"node_id": n, "host": host, "port": port, "rack": None})
    return out


# connection -> the (group, member) sessions opened on it and not closed
_SESSIONS: weakref.WeakKeyDictionary[Connection, set[tuple[str, str]]] = weakref.WeakKeyDictionary()


def _remember_session(c: Connection, group: str, member: str, epoch: int) -> None:
    """Sessions opened on this connection are closed with it (their members' records released)."""
    sessions = _SESSIONS.get(c)
    if sessions is None:
        sessions = _SESSIONS[c] = set()

        def close() -> None:
            for g, m in sorted(sessions):
                s = c.broker.share.sessions.get((g, m))
                if s is None or s.opener != c.node_id:
                    continue  # closed, or opened again on another connection since
                c.post(c.broker.node_id, ShareAcknowledgeRequest, group_id=g, member_id=m,
                       session_epoch=FINAL_SESSION_EPOCH, acks=())
        c.on_close.append(close)
    if epoch == INITIAL_SESSION_EPOCH:
        sessions.add((group, member))
    elif epoch == FINAL_SESSION_EPOCH:
        sessions.discard((group, member))


async def share_fetch(c: Connection, req: Any, v: int) -> dict:
    names = protocol.names_by_id(c._image_partitions())
    wanted = tuple(TopicPartition(names[t.topic_id], p.partition_index) for t in req.topics if t.topic_id in names
                   for p in t.partitions)
    forgotten = tuple(TopicPartition(names[t.topic_id], p) for t in req.forgotten_topics_data
                      if t.topic_id in names for p in t.partitions)
    acks = _acks(req.topics, names)
    _remember_session(c, req.group_id or "", req.member_id or "", req.share_session_epoch)
    r = await c.local(ShareFetchRequest, REQUEST_TIMEOUT_S + ENGINE_MARGIN_S, group_id=req.group_id or "",
                      member_id=req.member_id or "", session_epoch=req.share_session_epoch,
                      max_records=max(req.max_records, 1), partitions=wanted, forgotten=forgotten, acks=acks)
    if r is None:
        return _fetch_error(Errors.REQUEST_TIMED_OUT)
    if r.error is not Errors.NONE:
        return _fetch_error(r.error)
    if not acks and not any(p.acquired or p.error is not Errors.NONE for p in r.partitions):
        await asyncio.sleep(min(max(req.max_wait_ms, 0) / 1000, MAX_WAIT_S))
    by_topic: dict[str, list[dict]] = {}
    leaders: set[int] = set()
    for p in r.partitions:
        if p.error is Errors.NOT_LEADER_OR_FOLLOWER and p.current_leader >= 0:
            leaders.add(p.current_leader)
        by_topic.setdefault(p.tp.topic, []).append({
            "partition_index": p.tp.partition, "error_code": int(p.error), "error_message": None,
            "acknowledge_error_code": int(p.ack_error), "acknowledge_error_message": None,
            "current_leader": _leader(c, p.tp, p.current_leader), "records": b"".join(p.records),
            "acquired_records": [{"first_offset": a.first_offset, "last_offset": a.last_offset,
                                  "delivery_count": a.delivery_count} for a in p.acquired]})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "acquisition_lock_timeout_ms": r.acquisition_lock_timeout_ms,
            "responses": [{"topic_id": protocol.topic_id(t), "partitions": ps} for t, ps in by_topic.items()],
            "node_endpoints": _endpoints(c, leaders)}


def _fetch_error(error: Errors) -> dict:
    return {"throttle_time_ms": 0, "error_code": int(error), "error_message": None,
            "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []}


async def share_acknowledge(c: Connection, req: Any, v: int) -> dict:
    names = protocol.names_by_id(c._image_partitions())
    acks = _acks(req.topics, names)
    _remember_session(c, req.group_id or "", req.member_id or "", req.share_session_epoch)
    r = await c.local(ShareAcknowledgeRequest, REQUEST_TIMEOUT_S + ENGINE_MARGIN_S, group_id=req.group_id or "",
                      member_id=req.member_id or "", session_epoch=req.share_session_epoch, acks=acks)
    error = Errors.REQUEST_TIMED_OUT if r is None else r.error
    if error is not Errors.NONE:
        return {"throttle_time_ms": 0, "error_code": int(error), "error_message": None,
                "acquisition_lock_timeout_ms": 0, "responses": [], "node_endpoints": []}
    by_topic: dict[str, list[dict]] = {}
    for tp, e in r.partitions:
        by_topic.setdefault(tp.topic, []).append({"partition_index": tp.partition, "error_code": int(e),
                                                  "error_message": None, "current_leader": _leader(c, tp, -1)})
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "acquisition_lock_timeout_ms": c.broker.config.share_record_lock_duration_ms,
            "responses": [{"topic_id": protocol.topic_id(t), "partitions": ps} for t, ps in by_topic.items()],
            "node_endpoints": []}
