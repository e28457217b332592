"""Kafka's error codes, with Kafka's names and numbers.

Expected trouble (a stale epoch, a moved leader, a full disk) travels as one of these codes
in a response; it is never an exception. ``RETRIABLE`` mirrors Kafka's RetriableException
subclasses: a client may retry the same request after refreshing metadata.
"""

from __future__ import annotations

from enum import IntEnum

from mypy_extensions import mypyc_attr


class Errors(IntEnum):
    NONE = 0
    UNKNOWN_SERVER_ERROR = -1
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    REBALANCE_IN_PROGRESS = 27
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_PRODUCER_ID = 59
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    INVALID_RECORD = 87
    TRANSACTIONAL_ID_NOT_FOUND = 105
    UNSTABLE_OFFSET_COMMIT = 88
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    MEMBER_ID_REQUIRED = 79  # KIP-394
    PRODUCER_FENCED = 90
    INVALID_UPDATE_VERSION = 95
    INELIGIBLE_REPLICA = 107
    UNKNOWN_TOPIC_ID = 100
    NEW_LEADER_ELECTED = 108
    TRANSACTION_ABORTABLE = 120  # KIP-890: the transaction can only abort (Produce v11+)
    GROUP_ID_NOT_FOUND = 69
    FENCED_MEMBER_EPOCH = 110  # KIP-848
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    GROUP_MAX_SIZE_REACHED = 81
    INVALID_RECORD_STATE = 121  # KIP-932 share groups
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124


RETRIABLE = frozenset(
    {
        Errors.OFFSET_OUT_OF_RANGE,  # not retriable for consumers, handled by reset policy
        Errors.CORRUPT_MESSAGE,
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        Errors.LEADER_NOT_AVAILABLE,
        Errors.NOT_LEADER_OR_FOLLOWER,
        Errors.REQUEST_TIMED_OUT,
        Errors.NETWORK_EXCEPTION,
        Errors.NOT_ENOUGH_REPLICAS,
        Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        Errors.KAFKA_STORAGE_ERROR,
        Errors.FENCED_LEADER_EPOCH,
        Errors.UNKNOWN_LEADER_EPOCH,
        Errors.OFFSET_NOT_AVAILABLE,
        Errors.NOT_CONTROLLER,
        Errors.COORDINATOR_LOAD_IN_PROGRESS,
        Errors.COORDINATOR_NOT_AVAILABLE,
        Errors.NOT_COORDINATOR,
        Errors.CONCURRENT_TRANSACTIONS,
        Errors.UNSTABLE_OFFSET_COMMIT,
    }
) - {Errors.OFFSET_OUT_OF_RANGE}

# A produce that failed with one of these may nevertheless have been appended: the
# outcome is unknown to the client (Jepsen's :info).
MAYBE_APPENDED = frozenset(
    {
        Errors.REQUEST_TIMED_OUT,
        Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        Errors.NETWORK_EXCEPTION,
        Errors.UNKNOWN_SERVER_ERROR,
    }
)

# With acks=all a produce is parked after its append until the HW passes it; a leader that
# loses leadership meanwhile answers NOT_LEADER_OR_FOLLOWER (as Kafka's DelayedProduce
# does), so for acks=all that error, too, leaves the outcome unknown.
MAYBE_APPENDED_ACKS_ALL = MAYBE_APPENDED | {Errors.NOT_LEADER_OR_FOLLOWER}


@mypyc_attr(native_class=False)  # an exception that subclasses a built-in one stays a Python class when compiled
class UnexpectedInput(AssertionError):
    """A node was given a message or a timer it has no handler for: a bug in whoever sent or
    set it, raised at once (as h11 does for an event its state machine does not expect)
    rather than dropped."""
