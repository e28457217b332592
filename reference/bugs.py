"""Bug switches: named re-creations of real Kafka bugs. All are off by default.

They exist to prove that the harness finds what it claims to find. Each name is accepted by
``kafkacheck run --bug NAME``; docs/reference/bug-switches.md names a seed that shows each one. The engine tests
a switch as ``Bug.ACK_BEFORE_ISR in self.bugs``: a misspelt name is an AttributeError, never
a switch that silently stays off. A :class:`Bug` is a ``str`` (its name), so the sets of
switches travel through JSON and the command line as plain names.
"""

from __future__ import annotations

from enum import StrEnum


class Bug(StrEnum):
    TRUNCATE_TO_HIGH_WATERMARK = "truncate-to-high-watermark"
    EPOCH_LOOKUP_FALLS_BACK_TO_HW = "epoch-lookup-falls-back-to-hw"
    HW_WITHOUT_EPOCH_CHECK = "hw-without-epoch-check"
    UNCLEAN_ELECTION = "unclean-election"
    NO_SEQUENCE_CHECK = "no-sequence-check"
    ACK_BEFORE_ISR = "ack-before-isr"
    TXN_UNFENCED_REQUESTS = "txn-unfenced-requests"
    GROUP_GENERATION_UNFENCED = "group-generation-unfenced"
    GROUP_UNLOAD_STRANDS_JOINS = "group-unload-strands-joins"
    COMPACTION_DROPS_LATEST = "compaction-drops-latest"
    LSO_OFF_BY_ONE = "lso-off-by-one"
    TXN_MARKERS_SKIP_OFFLINE = "txn-markers-skip-offline"
    TXN_EPOCH_OVERFLOW = "txn-epoch-overflow"
    # KIP-848's consumer groups
    CONSUMER_GROUP_PARTITION_EPOCH_LOST = "consumer-group-partition-epoch-lost"
    CONSUMER_GROUP_REJOIN_FENCED = "consumer-group-rejoin-fenced"
    # KIP-932's share groups
    SHARE_ACK_BEFORE_PERSIST = "share-ack-before-persist"
    SHARE_ACK_ANY_HOLDER = "share-ack-any-holder"
    SHARE_COUNT_NOT_INCREMENTED = "share-count-not-incremented"


BUGS: dict[Bug, str] = {
    Bug.TRUNCATE_TO_HIGH_WATERMARK: (
        "pre-KIP-101 follower truncation: a follower truncates to its own high watermark "
        "when it follows a new leader or restarts, instead of asking the leader where the "
        "logs diverge (leader epochs)"
    ),
    Bug.EPOCH_LOOKUP_FALLS_BACK_TO_HW: (
        "the hole KIP-279 closed: a leader that holds no record of the epoch a follower last "
        "fetched in answers 'undefined' instead of its largest earlier epoch, and the follower "
        "falls back to truncating to its own high watermark"
    ),
    Bug.HW_WITHOUT_EPOCH_CHECK: (
        "KIP-320 rule 3 removed: the leader counts a follower's fetch position toward the "
        "high watermark without checking that the follower's log matches its own "
        "(last fetched epoch) or that the fetch is from the current leader epoch"
    ),
    Bug.UNCLEAN_ELECTION: (
        "the controller elects a live replica outside the ISR when a partition needs a "
        "leader, whether or not an ISR member is available"
    ),
    Bug.NO_SEQUENCE_CHECK: (
        "the leader appends an idempotent producer's batches without checking their "
        "sequence numbers, so a retried batch is written again"
    ),
    Bug.ACK_BEFORE_ISR: (
        "acks=all answered after the leader's own append, without waiting for the ISR "
        "(the high watermark)"
    ),
    Bug.TXN_UNFENCED_REQUESTS: (
        "KAFKA-17754: the transaction coordinator takes a request carrying the previous "
        "producer epoch for the current transaction, and partition leaders append a "
        "transaction's first records without asking the coordinator (no KIP-890 part 1 "
        "verification; a part 2 write still adds its partition), so a delayed EndTxn or "
        "produce from an earlier transaction lands in a later one"
    ),
    Bug.GROUP_GENERATION_UNFENCED: (
        "the group coordinator answers heartbeats and offset commits without checking the "
        "member id and generation, so a member that missed a rebalance never learns of it: it "
        "keeps consuming and committing partitions the group gave to another member (a "
        "consumer group of KIP-848: its offset commits, whatever their member and epoch)"
    ),
    Bug.GROUP_UNLOAD_STRANDS_JOINS: (
        "the gap KAFKA-16148 closed: a group coordinator that unloads a group (its "
        "__consumer_offsets partition moved to another broker, or loaded again in a new leader "
        "epoch) drops the JoinGroup and SyncGroup requests waiting for the rebalance without "
        "answering them (Kafka answers NOT_COORDINATOR), so their members wait for the answer "
        "until their join times out (kafka-python and Java: max.poll.interval.ms + 5 s) and "
        "own nothing meanwhile"
    ),
    Bug.COMPACTION_DROPS_LATEST: (
        "the cleaner's offset map misses the newest batch of the range it cleans, so a key "
        "whose newest record sits there loses that record and keeps an older value"
    ),
    Bug.LSO_OFF_BY_ONE: (
        "the last stable offset is one past the first offset of the earliest open "
        "transaction, so read_committed consumers see its first record before the commit"
    ),
    Bug.TXN_EPOCH_OVERFLOW: (
        "transaction version 2 without KIP-890's producer-id rotation (the shape of KAFKA-18660, fixed "
        "before 4.0, and KAFKA-20090, Kafka 4.0 to 4.2, where a timed-out transaction's abort did not "
        "rotate): the epoch an end bumps goes past 32767 and wraps (a Java short) where Kafka gives the "
        "producer a new producer id at epoch 0; the markers carry an epoch older than the "
        "transaction's, the partitions refuse them, and the transaction completes with its records open"
    ),
    Bug.TXN_MARKERS_SKIP_OFFLINE: (
        "KAFKA-20734 (Kafka 4.3.0 and later): the transaction coordinator's marker sender takes "
        "a partition that exists but has no leader (every replica down) for a deleted one: it "
        "drops the partition from the transaction, never writes its marker and completes the "
        "transaction, so the records there stay open (the last stable offset stuck below the "
        "high watermark) until the producer's next marker ends them with that marker's outcome"
    ),
    Bug.CONSUMER_GROUP_PARTITION_EPOCH_LOST: (
        "KAFKA-16147 (Kafka 3.7): a consumer group's coordinator updates its partition epochs "
        "(which member holds each partition) for a member's assigned and pending-revocation "
        "partitions one after the other, so a partition pending revocation that the target gives "
        "back to its member loses its entry, looks free, and goes to a second member while the "
        "first still holds it"
    ),
    Bug.CONSUMER_GROUP_REJOIN_FENCED: (
        "KAFKA-19233 (fixed in Kafka 4.2.0): a consumer-group member that was fenced and rejoins "
        "with member epoch 0 and its member id is refused FENCED_MEMBER_EPOCH while the "
        "coordinator still has it at a newer epoch, until its session runs out"
    ),
    Bug.SHARE_ACK_BEFORE_PERSIST: (
        "a share-partition's leader applies and answers an acknowledgement at once and writes "
        "the state to the share coordinator later (with its next lock-expiry write), so a leader "
        "that fails over in between leaves a new leader that never heard of it: accepted records "
        "are delivered again, and locks it released are forgotten"
    ),
    Bug.SHARE_ACK_ANY_HOLDER: (
        "a share-partition's leader applies an acknowledgement to records another member holds "
        "(the holder check skipped): a consumer whose lock expired accepts or releases the record "
        "its new holder is processing"
    ),
    Bug.SHARE_COUNT_NOT_INCREMENTED: (
        "a share-partition's leader does not count a delivery when it acquires a record again "
        "after its lock expired or it was released, so a record that keeps failing is delivered "
        "more often than the delivery count limit and never archived"
    ),
}


def parse_bugs(names: list[str] | tuple[str, ...]) -> frozenset[Bug]:
    """Validate bug names; raise ValueError naming the unknown one and the known ones."""
    for name in names:
        if name not in BUGS:
            raise ValueError(f"unknown bug switch {name!r}; known: {', '.join(sorted(BUGS))}")
    return frozenset(Bug(name) for name in names)
