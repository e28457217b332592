"""The produce path: client writes, transaction markers, and the coordinators' own writes.

A produce request, in order (Kafka's ReplicaManager.appendRecords and UnifiedLog):

1. refused unless this broker leads the partition, the acks are -1, 0 or 1, the topic is
   not internal, the ISR is at least min.insync.replicas (acks=all), and the batch is valid
   (CRC, keys on a compacted topic);
2. a transaction's first write to the partition is verified with its transaction
   coordinator first (KIP-890 part 1), and refused if a marker ended the transaction while
   the verification was under way (Kafka's VerificationGuard);
3. an idempotent producer's sequence is checked: a retry of a batch already written is
   answered with the original offsets, a gap is refused;
4. the batch is appended under the leader epoch; acks 0 and 1 are answered at once, acks=all
   parks in the purgatory until the high watermark passes it (or the request times out).

WriteTxnMarkers appends a commit or abort marker to each partition (fenced by producer and
coordinator epoch) and answers once every marker is committed. The coordinators write their
state through :func:`append_internal`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from reference import records as rec
from reference.broker_state import BrokerState
from reference.bugs import Bug
from reference.coordinator import partition_for
from reference.errors import Errors
from reference.leader import complete_produces, maybe_advance_hw, wake_fetches
from reference.marks import mark
from reference.messages import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    ProduceRequest,
    ProduceResponse,
    TopicPartition,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from reference.partition import Partition
from reference.storage import StorageError
from reference.topics import OFFSETS_TOPIC, TXN_TOPIC

if TYPE_CHECKING:
    from reference.group_offsets import GroupOffsets


def on_produce(b: BrokerState, now_ms: int, src: int, req: ProduceRequest, verified: int = 0) -> None:
    """``verified``: the verification guard of a transactional write the coordinator has
    confirmed (0: not verified)."""
    p = b.partitions.get(req.tp)
    error = _produce_error(b, p, req)
    if error is not Errors.NONE:
        if req.acks != 0:
            b.send(src, ProduceResponse(req.correlation_id, req.tp, error))
        return
    assert p is not None
    duplicate = None
    header = rec.parse_header(req.records)
    state = p.log.producer_state
    if (header.is_transactional and not verified
            and not state.txn_open(header.producer_id, header.producer_epoch)
            and not (state.stale_epoch(header.producer_id, header.producer_epoch) and state.txn_open(header.producer_id))
            and (req.add_partition or Bug.TXN_UNFENCED_REQUESTS not in b.bugs)):
        # the first write of a transaction here (or of a new epoch, before the marker of the
        # previous one arrived: KAFKA-18575): ask the coordinator whether this partition is
        # part of the producer's ongoing transaction (KIP-890 part 1), or to add it (part 2),
        # before the log's own checks, as Kafka's UnifiedLog.maybeStartTransactionVerification
        # does. One difference: a stale epoch while a newer transaction is open here is not
        # verified but refused by the log's own checks (Kafka asks the coordinator, which
        # fences it: the client sees INVALID_PRODUCER_EPOCH either way, and the simulated runs
        # keep their histories). The bug skips the check, not the adding that part 2 needs
        _verify(b, src, req, header)
        return
    if (verified and header.is_transactional
            and not state.txn_open(header.producer_id, header.producer_epoch)
            and not state.guard_holds(header.producer_id, verified)):
        # a marker ended the transaction between the verification and this append (Kafka's
        # VerificationGuard): appending would open a transaction that nobody ends
        mark("produce-txn-raced-marker")
        if req.acks != 0:
            b.send(src, ProduceResponse(req.correlation_id, req.tp, Errors.INVALID_TXN_STATE, -1,
                                        p.log.log_start_offset))
        return
    if Bug.NO_SEQUENCE_CHECK not in b.bugs:
        seq_error, duplicate = p.log.producer_state.check(header)
        if seq_error not in (Errors.NONE, Errors.DUPLICATE_SEQUENCE_NUMBER):
            mark("produce-sequence-refused")
            if req.acks != 0:  # refused by the log: Kafka tells its start offset too
                b.send(src, ProduceResponse(req.correlation_id, req.tp, seq_error, -1,
                                            p.log.log_start_offset))
            return
    if duplicate is not None:
        # a retry of a batch already written: answer with the original offsets (acks=all
        # still waits until they are committed)
        base, last = duplicate.first_offset, duplicate.last_offset
        mark("produce-duplicate-sequence")
        b.event("duplicate-sequence", key=req.tp.key, base_offset=base, last_offset=last)
    else:
        try:
            base, last = p.log.append_as_leader(req.records, p.leader_epoch)
        except StorageError:
            mark("produce-storage-error")
            if req.acks != 0:
                b.send(src, ProduceResponse(req.correlation_id, req.tp, Errors.KAFKA_STORAGE_ERROR))
            return
        b.emit("log-append", {"key": req.tp.key, "base_offset": base, "last_offset": last,
                              "leader_epoch": p.leader_epoch})
    if req.acks == -1 and Bug.ACK_BEFORE_ISR not in b.bugs:
        _park(b, p, req.tp, last + 1, now_ms + req.timeout_ms, req.timeout_ms,
              _answer(b, src, req.correlation_id, req.tp, base, p))
    elif req.acks != 0:
        b.send(src, ProduceResponse(req.correlation_id, req.tp, Errors.NONE, base, p.log.log_start_offset))
    maybe_advance_hw(b, now_ms, p)
    complete_produces(b, p)  # a duplicate's original may be committed already
    wake_fetches(b, now_ms, req.tp)


def _answer(b: BrokerState, src: int, correlation_id: int, tp: TopicPartition, base_offset: int,
            p: Partition):
    """How a parked produce is answered: its offsets when committed (and the log start, as
    for a write committed below min.insync.replicas), else only the error."""
    def answer(error: Errors) -> None:
        committed = error in (Errors.NONE, Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
        b.send(src, ProduceResponse(correlation_id, tp, error, base_offset if error is Errors.NONE else -1,
                                    p.log.log_start_offset if committed else -1))
    return answer


def _park(b: BrokerState, p: Partition, tp: TopicPartition, required_offset: int, deadline_ms: int,
          timeout_ms: int, on_done) -> None:
    """Wait in the purgatory for the high watermark, at most until ``deadline_ms``."""
    def done(error: Errors) -> None:
        if error is Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
            mark("produce-not-enough-replicas-after-append")
        elif error is Errors.REQUEST_TIMED_OUT:
            mark("produce-timed-out-in-purgatory")
        on_done(error)

    b.purgatory.park(tp, required_offset, done, deadline_ms)
    b.set_timer(timeout_ms, ("produce-expiry", tp))


def _produce_error(b: BrokerState, p: Partition | None, req: ProduceRequest) -> Errors:
    if b.broker_epoch < 0:
        return Errors.NOT_LEADER_OR_FOLLOWER
    if p is None:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION
    if not p.is_leader:
        return Errors.NOT_LEADER_OR_FOLLOWER
    if req.acks not in (-1, 0, 1):
        return Errors.INVALID_REQUIRED_ACKS
    if req.tp.topic in (TXN_TOPIC, OFFSETS_TOPIC):
        return Errors.INVALID_TOPIC_EXCEPTION  # internal topics are written by coordinators
    if req.acks == -1 and len(p.isr) < p.effective_min_isr:
        mark("produce-not-enough-replicas")
        return Errors.NOT_ENOUGH_REPLICAS
    try:
        rec.validate(req.records)
        if p.log.config.compact and any(r.key is None for r in rec.decode_records(req.records)):
            return Errors.INVALID_RECORD  # a compacted topic needs a key on every record
    except rec.CorruptRecordError:
        return Errors.CORRUPT_MESSAGE
    return Errors.NONE


# ---------------------------------------------------------------- verification (KIP-890 part 1)


def _verify(b: BrokerState, src: int, req: ProduceRequest, header: rec.BatchHeader) -> None:
    guard = b.partitions[req.tp].log.producer_state.start_verification(header.producer_id)

    def verified(error: Errors) -> None:
        if error is Errors.NONE:
            on_produce(b, b.now_ms, src, req, verified=guard)
        elif req.acks != 0:
            if error is Errors.PRODUCER_FENCED:
                error = Errors.INVALID_PRODUCER_EPOCH  # what producers expect here (Kafka's
                # AddPartitionsToTxnManager)
            b.send(src, ProduceResponse(req.correlation_id, req.tp, error))

    if req.transactional_id is None:
        verified(Errors.INVALID_TXN_STATE)
        return
    verify_txn(b, req.transactional_id, header.producer_id, header.producer_epoch, req.tp, verified,
               req.add_partition)


def verify_txn(b: BrokerState, txn_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition,
               then, add: bool = False) -> None:
    """Ask the transaction coordinator whether ``tp`` is in the ongoing transaction of
    (producer id, epoch) (KIP-890 part 1), or (``add``, part 2) to add it to the producer's
    transaction; ``then(error)`` gets the answer."""
    coordinator = b.leaders().get(TopicPartition(
        TXN_TOPIC, partition_for(txn_id, b.config.transaction_state_partitions)), -1)
    if coordinator < 0:
        then(Errors.COORDINATOR_NOT_AVAILABLE)
        return
    corr = b.corr()
    b.verifying[corr] = (then, coordinator)
    b.send(coordinator, AddPartitionsToTxnRequest(corr, txn_id, producer_id, producer_epoch, (tp,),
                                                  verify_only=not add))
    b.set_timer(b.config.alter_partition_timeout_ms, ("verify-timeout", corr))


def on_verified(b: BrokerState, resp: AddPartitionsToTxnResponse) -> None:
    waiting = b.verifying.pop(resp.correlation_id, None)
    if waiting is None:
        return
    then = waiting[0]
    error = resp.error
    then(Errors.COORDINATOR_NOT_AVAILABLE if error is Errors.NOT_COORDINATOR else error)


def verify_timed_out(b: BrokerState, corr: int) -> None:
    waiting = b.verifying.pop(corr, None)
    if waiting is not None:
        then, coordinator = waiting
        b.close_connection(coordinator)
        then(Errors.COORDINATOR_NOT_AVAILABLE)


# ---------------------------------------------------------------- markers and internal writes


def on_write_markers(b: BrokerState, now_ms: int, src: int, req: WriteTxnMarkersRequest) -> None:
    """Append a commit or abort marker to each partition; answer when all are committed."""
    errors: dict[TopicPartition, Errors] = {}
    waiting = [len(req.partitions)]

    def settle(tp: TopicPartition, error: Errors) -> None:
        if error is Errors.NONE and tp.topic == OFFSETS_TOPIC:
            offsets = cast("GroupOffsets", b.coordinators[OFFSETS_TOPIC])
            offsets.on_marker(tp.partition, req.producer_id, req.commit)
        errors[tp] = error
        waiting[0] -= 1
        if waiting[0] == 0:
            b.send(src, WriteTxnMarkersResponse(req.correlation_id, req.producer_id, tuple(sorted(errors.items()))))

    for tp in req.partitions:
        p = b.partitions.get(tp)
        if b.broker_epoch < 0 or p is None or not p.is_leader:
            settle(tp, Errors.NOT_LEADER_OR_FOLLOWER)
            continue
        error = p.log.producer_state.check_marker(req.producer_id, req.producer_epoch, req.coordinator_epoch)
        if error is Errors.NONE and len(p.isr) < p.effective_min_isr:
            error = Errors.NOT_ENOUGH_REPLICAS
        if error is not Errors.NONE:
            settle(tp, error)
            continue
        marker = rec.encode_control_batch(req.producer_id, req.producer_epoch, req.commit,
                                          req.coordinator_epoch, now_ms)
        try:
            base, _last = p.log.append_as_leader(marker, p.leader_epoch)
        except StorageError:
            settle(tp, Errors.KAFKA_STORAGE_ERROR)
            continue
        b.event("txn-marker", key=tp.key, offset=base, producer_id=req.producer_id,
                producer_epoch=req.producer_epoch, commit=req.commit, coordinator_epoch=req.coordinator_epoch)
        timeout = b.config.alter_partition_timeout_ms * 5
        _park(b, p, tp, base + 1, now_ms + timeout, timeout, lambda e, tp=tp: settle(tp, e))
        maybe_advance_hw(b, now_ms, p)
        complete_produces(b, p)
        wake_fetches(b, now_ms, tp)


def append_internal(b: BrokerState, now_ms: int, tp: TopicPartition, batch: bytes) -> tuple[Errors, int]:
    """A coordinator's write to a partition this broker leads: (error, last offset)."""
    p = b.partitions.get(tp)
    if b.broker_epoch < 0 or p is None or not p.is_leader:
        return Errors.NOT_COORDINATOR, -1
    if len(p.isr) < p.effective_min_isr:
        return Errors.NOT_ENOUGH_REPLICAS, -1
    try:
        base, last = p.log.append_as_leader(batch, p.leader_epoch)
    except StorageError:
        return Errors.KAFKA_STORAGE_ERROR, -1
    b.emit("log-append", {"key": tp.key, "base_offset": base, "last_offset": last, "leader_epoch": p.leader_epoch})
    maybe_advance_hw(b, now_ms, p)
    wake_fetches(b, now_ms, tp)
    return Errors.NONE, last
