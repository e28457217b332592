"""The messages of KIP-932's share groups, as frozen dataclasses with Kafka's field names
(reference/messages.py and reference/group_messages.py hold the others; its rules hold here: a response echoes its
request's ``correlation_id``).

* ShareGroupHeartbeat (to the group coordinator): membership and the server's assignment;
* ShareFetch and ShareAcknowledge (to a partition's leader), in a share session: records
  acquired under a time-limited lock, and their acknowledgements;
* ReadShareGroupState and WriteShareGroupState (a leader to the share coordinator, which
  keeps every share-partition's state in ``__share_group_state``).

Acknowledge types are Kafka's: 0 gap, 1 accept, 2 release, 3 reject.
"""

from __future__ import annotations

from reference.errors import Errors
from reference.frozen import frozen
from reference.messages import TopicPartition

COORDINATOR_SHARE = 2  # FindCoordinator's key type of the share coordinator (key "group:topic:partition")
GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
ACK_TYPES = {"accept": ACCEPT, "release": RELEASE, "reject": REJECT}
INITIAL_SESSION_EPOCH, FINAL_SESSION_EPOCH = 0, -1

AckBatch = tuple[int, int, tuple[int, ...]]  # (first offset, last offset, one type, or one per offset)


def share_key(group: str, tp: TopicPartition) -> str:
    """The share coordinator's key of a share-partition (Kafka's uses the topic id)."""
    return f"{group}:{tp.topic}:{tp.partition}"


# ---------------------------------------------------------------- membership


@frozen
class ShareGroupHeartbeatRequest:
    """A share group member's heartbeat: ``member_epoch`` 0 joins (or rejoins), -1 leaves;
    ``subscribed_topics`` None is unchanged since the last one."""

    correlation_id: int
    group_id: str
    member_id: str
    member_epoch: int
    subscribed_topics: tuple[str, ...] | None = None


@frozen
class ShareGroupHeartbeatResponse:
    correlation_id: int
    error: Errors
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: tuple[TopicPartition, ...] | None = None  # None: unchanged


# ---------------------------------------------------------------- records


@frozen
class AcquiredRange:
    first_offset: int
    last_offset: int
    delivery_count: int


@frozen
class ShareFetchRequest:
    """Fetch (acquire) records of the session's partitions, and acknowledge records of
    ``acks`` first. ``session_epoch`` 0 opens a session, -1 closes it (releasing what the
    member still holds); ``partitions`` are added to the session, ``forgotten`` removed."""

    correlation_id: int
    group_id: str
    member_id: str
    session_epoch: int
    max_records: int
    partitions: tuple[TopicPartition, ...] = ()
    forgotten: tuple[TopicPartition, ...] = ()
    acks: tuple[tuple[TopicPartition, tuple[AckBatch, ...]], ...] = ()


@frozen
class SharePartitionData:
    tp: TopicPartition
    error: Errors = Errors.NONE
    ack_error: Errors = Errors.NONE
    records: tuple[bytes, ...] = ()  # log batches covering the acquired ranges (maybe more)
    acquired: tuple[AcquiredRange, ...] = ()
    current_leader: int = -1  # with NOT_LEADER_OR_FOLLOWER: the leader the broker knows


@frozen
class ShareFetchResponse:
    correlation_id: int
    error: Errors
    partitions: tuple[SharePartitionData, ...] = ()
    acquisition_lock_timeout_ms: int = 0


@frozen
class ShareAcknowledgeRequest:
    correlation_id: int
    group_id: str
    member_id: str
    session_epoch: int
    acks: tuple[tuple[TopicPartition, tuple[AckBatch, ...]], ...]


@frozen
class ShareAcknowledgeResponse:
    correlation_id: int
    error: Errors
    partitions: tuple[tuple[TopicPartition, Errors], ...] = ()


# ---------------------------------------------------------------- the share coordinator

StateBatch = tuple[int, int, int, int]  # (first offset, last offset, record state id, delivery count)


@frozen
class ReadShareGroupStateRequest:
    """A leader loading a share-partition: the state, and its leader epoch recorded (a
    lower one is fenced from then on)."""

    correlation_id: int
    group_id: str
    tp: TopicPartition
    leader_epoch: int


@frozen
class ReadShareGroupStateResponse:
    correlation_id: int
    error: Errors
    state_epoch: int = 0
    start_offset: int = -1  # -1: never initialized (the leader applies share.auto.offset.reset)
    batches: tuple[StateBatch, ...] = ()


@frozen
class WriteShareGroupStateRequest:
    correlation_id: int
    group_id: str
    tp: TopicPartition
    leader_epoch: int
    state_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]


@frozen
class WriteShareGroupStateResponse:
    correlation_id: int
    error: Errors
