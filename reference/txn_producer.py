"""A sans-IO transactional producer (Kafka's TransactionManager), and sendOffsetsToTransaction.

Theory of operation
-------------------
The producer finds its transaction coordinator (FindCoordinator), gets its producer id and
epoch (InitProducerId with its ``transactional_id``), and then runs one transaction at a
time::

    begin_transaction()
    send(...)                               # partitions join with AddPartitionsToTxn first
    send_offsets_to_transaction(offsets, group[, metadata])   # AddOffsetsToTxn, then TxnOffsetCommit
    commit_transaction() or abort_transaction()   # EndTxn; see :attr:`outcome`

Requests to coordinators run one at a time from a queue of actions; each is retried on
retriable errors (after finding the coordinator again when it moved) until
``transaction_deadline_ms`` passes. ``PRODUCER_FENCED`` or ``INVALID_PRODUCER_EPOCH`` means
another holder of the transactional id, or the coordinator's timeout, fenced this epoch:
the producer starts again with a fresh InitProducerId.

Safety rules this client adds:

* A transaction in which a send failed, or a send or coordinator request ended with an
  unknown outcome, can only be aborted, and it is aborted by bumping the epoch
  (InitProducerId with the current id and epoch, KIP-360), so that a delayed request of
  the old epoch is fenced everywhere.
* After an EndTxn that had to be retried, the epoch is bumped before the next transaction,
  so the delayed first attempt cannot end a later transaction (transaction version 1
  names transactions only by producer id and epoch).
* With transaction version 2 the coordinator bumps the epoch at every EndTxn; the response
  names the new epoch.

A consumer's group metadata (:class:`GroupMetadata`, KIP-447: its generation or member epoch,
member id and instance id) rides on the TxnOffsetCommit, so that the group coordinator refuses
the offsets of a member the group has replaced; without it the producer commits as one
outside the group's protocol.

The outcome of each commit or abort is ``committed``, ``aborted`` or ``unknown`` (a commit
whose EndTxn may or may not have been applied).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

from reference.errors import Errors
from reference.group_messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from reference.messages import (
    COORDINATOR_GROUP,
    COORDINATOR_TRANSACTION,
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TopicPartition,
)
from reference.producer import Producer, ProducerConfig, SendResult

_FENCED = frozenset({Errors.PRODUCER_FENCED, Errors.INVALID_PRODUCER_EPOCH,
                     Errors.INVALID_PRODUCER_ID_MAPPING})
_REFIND = frozenset({Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE})
_BACKOFF = frozenset({Errors.CONCURRENT_TRANSACTIONS, Errors.COORDINATOR_LOAD_IN_PROGRESS,
                      Errors.UNSTABLE_OFFSET_COMMIT, Errors.REQUEST_TIMED_OUT,
                      Errors.NOT_LEADER_OR_FOLLOWER})


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """What a consumer in a group gives sendOffsetsToTransaction (Java's ConsumerGroupMetadata):
    its generation (the member epoch of a KIP-848 group), member id and group.instance.id."""

    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


NO_GROUP_METADATA = GroupMetadata()  # a producer outside the group's protocol


@dataclass(slots=True)
class _Action:
    kind: str  # init, bump, add, add-offsets, offset-commit, end
    started_ms: int
    tps: tuple[TopicPartition, ...] = ()
    commit: bool = False
    group_id: str = ""
    offsets: tuple[tuple[TopicPartition, int], ...] = ()
    metadata: GroupMetadata = NO_GROUP_METADATA
    attempts: int = 0
    timed_out: bool = False  # an attempt got no answer: it may still be applied later


class TransactionalProducer(Producer):
    def __init__(self, node_id: int, bootstrap: list[int], config: ProducerConfig,
                 transactional_id: str, transaction_timeout_ms: int = 60_000,
                 transaction_deadline_ms: int | None = None) -> None:
        if not config.enable_idempotence:
            raise ValueError("a transactional producer needs enable_idempotence")
        super().__init__(node_id, bootstrap, config)
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.deadline_ms = transaction_deadline_ms or config.delivery_timeout_ms
        self.coordinators: dict[tuple[int, str], int] = {}  # (key type, key) -> broker
        self.actions: deque[_Action] = deque()
        self._req_corr = -1
        self._req_node = -1  # where the transaction request in flight went
        self._find_corr = -1
        self._find_key: tuple[int, str] | None = None
        self.in_transaction = False
        self.txn_partitions: set[TopicPartition] = set()
        self._adding: set[TopicPartition] = set()
        self._abortable: Errors | None = None  # why the transaction can only abort
        self._unknown_in_txn = False  # something of this transaction may land late
        self._bump_before_next = False
        self._ending: str | None = None  # "commit" or "abort" once asked
        self.outcome: tuple[str, str | None] | None = None  # (committed|aborted|unknown, error)
        self.fatal: Errors | None = None
        self._abort_reason: str | None = None
        self._txn_started = False  # the coordinator has this transaction's partitions

    # ------------------------------------------------------------ API

    def start(self, now_ms: int) -> None:
        self._now_ms = now_ms
        self._refresh_metadata()
        self._enqueue(_Action("init", now_ms))

    @property
    def ready(self) -> bool:
        """True when a transaction may begin."""
        return (self.producer_id >= 0 and not self.in_transaction and not self.actions
                and self._req_corr < 0)

    def begin_transaction(self) -> None:
        if not self.ready:
            raise RuntimeError("begin_transaction while not ready")
        self.in_transaction = True
        self.txn_partitions = set()
        self._adding = set()
        self._abortable = None
        self._unknown_in_txn = False
        self._ending = None
        self.outcome = None
        self._txn_started = False

    def send(self, now_ms: int, tp: TopicPartition, value: bytes | None,  # type: ignore[override]
             key: bytes | None = None) -> int:
        if not self.in_transaction or self._ending is not None:
            raise RuntimeError("send outside a transaction")
        if tp not in self.txn_partitions and tp not in self._adding:
            self._adding.add(tp)
            self._enqueue(_Action("add", now_ms, (tp,)))
        return super().send(now_ms, tp, value, key)

    def send_offsets_to_transaction(self, now_ms: int, offsets: dict[TopicPartition, int],
                                    group_id: str, metadata: GroupMetadata = NO_GROUP_METADATA) -> None:
        if not self.in_transaction or self._ending is not None:
            raise RuntimeError("send_offsets_to_transaction outside a transaction")
        self._enqueue(_Action("add-offsets", now_ms, group_id=group_id))
        self._enqueue(_Action("offset-commit", now_ms, group_id=group_id,
                              offsets=tuple(sorted(offsets.items())), metadata=metadata))

    def commit_transaction(self, now_ms: int) -> None:
        self._ending = "commit"
        self._now_ms = now_ms
        self._maybe_end(now_ms)

    def abort_transaction(self, now_ms: int) -> None:
        self._ending = "abort"
        self._now_ms = now_ms
        self._maybe_end(now_ms)

    # ------------------------------------------------------------ the producer's hooks

    def _ready_to_send(self) -> bool:
        return self.producer_id >= 0 and self.in_transaction

    def _partition_ready(self, tp: TopicPartition) -> bool:
        return tp in self.txn_partitions

    def _finish(self, b, error: Errors, base_offset: int) -> None:
        if error is not Errors.NONE:
            self._abortable = self._abortable or error
            if b.maybe_appended or error in (Errors.REQUEST_TIMED_OUT, Errors.NETWORK_EXCEPTION):
                self._unknown_in_txn = True
            if error in _FENCED:
                self._unknown_in_txn = True
        for i, (send_id, _r) in enumerate(b.records):
            offset = base_offset + i if error is Errors.NONE and base_offset >= 0 else -1
            self.results.append(SendResult(send_id, b.tp, error, offset,
                                           error is not Errors.NONE and b.maybe_appended))

    def _init_producer_id(self) -> None:
        pass  # InitProducerId goes to the transaction coordinator (the "init" action)

    # ------------------------------------------------------------ ending a transaction

    def _sends_settled(self) -> bool:
        return not self.in_flight and not any(self.queues.values())

    def _maybe_end(self, now_ms: int) -> None:
        if self._ending in (None, "ending") or self.outcome is not None:
            return
        if self._ending == "commit" and self._abortable is None:
            if not self._sends_settled() or self.actions:
                return
            self._ending = "ending"
            if not self.txn_partitions and not self._txn_started:
                self._done("committed", None)  # nothing was added: nothing to commit
                return
            self._enqueue(_Action("end", now_ms, commit=True))
            return
        # abort (asked, or a commit that cannot happen): wait for requests in flight, then
        # drop what was never sent
        if self.in_flight or self._req_corr >= 0:
            return
        for tp in list(self.queues):
            for b in self.queues[tp]:
                b.maybe_appended = False
                self._finish(b, Errors.INVALID_TXN_STATE, -1)  # never sent: it never happens
            self.queues[tp].clear()
        self.actions.clear()
        self._ending = "ending"
        self._abort_reason = self._abortable.name if self._abortable is not None else None
        if self._unknown_in_txn:
            self._enqueue(_Action("bump", now_ms))  # abort by fencing the epoch (KIP-360)
        elif self.txn_partitions or self._txn_started:
            self._enqueue(_Action("end", now_ms, commit=False))
        else:
            self._done("aborted", self._abort_reason)

    def _done(self, outcome: str, error: str | None) -> None:
        self.outcome = (outcome, error)
        self.in_transaction = False
        self._ending = None
        self.txn_partitions = set()

    # ------------------------------------------------------------ coordinator requests

    def _enqueue(self, action: _Action) -> None:
        self.actions.append(action)
        self._next_action()

    def _next_action(self) -> None:
        if self._req_corr >= 0 or not self.actions:
            return
        a = self.actions[0]
        key_type = COORDINATOR_GROUP if a.kind == "offset-commit" else COORDINATOR_TRANSACTION
        key = a.group_id if a.kind == "offset-commit" else self.transactional_id
        assert key is not None
        coordinator = self.coordinators.get((key_type, key), -1)
        if coordinator < 0:
            self._find(key_type, key)
            return
        if self._now_ms - a.started_ms > self.deadline_ms:
            self.actions.popleft()
            self._action_failed(a, Errors.REQUEST_TIMED_OUT)
            self._next_action()
            self._maybe_end(self._now_ms)
            return
        corr = self._next_corr()
        a.attempts += 1
        self._req_corr = corr
        self._req_node = coordinator
        txn_id = self.transactional_id
        assert txn_id is not None  # a transactional producer's requests
        pid, epoch = self.producer_id, self.producer_epoch
        match a.kind:
            case "init":
                msg: object = InitProducerIdRequest(corr, txn_id, self.transaction_timeout_ms)
            case "bump":
                msg = InitProducerIdRequest(corr, txn_id, self.transaction_timeout_ms, pid, epoch)
            case "add":
                msg = AddPartitionsToTxnRequest(corr, txn_id, pid, epoch, a.tps)
            case "add-offsets":
                msg = AddOffsetsToTxnRequest(corr, txn_id, pid, epoch, a.group_id)
            case "offset-commit":
                m = a.metadata
                msg = TxnOffsetCommitRequest(corr, txn_id, a.group_id, pid, epoch, a.offsets,
                                             m.generation_id, m.member_id, m.group_instance_id)
            case _:
                msg = EndTxnRequest(corr, txn_id, pid, epoch, a.commit)
        self.send_message(coordinator, msg)
        self.set_timer(self.config.request_timeout_ms, ("txn-request", corr))

    def _find(self, key_type: int, key: str) -> None:
        if self._find_corr >= 0:
            return
        self._find_corr = self._next_corr()
        self._find_key = (key_type, key)
        target = self.bootstrap[self._find_corr % len(self.bootstrap)]
        self.send_message(target, FindCoordinatorRequest(self._find_corr, key, key_type))
        self._timeout(target, self.config.request_timeout_ms, ("find", self._find_corr))

    def _on_find(self, now_ms: int, resp: FindCoordinatorResponse) -> None:
        if resp.correlation_id != self._find_corr or self._find_key is None:
            return
        self._find_corr = -1
        if resp.error is Errors.NONE:
            self.coordinators[self._find_key] = resp.node_id
            self._next_action()
        else:
            self.set_timer(self.config.retry_backoff_ms, "txn-again")

    def _on_response(self, now_ms: int, corr: int, error: Errors, pid: int = -1,
                     epoch: int = -1) -> None:
        if corr != self._req_corr or not self.actions:
            return
        self._req_corr = -1
        a = self.actions[0]
        if error is Errors.NONE:
            self.actions.popleft()
            self._action_done(now_ms, a, pid, epoch)
        elif error in _REFIND or error in _BACKOFF:
            if error in _REFIND:
                self._forget_coordinator(a)
            self.set_timer(self.config.retry_backoff_ms, "txn-again")
            return
        else:
            self.actions.popleft()
            self._action_failed(a, error)
        self._next_action()
        self._maybe_end(now_ms)
        self._drain(now_ms)

    def _lost(self, now_ms: int, peer: int) -> None:
        """Fail what was in flight on the closed connection to ``peer``: produce requests, and
        the transaction request, whose outcome is then unknown as after its timeout."""
        super()._lost(now_ms, peer)
        if self._req_corr >= 0 and self._req_node == peer and self.actions:
            self._req_corr = -1
            a = self.actions[0]
            a.timed_out = True
            if a.kind in ("add", "add-offsets", "offset-commit"):
                self._unknown_in_txn = True  # it may still be applied, late
            self._forget_coordinator(a)
            self._next_action()
            self._maybe_end(now_ms)

    def _forget_coordinator(self, a: _Action) -> None:
        if a.kind == "offset-commit":
            self.coordinators.pop((COORDINATOR_GROUP, a.group_id), None)
        else:
            self.coordinators.pop((COORDINATOR_TRANSACTION, self.transactional_id or ""), None)

    def _set_epoch(self, pid: int, epoch: int) -> None:
        if (pid, epoch) != (self.producer_id, self.producer_epoch):
            self.producer_id, self.producer_epoch = pid, epoch
            self._sequences.clear()

    def _action_done(self, now_ms: int, a: _Action, pid: int, epoch: int) -> None:
        match a.kind:
            case "init" | "bump":
                self._set_epoch(pid, epoch)
                self.fatal = None
                self._bump_before_next = False
                if a.kind == "bump" and self.in_transaction:
                    self._done("aborted", self._abort_reason)
            case "add":
                self.txn_partitions.update(a.tps)
                self._adding.difference_update(a.tps)
                self._txn_started = True
            case "add-offsets":
                self._txn_started = True
            case "end":
                if pid >= 0 and epoch >= 0 and (pid, epoch) != (self.producer_id, self.producer_epoch):
                    self._set_epoch(pid, epoch)  # version 2: the coordinator bumped it
                elif a.timed_out:
                    self._bump_before_next = True  # the first attempt may still arrive
                if a.commit:
                    self._done("committed", None)
                else:
                    self._done("aborted", self._abort_reason)
                if self._bump_before_next:
                    self._enqueue(_Action("bump", now_ms))
            case _:
                pass

    def _action_failed(self, a: _Action, error: Errors) -> None:
        now_ms = self._now_ms
        if a.kind in ("init", "bump"):
            if a.kind == "bump" and self.in_transaction:
                # fenced while aborting by bump: the fencer (a timeout) aborted it already
                if error in _FENCED:
                    self._done("aborted", self._abort_reason)
                else:
                    self._done("unknown", error.name)  # could not confirm the abort
            self._enqueue(_Action("init", now_ms))  # start over with a fresh InitProducerId
            return
        if a.kind == "end":
            if a.commit:
                # fenced on the first attempt: this request did not commit it
                certain = not a.timed_out and error in _FENCED | {Errors.INVALID_TXN_STATE}
                self._done("aborted" if certain else "unknown", error.name)
            else:
                self._done("aborted", error.name)  # fenced or done: aborted either way
            self._enqueue(_Action("init", now_ms))
            return
        # add, add-offsets, offset-commit: the transaction can only abort now
        self._abortable = self._abortable or error
        if a.timed_out or error in _FENCED:
            self._unknown_in_txn = True
        self._adding.difference_update(a.tps)
        for tp in a.tps:
            # batches waiting for this partition to join were never sent: they fail for sure
            q = self.queues.get(tp)
            while q:
                b = q.popleft()
                b.maybe_appended = False
                self._finish(b, error, -1)

    # ------------------------------------------------------------ inputs

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self._now_ms = now_ms
        match message:
            case FindCoordinatorResponse():
                self._on_find(now_ms, message)
            case InitProducerIdResponse():
                self._on_response(now_ms, message.correlation_id, message.error,
                                  message.producer_id, message.producer_epoch)
            case EndTxnResponse():
                self._on_response(now_ms, message.correlation_id, message.error,
                                  message.producer_id, message.producer_epoch)
            case AddPartitionsToTxnResponse() | AddOffsetsToTxnResponse() | TxnOffsetCommitResponse():
                self._on_response(now_ms, message.correlation_id, message.error)
            case _:
                super().receive(now_ms, src, message)
                self._maybe_end(now_ms)

    def timer(self, now_ms: int, key: Any) -> None:
        self._now_ms = now_ms
        match key:
            case ("txn-request", corr):
                if corr == self._req_corr and self.actions:
                    self._close(now_ms, self._req_node)  # failing it, and what else was in flight there
            case ("find", corr):
                if corr == self._find_corr:
                    self._find_corr = -1
                    self._close(now_ms, self.bootstrap[corr % len(self.bootstrap)])  # where _find asked
                    self._next_action()
            case "txn-again":
                self._next_action()
            case _:
                super().timer(now_ms, key)
                self._maybe_end(now_ms)
