"""A consumer group as its coordinator keeps it, its phases, and its records in the log.

Phases of the classic rebalance protocol (Kafka's ``GroupState``); :data:`TRANSITIONS` is the
table, and a change it does not list is an error (:class:`IllegalTransition`)::

    Empty -> PreparingRebalance -> CompletingRebalance -> Stable -> PreparingRebalance ...

* a join, a leave or an expired session prepares a rebalance (from any phase but that one);
* when every member has joined, or the rebalance timeout passed, the next generation
  completes it: CompletingRebalance, or Empty when nobody is left;
* the leader's assignment, once committed to the log, makes the group Stable;
* members without a protocol in common end the generation at once: Empty.

The fencing of offset commits lives here too (:func:`check_member`, :func:`check_txn_member`).

Records (our own format, JSON): key ``{"type": "offset", "group": g, "key": "topic:p"}``,
value ``{"offset": n}``; key ``{"type": "group", "group": g}``, value the generation,
protocol, leader and members with their assignments. Loading a record replaces the group's
state wholesale (it is not a transition).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import Enum

from mypy_extensions import mypyc_attr

from reference import records as rec
from reference.consumer_group import ConsumerGroup
from reference.errors import Errors
from reference.group_messages import TxnOffsetCommitRequest
from reference.marks import mark
from reference.messages import TopicPartition
from reference.share_group import ShareGroup


class GroupPhase(Enum):
    EMPTY = "Empty"
    PREPARING = "PreparingRebalance"
    COMPLETING = "CompletingRebalance"
    STABLE = "Stable"


EMPTY, PREPARING = GroupPhase.EMPTY, GroupPhase.PREPARING
COMPLETING, STABLE = GroupPhase.COMPLETING, GroupPhase.STABLE

TRANSITIONS: dict[GroupPhase, frozenset[GroupPhase]] = {
    EMPTY: frozenset({PREPARING}),
    PREPARING: frozenset({COMPLETING, EMPTY}),
    COMPLETING: frozenset({STABLE, PREPARING, EMPTY}),
    STABLE: frozenset({PREPARING}),
}


@mypyc_attr(native_class=False)  # an exception that subclasses a built-in one stays a Python class when compiled
class IllegalTransition(AssertionError):
    """A phase change the table does not allow: a bug of the coordinator, never the client's."""


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

    def metadata(self, protocol: str) -> bytes:
        """The member's subscription metadata for ``protocol`` (b"" without it)."""
        for name, md in self.protocols:
            if name == protocol:
                return md
        return b""


@dataclass(slots=True)
class GroupState:
    committed: dict[TopicPartition, int] = field(default_factory=dict)
    state: GroupPhase = EMPTY
    generation: int = 0
    protocol: str = ""
    leader: str = ""
    members: dict[str, Member] = field(default_factory=dict)  # in join order
    static: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    rebalance_deadline_ms: int = 0
    pending: set[str] = field(default_factory=set)  # KIP-394: member ids given out, not yet joined
    modern: ConsumerGroup | None = None  # the group as a KIP-848 consumer group, if it was one
    share: ShareGroup | None = None  # the group as a KIP-932 share group, if it was one

    def move(self, phase: GroupPhase, group: str) -> None:
        if phase not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"group {group!r}: {self.state.value} -> {phase.value}")
        self.state = phase

    def select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (each votes for its own
        first choice among them, as Kafka's ClassicGroup.selectProtocol); a tie goes to the
        leader's preference (Kafka's goes to whichever its hash map yields first). "" when
        the members have no protocol in common."""
        common = set.intersection(*({n for n, _md in m.protocols} for m in self.members.values()))
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = next((n for n, _md in m.protocols if n in common), None)
            if choice is not None:
                votes[choice] = votes.get(choice, 0) + 1
        order = [n for n, _md in self.members[self.leader].protocols if n in common]
        return max(order, key=lambda n: (votes.get(n, 0), -order.index(n)), default="")

    def members_metadata(self) -> tuple[tuple[str, bytes], ...]:
        """What the leader's JoinGroup answer lists: every member with its subscription."""
        return tuple((mid, m.metadata(self.protocol)) for mid, m in self.members.items())

    def load(self, d: dict, now_ms: int) -> None:
        """The group as a group record (:func:`group_record`) has it."""
        self.generation = d["generation"]
        self.protocol = d["protocol"]
        self.leader = d["leader"]
        self.members = {}
        self.static = {}
        for m in d["members"]:
            member = Member(m["id"], m["instance"], m["session"], m["rebalance"],
                            tuple((n, md.encode("latin-1")) for n, md in m["protocols"]), now_ms,
                            m["assignment"].encode("latin-1"))
            self.members[member.member_id] = member
            if member.instance_id is not None:
                self.static[member.instance_id] = member.member_id
        self.state = STABLE if self.members else EMPTY


def check_member(g: GroupState | None, generation: int, member_id: str, unfenced: bool) -> Errors:
    """OffsetCommit's fencing: a member of the current generation, or no group at all
    (``unfenced``: the bug switch group-generation-unfenced skips it)."""
    if generation < 0 and not member_id:
        return Errors.NONE if g is None or not g.members else Errors.UNKNOWN_MEMBER_ID
    if unfenced:
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


def check_txn_member(g: GroupState | None, req: TxnOffsetCommitRequest, unfenced: bool) -> Errors:
    """KIP-447's fencing of a transactional commit (Kafka's ClassicGroup.validateOffsetCommit):
    one that names a generation, a member or an instance must come from a current member
    of the current generation; one that names none (a producer outside the group's
    protocol, or a client before TxnOffsetCommit v3) is accepted."""
    empty = g is None or not g.members
    if (req.generation_id < 0 and empty) or unfenced:
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


def offset_records(group: str, offsets: tuple[tuple[TopicPartition, int], ...],
                   now_ms: int) -> list[rec.RecordInput]:
    return [rec.RecordInput(json.dumps({"type": "offset", "group": group, "key": tp.key},
                                       sort_keys=True).encode(),
                            json.dumps({"offset": off}).encode(), (), now_ms)
            for tp, off in offsets]


def group_record(group: str, g: GroupState, now_ms: int) -> rec.RecordInput:
    value = {"generation": g.generation, "protocol": g.protocol, "leader": g.leader,
             "members": [{"id": m.member_id, "instance": m.instance_id,
                          "session": m.session_timeout_ms, "rebalance": m.rebalance_timeout_ms,
                          "assignment": m.assignment.decode("latin-1"),
                          "protocols": [[n, md.decode("latin-1")] for n, md in m.protocols]}
                         for m in g.members.values()]}
    return rec.RecordInput(json.dumps({"type": "group", "group": group}, sort_keys=True).encode(),
                           json.dumps(value, sort_keys=True).encode(), (), now_ms)
