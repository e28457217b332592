"""One partition replica on one broker: leader and follower replication rules.

Rules (docs/explanation/protocol-notes.md section 1; each cited where it is applied)
---------------------------------------------------------------------
1. A follower finds where its log diverges from the leader's before appending: every fetch
   carries its last fetched epoch, the leader answers a mismatch with a diverging epoch,
   and the follower truncates there (KIP-101, KIP-279, KIP-595 fetch validation).
2. The leader fences requests from another leader epoch (KIP-320).
3. The leader advances the high watermark only from follower positions reported in its
   current epoch and validated against its log; HW = min LEO over the maximal ISR (the
   committed ISR plus a pending change).
4. ISR shrink is proposed for followers not caught up for ``replica_lag_time_max_ms``;
   expansion only for a follower caught up to the HW and to the start of the leader's
   epoch, with the broker epoch of the fetch that showed it (KIP-966).

This module owns state and decisions; :mod:`reference.leader` and :mod:`reference.follower`
own messages and timers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from reference.bugs import Bug
from reference.log import UNDEFINED_EPOCH, UNDEFINED_OFFSET, PartitionLog
from reference.marks import mark
from reference.messages import PartitionState, TopicPartition


class Role(Enum):
    NONE = "none"  # not (yet) told this broker's role by the controller
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass(slots=True)
class FollowerPosition:
    """The leader's view of one follower (Kafka's Replica state)."""

    log_end_offset: int = -1  # -1: unknown in this leader epoch
    broker_epoch: int = -1
    last_caught_up_ms: int = 0
    last_fetch_leader_leo: int = -1
    last_fetch_ms: int = 0


@dataclass(slots=True)
class Partition:
    tp: TopicPartition
    log: PartitionLog
    broker_id: int
    bugs: frozenset[str] = frozenset()
    role: Role = Role.NONE
    is_leader: bool = False  # role is Role.LEADER (kept with it: read on every step)
    leader: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: frozenset[int] = frozenset()
    pending_isr: frozenset[int] | None = None  # an AlterPartition in flight
    # the members of that AlterPartition with the broker epochs it named (Kafka's
    # sentLeaderAndIsr): a retry asks for exactly this, never for newer epochs
    pending_members: tuple[tuple[int, int], ...] = ()
    followers: dict[int, FollowerPosition] = field(default_factory=dict)
    # KIP-966: the HW advances only while the ISR has at least this many members, so that a
    # replica that left a short ISR (an eligible leader replica) has everything committed
    min_insync_replicas: int = 1

    # ------------------------------------------------------------ roles

    def apply_state(self, state: PartitionState, now_ms: int) -> str | None:
        """Apply the controller's state; returns "leader"/"follower" on a role change."""
        if state.leader_epoch < self.leader_epoch or (
            state.leader_epoch == self.leader_epoch and state.partition_epoch <= self.partition_epoch
        ):
            return None  # stale or already applied: epochs never go backwards
        self.log.changes[0] += 1
        new_epoch = state.leader_epoch > self.leader_epoch or self.role is Role.NONE
        self.replicas = state.replicas
        self.isr = frozenset(state.isr)
        self.partition_epoch = state.partition_epoch
        # the controller's newer state settles a pending ISR change either way: applied, it is
        # in this state; refused or overtaken, it is not (and may be proposed again)
        self.pending_isr = None
        if not new_epoch:
            return None
        self.leader = state.leader
        self.leader_epoch = state.leader_epoch
        if state.leader == self.broker_id:
            self.role = Role.LEADER
            self.is_leader = True
            self.pending_isr = None
            self.log.assign_epoch(self.leader_epoch, self.log.log_end_offset)
            # Rule 3: positions from an older epoch say nothing about the follower's log.
            self.followers = {
                r: FollowerPosition(last_caught_up_ms=now_ms)
                for r in self.replicas
                if r != self.broker_id
            }
            return "leader"
        self.role = Role.FOLLOWER
        self.is_leader = False
        self.followers = {}
        if self.log.log_end_offset > self.log.high_watermark:
            mark("become-follower-with-uncommitted-tail")
        if Bug.TRUNCATE_TO_HIGH_WATERMARK in self.bugs:
            self.log.truncate_to(self.log.high_watermark)  # the pre-KIP-101 rule
        return "follower"

    @property
    def effective_min_isr(self) -> int:
        """min.insync.replicas as Kafka applies it since 3.7 (KAFKA-15583): never more than the
        replication factor, so a topic that asks for more than it has replicas stays writable."""
        return min(self.min_insync_replicas, len(self.replicas)) if self.replicas else self.min_insync_replicas

    def maximal_isr(self) -> frozenset[int]:
        return self.isr | self.pending_isr if self.pending_isr is not None else self.isr

    # ------------------------------------------------------------ leader side

    def check_epoch(self, current_leader_epoch: int) -> str | None:
        """KIP-320 fencing of a request's leader epoch: an error name or None."""
        if current_leader_epoch < 0:
            return None
        if current_leader_epoch < self.leader_epoch:
            mark("request-fenced-leader-epoch")
            return "FENCED_LEADER_EPOCH"
        if current_leader_epoch > self.leader_epoch:
            mark("request-unknown-leader-epoch")
            return "UNKNOWN_LEADER_EPOCH"
        return None

    def matches_latest_epoch(self, fetch_offset: int, last_fetched_epoch: int) -> bool:
        """The common case of rule 1, decided at once: the follower's last epoch is the
        leader's latest and its log ends within the leader's (:meth:`divergence` is None)."""
        epochs = self.log.epochs
        return (bool(epochs) and epochs[-1][0] == last_fetched_epoch
                and fetch_offset <= self.log.log_end_offset)

    def divergence(self, fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
        """Rule 1: where the follower must truncate to, or None when its log matches."""
        if last_fetched_epoch < 0:
            return None
        epoch, end = self.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch == UNDEFINED_EPOCH:
            # the leader has no epoch at or below the follower's: it diverges where the
            # leader's first epoch begins
            first = self.log.epochs[0][1] if self.log.epochs else self.log.log_start_offset
            mark("fetch-diverging-before-first-epoch")
            return UNDEFINED_EPOCH, first
        if epoch != last_fetched_epoch and Bug.EPOCH_LOOKUP_FALLS_BACK_TO_HW in self.bugs:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET  # before KIP-279: "no such epoch here"
        if epoch != last_fetched_epoch or end < fetch_offset:
            mark("fetch-diverging-epoch")
            return epoch, end
        return None

    def update_follower(self, replica_id: int, broker_epoch: int, fetch_offset: int,
                        now_ms: int) -> None:
        """Record a validated follower fetch position (Kafka's updateFollowerFetchState)."""
        f = self.followers.get(replica_id)
        if f is None:
            if replica_id not in self.replicas:
                return
            f = self.followers[replica_id] = FollowerPosition(last_caught_up_ms=now_ms)
        leader_leo = self.log.log_end_offset
        if fetch_offset >= leader_leo:
            f.last_caught_up_ms = now_ms
        elif fetch_offset >= f.last_fetch_leader_leo >= 0:
            f.last_caught_up_ms = max(f.last_caught_up_ms, f.last_fetch_ms)
        f.log_end_offset = fetch_offset
        f.broker_epoch = broker_epoch
        f.last_fetch_leader_leo = leader_leo
        f.last_fetch_ms = now_ms

    def maybe_advance_high_watermark(self) -> bool:
        """Rule 3: HW = min LEO over the maximal ISR; never decreases on the leader; and
        (KIP-966) stays put while the ISR is shorter than min.insync.replicas."""
        if len(self.isr) < self.effective_min_isr:
            mark("hw-held-below-min-isr")
            return False
        new_hw = self.log.log_end_offset
        if new_hw <= self.log.high_watermark:
            return False  # no follower can take it higher than the leader's own log end
        for r in self.maximal_isr():
            if r == self.broker_id:
                continue
            f = self.followers.get(r)
            leo = f.log_end_offset if f is not None else -1
            if leo < new_hw:
                new_hw = leo
        if new_hw > self.log.high_watermark:
            return self.log.update_high_watermark(new_hw)
        return False

    def last_stable_offset(self) -> int:
        """Rule 6 for read_committed: the HW, or the first offset of the earliest
        transaction still open (or whose marker is not yet committed), whichever is lower."""
        hw = self.log.high_watermark
        first = self.log.producer_state.first_unstable_offset(hw)
        if first is None or first >= hw:
            return hw
        if Bug.LSO_OFF_BY_ONE in self.bugs:
            return first + 1  # the bug: one past the first open transaction's first record
        return first

    def hw_reached_epoch_start(self) -> bool:
        start = self.log.epoch_start_offset(self.leader_epoch)
        return start is not None and self.log.high_watermark >= start

    def isr_to_shrink(self, now_ms: int, lag_max_ms: int) -> frozenset[int] | None:
        """Rule 4: the ISR without followers that lag too long (None: nothing to do). A
        follower is caught up when its log ends where the leader's does, or it was so within
        ``lag_max_ms`` (Kafka's Replica.isCaughtUp): a follower of an idle partition stays."""
        if self.pending_isr is not None:
            return None
        leader_leo = self.log.log_end_offset
        out = set()
        for r in self.isr:
            f = self.followers.get(r, FollowerPosition())
            if r != self.broker_id and f.log_end_offset != leader_leo and now_ms - f.last_caught_up_ms > lag_max_ms:
                out.add(r)
        if not out:
            return None
        return self.isr - out

    def isr_to_expand(self, replica_id: int) -> frozenset[int] | None:
        """Rule 4: the ISR with this follower added, when it may join."""
        if self.pending_isr is not None or replica_id in self.isr:
            return None
        f = self.followers.get(replica_id)
        if f is None or f.log_end_offset < 0:
            return None
        start = self.log.epoch_start_offset(self.leader_epoch)
        if start is None:
            return None
        # Kafka's isFollowerInSync: caught up to the HW and to the start of this epoch (the HW
        # itself may not reach the epoch start before the ISR is large enough, KIP-966)
        if f.log_end_offset >= self.log.high_watermark and f.log_end_offset >= start:
            return self.isr | {replica_id}
        return None

    # ------------------------------------------------------------ follower side

    def truncate_on_divergence(self, epoch: int, end_offset: int) -> int:
        """Rule 1 (KIP-279): truncate to where our log and the leader's agree."""
        if end_offset == UNDEFINED_OFFSET and Bug.EPOCH_LOOKUP_FALLS_BACK_TO_HW in self.bugs:
            target = min(self.log.high_watermark, self.log.log_end_offset)  # the pre-KIP-279 fallback
        elif epoch == UNDEFINED_EPOCH:
            target = min(end_offset, self.log.log_end_offset)
        else:
            _mine, my_end = self.log.end_offset_for_epoch(epoch)
            target = min(end_offset, my_end if my_end >= 0 else self.log.log_start_offset)
        target = max(target, self.log.log_start_offset)
        mark("follower-truncate-diverging")
        if target < self.log.high_watermark:
            mark("follower-truncate-below-hw")
        return self.log.truncate_to(target)
