"""The broker's idempotent-producer state: every sequence rule and error path, and its
survival across truncation and recovery (it is derived from the log)."""

from __future__ import annotations

from reference import records as rec
from reference.errors import Errors
from reference.log import PartitionLog
from reference.storage import MemoryStorage


def batch(pid: int, epoch: int, seq: int, n: int = 1) -> bytes:
    return rec.encode_batch([rec.RecordInput(None, b"v%d" % (seq + i)) for i in range(n)],
                            producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def check(log: PartitionLog, b: bytes):
    return log.producer_state.check(rec.parse_header(b))


def test_in_order_batches_are_accepted_and_a_retry_is_a_duplicate_with_its_offsets():
    log = PartitionLog(MemoryStorage(), "t-0")
    for seq, n in ((0, 2), (2, 1), (3, 3)):
        b = batch(7, 0, seq, n)
        assert check(log, b) == (Errors.NONE, None)
        log.append_as_leader(b, 0)
    error, original = check(log, batch(7, 0, 2, 1))
    assert error is Errors.DUPLICATE_SEQUENCE_NUMBER
    assert (original.first_offset, original.last_offset) == (2, 2)


def test_gaps_and_old_epochs_are_refused_and_an_unknown_producer_may_start_anywhere():
    log = PartitionLog(MemoryStorage(), "t-0")
    log.append_as_leader(batch(7, 1, 0, 2), 0)
    assert check(log, batch(7, 1, 5))[0] is Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert check(log, batch(7, 0, 2))[0] is Errors.INVALID_PRODUCER_EPOCH
    assert check(log, batch(7, 2, 3))[0] is Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert check(log, batch(7, 2, 0))[0] is Errors.NONE  # a new epoch starts at 0
    # no state for producer 8 (new, or its batches deleted): Kafka accepts any first sequence
    assert check(log, batch(8, 0, 4))[0] is Errors.NONE
    assert check(log, batch(8, 0, 0))[0] is Errors.NONE
    plain = rec.encode_batch([rec.RecordInput(None, b"x")])
    assert check(log, plain) == (Errors.NONE, None)  # not idempotent: no rules


def test_only_the_last_five_batches_are_remembered_as_kafka_does():
    log = PartitionLog(MemoryStorage(), "t-0")
    for seq in range(7):
        log.append_as_leader(batch(1, 0, seq), 0)
    state = log.producer_state
    assert check(log, batch(1, 0, 2))[0] is Errors.DUPLICATE_SEQUENCE_NUMBER
    assert check(log, batch(1, 0, 1))[0] is Errors.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert len(state.producers[1].batches) == 5


def test_the_state_follows_truncation_and_survives_recovery():
    storage = MemoryStorage()
    log = PartitionLog(storage, "t-0")
    for seq in range(4):
        log.append_as_leader(batch(3, 0, seq), 0)
    log.truncate_to(2)  # sequences 2 and 3 are gone: a retry of 2 is new again
    assert check(log, batch(3, 0, 2)) == (Errors.NONE, None)
    recovered = PartitionLog.open(storage, "t-0")
    assert check(recovered, batch(3, 0, 1))[0] is Errors.DUPLICATE_SEQUENCE_NUMBER
    assert check(recovered, batch(3, 0, 2)) == (Errors.NONE, None)


def test_sequences_wrap_from_the_largest_int32_to_zero():
    """Kafka's DefaultRecordBatch.incrementSequence and ProducerAppendInfo.inSequence."""
    log = PartitionLog(MemoryStorage(), "t-0")
    near = rec.encode_batch([rec.RecordInput(None, b"a"), rec.RecordInput(None, b"b")],
                            producer_id=9, producer_epoch=0, base_sequence=2**31 - 2)
    log.append_as_leader(near, 0)
    assert log.producer_state.producers[9].batches[-1].last_sequence == 2**31 - 1
    assert check(log, batch(9, 0, 0))[0] is Errors.NONE
    assert check(log, batch(9, 0, 2**31 - 1))[0] is Errors.OUT_OF_ORDER_SEQUENCE_NUMBER  # already taken
    # a batch that itself wraps: base 2**31 - 1, last sequence 0
    log2 = PartitionLog(MemoryStorage(), "t-1")
    log2.append_as_leader(batch(9, 0, 2**31 - 2), 0)
    across = rec.encode_batch([rec.RecordInput(None, b"c"), rec.RecordInput(None, b"d")],
                              producer_id=9, producer_epoch=0, base_sequence=2**31 - 1)
    assert check(log2, across)[0] is Errors.NONE
    log2.append_as_leader(across, 0)
    assert log2.producer_state.producers[9].batches[-1].last_sequence == 0
    assert check(log2, across)[0] is Errors.DUPLICATE_SEQUENCE_NUMBER
    assert check(log2, batch(9, 0, 1))[0] is Errors.NONE


def test_a_marker_from_an_older_coordinator_is_fenced():
    """Kafka's ProducerAppendInfo.appendEndTxnMarker: a coordinator epoch below the last
    marker's is TRANSACTION_COORDINATOR_FENCED (a coordinator that lost its partition)."""
    log = PartitionLog(MemoryStorage(), "t-0")
    log.append_as_leader(rec.encode_batch([rec.RecordInput(None, b"x")], producer_id=4, producer_epoch=0,
                                          base_sequence=0, transactional=True), 0)
    log.append_as_leader(rec.encode_control_batch(4, 0, True, coordinator_epoch=3), 0)
    state = log.producer_state
    assert state.producers[4].coordinator_epoch == 3
    assert state.check_marker(4, 0, 2) is Errors.TRANSACTION_COORDINATOR_FENCED
    assert state.check_marker(4, 0, 3) is Errors.NONE
    assert state.check_marker(4, 0, 5) is Errors.NONE
    assert state.check_marker(4, -1, 5) is Errors.INVALID_PRODUCER_EPOCH  # the producer epoch first
    rebuilt = type(state).rebuild(log.batches())
    assert rebuilt.producers[4].coordinator_epoch == 3
