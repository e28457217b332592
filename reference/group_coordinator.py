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

Membership (the classic rebalance protocol)::

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

Record format (our own, JSON): key ``{"type": "offset", "group": g, "key": "topic:p"}``,
value ``{"offset": n}``; key ``{"type": "group", "group": g}``, value the generation,
protocol, leader and members with their assignments.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from reference import records as rec
from reference.bugs import Bug
from reference.errors import Errors
from reference.marks import mark
from reference.messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicPartition,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from reference.txn_coordinator import OFFSETS_TOPIC, coordinator_ready, partition_for

if TYPE_CHECKING:
    from reference.broker import Broker


EMPTY, PREPARING, COMPLETING, STABLE = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable"
TICK_MS = 100


@dataclass(slots=True)
class Member:
    member_id: str
    instance_id: str | None
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]
    last_heartbeat_ms: int
    assignment: bytes = b""
    join: tuple[int, int] | None = None  # (src, correlation id) of a join waiting for its answer
    sync: tuple[int, int] | None = None


@dataclass(slots=True)
class GroupState:
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    state: str = EMPTY
    generation: int = 0
    protocol: str = ""
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)  # in join order
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    rebalance_deadline_ms: int = 0
    pending: set[str] = field(default_factory=set)  # KIP-394: member ids given out, not yet joined


@dataclass(slots=True)
class _PendingWrite:
    partition: int
    required_offset: int
    apply: object  # callable() applying the write's effect
    on_done: object  # callable(Errors)


def _encode(group: str, offsets: tuple[tuple[TopicPartition, int], ...],
            now_ms: int) -> list[rec.RecordInput]:
    return [rec.RecordInput(json.dumps({"type": "offset", "group": group, "key": tp.key},
                                       sort_keys=True).encode(),
                            json.dumps({"offset": off}).encode(), (), now_ms)
            for tp, off in offsets]


class GroupCoordinator:
    """Owned by a broker; acts for the ``__consumer_offsets`` partitions the broker leads."""

    def __init__(self, broker: Broker, num_partitions: int) -> None:
        # the broker owns this coordinator: through a weak proxy the two form no reference
        # cycle, so a crashed broker is freed at once (the simulator avoids full collections)
        self.broker = weakref.proxy(broker)
        self.num_partitions = num_partitions
        self.loaded: dict[int, int] = {}  # partition -> leader epoch it was loaded in
        self.groups: dict[str, GroupState] = {}
        # producer id -> group -> offsets, written in a transaction not yet ended
        self.pending_txn: dict[int, dict[str, dict[TopicPartition, int]]] = {}
        self.writes: list[_PendingWrite] = []
        self.unfenced = Bug.GROUP_GENERATION_UNFENCED in broker.bugs
        self._next_member = 0
        self._ticking = False

    # ------------------------------------------------------------ ownership

    def partition_of(self, group: str) -> int:
        return partition_for(group, self.num_partitions)

    def _owns(self, group: str) -> Errors:
        if not group:
            return Errors.INVALID_GROUP_ID
        return coordinator_ready(self.broker, OFFSETS_TOPIC, self.partition_of(group), self.loaded)

    def on_leader(self, partition: int, leader_epoch: int) -> None:
        self._unload(partition)
        log = self.broker.partitions[TopicPartition(OFFSETS_TOPIC, partition)].log
        for batch in log.batches():
            try:
                h = rec.parse_header(batch)
                if h.is_control:
                    self._end_txn(partition, h.producer_id, rec.control_is_commit(batch))
                    continue
                for r in rec.decode_records(batch):
                    self._load_record(h, r)
            except (rec.CorruptRecordError, ValueError, KeyError):
                continue  # a record this version cannot read is skipped, never fatal
        self.loaded[partition] = leader_epoch
        self._next_member = 0
        mark("group-coordinator-loaded")
        self.broker.event("group-coordinator-loaded", partition=partition, leader_epoch=leader_epoch)
        if not self._ticking:
            self._ticking = True
            self.broker.set_timer(TICK_MS, ("group", "tick"))

    def _load_record(self, h: rec.BatchHeader, r: rec.Record) -> None:
        if r.key is None or r.value is None:
            return
        key = json.loads(r.key)
        if key.get("type") == "group":
            self._load_group(key["group"], json.loads(r.value))
            return
        if key.get("type") != "offset":
            return
        tp = TopicPartition.parse(key["key"])
        offset = json.loads(r.value)["offset"]
        if h.is_transactional:
            self.pending_txn.setdefault(h.producer_id, {}).setdefault(key["group"], {})[tp] = offset
        else:
            self.groups.setdefault(key["group"], GroupState()).committed[tp] = offset

    def _load_group(self, group: str, d: dict) -> None:
        g = self.groups.setdefault(group, GroupState())
        now = self.broker._now_ms
        g.generation = d["generation"]
        g.protocol = d["protocol"]
        g.leader = d["leader"]
        g.members = {}
        g.static = {}
        for m in d["members"]:
            member = Member(m["id"], m["instance"], m["session"], m["rebalance"],
                            tuple((n, md.encode("latin-1")) for n, md in m["protocols"]), now,
                            m["assignment"].encode("latin-1"))
            g.members[member.member_id] = member
            if member.instance_id is not None:
                g.static[member.instance_id] = member.member_id
        g.state = STABLE if g.members else EMPTY

    def on_not_leader(self, partition: int) -> None:
        self._unload(partition)

    def _unload(self, partition: int) -> None:
        if partition not in self.loaded:
            return
        del self.loaded[partition]
        for g in [g for g in self.groups if self.partition_of(g) == partition]:
            del self.groups[g]
        for pid in list(self.pending_txn):
            groups = self.pending_txn[pid]
            for g in [g for g in groups if self.partition_of(g) == partition]:
                del groups[g]
            if not groups:
                del self.pending_txn[pid]
        keep = []
        for w in self.writes:
            if w.partition == partition:
                w.on_done(Errors.NOT_COORDINATOR)
            else:
                keep.append(w)
        self.writes = keep

    # ------------------------------------------------------------ durable writes

    def _write(self, now_ms: int, partition: int, batch: bytes, apply, on_done) -> None:
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        error, last = self.broker.append_internal(now_ms, tp, batch)
        if error is not Errors.NONE:
            on_done(Errors.NOT_COORDINATOR if error is Errors.NOT_COORDINATOR else error)
            return
        self.writes.append(_PendingWrite(partition, last + 1, apply, on_done))
        self.on_high_watermark(now_ms, partition)

    def on_high_watermark(self, now_ms: int, partition: int) -> None:
        if partition not in self.loaded or not self.writes:
            return
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        hw = self.broker.partitions[tp].log.high_watermark
        keep = []
        for w in self.writes:
            if w.partition == partition and hw >= w.required_offset:
                if self.broker.isr_satisfied(tp):
                    w.apply()
                    w.on_done(Errors.NONE)
                else:
                    w.on_done(Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
            else:
                keep.append(w)
        self.writes = keep

    # ------------------------------------------------------------ transactions

    def on_marker(self, partition: int, producer_id: int, commit: bool) -> None:
        """A transaction marker on one of our partitions is committed (HW passed it)."""
        if partition in self.loaded:
            self._end_txn(partition, producer_id, commit)

    def _end_txn(self, partition: int, producer_id: int, commit: bool) -> None:
        groups = self.pending_txn.get(producer_id)
        if not groups:
            return
        for g in [g for g in groups if self.partition_of(g) == partition]:
            offsets = groups.pop(g)
            if commit:
                self.groups.setdefault(g, GroupState()).committed.update(offsets)
        if not groups:
            del self.pending_txn[producer_id]

    # ------------------------------------------------------------ requests

    # ------------------------------------------------------------ membership

    def _new_member_id(self, src: int, instance_id: str | None) -> str:
        self._next_member += 1
        epoch = max(self.loaded.values(), default=0)
        return f"{instance_id or 'consumer'}-{src}-{self.broker.node_id}.{epoch}.{self._next_member}"

    def join_group(self, now_ms: int, src: int, req: JoinGroupRequest) -> None:
        def answer(error: Errors, member_id: str = "") -> None:
            self.broker.send(src, JoinGroupResponse(req.correlation_id, error, member_id=member_id))

        error = self._owns(req.group_id)
        if error is not Errors.NONE:
            answer(error)
            return
        if not req.protocols:
            answer(Errors.INCONSISTENT_GROUP_PROTOCOL)
            return
        g = self.groups.setdefault(req.group_id, GroupState())
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
        known = member_id in g.members
        if member_id in g.pending or not member_id:
            g.pending.discard(member_id)
            member_id = member_id or self._new_member_id(src, req.group_instance_id)
            g.members[member_id] = Member(member_id, req.group_instance_id, req.session_timeout_ms,
                                          req.rebalance_timeout_ms, req.protocols, now_ms)
            if req.group_instance_id is not None:
                g.static[req.group_instance_id] = member_id
        m = g.members[member_id]
        m.last_heartbeat_ms = now_ms
        if known and self._answers_current_generation(src, req, g, m):
            return
        m.protocols = req.protocols
        m.session_timeout_ms = req.session_timeout_ms
        m.rebalance_timeout_ms = req.rebalance_timeout_ms
        if m.join is not None:
            self.broker.send(m.join[0], JoinGroupResponse(m.join[1], Errors.UNKNOWN_MEMBER_ID))
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
        members = tuple((mid, self._metadata(x, g.protocol)) for mid, x in g.members.items()) \
            if m.member_id == g.leader and g.state == COMPLETING else ()
        self.broker.send(src, JoinGroupResponse(req.correlation_id, Errors.NONE, g.generation, g.protocol,
                                                g.leader, m.member_id, members))
        return True

    def _static_rejoin(self, now_ms: int, src: int, req: JoinGroupRequest, g: GroupState,
                       old_id: str) -> None:
        """A static member back within its session: a new member id in the old one's place,
        same assignment, no rebalance (unless one is under way anyway)."""
        old = g.members.pop(old_id)
        if old.join is not None:
            self.broker.send(old.join[0], JoinGroupResponse(old.join[1], Errors.FENCED_INSTANCE_ID))
        if old.sync is not None:
            self.broker.send(old.sync[0], SyncGroupResponse(old.sync[1], Errors.FENCED_INSTANCE_ID))
        new_id = self._new_member_id(src, req.group_instance_id)
        assert req.group_instance_id is not None
        m = Member(new_id, req.group_instance_id, req.session_timeout_ms, req.rebalance_timeout_ms,
                   req.protocols, now_ms, old.assignment)
        g.members[new_id] = m
        g.static[req.group_instance_id] = new_id
        if g.leader == old_id:
            g.leader = new_id
        mark("group-static-member-replaced")
        self.broker.event("group-static-rejoin", group=req.group_id, instance=req.group_instance_id,
                          member=new_id, replaced=old_id, generation=g.generation)
        if g.state == STABLE:
            members = tuple((mid, self._metadata(x, g.protocol)) for mid, x in g.members.items()) \
                if g.leader == new_id else ()
            generation = g.generation

            def stored(error: Errors) -> None:
                # the new member id is stored before it is handed out, so that a coordinator
                # failover does not bring the old one back and fence the member
                if error is not Errors.NONE:
                    self.broker.send(src, JoinGroupResponse(req.correlation_id, Errors.NOT_COORDINATOR))
                else:
                    self.broker.send(src, JoinGroupResponse(req.correlation_id, Errors.NONE,
                                                            generation, g.protocol, g.leader,
                                                            new_id, members))

            self._persist(now_ms, req.group_id, g, stored)
            return
        m.join = (src, req.correlation_id)
        self._prepare_rebalance(now_ms, req.group_id, g, f"{new_id} replaced {old_id}")
        self._maybe_complete_join(now_ms, req.group_id, g)

    @staticmethod
    def _metadata(m: Member, protocol: str) -> bytes:
        for name, md in m.protocols:
            if name == protocol:
                return md
        return b""

    def _prepare_rebalance(self, now_ms: int, group: str, g: GroupState, reason: str) -> None:
        if g.state == PREPARING:
            return
        for m in g.members.values():
            if m.sync is not None:
                self.broker.send(m.sync[0], SyncGroupResponse(m.sync[1], Errors.REBALANCE_IN_PROGRESS))
                m.sync = None
        g.state = PREPARING
        g.rebalance_deadline_ms = now_ms + max((m.rebalance_timeout_ms for m in g.members.values()),
                                               default=0)
        self.broker.event("group-rebalance", group=group, generation=g.generation, reason=reason)

    def _maybe_complete_join(self, now_ms: int, group: str, g: GroupState, force: bool = False) -> None:
        if g.state != PREPARING:
            return
        if not force and any(m.join is None for m in g.members.values()):
            return
        for mid in [mid for mid, m in g.members.items() if m.join is None]:
            self._remove(g, mid)  # did not rejoin within the rebalance timeout
        g.generation += 1
        if not g.members:
            g.state, g.leader, g.protocol = EMPTY, "", ""
            self.broker.event("group-generation", group=group, generation=g.generation, members=[])
            self._persist(now_ms, group, g)
            return
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.protocol = self._select_protocol(g)
        g.state = COMPLETING
        self.broker.event("group-generation", group=group, generation=g.generation,
                          members=sorted(g.members), leader=g.leader, protocol=g.protocol)
        for mid, m in g.members.items():
            assert m.join is not None
            src, corr = m.join
            m.join = None
            if not g.protocol:
                self.broker.send(src, JoinGroupResponse(corr, Errors.INCONSISTENT_GROUP_PROTOCOL))
                continue
            members = tuple((x_id, self._metadata(x, g.protocol)) for x_id, x in g.members.items()) \
                if mid == g.leader else ()
            self.broker.send(src, JoinGroupResponse(corr, Errors.NONE, g.generation, g.protocol,
                                                    g.leader, mid, members))
        if not g.protocol:
            g.members.clear()
            g.static.clear()
            g.state = EMPTY

    @staticmethod
    def _select_protocol(g: GroupState) -> str:
        """The protocol every member supports that most members prefer (each votes for its own
        first choice among them, as Kafka's ClassicGroup.selectProtocol); a tie goes to the
        leader's preference (Kafka's goes to whichever its hash map yields first). "" when
        the members have no protocol in common."""
        common = set.intersection(*({n for n, _md in m.protocols} for m in g.members.values()))
        votes: dict[str, int] = {}
        for m in g.members.values():
            choice = next((n for n, _md in m.protocols if n in common), None)
            if choice is not None:
                votes[choice] = votes.get(choice, 0) + 1
        order = [n for n, _md in g.members[g.leader].protocols if n in common]
        return max(order, key=lambda n: (votes.get(n, 0), -order.index(n)), default="")

    def _remove(self, g: GroupState, member_id: str) -> None:
        m = g.members.pop(member_id, None)
        if m is None:
            return
        if m.instance_id is not None and g.static.get(m.instance_id) == member_id:
            del g.static[m.instance_id]
        if m.join is not None:
            self.broker.send(m.join[0], JoinGroupResponse(m.join[1], Errors.UNKNOWN_MEMBER_ID))
        if m.sync is not None:
            self.broker.send(m.sync[0], SyncGroupResponse(m.sync[1], Errors.UNKNOWN_MEMBER_ID))

    def sync_group(self, now_ms: int, src: int, req: SyncGroupRequest) -> None:
        def answer(error: Errors, assignment: bytes = b"") -> None:
            self.broker.send(src, SyncGroupResponse(req.correlation_id, error, assignment))

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
                self._prepare_rebalance(self.broker._now_ms, req.group_id, g, "assignment not stored")
                return
            g.state = STABLE
            self.broker.event("group-stable", group=req.group_id, generation=generation,
                              assignment={mid: x.assignment.decode("latin-1")
                                          for mid, x in g.members.items()})
            for x in g.members.values():
                if x.sync is not None:
                    self.broker.send(x.sync[0], SyncGroupResponse(x.sync[1], Errors.NONE, x.assignment))
                    x.sync = None

        self._persist(now_ms, req.group_id, g, done)

    def _persist(self, now_ms: int, group: str, g: GroupState, on_done=None) -> None:
        value = {"generation": g.generation, "protocol": g.protocol, "leader": g.leader,
                 "members": [{"id": m.member_id, "instance": m.instance_id,
                              "session": m.session_timeout_ms, "rebalance": m.rebalance_timeout_ms,
                              "assignment": m.assignment.decode("latin-1"),
                              "protocols": [[n, md.decode("latin-1")] for n, md in m.protocols]}
                             for m in g.members.values()]}
        batch = rec.encode_batch([rec.RecordInput(
            json.dumps({"type": "group", "group": group}, sort_keys=True).encode(),
            json.dumps(value, sort_keys=True).encode(), (), now_ms)])
        self._write(now_ms, self.partition_of(group), batch, lambda: None,
                    on_done if on_done is not None else (lambda e: None))

    def heartbeat(self, now_ms: int, src: int, req: HeartbeatRequest) -> None:
        def answer(error: Errors) -> None:
            self.broker.send(src, HeartbeatResponse(req.correlation_id, error))

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
        self.broker.send(src, LeaveGroupResponse(req.correlation_id, error))

    def timer(self, now_ms: int, key: tuple) -> None:
        if key != ("tick",):
            return
        if not self.loaded:
            self._ticking = False
            return
        self.broker.set_timer(TICK_MS, ("group", "tick"))
        if not self.broker.lease_valid():
            return
        for group in sorted(self.groups):
            if self.partition_of(group) not in self.loaded:
                continue
            g = self.groups[group]
            expired = [mid for mid, m in g.members.items()
                       if m.join is None and now_ms - m.last_heartbeat_ms > m.session_timeout_ms]
            for mid in expired:
                mark("group-member-expired")
                self.broker.event("group-member-expired", group=group, member=mid,
                                  generation=g.generation)
                self._remove(g, mid)
            if expired and g.state in (STABLE, COMPLETING):
                self._prepare_rebalance(now_ms, group, g, f"sessions expired: {expired}")
            if g.state == PREPARING:
                self._maybe_complete_join(now_ms, group, g, force=now_ms >= g.rebalance_deadline_ms)
            if expired and g.state == EMPTY:
                self._persist(now_ms, group, g)

    # ------------------------------------------------------------ offsets

    def _check_member(self, g: GroupState | None, generation: int, member_id: str) -> Errors:
        """OffsetCommit's fencing: a member of the current generation, or no group at all."""
        if generation < 0 and not member_id:
            return Errors.NONE if g is None or not g.members else Errors.UNKNOWN_MEMBER_ID
        if self.unfenced:
            return Errors.NONE
        if g is None or member_id not in g.members:
            mark("group-unknown-member")
            return Errors.UNKNOWN_MEMBER_ID
        if generation != g.generation:
            mark("group-illegal-generation")
            return Errors.ILLEGAL_GENERATION
        if g.state == COMPLETING:
            # (while preparing, members of the current generation may still commit: that is
            # how an eager member commits before it rejoins)
            mark("group-rebalance-in-progress")
            return Errors.REBALANCE_IN_PROGRESS
        return Errors.NONE

    def _check_txn_member(self, g: GroupState | None, req: TxnOffsetCommitRequest) -> Errors:
        """KIP-447's fencing of a transactional commit (Kafka's ClassicGroup.validateOffsetCommit):
        one that names a generation, a member or an instance must come from a current member
        of the current generation; one that names none (a producer outside the group's
        protocol, or a client before TxnOffsetCommit v3) is accepted."""
        empty = g is None or not g.members
        if (req.generation_id < 0 and empty) or self.unfenced:
            return Errors.NONE
        if req.generation_id < 0 and not req.member_id and req.group_instance_id is None:
            return Errors.NONE
        if g is None:
            return Errors.UNKNOWN_MEMBER_ID
        if req.group_instance_id is not None:
            known = g.static.get(req.group_instance_id)
            if known is None:
                return Errors.UNKNOWN_MEMBER_ID
            if known != req.member_id:
                return Errors.FENCED_INSTANCE_ID
        if req.member_id not in g.members:
            return Errors.UNKNOWN_MEMBER_ID
        if req.generation_id != g.generation:
            return Errors.ILLEGAL_GENERATION
        return Errors.NONE

    def offset_commit(self, now_ms: int, src: int, req: OffsetCommitRequest) -> None:
        def answer(error: Errors) -> None:
            self.broker.send(src, OffsetCommitResponse(req.correlation_id, error))

        error = self._owns(req.group_id)
        if error is Errors.NONE:
            error = self._check_member(self.groups.get(req.group_id), req.generation_id, req.member_id)
        if error is not Errors.NONE:
            answer(error)
            return
        if not req.offsets:
            answer(Errors.NONE)
            return
        group = req.group_id
        batch = rec.encode_batch(_encode(group, req.offsets, now_ms))

        def apply() -> None:
            self.groups.setdefault(group, GroupState()).committed.update(dict(req.offsets))

        self._write(now_ms, self.partition_of(group), batch, apply, answer)

    def txn_offset_commit(self, now_ms: int, src: int, req: TxnOffsetCommitRequest) -> None:
        def answer(error: Errors) -> None:
            self.broker.send(src, TxnOffsetCommitResponse(req.correlation_id, error))

        error = self._owns(req.group_id)
        if error is not Errors.NONE:
            answer(error)
            return
        partition = self.partition_of(req.group_id)
        tp = TopicPartition(OFFSETS_TOPIC, partition)
        log = self.broker.partitions[tp].log
        if log.producer_state.check_marker(req.producer_id, req.producer_epoch) is not Errors.NONE:
            answer(Errors.PRODUCER_FENCED)
            return

        def verified(error: Errors) -> None:
            if error is not Errors.NONE:
                answer(error)
                return
            if self._owns(req.group_id) is not Errors.NONE:
                answer(Errors.NOT_COORDINATOR)
                return
            if log.producer_state.check_marker(req.producer_id, req.producer_epoch) is not Errors.NONE:
                answer(Errors.PRODUCER_FENCED)
                return
            error = self._check_txn_member(self.groups.get(req.group_id), req)
            if error is not Errors.NONE:
                answer(error)
                return
            batch = rec.encode_batch(_encode(req.group_id, req.offsets, now_ms),
                                     producer_id=req.producer_id, producer_epoch=req.producer_epoch,
                                     transactional=True)

            def apply() -> None:
                self.pending_txn.setdefault(req.producer_id, {}).setdefault(
                    req.group_id, {}).update(dict(req.offsets))

            self._write(now_ms, partition, batch, apply, answer)

        if (Bug.TXN_UNFENCED_REQUESTS in self.broker.bugs
                or log.producer_state.txn_open(req.producer_id)):
            verified(Errors.NONE)
        else:
            self.broker.verify_txn(req.transactional_id, req.producer_id, req.producer_epoch, tp,
                                   verified)

    def offset_fetch(self, src: int, req: OffsetFetchRequest) -> None:
        error = self._owns(req.group_id)
        if error is not Errors.NONE:
            self.broker.send(src, OffsetFetchResponse(req.correlation_id, error))
            return
        if req.require_stable:
            for groups in self.pending_txn.values():
                pending = groups.get(req.group_id, {})
                if any(tp in pending for tp in req.partitions):
                    self.broker.send(src, OffsetFetchResponse(req.correlation_id,
                                                              Errors.UNSTABLE_OFFSET_COMMIT))
                    return
        committed = self.groups.get(req.group_id, GroupState()).committed
        self.broker.send(src, OffsetFetchResponse(
            req.correlation_id, Errors.NONE,
            tuple((tp, committed.get(tp, -1)) for tp in req.partitions)))
