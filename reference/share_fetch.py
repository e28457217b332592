"""ShareFetch and ShareAcknowledge at a partition's leader: share sessions, and the
share-partitions it keeps for the groups that read its partitions (Kafka's
SharePartitionManager).

Theory of operation
-------------------
A share consumer talks to each leader in a **share session** (one per group and member on a
broker): epoch 0 opens it (replacing an older one, whose acquisitions stay with the member,
as Kafka), each later ShareFetch or ShareAcknowledge carries the session's epoch, which goes
up by one, and -1 closes it, releasing every record the member still holds there. A fetch
reads every partition of the session.

The **share-partition** of a group and a partition this broker leads
(:class:`~reference.share_partition.SharePartition`) is loaded on the first fetch for it: its
state is read from the share coordinator of its key (ReadShareGroupState, which also records
this broker's leader epoch, fencing the leader before), and a start offset never set comes
from ``share_auto_offset_reset`` (earliest: the log start; latest: the high watermark). Until
then the fetch returns nothing for it. A fetch then acquires records from the partition's
log (up to the high watermark; with ``share_isolation_level`` read_committed up to the last
stable offset), each under a lock of ``share_record_lock_duration_ms``; control batches are
archived, never delivered, and so, read_committed, are the batches of aborted transactions.

An **acknowledgement** (in a ShareFetch before its fetch, or in a ShareAcknowledge) is checked
and begun in the share-partition, its new state written to the share coordinator
(WriteShareGroupState), and applied and answered only once that write succeeded; a write
that fails rolls it back. Locks that expire, and records released when a session closes,
are written too, but their change stands whatever the write does (as Kafka).

When the broker stops leading a partition, or leads it in a new epoch, its share-partitions
are dropped: a new leader loads them from the share coordinator, which has every
acknowledgement ever answered, and no acquisition (as Kafka, a lock does not survive its
leader).

Deviations from Kafka: a ShareFetch never waits for records (MaxWaitMs is not honoured:
the consumer polls again); the response lists every partition of the session; the in-flight
limit, batch sizes and record_limit acquisition are :class:`SharePartition`'s; RENEW and the
dead-letter queue are not modelled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from reference import records as rec
from reference.coordinator import partition_for
from reference.errors import Errors
from reference.marks import mark
from reference.messages import TopicPartition
from reference.share_messages import (
    FINAL_SESSION_EPOCH,
    INITIAL_SESSION_EPOCH,
    AckBatch,
    AcquiredRange,
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    ShareAcknowledgeRequest,
    ShareAcknowledgeResponse,
    ShareFetchRequest,
    ShareFetchResponse,
    SharePartitionData,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
    share_key,
)
from reference.topics import SHARE_STATE_TOPIC

PERSIST_TIMEOUT_MS = 5_000  # a share coordinator's answer not come by then: the write failed
EXPIRY_TICK_MS = 100
# a write's errors as the acknowledgement's: the coordinator moved or is down, or this broker
# is no longer the leader it recorded
_WRITE_ERRORS = {Errors.FENCED_LEADER_EPOCH: Errors.NOT_LEADER_OR_FOLLOWER,
                 Errors.FENCED_STATE_EPOCH: Errors.NOT_LEADER_OR_FOLLOWER}


class ShareHost(Protocol):
    """The broker as its share-partitions see it."""

    node_id: int
    bugs: frozenset[str]
    now_ms: int
    broker_epoch: int
    partitions: dict

    def send(self, dst: int, message: Any) -> None: ...

    def close_connection(self, peer: int) -> None:
        """Close the connection to ``peer`` (a request on it got no answer in time)."""

    def set_timer(self, delay_ms: float, key: Any) -> None: ...

    def corr(self) -> int: ...

    def leaders(self) -> dict[TopicPartition, int]: ...

    def not_led_here(self, tp: TopicPartition) -> Errors: ...


@dataclass
class Session:
    epoch: int
    partitions: set[TopicPartition] = field(default_factory=set)
    opener: int = -1  # the node (a served connection) whose request opened it


@dataclass
class Loaded:
    leader_epoch: int
    sp: Any = None  # the SharePartition; None while its state is read
    state_epoch: int = 0


class ShareFetcher:
    def __init__(self, host: ShareHost, config: Any) -> None:
        self.host = host
        self.config = config
        self.sessions: dict[tuple[str, str], Session] = {}
        self.parts: dict[tuple[str, TopicPartition], Loaded] = {}
        # correlation id -> (the answer's handler, the share coordinator asked)
        self.waiting: dict[int, tuple[Callable[[Any], None], int]] = {}
        self._ticking = False
        # the bug switch share-ack-before-persist: acknowledgements answered, not written yet
        self.ack_before_persist = "share-ack-before-persist" in host.bugs
        self.behind: dict[tuple[str, TopicPartition], list[Any]] = {}

    # ------------------------------------------------------------ sessions

    def _session(self, group: str, member: str, epoch: int, src: int) -> tuple[Errors, Session | None]:
        key = (group, member)
        if epoch == INITIAL_SESSION_EPOCH:
            self.sessions[key] = Session(1, opener=src)
            return Errors.NONE, self.sessions[key]
        s = self.sessions.get(key)
        if s is None:
            mark("share-session-not-found")
            return Errors.SHARE_SESSION_NOT_FOUND, None
        if epoch == FINAL_SESSION_EPOCH:
            return Errors.NONE, s
        if epoch != s.epoch:
            mark("share-session-epoch-invalid")
            return Errors.INVALID_SHARE_SESSION_EPOCH, None
        s.epoch = s.epoch + 1 if s.epoch < 0x7FFFFFFF else 1
        return Errors.NONE, s

    def _close(self, now_ms: int, group: str, member: str) -> None:
        s = self.sessions.pop((group, member), None)
        for tp in sorted(s.partitions) if s is not None else ():
            loaded = self.parts.get((group, tp))
            if loaded is not None and loaded.sp is not None:
                self._write_delta(group, tp, loaded, loaded.sp.release_member(member, now_ms))

    # ------------------------------------------------------------ requests

    def on_fetch(self, now_ms: int, src: int, req: ShareFetchRequest) -> None:
        if req.session_epoch == INITIAL_SESSION_EPOCH and req.acks:
            self.host.send(src, ShareFetchResponse(req.correlation_id, Errors.INVALID_REQUEST))
            return
        error, s = self._session(req.group_id, req.member_id, req.session_epoch, src)
        if s is None:
            self.host.send(src, ShareFetchResponse(req.correlation_id, error))
            return
        s.partitions |= set(req.partitions)
        s.partitions -= set(req.forgotten)

        def acknowledged(ack_errors: dict[TopicPartition, Errors]) -> None:
            now = self.host.now_ms
            if req.session_epoch == FINAL_SESSION_EPOCH:
                self._close(now, req.group_id, req.member_id)
                data = [SharePartitionData(tp, ack_error=e) for tp, e in sorted(ack_errors.items())]
            else:
                data = self._fetch(now, req, s, ack_errors)
            self.host.send(src, ShareFetchResponse(req.correlation_id, Errors.NONE, tuple(data),
                                                   self.config.share_record_lock_duration_ms))

        self._acknowledge_all(now_ms, req.group_id, req.member_id, req.acks, acknowledged)

    def on_acknowledge(self, now_ms: int, src: int, req: ShareAcknowledgeRequest) -> None:
        error, s = (Errors.INVALID_SHARE_SESSION_EPOCH, None) if req.session_epoch == INITIAL_SESSION_EPOCH \
            else self._session(req.group_id, req.member_id, req.session_epoch, src)
        if s is None:
            self.host.send(src, ShareAcknowledgeResponse(req.correlation_id, error))
            return

        def acknowledged(ack_errors: dict[TopicPartition, Errors]) -> None:
            if req.session_epoch == FINAL_SESSION_EPOCH:
                self._close(self.host.now_ms, req.group_id, req.member_id)
            self.host.send(src, ShareAcknowledgeResponse(req.correlation_id, Errors.NONE,
                                                         tuple(sorted(ack_errors.items()))))

        self._acknowledge_all(now_ms, req.group_id, req.member_id, req.acks, acknowledged)

    # ------------------------------------------------------------ acquiring

    def _fetch(self, now_ms: int, req: ShareFetchRequest, s: Session,
               ack_errors: dict[TopicPartition, Errors]) -> list[SharePartitionData]:
        budget = req.max_records
        out = []
        for tp in sorted(s.partitions | set(ack_errors)):
            ack_error = ack_errors.get(tp, Errors.NONE)
            if tp not in s.partitions:
                out.append(SharePartitionData(tp, ack_error=ack_error))
                continue
            error = self.host.not_led_here(tp) if not self._leads(tp) else Errors.NONE
            if error is not Errors.NONE:
                out.append(SharePartitionData(tp, error, ack_error, current_leader=self.host.leaders().get(tp, -1)))
                continue
            loaded = self._loaded(req.group_id, tp)
            if loaded.sp is None or budget <= 0:
                out.append(SharePartitionData(tp, ack_error=ack_error))
                continue
            batches, ranges = self._acquire(now_ms, tp, loaded.sp, req.member_id, budget)
            budget -= sum(r.last_offset - r.first_offset + 1 for r in ranges)
            out.append(SharePartitionData(tp, Errors.NONE, ack_error, tuple(batches), tuple(ranges)))
        return out

    def _acquire(self, now_ms: int, tp: TopicPartition, sp: Any, member: str,
                 budget: int) -> tuple[list[bytes], list[AcquiredRange]]:
        p = self.host.partitions[tp]
        log = p.log
        start = max(sp.next_fetch_offset(), log.log_start_offset)
        committed = self.config.share_isolation_level == "read_committed"
        batches = log.read(start, 1 << 20, p.last_stable_offset() if committed else log.high_watermark, True)
        aborted = _aborted(log, start, batches) if committed else ()
        offsets: list[int] = []
        gaps: list[int] = []
        for batch in batches:
            h = rec.parse_header(batch)
            if h.is_control or (h.is_transactional and any(pid == h.producer_id and first <= h.base_offset <= last
                                                           for pid, first, last in aborted)):
                gaps += [o for o in range(h.base_offset, h.last_offset + 1) if o >= start]
            else:
                offsets += [r.offset for r in rec.decode_records(batch) if r.offset >= start]
        if gaps:
            sp.archive(gaps)
        ranges = [AcquiredRange(first, last, count) for first, last, count in sp.acquire(member, now_ms, offsets, budget)]
        if ranges:
            mark("share-records-acquired")
            self._tick_soon()
        return batches, ranges

    def _leads(self, tp: TopicPartition) -> bool:
        p = self.host.partitions.get(tp)
        return p is not None and p.is_leader and self.host.broker_epoch >= 0

    def _loaded(self, group: str, tp: TopicPartition) -> Loaded:
        """The share-partition, or its load begun (its state read from the share coordinator)."""
        epoch = self.host.partitions[tp].leader_epoch
        loaded = self.parts.get((group, tp))
        if loaded is not None and loaded.leader_epoch == epoch:
            return loaded
        loaded = self.parts[(group, tp)] = Loaded(epoch)
        req = ReadShareGroupStateRequest(self.host.corr(), group, tp, epoch)
        self._ask(share_key(group, tp), req, lambda resp: self._on_state(group, tp, loaded, resp))
        return loaded

    def _on_state(self, group: str, tp: TopicPartition, loaded: Loaded,
                  resp: ReadShareGroupStateResponse | None) -> None:
        if self.parts.get((group, tp)) is not loaded:
            return  # dropped meanwhile (leadership moved)
        if resp is None or resp.error is not Errors.NONE:
            del self.parts[(group, tp)]  # the next fetch tries again
            return
        from reference.share_partition import SharePartition

        log = self.host.partitions[tp].log
        start = resp.start_offset
        if start < 0:
            start = log.log_start_offset if self.config.share_auto_offset_reset == "earliest" else log.high_watermark
        c = self.config
        try:
            loaded.sp = SharePartition.load(start, resp.batches, lock_ms=c.share_record_lock_duration_ms,
                                            delivery_limit=c.share_delivery_count_limit,
                                            max_in_flight=c.share_partition_max_record_locks, **_flags(self.host.bugs))
        except ValueError:  # a state that cannot be loaded (Kafka: the share-partition FAILED)
            mark("share-partition-load-failed")
            del self.parts[(group, tp)]
            return
        loaded.state_epoch = resp.state_epoch
        mark("share-partition-loaded")

    # ------------------------------------------------------------ acknowledging

    def _acknowledge_all(self, now_ms: int, group: str, member: str,
                         acks: tuple[tuple[TopicPartition, tuple[AckBatch, ...]], ...],
                         then: Callable[[dict[TopicPartition, Errors]], None]) -> None:
        errors: dict[TopicPartition, Errors] = {}
        left = len(acks)
        if not left:
            then(errors)
            return

        def one(tp: TopicPartition, error: Errors) -> None:
            nonlocal left
            errors[tp] = error
            left -= 1
            if left == 0:
                then(errors)

        for tp, batches in acks:
            self._acknowledge(now_ms, group, member, tp, batches, partial(one, tp))

    def _acknowledge(self, now_ms: int, group: str, member: str, tp: TopicPartition,
                     batches: tuple[AckBatch, ...], then: Callable[[Errors], None]) -> None:
        if not self._leads(tp):
            then(self.host.not_led_here(tp))
            return
        loaded = self.parts.get((group, tp))
        if loaded is None or loaded.sp is None or loaded.leader_epoch != self.host.partitions[tp].leader_epoch:
            then(Errors.UNKNOWN_TOPIC_OR_PARTITION)  # as Kafka's, for a share-partition it does not hold
            return
        sp = loaded.sp
        error, pending = sp.begin_acknowledge(member, list(batches), now_ms)
        if error is not Errors.NONE or pending is None:
            if error is Errors.INVALID_RECORD_STATE:
                mark("share-ack-invalid-record-state")
            then(error)
            return

        def written(error: Errors) -> None:
            sp.finish(pending, error is Errors.NONE, self.host.now_ms)
            then(_WRITE_ERRORS.get(error, error))

        if self.ack_before_persist:  # the bug: answered now, written with the next tick's writes
            written(Errors.NONE)
            self.behind.setdefault((group, tp), []).append(pending.write)
            self._tick_soon()
            return
        self._write(group, tp, loaded, pending.write.start_offset, pending.write.batches, written)

    # ------------------------------------------------------------ lock expiry

    def _tick_soon(self) -> None:
        if not self._ticking:
            self._ticking = True
            self.host.set_timer(EXPIRY_TICK_MS, ("share", "tick"))

    def timer(self, now_ms: int, key: tuple) -> None:
        if key[0] == "tick":
            self._ticking = False
            for (group, tp), loaded in sorted(self.parts.items()):
                if loaded.sp is not None:
                    delta = loaded.sp.expire(now_ms)
                    if delta is not None and delta.batches:
                        for write in self.behind.pop((group, tp), []):
                            self._write(group, tp, loaded, write.start_offset, write.batches, lambda _e: None)
                    self._write_delta(group, tp, loaded, delta)
            if any(x.sp is not None and x.sp.next_deadline() is not None for x in self.parts.values()):
                self._tick_soon()
        elif key[0] == "persist-timeout":
            waiting = self.waiting.pop(key[1], None)
            if waiting is not None:
                handler, node = waiting
                self.host.close_connection(node)
                handler(None)

    def _write_delta(self, group: str, tp: TopicPartition, loaded: Loaded, delta) -> None:
        """Write what expired or was released; its change stands whatever the write does."""
        if delta is not None and delta.batches:
            mark("share-lock-released")
            self._write(group, tp, loaded, delta.start_offset, delta.batches, lambda _e: None)

    # ------------------------------------------------------------ the share coordinator

    def _write(self, group: str, tp: TopicPartition, loaded: Loaded, start_offset: int, batches,
               then: Callable[[Errors], None]) -> None:
        req = WriteShareGroupStateRequest(self.host.corr(), group, tp, loaded.leader_epoch, loaded.state_epoch,
                                          start_offset, tuple(batches))

        def answered(resp: WriteShareGroupStateResponse | None) -> None:
            error = Errors.REQUEST_TIMED_OUT if resp is None else resp.error
            if error is Errors.FENCED_LEADER_EPOCH and self.parts.get((group, tp)) is loaded:
                del self.parts[(group, tp)]  # another broker leads it now
            then(error)

        self._ask(share_key(group, tp), req, answered)

    def _ask(self, key: str, req: Any, handler: Callable[[Any], None]) -> None:
        """Send ``req`` to the share coordinator of ``key``; ``handler(response or None)``."""
        tp = TopicPartition(SHARE_STATE_TOPIC, partition_for(key, self.config.share_state_partitions))
        node = self.host.leaders().get(tp, -1)
        if node < 0:
            handler(None)
            return
        self.waiting[req.correlation_id] = (handler, node)
        self.host.send(node, req)
        self.host.set_timer(PERSIST_TIMEOUT_MS, ("share", "persist-timeout", req.correlation_id))

    def on_state_response(self, msg: ReadShareGroupStateResponse | WriteShareGroupStateResponse) -> None:
        waiting = self.waiting.pop(msg.correlation_id, None)
        if waiting is not None:
            waiting[0](msg)

    # ------------------------------------------------------------ leadership

    def on_leadership(self, tp: TopicPartition) -> None:
        """``tp``'s leadership here changed (lost, or a new epoch): its share-partitions go
        (and the acknowledgements the bug switch share-ack-before-persist had not written)."""
        for key in [k for k in self.parts if k[1] == tp]:
            del self.parts[key]
            self.behind.pop(key, None)


def _aborted(log: Any, start: int, batches: list[bytes]) -> list[tuple[int, int, int]]:
    """(producer id, first offset, marker offset) of the aborted transactions the batches read
    from ``start`` overlap: their records are never delivered under read_committed."""
    end = rec.last_offset_of(batches[-1]) + 1 if batches else start
    return [(a.producer_id, a.first_offset, a.last_offset) for a in log.producer_state.aborted
            if a.last_offset >= start and a.first_offset < end]


def _flags(bugs: frozenset[str]) -> dict[str, bool]:
    """The bug switches a share-partition takes."""
    return {"ack_any_holder": "share-ack-any-holder" in bugs,
            "no_count_on_reacquire": "share-count-not-incremented" in bugs}
