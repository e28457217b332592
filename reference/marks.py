"""Coverage marks: a named count each time a rare branch of the engine runs.

As TigerBeetle's ``marks``: the engine calls ``mark("name")`` where something rare and
interesting happens (a follower truncating below its high watermark, a fenced epoch, an ISR
shrinking below min.insync.replicas, a coordinator loading an unfinished transaction, the
cleaner removing a tombstone, ...). A hunt reads the counts after each run: which marks its
runs reached, how often, and which they never reached; the swarm steers toward the rarely
reached ones. Marks never change what the engine does: they only count.

The counts live in this module (one simulated run at a time per process); ``reset()``
before a run, ``counts()`` after it. Every name must be in :data:`MARKS` (a test checks
that the catalogue and the calls in the engine agree).
"""

from __future__ import annotations

from collections import Counter

MARKS: dict[str, str] = {
    # replication: leaders
    "request-fenced-leader-epoch": "a fetch or request carried an older leader epoch (KIP-320)",
    "request-unknown-leader-epoch": "a fetch or request carried a newer leader epoch than the leader knows",
    "fetch-diverging-epoch": "a follower's last fetched epoch ends earlier on the leader: told to truncate",
    "fetch-diverging-before-first-epoch": "the leader holds no epoch at or below the follower's",
    "fetch-out-of-range": "a fetch offset past the leader's log end or before its start",
    "hw-held-below-min-isr": "the leader did not advance its high watermark: ISR below min.insync.replicas",
    "isr-shrink": "a leader proposed removing lagging followers from the ISR",
    "isr-shrink-below-min-isr": "a leader proposed an ISR smaller than min.insync.replicas",
    "isr-expand": "a leader proposed adding a caught-up follower to the ISR",
    # replication: followers
    "follower-truncate-below-hw": "a follower truncated below its own high watermark",
    "follower-truncate-diverging": "a follower truncated after a diverging-epoch answer",
    "follower-truncate-out-of-range": "a follower truncated to the leader's log end (out of range)",
    "follower-reset-to-log-start": "a follower's log lay before the leader's start: emptied",
    "become-follower-with-uncommitted-tail": "a replica became follower holding records above its HW",
    "follower-stale-fetch-response": "a fetch answer for an older leader epoch or log end: ignored",
    # produce
    "produce-not-enough-replicas": "a produce refused: ISR below min.insync.replicas",
    "produce-not-enough-replicas-after-append": "acks=all answered NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    "produce-timed-out-in-purgatory": "an acks=all produce expired before the high watermark reached it",
    "produce-storage-error": "an append failed on the disk (full or failing)",
    "produce-duplicate-sequence": "a retried idempotent batch answered with its original offsets",
    "produce-sequence-refused": "an idempotent batch refused (out of order, fenced or unknown producer)",
    "produce-txn-raced-marker": "a verified transactional append found its transaction ended by a marker",
    # controller
    "controller-broker-fenced": "the controller fenced a broker whose session expired",
    "controller-elect-from-elr": "a leader elected from the eligible leader replicas (KIP-966)",
    "controller-elect-from-elr-after-unclean": "a leader elected from the eligible leader replicas as the "
                                               "last leader came back from an unclean shutdown (KIP-966)",
    "controller-last-isr-member-unclean": "a partition's last ISR member came back from an unclean "
                                          "shutdown (KIP-966: it leaves the ISR, eligible no more)",
    "controller-unclean-election": "a leader elected from outside the ISR (unclean election enabled)",
    "controller-partition-offline": "a partition left without a leader: no eligible live replica",
    "controller-alter-partition-refused": "an ISR change refused (stale epochs or ineligible replica)",
    "controller-admin-election": "an administrative leader election",
    # storage and recovery
    "disk-lost-unflushed": "a crash lost writes that were not flushed",
    "disk-torn-or-corrupt": "a crash left a torn or corrupt tail on disk",
    "log-recovery-truncated": "log recovery after a crash cut an invalid tail",
    # transactions
    "txn-coordinator-loaded-unfinished": "a transaction coordinator loaded an unfinished transaction",
    "txn-coordinator-resumed-markers": "a new transaction coordinator resumed writing markers",
    "txn-producer-fenced": "a transactional request with an old producer epoch was fenced",
    "txn-concurrent-transactions": "a transactional request arrived while the last transaction was ending",
    "txn-empty-abort": "an abort at transaction version 2 with no transaction open: an empty one ended, the epoch bumped",
    "txn-producer-id-rotated": "an end at transaction version 2 at the last epoch (32766): the producer moved "
                               "to a new producer id at epoch 0",
    "txn-timed-out": "the coordinator aborted a transaction that outlived its timeout",
    "txn-marker-retried": "writing a transaction marker failed and is retried",
    "txn-marker-to-moved-leader": "marker requests resent after a partition's leader changed",
    "txn-marker-awaits-leader": "markers held for a partition without a leader until it has one",
    # groups
    "group-coordinator-loaded": "a group coordinator loaded its groups from the offsets topic",
    "group-member-expired": "a group member removed after its session timeout",
    "group-illegal-generation": "a request from an older generation was refused",
    "group-unknown-member": "a request from a member the group does not know was refused",
    "group-rebalance-in-progress": "a heartbeat or commit told that a rebalance is under way",
    "group-static-member-replaced": "a static member's instance id taken over by a new member id",
    "group-unloaded-with-waiters": "a group coordinator unloaded a group while joins or syncs waited for its rebalance",
    # consumer groups (KIP-848)
    "cgroup-target-assignment": "a consumer group's coordinator computed a new target assignment",
    "cgroup-fenced-member-epoch": "a consumer-group heartbeat refused: FENCED_MEMBER_EPOCH",
    "cgroup-unknown-member-id": "a consumer-group heartbeat from a member the group does not have",
    "cgroup-unreleased-instance-id": "a static member joined while its previous incarnation was still in the group",
    "cgroup-fenced-instance-id": "a heartbeat from a static member's older incarnation",
    "cgroup-member-expired": "a consumer-group member removed: its session ran out",
    "cgroup-member-revoke-timeout": "a consumer-group member removed: it did not revoke within its rebalance timeout",
    "cgroup-commit-unknown-member": "an offset commit to a consumer group from a member it does not have",
    "cgroup-commit-stale-epoch": "an offset commit to a consumer group refused: STALE_MEMBER_EPOCH",
    # compaction
    "cleaner-removed-records": "the cleaner removed superseded records",
    "cleaner-removed-tombstone": "the cleaner removed a tombstone past delete.retention.ms",
    "cleaner-removed-aborted": "the cleaner removed the records of an aborted transaction",
    # share groups (KIP-932)
    "share-group-target-assignment": "a share group's coordinator computed a new target assignment",
    "share-group-invalid-request": "a share-group heartbeat refused before any state was read: INVALID_REQUEST",
    "share-group-fenced-member-epoch": "a share-group heartbeat refused: FENCED_MEMBER_EPOCH",
    "share-group-unknown-member-id": "a share-group heartbeat from a member the group does not have",
    "share-group-id-not-found": "a share-group heartbeat to no share group, or to a classic or consumer group",
    "share-group-max-size-reached": "a new member refused: the share group is at group.share.max.size",
    "share-group-member-expired": "a share-group member removed: its session ran out",
    "share-group-mixed-protocol-refused": "a JoinGroup or ConsumerGroupHeartbeat to a share group with members",
    "share-session-not-found": "a ShareFetch or ShareAcknowledge for a share session the leader does not have",
    "share-session-epoch-invalid": "a ShareFetch or ShareAcknowledge with another epoch than its session's",
    "share-records-acquired": "a share-partition's leader acquired records for a consumer",
    "share-partition-loaded": "a leader loaded a share-partition's state from the share coordinator",
    "share-partition-load-failed": "a share-partition's persisted state could not be loaded",
    "share-ack-invalid-record-state": "an acknowledgement refused: INVALID_RECORD_STATE (not acquired, or another's)",
    "share-lock-released": "acquisition locks ended without an acknowledgement (expired, or the session closed)",
    "share-state-fenced-leader": "the share coordinator refused a read or write from an older leader epoch",
    "share-coordinator-loaded": "a share coordinator loaded a __share_group_state partition",
}

_counts: Counter[str] = Counter()


def mark(name: str) -> None:
    """Count one run of the rare branch ``name``."""
    _counts[name] += 1


def reset() -> None:
    _counts.clear()


def counts() -> dict[str, int]:
    """The marks reached since the last reset, by name (in catalogue order)."""
    return {name: _counts[name] for name in MARKS if _counts[name]}
