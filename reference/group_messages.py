"""The messages of consumer groups and their offsets, as frozen dataclasses with Kafka's field
names (reference/messages.py holds the others; its rules hold here: a response echoes its
request's ``correlation_id``).

* OffsetCommit, OffsetFetch and TxnOffsetCommit (to the group coordinator): a group's
  committed offsets, a transaction's among them;
* JoinGroup, SyncGroup, Heartbeat and LeaveGroup: the classic group protocol's membership;
* ConsumerGroupHeartbeat: KIP-848's, where the coordinator computes the assignment.
"""

from __future__ import annotations

from reference.errors import Errors
from reference.frozen import frozen
from reference.messages import TopicPartition

# ---------------------------------------------------------------- consumer offsets


@frozen
class TxnOffsetCommitRequest:
    correlation_id: int
    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    offsets: tuple[tuple[TopicPartition, int], ...]
    generation_id: int = -1  # KIP-447 (v3+): the consumer's group generation, member and instance
    member_id: str = ""
    group_instance_id: str | None = None
    add_partition: bool = False  # KIP-890 part 2 (v5+): adds the offsets partition itself (no AddOffsetsToTxn)


@frozen
class TxnOffsetCommitResponse:
    correlation_id: int
    error: Errors


@frozen
class OffsetCommitRequest:
    correlation_id: int
    group_id: str
    generation_id: int  # -1: a commit outside group management (assign)
    member_id: str
    offsets: tuple[tuple[TopicPartition, int], ...]


@frozen
class OffsetCommitResponse:
    correlation_id: int
    error: Errors


@frozen
class OffsetFetchRequest:
    correlation_id: int
    group_id: str
    partitions: tuple[TopicPartition, ...]
    require_stable: bool = True  # KIP-447: wait for pending transactional offsets
    member_id: str | None = None  # KIP-848 (v9): a consumer group's member asks, at its epoch
    member_epoch: int = -1


@frozen
class OffsetFetchResponse:
    correlation_id: int
    error: Errors
    offsets: tuple[tuple[TopicPartition, int], ...] = ()  # -1: nothing committed


# ---------------------------------------------------------------- consumer groups


@frozen
class JoinGroupRequest:
    correlation_id: int
    group_id: str
    member_id: str  # "" for a new member
    group_instance_id: str | None  # static membership (KIP-345)
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]  # (assignor name, subscription metadata)
    # KIP-394 (JoinGroup v4+): a new member first gets MEMBER_ID_REQUIRED and its member id
    require_known_member_id: bool = False


@frozen
class JoinGroupResponse:
    correlation_id: int
    error: Errors
    generation_id: int = -1
    protocol_name: str = ""
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, bytes], ...] = ()  # for the leader: (member id, metadata)


@frozen
class SyncGroupRequest:
    correlation_id: int
    group_id: str
    generation_id: int
    member_id: str
    assignments: tuple[tuple[str, bytes], ...] = ()  # from the leader only


@frozen
class SyncGroupResponse:
    correlation_id: int
    error: Errors
    assignment: bytes = b""


@frozen
class HeartbeatRequest:
    correlation_id: int
    group_id: str
    generation_id: int
    member_id: str


@frozen
class HeartbeatResponse:
    correlation_id: int
    error: Errors


@frozen
class ConsumerGroupHeartbeatRequest:
    """KIP-848's one request of a member (ConsumerGroupHeartbeat v0). A None field is
    unchanged since the last heartbeat; ``member_epoch`` 0 joins, -1 leaves, -2 leaves for a
    while (a static member); ``owned``: the partitions the member owns now."""

    correlation_id: int
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topics: tuple[str, ...] | None = None
    server_assignor: str | None = None
    owned: tuple[TopicPartition, ...] | None = None


@frozen
class ConsumerGroupHeartbeatResponse:
    """``assignment``: the member's assigned partitions (without those it must still revoke);
    None when unchanged."""

    correlation_id: int
    error: Errors
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: tuple[TopicPartition, ...] | None = None


@frozen
class LeaveGroupRequest:
    correlation_id: int
    group_id: str
    member_id: str


@frozen
class LeaveGroupResponse:
    correlation_id: int
    error: Errors
