"""A transaction across a partition that has no leader (every replica down), and what a
partition leader does with a transaction left open there (KAFKA-20734).

The correct coordinator keeps the markers of a leaderless partition until it has a leader
again (Kafka up to 4.2: ``Node.noNode``, retried); the switch ``txn-markers-skip-offline``
drops the partition from the transaction and completes it (Kafka 4.3+). The partition
leader's producer state then holds the transaction open, and the producer's next
transaction there joins it: its marker ends both with its own outcome."""

from __future__ import annotations

from reference import records as rec
from reference.errors import Errors
from reference.messages import (
    CreateTopicsRequest,
    EndTxnRequest,
    EndTxnResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    ProduceRequest,
    ProduceResponse,
    TopicPartition,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from reference.producer_state import ProducerStateManager
from reference.txn_metadata import COMPLETE_COMMIT, PREPARE_COMMIT
from tests.reference.test_transactions import TXN, add, coordinator, init, settle, txn_router

SKIP = frozenset({"txn-markers-skip-offline"})


def placed(bugs=frozenset(), transaction_version: int = 1):
    """A cluster, the transaction coordinator ``c``, and a topic ``o`` of one replica a
    partition: ``o:0`` on the coordinator's broker, ``o:1`` on another broker ``b``."""
    r = txn_router(bugs=bugs, transaction_version=transaction_version)
    c = coordinator(r)
    b = next(n for n in (1, 2, 3) if n != c)
    r.request(0, CreateTopicsRequest(3, "o", -1, -1, assignments=((0, (c,)), (1, (b,)))))
    settle(r)
    for _ in range(5):
        r.tick(200)
    return r, c, b


def send(r, leader: int, tp: TopicPartition, pid: int, epoch: int, seq: int, value: bytes,
         add_partition: bool = False) -> Errors:
    data = rec.encode_batch([rec.RecordInput(None, value)], producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq, transactional=True)
    r.request(leader, ProduceRequest(9, -1, 5_000, tp, data, TXN, add_partition=add_partition))
    settle(r)
    [resp] = r.replies(ProduceResponse)
    return resp.error


def end(r, c: int, pid: int, epoch: int, commit: bool, transaction_version: int = 0) -> EndTxnResponse:
    r.request(c, EndTxnRequest(10, TXN, pid, epoch, commit, transaction_version=transaction_version))
    settle(r)
    [resp] = r.replies(EndTxnResponse)
    return resp


def take_offline(r, b: int, tp: TopicPartition) -> None:
    """Cut broker ``b`` off until the controller fences it: ``tp`` has no leader."""
    r.blocked = {b}
    for _ in range(100):
        r.tick(200)
        if r.nodes[0].partitions[tp].leader < 0:
            return
    raise AssertionError(f"{tp.key} still has a leader")


def bring_back(r, b: int, tp: TopicPartition) -> None:
    r.blocked = set()
    for _ in range(100):
        r.tick(200)
        if r.nodes[0].partitions[tp].leader == b:
            for _ in range(10):
                r.tick(200)
            return
    raise AssertionError(f"{tp.key} has no leader again")


def committed_values(r, leader: int, tp: TopicPartition) -> tuple[list[bytes], int, int]:
    """read_committed values of ``tp``, its last stable offset and high watermark."""
    r.request(leader, FetchRequest(11, -1, -1, 0, 1, (FetchPartition(tp, -1, 0, -1),)))
    [resp] = r.replies(FetchResponse)
    part = resp.partitions[0]
    aborted = {pid for pid, _first in part.aborted_transactions}
    out = []
    for batch in part.records:
        h = rec.parse_header(batch)
        if not h.is_control and h.producer_id not in aborted:
            out.extend(x.value for x in rec.decode_records(batch))
    return out, part.last_stable_offset, part.high_watermark


def commit_across_an_offline_partition(bugs):
    """A transaction writes ``o:0`` and ``o:1``; ``o:1`` goes offline; the producer commits."""
    r, c, b = placed(bugs)
    o0, o1 = TopicPartition("o", 0), TopicPartition("o", 1)
    pid, epoch = init(r, c)
    assert add(r, c, pid, epoch, tps=(o0, o1)) is Errors.NONE
    assert send(r, c, o0, pid, epoch, 0, b"a0") is Errors.NONE
    assert send(r, b, o1, pid, epoch, 0, b"a1") is Errors.NONE
    take_offline(r, b, o1)
    assert end(r, c, pid, epoch, commit=True).error is Errors.NONE
    for _ in range(20):
        r.tick(200)
    return r, c, b, pid, epoch


def test_the_markers_of_a_partition_without_a_leader_wait_for_one():
    r, c, b, _pid, _epoch = commit_across_an_offline_partition(frozenset())
    o1 = TopicPartition("o", 1)
    coordinator_state = r.nodes[c].txn
    assert coordinator_state.txns[TXN].state == PREPARE_COMMIT  # o:1's marker is still owed
    assert coordinator_state.markers[TXN].remaining == {o1}
    bring_back(r, b, o1)
    assert coordinator_state.txns[TXN].state == COMPLETE_COMMIT
    assert committed_values(r, b, o1) == ([b"a1"], 2, 2)  # the record and the marker


def test_the_switch_drops_the_partition_and_leaves_its_transaction_open():
    r, c, b, _pid, _epoch = commit_across_an_offline_partition(SKIP)
    o0, o1 = TopicPartition("o", 0), TopicPartition("o", 1)
    assert r.nodes[c].txn.txns[TXN].state == COMPLETE_COMMIT  # without o:1's marker
    bring_back(r, b, o1)
    assert committed_values(r, c, o0) == ([b"a0"], 2, 2)
    assert committed_values(r, b, o1) == ([], 0, 1)  # open for good: the LSO below the HW
    assert r.nodes[b].partitions[o1].log.producer_state.open_transactions() == {_pid: 0}


def test_the_switch_logs_the_partitions_it_skips_as_kafka_does():
    r, c, b = placed(SKIP)
    o1 = TopicPartition("o", 1)
    pid, epoch = init(r, c)
    add(r, c, pid, epoch, tps=(o1,))
    send(r, b, o1, pid, epoch, 0, b"x")
    take_offline(r, b, o1)
    seen = []
    node = r.nodes[c]
    log_event = node.event
    node.event = lambda kind, **fields: (seen.append((kind, fields)), log_event(kind, **fields))
    assert end(r, c, pid, epoch, commit=False).error is Errors.NONE
    skipped = [f for kind, f in seen if kind == "txn-markers-skipped"]
    assert [(f["transactional_id"], f["partitions"]) for f in skipped] == [(TXN, ["o:1"])]
    assert "likely deleted" in skipped[0]["reason"]


def next_transaction_there(commit: bool):
    """After the switch left ``o:1`` open, the same producer's next transaction writes ``o:1``
    again (version 1: the same epoch) and ends with ``commit``."""
    r, c, b, pid, epoch = commit_across_an_offline_partition(SKIP)
    o1 = TopicPartition("o", 1)
    bring_back(r, b, o1)
    assert add(r, c, pid, epoch, tps=(o1,)) is Errors.NONE
    assert send(r, b, o1, pid, epoch, 1, b"b1") is Errors.NONE
    assert r.nodes[b].partitions[o1].log.producer_state.open_transactions() == {pid: 0}  # joined
    assert end(r, c, pid, epoch, commit=commit).error is Errors.NONE
    for _ in range(10):
        r.tick(200)
    return committed_values(r, b, o1)


def test_the_next_commit_there_commits_the_orphaned_records_too():
    assert next_transaction_there(commit=True) == ([b"a1", b"b1"], 3, 3)


def test_the_next_abort_there_aborts_the_acknowledged_commit_too():
    assert next_transaction_there(commit=False) == ([], 3, 3)


def test_at_version_2_the_next_transaction_joins_the_orphan_and_its_marker_ends_both():
    """Version 2: the orphan was written at epoch e (its skipped marker would have been e+1);
    the next transaction writes at e+1 (the leader asks the coordinator to add the partition,
    as the orphan is of an older epoch), and its marker, e+2, ends both."""
    r, c, b = placed(SKIP, transaction_version=2)
    o0, o1 = TopicPartition("o", 0), TopicPartition("o", 1)
    pid, epoch = init(r, c)
    assert send(r, c, o0, pid, epoch, 0, b"a0", add_partition=True) is Errors.NONE
    assert send(r, b, o1, pid, epoch, 0, b"a1", add_partition=True) is Errors.NONE
    take_offline(r, b, o1)
    done = end(r, c, pid, epoch, commit=True, transaction_version=2)
    assert (done.error, done.producer_epoch) == (Errors.NONE, epoch + 1)
    for _ in range(20):
        r.tick(200)
    bring_back(r, b, o1)
    assert committed_values(r, b, o1) == ([], 0, 1)
    state = r.nodes[b].partitions[o1].log.producer_state
    assert send(r, b, o1, pid, epoch + 1, 0, b"b1", add_partition=True) is Errors.NONE
    assert state.open_transactions() == {pid: 0} and state.producers[pid].producer_epoch == epoch + 1
    aborted = end(r, c, pid, epoch + 1, commit=False, transaction_version=2)
    assert (aborted.error, aborted.producer_epoch) == (Errors.NONE, epoch + 2)
    for _ in range(10):
        r.tick(200)
    assert committed_values(r, b, o1) == ([], 3, 3)  # the acknowledged commit's a1 aborted


def test_a_marker_of_an_older_epoch_does_not_end_the_orphan():
    r, c, b, pid, epoch = commit_across_an_offline_partition(SKIP)
    o1 = TopicPartition("o", 1)
    bring_back(r, b, o1)
    state = r.nodes[b].partitions[o1].log.producer_state
    assert init(r, c) == (pid, epoch + 1)  # a new instance of the producer: the epoch bumped
    assert add(r, c, pid, epoch + 1, tps=(o1,)) is Errors.NONE
    assert send(r, b, o1, pid, epoch + 1, 0, b"b1") is Errors.NONE  # joins the orphan
    r.request(b, WriteTxnMarkersRequest(30, pid, epoch, True, 0, (o1,)))  # a late one of epoch e
    settle(r)
    [resp] = r.replies(WriteTxnMarkersResponse)
    assert resp.errors == ((o1, Errors.INVALID_PRODUCER_EPOCH),)
    assert state.open_transactions() == {pid: 0}


def test_the_producer_state_keeps_the_first_offset_of_an_orphan_across_epochs():
    """Kafka's ProducerAppendInfo: a transactional batch never opens a second transaction while
    one is open; a newer epoch restarts the sequences but keeps the open transaction's first
    offset; a marker of an acceptable epoch ends everything from it; a lower one is refused."""
    state = ProducerStateManager()

    def data(offset: int, epoch: int, seq: int) -> None:
        batch = rec.encode_batch([rec.RecordInput(None, b"v")], producer_id=7, producer_epoch=epoch,
                                 base_sequence=seq, transactional=True, base_offset=offset)
        h = rec.parse_header(batch)
        assert state.check(h)[0] is Errors.NONE
        state.update(h, batch)

    data(0, 3, 0)
    data(5, 3, 1)  # version 1: the same epoch joins
    data(9, 4, 0)  # version 2: the next epoch (sequence 0) joins too
    assert state.open_transactions() == {7: 0}
    assert state.check_marker(7, 3) is Errors.INVALID_PRODUCER_EPOCH
    marker = rec.with_offset_and_epoch(rec.encode_control_batch(7, 5, False, 0), 12, 0)
    state.update(rec.parse_header(marker), marker)
    assert state.open_transactions() == {}
    assert [(a.first_offset, a.last_offset) for a in state.aborted] == [(0, 12)]
