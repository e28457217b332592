"""KIP-932's share groups at the group coordinator: ShareGroupHeartbeat and sessions.

Theory of operation
-------------------
A member's every request to the coordinator is a heartbeat (:meth:`ShareGroups.heartbeat`):
epoch 0 joins (or rejoins, keeping its member id), -1 leaves, any other is its current
epoch. The member id is the member's own (clients generate a UUID); one that comes empty
with epoch 0 gets one from the coordinator. The coordinator validates the heartbeat,
updates the member, bumps the group epoch if the member is new, its subscription changed or
a subscribed topic's partitions did, computes a new target assignment if the group epoch
passed the target's (:meth:`reference.share_group.ShareGroup.assign`), and puts the member
at its target at once (:func:`reference.share_group.reconcile`: share groups do not revoke).
The answer carries the member's epoch, the heartbeat interval and, when the member joined,
sent a full heartbeat (its subscription) or got a new assignment, its partitions.

Every change is written to the group's ``__consumer_offsets`` partition as the whole group
(:meth:`~reference.share_group.ShareGroup.to_json`) and takes effect, and is answered, once
committed; the requests of one group are handled one at a time, each after the write of the
one before. A coordinator that loads the partition gets the groups back and gives every
member a fresh session. A member whose last good heartbeat is older than the session
timeout is removed at the coordinator's tick, as a leave: the group epoch goes up.

Share, consumer and classic groups share the group ids; a group with members is of one kind:
a share heartbeat to a classic or consumer group with members is GROUP_ID_NOT_FOUND (and the
group coordinator refuses a JoinGroup to a share group with members with
INCONSISTENT_GROUP_PROTOCOL, a ConsumerGroupHeartbeat with GROUP_ID_NOT_FOUND). An empty
group of another kind is taken over (Kafka keeps the type until the empty group is deleted).

Not modelled: rack ids, ``group.share.assignment.interval.ms`` (a target is computed at the
heartbeat that needs it), and the initialisation of share-partitions in the share
coordinator before they are assignable (every partition is assignable at once).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Protocol

from reference import records as rec
from reference.consumer_group_coordinator import ConsumerGroups, GroupHost
from reference.coordinator import OneAtATime, coordinator_error
from reference.errors import Errors
from reference.marks import mark
from reference.share_group import JOIN_EPOCH, LEAVE_EPOCH, ShareGroup, ShareMember, check_epoch, reconcile, record_key
from reference.share_messages import ShareGroupHeartbeatRequest, ShareGroupHeartbeatResponse

MAX_MEMBER_ID = 36  # Kafka's KafkaApis.isMemberIdValid



class ShareHost(GroupHost, Protocol):
    consumer: ConsumerGroups


class ShareGroups:
    """The share groups (KIP-932) of one group coordinator, beside its classic and consumer
    groups."""

    def __init__(self, coordinator: ShareHost, session_timeout_ms: int = 45_000, heartbeat_interval_ms: int = 5_000,
                 max_size: int = 200) -> None:
        self.c = coordinator
        self.host = coordinator.host
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        self.sessions: dict[tuple[str, str], int] = {}  # (group, member) -> when its session ends
        self.busy = OneAtATime()  # the requests of a group, each after the write of the one before
        self.targets: dict[str, dict] = {}  # group -> the target assignment its next write carries
        self.hosts: dict[tuple[str, str], int] = {}  # (group, member) -> the node its last heartbeat came from

    def group(self, group: str) -> ShareGroup | None:
        gs = self.c.groups.get(group)
        return gs.share if gs is not None else None

    def claims(self, group: str) -> bool:
        """The id is a share group's: it has members, or a write of it is under way."""
        sg = self.group(group)
        return group in self.busy or (sg is not None and bool(sg.members))

    # ------------------------------------------------------------ one request at a time

    def _persist(self, now_ms: int, group: str, sg: ShareGroup, then: Callable[[Errors], None]) -> None:
        """Write the group; once committed it is the group's state; then ``then(error)`` and
        whatever waited for the write."""
        self.busy.writing(group)
        value = json.dumps(sg.to_json(), sort_keys=True).encode()
        batch = rec.encode_batch([rec.RecordInput(record_key(group), value, (), now_ms)])
        target = self.targets.pop(group, None)

        def written(error: Errors) -> None:
            if error is Errors.NONE:
                self.c.group_state(group).share = sg
                for table in (self.sessions, self.hosts):
                    for key in [k for k in table if k[0] == group and k[1] not in sg.members]:
                        del table[key]
                if target is not None:
                    self.host.event("share-group-target", group=group, **target)
            then(coordinator_error(error))
            self.busy.done(group)

        self.c._write(now_ms, self.c.partition_of(group), batch, written)

    # ------------------------------------------------------------ heartbeat

    def heartbeat(self, now_ms: int, src: int, req: ShareGroupHeartbeatRequest) -> None:
        error = _invalid(req)
        if error is Errors.NONE:
            error = self.c._owns(req.group_id)
        if error is not Errors.NONE:
            if error is Errors.INVALID_REQUEST:
                mark("share-group-invalid-request")
            self.host.send(src, ShareGroupHeartbeatResponse(req.correlation_id, error))
            return
        self.busy.run(req.group_id, lambda: self._heartbeat(src, req))

    def _heartbeat(self, src: int, req: ShareGroupHeartbeatRequest) -> None:
        now_ms, group = self.host.now_ms, req.group_id

        def fail(error: Errors) -> None:
            _mark_refusal(error)
            self.host.send(src, ShareGroupHeartbeatResponse(req.correlation_id, error))

        error = self.c._owns(group)
        if error is not Errors.NONE:
            return fail(error)
        if req.member_epoch == LEAVE_EPOCH:
            return self._leave(src, req)
        before = self.group(group)
        if self._other_kind(group) or (before is None and req.member_epoch != JOIN_EPOCH):
            return fail(Errors.GROUP_ID_NOT_FOUND)
        sg = before.copy() if before is not None else ShareGroup()
        member, error = self._member(sg, src, req)
        if member is None:
            return fail(error)
        self.hosts[(group, member.member_id)] = src
        new = self._advance(group, sg, member, req)
        send_assignment = (req.member_epoch == JOIN_EPOCH or req.subscribed_topics is not None
                           or new.assigned != member.assigned)
        response = ShareGroupHeartbeatResponse(req.correlation_id, Errors.NONE, new.member_id, new.member_epoch,
                                               self.heartbeat_interval_ms, new.assigned if send_assignment else None)

        def answer(error: Errors) -> None:
            if error is not Errors.NONE:
                return fail(error)
            self.sessions[(group, new.member_id)] = self.host.now_ms + self.session_timeout_ms
            self.host.send(src, response)

        if sg == before:  # nothing to write
            answer(Errors.NONE)
        else:
            self._persist(now_ms, group, sg, answer)

    def _other_kind(self, group: str) -> bool:
        """A classic or consumer group with members (or a consumer group being written) has the id."""
        gs = self.c.groups.get(group)
        if gs is not None and (gs.members or (gs.modern is not None and gs.modern.members)):
            return True
        return group in self.c.consumer.busy

    def _member(self, sg: ShareGroup, src: int, req: ShareGroupHeartbeatRequest) -> tuple[ShareMember | None, Errors]:
        """The member the heartbeat is from (new when it joins), or why not."""
        member_id = req.member_id or self.c._new_member_id(src, None)
        m = sg.members.get(member_id)
        if m is None and len(sg.members) >= self.max_size:
            return None, Errors.GROUP_MAX_SIZE_REACHED
        if m is None:
            if req.member_epoch != JOIN_EPOCH:
                return None, Errors.UNKNOWN_MEMBER_ID
            return ShareMember(member_id), Errors.NONE
        error = check_epoch(m, req.member_epoch)
        return (m, Errors.NONE) if error is Errors.NONE else (None, error)

    def _advance(self, group: str, sg: ShareGroup, member: ShareMember, req: ShareGroupHeartbeatRequest
                 ) -> ShareMember:
        """The member with what its heartbeat says, the group epoch and target assignment
        brought up to date, and the member at its target."""
        updated = member if req.subscribed_topics is None else replace(
            member, subscribed=tuple(sorted(set(req.subscribed_topics))))
        changed = updated.subscribed != member.subscribed or member.member_id not in sg.members
        sg.members[updated.member_id] = updated
        counts = {t: n for t in sorted(sg.subscribed_topics()) if (n := self.host.partition_count(t)) > 0}
        if changed or counts != sg.partition_counts:
            sg.group_epoch += 1
            sg.partition_counts = counts
        if sg.assignment_epoch < sg.group_epoch:
            self._assign(group, sg)
        new = reconcile(updated, sg.assignment_epoch, sg.target.get(updated.member_id, frozenset()), changed)
        sg.members[new.member_id] = new
        return new

    def _assign(self, group: str, sg: ShareGroup) -> None:
        sg.assign()
        mark("share-group-target-assignment")
        # announced once the group carrying it is written (_persist), with the node each
        # member heartbeats from (the aimed nemeses strike the members)
        self.targets[group] = {"epoch": sg.assignment_epoch,
                               "target": {mid: sorted(tp.key for tp in tps) for mid, tps in sorted(sg.target.items())},
                               "hosts": {mid: self.hosts[(group, mid)] for mid in sorted(sg.target)
                                         if (group, mid) in self.hosts}}

    # ------------------------------------------------------------ leaving and expiring

    def _leave(self, src: int, req: ShareGroupHeartbeatRequest) -> None:
        group = req.group_id

        def answer(error: Errors) -> None:
            ok = error is Errors.NONE
            if not ok:
                _mark_refusal(error)
            self.host.send(src, ShareGroupHeartbeatResponse(
                req.correlation_id, error, req.member_id if ok else None, LEAVE_EPOCH if ok else 0))

        before = self.group(group)
        if before is None or self._other_kind(group):
            return answer(Errors.GROUP_ID_NOT_FOUND)
        if req.member_id not in before.members:
            return answer(Errors.UNKNOWN_MEMBER_ID)
        sg = before.copy()
        self._remove(group, sg, req.member_id, "left")
        self._persist(self.host.now_ms, group, sg, answer)

    def _remove(self, group: str, sg: ShareGroup, member_id: str, why: str) -> None:
        """``member_id`` out of ``sg`` (a copy, to be written; its session goes once it is)."""
        old = sg.remove_member(member_id)
        if old is not None:
            self.host.event("share-group-member-removed", group=group, member=member_id, why=why,
                            member_epoch=old.member_epoch, group_epoch=sg.group_epoch)

    def tick(self, now_ms: int) -> None:
        """Remove the members whose session ran out."""
        for key, deadline in sorted(self.sessions.items()):
            if now_ms >= deadline and self.c.partition_of(key[0]) in self.c.loaded:
                del self.sessions[key]
                self.busy.run(key[0], partial(self._expire, key))

    def _expire(self, key: tuple[str, str]) -> None:
        group, member_id = key
        before = self.group(group)
        if self.c._owns(group) is not Errors.NONE or before is None or member_id not in before.members:
            return
        if self.sessions.get(key, 0) > self.host.now_ms:
            return  # it heartbeat meanwhile (the expiry waited for a write)
        mark("share-group-member-expired")
        sg = before.copy()
        self._remove(group, sg, member_id, "session expired")

        def removed(error: Errors) -> None:
            if error is not Errors.NONE and self.c._owns(group) is Errors.NONE:
                # not written: the member is still in the group as the log has it; its removal
                # is tried again at the next tick
                self.sessions.setdefault(key, self.host.now_ms)

        self._persist(self.host.now_ms, group, sg, removed)

    # ------------------------------------------------------------ loading

    def loaded(self, now_ms: int, group: str, value: dict) -> ShareGroup:
        """A group record read while loading the partition: every member gets a new session."""
        sg = ShareGroup.from_json(value)
        for key in [k for k in self.sessions if k[0] == group]:
            del self.sessions[key]
        for mid in sg.members:
            self.sessions[(group, mid)] = now_ms + self.session_timeout_ms
        return sg

    def forget(self, groups: list[str]) -> None:
        for table in (self.sessions, self.hosts):
            for key in [k for k in table if k[0] in groups]:
                del table[key]


def _mark_refusal(error: Errors) -> None:
    if error is Errors.FENCED_MEMBER_EPOCH:
        mark("share-group-fenced-member-epoch")
    elif error is Errors.UNKNOWN_MEMBER_ID:
        mark("share-group-unknown-member-id")
    elif error is Errors.GROUP_ID_NOT_FOUND:
        mark("share-group-id-not-found")
    elif error is Errors.GROUP_MAX_SIZE_REACHED:
        mark("share-group-max-size-reached")


def _invalid(req: ShareGroupHeartbeatRequest) -> Errors:
    """Kafka's checks of a heartbeat before any state is read (KafkaApis.isMemberIdValid,
    GroupCoordinatorService.throwIfShareGroupHeartbeatRequestIsInvalid); an empty member id
    at epoch 0 is allowed here (the coordinator gives one)."""
    if not req.group_id or len(req.member_id) > MAX_MEMBER_ID:
        return Errors.INVALID_REQUEST
    if req.member_epoch != JOIN_EPOCH and not req.member_id:
        return Errors.INVALID_REQUEST
    if req.member_epoch == JOIN_EPOCH and not req.subscribed_topics:
        return Errors.INVALID_REQUEST
    return Errors.INVALID_REQUEST if req.member_epoch < LEAVE_EPOCH else Errors.NONE
