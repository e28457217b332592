"""A consumer group of KIP-848's protocol as its coordinator keeps it, and how a member's
assignment moves toward its target.

Theory of operation
-------------------
The coordinator computes the assignment (the server-side assignors ``uniform`` and
``range``, :func:`reference.assignors.server_assign`); members only say what they subscribe
to and what they own. Three epochs order everything:

* the **group epoch** goes up whenever what the assignment depends on changes: a member's
  subscription (a new member's too), a member removed, a subscribed topic's partitions;
* the **target assignment** is computed for a group epoch (``assignment_epoch``): each
  member's target partitions;
* each member's **member epoch** reaches the target's epoch by reconciliation
  (:func:`reconcile`, Kafka's CurrentAssignmentBuilder): first the member revokes what the
  target took from it (state ``unrevoked-partitions``: it stays at its epoch until its
  heartbeat no longer lists them), then it gets the target's partitions that no other member
  holds any more (``unreleased-partitions`` while some are still held elsewhere), at the
  target's epoch.

A partition is held by at most one member: assigned to it or pending its revocation. The
coordinator keeps, for every held partition, the epoch of the member that holds it (Kafka's
partition epochs, :meth:`ConsumerGroup.update_member`); a partition with none is free to be
given. The bug switch ``consumer-group-partition-epoch-lost`` updates that map as Kafka 3.7
did (KAFKA-16147): the assigned and pending sets one after the other, so that a partition
pending revocation that is given back to its member loses its entry and looks free.

Records (our own format, JSON): key ``{"type": "consumer-group", "group": g}``, value the
whole group (:meth:`ConsumerGroup.to_json`); a record replaces the group's state wholesale.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from reference.errors import Errors
from reference.frozen import frozen
from reference.messages import TopicPartition

STABLE = "stable"
UNREVOKED = "unrevoked-partitions"
UNRELEASED = "unreleased-partitions"

JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH = 0, -1, -2
GROUP_PROTOCOLS = ("classic", "consumer")  # a client's group.protocol

Held = tuple[tuple[TopicPartition, int], ...]  # (partition, the epoch it was assigned in), sorted


def _held(d: dict[TopicPartition, int]) -> Held:
    return tuple(sorted(d.items()))


@frozen
class ModernMember:
    member_id: str
    instance_id: str | None = None
    member_epoch: int = 0
    previous_epoch: int = -1
    state: str = STABLE
    rebalance_timeout_ms: int = -1
    subscribed: tuple[str, ...] = ()
    assignor: str | None = None
    assigned: Held = ()
    revoking: Held = ()

    def assigned_set(self) -> frozenset[TopicPartition]:
        return frozenset(tp for tp, _e in self.assigned)

    def revoking_set(self) -> frozenset[TopicPartition]:
        return frozenset(tp for tp, _e in self.revoking)

    def held(self) -> frozenset[TopicPartition]:
        return self.assigned_set() | self.revoking_set()

    def at_epoch(self, epoch: int, **changes) -> ModernMember:
        """Kafka's updateMemberEpoch: the previous epoch is the one it had."""
        return replace(self, previous_epoch=self.member_epoch, member_epoch=epoch, **changes)

    def to_json(self) -> dict:
        return {"id": self.member_id, "instance": self.instance_id, "epoch": self.member_epoch,
                "previous": self.previous_epoch, "state": self.state, "rebalance": self.rebalance_timeout_ms,
                "topics": list(self.subscribed), "assignor": self.assignor,
                "assigned": [[tp.key, e] for tp, e in self.assigned],
                "revoking": [[tp.key, e] for tp, e in self.revoking]}

    @classmethod
    def from_json(cls, d: dict) -> ModernMember:
        return cls(d["id"], d["instance"], d["epoch"], d["previous"], d["state"], d["rebalance"],
                   tuple(d["topics"]), d["assignor"],
                   tuple((TopicPartition.parse(k), e) for k, e in d["assigned"]),
                   tuple((TopicPartition.parse(k), e) for k, e in d["revoking"]))


@dataclass(slots=True)
class ConsumerGroup:
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ModernMember] = field(default_factory=dict)
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    partition_counts: dict[str, int] = field(default_factory=dict)  # of the subscribed topics, last seen
    owners: dict[TopicPartition, int] = field(default_factory=dict)  # partition -> its holder's epoch
    epoch_bug: bool = False  # the bug switch consumer-group-partition-epoch-lost

    def copy(self) -> ConsumerGroup:
        return ConsumerGroup(self.group_epoch, self.assignment_epoch, dict(self.members), dict(self.target),
                             dict(self.static), dict(self.partition_counts), dict(self.owners), self.epoch_bug)

    def state(self) -> str:
        """Kafka's ConsumerGroup state as ConsumerGroupDescribe names it."""
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(m.state != STABLE or m.member_epoch != self.assignment_epoch for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}

    # ------------------------------------------------------------ membership

    def update_member(self, new: ModernMember) -> None:
        """Put ``new`` in its member's place, keeping the partition epochs: every entry of the
        member as it was removed first, then the new one's added (KAFKA-16147's fix)."""
        old = self.members.get(new.member_id)
        self.members[new.member_id] = new
        if new.instance_id is not None:
            self.static[new.instance_id] = new.member_id
        if old is None:
            self._add_epochs(new.held(), new.member_epoch)
        elif self.epoch_bug:
            # Kafka 3.7: each set on its own, the removal unconditional: a partition moving from
            # pending revocation back to assigned is added, then removed as "the old pending"
            if old.assigned_set() != new.assigned_set():
                self._drop_epochs(old.assigned_set(), None)
                self._add_epochs(new.assigned_set(), new.member_epoch)
            if old.revoking_set() != new.revoking_set():
                self._drop_epochs(old.revoking_set(), None)
                self._add_epochs(new.revoking_set(), new.member_epoch)
        else:
            self._drop_epochs(old.held(), old.member_epoch)
            self._add_epochs(new.held(), new.member_epoch)

    def replace_member(self, old_id: str, new: ModernMember) -> None:
        """A static member's new incarnation in its old one's place: its partitions and
        target, under the new member id."""
        old = self.members.pop(old_id)
        self._drop_epochs(old.held(), None if self.epoch_bug else old.member_epoch)
        if old_id in self.target:
            self.target[new.member_id] = self.target.pop(old_id)
        self.update_member(new)

    def remove_member(self, member_id: str) -> ModernMember | None:
        """The member fenced or gone: its partitions are free, the group epoch goes up."""
        old = self.members.pop(member_id, None)
        if old is None:
            return None
        self.target.pop(member_id, None)
        if old.instance_id is not None and self.static.get(old.instance_id) == member_id:
            del self.static[old.instance_id]
        self._drop_epochs(old.held(), None if self.epoch_bug else old.member_epoch)
        self.group_epoch += 1
        if not self.members:
            self.assignment_epoch = self.group_epoch
        return old

    def _drop_epochs(self, tps, epoch: int | None) -> None:
        for tp in tps:
            if epoch is None or self.owners.get(tp) == epoch:
                self.owners.pop(tp, None)

    def _add_epochs(self, tps, epoch: int) -> None:
        for tp in tps:
            self.owners[tp] = epoch

    def owner_epoch(self, tp: TopicPartition) -> int:
        return self.owners.get(tp, -1)

    def rebuild_owners(self) -> None:
        """The partition epochs from the members (on loading the group)."""
        self.owners = {}
        for m in self.members.values():
            self._add_epochs(m.held(), m.member_epoch)

    def double_held(self) -> dict[TopicPartition, list[str]]:
        """Partitions held by more than one member (the invariant KAFKA-16147 broke)."""
        by: dict[TopicPartition, list[str]] = {}
        for m in self.members.values():
            for tp in m.held():
                by.setdefault(tp, []).append(m.member_id)
        return {tp: ms for tp, ms in by.items() if len(ms) > 1}

    # ------------------------------------------------------------ records

    def to_json(self) -> dict:
        return {"group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
                "members": [m.to_json() for m in self.members.values()],
                "target": {mid: sorted(tp.key for tp in tps) for mid, tps in sorted(self.target.items())},
                "partition_counts": dict(sorted(self.partition_counts.items()))}

    @classmethod
    def from_json(cls, d: dict, epoch_bug: bool = False) -> ConsumerGroup:
        g = cls(d["group_epoch"], d["assignment_epoch"], epoch_bug=epoch_bug)
        for raw in d["members"]:
            m = ModernMember.from_json(raw)
            g.members[m.member_id] = m
            if m.instance_id is not None:
                g.static[m.instance_id] = m.member_id
        g.target = {mid: frozenset(TopicPartition.parse(k) for k in keys) for mid, keys in d["target"].items()}
        g.partition_counts = dict(d["partition_counts"])
        g.rebuild_owners()
        return g


def record_key(group: str) -> bytes:
    return json.dumps({"type": "consumer-group", "group": group}, sort_keys=True).encode()


# ---------------------------------------------------------------- reconciliation


def reconcile(m: ModernMember, target_epoch: int, target: frozenset[TopicPartition],
              owned: frozenset[TopicPartition] | None, subscription_changed: bool,
              owner_epoch: Callable[[TopicPartition], int]) -> ModernMember:
    """The member one step nearer its target (Kafka's CurrentAssignmentBuilder.build).
    ``owned``: what its heartbeat said it owns (None: it did not say; counted as still
    owning what it must revoke); ``owner_epoch``: the epoch of a partition's holder, -1 if free."""
    if m.state == STABLE:
        if m.member_epoch != target_epoch:
            return _next(m, m.member_epoch, target_epoch, target, owned, owner_epoch)
        return _unsubscribed(m, owned) if subscription_changed else m
    if m.state == UNREVOKED:
        if _owns_any(owned, m.revoking_set()):
            return _unsubscribed(m, owned) if subscription_changed else m
        return _next(m, m.member_epoch, target_epoch, target, owned, owner_epoch)
    return _next(m, m.member_epoch, target_epoch, target, owned, owner_epoch)  # unreleased partitions


def _owns_any(owned: frozenset[TopicPartition] | None, tps: frozenset[TopicPartition]) -> bool:
    return owned is None or bool(owned & tps)


def _next(m: ModernMember, epoch: int, target_epoch: int, target: frozenset[TopicPartition],
          owned: frozenset[TopicPartition] | None, owner_epoch: Callable[[TopicPartition], int]) -> ModernMember:
    """Kafka's computeNextAssignment: revoke first; then take what is free."""
    wanted = {tp for tp in target if tp.topic in m.subscribed}
    had = dict(m.assigned)
    keep = {tp: e for tp, e in had.items() if tp in wanted}
    revoke = {tp: e for tp, e in had.items() if tp not in wanted}
    revoking = m.revoking_set()
    # a partition this member itself is still revoking is not someone else's (KAFKA-19449)
    unreleased = {tp for tp in wanted - keep.keys() if owner_epoch(tp) != -1 and tp not in revoking}
    add = wanted - keep.keys() - unreleased
    if revoke and _owns_any(owned, frozenset(revoke)):
        return m.at_epoch(epoch, state=UNREVOKED, assigned=_held(keep), revoking=_held(revoke))
    keep.update(dict.fromkeys(add, target_epoch))
    return m.at_epoch(target_epoch, state=UNRELEASED if unreleased else STABLE, assigned=_held(keep),
                      revoking=())


def _unsubscribed(m: ModernMember, owned: frozenset[TopicPartition] | None) -> ModernMember:
    """After a subscription change: what the member no longer subscribes to is revoked."""
    gone = {tp: e for tp, e in m.assigned if tp.topic not in m.subscribed}
    if not gone:
        return m
    keep = {tp: e for tp, e in m.assigned if tp not in gone}
    if _owns_any(owned, frozenset(gone)):
        return m.at_epoch(m.member_epoch, state=UNREVOKED, assigned=_held(keep),
                          revoking=_held(dict(m.revoking) | gone))
    return m.at_epoch(m.member_epoch, assigned=_held(keep))


def check_epoch(m: ModernMember, epoch: int, owned: frozenset[TopicPartition] | None,
                rejoin_refused: bool = False) -> Errors:
    """Whether a heartbeat's member epoch is acceptable (Kafka's
    throwIfConsumerGroupMemberEpochIsInvalid): 0 is a rejoin, always welcome (KAFKA-19233's fix;
    ``rejoin_refused``, the bug switch consumer-group-rejoin-fenced, takes it back); a newer
    epoch than the member's is fenced; an older one only if it is the previous epoch and the
    member owns nothing beyond its assignment (the answer that bumped it was lost)."""
    if epoch == JOIN_EPOCH and not rejoin_refused:
        return Errors.NONE
    if epoch > m.member_epoch:
        return Errors.FENCED_MEMBER_EPOCH
    if epoch < m.member_epoch and not (epoch == m.previous_epoch and owned is not None
                                       and owned <= m.assigned_set()):
        return Errors.FENCED_MEMBER_EPOCH
    return Errors.NONE


def check_commit_epoch(m: ModernMember, epoch: int, partitions) -> Errors:
    """An offset commit's member epoch (Kafka 4.3's ConsumerGroup.validateOffsetCommit,
    KIP-1251): the member's epoch commits anything; an older one only partitions the member
    has held since that epoch or before; a newer one never."""
    if epoch == m.member_epoch:
        return Errors.NONE
    if epoch > m.member_epoch:
        return Errors.STALE_MEMBER_EPOCH
    since = dict(m.assigned) | dict(m.revoking)
    if any(tp not in since or epoch < since[tp] for tp in partitions):
        return Errors.STALE_MEMBER_EPOCH
    return Errors.NONE
