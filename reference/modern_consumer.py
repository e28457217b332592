"""A sans-IO member of a KIP-848 ("consumer" protocol) group: ``subscribe``, heartbeats,
reconciliation, commits; a drop-in replacement of :mod:`reference.group_consumer`'s classic
member.

Theory of operation
-------------------
The member has one request, ConsumerGroupHeartbeat, and the coordinator assigns: there is
no leader, no JoinGroup or SyncGroup round.

    unjoined -> joining (epoch 0) -> stable <-> reconciling -> ... -> closed

``subscribe(topics)`` finds the group coordinator and joins with epoch 0, the full set of
fields, an empty ``owned``, ``max_poll_interval_ms`` as the rebalance timeout (as the Java
client) and the member id it was made with (KIP-1082: Kafka 4.0's clients make up their own,
so a join whose answer is lost is retried with the id the coordinator already gave epochs to;
without one, the first join's is empty and the coordinator makes one up). The member keeps
its id for the life of the object, fencing and leaving included. It heartbeats every
``heartbeat_interval_ms`` the coordinator gave, and at once when it joins or acknowledges;
besides the group, member id, epoch and instance id, a heartbeat carries only the fields that
changed since the last one sent (None: unchanged), all of them after an error.

An answer sets the member epoch (:attr:`generation`). Its assignment, when present, is the
new target: the member revokes what it owns outside it (with auto-commit it first commits
what the application took of those partitions, and hands out none of their records
meanwhile: state ``reconciling``), takes what is new, and acknowledges at once with a
heartbeat listing what it owns now. The coordinator hands a partition over only once its
old owner acknowledged the revocation, so the member waits for nothing but its own commit.

Every revocation and assignment is recorded in :attr:`rebalance_log` as the classic member
records them (``{"type": "revoked"|"assigned", "keys": [...], "generation": member epoch}``;
an assignment lists what the member ``owned`` after it; partitions lost without a revocation
say why in ``lost``). An epoch change alone is an ``assigned`` entry without keys, so that the
log holds every epoch the member reached.

Errors: FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID lose every partition and rejoin at once
(epoch 0, same member id). NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and
COORDINATOR_LOAD_IN_PROGRESS look the coordinator up again and retry after
``retry_backoff_ms``; a heartbeat unanswered within ``request_timeout_ms`` (or lost with its
connection) looks it up again too, and loses nothing by itself: the session decides.
FENCED_INSTANCE_ID sets :attr:`fenced` and stops the member, as the classic one.
UNRELEASED_INSTANCE_ID (a static member joining while its previous incarnation still holds
the instance id) is fatal for the Java client; here the member retries its join after
``retry_backoff_ms`` until the coordinator expires the previous incarnation. Any other error
(GROUP_ID_NOT_FOUND, INVALID_REQUEST, UNSUPPORTED_ASSIGNOR, ...) is fatal, as the Java
client's default: :attr:`fatal_error` names it, the member loses everything and stops.

An application that does not call :meth:`poll` within ``max_poll_interval_ms`` leaves the
group (the Java client's leave epoch: -1, -2 for a static member), loses its partitions and
rejoins at its next poll. :meth:`close` revokes everything, then leaves with epoch -1, or -2
for a static member, whose partitions the coordinator keeps for it until its session runs
out. Commits carry the member epoch and id, so a fenced member's are refused.
"""

from __future__ import annotations

from typing import Any

from reference.consumer import ConsumedRecord, Consumer, ConsumerConfig
from reference.errors import Errors
from reference.group_messages import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
)
from reference.messages import TopicPartition

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2
_ACTIVE = frozenset({"joining", "stable", "reconciling"})  # the states that heartbeat
_REJOIN = frozenset({Errors.FENCED_MEMBER_EPOCH, Errors.UNKNOWN_MEMBER_ID})
_REFIND = frozenset({Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE,
                     Errors.COORDINATOR_LOAD_IN_PROGRESS})


def _keys(tps) -> list[str]:
    return [tp.key for tp in sorted(tps)]


class ModernGroupConsumer(Consumer):
    def __init__(self, node_id: int, bootstrap: list[int], config: ConsumerConfig,
                 join_timeout_ms: int | None = None, member_id: str = "") -> None:
        if config.group_id is None:
            raise ValueError("a group consumer needs a group_id")
        super().__init__(node_id, bootstrap, config)
        self.topics: tuple[str, ...] = ()
        self.state = "unjoined"
        self.member_id = member_id
        self.generation = -1  # the member epoch: 0 while joining, -1 or -2 after leaving
        self.owned: set[TopicPartition] = set()
        self.rebalance_log: list[dict] = []
        self.consumed: dict[TopicPartition, int] = {}  # position after the records taken
        self.fenced = False
        self.fatal_error: Errors | None = None
        # the classic member's JoinGroup wait, kept for its interface: a heartbeat is answered
        # at once, and waits request_timeout_ms
        self.join_timeout_ms = join_timeout_ms
        self._hb_corr = -1
        self._hb_seq = 0  # the periodic heartbeat timer armed last (a send makes it moot)
        self._hb_now = False  # a heartbeat is due without waiting for the interval
        self._hb_interval_ms = config.heartbeat_interval_ms
        self._not_before_ms = 0  # the retry backoff after an error
        self._again_seq = 0  # the retry timer that counts (an error's restarts the backoff)
        self._again_pending = False
        self._sent: dict[str, object] = {}  # fields as last sent; empty: the next is full
        self._target: set[TopicPartition] | None = None  # an assignment not reconciled yet
        self._revoke_commit = -1  # auto-commit before revoking: the commit in flight
        self._revoking: set[TopicPartition] = set()  # paused while that commit is out
        # a nemesis (slow-callback): the next revocation's callback takes this long, during
        # which the member heartbeats without acknowledging; the assignment it is revoking for
        self.slow_callback_ms = 0
        self._callback_target: set[TopicPartition] | None = None
        self._callback_seq = 0
        self._precommitted: dict[TopicPartition, int] = {}
        self._first_assignment = False  # the first answer after joining is acknowledged
        self._logged_epoch = -1
        self._last_app_poll_ms = 0

    # ------------------------------------------------------------ API

    def subscribe(self, now_ms: int, topics: list[str]) -> None:
        self._now_ms = now_ms
        self.topics = tuple(sorted(set(topics)))
        self._last_app_poll_ms = now_ms
        if self.state in _ACTIVE:
            self._heartbeat_now()  # the new subscription goes in the next heartbeat
        else:
            self._join()

    def poll(self, now_ms: int) -> None:
        self._now_ms = now_ms
        self._last_app_poll_ms = now_ms
        if self.state == "unjoined" and self.topics:
            self._join()  # after leaving for want of polls, as the Java client's stale member
        super().poll(now_ms)

    def take_records(self) -> list[ConsumedRecord]:
        out = [r for r in super().take_records() if r.tp in self.owned and r.tp not in self._revoking]
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
        self._commit_corr = self._send_commit(offsets)
        self._timeout(self.coordinator, self.config.request_timeout_ms, ("commit", self._commit_corr))

    def _send_commit(self, offsets: dict[TopicPartition, int]) -> int:
        assert self.config.group_id is not None
        # outside the group (joining, left) the Java client commits with epoch -1
        epoch = self.generation if self.generation > 0 else -1
        corr = self._next_corr()
        self.send(self.coordinator, OffsetCommitRequest(corr, self.config.group_id, epoch, self.member_id,
                                                        tuple(sorted(offsets.items()))))
        return corr

    def close(self) -> None:
        """Leave the group (a clean shutdown): revoke everything, then leave."""
        self._revoke(set(self.owned))
        self._lose_all("closed")  # nothing is left to lose: forgets a reconciliation under way
        self._leave()
        self.state = "closed"

    # ------------------------------------------------------------ membership

    def _join(self) -> None:
        if self.state == "closed" or self.fenced or self.fatal_error is not None:
            return
        self.state = "joining"
        self.generation = JOIN_EPOCH
        self._sent = {}
        self._first_assignment = True
        self._heartbeat_now()

    def _leave(self) -> None:
        """The leave heartbeat: -1, or -2 for a static member (it comes back). Nobody waits
        for its answer; without a known coordinator it is skipped, as the Java client does."""
        epoch = LEAVE_EPOCH if self.config.group_instance_id is None else STATIC_LEAVE_EPOCH
        if self.state in _ACTIVE and self.member_id and self.coordinator >= 0:
            assert self.config.group_id is not None
            self.send(self.coordinator, ConsumerGroupHeartbeatRequest(
                self._next_corr(), self.config.group_id, self.member_id, epoch, self.config.group_instance_id))
        self.generation = epoch
        self._hb_corr = -1  # an answer to a heartbeat sent before no longer matters
        self._hb_now = False

    def _stop(self, why: str) -> None:
        self._lose_all(why)
        self.state = "unjoined" if self.fatal_error is None else "fatal"

    def _revoke(self, tps: set[TopicPartition]) -> None:
        if not tps:
            return
        self.rebalance_log.append({"type": "revoked", "keys": _keys(tps), "generation": self.generation})
        self.owned -= tps
        for tp in tps:
            self.positions.pop(tp, None)
            self.consumed.pop(tp, None)
            self._no_commit.discard(tp)
        self.records = [r for r in self.records if r.tp not in tps]
        self.assign(sorted(self.owned))

    def _lose_all(self, why: str) -> None:
        """The partitions are gone without a clean revocation (Kafka's onPartitionsLost).
        Logged even with nothing to lose: that the member was dropped from the group tells
        the checker its earlier revocations may have come after its removal."""
        self.rebalance_log.append({"type": "revoked", "keys": _keys(self.owned),
                                   "generation": self.generation, "lost": why})
        self.owned = set()
        self.positions = {}
        self.consumed = {}
        self._no_commit = set()
        self.records = []
        self.assign([])
        self._target = None
        self._revoke_commit = -1
        self._callback_target = None
        self._revoking = set()
        self._precommitted = {}

    # ------------------------------------------------------------ reconciliation

    def _reconcile(self) -> None:
        """Move to the newest target: (auto-)commit what was taken of the partitions it
        loses, then revoke them and take the new ones, strictly in that order."""
        if self._target is None or self._revoke_commit >= 0 or self._callback_target is not None:
            return  # nothing new, or the commit before revoking or a slow callback is still out
        revoked = self.owned - self._target
        if revoked and self.config.enable_auto_commit and self._commit_before_revoking(revoked):
            return  # the rest once the commit is answered
        target, self._target = self._target, None
        if revoked and self.slow_callback_ms:
            self._slow_revocation(target, revoked)
            return
        self._take_assignment(target)

    def _slow_revocation(self, target: set[TopicPartition], revoked: set[TopicPartition]) -> None:
        """The revocation callback runs ``slow_callback_ms`` (as an application's
        onPartitionsRevoked that flushes its state): no records of ``revoked`` meanwhile, the
        heartbeats go on without an acknowledgement, and a newer target waits; then this
        reconciliation completes as it began (the Java client's), and the newer one follows."""
        ms, self.slow_callback_ms = self.slow_callback_ms, 0
        self._callback_target = target
        self._revoking = set(revoked)
        self.assign(sorted(self.owned - self._revoking))
        self.state = "reconciling"
        self._callback_seq += 1
        self.set_timer(ms, ("revoke-callback", self._callback_seq))

    def _slow_revocation_done(self) -> None:
        target, self._callback_target = self._callback_target, None
        if target is not None:
            self._take_assignment(target)
            self._reconcile()

    def _commit_before_revoking(self, revoked: set[TopicPartition]) -> bool:
        """Send the commit of what was taken of ``revoked`` (not committed so already);
        False when there is none to send."""
        offsets = {tp: o for tp, o in self.consumed.items()
                   if tp in revoked and self._precommitted.get(tp) != o}
        if not offsets or self.coordinator < 0:
            return False
        # no more records of them meanwhile: what the commit leaves out would be read twice
        self._revoking = set(revoked)
        self.assign(sorted(self.owned - self._revoking))
        # the member's own commit, apart from the application's (its commit_result)
        self._revoke_commit = self._send_commit(offsets)
        self._timeout(self.coordinator, self.config.request_timeout_ms, ("revoke-commit", self._revoke_commit))
        self._precommitted.update(offsets)
        self._no_commit -= set(offsets)  # given back after all, they start at this commit
        self.state = "reconciling"
        return True

    def _revoke_commit_done(self, error: Errors) -> None:
        # answered or not, the Java client revokes now
        if error in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE, Errors.REQUEST_TIMED_OUT):
            self.coordinator = -1
        self._revoke_commit = -1
        self._reconcile()

    def _take_assignment(self, target: set[TopicPartition]) -> None:
        revoked, added = self.owned - target, target - self.owned
        self._revoke(revoked)
        self._no_commit -= added
        self.owned |= added
        self._revoking, self._precommitted = set(), {}
        self.assign(sorted(self.owned))
        if self.state == "reconciling":
            self.state = "stable"
        if revoked or added or self.generation != self._logged_epoch:
            self._log_assigned(added)
        if revoked or added or self._first_assignment:
            self._first_assignment = False
            self._sent.pop("owned", None)  # the acknowledgement lists what it owns now
            self._heartbeat_now()

    def _log_assigned(self, added: set[TopicPartition]) -> None:
        self._logged_epoch = self.generation
        self.rebalance_log.append({"type": "assigned", "keys": _keys(added),
                                   "generation": self.generation, "owned": _keys(self.owned)})

    # ------------------------------------------------------------ heartbeats

    def _heartbeat_now(self) -> None:
        self._hb_now = True
        self._send_heartbeat()

    def _send_heartbeat(self) -> None:
        if self.state not in _ACTIVE or self._hb_corr >= 0 or self._now_ms < self._not_before_ms:
            return  # not a member, one in flight (its answer sends the next), or backing off
        if self.coordinator < 0:
            self._hb_now = True  # as soon as the coordinator is known
            self._find_coordinator()
            self._arm_again()  # and again, should the lookup fail
            return
        self._hb_now = False
        self._hb_seq += 1
        self._hb_corr = self._next_corr()
        self.send(self.coordinator, self._heartbeat_request(self._hb_corr))
        self._timeout(self.coordinator, self.config.request_timeout_ms, ("heartbeat-timeout", self._hb_corr))

    def _heartbeat_request(self, corr: int) -> ConsumerGroupHeartbeatRequest:
        joining = self.generation == JOIN_EPOCH
        fields: dict[str, Any] = {"rebalance_timeout_ms": self.config.max_poll_interval_ms,
                  "subscribed_topics": self.topics,
                  "server_assignor": self.config.server_assignor,
                  # a joining member owns nothing (the coordinator refuses anything else)
                  "owned": () if joining else tuple(sorted(self.owned))}
        if joining:
            self._sent = {}
        changed = {k: v for k, v in fields.items() if k not in self._sent or self._sent[k] != v}
        self._sent.update(changed)
        assert self.config.group_id is not None
        return ConsumerGroupHeartbeatRequest(corr, self.config.group_id, self.member_id, self.generation,
                                             self.config.group_instance_id, **changed)

    def _arm_again(self, fresh: bool = False) -> None:
        if self._again_pending and not fresh:
            return
        self._again_pending = True
        self._again_seq += 1
        self.set_timer(self.config.retry_backoff_ms, ("group-again", self._again_seq))

    def _retry_later(self) -> None:
        self._hb_now = True
        self._not_before_ms = self._now_ms + self.config.retry_backoff_ms
        self._arm_again(fresh=True)

    def _next_heartbeat(self) -> None:
        if self._hb_now:
            self._send_heartbeat()
        elif self.state in _ACTIVE and self._hb_corr < 0:
            self._hb_seq += 1
            self.set_timer(self._hb_interval_ms, ("heartbeat", self._hb_seq))

    def _on_heartbeat(self, resp: ConsumerGroupHeartbeatResponse) -> None:
        if resp.correlation_id != self._hb_corr or self.state not in _ACTIVE:
            return
        self._hb_corr = -1
        if resp.error is not Errors.NONE:
            self._heartbeat_error(resp.error)
        elif resp.member_epoch >= 0:
            self._heartbeat_ok(resp)
        self._next_heartbeat()

    def _heartbeat_ok(self, resp: ConsumerGroupHeartbeatResponse) -> None:
        self._hb_interval_ms = resp.heartbeat_interval_ms or self.config.heartbeat_interval_ms
        self.member_id = resp.member_id or self.member_id
        self.generation = resp.member_epoch
        if self.state == "joining":
            self.state = "stable"
        if resp.assignment is not None:
            self._target = set(resp.assignment)
            self._reconcile()
        if self.state == "stable" and self.generation != self._logged_epoch:
            self._log_assigned(set())  # a new epoch, the same partitions

    def _heartbeat_error(self, error: Errors) -> None:
        self._sent = {}  # the next heartbeat carries every field
        if error in _REJOIN:
            self._lose_all(error.name)
            self._join()  # at once, with epoch 0 and the member id it has
        elif error in _REFIND:
            self.coordinator = -1
            self._find_coordinator()
            self._retry_later()
        elif error is Errors.UNRELEASED_INSTANCE_ID:
            self._retry_later()  # the previous incarnation still holds the instance id
        elif error is Errors.FENCED_INSTANCE_ID:
            self.fenced = True  # another process has our static identity: stop
            self._stop("fenced")
        else:
            self.fatal_error = error
            self._stop(error.name)

    def _heartbeat_lost(self) -> None:
        """No answer: the coordinator may have moved or died. Look it up and heartbeat again;
        the partitions stay (the coordinator's session timeout decides about them)."""
        self._hb_corr = -1
        self._sent = {}
        self.coordinator = -1
        self._find_coordinator()
        self._hb_now = True
        self._arm_again()

    # ------------------------------------------------------------ inputs

    def _auto_commit(self) -> None:
        if self.state == "stable" and self._commit_corr < 0:
            self.commit_consumed()
        self.set_timer(self.config.auto_commit_interval_ms, "auto-commit")

    def _check_poll_interval(self, now_ms: int) -> None:
        if self.state in _ACTIVE and now_ms - self._last_app_poll_ms > self.config.max_poll_interval_ms:
            # the application stopped polling: leave, as the Java client's heartbeat thread does
            self._lose_all("max poll interval")
            self._leave()
            self.state = "unjoined"
        self.set_timer(self.config.heartbeat_interval_ms, "poll-interval-check")

    def start(self, now_ms: int) -> None:
        super().start(now_ms)
        if self.config.enable_auto_commit:
            self.set_timer(self.config.auto_commit_interval_ms, "auto-commit")
        self.set_timer(self.config.heartbeat_interval_ms, "poll-interval-check")

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self._now_ms = now_ms
        match message:
            case ConsumerGroupHeartbeatResponse():
                self._on_heartbeat(message)
            case OffsetCommitResponse() if message.correlation_id == self._revoke_commit:
                self._revoke_commit_done(message.error)
            case _:
                super().receive(now_ms, src, message)
                if self._hb_now:
                    self._send_heartbeat()  # the coordinator may be known now

    def timer(self, now_ms: int, key: Any) -> None:
        self._now_ms = now_ms
        match key:
            case ("heartbeat", seq):
                if seq == self._hb_seq:
                    self._send_heartbeat()
            case ("heartbeat-timeout", corr):
                if corr == self._hb_corr:
                    self._close_coordinator()  # no answer in time: a new connection
                    self._heartbeat_lost()
            case ("group-again", seq):
                if seq == self._again_seq:
                    self._again_pending = False
                    self._send_heartbeat()
                    if self._hb_now and self._hb_corr < 0 and self.state in _ACTIVE:
                        self._arm_again()  # still no coordinator
            case "auto-commit":
                self._auto_commit()
            case "poll-interval-check":
                self._check_poll_interval(now_ms)
            case ("revoke-commit", corr):
                if corr == self._revoke_commit:
                    self._revoke_commit_done(Errors.REQUEST_TIMED_OUT)
            case ("revoke-callback", seq):
                if seq == self._callback_seq:
                    self._slow_revocation_done()
            case _:
                super().timer(now_ms, key)
