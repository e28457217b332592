"""The transaction coordinator: transactional ids, producer epochs, two-phase commit.

Theory of operation
-------------------
Transactional ids are spread over the partitions of the internal topic
``__transaction_state`` by Java's ``String.hashCode`` (as Kafka); the leader of a partition
is the coordinator of its ids. Every state change is written to that partition as a record
(key: the id, value: the metadata as JSON) and takes effect only when the high watermark
passes it, so a coordinator that fails over loses nothing it answered. A new leader loads
the partition's log (the last record per id wins) and finishes any commit or abort whose
markers were not all written.

States (Kafka's ``TransactionState``)::

    Empty -> Ongoing -> PrepareCommit -> CompleteCommit -> Ongoing ...
                     -> PrepareAbort  -> CompleteAbort  -> Ongoing ...

* InitProducerId: a new id gets a producer id and epoch 0; an existing one gets the epoch
  bumped, which fences the previous producer (``PRODUCER_FENCED``). An ongoing transaction
  is aborted first under the bumped epoch; the caller retries on
  ``CONCURRENT_TRANSACTIONS`` until the abort is complete.
* AddPartitionsToTxn / AddOffsetsToTxn: partitions join the ongoing transaction.
  ``verify_only`` (KIP-890 part 1) answers a partition leader asking whether a first
  transactional write belongs to the producer's ongoing transaction.
* EndTxn: Prepare{Commit,Abort} is written, the client is answered, and WriteTxnMarkers go to
  the leader of every partition in the transaction; when all markers are written the state
  becomes Complete{Commit,Abort}. With ``transaction_version`` 2 (KIP-890 part 2) the
  epoch is bumped at every end, so each transaction has its own (producer id, epoch).
* A transaction open longer than its timeout is aborted with a bumped epoch.

Requests carry the epoch the producer holds; anything else is fenced. The bug switch
``txn-unfenced-requests`` accepts the previous epoch as the current one, so a delayed
EndTxn or AddPartitionsToTxn from an earlier transaction acts on a later one
(KAFKA-17754).
"""

from __future__ import annotations

import json
import weakref
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from reference import records as rec
from reference.bugs import Bug
from reference.errors import Errors
from reference.frozen import frozen
from reference.marks import mark
from reference.messages import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TopicPartition,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from reference.purgatory import Purgatory
from reference.topics import OFFSETS_TOPIC, TXN_TOPIC

if TYPE_CHECKING:
    from reference.broker import Broker

MAX_EPOCH = 32_766
MARKER_RETRY_MS = 200
MARKER_TIMEOUT_MS = 30_000
TIMEOUT_CHECK_MS = 500

EMPTY, ONGOING = "Empty", "Ongoing"
PREPARE_COMMIT, PREPARE_ABORT = "PrepareCommit", "PrepareAbort"
COMPLETE_COMMIT, COMPLETE_ABORT = "CompleteCommit", "CompleteAbort"


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units), as a signed 32-bit int."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode) % numPartitions`` (abs clears the sign bit)."""
    return (java_string_hash(key) & 0x7FFFFFFF) % num_partitions


def coordinator_ready(broker: Broker, topic: str, partition: int, loaded: dict[int, int]) -> Errors:
    """May a coordinator answer for ``topic-partition`` now? It must have loaded it, hold the
    broker's lease, and know that what the previous leader wrote is committed."""
    if partition not in loaded or not broker.lease_valid():
        return Errors.NOT_COORDINATOR
    part = broker.partitions.get(TopicPartition(topic, partition))
    if part is None or not part.hw_reached_epoch_start():
        return Errors.COORDINATOR_LOAD_IN_PROGRESS
    return Errors.NONE


@frozen
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: str
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = -1

    def to_json(self) -> bytes:
        return json.dumps({
            "producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
            "last_producer_epoch": self.last_producer_epoch, "timeout_ms": self.timeout_ms,
            "state": self.state, "partitions": sorted(tp.key for tp in self.partitions),
            "start_ms": self.start_ms}, sort_keys=True).encode()

    @classmethod
    def from_json(cls, txn_id: str, raw: bytes) -> TxnMetadata:
        d = json.loads(raw)
        return cls(txn_id, d["producer_id"], d["producer_epoch"], d["last_producer_epoch"],
                   d["timeout_ms"], d["state"],
                   frozenset(TopicPartition.parse(k) for k in d["partitions"]), d["start_ms"])


@dataclass(slots=True)
class _Markers:
    meta: TxnMetadata  # the Prepare* state being completed
    remaining: set[TopicPartition]
    in_flight: dict[int, tuple[int, tuple[TopicPartition, ...]]] = field(default_factory=dict)
    sent_ms: dict[TopicPartition, int] = field(default_factory=dict)


class TransactionCoordinator:
    """Owned by a broker; acts for the ``__transaction_state`` partitions the broker leads."""

    def __init__(self, broker: Broker, num_partitions: int, transaction_version: int = 1) -> None:
        # the broker owns this coordinator: through a weak proxy the two form no reference
        # cycle, so a crashed broker is freed at once (the simulator avoids full collections)
        self.broker = weakref.proxy(broker)
        self.num_partitions = num_partitions
        self.transaction_version = transaction_version
        self.unfenced = Bug.TXN_UNFENCED_REQUESTS in broker.bugs
        self.loaded: dict[int, int] = {}  # partition -> coordinator epoch (its leader epoch)
        self.txns: dict[str, TxnMetadata] = {}
        self.purgatory = Purgatory()  # state changes waiting for the high watermark
        self.pending: set[str] = set()  # transactional ids with a state change in the purgatory
        self.markers: dict[str, _Markers] = {}
        self._timeout_timer = False

    # ------------------------------------------------------------ ownership

    def _partition(self, txn_id: str) -> int:
        return partition_for(txn_id, self.num_partitions)

    def _owns(self, txn_id: str) -> Errors:
        return coordinator_ready(self.broker, TXN_TOPIC, self._partition(txn_id), self.loaded)

    def on_leader(self, now_ms: int, partition: int, leader_epoch: int) -> None:
        """This broker now leads ``__transaction_state-<partition>``: load its state."""
        self._unload(partition)
        log = self.broker.partitions[TopicPartition(TXN_TOPIC, partition)].log
        loaded: dict[str, TxnMetadata] = {}
        for batch in log.batches():
            try:
                for r in rec.decode_records(batch):
                    if r.key is None:
                        continue
                    txn_id = r.key.decode()
                    if r.value is None:
                        loaded.pop(txn_id, None)
                    else:
                        loaded[txn_id] = TxnMetadata.from_json(txn_id, r.value)
            except (rec.CorruptRecordError, ValueError, KeyError):
                continue  # a record this version cannot read is skipped, never fatal
        self.loaded[partition] = leader_epoch
        self.txns.update(loaded)
        self.broker.event("txn-coordinator-loaded", partition=partition, leader_epoch=leader_epoch,
                          transactions=len(loaded))
        for meta in loaded.values():
            if meta.state in (ONGOING, PREPARE_COMMIT, PREPARE_ABORT):
                mark("txn-coordinator-loaded-unfinished")
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                mark("txn-coordinator-resumed-markers")
                self._start_markers(now_ms, meta)
        if not self._timeout_timer:
            self._timeout_timer = True
            self.broker.set_timer(TIMEOUT_CHECK_MS, ("txn", "timeouts"))

    def on_not_leader(self, partition: int) -> None:
        self._unload(partition)

    def _unload(self, partition: int) -> None:
        if partition not in self.loaded:
            return
        del self.loaded[partition]
        for txn_id in [t for t in self.txns if self._partition(t) == partition]:
            del self.txns[txn_id]
            self.markers.pop(txn_id, None)
        self.purgatory.cancel(TopicPartition(TXN_TOPIC, partition), Errors.NOT_COORDINATOR)

    # ------------------------------------------------------------ durable writes

    def _write(self, now_ms: int, meta: TxnMetadata, on_done) -> None:
        """Append ``meta``; apply it and call ``on_done(NONE)`` once the HW passes it."""
        txn_id = meta.transactional_id
        tp = TopicPartition(TXN_TOPIC, self._partition(txn_id))
        batch = rec.encode_batch([rec.RecordInput(txn_id.encode(), meta.to_json(), (), now_ms)])
        error, last = self.broker.append_internal(now_ms, tp, batch)
        if error is not Errors.NONE:
            on_done(error)
            return

        def committed(error: Errors) -> None:
            self.pending.discard(txn_id)
            if error is Errors.NONE:  # (committed by fewer replicas than min.insync.replicas: not applied)
                self.txns[txn_id] = meta
            on_done(error)

        self.pending.add(txn_id)
        self.purgatory.park(tp, last + 1, committed)
        self.on_high_watermark(now_ms, tp.partition)

    def on_high_watermark(self, now_ms: int, partition: int) -> None:
        if partition not in self.loaded:
            return
        tp = TopicPartition(TXN_TOPIC, partition)
        self.purgatory.complete(tp, self.broker.partitions[tp].log.high_watermark, self.broker.isr_satisfied(tp))

    # ------------------------------------------------------------ epoch checks

    def _epoch_ok(self, meta: TxnMetadata, epoch: int) -> bool:
        if epoch == meta.producer_epoch:
            return True
        # the bug: a request from the previous epoch is taken for the current transaction's
        return self.unfenced and epoch == meta.last_producer_epoch and epoch >= 0

    def _check(self, txn_id: str, producer_id: int, epoch: int) -> tuple[TxnMetadata | None, Errors]:
        error = self._owns(txn_id)
        if error is not Errors.NONE:
            return None, error
        meta = self.txns.get(txn_id)
        if meta is None or meta.producer_id != producer_id:
            return None, Errors.INVALID_PRODUCER_ID_MAPPING
        if not self._epoch_ok(meta, epoch):
            mark("txn-producer-fenced")
            return meta, Errors.PRODUCER_FENCED
        if txn_id in self.pending:
            mark("txn-concurrent-transactions")
            return meta, Errors.CONCURRENT_TRANSACTIONS
        return meta, Errors.NONE

    # ------------------------------------------------------------ requests

    def init_producer_id(self, now_ms: int, src: int, req: InitProducerIdRequest) -> None:
        txn_id = req.transactional_id
        assert txn_id is not None

        def answer(error: Errors, pid: int = -1, epoch: int = -1) -> None:
            self.broker.send(src, InitProducerIdResponse(req.correlation_id, error, pid, epoch))

        error = self._owns(txn_id)
        if error is not Errors.NONE:
            answer(error)
            return
        if req.transaction_timeout_ms <= 0:
            answer(Errors.INVALID_TRANSACTION_TIMEOUT)
            return
        if txn_id in self.pending:
            answer(Errors.CONCURRENT_TRANSACTIONS)
            return
        meta = self.txns.get(txn_id)
        if meta is not None and req.producer_id >= 0 and (
                req.producer_id != meta.producer_id or req.producer_epoch != meta.producer_epoch):
            if (req.producer_id == meta.producer_id and req.producer_epoch == meta.last_producer_epoch
                    and meta.state != ONGOING):
                # KIP-360: a retry of a bump that already happened (or the holder of the epoch
                # the coordinator bumped when it aborted a timed-out transaction)
                if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                    answer(Errors.CONCURRENT_TRANSACTIONS)
                else:
                    answer(Errors.NONE, meta.producer_id, meta.producer_epoch)
                return
            answer(Errors.PRODUCER_FENCED)  # only the current holder may bump
            return
        if meta is not None and meta.state == ONGOING:
            # fence the current holder: abort its transaction under a bumped epoch first
            self._end(now_ms, meta, commit=False, bump=True, on_answer=None)
            answer(Errors.CONCURRENT_TRANSACTIONS)
            return
        if meta is not None and meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            answer(Errors.CONCURRENT_TRANSACTIONS)
            return
        if meta is None or meta.producer_epoch >= MAX_EPOCH:
            pid = self.broker.take_producer_id()
            if pid < 0:
                answer(Errors.COORDINATOR_LOAD_IN_PROGRESS)
                return
            new = TxnMetadata(txn_id, pid, 0, -1, req.transaction_timeout_ms, EMPTY)
        else:
            new = replace(meta, producer_epoch=meta.producer_epoch + 1,
                          # a fresh producer must not let the fenced one's epoch back in
                          last_producer_epoch=meta.producer_epoch if req.producer_id >= 0 else -1,
                          timeout_ms=req.transaction_timeout_ms, state=EMPTY,
                          partitions=frozenset(), start_ms=-1)

        def done(error: Errors) -> None:
            if error is Errors.NONE:
                answer(Errors.NONE, new.producer_id, new.producer_epoch)
                self.broker.event("txn-init", transactional_id=txn_id,
                                  producer_id=new.producer_id, producer_epoch=new.producer_epoch)
            else:
                answer(Errors.NOT_COORDINATOR)

        self._write(now_ms, new, done)

    def add_partitions(self, now_ms: int, src: int, req: AddPartitionsToTxnRequest) -> None:
        def answer(error: Errors) -> None:
            self.broker.send(src, AddPartitionsToTxnResponse(req.correlation_id, error))

        meta, error = self._check(req.transactional_id, req.producer_id, req.producer_epoch)
        if req.verify_only:
            if error is Errors.CONCURRENT_TRANSACTIONS:
                error = Errors.NONE  # a pending write does not change the partition set
            if error is Errors.NONE and (meta is None or meta.state != ONGOING
                                         or not set(req.partitions) <= meta.partitions):
                # Kafka's TransactionCoordinator answers a partition that is not in the
                # transaction with TRANSACTION_ABORTABLE (the broker tells older producers
                # INVALID_TXN_STATE instead: reference/server/gateway.py)
                error = Errors.TRANSACTION_ABORTABLE
            answer(error)
            return
        self._add(now_ms, meta, error, frozenset(req.partitions), answer)

    def add_offsets(self, now_ms: int, src: int, req: AddOffsetsToTxnRequest,
                    offsets_partitions: int) -> None:
        def answer(error: Errors) -> None:
            self.broker.send(src, AddOffsetsToTxnResponse(req.correlation_id, error))

        meta, error = self._check(req.transactional_id, req.producer_id, req.producer_epoch)
        tp = TopicPartition(OFFSETS_TOPIC, partition_for(req.group_id, offsets_partitions))
        self._add(now_ms, meta, error, frozenset([tp]), answer)

    def _add(self, now_ms: int, meta: TxnMetadata | None, error: Errors,
             tps: frozenset[TopicPartition], answer) -> None:
        if error is not Errors.NONE:
            answer(error)
            return
        assert meta is not None
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            answer(Errors.CONCURRENT_TRANSACTIONS)
            return
        if meta.state == ONGOING and tps <= meta.partitions:
            answer(Errors.NONE)
            return
        start = meta.start_ms if meta.state == ONGOING else now_ms
        partitions = meta.partitions | tps if meta.state == ONGOING else tps
        new = replace(meta, state=ONGOING, partitions=partitions, start_ms=start)
        self._write(now_ms, new, lambda e: answer(e if e is Errors.NONE else Errors.NOT_COORDINATOR))

    def end_txn(self, now_ms: int, src: int, req: EndTxnRequest) -> None:
        def answer(error: Errors, pid: int = -1, epoch: int = -1) -> None:
            self.broker.send(src, EndTxnResponse(req.correlation_id, error, pid, epoch))

        meta, error = self._check(req.transactional_id, req.producer_id, req.producer_epoch)
        done = COMPLETE_COMMIT if req.commit else COMPLETE_ABORT
        prepare = PREPARE_COMMIT if req.commit else PREPARE_ABORT
        if (error in (Errors.NONE, Errors.PRODUCER_FENCED) and meta is not None
                and self.transaction_version >= 2 and req.producer_epoch == meta.last_producer_epoch
                and req.producer_epoch != meta.producer_epoch):
            # version 2: a retry of an EndTxn that already bumped the epoch
            if meta.state == done:
                answer(Errors.NONE, meta.producer_id, meta.producer_epoch)
                return
            if meta.state == prepare:
                answer(Errors.CONCURRENT_TRANSACTIONS)
                return
            # anything else came from an earlier transaction: fenced (unless the bug lets
            # it through as the current one)
        if error is not Errors.NONE:
            answer(error)
            return
        assert meta is not None
        if meta.state == ONGOING:
            self._end(now_ms, meta, req.commit, bump=self.transaction_version >= 2,
                      on_answer=answer)
        elif meta.state == prepare:
            answer(Errors.CONCURRENT_TRANSACTIONS)
        elif meta.state == done and self.transaction_version < 2:
            answer(Errors.NONE, meta.producer_id, meta.producer_epoch)  # a retry
        else:
            answer(Errors.INVALID_TXN_STATE)

    def _end(self, now_ms: int, meta: TxnMetadata, commit: bool, bump: bool, on_answer) -> None:
        epoch = meta.producer_epoch + 1 if bump else meta.producer_epoch
        new = replace(meta, state=PREPARE_COMMIT if commit else PREPARE_ABORT,
                      producer_epoch=epoch,
                      last_producer_epoch=meta.producer_epoch if bump else meta.last_producer_epoch)

        def done(error: Errors) -> None:
            if error is not Errors.NONE:
                if on_answer is not None:
                    on_answer(Errors.NOT_COORDINATOR)
                return
            self.broker.event("txn-decided", transactional_id=meta.transactional_id,
                              producer_id=new.producer_id, producer_epoch=new.producer_epoch,
                              commit=commit, partitions=sorted(tp.key for tp in new.partitions))
            if on_answer is not None:
                on_answer(Errors.NONE, new.producer_id, new.producer_epoch)
            self._start_markers(now_ms, new)

        self._write(now_ms, new, done)

    # ------------------------------------------------------------ markers

    def _start_markers(self, now_ms: int, meta: TxnMetadata) -> None:
        m = _Markers(meta, set(meta.partitions))
        self.markers[meta.transactional_id] = m
        self._send_markers(now_ms, meta.transactional_id)
        if not m.remaining:
            self._complete(now_ms, meta.transactional_id)

    def _send_markers(self, now_ms: int, txn_id: str) -> None:
        m = self.markers.get(txn_id)
        if m is None or not m.remaining:
            return
        busy = {tp for _d, tps in m.in_flight.values() for tp in tps}
        by_leader: dict[int, list[TopicPartition]] = {}
        leaders = self.broker.leaders()
        for tp in sorted(m.remaining - busy):
            leader = leaders.get(tp, -1)
            if leader >= 0:
                by_leader.setdefault(leader, []).append(tp)
        coordinator_epoch = self.loaded.get(self._partition(txn_id), -1)
        commit = m.meta.state == PREPARE_COMMIT
        for leader, tps in sorted(by_leader.items()):
            corr = self.broker.next_corr()
            m.in_flight[corr] = (leader, tuple(tps))
            req = WriteTxnMarkersRequest(corr, m.meta.producer_id, m.meta.producer_epoch, commit,
                                         coordinator_epoch, tuple(tps))
            self.broker.send(leader, req)  # to itself, too: the network delivers it
            self.broker.set_timer(MARKER_TIMEOUT_MS, ("txn", "marker-timeout", txn_id, corr))
        if m.remaining - busy - {tp for tps in by_leader.values() for tp in tps}:
            self.broker.set_timer(MARKER_RETRY_MS, ("txn", "markers", txn_id))

    def on_markers_response(self, now_ms: int, resp: WriteTxnMarkersResponse) -> None:
        for txn_id, m in list(self.markers.items()):
            if resp.correlation_id not in m.in_flight:
                continue
            del m.in_flight[resp.correlation_id]
            retry = False
            for tp, error in resp.errors:
                if error in (Errors.NONE, Errors.INVALID_PRODUCER_EPOCH, Errors.TRANSACTION_COORDINATOR_FENCED):
                    # INVALID_PRODUCER_EPOCH: a newer epoch already wrote its marker there;
                    # TRANSACTION_COORDINATOR_FENCED: a newer coordinator did (docs/kafka.md,
                    # marker-error-handling: Kafka stops sending and leaves the state as it is)
                    m.remaining.discard(tp)
                else:
                    retry = True
            if retry:
                mark("txn-marker-retried")
            if not m.remaining and not m.in_flight:
                self._complete(now_ms, txn_id)
            elif retry:
                self.broker.set_timer(MARKER_RETRY_MS, ("txn", "markers", txn_id))
            return

    def leaders_changed(self, now_ms: int) -> None:
        """Marker requests to a broker that no longer leads are sent again to the new one."""
        leaders = self.broker.leaders()
        for txn_id, m in list(self.markers.items()):
            stale = [c for c, (leader, tps) in m.in_flight.items()
                     if any(leaders.get(tp, -1) != leader for tp in tps)]
            for c in stale:
                del m.in_flight[c]
            if stale:
                mark("txn-marker-to-moved-leader")
                self._send_markers(now_ms, txn_id)

    def _complete(self, now_ms: int, txn_id: str) -> None:
        m = self.markers.pop(txn_id, None)
        if m is None or txn_id in self.pending:
            return
        done_state = COMPLETE_COMMIT if m.meta.state == PREPARE_COMMIT else COMPLETE_ABORT
        new = replace(m.meta, state=done_state, partitions=frozenset(), start_ms=-1)

        def done(error: Errors) -> None:
            if error is Errors.NONE:
                self.broker.event("txn-complete", transactional_id=txn_id, state=done_state,
                                  producer_id=new.producer_id, producer_epoch=new.producer_epoch)
            elif txn_id in self.txns:
                self.broker.set_timer(MARKER_RETRY_MS, ("txn", "complete", txn_id))

        self._write(now_ms, new, done)

    # ------------------------------------------------------------ timers

    def timer(self, now_ms: int, key: tuple) -> None:
        match key:
            case ("timeouts",):
                self._abort_timed_out(now_ms)
                if self.loaded:
                    self.broker.set_timer(TIMEOUT_CHECK_MS, ("txn", "timeouts"))
                else:
                    self._timeout_timer = False
            case ("markers", txn_id):
                self._send_markers(now_ms, txn_id)
            case ("complete", txn_id):
                meta = self.txns.get(txn_id)
                if (meta is not None and meta.state in (PREPARE_COMMIT, PREPARE_ABORT)
                        and txn_id not in self.pending and txn_id not in self.markers):
                    self.markers[txn_id] = _Markers(meta, set())
                    self._complete(now_ms, txn_id)
            case ("marker-timeout", txn_id, corr):
                m = self.markers.get(txn_id)
                if m is not None and m.in_flight.pop(corr, None) is not None:
                    self._send_markers(now_ms, txn_id)
            case _:
                pass

    def _abort_timed_out(self, now_ms: int) -> None:
        for txn_id in sorted(self.txns):
            meta = self.txns[txn_id]
            if (meta.state == ONGOING and txn_id not in self.pending
                    and now_ms - meta.start_ms > meta.timeout_ms):
                mark("txn-timed-out")
                self.broker.event("txn-timeout", transactional_id=txn_id,
                                  producer_id=meta.producer_id, producer_epoch=meta.producer_epoch)
                self._end(now_ms, meta, commit=False, bump=True, on_answer=None)
