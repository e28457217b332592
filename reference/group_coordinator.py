"""The group coordinator: group membership and committed offsets over ``__consumer_offsets``.

Theory of operation
-------------------
Group ids are spread over the partitions of the internal topic ``__consumer_offsets`` by
Java's ``String.hashCode`` (as Kafka); the leader of a partition is the coordinator of its
groups. Every commit is written to that partition and takes effect only when the high
watermark passes it, so a coordinator that fails over loses nothing it acknowledged. A new
leader loads the partition's log.

* OffsetCommit writes the offsets as plain records; OffsetFetch reads them back (-1 when
  nothing was committed).
* TxnOffsetCommit (``sendOffsetsToTransaction``) writes them in a transactional batch of
  the producer (first verified with the transaction coordinator, KIP-890 part 1); they
  stay pending until the transaction's marker reaches this partition: a commit marker
  makes them the group's committed offsets, an abort marker drops them. While offsets of a
  group are pending, OffsetFetch with ``require_stable`` (KIP-447) answers
  ``UNSTABLE_OFFSET_COMMIT`` so that a new consumer does not start from offsets about to
  change.

Membership (the classic rebalance protocol; its phases and their table are in
:mod:`reference.group_state`)::

    Empty -> PreparingRebalance -> CompletingRebalance -> Stable -> PreparingRebalance ...

* JoinGroup: a new member gets a member id; a join, a leave, a member's session running out
  or a known member joining again starts a rebalance. When every member has joined (or the
  rebalance timeout removes those that did not), the generation goes up, a leader is chosen,
  and every join is answered; the leader gets the members' subscriptions.
* SyncGroup: the leader sends the assignment; it is written to the log and, once committed,
  every member gets its part and the group is Stable.
* Heartbeat keeps a member's session; during a rebalance it answers
  ``REBALANCE_IN_PROGRESS``. Requests from an unknown member are ``UNKNOWN_MEMBER_ID``,
  from another generation ``ILLEGAL_GENERATION`` (the bug switch
  ``group-generation-unfenced`` skips both checks for heartbeats and commits).
* Static membership (``group.instance.id``, KIP-345): a member that comes back with the same
  instance id within its session takes over its old member id's place and assignment
  without a rebalance; the old member id is fenced (``FENCED_INSTANCE_ID``).
* OffsetCommit with a generation is accepted only from a member of the current generation;
  without one (-1) only while the group has no members.

The offset requests are handled in :mod:`reference.group_offsets`, KIP-848's consumer groups in
:mod:`reference.consumer_group_coordinator`, KIP-932's share groups in
:mod:`reference.share_group_coordinator`. A group id with members is of one kind: a JoinGroup
to a share group with members is INCONSISTENT_GROUP_PROTOCOL, a ConsumerGroupHeartbeat
GROUP_ID_NOT_FOUND (as Kafka's coordinator refuses every request of another group type).
"""

from __future__ import annotations

import json

from reference import records as rec
from reference.bugs import Bug
from reference.consumer_group_coordinator import ConsumerGroups
from reference.coordinator import Coordinator, CoordinatorHost
from reference.errors import Errors
from reference.group_messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from reference.group_offsets import GroupOffsets
from reference.group_state import (
    COMPLETING,
    EMPTY,
    PREPARING,
    STABLE,
    GroupState,
    Member,
    group_record,
)
from reference.log import PartitionLog
from reference.marks import mark
from reference.messages import TopicPartition
from reference.share_group import RECORD_TYPE as SHARE_RECORD_TYPE
from reference.share_group_coordinator import ShareGroups
from reference.topics import OFFSETS_TOPIC

TICK_MS = 100


class _ConsumerGroupsBesideShareGroups(ConsumerGroups):
    """The consumer groups, refusing the id of a share group with members."""

    share: ShareGroups

    def heartbeat(self, now_ms: int, src: int, req: ConsumerGroupHeartbeatRequest) -> None:
        if self.c._owns(req.group_id) is Errors.NONE and self.share.claims(req.group_id):
            mark("share-group-mixed-protocol-refused")
            self.host.send(src, ConsumerGroupHeartbeatResponse(req.correlation_id, Errors.GROUP_ID_NOT_FOUND))
            return
        super().heartbeat(now_ms, src, req)


class GroupCoordinator(GroupOffsets, Coordinator):
    """Acts for the ``__consumer_offsets`` partitions its broker leads."""

    topic = OFFSETS_TOPIC

    def __init__(self, host: CoordinatorHost, num_partitions: int, consumer_session_timeout_ms: int = 45_000,
                 consumer_heartbeat_interval_ms: int = 5_000, share_session_timeout_ms: int = 45_000,
                 share_heartbeat_interval_ms: int = 5_000) -> None:
        super().__init__(host, num_partitions)
        self.groups: dict[str, GroupState] = {}
        # KIP-848's consumer groups and KIP-932's share groups, beside the classic ones
        self.consumer = _ConsumerGroupsBesideShareGroups(self, consumer_session_timeout_ms,
                                                         consumer_heartbeat_interval_ms)
        self.share = ShareGroups(self, share_session_timeout_ms, share_heartbeat_interval_ms)
        self.consumer.share = self.share
        # producer id -> group -> offsets, written in a transaction not yet ended
        self.pending_txn: dict[int, dict[str, dict[TopicPartition, int]]] = {}
        self.unfenced = Bug.GROUP_GENERATION_UNFENCED in host.bugs
        self._next_member = 0
        self._ticking = False

    def _owns(self, group: str) -> Errors:
        if not group:
            return Errors.INVALID_GROUP_ID
        return self._ready(self.partition_of(group))

    # ------------------------------------------------------------ leadership

    def _load(self, now_ms: int, partition: int, leader_epoch: int, log: PartitionLog) -> None:
        """Offsets and groups as the log left them; a transaction's offsets wait for its marker."""
        for batch in log.batches():
            try:
                h = rec.parse_header(batch)
                if h.is_control:
                    self._end_txn(partition, h.producer_id, rec.control_is_commit(batch))
                    continue
                for r in rec.decode_records(batch):
                    self._load_record(now_ms, h, r)
            except (rec.CorruptRecordError, ValueError, KeyError):
                continue  # a record this version cannot read is skipped, never fatal
        self._next_member = 0
        mark("group-coordinator-loaded")
        self.host.event("group-coordinator-loaded", partition=partition, leader_epoch=leader_epoch)
        if not self._ticking:
            self._ticking = True
            self.host.set_timer(TICK_MS, ("group", "tick"))

    def _load_record(self, now_ms: int, h: rec.BatchHeader, r: rec.Record) -> None:
        if r.key is None or r.value is None:
            return
        key = json.loads(r.key)
        if key.get("type") == "consumer-group":
            self.group_state(key["group"]).modern = self.consumer.loaded(now_ms, key["group"], json.loads(r.value))
            return
        if key.get("type") == SHARE_RECORD_TYPE:
            self.group_state(key["group"]).share = self.share.loaded(now_ms, key["group"], json.loads(r.value))
            return
        if key.get("type") == "group":
            self.groups.setdefault(key["group"], GroupState()).load(json.loads(r.value), now_ms)
            return
        if key.get("type") != "offset":
            return
        tp = TopicPartition.parse(key["key"])
        offset = json.loads(r.value)["offset"]
        if h.is_transactional:
            self.pending_txn.setdefault(h.producer_id, {}).setdefault(key["group"], {})[tp] = offset
        else:
            self.groups.setdefault(key["group"], GroupState()).committed[tp] = offset

    def _forget(self, partition: int) -> None:
        gone = [g for g in self.groups if self.partition_of(g) == partition]
        for g in gone:
            self._unload_group(g, self.groups.pop(g))
        self.consumer.forget(gone)
        self.share.forget(gone)
        for pid in list(self.pending_txn):
            groups = self.pending_txn[pid]
            for g in [g for g in groups if self.partition_of(g) == partition]:
                del groups[g]
            if not groups:
                del self.pending_txn[pid]

    def _unload_group(self, group: str, g: GroupState) -> None:
        """The group leaves this coordinator (its partition moved to another broker, or is
        loaded again in a new leader epoch): every join and sync still waiting for its
        rebalance is answered NOT_COORDINATOR, as Kafka's coordinator does when it unloads a
        group (GroupMetadataManager.onUnloaded, KAFKA-16148), so that the member looks the
        coordinator up again and joins there. A join never answered holds its member out of
        the group until the client gives up on it: kafka-python and the Java client wait
        max.poll.interval.ms + 5 s (five minutes by default), owning nothing, while the
        group settles without it. The bug switch ``group-unload-strands-joins`` drops them
        unanswered."""
        waiting = [m for m in g.members.values() if m.join is not None or m.sync is not None]
        if not waiting:
            return
        mark("group-unloaded-with-waiters")
        self.host.event("group-unloaded", group=group, generation=g.generation,
                        waiting=sorted(m.member_id for m in waiting))
        if Bug.GROUP_UNLOAD_STRANDS_JOINS in self.host.bugs:
            return
        for m in waiting:
            if m.join is not None:
                self.host.send(m.join[0], JoinGroupResponse(m.join[1], Errors.NOT_COORDINATOR))
                m.join = None
            if m.sync is not None:
                self.host.send(m.sync[0], SyncGroupResponse(m.sync[1], Errors.NOT_COORDINATOR))
                m.sync = None

    def group_state(self, group: str) -> GroupState:
        return self.groups.setdefault(group, GroupState())

    def _write_then(self, now_ms: int, group: str, batch: bytes, apply, on_done) -> None:
        """Write ``batch`` to the group's partition; once committed, ``apply()`` its effect
        and ``on_done(NONE)`` (or only ``on_done(error)``)."""
        def committed(error: Errors) -> None:
            if error is Errors.NONE:
                apply()
            on_done(error)

        self._write(now_ms, self.partition_of(group), batch, committed)

    # ------------------------------------------------------------ membership

    def _new_member_id(self, src: int, instance_id: str | None) -> str:
        self._next_member += 1
        epoch = max(self.loaded.values(), default=0)
        return f"{instance_id or 'consumer'}-{src}-{self.host.node_id}.{epoch}.{self._next_member}"

    def join_group(self, now_ms: int, src: int, req: JoinGroupRequest) -> None:
        def answer(error: Errors, member_id: str = "") -> None:
            self.host.send(src, JoinGroupResponse(req.correlation_id, error, member_id=member_id))

        error = self._owns(req.group_id)
        if error is not Errors.NONE:
            answer(error)
            return
        if not req.protocols:
            answer(Errors.INCONSISTENT_GROUP_PROTOCOL)
            return
        g = self.group_state(req.group_id)
        if g.modern is not None and g.modern.members:
            answer(Errors.INCONSISTENT_GROUP_PROTOCOL)  # a consumer group (KIP-848) with members
            return
        if self.share.claims(req.group_id):
            mark("share-group-mixed-protocol-refused")
            answer(Errors.INCONSISTENT_GROUP_PROTOCOL)  # a share group (KIP-932) with members
            return
        member_id = req.member_id
        if req.group_instance_id is not None:
            known = g.static.get(req.group_instance_id)
            if member_id and known is not None and known != member_id:
                answer(Errors.FENCED_INSTANCE_ID)  # a zombie of a static member
                return
            if not member_id and known is not None and known in g.members:
                self._static_rejoin(now_ms, src, req, g, known)
                return
        if not member_id and req.require_known_member_id and req.group_instance_id is None:
            # KIP-394: the new member gets its id and must join again with it (Kafka's
            # classic group coordinator, JoinGroup v4+), so that a client that retries a
            # lost JoinGroup does not leave a member behind
            member_id = self._new_member_id(src, None)
            g.pending.add(member_id)
            answer(Errors.MEMBER_ID_REQUIRED, member_id)
            return
        if member_id and member_id not in g.members and member_id not in g.pending:
            answer(Errors.UNKNOWN_MEMBER_ID)
            return
        was_member = member_id in g.members
        if member_id in g.pending or not member_id:
            g.pending.discard(member_id)
            member_id = member_id or self._new_member_id(src, req.group_instance_id)
            g.members[member_id] = Member(member_id, req.group_instance_id, req.session_timeout_ms,
                                          req.rebalance_timeout_ms, req.protocols, now_ms)
            if req.group_instance_id is not None:
                g.static[req.group_instance_id] = member_id
        m = g.members[member_id]
        m.last_heartbeat_ms = now_ms
        if was_member and self._answers_current_generation(src, req, g, m):
            return
        m.protocols = req.protocols
        m.session_timeout_ms = req.session_timeout_ms
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        if m.join is not None:
            self.host.send(m.join[0], JoinGroupResponse(m.join[1], Errors.UNKNOWN_MEMBER_ID))
        m.join = (src, req.correlation_id)
        self._prepare_rebalance(now_ms, req.group_id, g, f"{member_id} joined")
        self._maybe_complete_join(now_ms, req.group_id, g)

    def _answers_current_generation(self, src: int, req: JoinGroupRequest, g: GroupState, m: Member) -> bool:
        """A known member that joins again with the protocols it already has gets the current
        generation, without a rebalance: a follower of a stable group, or anyone while the
        group completes its rebalance (it may have lost the first answer). Kafka's classic
        group coordinator does this; a leader rejoining a stable group rebalances it (how a
        leader asks for a new assignment). True when answered."""
        if m.join is not None or m.protocols != req.protocols:
            return False
        if not (g.state == COMPLETING or (g.state == STABLE and m.member_id != g.leader)):
            return False
        members = g.members_metadata() if m.member_id == g.leader and g.state == COMPLETING else ()
        self.host.send(src, JoinGroupResponse(req.correlation_id, Errors.NONE, g.generation, g.protocol,
                                                g.leader, m.member_id, members))
        return True

    def _static_rejoin(self, now_ms: int, src: int, req: JoinGroupRequest, g: GroupState,
                       old_id: str) -> None:
        """A static member back within its session: a new member id in the old one's place,
        same assignment, no rebalance (unless one is under way anyway)."""
        old = g.members.pop(old_id)
        if old.join is not None:
            self.host.send(old.join[0], JoinGroupResponse(old.join[1], Errors.FENCED_INSTANCE_ID))
        if old.sync is not None:
            self.host.send(old.sync[0], SyncGroupResponse(old.sync[1], Errors.FENCED_INSTANCE_ID))
        new_id = self._new_member_id(src, req.group_instance_id)
        assert req.group_instance_id is not None
        m = Member(new_id, req.group_instance_id, req.session_timeout_ms, req.rebalance_timeout_ms,
                   req.protocols, now_ms, old.assignment)
        g.members[new_id] = m
        g.static[req.group_instance_id] = new_id
        if g.leader == old_id:
            g.leader = new_id
        mark("group-static-member-replaced")
        self.host.event("group-static-rejoin", group=req.group_id, instance=req.group_instance_id,
                          member=new_id, replaced=old_id, generation=g.generation)
        if g.state == STABLE:
            members = g.members_metadata() if g.leader == new_id else ()
            generation = g.generation

            def stored(error: Errors) -> None:
                # the new member id is stored before it is handed out, so that a coordinator
                # failover does not bring the old one back and fence the member
                if error is not Errors.NONE:
                    self.host.send(src, JoinGroupResponse(req.correlation_id, Errors.NOT_COORDINATOR))
                else:
                    self.host.send(src, JoinGroupResponse(req.correlation_id, Errors.NONE,
                                                            generation, g.protocol, g.leader,
                                                            new_id, members))

            self._persist(now_ms, req.group_id, g, stored)
            return
        m.join = (src, req.correlation_id)
        self._prepare_rebalance(now_ms, req.group_id, g, f"{new_id} replaced {old_id}")
        self._maybe_complete_join(now_ms, req.group_id, g)

    def _prepare_rebalance(self, now_ms: int, group: str, g: GroupState, reason: str) -> None:
        if g.state == PREPARING:
            return
        for m in g.members.values():
            if m.sync is not None:
                self.host.send(m.sync[0], SyncGroupResponse(m.sync[1], Errors.REBALANCE_IN_PROGRESS))
                m.sync = None
        g.move(PREPARING, group)
        g.rebalance_deadline_ms = now_ms + max((m.rebalance_timeout_ms for m in g.members.values()),
                                               default=0)
        self.host.event("group-rebalance", group=group, generation=g.generation, reason=reason)

    def _maybe_complete_join(self, now_ms: int, group: str, g: GroupState, force: bool = False) -> None:
        if g.state != PREPARING:
            return
        if not force and any(m.join is None for m in g.members.values()):
            return
        for mid in [mid for mid, m in g.members.items() if m.join is None]:
            self._remove(g, mid)  # did not rejoin within the rebalance timeout
        g.generation += 1
        if not g.members:
            g.move(EMPTY, group)
            g.leader, g.protocol = "", ""
            self.host.event("group-generation", group=group, generation=g.generation, members=[])
            self._persist(now_ms, group, g)
            return
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.protocol = g.select_protocol()
        g.move(COMPLETING, group)
        self.host.event("group-generation", group=group, generation=g.generation,
                          members=sorted(g.members), leader=g.leader, protocol=g.protocol)
        for mid, m in g.members.items():
            assert m.join is not None
            src, corr = m.join
            m.join = None
            if not g.protocol:
                self.host.send(src, JoinGroupResponse(corr, Errors.INCONSISTENT_GROUP_PROTOCOL))
                continue
            members = g.members_metadata() if mid == g.leader else ()
            self.host.send(src, JoinGroupResponse(corr, Errors.NONE, g.generation, g.protocol,
                                                    g.leader, mid, members))
        if not g.protocol:
            g.members.clear()
            g.static.clear()
            g.move(EMPTY, group)

    def _remove(self, g: GroupState, member_id: str) -> None:
        m = g.members.pop(member_id, None)
        if m is None:
            return
        if m.instance_id is not None and g.static.get(m.instance_id) == member_id:
            del g.static[m.instance_id]
        if m.join is not None:
            self.host.send(m.join[0], JoinGroupResponse(m.join[1], Errors.UNKNOWN_MEMBER_ID))
        if m.sync is not None:
            self.host.send(m.sync[0], SyncGroupResponse(m.sync[1], Errors.UNKNOWN_MEMBER_ID))

    def sync_group(self, now_ms: int, src: int, req: SyncGroupRequest) -> None:
        def answer(error: Errors, assignment: bytes = b"") -> None:
            self.host.send(src, SyncGroupResponse(req.correlation_id, error, assignment))

        error = self._owns(req.group_id)
        if error is not Errors.NONE:
            answer(error)
            return
        g = self.groups.get(req.group_id)
        m = g.members.get(req.member_id) if g is not None else None
        if g is None or m is None:
            answer(Errors.UNKNOWN_MEMBER_ID)
            return
        if req.generation_id != g.generation:
            answer(Errors.ILLEGAL_GENERATION)
            return
        if g.state == PREPARING:
            answer(Errors.REBALANCE_IN_PROGRESS)
            return
        m.last_heartbeat_ms = now_ms
        if g.state == STABLE:
            answer(Errors.NONE, m.assignment)
            return
        m.sync = (src, req.correlation_id)
        if req.member_id != g.leader:
            return
        assignments = dict(req.assignments)
        generation = g.generation
        for mid, x in g.members.items():
            x.assignment = assignments.get(mid, b"")

        def done(error: Errors) -> None:
            if g.state != COMPLETING or g.generation != generation:
                return  # a new rebalance started meanwhile; its members will sync again
            if error is not Errors.NONE:
                self._prepare_rebalance(self.host.now_ms, req.group_id, g, "assignment not stored")
                return
            g.move(STABLE, req.group_id)
            self.host.event("group-stable", group=req.group_id, generation=generation,
                              assignment={mid: x.assignment.decode("latin-1")
                                          for mid, x in g.members.items()})
            for x in g.members.values():
                if x.sync is not None:
                    self.host.send(x.sync[0], SyncGroupResponse(x.sync[1], Errors.NONE, x.assignment))
                    x.sync = None

        self._persist(now_ms, req.group_id, g, done)

    def _persist(self, now_ms: int, group: str, g: GroupState, on_done=None) -> None:
        batch = rec.encode_batch([group_record(group, g, now_ms)])
        self._write_then(now_ms, group, batch, lambda: None,
                         on_done if on_done is not None else (lambda e: None))

    def heartbeat(self, now_ms: int, src: int, req: HeartbeatRequest) -> None:
        def answer(error: Errors) -> None:
            self.host.send(src, HeartbeatResponse(req.correlation_id, error))

        error = self._owns(req.group_id)
        if error is not Errors.NONE:
            answer(error)
            return
        g = self.groups.get(req.group_id)
        m = g.members.get(req.member_id) if g is not None else None
        if g is None or m is None:
            if not self.unfenced:
                mark("group-unknown-member")
            answer(Errors.NONE if self.unfenced else Errors.UNKNOWN_MEMBER_ID)
            return
        if req.generation_id != g.generation and not self.unfenced:
            mark("group-illegal-generation")
            answer(Errors.ILLEGAL_GENERATION)
            return
        m.last_heartbeat_ms = now_ms
        if g.state == PREPARING and req.generation_id == g.generation:
            mark("group-rebalance-in-progress")
            answer(Errors.REBALANCE_IN_PROGRESS)
        else:
            answer(Errors.NONE)

    def leave_group(self, now_ms: int, src: int, req: LeaveGroupRequest) -> None:
        error = self._owns(req.group_id)
        g = self.groups.get(req.group_id)
        if error is Errors.NONE and (g is None or req.member_id not in g.members):
            error = Errors.UNKNOWN_MEMBER_ID
        if error is Errors.NONE:
            assert g is not None
            self._remove(g, req.member_id)
            self._prepare_rebalance(now_ms, req.group_id, g, f"{req.member_id} left")
            self._maybe_complete_join(now_ms, req.group_id, g)
        self.host.send(src, LeaveGroupResponse(req.correlation_id, error))

    def timer(self, now_ms: int, key: tuple) -> None:
        if key != ("tick",):
            return
        if not self.loaded:
            self._ticking = False
            return
        self.host.set_timer(TICK_MS, ("group", "tick"))
        if not self.host.lease_valid():
            return
        self.consumer.tick(now_ms)
        self.share.tick(now_ms)
        for group in sorted(self.groups):
            if self.partition_of(group) not in self.loaded:
                continue
            g = self.groups[group]
            expired = [mid for mid, m in g.members.items()
                       if m.join is None and now_ms - m.last_heartbeat_ms > m.session_timeout_ms]
            for mid in expired:
                mark("group-member-expired")
                self.host.event("group-member-expired", group=group, member=mid,
                                  generation=g.generation)
                self._remove(g, mid)
            if expired and g.state in (STABLE, COMPLETING):
                self._prepare_rebalance(now_ms, group, g, f"sessions expired: {expired}")
            if g.state == PREPARING:
                self._maybe_complete_join(now_ms, group, g, force=now_ms >= g.rebalance_deadline_ms)
            if expired and g.state == EMPTY:
                self._persist(now_ms, group, g)
