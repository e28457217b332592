"""KIP-848's consumer groups at the group coordinator: ConsumerGroupHeartbeat, sessions,
rebalance timeouts, and the member-epoch fencing of offset commits.

Theory of operation
-------------------
A member's every request is a heartbeat (:meth:`ConsumerGroups.heartbeat`): epoch 0 joins
(or rejoins, keeping its member id), -1 leaves, -2 leaves for a while (a static member, which
keeps its partitions until its session runs out), any other is its current epoch. The
coordinator validates it, updates the member, bumps the group epoch if the member's
subscription or a subscribed topic changed, computes a new target assignment if the group
epoch passed the target's, and moves the member one step toward its target
(:func:`reference.consumer_group.reconcile`). The answer carries the member's epoch and, when
it changed or the member (re)joined, its assignment.

Every change is written to the group's ``__consumer_offsets`` partition as the whole group
(:meth:`~reference.consumer_group.ConsumerGroup.to_json`) and takes effect, and is answered,
once committed; the requests of one group are handled one at a time, each after the write
of the one before, so that each sees the state the log holds. A coordinator that loads the
partition gets the groups back and gives every member a fresh session, as Kafka's does.

Timers (checked at the coordinator's tick): a member whose last good heartbeat is older than
the session timeout is removed (the group epoch goes up, its partitions are free); a member
still revoking at the epoch it was asked to revoke in, after its rebalance timeout, is
removed too.

Groups of the classic protocol and of this one share the group ids; a group is one or the
other (no online migration: Kafka's ``group.consumer.migration.policy=disabled``): a heartbeat
to a classic group with members is GROUP_ID_NOT_FOUND, a JoinGroup to a consumer group with
members INCONSISTENT_GROUP_PROTOCOL, and an empty group of either kind becomes the other.

Bug switches: ``consumer-group-partition-epoch-lost`` (KAFKA-16147, in
:mod:`reference.consumer_group`) and ``consumer-group-rejoin-fenced`` (KAFKA-19233: a member
that rejoins with epoch 0 and its member id, after it was fenced, is fenced again while the
coordinator still has it at a newer epoch, until its session runs out).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Protocol

from reference import records as rec
from reference.assignors import SERVER_ASSIGNORS, server_assign
from reference.bugs import Bug
from reference.consumer_group import (
    JOIN_EPOCH,
    STATIC_LEAVE_EPOCH,
    UNREVOKED,
    ConsumerGroup,
    ModernMember,
    check_commit_epoch,
    check_epoch,
    reconcile,
    record_key,
)
from reference.coordinator import CoordinatorHost, OneAtATime, coordinator_error
from reference.errors import Errors
from reference.group_messages import ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse
from reference.group_state import GroupState
from reference.marks import mark


class GroupHost(Protocol):
    """What of the group coordinator (reference.group_coordinator) the consumer groups use."""

    host: CoordinatorHost
    groups: dict[str, GroupState]
    loaded: dict[int, int]

    def partition_of(self, key: str) -> int: ...

    def group_state(self, group: str) -> GroupState: ...

    def _owns(self, group: str) -> Errors: ...

    def _write(self, now_ms: int, partition: int, batch: bytes, on_done: Callable[[Errors], None]) -> None: ...

    def _new_member_id(self, src: int, instance_id: str | None) -> str: ...




class ConsumerGroups:
    """The consumer groups (KIP-848) of one group coordinator, beside its classic ones."""

    def __init__(self, coordinator: GroupHost, session_timeout_ms: int, heartbeat_interval_ms: int) -> None:
        self.c = coordinator
        self.host = coordinator.host
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.epoch_bug = Bug.CONSUMER_GROUP_PARTITION_EPOCH_LOST in self.host.bugs
        self.rejoin_refused = Bug.CONSUMER_GROUP_REJOIN_FENCED in self.host.bugs
        self.sessions: dict[tuple[str, str], int] = {}  # (group, member) -> when its session ends
        self.rebalances: dict[tuple[str, str], tuple[int, int]] = {}  # -> (deadline, the epoch revoking in)
        self.busy = OneAtATime()  # the requests of a group, each after the write of the one before
        self.changes = 0  # counts the groups installed (what the white-box invariants watch)
        self.targets: dict[str, dict] = {}  # group -> the target assignment its next write carries
        self.hosts: dict[tuple[str, str], int] = {}  # (group, member) -> the node its last heartbeat came from

    def group(self, group: str) -> ConsumerGroup | None:
        gs = self.c.groups.get(group)
        return gs.modern if gs is not None else None

    # ------------------------------------------------------------ one request at a time

    def _persist(self, now_ms: int, group: str, cg: ConsumerGroup, then: Callable[[Errors], None]) -> None:
        """Write the group; once committed it is the group's state; then ``then(error)`` and
        whatever waited for the write."""
        self.busy.writing(group)
        batch = rec.encode_batch([rec.RecordInput(record_key(group), json.dumps(cg.to_json(), sort_keys=True).encode(),
                                                  (), now_ms)])

        target = self.targets.pop(group, None)

        def written(error: Errors) -> None:
            if error is Errors.NONE:
                self.c.group_state(group).modern = cg
                self.changes += 1
                self._forget_gone(group, cg)
                if target is not None:
                    self.host.event("consumer-group-target", group=group, **target)
            then(coordinator_error(error))
            self.busy.done(group)

        self.c._write(now_ms, self.c.partition_of(group), batch, written)

    def _forget_gone(self, group: str, cg: ConsumerGroup) -> None:
        """The timers of members the group no longer has (left, expired, replaced): dropped
        only once that is written, so that a member whose removal failed to be written still
        expires."""
        for table in (self.sessions, self.rebalances, self.hosts):
            for key in [k for k in table if k[0] == group and k[1] not in cg.members]:
                del table[key]

    # ------------------------------------------------------------ heartbeat

    def heartbeat(self, now_ms: int, src: int, req: ConsumerGroupHeartbeatRequest) -> None:
        error = self.c._owns(req.group_id)
        if error is Errors.NONE:
            error = _invalid(req)
        if error is not Errors.NONE:
            self.host.send(src, ConsumerGroupHeartbeatResponse(req.correlation_id, error))
            return
        self.busy.run(req.group_id, lambda: self._heartbeat(src, req))

    def _heartbeat(self, src: int, req: ConsumerGroupHeartbeatRequest) -> None:
        now_ms, group = self.host.now_ms, req.group_id

        def fail(error: Errors) -> None:
            self.host.send(src, ConsumerGroupHeartbeatResponse(req.correlation_id, error))

        error = self.c._owns(group)
        if error is not Errors.NONE:
            return fail(error)
        if req.member_epoch < JOIN_EPOCH:
            return self._leave(src, req)
        gs = self.c.groups.get(group)
        if gs is not None and gs.members:
            return fail(Errors.GROUP_ID_NOT_FOUND)  # a classic group with members: not ours
        if (gs is None or gs.modern is None) and req.member_epoch != JOIN_EPOCH:
            return fail(Errors.GROUP_ID_NOT_FOUND)
        before = gs.modern if gs is not None and gs.modern is not None else ConsumerGroup(epoch_bug=self.epoch_bug)
        cg = before.copy()
        member, error = self._member(cg, src, req)
        if member is None:
            _mark_refusal(error)
            return fail(error)
        self.hosts[(group, member.member_id)] = src
        new = self._advance(now_ms, group, cg, member, req)
        full = req.rebalance_timeout_ms != -1 and req.subscribed_topics is not None and req.owned is not None
        send_assignment = req.member_epoch == JOIN_EPOCH or full or new.assigned_set() != member.assigned_set()
        response = ConsumerGroupHeartbeatResponse(
            req.correlation_id, Errors.NONE, new.member_id, new.member_epoch, self.heartbeat_interval_ms,
            tuple(sorted(new.assigned_set())) if send_assignment else None)

        def answer(error: Errors) -> None:
            if error is not Errors.NONE:
                return fail(error)
            key = (group, new.member_id)
            self.sessions[key] = self.host.now_ms + self.session_timeout_ms
            if new.state != UNREVOKED:
                self.rebalances.pop(key, None)
            elif self.rebalances.get(key, (0, None))[1] != new.member_epoch:
                # asked to revoke at this epoch: it has its rebalance timeout to do so
                self.rebalances[key] = (self.host.now_ms + max(new.rebalance_timeout_ms, 0), new.member_epoch)
            self.host.send(src, response)

        if cg == before:  # nothing to write (the dataclasses compare field by field)
            answer(Errors.NONE)
        else:
            self._persist(now_ms, group, cg, answer)

    def _member(self, cg: ConsumerGroup, src: int, req: ConsumerGroupHeartbeatRequest
                ) -> tuple[ModernMember | None, Errors]:
        """The member the heartbeat is from (new, or a static member's new incarnation, when
        it joins), or why not."""
        owned = frozenset(req.owned) if req.owned is not None else None
        if req.instance_id is not None:
            known = cg.static.get(req.instance_id)
            if req.member_epoch == JOIN_EPOCH:
                if known is None:
                    return ModernMember(req.member_id or self.c._new_member_id(src, req.instance_id),
                                        req.instance_id), Errors.NONE
                old = cg.members[known]
                if old.member_epoch != STATIC_LEAVE_EPOCH:
                    return None, Errors.UNRELEASED_INSTANCE_ID
                new = replace(old, member_id=req.member_id or self.c._new_member_id(src, req.instance_id),
                              member_epoch=0, previous_epoch=0)
                cg.replace_member(known, new)
                return new, Errors.NONE
            if known is None:
                return None, Errors.UNKNOWN_MEMBER_ID
            if known != req.member_id:
                return None, Errors.FENCED_INSTANCE_ID
            m = cg.members[known]
        else:
            found = cg.members.get(req.member_id) if req.member_id else None
            if found is None:
                if req.member_epoch != JOIN_EPOCH:
                    return None, Errors.UNKNOWN_MEMBER_ID
                return ModernMember(req.member_id or self.c._new_member_id(src, None)), Errors.NONE
            m = found
        error = check_epoch(m, req.member_epoch, owned, self.rejoin_refused)
        return (m, Errors.NONE) if error is Errors.NONE else (None, error)

    def _advance(self, now_ms: int, group: str, cg: ConsumerGroup, member: ModernMember,
                 req: ConsumerGroupHeartbeatRequest) -> ModernMember:
        """The member with what its heartbeat says, the group epoch and target assignment
        brought up to date, and the member one step nearer its target."""
        updated = replace(
            member,
            rebalance_timeout_ms=member.rebalance_timeout_ms if req.rebalance_timeout_ms == -1 else req.rebalance_timeout_ms,
            subscribed=member.subscribed if req.subscribed_topics is None else tuple(sorted(set(req.subscribed_topics))),
            assignor=member.assignor if req.server_assignor is None else req.server_assignor)
        changed = set(updated.subscribed) != set(member.subscribed) or member.member_id not in cg.members
        cg.update_member(updated)
        counts = {t: n for t in sorted(cg.subscribed_topics()) if (n := self.host.partition_count(t)) > 0}
        if changed or counts != cg.partition_counts:
            cg.group_epoch += 1
            cg.partition_counts = counts
        if cg.assignment_epoch < cg.group_epoch:
            self._assign(group, cg)
        owned = frozenset(req.owned) if req.owned is not None else None
        new = reconcile(updated, cg.assignment_epoch, cg.target.get(updated.member_id, frozenset()), owned,
                        changed, cg.owner_epoch)
        if new != updated:
            cg.update_member(new)
        return new

    def _assign(self, group: str, cg: ConsumerGroup) -> None:
        """A new target assignment for the group epoch, by the assignor most members prefer."""
        name = preferred_assignor(cg)
        result = server_assign(name, {mid: list(m.subscribed) for mid, m in cg.members.items()}, cg.partition_counts,
                               {mid: sorted(tps) for mid, tps in cg.target.items()},
                               {mid: m.instance_id for mid, m in cg.members.items()})
        cg.target = {mid: frozenset(tps) for mid, tps in result.items()}
        cg.assignment_epoch = cg.group_epoch
        mark("cgroup-target-assignment")
        # announced once the group carrying it is written (_persist)
        # (with the node each member heartbeats from: the aimed nemeses strike the members)
        self.targets[group] = {"epoch": cg.group_epoch, "assignor": name,
                               "target": {mid: sorted(tp.key for tp in tps) for mid, tps in sorted(cg.target.items())},
                               "hosts": {mid: self.hosts[(group, mid)] for mid in sorted(cg.target)
                                         if (group, mid) in self.hosts}}

    # ------------------------------------------------------------ leaving and expiring

    def _leave(self, src: int, req: ConsumerGroupHeartbeatRequest) -> None:
        group = req.group_id

        def answer(error: Errors) -> None:
            ok = error is Errors.NONE
            self.host.send(src, ConsumerGroupHeartbeatResponse(
                req.correlation_id, error, req.member_id if ok else None, req.member_epoch if ok else 0))

        before = self.group(group)
        if before is None:
            return answer(Errors.GROUP_ID_NOT_FOUND)
        mid = before.static.get(req.instance_id) if req.instance_id is not None else req.member_id
        if mid is None or mid not in before.members:
            return answer(Errors.UNKNOWN_MEMBER_ID)
        if mid != req.member_id:
            return answer(Errors.FENCED_INSTANCE_ID)
        cg = before.copy()
        if req.member_epoch == STATIC_LEAVE_EPOCH:
            m = cg.members[mid]  # keeps its partitions (blocked for the others) until its session ends
            cg.update_member(replace(m, member_epoch=STATIC_LEAVE_EPOCH, revoking=(),
                                     assigned=tuple((tp, 0) for tp, _e in m.assigned)))
        else:
            self._remove(group, cg, mid, "left")
        self._persist(self.host.now_ms, group, cg, answer)

    def _remove(self, group: str, cg: ConsumerGroup, member_id: str, why: str) -> None:
        """``member_id`` out of ``cg`` (a copy, to be written; its timers go once it is)."""
        old = cg.remove_member(member_id)
        if old is not None:
            self.host.event("consumer-group-member-removed", group=group, member=member_id, why=why,
                            member_epoch=old.member_epoch, group_epoch=cg.group_epoch)

    def tick(self, now_ms: int) -> None:
        """Remove the members whose session or rebalance timeout passed."""
        for key, deadline in sorted(self.sessions.items()):
            if now_ms >= deadline and self.c.partition_of(key[0]) in self.c.loaded:
                del self.sessions[key]
                self.busy.run(key[0], partial(self._expire, key, None, "session expired"))
        for key, (deadline, epoch) in sorted(self.rebalances.items()):
            if now_ms >= deadline and self.c.partition_of(key[0]) in self.c.loaded:
                del self.rebalances[key]
                self.busy.run(key[0], partial(self._expire, key, epoch, "did not revoke in time"))

    def _expire(self, key: tuple[str, str], epoch: int | None, why: str) -> None:
        group, member_id = key
        before = self.group(group)
        if self.c._owns(group) is not Errors.NONE or before is None or member_id not in before.members:
            return
        if epoch is not None and before.members[member_id].member_epoch != epoch:
            return  # it revoked and moved on meanwhile
        if epoch is None:
            mark("cgroup-member-expired")
        else:
            mark("cgroup-member-revoke-timeout")
        cg = before.copy()
        self._remove(group, cg, member_id, why)

        def removed(error: Errors) -> None:
            if error is not Errors.NONE and self.c._owns(group) is Errors.NONE:
                # not written (the partition's ISR too small, say): the member is still in the
                # group as the log has it; its removal is tried again at the next tick
                if epoch is None:
                    self.sessions.setdefault(key, self.host.now_ms)
                else:
                    self.rebalances.setdefault(key, (self.host.now_ms, epoch))

        self._persist(self.host.now_ms, group, cg, removed)

    # ------------------------------------------------------------ loading

    def loaded(self, now_ms: int, group: str, value: dict) -> ConsumerGroup:
        """A group record read while loading the partition: every member gets a new session."""
        cg = ConsumerGroup.from_json(value, self.epoch_bug)
        self.changes += 1
        for key in [k for k in self.sessions if k[0] == group]:
            del self.sessions[key]
        for mid in cg.members:
            self.sessions[(group, mid)] = now_ms + self.session_timeout_ms
        return cg

    def forget(self, groups: list[str]) -> None:
        for table in (self.sessions, self.rebalances, self.hosts):
            for key in [k for k in table if k[0] in groups]:
                del table[key]


def preferred_assignor(cg: ConsumerGroup) -> str:
    """The server assignor most members ask for (the default on a tie or when none asks)."""
    votes: dict[str, int] = {}
    for m in cg.members.values():
        if m.assignor is not None:
            votes[m.assignor] = votes.get(m.assignor, 0) + 1
    return max(SERVER_ASSIGNORS, key=lambda n: (votes.get(n, 0), -SERVER_ASSIGNORS.index(n)))


def _mark_refusal(error: Errors) -> None:
    if error is Errors.FENCED_MEMBER_EPOCH:
        mark("cgroup-fenced-member-epoch")
    elif error is Errors.UNKNOWN_MEMBER_ID:
        mark("cgroup-unknown-member-id")
    elif error is Errors.UNRELEASED_INSTANCE_ID:
        mark("cgroup-unreleased-instance-id")
    elif error is Errors.FENCED_INSTANCE_ID:
        mark("cgroup-fenced-instance-id")


def _invalid(req: ConsumerGroupHeartbeatRequest) -> Errors:
    """Kafka's GroupCoordinatorService checks of a heartbeat, before any state is read."""
    if req.member_epoch != JOIN_EPOCH and not req.member_id:
        return Errors.INVALID_REQUEST
    if req.member_epoch == JOIN_EPOCH and (req.rebalance_timeout_ms == -1 or req.owned != ()
                                           or req.subscribed_topics is None):
        return Errors.INVALID_REQUEST
    if req.member_epoch < STATIC_LEAVE_EPOCH or (req.member_epoch == STATIC_LEAVE_EPOCH and req.instance_id is None):
        return Errors.INVALID_REQUEST
    if req.instance_id == "":
        return Errors.INVALID_REQUEST
    if req.server_assignor is not None and req.server_assignor not in SERVER_ASSIGNORS:
        return Errors.UNSUPPORTED_ASSIGNOR
    return Errors.NONE


def check_commit(cg: ConsumerGroup, epoch: int, member_id: str, partitions, transactional: bool,
                 unfenced: bool = False) -> Errors:
    """An offset commit to a consumer group (Kafka's ConsumerGroup.validateOffsetCommit): a
    commit outside the group while it has no members, else from a member at its epoch (or an
    older one for partitions held since, KIP-1251). TxnOffsetCommit (up to version 5) says
    ILLEGAL_GENERATION for a stale epoch. ``unfenced`` (the bug switch
    group-generation-unfenced) accepts every commit."""
    if unfenced or (epoch < 0 and (not cg.members or (transactional and not member_id))):
        return Errors.NONE
    m = cg.members.get(member_id)
    if m is None:
        mark("cgroup-commit-unknown-member")
        return Errors.UNKNOWN_MEMBER_ID
    error = check_commit_epoch(m, epoch, partitions)
    if error is not Errors.NONE:
        mark("cgroup-commit-stale-epoch")
        return Errors.ILLEGAL_GENERATION if transactional else error
    return Errors.NONE


def check_fetch(cg: ConsumerGroup, member_id: str | None, epoch: int) -> Errors:
    """A member's OffsetFetch (v9, Kafka's ConsumerGroup.validateOffsetFetch): the member must
    be in the group, at exactly its epoch."""
    m = cg.members.get(member_id or "")
    if m is None:
        return Errors.UNKNOWN_MEMBER_ID
    return Errors.NONE if epoch == m.member_epoch else Errors.STALE_MEMBER_EPOCH
