"""Transactions against real brokers (FIFO router, no simulator): the coordinator's state
machine and its error paths, markers, the last stable offset, read_committed fetches,
KIP-890 verification and epoch bumps, and the bug switches that break them."""

from __future__ import annotations

from reference import records as rec
from reference.coordinator import java_string_hash, partition_for
from reference.errors import Errors
from reference.messages import (
    COORDINATOR_TRANSACTION,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    CreateTopicsRequest,
    EndTxnRequest,
    EndTxnResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ProduceRequest,
    ProduceResponse,
    TopicPartition,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from reference.producer_state import ProducerStateManager
from reference.topics import TXN_TOPIC
from tests.reference.test_broker import TP, Router

TXN = "app-1"


def txn_router(bugs=frozenset(), transaction_version: int = 1) -> Router:
    r = Router(bugs=bugs)
    if transaction_version != 1:
        for b in (1, 2, 3):
            r.nodes[b].txn.transaction_version = transaction_version
    r.request(0, CreateTopicsRequest(2, TXN_TOPIC, 3, 3))
    for _ in range(10):
        r.tick(200)
    return r


def coordinator(r: Router, txn_id: str = TXN) -> int:
    r.request(1, FindCoordinatorRequest(1, txn_id, COORDINATOR_TRANSACTION))
    [resp] = r.replies(FindCoordinatorResponse)
    assert resp.error is Errors.NONE
    return resp.node_id


def settle(r: Router, n: int = 5) -> None:
    for _ in range(n):
        r.tick(10)


def init(r: Router, c: int, txn_id: str = TXN, timeout_ms: int = 60_000) -> tuple[int, int]:
    for _ in range(10):
        r.request(c, InitProducerIdRequest(7, txn_id, timeout_ms))
        settle(r)
        [resp] = r.replies(InitProducerIdResponse)
        if resp.error is Errors.NONE:
            return resp.producer_id, resp.producer_epoch
        assert resp.error in (Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.CONCURRENT_TRANSACTIONS)
        r.tick(200)
    raise AssertionError("no producer id")


def add(r: Router, c: int, pid: int, epoch: int, tps=(TP,), txn_id: str = TXN) -> Errors:
    r.request(c, AddPartitionsToTxnRequest(8, txn_id, pid, epoch, tuple(tps)))
    settle(r)
    [resp] = r.replies(AddPartitionsToTxnResponse)
    return resp.error


def produce(r: Router, pid: int, epoch: int, seq: int, value: bytes, txn_id: str | None = TXN) -> Errors:
    data = rec.encode_batch([rec.RecordInput(None, value)], producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq, transactional=True)
    r.request(1, ProduceRequest(9, -1, 5_000, TP, data, txn_id))
    settle(r)
    [resp] = r.replies(ProduceResponse)
    return resp.error


def end(r: Router, c: int, pid: int, epoch: int, commit: bool) -> EndTxnResponse:
    r.request(c, EndTxnRequest(10, TXN, pid, epoch, commit))
    settle(r)
    [resp] = r.replies(EndTxnResponse)
    return resp


def fetch_values(r: Router, isolation_level: int) -> list[bytes]:
    r.request(1, FetchRequest(11, -1, -1, 0, isolation_level, (FetchPartition(TP, -1, 0, -1),)))
    [resp] = r.replies(FetchResponse)
    part = resp.partitions[0]
    aborted = sorted(part.aborted_transactions, key=lambda a: a[1])
    aborting: set[int] = set()
    out = []
    for b in part.records:
        h = rec.parse_header(b)
        while aborted and aborted[0][1] <= h.last_offset:
            aborting.add(aborted.pop(0)[0])
        if h.is_control:
            if not rec.control_is_commit(b):
                aborting.discard(h.producer_id)
            continue
        if isolation_level == 1 and h.producer_id in aborting:
            continue
        out.extend(x.value for x in rec.decode_records(b))
    return out


def lso(r: Router) -> int:
    r.request(1, ListOffsetsRequest(12, TP, -1, -1, 1))
    [resp] = r.replies(ListOffsetsResponse)
    return resp.offset


def test_java_string_hash_and_the_coordinator_partition_match_kafka():
    assert java_string_hash("hello") == 99162322  # "hello".hashCode() in Java
    assert java_string_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE
    assert partition_for("polygenelubricants", 50) == 0  # Utils.abs clears the sign bit
    assert partition_for("hello", 50) == 99162322 % 50


def test_committed_records_become_visible_to_read_committed_only_at_the_commit():
    r = txn_router()
    c = coordinator(r)
    pid, epoch = init(r, c)
    assert add(r, c, pid, epoch) is Errors.NONE
    assert produce(r, pid, epoch, 0, b"a") is Errors.NONE
    assert produce(r, pid, epoch, 1, b"b") is Errors.NONE
    assert fetch_values(r, 0) == [b"a", b"b"]  # read_uncommitted sees the open transaction
    assert fetch_values(r, 1) == [] and lso(r) == 0
    assert end(r, c, pid, epoch, commit=True).error is Errors.NONE
    settle(r, 10)
    assert fetch_values(r, 1) == [b"a", b"b"]
    assert lso(r) == 3  # two records and the commit marker


def test_aborted_records_are_listed_and_dropped_by_read_committed():
    r = txn_router()
    c = coordinator(r)
    pid, epoch = init(r, c)
    add(r, c, pid, epoch)
    produce(r, pid, epoch, 0, b"gone")
    assert end(r, c, pid, epoch, commit=False).error is Errors.NONE
    settle(r, 10)
    assert fetch_values(r, 0) == [b"gone"]
    assert fetch_values(r, 1) == []
    log = r.nodes[1].partitions[TP].log
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in log.producer_state.aborted] == [
        (pid, 0, 1)]
    rebuilt = ProducerStateManager.rebuild(log.batches())  # after a restart: from the log
    assert rebuilt.aborted == log.producer_state.aborted
    # the next transaction of the same producer commits normally (sequences continue)
    add(r, c, pid, epoch)
    assert produce(r, pid, epoch, 1, b"kept") is Errors.NONE
    end(r, c, pid, epoch, commit=True)
    settle(r, 10)
    assert fetch_values(r, 1) == [b"kept"]


def test_a_new_init_fences_the_previous_epoch_everywhere():
    r = txn_router()
    c = coordinator(r)
    pid, epoch = init(r, c)
    add(r, c, pid, epoch)
    produce(r, pid, epoch, 0, b"zombie")
    # a second instance with the same transactional id: the open transaction is aborted
    # under a bumped epoch, then the new instance gets the epoch after it
    pid2, epoch2 = init(r, c)
    assert pid2 == pid and epoch2 > epoch
    settle(r, 10)
    assert fetch_values(r, 1) == []
    assert add(r, c, pid, epoch) is Errors.PRODUCER_FENCED
    assert end(r, c, pid, epoch, commit=True).error is Errors.PRODUCER_FENCED
    assert produce(r, pid, epoch, 1, b"late") is Errors.INVALID_PRODUCER_EPOCH


def test_the_coordinator_aborts_a_transaction_that_outlives_its_timeout():
    r = txn_router()
    c = coordinator(r)
    pid, epoch = init(r, c, timeout_ms=1_000)
    add(r, c, pid, epoch)
    produce(r, pid, epoch, 0, b"slow")
    for _ in range(30):
        r.tick(100)
    assert end(r, c, pid, epoch, commit=True).error is Errors.PRODUCER_FENCED
    assert fetch_values(r, 1) == [] and lso(r) == 2


def test_coordinator_error_paths():
    r = txn_router()
    c = coordinator(r)
    pid, epoch = init(r, c)
    other = 2 if c != 2 else 3
    assert add(r, other, pid, epoch) is Errors.NOT_COORDINATOR
    assert add(r, c, pid + 1, epoch) is Errors.INVALID_PRODUCER_ID_MAPPING
    assert end(r, c, pid, epoch, commit=True).error is Errors.INVALID_TXN_STATE  # nothing open
    add(r, c, pid, epoch)
    r.drop = lambda src, dst, msg: isinstance(msg, FetchRequest)  # no replication for now
    r.request(c, EndTxnRequest(20, TXN, pid, epoch, True))  # its write is pending
    r.request(c, EndTxnRequest(21, TXN, pid, epoch, True))
    r.drop = lambda src, dst, msg: False
    for _ in range(200):  # the followers' lost fetches time out and are sent again
        r.tick(200)
    first, second = sorted(r.replies(EndTxnResponse), key=lambda x: x.correlation_id)
    assert first.error is Errors.NONE and second.error is Errors.CONCURRENT_TRANSACTIONS
    assert end(r, c, pid, epoch, commit=True).error is Errors.NONE  # a retry once complete
    assert end(r, c, pid, epoch, commit=False).error is Errors.INVALID_TXN_STATE
    r.request(c, InitProducerIdRequest(22, TXN, 0))
    [resp] = r.replies(InitProducerIdResponse)
    assert resp.error is Errors.INVALID_TRANSACTION_TIMEOUT


def test_a_first_transactional_write_to_a_partition_not_in_the_transaction_is_refused():
    r = txn_router()
    c = coordinator(r)
    pid, epoch = init(r, c)
    # never added: Kafka's coordinator answers the verification TRANSACTION_ABORTABLE (the
    # wire layer tells producers before Produce v11 INVALID_TXN_STATE)
    assert produce(r, pid, epoch, 0, b"x") is Errors.TRANSACTION_ABORTABLE
    assert produce(r, pid, epoch, 0, b"x", txn_id=None) is Errors.INVALID_TXN_STATE
    assert r.nodes[1].partitions[TP].log.log_end_offset == 0
    bug = txn_router(bugs=frozenset({"txn-unfenced-requests"}))
    c = coordinator(bug)
    pid, epoch = init(bug, c)
    assert produce(bug, pid, epoch, 0, b"x") is Errors.NONE  # the bug: appended, unverified
    assert fetch_values(bug, 1) == [] and lso(bug) == 0  # and it hangs the partition's LSO


def test_markers_from_an_older_epoch_are_refused():
    r = txn_router()
    c = coordinator(r)
    pid, epoch = init(r, c)
    pid, epoch = init(r, c)  # bumped
    add(r, c, pid, epoch)
    produce(r, pid, epoch, 0, b"a")
    r.request(1, WriteTxnMarkersRequest(30, pid, epoch - 1, True, 0, (TP,)))
    settle(r)
    [resp] = r.replies(WriteTxnMarkersResponse)
    assert resp.errors == ((TP, Errors.INVALID_PRODUCER_EPOCH),)


def test_transaction_version_2_bumps_the_epoch_and_fences_a_delayed_end():
    for bugs, expect_fenced in ((frozenset(), True), (frozenset({"txn-unfenced-requests"}), False)):
        r = txn_router(bugs=bugs, transaction_version=2)
        c = coordinator(r)
        pid, epoch = init(r, c)
        add(r, c, pid, epoch)
        produce(r, pid, epoch, 0, b"t1")
        done = end(r, c, pid, epoch, commit=True)
        assert done.error is Errors.NONE and done.producer_epoch == epoch + 1
        # a retry of that EndTxn is answered as a success, and changes nothing
        assert end(r, c, pid, epoch, commit=True).error is Errors.NONE
        settle(r, 10)
        new = done.producer_epoch
        add(r, c, pid, new)
        assert produce(r, pid, new, 0, b"t2") is Errors.NONE
        # a delayed abort from the first transaction arrives during the second
        late = end(r, c, pid, epoch, commit=False)
        settle(r, 10)
        if expect_fenced:
            assert late.error is Errors.PRODUCER_FENCED
            assert end(r, c, pid, new, commit=True).error is Errors.NONE
            settle(r, 10)
            assert fetch_values(r, 1) == [b"t1", b"t2"]
        else:
            assert late.error is Errors.NONE  # the bug: it aborted the second transaction
            settle(r, 10)
            assert fetch_values(r, 1) == [b"t1"]


def test_transaction_version_2_after_the_bump_only_a_retry_is_valid_as_in_kafka():
    """Kafka's TransactionCoordinator.handleEndTransaction at version 2, once an EndTxn bumped
    the epoch: at the epoch before the bump it is a retry (the same outcome: NONE; the other:
    INVALID_TXN_STATE); at an older epoch it is fenced."""
    r = txn_router(transaction_version=2)
    c = coordinator(r)
    pid, epoch = init(r, c)
    add(r, c, pid, epoch)
    produce(r, pid, epoch, 0, b"t1")
    done = end(r, c, pid, epoch, commit=False)
    assert done.error is Errors.NONE and done.producer_epoch == epoch + 1
    settle(r, 10)
    retry = end(r, c, pid, epoch, commit=False)
    assert (retry.error, retry.producer_epoch) == (Errors.NONE, epoch + 1)
    assert end(r, c, pid, epoch, commit=True).error is Errors.INVALID_TXN_STATE
    assert end(r, c, pid, epoch - 1, commit=False).error is Errors.PRODUCER_FENCED
    # at the bumped epoch, with no transaction begun (Kafka 4.x, KAFKA-18401): a commit is
    # INVALID_TXN_STATE, an abort ends an empty transaction and bumps the epoch again
    assert end(r, c, pid, epoch + 1, commit=True).error is Errors.INVALID_TXN_STATE
    empty = end(r, c, pid, epoch + 1, commit=False)
    assert (empty.error, empty.producer_epoch) == (Errors.NONE, epoch + 2)
    settle(r, 10)
    assert end(r, c, pid, epoch + 1, commit=False).producer_epoch == epoch + 2  # its retry
    assert end(r, c, pid, epoch + 2, commit=False).producer_epoch == epoch + 3  # another one


def test_a_new_coordinator_finishes_a_commit_whose_markers_were_not_written():
    r = txn_router()
    c = coordinator(r)
    pid, epoch = init(r, c)
    add(r, c, pid, epoch)
    produce(r, pid, epoch, 0, b"a")
    r.drop = lambda src, dst, msg: isinstance(msg, WriteTxnMarkersRequest)
    assert end(r, c, pid, epoch, commit=True).error is Errors.NONE
    assert fetch_values(r, 1) == []  # decided, but no marker yet
    r.drop = lambda src, dst, msg: False
    r.blocked = {c}  # the coordinator's broker is cut off; another leader loads the state
    for _ in range(60):
        r.tick(200)
    r.blocked = set()
    for _ in range(30):
        r.tick(200)
    assert coordinator(r) != -1
    assert fetch_values(r, 1) == [b"a"]


# ---------------------------------------------------------------- the sans-IO clients

PRODUCER = 61
CONSUMER = 62


def client_router():
    from reference.consumer import Consumer, ConsumerConfig
    from reference.producer import ProducerConfig
    from reference.txn_producer import TransactionalProducer

    r = txn_router()
    p = TransactionalProducer(PRODUCER, [1, 2, 3], ProducerConfig(
        enable_idempotence=True, acks=-1, request_timeout_ms=1_000, linger_ms=0,
        delivery_timeout_ms=3_000), TXN)
    c = Consumer(CONSUMER, [1, 2, 3], ConsumerConfig(isolation_level=1, fetch_max_wait_ms=0))
    for n in (p, c):
        r.nodes[n.node_id] = n
        n.start(r.now)
        r._collect(n)
    r.run()
    for _ in range(20):
        r.tick(100)
    c.assign([TP])
    return r, p, c


def run_until(r: Router, cond, steps: int = 200) -> None:
    for _ in range(steps):
        if cond():
            return
        r.tick(50)
    raise AssertionError("condition not reached")


def consume(r: Router, c) -> list[bytes]:
    for _ in range(5):
        c.poll(r.now)
        r._collect(c)
        r.run()
        r.tick(50)
    return [x.value for x in c.take_records()]


def test_the_transactional_producer_commits_and_the_consumer_sees_only_committed_data():
    r, p, c = client_router()
    assert p.ready
    p.begin_transaction()
    p.send(r.now, TP, b"a")
    r._collect(p)
    run_until(r, lambda: p.results)
    assert p.take_results()[0].error is Errors.NONE
    assert consume(r, c) == []  # open: the LSO holds the consumer back
    p.commit_transaction(r.now)
    r._collect(p)
    run_until(r, lambda: p.outcome is not None)
    assert p.outcome == ("committed", None)
    assert consume(r, c) == [b"a"]
    # an aborted transaction is never handed to the application
    run_until(r, lambda: p.ready)
    p.begin_transaction()
    p.send(r.now, TP, b"b")
    r._collect(p)
    run_until(r, lambda: p.results)
    p.abort_transaction(r.now)
    r._collect(p)
    run_until(r, lambda: p.outcome is not None)
    assert p.outcome[0] == "aborted"
    run_until(r, lambda: p.ready)
    p.begin_transaction()
    p.send(r.now, TP, b"c")
    r._collect(p)
    run_until(r, lambda: p.results)
    p.commit_transaction(r.now)
    r._collect(p)
    run_until(r, lambda: p.outcome is not None)
    assert consume(r, c) == [b"c"]


def test_a_send_with_an_unknown_outcome_aborts_by_bumping_the_epoch():
    r, p, c = client_router()
    epoch = p.producer_epoch
    p.begin_transaction()
    r.drop = lambda src, dst, msg: isinstance(msg, ProduceResponse)  # every answer is lost
    p.send(r.now, TP, b"maybe")
    r._collect(p)
    run_until(r, lambda: p.results, steps=400)
    [res] = p.take_results()
    assert res.error is not Errors.NONE and res.maybe_appended
    r.drop = lambda src, dst, msg: False
    p.abort_transaction(r.now)
    r._collect(p)
    run_until(r, lambda: p.outcome is not None)
    assert p.outcome[0] == "aborted"
    assert p.producer_epoch > epoch  # fenced its own old epoch: a late produce is refused
    assert consume(r, c) == []


# ---------------------------------------------------------------- offsets in transactions

GROUP_ID = "g1"


def group_router(bugs=frozenset()) -> Router:
    from reference.topics import OFFSETS_TOPIC

    r = txn_router(bugs=bugs)
    r.request(0, CreateTopicsRequest(3, OFFSETS_TOPIC, 3, 3))
    for _ in range(10):
        r.tick(200)
    return r


def group_coordinator(r: Router) -> int:
    from reference.messages import COORDINATOR_GROUP

    r.request(1, FindCoordinatorRequest(1, GROUP_ID, COORDINATOR_GROUP))
    [resp] = r.replies(FindCoordinatorResponse)
    assert resp.error is Errors.NONE
    return resp.node_id


def offset_fetch(r: Router, g: int, require_stable: bool = True):
    from reference.group_messages import OffsetFetchRequest, OffsetFetchResponse

    r.request(g, OffsetFetchRequest(40, GROUP_ID, (TP,), require_stable))
    [resp] = r.replies(OffsetFetchResponse)
    return resp


def txn_offset_commit(r: Router, g: int, pid: int, epoch: int, offset: int, generation: int = -1,
                      member: str = "") -> Errors:
    from reference.group_messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse

    r.request(g, TxnOffsetCommitRequest(41, TXN, GROUP_ID, pid, epoch, ((TP, offset),), generation, member))
    settle(r)
    [resp] = r.replies(TxnOffsetCommitResponse)
    return resp.error


def add_offsets(r: Router, c: int, pid: int, epoch: int) -> Errors:
    from reference.messages import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse

    r.request(c, AddOffsetsToTxnRequest(42, TXN, pid, epoch, GROUP_ID))
    settle(r)
    [resp] = r.replies(AddOffsetsToTxnResponse)
    return resp.error


def test_offsets_committed_in_a_transaction_apply_at_its_commit_marker_only():
    from reference.group_messages import OffsetCommitRequest, OffsetCommitResponse

    r = group_router()
    c, g = coordinator(r), group_coordinator(r)
    assert offset_fetch(r, g).offsets == ((TP, -1),)
    r.request(g, OffsetCommitRequest(43, GROUP_ID, -1, "", ((TP, 3),)))
    settle(r)
    assert r.replies(OffsetCommitResponse)[0].error is Errors.NONE
    assert offset_fetch(r, g).offsets == ((TP, 3),)
    pid, epoch = init(r, c)
    # not part of the transaction yet: the group coordinator's verification refuses it
    assert txn_offset_commit(r, g, pid, epoch, 5) is Errors.TRANSACTION_ABORTABLE  # (v<5: INVALID_TXN_STATE)
    assert add_offsets(r, c, pid, epoch) is Errors.NONE
    assert txn_offset_commit(r, g, pid, epoch, 5) is Errors.NONE
    assert offset_fetch(r, g).error is Errors.UNSTABLE_OFFSET_COMMIT  # KIP-447
    assert offset_fetch(r, g, require_stable=False).offsets == ((TP, 3),)
    assert end(r, c, pid, epoch, commit=False).error is Errors.NONE
    settle(r, 10)
    assert offset_fetch(r, g).offsets == ((TP, 3),)  # aborted: dropped
    add_offsets(r, c, pid, epoch)
    txn_offset_commit(r, g, pid, epoch, 7)
    assert end(r, c, pid, epoch, commit=True).error is Errors.NONE
    settle(r, 10)
    assert offset_fetch(r, g).offsets == ((TP, 7),)
    # a new coordinator loads the same state from the log
    from reference.coordinator import partition_for
    from reference.group_coordinator import GroupCoordinator
    from reference.topics import OFFSETS_TOPIC

    fresh = GroupCoordinator(r.nodes[g], 3)
    fresh.on_leader(fresh.host.now_ms, partition_for(GROUP_ID, 3), 0)
    assert fresh.groups[GROUP_ID].committed == {TP: 7} and not fresh.pending_txn
    assert r.nodes[g].partitions[TopicPartition(OFFSETS_TOPIC, partition_for(GROUP_ID, 3))]


def test_an_abort_marker_committed_with_the_offsets_it_aborts_drops_them():
    """The high watermark passes a transaction's offsets and its abort marker in one step:
    the marker must still end them (log order), not find nothing pending and leave them to be
    made the group's by the producer's next commit (found by eos --group-protocol classic,
    seed 3)."""
    from dataclasses import replace

    from reference.coordinator import partition_for
    from reference.group_messages import TxnOffsetCommitRequest, TxnOffsetCommitResponse
    from reference.messages import FetchRequest
    from reference.topics import OFFSETS_TOPIC

    r = group_router()
    c, g = coordinator(r), group_coordinator(r)
    offsets_tp = TopicPartition(OFFSETS_TOPIC, partition_for(GROUP_ID, 3))
    holding = [True]

    follower = min(n for n in (1, 2, 3) if n != g)  # the other follower keeps up

    def hold_offsets_replication(src, dst, msg) -> bool:
        if not (holding[0] and isinstance(msg, FetchRequest) and dst == g and src == follower
                and any(fp.tp == offsets_tp for fp in msg.partitions)):
            return False
        rest = tuple(fp for fp in msg.partitions if fp.tp != offsets_tp)
        if rest:
            r.queue.append((src, dst, replace(msg, partitions=rest)))
        return True

    pid, epoch = init(r, c)
    assert add_offsets(r, c, pid, epoch) is Errors.NONE
    r.drop = hold_offsets_replication
    settle(r, 20)  # the follower's fetch waiting at the leader ends (empty)
    r.request(g, TxnOffsetCommitRequest(41, TXN, GROUP_ID, pid, epoch, ((TP, 5),)))
    settle(r)
    assert not r.replies(TxnOffsetCommitResponse)  # written, not yet replicated
    r.request(c, EndTxnRequest(10, TXN, pid, epoch, False))
    settle(r, 30)  # the marker is written, and the other follower has it
    holding[0] = False  # the follower takes the offsets and the abort marker in one fetch
    settle(r, 10)
    assert r.replies(TxnOffsetCommitResponse)[0].error is Errors.NONE
    assert r.replies(EndTxnResponse)[0].error is Errors.NONE
    assert not r.nodes[g].groups.pending_txn
    assert offset_fetch(r, g).offsets == ((TP, -1),)


def test_a_fenced_producer_cannot_commit_offsets():
    r = group_router()
    c, g = coordinator(r), group_coordinator(r)
    pid, epoch = init(r, c)
    add_offsets(r, c, pid, epoch)
    assert txn_offset_commit(r, g, pid, epoch, 5) is Errors.NONE
    init(r, c)  # a new instance fences the epoch and aborts its transaction
    settle(r, 10)
    assert txn_offset_commit(r, g, pid, epoch, 9) is Errors.PRODUCER_FENCED
    assert offset_fetch(r, g).offsets == ((TP, -1),)


def test_a_coordinator_without_a_lease_does_not_answer_from_memory():
    r = group_router()
    g = group_coordinator(r)
    broker = r.nodes[g]
    broker.lease_until_ms = r.now  # as if it had not heard from the controller for a while
    assert offset_fetch(r, g).error is Errors.NOT_COORDINATOR
    for _ in range(5):
        r.tick(500)  # heartbeats renew the lease
    assert offset_fetch(r, g).error is Errors.NONE


def test_a_transactional_offset_commit_from_a_stale_member_is_fenced():
    """KIP-447 (TxnOffsetCommit v3+): a commit that names a generation or a member must come
    from a current member of the current generation (Kafka's ClassicGroup.validateOffsetCommit);
    one that names neither is accepted, as before v3."""
    from reference.group_messages import JoinGroupRequest, JoinGroupResponse

    r = group_router()
    c, g = coordinator(r), group_coordinator(r)
    r.request(g, JoinGroupRequest(50, GROUP_ID, "", None, 10_000, 10_000, (("range", b""),)))
    settle(r)
    [joined] = r.replies(JoinGroupResponse)
    assert joined.error is Errors.NONE
    pid, epoch = init(r, c)
    assert add_offsets(r, c, pid, epoch) is Errors.NONE
    gen, me = joined.generation_id, joined.member_id
    assert txn_offset_commit(r, g, pid, epoch, 5, gen + 1, me) is Errors.ILLEGAL_GENERATION
    assert txn_offset_commit(r, g, pid, epoch, 5, gen, "nobody") is Errors.UNKNOWN_MEMBER_ID
    assert txn_offset_commit(r, g, pid, epoch, 5, gen, me) is Errors.NONE
    assert txn_offset_commit(r, g, pid, epoch, 6) is Errors.NONE  # names nobody: not fenced


def test_a_write_verified_before_the_transaction_ended_is_refused_after_it():
    """KIP-890 part 1's verification guard: the coordinator confirms the partition is in the
    transaction, then the transaction ends (its marker lands), then the verified write
    arrives; appending it would open a transaction nobody ends (a hanging transaction, the
    class of KAFKA-17754), so the leader refuses it with INVALID_TXN_STATE, as Kafka does."""
    r = txn_router()
    c = coordinator(r)
    pid, epoch = init(r, c)
    assert add(r, c, pid, epoch) is Errors.NONE
    held: list = []

    def hold_verification(src, dst, msg) -> bool:
        if isinstance(msg, AddPartitionsToTxnResponse) and dst == 1 and not held:
            held.append((src, dst, msg))
            return True
        return False

    r.drop = hold_verification
    data = rec.encode_batch([rec.RecordInput(None, b"late")], producer_id=pid, producer_epoch=epoch,
                            base_sequence=0, transactional=True)
    r.request(1, ProduceRequest(9, -1, 5_000, TP, data, TXN))
    assert held and r.replies(ProduceResponse) == []  # verified, the answer held back
    r.drop = lambda src, dst, msg: False
    assert end(r, c, pid, epoch, commit=False).error is Errors.NONE
    settle(r)
    r.queue.append(held[0])  # the verification's answer arrives after the abort marker
    r.run()
    settle(r)
    [resp] = r.replies(ProduceResponse)
    assert resp.error is Errors.INVALID_TXN_STATE
    log = r.nodes[1].partitions[TP].log
    assert not log.producer_state.txn_open(pid) and lso(r) == log.high_watermark  # nothing hangs


def test_a_version_2_write_of_the_next_epoch_waits_for_the_previous_marker():
    """KIP-890 part 2 (Produce v12: the leader adds the partition) and KAFKA-18575: a write of
    epoch e+1 that reaches the leader before the marker ending epoch e's transaction there must
    not join that transaction (whose marker, of epoch e+1, would commit it); the leader asks the
    coordinator, which answers CONCURRENT_TRANSACTIONS until the previous end is complete."""
    r = txn_router(transaction_version=2)
    c = coordinator(r)
    pid, epoch = init(r, c)
    assert add(r, c, pid, epoch) is Errors.NONE
    assert produce(r, pid, epoch, 0, b"first") is Errors.NONE
    r.drop = lambda src, dst, msg: isinstance(msg, WriteTxnMarkersRequest)  # the marker is late
    r.request(c, EndTxnRequest(10, TXN, pid, epoch, True, transaction_version=2))
    settle(r)
    [done] = r.replies(EndTxnResponse)
    assert (done.error, done.producer_epoch) == (Errors.NONE, epoch + 1)
    data = rec.encode_batch([rec.RecordInput(None, b"next")], producer_id=pid, producer_epoch=epoch + 1,
                            base_sequence=0, transactional=True)
    r.request(1, ProduceRequest(9, -1, 5_000, TP, data, TXN, add_partition=True))
    settle(r)
    [early] = r.replies(ProduceResponse)
    assert early.error is Errors.CONCURRENT_TRANSACTIONS
    r.drop = lambda src, dst, msg: False
    for _ in range(60):  # the coordinator sends its marker again; the previous end completes
        r.tick(500)
    assert fetch_values(r, 1) == [b"first"]
    r.request(1, ProduceRequest(9, -1, 5_000, TP, data, TXN, add_partition=True))
    settle(r)
    [later] = r.replies(ProduceResponse)
    assert later.error is Errors.NONE  # now its own transaction, added by the leader
    assert end(r, c, pid, epoch + 1, commit=False).error is Errors.NONE  # (its end bumps the epoch again)
    settle(r, 20)
    assert fetch_values(r, 1) == [b"first"]  # the aborted "next" is not read


def test_version_2_moves_a_producer_at_its_last_epoch_to_a_new_producer_id():
    """Kafka's TransactionCoordinator at version 2: an end at epoch 32766 writes its markers at
    32767 and answers a new producer id at epoch 0; a retry of that end (the old id, 32766) is
    answered with the new id; the new id's first requests wait (CONCURRENT_TRANSACTIONS) until
    the markers are written; the switch txn-epoch-overflow wraps the epoch instead."""
    r = txn_router(transaction_version=2)
    for b in (1, 2, 3):
        r.nodes[b].txn.producer_epoch_start = 32_765
    c = coordinator(r)
    pid, epoch = init(r, c)
    assert epoch == 32_765
    add(r, c, pid, epoch)
    produce(r, pid, epoch, 0, b"t1")
    first = end(r, c, pid, epoch, commit=True)
    assert (first.error, first.producer_id, first.producer_epoch) == (Errors.NONE, pid, 32_766)
    settle(r, 10)
    add(r, c, pid, 32_766)
    produce(r, pid, 32_766, 0, b"t2")
    r.drop = lambda src, dst, msg: isinstance(msg, WriteTxnMarkersRequest)  # markers held back
    last = end(r, c, pid, 32_766, commit=True)
    new_pid = last.producer_id
    assert last.error is Errors.NONE and new_pid != pid and last.producer_epoch == 0
    assert add(r, c, new_pid, 0) is Errors.CONCURRENT_TRANSACTIONS  # the markers are not written yet
    r.drop = lambda src, dst, msg: False
    for _ in range(160):  # no answer in 30 s: the coordinator sends its markers again
        r.tick(200)
    settle(r, 10)
    retry = end(r, c, pid, 32_766, commit=True)
    assert (retry.error, retry.producer_id, retry.producer_epoch) == (Errors.NONE, new_pid, 0)
    assert end(r, c, pid, 32_766, commit=False).error is Errors.INVALID_TXN_STATE
    assert add(r, c, new_pid, 0) is Errors.NONE
    assert produce(r, new_pid, 0, 0, b"t3") is Errors.NONE
    assert end(r, c, new_pid, 0, commit=True).producer_epoch == 1
    settle(r, 10)
    assert fetch_values(r, 1) == [b"t1", b"t2", b"t3"]


def test_without_rotation_the_epoch_wraps_and_the_markers_are_refused():
    r = txn_router(bugs=frozenset({"txn-epoch-overflow"}), transaction_version=2)
    for b in (1, 2, 3):
        r.nodes[b].txn.producer_epoch_start = 32_766
    c = coordinator(r)
    pid, epoch = init(r, c)
    add(r, c, pid, epoch)
    produce(r, pid, epoch, 0, b"t1")
    assert end(r, c, pid, epoch, commit=True).producer_epoch == 32_767
    settle(r, 10)
    add(r, c, pid, 32_767)
    produce(r, pid, 32_767, 0, b"t2")
    wrapped = end(r, c, pid, 32_767, commit=True)
    assert (wrapped.error, wrapped.producer_id, wrapped.producer_epoch) == (Errors.NONE, pid, -32_768)
    settle(r, 10)
    assert fetch_values(r, 1) == [b"t1"]  # t2's marker, at an epoch older than t2's, was refused


def test_version_2_rotates_the_producer_id_when_a_timeout_aborts_at_the_last_epoch():
    """KAFKA-20090 (fixed in Kafka 4.3): a transaction timed out at epoch 32766 is aborted under
    a new producer id, and the producer's delayed abort of it (the old id, 32766) is answered
    with that id, never with 32767 (whose next end would overflow)."""
    r = txn_router(transaction_version=2)
    for b in (1, 2, 3):
        r.nodes[b].txn.producer_epoch_start = 32_766
    c = coordinator(r)
    pid, epoch = init(r, c, timeout_ms=1_000)
    assert epoch == 32_766
    add(r, c, pid, epoch)
    produce(r, pid, epoch, 0, b"t1")
    for _ in range(20):  # past the transaction's timeout: the coordinator aborts it
        r.tick(200)
    late = end(r, c, pid, epoch, commit=False)
    assert late.error is Errors.NONE and late.producer_id != pid and late.producer_epoch == 0
    assert end(r, c, pid, epoch, commit=True).error is Errors.INVALID_TXN_STATE
    assert add(r, c, late.producer_id, 0) is Errors.NONE
    assert produce(r, late.producer_id, 0, 0, b"t2") is Errors.NONE
    assert end(r, c, late.producer_id, 0, commit=True).error is Errors.NONE
    settle(r, 10)
    assert fetch_values(r, 1) == [b"t2"]
