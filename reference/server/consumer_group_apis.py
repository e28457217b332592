"""The handlers of KIP-848's consumer-group APIs: ConsumerGroupHeartbeat (a member's one
request: join, heartbeat, acknowledge, leave) and ConsumerGroupDescribe (what the coordinator
holds of a consumer group).

The wire names topics by id (Metadata v10+'s uuids, :func:`reference.server.protocol.topic_id`),
the engine by name: a heartbeat's owned partitions are turned into names (those of topics the
broker does not know are left out, as a deleted topic's), and its assignment back into ids.
A regular-expression subscription (v1's SubscribedTopicRegex) is refused with INVALID_REQUEST:
the engine subscribes by name only. ConsumerGroupDescribe reads the local coordinator's state
directly, as Kafka answers it from its loaded groups; the assignment it reports is the
member's assigned partitions plus those pending revocation (Kafka 4.3+).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from reference.consumer_group_coordinator import preferred_assignor
from reference.errors import Errors
from reference.group_messages import ConsumerGroupHeartbeatRequest
from reference.messages import TopicPartition
from reference.server import protocol
from reference.server.gateway import ENGINE_MARGIN_S, Connection

HEARTBEAT_TIMEOUT_S = 30.0

# one line per heartbeat handled (INFO): what it said and what the coordinator made of it; the
# brokers `conform --spawn reference` starts log it (kafkacheck.conform.targets)
heartbeat_log = logging.getLogger("kafkacheck.server.cgroup")


def wire_partitions(tps, with_names: bool = False) -> list[dict]:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(tps):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    return [{"topic_id": protocol.topic_id(t), **({"topic_name": t} if with_names else {}), "partitions": ps}
            for t, ps in by_topic.items()]


def refusal(error: Errors, message: str | None = None) -> dict:
    return {"throttle_time_ms": 0, "error_code": int(error), "error_message": message, "member_id": None,
            "member_epoch": 0, "heartbeat_interval_ms": 0, "assignment": None}


async def consumer_group_heartbeat(c: Connection, req: Any, v: int) -> dict:
    if v >= 1 and not req.member_id.strip():
        return refusal(Errors.INVALID_REQUEST, "MemberId can't be empty.")
    if v >= 1 and req.subscribed_topic_regex:
        return refusal(Errors.INVALID_REQUEST, "regular-expression subscriptions are not served by the reference")
    owned = None
    if req.topic_partitions is not None:
        names = protocol.names_by_id(c._image_partitions())
        owned = tuple(TopicPartition(names[t.topic_id], p) for t in req.topic_partitions if t.topic_id in names
                      for p in t.partitions)
    timeout_s = max(req.rebalance_timeout_ms, 0) / 1000 + ENGINE_MARGIN_S
    r = await c.local(ConsumerGroupHeartbeatRequest, max(timeout_s, HEARTBEAT_TIMEOUT_S), group_id=req.group_id,
                      member_id=req.member_id, member_epoch=req.member_epoch, instance_id=req.instance_id,
                      rebalance_timeout_ms=req.rebalance_timeout_ms,
                      subscribed_topics=None if req.subscribed_topic_names is None
                      else tuple(req.subscribed_topic_names),
                      server_assignor=req.server_assignor, owned=owned)
    if heartbeat_log.isEnabledFor(logging.INFO):
        _log_heartbeat(c, req, owned, r)
    return heartbeat_answer(r)


def heartbeat_answer(r: Any) -> dict:
    """The wire answer of a KIP-848 or KIP-932 heartbeat from the engine's (None: none came
    in time); their responses have the same fields."""
    if r is None:
        return refusal(Errors.REQUEST_TIMED_OUT)
    if r.error is not Errors.NONE:
        return refusal(r.error)
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "member_id": r.member_id,
            "member_epoch": r.member_epoch, "heartbeat_interval_ms": r.heartbeat_interval_ms,
            "assignment": None if r.assignment is None else {"topic_partitions": wire_partitions(r.assignment)}}


def _short(tps) -> str:
    return "null" if tps is None else "[" + ",".join(f"{tp.topic[-4:]}-{tp.partition}" for tp in sorted(tps)) + "]"


def _log_heartbeat(c: Connection, req: Any, owned, r) -> None:
    """The heartbeat and its answer; the member as the coordinator holds it after (its state,
    assigned and pending-revocation partitions). Topics are shown by their last 4 characters."""
    head = f"heartbeat group={req.group_id} member={req.member_id[:8]} epoch={req.member_epoch} owned={_short(owned)}"
    if r is None or r.error is not Errors.NONE:
        heartbeat_log.info("%s -> %s", head, "REQUEST_TIMED_OUT" if r is None else r.error.name)
        return
    cg = c.broker.groups.consumer.group(req.group_id) if c.broker.groups._owns(req.group_id) is Errors.NONE else None
    m = cg.members.get(r.member_id) if cg is not None else None
    held = "" if m is None else (f" state={m.state} assigned={_short(m.assigned_set())}"
                                 f" revoking={_short(m.revoking_set())} group_epoch={cg.group_epoch}")
    heartbeat_log.info("%s -> epoch=%d assignment=%s%s", head, r.member_epoch,
                       "none" if r.assignment is None else _short(r.assignment), held)


async def consumer_group_describe(c: Connection, req: Any, v: int) -> dict:
    return {"throttle_time_ms": 0, "groups": [_described(c, g, v) for g in req.group_ids]}


def described_group(c: Connection, group: str, find: Callable[[str], Any]) -> tuple[dict, Any]:
    """What ConsumerGroupDescribe and ShareGroupDescribe answer alike: the group's entry with
    nothing filled in, and the group ``find`` gives at the local coordinator, or None when the
    entry says why not (no id, not the coordinator, no such group)."""
    out: dict[str, Any] = {"error_code": 0, "error_message": None, "group_id": group, "group_state": "",
                           "group_epoch": -1, "assignment_epoch": -1, "assignor_name": "", "members": []}
    if not group:
        return {**out, "error_code": int(Errors.INVALID_GROUP_ID)}, None
    error = c.broker.groups._owns(group)
    g = find(group) if error is Errors.NONE else None
    if error is Errors.NONE and g is None:
        error = Errors.GROUP_ID_NOT_FOUND
    if g is None:
        return {**out, "error_code": int(error), "error_message": f"Group {group} not found." if
                error is Errors.GROUP_ID_NOT_FOUND else None}, None
    return out, g


def _described(c: Connection, group: str, v: int) -> dict:
    out, cg = described_group(c, group, c.broker.groups.consumer.group)
    if cg is None:
        return out
    members = [{"member_id": m.member_id, "instance_id": m.instance_id, "rack_id": None,
                "member_epoch": m.member_epoch, "client_id": "", "client_host": "",
                "subscribed_topic_names": list(m.subscribed), "subscribed_topic_regex": None,
                "assignment": {"topic_partitions": wire_partitions(m.held(), True)},
                "target_assignment": {"topic_partitions": wire_partitions(cg.target.get(m.member_id, ()), True)},
                **({"member_type": 1} if v >= 1 else {})}
               for m in cg.members.values()]
    return {**out, "group_state": cg.state(), "group_epoch": cg.group_epoch,
            "assignment_epoch": cg.assignment_epoch,
            "assignor_name": preferred_assignor(cg), "members": members}
