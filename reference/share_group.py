"""A share group of KIP-932 as its coordinator keeps it, and Kafka's ``simple`` share assignor.

Theory of operation
-------------------
A share group is a KIP-848 group without revocation. The coordinator computes the target
assignment (:func:`simple_assign`); members only say what they subscribe to. Two epochs
order everything:

* the **group epoch** goes up whenever what the assignment depends on changes: a member's
  subscription (a new member's too), a member removed, a subscribed topic's partitions;
* the **target assignment** is computed for a group epoch (``assignment_epoch``).

A member reaches the target in one step (:func:`reconcile`, Kafka's
ShareGroupAssignmentBuilder): its epoch jumps to the target's and its partitions are the
target's, less the topics it no longer subscribes to. Nothing waits for a previous owner:
the records of a share-partition are handed out one by one under locks by the partition's
leader, so a partition may have several members at once, and one that moves takes nothing
with it.

The ``simple`` assignor spreads the partitions of the subscribed topics over the members
subscribed to them. With M members and P partitions of a topic each partition is wanted by
``ceil(M / P)`` of them: one owner each while M <= P, shared as soon as M > P. Member counts
come first (they differ by at most one when everyone subscribes to the same topics), then
stickiness: what the previous target gave a member stays its own unless balance needs it
elsewhere. Everything is iterated in sorted order: the same inputs give the same target.

Records (our own format, JSON): key ``{"type": "share-group", "group": g}``, value the whole
group (:meth:`ShareGroup.to_json`); a record replaces the group's state wholesale.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from reference.errors import Errors
from reference.frozen import frozen
from reference.messages import TopicPartition

JOIN_EPOCH, LEAVE_EPOCH = 0, -1
RECORD_TYPE = "share-group"


@frozen
class ShareMember:
    member_id: str
    member_epoch: int = 0
    previous_epoch: int = -1
    subscribed: tuple[str, ...] = ()  # sorted
    assigned: tuple[TopicPartition, ...] = ()  # sorted

    def assigned_set(self) -> frozenset[TopicPartition]:
        return frozenset(self.assigned)

    def to_json(self) -> dict:
        return {"id": self.member_id, "epoch": self.member_epoch, "previous": self.previous_epoch,
                "topics": list(self.subscribed), "assigned": [tp.key for tp in self.assigned]}

    @classmethod
    def from_json(cls, d: dict) -> ShareMember:
        return cls(d["id"], d["epoch"], d["previous"], tuple(d["topics"]),
                   tuple(TopicPartition.parse(k) for k in d["assigned"]))


@dataclass(slots=True)
class ShareGroup:
    group_epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    partition_counts: dict[str, int] = field(default_factory=dict)  # of the subscribed topics, last seen

    def copy(self) -> ShareGroup:
        return ShareGroup(self.group_epoch, self.assignment_epoch, dict(self.members), dict(self.target),
                          dict(self.partition_counts))

    def state(self) -> str:
        """Kafka's ShareGroupState as ShareGroupDescribe names it (never reconciling)."""
        return "Stable" if self.members else "Empty"

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed}

    def remove_member(self, member_id: str) -> ShareMember | None:
        """The member left or fenced: the group epoch goes up (and the target's with it when
        nobody is left)."""
        old = self.members.pop(member_id, None)
        if old is None:
            return None
        self.target.pop(member_id, None)
        topics = self.subscribed_topics()
        self.partition_counts = {t: n for t, n in self.partition_counts.items() if t in topics}
        self.group_epoch += 1
        if not self.members:
            self.assignment_epoch = self.group_epoch
        return old

    def assign(self) -> None:
        """A new target assignment for the group epoch."""
        self.target = simple_assign({mid: m.subscribed for mid, m in self.members.items()}, self.partition_counts,
                                    self.target)
        self.assignment_epoch = self.group_epoch

    def to_json(self) -> dict:
        return {"group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
                "members": [m.to_json() for _mid, m in sorted(self.members.items())],
                "target": {mid: sorted(tp.key for tp in tps) for mid, tps in sorted(self.target.items())},
                "partition_counts": dict(sorted(self.partition_counts.items()))}

    @classmethod
    def from_json(cls, d: dict) -> ShareGroup:
        g = cls(d["group_epoch"], d["assignment_epoch"])
        for raw in d["members"]:
            m = ShareMember.from_json(raw)
            g.members[m.member_id] = m
        g.target = {mid: frozenset(TopicPartition.parse(k) for k in keys) for mid, keys in d["target"].items()}
        g.partition_counts = dict(d["partition_counts"])
        return g


def record_key(group: str) -> bytes:
    return json.dumps({"type": RECORD_TYPE, "group": group}, sort_keys=True).encode()


# ---------------------------------------------------------------- members


def reconcile(m: ShareMember, target_epoch: int, target: frozenset[TopicPartition],
              subscription_changed: bool) -> ShareMember:
    """The member at its target (Kafka's ShareGroupAssignmentBuilder.build): straight to the
    target's epoch, with the target's partitions of the topics it subscribes to."""
    if m.member_epoch == target_epoch and not subscription_changed:
        return m
    return replace(m, previous_epoch=m.member_epoch, member_epoch=target_epoch,
                   assigned=tuple(sorted(tp for tp in target if tp.topic in m.subscribed)))


def check_epoch(m: ShareMember, epoch: int) -> Errors:
    """Whether a heartbeat's member epoch is acceptable (Kafka's
    throwIfShareGroupMemberEpochIsInvalid): 0 (a rejoin) always; a newer epoch than the
    member's never; an older one only if it is the previous epoch (the answer that bumped it
    was lost)."""
    if epoch == JOIN_EPOCH or epoch == m.member_epoch:
        return Errors.NONE
    if epoch < m.member_epoch and epoch == m.previous_epoch:
        return Errors.NONE
    return Errors.FENCED_MEMBER_EPOCH


# ---------------------------------------------------------------- the simple assignor


def simple_assign(subscriptions: dict[str, tuple[str, ...]], partition_counts: dict[str, int],
                  previous: dict[str, frozenset[TopicPartition]]) -> dict[str, frozenset[TopicPartition]]:
    """Kafka's ``simple`` share assignor: member id -> partitions. ``previous``: the last
    target (kept where balance allows). When every member subscribes to the same topics their
    partitions are one pool; otherwise each topic is a pool of its own, for the members
    subscribed to it, and a member's share is the union of its pools' (as Kafka's homogeneous
    and heterogeneous builders)."""
    result: dict[str, set[TopicPartition]] = {m: set() for m in subscriptions}
    counts = {t: n for t, n in partition_counts.items() if n > 0}
    if len({frozenset(s) for s in subscriptions.values()}) == 1:
        pools = [(sorted(subscriptions), sorted({t for s in subscriptions.values() for t in s}))]
    else:
        pools = [(sorted(m for m, s in subscriptions.items() if t in s), [t]) for t in sorted(counts)]
    for members, topics in pools:
        tps = [TopicPartition(t, p) for t in topics for p in range(counts.get(t, 0))]
        if members and tps:
            for m, got in _assign_pool(members, tps, previous).items():
                result[m] |= got
    return {m: frozenset(tps) for m, tps in sorted(result.items())}


def _assign_pool(members: list[str], tps: list[TopicPartition], previous: dict[str, frozenset[TopicPartition]]
                 ) -> dict[str, set[TopicPartition]]:
    """One pool (every member may have every partition), in four steps: keep what the previous
    target gave; take the fullest members off over-shared partitions; fill every partition up
    to the desired sharing, ``ceil(M / P)``, giving each slot to the emptiest member; then
    move partitions from the fullest members to the emptiest until their counts differ by at
    most one. Ties go to the member id first in sorted order."""
    sharing = -(-len(members) // len(tps))
    pool = set(tps)
    held = {m: set(previous.get(m, ())) & pool for m in members}
    holders = {tp: {m for m in members if tp in held[m]} for tp in tps}
    for tp in tps:
        while len(holders[tp]) > sharing:  # over-shared: the fullest holder (the last id on a tie) lets go
            _move(held, holders, tp, max(holders[tp], key=lambda m: (len(held[m]), m)), None)
    for tp in sorted(tps, key=lambda tp: (len(holders[tp]), tp)):
        while len(holders[tp]) < sharing:
            free = [m for m in members if m not in holders[tp]]
            _move(held, holders, tp, None, min(free, key=lambda m: (len(held[m]), m)))
    while (step := _balancing_move(held)) is not None:
        _move(held, holders, *step)
    return held


def _move(held: dict[str, set[TopicPartition]], holders: dict[TopicPartition, set[str]], tp: TopicPartition,
          src: str | None, dst: str | None) -> None:
    if src is not None:
        held[src].discard(tp)
        holders[tp].discard(src)
    if dst is not None:
        held[dst].add(tp)
        holders[tp].add(dst)


def _balancing_move(held: dict[str, set[TopicPartition]]) -> tuple[TopicPartition, str, str] | None:
    """A partition of a member holding at least two more than another, which that other does
    not hold (the fullest and emptiest first). Each move lowers the sum of the squared counts,
    so the moves end; when none is left the counts differ by at most one (the fuller member
    of a pair two apart holds at least two partitions the other does not)."""
    fullest = sorted(held, key=lambda m: (-len(held[m]), m))
    emptiest = sorted(held, key=lambda m: (len(held[m]), m))
    for src in fullest:
        for dst in emptiest:
            if len(held[src]) - len(held[dst]) < 2:
                break
            movable = sorted(held[src] - held[dst])
            if movable:
                return movable[-1], src, dst
    return None
