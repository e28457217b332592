"""A sans-IO share consumer (KIP-932), as Kafka's KafkaShareConsumer in explicit
acknowledgement mode.

Theory of operation
-------------------
The member joins its share group with ShareGroupHeartbeat (epoch 0, its own member id, the
topics it subscribes to) at the group coordinator, and heartbeats at the interval the
coordinator gives; the answers carry its assignment, which simply replaces the last one (no
revocation: in a share group partitions move at once). A fenced or unknown member joins again
with epoch 0 and the same id.

For records it keeps one share session with each leader of its partitions: the first
ShareFetch opens it (epoch 0) and names the partitions; each later request (ShareFetch or
ShareAcknowledge) carries the session's next epoch; one request at a time per leader, so the
epochs stay in order. A session error, or a request without an answer, starts the session
over. :meth:`poll` sends a ShareFetch to every leader with none in flight;
:meth:`take_records` returns what came back (each record with its delivery count).

The application acknowledges each record (:meth:`acknowledge`: accept, release or reject);
:meth:`commit` sends them, in a ShareAcknowledge to the leader that delivered each record
(as the Java client, never redirected), and :attr:`commit_result` is each partition's
answer once every leader answered (``REQUEST_TIMED_OUT`` where none came: unknown).
:meth:`close` sends what is left with the session's final epoch (-1: the leader releases
everything the member still holds) and leaves the group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from reference import records as rec
from reference.client import ClientNode
from reference.errors import Errors
from reference.frozen import frozen
from reference.messages import (
    COORDINATOR_GROUP,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataResponse,
    TopicPartition,
)
from reference.share_messages import (
    FINAL_SESSION_EPOCH,
    INITIAL_SESSION_EPOCH,
    AckBatch,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)

_SESSION_ERRORS = {Errors.SHARE_SESSION_NOT_FOUND, Errors.INVALID_SHARE_SESSION_EPOCH}


@dataclass
class ShareConsumerConfig:
    group_id: str
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    heartbeat_interval_ms: int = 5_000  # until the coordinator says
    max_records: int = 500  # max.poll.records


@frozen
class SharedRecord:
    tp: TopicPartition
    offset: int
    value: bytes | None
    delivery_count: int
    node: int  # the leader that delivered it (its acknowledgement goes there)
    fetched_ms: int = -1  # when the ShareFetch that acquired it was sent


def nodes_of(records: list[SharedRecord]) -> dict[str, int]:
    """The broker each partition's records came from (its acknowledgements go there), by
    partition key; a partition whose records came from more than one is left out."""
    nodes: dict[str, int] = {}
    for r in records:
        nodes[r.tp.key] = r.node if nodes.get(r.tp.key, r.node) == r.node else -1
    return {k: n for k, n in nodes.items() if n >= 0}


@dataclass
class _Leader:
    """This member's share session with one broker."""

    epoch: int = INITIAL_SESSION_EPOCH
    partitions: frozenset[TopicPartition] = frozenset()  # named to the session
    in_flight: int = -1  # the correlation id of the request out
    in_flight_acks: tuple = ()  # what that request acknowledges (when a ShareAcknowledge)
    fetching: bool = False  # that request is a ShareFetch
    sent_ms: int = -1  # when it was sent


class ShareConsumer(ClientNode):
    CORRELATION_BASE: ClassVar[int] = 3_000_000

    def __init__(self, node_id: int, bootstrap: list[int], config: ShareConsumerConfig, member_id: str) -> None:
        super().__init__(node_id, bootstrap, config.request_timeout_ms, config.retry_backoff_ms)
        self.config = config
        self.member_id = member_id
        self.member_epoch = -1  # not a member
        self.topics: tuple[str, ...] = ()
        self.assignment: frozenset[TopicPartition] = frozenset()
        self.coordinator = -1
        self.records: list[SharedRecord] = []
        # ShareFetch requests whose answers never came (timed out): each may have acquired
        # records at its leader, spending a delivery of each that this consumer never saw
        self.lost_fetches = 0
        self._lost_told = 0
        self.commit_result: dict[TopicPartition, Errors] | None = None
        self.closed = False
        self._leaders: dict[TopicPartition, int] = {}
        self._sessions: dict[int, _Leader] = {}
        self._acks: dict[int, dict[TopicPartition, dict[int, int]]] = {}  # node -> tp -> offset -> type
        self._committing: dict[int, dict[TopicPartition, Errors] | None] = {}  # node -> its answers
        self._hb_corr = -1
        self._find_corr = -1
        self._hb_seq = 0
        self._interval_ms = config.heartbeat_interval_ms

    # ------------------------------------------------------------ API

    def start(self, now_ms: int) -> None:
        self._now_ms = now_ms
        self._refresh_metadata()

    def subscribe(self, now_ms: int, topics: list[str]) -> None:
        self._now_ms = now_ms
        self.topics = tuple(sorted(topics))
        self.member_epoch = 0
        self._heartbeat()

    def poll(self, now_ms: int) -> None:
        """Ask every leader of an assigned partition for records (one request out a leader)."""
        self._now_ms = now_ms
        if self.closed:
            return
        by_node: dict[int, set[TopicPartition]] = {}
        for tp in self.assignment:
            node = self._leaders.get(tp, -1)
            if node < 0:
                self._refresh_metadata()
                continue
            by_node.setdefault(node, set()).add(tp)
        for node in sorted(set(by_node) | set(self._sessions)):
            s = self._sessions.setdefault(node, _Leader())
            if s.in_flight < 0 and (by_node.get(node) or s.partitions):
                self._send_fetch(node, s, frozenset(by_node.get(node, ())))

    def fetches_in_flight(self) -> int:
        """ShareFetch requests out, unanswered: lost if the consumer goes now (a crash or a
        close), though the leaders may acquire records for them."""
        return sum(s.in_flight >= 0 and s.fetching for s in self._sessions.values())

    def take_lost(self, leaving: bool = False) -> int:
        """ShareFetch answers lost since the last call (``leaving``: the consumer goes now, so
        those still out are lost too): what a history's ``lost_fetches`` op field says."""
        n = self.lost_fetches - self._lost_told + (self.fetches_in_flight() if leaving else 0)
        self._lost_told = self.lost_fetches
        return n

    def take_records(self) -> list[SharedRecord]:
        out, self.records = self.records, []
        return out

    def acknowledge(self, r: SharedRecord, ack_type: int) -> None:
        self._acks.setdefault(r.node, {}).setdefault(r.tp, {})[r.offset] = ack_type

    def commit(self) -> None:
        """Send every acknowledgement not sent yet; :attr:`commit_result` once all answered."""
        self.commit_result = None
        self._committing = {node: None for node, by_tp in self._acks.items() if by_tp}
        if not self._committing:
            self.commit_result = {}
        for node in sorted(self._committing):
            self._maybe_send_acks(node)

    def close(self) -> None:
        """Final acknowledgements (the session's last request: what the member still holds
        there is released), and leave the group."""
        for node, s in sorted(self._sessions.items()):
            if s.epoch != INITIAL_SESSION_EPOCH:
                acks = self._ack_batches(self._acks.pop(node, {}))
                self.send(node, ShareAcknowledgeRequest(self._next_corr(), self.config.group_id, self.member_id,
                                                        FINAL_SESSION_EPOCH, acks))
        if self.coordinator >= 0 and self.member_epoch > 0:
            self.send(self.coordinator, ShareGroupHeartbeatRequest(self._next_corr(), self.config.group_id,
                                                                   self.member_id, -1))
        self.closed = True
        self.member_epoch = -1
        self._sessions = {}
        self.assignment = frozenset()

    # ------------------------------------------------------------ records

    def _send_fetch(self, node: int, s: _Leader, wanted: frozenset[TopicPartition]) -> None:
        corr = self._next_corr()
        new = wanted if s.epoch == INITIAL_SESSION_EPOCH else wanted - s.partitions
        forgotten = () if s.epoch == INITIAL_SESSION_EPOCH else tuple(sorted(s.partitions - wanted))
        s.partitions = wanted
        s.in_flight, s.in_flight_acks, s.sent_ms, s.fetching = corr, (), self._now_ms, True
        self.send(node, ShareFetchRequest(corr, self.config.group_id, self.member_id, s.epoch,
                                          self.config.max_records, tuple(sorted(new)), forgotten))
        self._timeout(node, self.config.request_timeout_ms, ("share-request", node, corr))

    def _on_fetch(self, src: int, resp: ShareFetchResponse) -> None:
        s = self._sessions.get(src)
        if s is None or resp.correlation_id != s.in_flight:
            return
        s.in_flight = -1
        if resp.error is not Errors.NONE:
            self._restart(s, resp.error)
        else:
            s.epoch = _next_epoch(s.epoch)
            for p in resp.partitions:
                if p.error is not Errors.NONE:
                    self._refresh_metadata()
                    continue
                self.records += _acquired(p, src, s.sent_ms)
        self._maybe_send_acks(src)

    def _restart(self, s: _Leader, error: Errors) -> None:
        """The session is gone (or its state unknown): the next request opens a new one."""
        if error in _SESSION_ERRORS or error is Errors.REQUEST_TIMED_OUT:
            s.epoch, s.partitions = INITIAL_SESSION_EPOCH, frozenset()
        self._refresh_metadata()

    # ------------------------------------------------------------ acknowledgements

    def _maybe_send_acks(self, node: int) -> None:
        if node not in self._committing or self._committing[node] is not None:
            return
        s = self._sessions.setdefault(node, _Leader())
        if s.in_flight >= 0:
            return  # after the request out (its answer calls again)
        by_tp = self._acks.pop(node, {})
        acks = self._ack_batches(by_tp)
        if s.epoch == INITIAL_SESSION_EPOCH:  # no session there (it was lost): the leader cannot take them
            self._committing[node] = {tp: Errors.SHARE_SESSION_NOT_FOUND for tp, _b in acks}
            self._commit_done()
            return
        corr = self._next_corr()
        s.in_flight, s.in_flight_acks, s.fetching = corr, tuple(tp for tp, _b in acks), False
        self.send(node, ShareAcknowledgeRequest(corr, self.config.group_id, self.member_id, s.epoch, acks))
        self._timeout(node, self.config.request_timeout_ms, ("share-request", node, corr))

    @staticmethod
    def _ack_batches(by_tp: dict[TopicPartition, dict[int, int]]) -> tuple[tuple[TopicPartition, tuple[AckBatch, ...]], ...]:
        """Each partition's acknowledgements as batches of consecutive offsets, a type each."""
        out = []
        for tp, types in sorted(by_tp.items()):
            batches: list[AckBatch] = []
            for o in sorted(types):
                if batches and batches[-1][1] == o - 1:
                    first, _last, ts = batches[-1]
                    batches[-1] = (first, o, (*ts, types[o]))
                else:
                    batches.append((o, o, (types[o],)))
            out.append((tp, tuple(batches)))
        return tuple(out)

    def _on_acknowledge(self, src: int, resp: ShareAcknowledgeResponse) -> None:
        s = self._sessions.get(src)
        if s is None or resp.correlation_id != s.in_flight:
            return
        tps, s.in_flight, s.in_flight_acks = s.in_flight_acks, -1, ()
        if resp.error is not Errors.NONE:
            self._restart(s, resp.error)
            self._answered(src, {tp: resp.error for tp in tps})
        else:
            s.epoch = _next_epoch(s.epoch)
            self._answered(src, dict(resp.partitions))

    def _answered(self, node: int, errors: dict[TopicPartition, Errors]) -> None:
        if node in self._committing and self._committing[node] is None:
            self._committing[node] = errors
            self._commit_done()

    def _commit_done(self) -> None:
        if self._committing and all(v is not None for v in self._committing.values()):
            result: dict[TopicPartition, Errors] = {}
            for errors in self._committing.values():
                result.update(errors or {})
            self.commit_result = result
            self._committing = {}

    # ------------------------------------------------------------ membership

    def _heartbeat(self) -> None:
        if self.closed or self.member_epoch < 0 or self._hb_corr >= 0:
            return
        if self.coordinator < 0:
            self._find_coordinator()
            return
        self._hb_corr = self._next_corr()
        full = self.member_epoch == 0
        self.send(self.coordinator, ShareGroupHeartbeatRequest(self._hb_corr, self.config.group_id, self.member_id,
                                                               self.member_epoch, self.topics if full else None))
        self._timeout(self.coordinator, self.config.request_timeout_ms, ("share-hb-timeout", self._hb_corr))

    def _on_heartbeat(self, resp: ShareGroupHeartbeatResponse) -> None:
        if resp.correlation_id != self._hb_corr:
            return
        self._hb_corr = -1
        if resp.error is Errors.NONE and self.member_epoch >= 0:
            self.member_epoch = resp.member_epoch
            self._interval_ms = resp.heartbeat_interval_ms or self._interval_ms
            if resp.assignment is not None:
                self.assignment = frozenset(resp.assignment)
        elif resp.error in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_MEMBER_EPOCH):
            self.member_epoch = 0 if self.member_epoch >= 0 else -1  # join again, the same id
            self.assignment = frozenset()
        elif resp.error in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE):
            self.coordinator = -1
        self._arm_heartbeat(self._interval_ms if resp.error is Errors.NONE else self.config.retry_backoff_ms)

    def _arm_heartbeat(self, delay_ms: int) -> None:
        self._hb_seq += 1
        self.set_timer(delay_ms, ("share-hb", self._hb_seq))

    def _find_coordinator(self) -> None:
        if self._find_corr >= 0:
            return
        self._find_corr = self._next_corr()
        target = self.bootstrap[self._find_corr % len(self.bootstrap)]
        self.send(target, FindCoordinatorRequest(self._find_corr, self.config.group_id, COORDINATOR_GROUP))
        self._timeout(target, self.config.request_timeout_ms, ("share-find", self._find_corr))

    def _on_find(self, resp: FindCoordinatorResponse) -> None:
        if resp.correlation_id != self._find_corr:
            return
        self._find_corr = -1
        if resp.error is Errors.NONE:
            self.coordinator = resp.node_id
            self._heartbeat()
        else:
            self._arm_heartbeat(self.config.retry_backoff_ms)

    # ------------------------------------------------------------ inputs

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self._now_ms = now_ms
        match message:
            case ShareFetchResponse():
                self._on_fetch(src, message)
            case ShareAcknowledgeResponse():
                self._on_acknowledge(src, message)
            case ShareGroupHeartbeatResponse():
                self._on_heartbeat(message)
            case FindCoordinatorResponse():
                self._on_find(message)
            case MetadataResponse():
                self._on_metadata_response(now_ms, message)
            case _:
                pass

    def _metadata_changed(self, image) -> None:
        self._leaders = {s.tp: s.leader for s in image.partitions}

    def timer(self, now_ms: int, key: Any) -> None:
        self._now_ms = now_ms
        if self._on_metadata_timer(key):
            return
        match key:
            case ("share-hb", seq) if seq == self._hb_seq:
                self._heartbeat()
            case ("share-hb-timeout", corr) if corr == self._hb_corr:
                self._hb_corr = -1
                self._close_coordinator()
                self._arm_heartbeat(self.config.retry_backoff_ms)
            case ("share-find", corr) if corr == self._find_corr:
                self._find_corr = -1
                self._arm_heartbeat(self.config.retry_backoff_ms)
            case ("share-request", node, corr):
                s = self._sessions.get(node)
                if s is not None and s.in_flight == corr:
                    self.close_connection(node)  # no answer in time: a new connection (Kafka's NetworkClient)
                    self.lost_fetches += s.fetching  # its acquisitions (if any) unseen
                    tps, s.in_flight, s.in_flight_acks = s.in_flight_acks, -1, ()
                    self._restart(s, Errors.REQUEST_TIMED_OUT)
                    self._answered(node, {tp: Errors.REQUEST_TIMED_OUT for tp in tps})
            case _:
                pass


def _next_epoch(epoch: int) -> int:
    return epoch + 1 if epoch < 0x7FFFFFFF else 1


def _acquired(p, node: int, sent_ms: int) -> list[SharedRecord]:
    """The records of a partition's answer that were acquired for this member, with their
    delivery counts (the batches may hold others: those are not its to process)."""
    counts = {o: r.delivery_count for r in p.acquired for o in range(r.first_offset, r.last_offset + 1)}
    out = []
    for batch in p.records:
        try:
            for r in rec.decode_records(batch):
                if r.offset in counts:
                    out.append(SharedRecord(p.tp, r.offset, r.value, counts[r.offset], node, sent_ms))
        except rec.CorruptRecordError:
            continue
    return out
