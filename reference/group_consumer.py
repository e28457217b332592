"""A sans-IO consumer in a consumer group: ``subscribe``, rebalances, heartbeats, commits.

Theory of operation
-------------------
``subscribe(topics)`` makes the consumer find its group coordinator and join:

    unjoined -> joining (JoinGroup) -> syncing (SyncGroup) -> stable -> joining ...

The leader chosen by the coordinator runs the assignor (``reference.assignors``) over the
members' subscriptions, which carry the partitions each member owns. Two protocols:

* eager (range, roundrobin, sticky): before joining, a member commits what it consumed
  (with auto-commit) and revokes everything it owns;
* cooperative (cooperative-sticky, KIP-429): a member keeps its partitions while joining
  and revokes only those the new assignment moves away; if it revoked any it joins again
  at once, and the second round hands them to their new owners.

Every revocation and assignment is recorded in :attr:`rebalance_log` (``{"type":
"revoked"|"assigned", "keys": [...], "generation": g}``; an assignment also lists what the
member ``owned`` afterwards) until :meth:`take_rebalance_log`. Heartbeats keep the session;
``REBALANCE_IN_PROGRESS`` starts a rejoin, ``ILLEGAL_GENERATION`` or ``UNKNOWN_MEMBER_ID``
mean the partitions were lost. An application that does not call :meth:`poll` within
``max_poll_interval_ms`` leaves the group (and rejoins at its next poll). Auto-commit
commits, every ``auto_commit_interval_ms``, the positions after the records the
application has taken so far (Kafka: the previous poll's position); :meth:`commit_consumed`
does the same on demand. Commits carry the generation, so a fenced member's are refused.
"""

from __future__ import annotations

import json
from typing import Any

from reference.assignors import assign
from reference.consumer import ConsumedRecord, Consumer, ConsumerConfig
from reference.errors import Errors
from reference.group_messages import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from reference.messages import TopicPartition

COOPERATIVE = frozenset({"cooperative-sticky"})
_REFIND = frozenset({Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE})


def _keys(tps) -> list[str]:
    return [tp.key for tp in sorted(tps)]


class GroupConsumer(Consumer):
    def __init__(self, node_id: int, bootstrap: list[int], config: ConsumerConfig,
                 join_timeout_ms: int | None = None) -> None:
        if config.group_id is None:
            raise ValueError("a group consumer needs a group_id")
        if not config.assignors:
            raise ValueError("a group consumer needs at least one assignor")
        super().__init__(node_id, bootstrap, config)
        self.topics: tuple[str, ...] = ()
        self.state = "unjoined"
        self.member_id = ""
        self.generation = -1
        self.protocol = ""
        self.owned: set[TopicPartition] = set()
        self.rebalance_log: list[dict] = []
        self.consumed: dict[TopicPartition, int] = {}  # position after the records taken
        self.fenced = False
        self._group_corr = -1  # the join or sync in flight
        self._hb_corr = -1
        self._hb_ok_ms = 0
        self._last_app_poll_ms = 0
        self._rejoin_wanted = False
        self._pre_join_commit = -1  # eager: the commit sent before revoking, if any
        self._last_assignment: set[TopicPartition] = set()
        # the leader: the partition counts of the subscribed topics its last assignment used
        # (Kafka's assignmentSnapshot); metadata that differs later asks for a rebalance
        self._assignment_snapshot: dict[str, int] | None = None
        # how long a JoinGroup may wait for its answer (default: the rebalance timeout and a
        # request timeout); kafka-python waits max.poll.interval.ms + 5 s, five minutes by default
        self.join_timeout_ms = (join_timeout_ms if join_timeout_ms is not None
                                else config.rebalance_timeout_ms + config.request_timeout_ms)

    # ------------------------------------------------------------ API

    def subscribe(self, now_ms: int, topics: list[str]) -> None:
        self._now_ms = now_ms
        self.topics = tuple(sorted(set(topics)))
        self._last_app_poll_ms = now_ms
        self._refresh_metadata()  # the subscribed topics' partitions, for an assignment
        self._request_rejoin(now_ms)

    def poll(self, now_ms: int) -> None:
        self._now_ms = now_ms
        self._last_app_poll_ms = now_ms
        if self.state == "unjoined" and self.topics and not self.fenced:
            self._request_rejoin(now_ms)
        super().poll(now_ms)

    def take_records(self) -> list[ConsumedRecord]:
        out = [r for r in super().take_records() if r.tp in self.owned]
        for r in out:
            self.consumed[r.tp] = r.offset + 1
        return out

    def take_rebalance_log(self) -> list[dict]:
        out, self.rebalance_log = self.rebalance_log, []
        return out

    def commit_consumed(self) -> dict[TopicPartition, int]:
        """Commit the positions after what the application took; returns what was sent."""
        offsets = {tp: o for tp, o in self.consumed.items() if tp in self.owned}
        if offsets:
            self.commit(offsets)
        return offsets

    def commit(self, offsets: dict[TopicPartition, int]) -> None:
        self.commit_result = None
        if self.coordinator < 0:
            self._find_coordinator()
            self.commit_result = Errors.COORDINATOR_NOT_AVAILABLE
            return
        assert self.config.group_id is not None
        self._commit_corr = self._next_corr()
        generation = self.generation if self.member_id else -1
        self.send(self.coordinator, OffsetCommitRequest(
            self._commit_corr, self.config.group_id, generation, self.member_id,
            tuple(sorted(offsets.items()))))
        self._timeout(self.coordinator, self.config.request_timeout_ms, ("commit", self._commit_corr))

    def close(self) -> None:
        """Leave the group (a clean shutdown)."""
        if self.member_id and self.coordinator >= 0 and self.config.group_instance_id is None:
            assert self.config.group_id is not None
            self.send(self.coordinator, LeaveGroupRequest(self._next_corr(), self.config.group_id,
                                                          self.member_id))
        self._lose_all("closed")
        self.state = "closed"
        if self.config.group_instance_id is None:
            self.member_id = ""
            self.generation = -1

    # ------------------------------------------------------------ rebalancing

    def _cooperative(self) -> bool:
        return (self.protocol or self.config.assignors[0]) in COOPERATIVE

    def _request_rejoin(self, now_ms: int) -> None:
        if self.state == "closed" or self.fenced:
            return
        self._rejoin_wanted = True
        self._start_join(now_ms)

    def _start_join(self, now_ms: int) -> None:
        if not self._rejoin_wanted or self._group_corr >= 0 or self._pre_join_commit >= 0:
            return
        if self.coordinator < 0:
            self._find_coordinator()
            self.set_timer(self.config.retry_backoff_ms, "group-again")
            return
        if not self._cooperative() and self.owned:
            # eager: commit what was consumed, then give everything up before joining
            if self.config.enable_auto_commit and self.member_id and self.commit_consumed():
                self._pre_join_commit = self._commit_corr
                return
            self._revoke(set(self.owned))
        self._rejoin_wanted = False
        self.state = "joining"
        assert self.config.group_id is not None
        # eager members revoked everything already: the sticky assignor still wants to know
        # what they had (Kafka puts it in the subscription's user data)
        had = self.owned if self._cooperative() else self._last_assignment
        metadata = json.dumps({"topics": list(self.topics), "owned": _keys(had),
                               "generation": self.generation}).encode()
        self._group_corr = self._next_corr()
        self.send(self.coordinator, JoinGroupRequest(
            self._group_corr, self.config.group_id, self.member_id, self.config.group_instance_id,
            self.config.session_timeout_ms, self.config.rebalance_timeout_ms,
            tuple((name, metadata) for name in self.config.assignors)))
        self._timeout(self.coordinator, self.join_timeout_ms, ("group-request", self._group_corr))

    def _revoke(self, tps: set[TopicPartition]) -> None:
        if not tps:
            return
        self.rebalance_log.append({"type": "revoked", "keys": _keys(tps),
                                   "generation": self.generation})
        self.owned -= tps
        for tp in tps:
            self.positions.pop(tp, None)
            self.consumed.pop(tp, None)
            self._no_commit.discard(tp)
        self.records = [r for r in self.records if r.tp not in tps]
        self.assign(sorted(self.owned))

    def _lose_all(self, why: str) -> None:
        """The partitions are gone without a clean revocation (Kafka's onPartitionsLost)."""
        if self.owned:
            self.rebalance_log.append({"type": "revoked", "keys": _keys(self.owned),
                                       "generation": self.generation, "lost": why})
        self.owned = set()
        self._last_assignment = set()
        self.positions = {}
        self.consumed = {}
        self._no_commit = set()
        self.records = []
        self.assign([])

    def _on_join(self, now_ms: int, resp: JoinGroupResponse) -> None:
        if resp.correlation_id != self._group_corr:
            return
        self._group_corr = -1
        if resp.error is not Errors.NONE:
            self._group_error(now_ms, resp.error)
            return
        self.member_id = resp.member_id
        self.generation = resp.generation_id
        self.protocol = resp.protocol_name
        assignments: tuple[tuple[str, bytes], ...] = ()
        self._assignment_snapshot = None
        if resp.leader == self.member_id and resp.members:
            assignments = self._assign(resp.protocol_name, resp.members)
        self.state = "syncing"
        assert self.config.group_id is not None
        self._group_corr = self._next_corr()
        self.send(self.coordinator, SyncGroupRequest(self._group_corr, self.config.group_id,
                                                     self.generation, self.member_id, assignments))
        self._timeout(self.coordinator, self.config.rebalance_timeout_ms + self.config.request_timeout_ms,
                       ("group-request", self._group_corr))
        self._schedule_heartbeat()

    def _assign(self, protocol: str, members: tuple[tuple[str, bytes], ...]) -> tuple[tuple[str, bytes], ...]:
        subscriptions: dict[str, list[str]] = {}
        owned: dict[str, list[TopicPartition]] = {}
        generations: dict[str, int] = {}
        for mid, raw in members:
            try:
                md = json.loads(raw)
            except ValueError:
                md = {"topics": [], "owned": [], "generation": -1}
            subscriptions[mid] = list(md.get("topics", []))
            owned[mid] = [TopicPartition.parse(k) for k in md.get("owned", [])]
            generations[mid] = md.get("generation", -1)
        # a partition claimed by two members stays with the one of the newer generation
        claimed: dict[TopicPartition, str] = {}
        for mid in sorted(owned, key=lambda m: (-generations[m], m)):
            for tp in owned[mid]:
                claimed.setdefault(tp, mid)
        owned = {mid: [tp for tp in tps if claimed[tp] == mid] for mid, tps in owned.items()}
        counts: dict[str, int] = {}
        for s in self.metadata.partitions:
            counts[s.tp.topic] = max(counts.get(s.tp.topic, 0), s.tp.partition + 1)
        result = assign(protocol, subscriptions, counts, owned)
        topics = {t for ts in subscriptions.values() for t in ts}
        self._assignment_snapshot = {t: counts.get(t, 0) for t in sorted(topics)}
        if 0 in self._assignment_snapshot.values():
            self._refresh_metadata()  # a subscribed topic it does not know (yet): ask
        return tuple((mid, json.dumps(_keys(tps)).encode()) for mid, tps in sorted(result.items()))

    def _metadata_changed(self, image) -> None:
        super()._metadata_changed(image)
        snapshot = self._assignment_snapshot
        if snapshot is None or self.state != "stable":
            return
        counts: dict[str, int] = {}
        for s in image.partitions:
            if s.tp.topic in snapshot:
                counts[s.tp.topic] = max(counts.get(s.tp.topic, 0), s.tp.partition + 1)
        if any(counts.get(t, 0) != n for t, n in snapshot.items()):
            # the leader assigned from metadata that has changed since (a topic it did not
            # know yet, partitions added): rebalance, as Kafka's ConsumerCoordinator does
            self._assignment_snapshot = None
            self._request_rejoin(self._now_ms)
        elif 0 in snapshot.values():
            self._refresh_metadata()  # still unknown: ask again (after the retry backoff)

    def _on_sync(self, now_ms: int, resp: SyncGroupResponse) -> None:
        if resp.correlation_id != self._group_corr:
            return
        self._group_corr = -1
        if resp.error is not Errors.NONE:
            self._group_error(now_ms, resp.error)
            return
        try:
            new = {TopicPartition.parse(k) for k in json.loads(resp.assignment or b"[]")}
        except ValueError:
            new = set()
        revoked = self.owned - new
        if revoked:
            self._revoke(revoked)  # cooperative: only what moved
        added = new - self.owned
        self._no_commit -= added
        self.owned = set(new)
        self._last_assignment = set(new)
        self.assign(sorted(self.owned))
        self.rebalance_log.append({"type": "assigned", "keys": _keys(added),
                                   "generation": self.generation, "owned": _keys(self.owned)})
        self.state = "stable"
        self._hb_ok_ms = now_ms
        if revoked and self._cooperative():
            self._request_rejoin(now_ms)  # the second round hands the revoked ones over

    def _group_error(self, now_ms: int, error: Errors) -> None:
        """An error answer to JoinGroup, SyncGroup or Heartbeat."""
        if error is Errors.FENCED_INSTANCE_ID:
            self.fenced = True  # another process has our static identity: stop
            self._lose_all("fenced")
            self.state = "unjoined"
            return
        if error in _REFIND:
            self.coordinator = -1
        if error is Errors.UNKNOWN_MEMBER_ID:
            self.member_id = ""
            self.generation = -1
            self._lose_all("unknown member")
        elif error is Errors.ILLEGAL_GENERATION:
            self._lose_all("illegal generation")
        self.state = "unjoined"
        self._rejoin_wanted = True
        self.set_timer(self.config.retry_backoff_ms, "group-again")

    # ------------------------------------------------------------ heartbeats and timers

    def _schedule_heartbeat(self) -> None:
        self.set_timer(self.config.heartbeat_interval_ms, ("heartbeat", self.generation))

    def _heartbeat(self, now_ms: int) -> None:
        if self.state not in ("stable", "syncing") or self._hb_corr >= 0:
            return
        if self.coordinator < 0:
            # as Kafka's heartbeat thread: look the coordinator up again (a lookup that timed
            # out or failed is not retried by anyone else; the member would sit in a
            # generation the group has long left)
            self._find_coordinator()
            return
        assert self.config.group_id is not None
        self._hb_corr = self._next_corr()
        self.send(self.coordinator, HeartbeatRequest(self._hb_corr, self.config.group_id,
                                                     self.generation, self.member_id))
        self._timeout(self.coordinator, self.config.request_timeout_ms, ("heartbeat-timeout", self._hb_corr))

    def _on_heartbeat(self, now_ms: int, resp: HeartbeatResponse) -> None:
        if resp.correlation_id != self._hb_corr:
            return
        self._hb_corr = -1
        if resp.error is Errors.NONE:
            self._hb_ok_ms = now_ms
        elif resp.error is Errors.REBALANCE_IN_PROGRESS:
            if self.state == "stable":
                self._request_rejoin(now_ms)
        elif resp.error in _REFIND:
            self.coordinator = -1
            self._find_coordinator()
        elif self.state == "stable":
            self._group_error(now_ms, resp.error)

    def _auto_commit(self, now_ms: int) -> None:
        if self.state == "stable" and self._commit_corr < 0:
            self.commit_consumed()
        self.set_timer(self.config.auto_commit_interval_ms, "auto-commit")

    def start(self, now_ms: int) -> None:
        super().start(now_ms)
        if self.config.enable_auto_commit:
            self.set_timer(self.config.auto_commit_interval_ms, "auto-commit")
        self.set_timer(self.config.heartbeat_interval_ms, "poll-interval-check")

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self._now_ms = now_ms
        match message:
            case JoinGroupResponse():
                self._on_join(now_ms, message)
            case SyncGroupResponse():
                self._on_sync(now_ms, message)
            case HeartbeatResponse():
                self._on_heartbeat(now_ms, message)
            case LeaveGroupResponse():
                pass
            case OffsetCommitResponse() if message.correlation_id == self._pre_join_commit:
                super().receive(now_ms, src, message)
                self._pre_join_commit = -1
                self._revoke(set(self.owned))
                self._start_join(now_ms)
            case _:
                super().receive(now_ms, src, message)
                if self._rejoin_wanted and self.coordinator >= 0:
                    self._start_join(now_ms)

    def timer(self, now_ms: int, key: Any) -> None:
        self._now_ms = now_ms
        match key:
            case ("heartbeat", generation):
                if generation == self.generation and self.state in ("stable", "syncing"):
                    self._heartbeat(now_ms)
                    self._schedule_heartbeat()
            case ("heartbeat-timeout", corr):
                if corr == self._hb_corr:
                    self._hb_corr = -1
                    self._close_coordinator()
                    self._find_coordinator()
            case ("group-request", corr):
                if corr == self._group_corr:
                    self._group_corr = -1
                    self._close_coordinator()
                    self.state = "unjoined"
                    self._rejoin_wanted = True
                    self._start_join(now_ms)
            case "group-again":
                self._start_join(now_ms)
            case "auto-commit":
                self._auto_commit(now_ms)
            case "poll-interval-check":
                if (self.state == "stable" and self.member_id
                        and now_ms - self._last_app_poll_ms > self.config.max_poll_interval_ms):
                    # the application stopped polling: leave, as Kafka's heartbeat thread does
                    self.close()
                    self.state = "unjoined"
                self.set_timer(self.config.heartbeat_interval_ms, "poll-interval-check")
            case ("commit", corr) if corr == self._pre_join_commit:
                super().timer(now_ms, key)
                self._pre_join_commit = -1
                self._revoke(set(self.owned))
                self._start_join(now_ms)
            case _:
                super().timer(now_ms, key)
