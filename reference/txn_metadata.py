"""A transactional id's record at its coordinator (Kafka's ``TransactionMetadata``): its
producer id and epoch, its state, and the table of the states each state may change to.

A record is immutable: :meth:`TxnMetadata.move` makes the next one, if :data:`TRANSITIONS`
allows the change (a change it does not list is a bug of the coordinator, never the client's:
:class:`IllegalTransition`), and :meth:`TxnMetadata.completed` the one a Prepare* state
completes to. It is written to ``__transaction_state`` as JSON (:meth:`TxnMetadata.to_json`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from enum import StrEnum

from mypy_extensions import mypyc_attr

from reference.frozen import frozen
from reference.messages import TopicPartition

MAX_EPOCH = 32_766  # the last epoch a producer may use (Kafka: Short.MAX_VALUE - 1)
SHORT_MAX = 32_767


class TxnState(StrEnum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


EMPTY, ONGOING = TxnState.EMPTY, TxnState.ONGOING
PREPARE_COMMIT, PREPARE_ABORT = TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT
COMPLETE_COMMIT, COMPLETE_ABORT = TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT

# the states each state may change to (Kafka's TransactionState.validPreviousStates, turned
# around): InitProducerId bumps the epoch of an idle id (-> Empty), AddPartitionsToTxn and
# AddOffsetsToTxn open or extend a transaction (-> Ongoing), EndTxn, a fenced holder or a
# timeout prepares its end, and the last marker completes it
TRANSITIONS: dict[TxnState, frozenset[TxnState]] = {
    EMPTY: frozenset({EMPTY, ONGOING, PREPARE_ABORT}),  # (an empty abort at version 2)
    ONGOING: frozenset({ONGOING, PREPARE_COMMIT, PREPARE_ABORT}),
    PREPARE_COMMIT: frozenset({COMPLETE_COMMIT}),
    PREPARE_ABORT: frozenset({COMPLETE_ABORT}),
    COMPLETE_COMMIT: frozenset({EMPTY, ONGOING, PREPARE_ABORT}),
    COMPLETE_ABORT: frozenset({EMPTY, ONGOING, PREPARE_ABORT}),
}


@mypyc_attr(native_class=False)  # an exception that subclasses a built-in one stays a Python class when compiled
class IllegalTransition(AssertionError):
    """A state change the table does not allow: a bug of the coordinator, never the client's."""


@frozen
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = -1
    # version 2 at the end of the epochs (a Prepare* state): the producer id the transaction's
    # completion moves to, at epoch 0; after it, the id it left (a retry of the end at the old
    # id is answered with the new one)
    next_producer_id: int = -1
    prev_producer_id: int = -1

    def to_json(self) -> bytes:
        rotation = {"next_producer_id": self.next_producer_id, "prev_producer_id": self.prev_producer_id} \
            if self.next_producer_id >= 0 or self.prev_producer_id >= 0 else {}
        return json.dumps({
            "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
            "last_producer_epoch": self.last_producer_epoch, "timeout_ms": self.timeout_ms,
            "state": self.state, "partitions": sorted(tp.key for tp in self.partitions),
            "start_ms": self.start_ms, **rotation}, sort_keys=True).encode()

    def move(self, state: TxnState, **changes) -> TxnMetadata:
        """This transaction in ``state`` (with ``changes``), if the table allows the change."""
        if state not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"transactional id {self.transactional_id!r}: {self.state} -> {state}")
        return replace(self, state=state, **changes)

    @classmethod
    def from_json(cls, txn_id: str, raw: bytes) -> TxnMetadata:
        d = json.loads(raw)
        return cls(txn_id, d["producer_id"], d["producer_epoch"], d["last_producer_epoch"],
                   d["timeout_ms"], TxnState(d["state"]),
                   frozenset(TopicPartition.parse(k) for k in d["partitions"]), d["start_ms"],
                   d.get("next_producer_id", -1), d.get("prev_producer_id", -1))

    def completed(self, state: TxnState) -> TxnMetadata:
        """The Prepare* state's completion: no partitions, and at the end of the epochs (version
        2) the next producer id at epoch 0, the last epoch the client saw kept (Kafka's
        TransactionMetadata.prepareComplete)."""
        if self.next_producer_id < 0:
            return self.move(state, partitions=frozenset(), start_ms=-1)
        return self.move(state, partitions=frozenset(), start_ms=-1, producer_id=self.next_producer_id,
                         producer_epoch=0, next_producer_id=-1, prev_producer_id=self.producer_id)
