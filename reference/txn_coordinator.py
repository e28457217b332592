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

States (Kafka's ``TransactionState``; :data:`reference.txn_metadata.TRANSITIONS` is the
table, and a change it does not list is an error)::

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

from dataclasses import dataclass, field

from reference import records as rec
from reference.bugs import Bug
from reference.coordinator import Coordinator, CoordinatorHost, partition_for
from reference.errors import Errors
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
from reference.topics import OFFSETS_TOPIC, TXN_TOPIC
from reference.txn_metadata import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    EMPTY,
    MAX_EPOCH,
    ONGOING,
    PREPARE_ABORT,
    PREPARE_COMMIT,
    SHORT_MAX,
    TxnMetadata,
)

MARKER_RETRY_MS = 200
MARKER_TIMEOUT_MS = 30_000
TIMEOUT_CHECK_MS = 500



@dataclass(slots=True)
class _Markers:
    meta: TxnMetadata  # the Prepare* state being completed
    remaining: set[TopicPartition]
    in_flight: dict[int, tuple[int, tuple[TopicPartition, ...]]] = field(default_factory=dict)
    sent_ms: dict[TopicPartition, int] = field(default_factory=dict)


class TransactionCoordinator(Coordinator):
    """Acts for the ``__transaction_state`` partitions its broker leads."""

    topic = TXN_TOPIC

    def __init__(self, host: CoordinatorHost, num_partitions: int, transaction_version: int = 1,
                 producer_epoch_start: int = 0) -> None:
        super().__init__(host, num_partitions)
        self.transaction_version = transaction_version
        self.producer_epoch_start = producer_epoch_start
        self.overflow = Bug.TXN_EPOCH_OVERFLOW in host.bugs
        self.unfenced = Bug.TXN_UNFENCED_REQUESTS in host.bugs
        self.skip_offline = Bug.TXN_MARKERS_SKIP_OFFLINE in host.bugs
        self.txns: dict[str, TxnMetadata] = {}
        self.changes = 0  # counts the changes of ``txns`` (what the white-box invariants watch)
        self.pending: set[str] = set()  # transactional ids with a state change in the purgatory
        self.markers: dict[str, _Markers] = {}
        self._timeout_timer = False

    def _owns(self, txn_id: str) -> Errors:
        return self._ready(self.partition_of(txn_id))

    # ------------------------------------------------------------ leadership

    def _load(self, now_ms: int, partition: int, leader_epoch: int, log) -> None:
        """The last record of each id wins; commits and aborts whose markers were not all
        written are finished."""
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
        self.txns.update(loaded)
        self.changes += 1
        self.host.event("txn-coordinator-loaded", partition=partition, leader_epoch=leader_epoch,
                        transactions=len(loaded))
        for meta in loaded.values():
            if meta.state in (ONGOING, PREPARE_COMMIT, PREPARE_ABORT):
                mark("txn-coordinator-loaded-unfinished")
            if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
                mark("txn-coordinator-resumed-markers")
                self._start_markers(now_ms, meta)
        if not self._timeout_timer:
            self._timeout_timer = True
            self.host.set_timer(TIMEOUT_CHECK_MS, ("txn", "timeouts"))

    def _forget(self, partition: int) -> None:
        for txn_id in [t for t in self.txns if self.partition_of(t) == partition]:
            del self.txns[txn_id]
            self.markers.pop(txn_id, None)

    def _write_meta(self, now_ms: int, meta: TxnMetadata, on_done) -> None:
        """Write ``meta``; it is applied, and ``on_done(NONE)`` called, once committed."""
        txn_id = meta.transactional_id
        batch = rec.encode_batch([rec.RecordInput(txn_id.encode(), meta.to_json(), (), now_ms)])

        def committed(error: Errors) -> None:
            self.pending.discard(txn_id)
            if error is Errors.NONE:  # (committed by fewer replicas than min.insync.replicas: not applied)
                self.txns[txn_id] = meta
                self.changes += 1
            on_done(error)

        self.pending.add(txn_id)
        self._write(now_ms, self.partition_of(txn_id), batch, committed)

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
        if meta is not None and producer_id >= 0 and meta.next_producer_id == producer_id:
            # the producer already took the id its last end moved to, whose markers are still
            # being written (Kafka: the pending transition is checked first)
            return meta, Errors.CONCURRENT_TRANSACTIONS
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
            self.host.send(src, InitProducerIdResponse(req.correlation_id, error, pid, epoch))

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
            pid = self.host.take_producer_id()
            if pid < 0:
                answer(Errors.COORDINATOR_LOAD_IN_PROGRESS)
                return
            new = TxnMetadata(txn_id, pid, self.producer_epoch_start, -1, req.transaction_timeout_ms, EMPTY)
        else:
            new = meta.move(EMPTY, producer_epoch=meta.producer_epoch + 1,
                            # a fresh producer must not let the fenced one's epoch back in
                            last_producer_epoch=meta.producer_epoch if req.producer_id >= 0 else -1,
                            timeout_ms=req.transaction_timeout_ms, partitions=frozenset(), start_ms=-1)

        def done(error: Errors) -> None:
            if error is Errors.NONE:
                answer(Errors.NONE, new.producer_id, new.producer_epoch)
                self.host.event("txn-init", transactional_id=txn_id,
                                producer_id=new.producer_id, producer_epoch=new.producer_epoch)
            else:
                answer(Errors.NOT_COORDINATOR)

        self._write_meta(now_ms, new, done)

    def add_partitions(self, now_ms: int, src: int, req: AddPartitionsToTxnRequest) -> None:
        def answer(error: Errors) -> None:
            self.host.send(src, AddPartitionsToTxnResponse(req.correlation_id, error))

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
            self.host.send(src, AddOffsetsToTxnResponse(req.correlation_id, error))

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
        new = meta.move(ONGOING, partitions=partitions, start_ms=start)
        self._write_meta(now_ms, new, lambda e: answer(e if e is Errors.NONE else Errors.NOT_COORDINATOR))

    def end_txn(self, now_ms: int, src: int, req: EndTxnRequest) -> None:
        def answer(error: Errors, pid: int = -1, epoch: int = -1) -> None:
            self.host.send(src, EndTxnResponse(req.correlation_id, error, pid, epoch))

        meta, error = self._check(req.transactional_id, req.producer_id, req.producer_epoch)
        done = COMPLETE_COMMIT if req.commit else COMPLETE_ABORT
        prepare = PREPARE_COMMIT if req.commit else PREPARE_ABORT
        # the producer's transaction version (its EndTxn version, as Kafka decides it), else ours
        tv2 = (req.transaction_version or self.transaction_version) >= 2
        rotated = self.txns.get(req.transactional_id) if error is Errors.INVALID_PRODUCER_ID_MAPPING else None
        if tv2 and rotated is not None and (req.producer_id, req.producer_epoch) == (rotated.prev_producer_id, MAX_EPOCH) \
                and rotated.producer_epoch == 0 and rotated.state in (COMPLETE_COMMIT, COMPLETE_ABORT):
            # a retry of the end that moved the producer to a new id (Kafka's retryOnOverflow)
            if (rotated.state == COMPLETE_COMMIT) == req.commit:
                answer(Errors.NONE, rotated.producer_id, 0)
            else:
                answer(Errors.INVALID_TXN_STATE)
            return
        if (error in (Errors.NONE, Errors.PRODUCER_FENCED) and meta is not None and tv2
                and meta.state != ONGOING):
            self._end_after_bump(now_ms, meta, req, answer)
            return
        if error is not Errors.NONE:
            answer(error)
            return
        assert meta is not None
        if meta.state == ONGOING:
            self._end(now_ms, meta, req.commit, bump=tv2, on_answer=answer, tv2=tv2)
        # below: version 1 only (version 2 with no transaction open was answered above)
        elif meta.state == prepare:
            answer(Errors.CONCURRENT_TRANSACTIONS)
        elif meta.state == done:
            answer(Errors.NONE, meta.producer_id, meta.producer_epoch)  # a retry
        else:
            answer(Errors.INVALID_TXN_STATE)

    def _end_after_bump(self, now_ms: int, meta: TxnMetadata, req: EndTxnRequest, answer) -> None:
        """Version 2, no transaction open (Kafka's TransactionCoordinator.endTransaction, its
        table for Empty, CompleteAbort and CompleteCommit): a retry of the end that bumped the
        epoch, at the epoch before the bump, is answered as it was (the other outcome:
        INVALID_TXN_STATE); at the current epoch an abort ends an empty transaction and bumps
        the epoch, a commit is INVALID_TXN_STATE; any other epoch is fenced."""
        retry = req.producer_epoch + 1 == meta.producer_epoch
        current = req.producer_epoch == meta.producer_epoch
        if meta.state in (PREPARE_COMMIT, PREPARE_ABORT):
            if not retry:
                answer(Errors.PRODUCER_FENCED)
            elif (meta.state == PREPARE_COMMIT) == req.commit:
                answer(Errors.CONCURRENT_TRANSACTIONS)
            else:
                answer(Errors.INVALID_TXN_STATE)
        elif not (current or (retry and meta.state != EMPTY)):
            answer(Errors.PRODUCER_FENCED)
        elif retry:
            same = (meta.state == COMPLETE_COMMIT) == req.commit
            if same:
                answer(Errors.NONE, meta.producer_id, meta.producer_epoch)
            else:
                answer(Errors.INVALID_TXN_STATE)
        elif req.commit:
            answer(Errors.INVALID_TXN_STATE)
        else:
            mark("txn-empty-abort")
            self._end(now_ms, meta, commit=False, bump=True, on_answer=answer, tv2=True)

    def _end(self, now_ms: int, meta: TxnMetadata, commit: bool, bump: bool, on_answer,
             tv2: bool | None = None) -> None:
        """Prepare the end of ``meta``'s transaction (``bump``: under the next epoch) and send
        its markers; ``on_answer(error, pid, epoch)`` for a client's EndTxn, None for a fence
        or a timeout. ``tv2``: the transaction's version is 2 (None: the coordinator's)."""
        epoch = meta.producer_epoch + 1 if bump else meta.producer_epoch
        next_pid = -1
        tv2 = self.transaction_version >= 2 if tv2 is None else tv2
        if self.overflow:
            epoch = (epoch + 0x8000) % 0x10000 - 0x8000  # the bug: a Java short wraps
        elif bump and tv2 and meta.producer_epoch >= MAX_EPOCH:
            # version 2 at the last epoch a producer may use: the markers go out at the next
            # epoch (never past 32767) and the producer's next transaction under a new producer
            # id, whether a client, a fence or a timeout ends it (Kafka 4.3's
            # generateTxnTransitMetadataForTxnCompletion, KAFKA-20090)
            next_pid = self.host.take_producer_id()
            if next_pid < 0:  # a block of ids is on its way: the client (or the next check) retries
                if on_answer is not None:
                    on_answer(Errors.COORDINATOR_LOAD_IN_PROGRESS)
                return
            mark("txn-producer-id-rotated")
            epoch = min(epoch, SHORT_MAX)
        new = meta.move(PREPARE_COMMIT if commit else PREPARE_ABORT, producer_epoch=epoch,
                        last_producer_epoch=meta.producer_epoch if bump else meta.last_producer_epoch,
                        next_producer_id=next_pid)

        def done(error: Errors) -> None:
            if error is not Errors.NONE:
                if on_answer is not None:
                    on_answer(Errors.NOT_COORDINATOR)
                return
            self.host.event("txn-decided", transactional_id=meta.transactional_id,
                            producer_id=new.producer_id, producer_epoch=new.producer_epoch,
                              commit=commit, partitions=sorted(tp.key for tp in new.partitions))
            if on_answer is not None:  # the ids the completion will have (Kafka: prepareComplete's)
                after = new.completed(COMPLETE_COMMIT if commit else COMPLETE_ABORT)
                on_answer(Errors.NONE, after.producer_id, after.producer_epoch)
            self._start_markers(now_ms, new)

        self._write_meta(now_ms, new, done)

    # ------------------------------------------------------------ markers

    def _start_markers(self, now_ms: int, meta: TxnMetadata) -> None:
        if not meta.partitions:  # no marker to write (an empty abort at version 2): complete it
            self.host.set_timer(0, ("txn", "complete", meta.transactional_id))  # (once this write settled)
            return
        self.markers[meta.transactional_id] = _Markers(meta, set(meta.partitions))
        self._send_markers(now_ms, meta.transactional_id)

    def _send_markers(self, now_ms: int, txn_id: str) -> None:
        m = self.markers.get(txn_id)
        if m is None or not m.remaining:
            return
        busy = {tp for _d, tps in m.in_flight.values() for tp in tps}
        by_leader: dict[int, list[TopicPartition]] = {}
        leaderless: list[TopicPartition] = []
        for tp in sorted(m.remaining - busy):
            leader = self.host.leader_of(tp)
            if leader >= 0:
                by_leader.setdefault(leader, []).append(tp)
            elif self.host.has_partition(tp):
                leaderless.append(tp)
        if leaderless and self.skip_offline:
            self._skip_leaderless(now_ms, txn_id, m, leaderless)
            if not m.remaining:
                return
        elif leaderless:
            # Kafka's Node.noNode: the marker waits in the unknown-broker queue for a leader
            mark("txn-marker-awaits-leader")
        coordinator_epoch = self.loaded.get(self.partition_of(txn_id), -1)
        commit = m.meta.state == PREPARE_COMMIT
        for leader, tps in sorted(by_leader.items()):
            corr = self.host.corr()
            m.in_flight[corr] = (leader, tuple(tps))
            req = WriteTxnMarkersRequest(corr, m.meta.producer_id, m.meta.producer_epoch, commit,
                                         coordinator_epoch, tuple(tps))
            self.host.send(leader, req)  # to itself, too: the network delivers it
            self.host.set_timer(MARKER_TIMEOUT_MS, ("txn", "marker-timeout", txn_id, corr))
        if m.remaining - busy - {tp for tps in by_leader.values() for tp in tps}:
            self.host.set_timer(MARKER_RETRY_MS, ("txn", "markers", txn_id))

    def _skip_leaderless(self, now_ms: int, txn_id: str, m: _Markers, tps: list[TopicPartition]) -> None:
        """The bug (KAFKA-20734): Kafka 4.3's metadata cache answers "no endpoint" for a
        partition whose leader is -1, and TransactionMarkerChannelManager takes that for a
        deleted partition (KAFKA-5202): it removes the partition from the transaction without
        its marker and completes the transaction once the others are written."""
        self.host.event("txn-markers-skipped", transactional_id=txn_id, producer_id=m.meta.producer_id,
                        producer_epoch=m.meta.producer_epoch, partitions=[tp.key for tp in tps],
                        reason="no leader endpoint: the partitions are likely deleted already and can be skipped")
        m.remaining.difference_update(tps)
        if not m.remaining and not m.in_flight:
            del self.markers[txn_id]
            self.host.set_timer(0, ("txn", "complete", txn_id))  # (once the write under way settled)

    def on_markers_response(self, now_ms: int, resp: WriteTxnMarkersResponse) -> None:
        for txn_id, m in list(self.markers.items()):
            if resp.correlation_id not in m.in_flight:
                continue
            del m.in_flight[resp.correlation_id]
            retry = False
            for tp, error in resp.errors:
                if error in (Errors.NONE, Errors.INVALID_PRODUCER_EPOCH, Errors.TRANSACTION_COORDINATOR_FENCED):
                    # INVALID_PRODUCER_EPOCH: a newer epoch already wrote its marker there;
                    # TRANSACTION_COORDINATOR_FENCED: a newer coordinator did (docs/reference/deviations.md,
                    # marker-error-handling: Kafka stops sending and leaves the state as it is)
                    m.remaining.discard(tp)
                else:
                    retry = True
            if retry:
                mark("txn-marker-retried")
            if not m.remaining and not m.in_flight:
                self._complete(now_ms, txn_id)
            elif retry:
                self.host.set_timer(MARKER_RETRY_MS, ("txn", "markers", txn_id))
            return

    def leaders_changed(self, now_ms: int) -> None:
        """Marker requests to a broker that no longer leads are sent again to the new one."""
        for txn_id, m in list(self.markers.items()):
            stale = [c for c, (leader, tps) in m.in_flight.items()
                     if any(self.host.leader_of(tp) != leader for tp in tps)]
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
        new = m.meta.completed(done_state)

        def done(error: Errors) -> None:
            if error is Errors.NONE:
                self.host.event("txn-complete", transactional_id=txn_id, state=done_state,
                                producer_id=new.producer_id, producer_epoch=new.producer_epoch)
            elif txn_id in self.txns:
                self.host.set_timer(MARKER_RETRY_MS, ("txn", "complete", txn_id))

        self._write_meta(now_ms, new, done)

    # ------------------------------------------------------------ KIP-664's admin reads

    def describe(self, txn_id: str) -> tuple[Errors, TxnMetadata | None]:
        """DescribeTransactions: the transaction, if this coordinator answers for its id
        (Kafka's TransactionCoordinator.handleDescribeTransactions)."""
        error = self._owns(txn_id) if txn_id else Errors.INVALID_REQUEST
        meta = self.txns.get(txn_id)
        if error is Errors.NONE and meta is None:
            error = Errors.TRANSACTIONAL_ID_NOT_FOUND
        return error, meta if error is Errors.NONE else None

    def listing(self) -> tuple[Errors, list[TxnMetadata]]:
        """ListTransactions: every transaction of the partitions this coordinator loaded, by
        id; nothing while one of them is still loading (Kafka's listTransactionStates)."""
        if not self.host.lease_valid():
            return Errors.COORDINATOR_NOT_AVAILABLE, []
        if any(self._ready(p) is Errors.COORDINATOR_LOAD_IN_PROGRESS for p in self.loaded):
            return Errors.COORDINATOR_LOAD_IN_PROGRESS, []
        return Errors.NONE, [self.txns[t] for t in sorted(self.txns)]

    # ------------------------------------------------------------ timers

    def timer(self, now_ms: int, key: tuple) -> None:
        match key:
            case ("timeouts",):
                self._abort_timed_out(now_ms)
                if self.loaded:
                    self.host.set_timer(TIMEOUT_CHECK_MS, ("txn", "timeouts"))
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
                sent = m.in_flight.pop(corr, None) if m is not None else None
                if sent is not None:
                    self.host.close_connection(sent[0])  # a new connection for the retry
                    self._send_markers(now_ms, txn_id)
            case _:
                pass

    def _abort_timed_out(self, now_ms: int) -> None:
        for txn_id in sorted(self.txns):
            meta = self.txns[txn_id]
            if (meta.state == ONGOING and txn_id not in self.pending
                    and now_ms - meta.start_ms > meta.timeout_ms):
                mark("txn-timed-out")
                self.host.event("txn-timeout", transactional_id=txn_id,
                                producer_id=meta.producer_id, producer_epoch=meta.producer_epoch)
                self._end(now_ms, meta, commit=False, bump=True, on_answer=None)
