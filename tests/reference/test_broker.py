"""Brokers and the controller in events, wired by a tiny FIFO router (no simulator, no
faults): acks, min.insync.replicas, the high watermark as the consumer's limit,
OffsetForLeaderEpoch, and bad input answered with error codes."""

from __future__ import annotations

from collections import deque

from reference import records as rec
from reference.broker import Broker, BrokerConfig
from reference.controller import Controller, ControllerConfig
from reference.errors import Errors
from reference.messages import (
    CreateTopicsRequest,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    ProduceRequest,
    ProduceResponse,
    TopicPartition,
)
from reference.node import Send, Timer
from reference.storage import MemoryStorage

TP = TopicPartition("t", 0)
CLIENT = 50


class Router:
    """Delivers every send at once, in order, except to or from a blocked node; runs timers
    only when asked."""

    def __init__(self, min_isr: int = 2, bugs=frozenset(), flush_ms: int | None = None) -> None:
        config = BrokerConfig(min_insync_replicas=min_isr, replica_fetch_wait_max_ms=100, flush_ms=flush_ms)
        self.nodes = {0: Controller(0, MemoryStorage(), ControllerConfig())}
        for b in (1, 2, 3):
            self.nodes[b] = Broker(b, MemoryStorage(), config, 0, bugs=bugs)
        self.now = 0
        self.queue: deque = deque()
        self.timers: list[tuple[int, int, int, object]] = []  # (at, seq, node, key)
        self.seq = 0
        self.to_client: list = []
        self.blocked: set[int] = set()
        self.drop = lambda src, dst, msg: False  # a test's message filter
        for n in self.nodes.values():
            n.start(0)
            self._collect(n)
        self.run()
        self.queue.append((CLIENT, 0, CreateTopicsRequest(1, "t", 1, 3)))
        self.run()
        for _ in range(5):
            self.tick(200)

    def _collect(self, node) -> None:
        for o in node.drain():
            if isinstance(o, Send):
                self.queue.append((node.node_id, o.dst, o.message))
            elif isinstance(o, Timer):
                self.seq += 1
                self.timers.append((self.now + int(o.delay_ms), self.seq, node.node_id, o.key))

    def run(self, limit: int = 10_000) -> None:
        while self.queue and limit:
            limit -= 1
            src, dst, msg = self.queue.popleft()
            if self.drop(src, dst, msg):
                continue
            if dst == CLIENT:
                self.to_client.append(msg)
            elif dst in self.nodes and dst not in self.blocked and src not in self.blocked:
                self.nodes[dst].receive(self.now, src, msg)
                self._collect(self.nodes[dst])

    def tick(self, ms: int) -> None:
        self.now += ms
        due = sorted((t for t in self.timers if t[0] <= self.now), key=lambda t: t[:2])
        self.timers = [t for t in self.timers if t[0] > self.now]
        for _at, _seq, node_id, key in due:  # blocking cuts the network, not the node's clock
            self.nodes[node_id].timer(self.now, key)
            self._collect(self.nodes[node_id])
        self.run()

    def request(self, dst: int, msg) -> None:
        self.queue.append((CLIENT, dst, msg))
        self.run()

    def replies(self, kind) -> list:
        out = [m for m in self.to_client if isinstance(m, kind)]
        self.to_client = [m for m in self.to_client if not isinstance(m, kind)]
        return out


def batch(value: bytes) -> bytes:
    return rec.encode_batch([rec.RecordInput(None, value)])


def test_acks_all_is_answered_once_the_isr_has_the_record():
    r = Router()
    leader = r.nodes[1]
    r.request(1, ProduceRequest(1, -1, 5_000, TP, batch(b"a")))
    for _ in range(3):
        r.tick(10)
    [resp] = r.replies(ProduceResponse)
    assert resp.error is Errors.NONE and resp.base_offset == 0
    assert leader.partitions[TP].log.high_watermark == 1
    for b in (2, 3):
        assert r.nodes[b].partitions[TP].log.log_end_offset == 1


def test_acks_all_below_min_insync_replicas_is_refused_before_the_append():
    r = Router(min_isr=2)
    r.blocked = {2, 3}
    for _ in range(120):  # followers silent long enough to leave the ISR
        r.tick(500)
    assert r.nodes[0].partitions[TP].isr == (1,)
    r.request(1, ProduceRequest(1, -1, 5_000, TP, batch(b"a")))
    [resp] = r.replies(ProduceResponse)
    assert resp.error is Errors.NOT_ENOUGH_REPLICAS
    assert r.nodes[1].partitions[TP].log.log_end_offset == 0
    r.request(1, ProduceRequest(2, 1, 5_000, TP, batch(b"b")))  # acks=1 needs no ISR
    assert r.replies(ProduceResponse)[0].error is Errors.NONE


def test_min_insync_replicas_above_the_replication_factor_counts_as_the_replication_factor():
    """KAFKA-15583 (Kafka 3.7): the effective min ISR is min(min.insync.replicas, RF), for the
    admission of acks=all and for the high watermark alike."""
    r = Router(min_isr=2)
    one = TopicPartition("one", 0)
    r.request(0, CreateTopicsRequest(2, "one", 1, 1, (("min.insync.replicas", "3"),)))
    for _ in range(5):
        r.tick(200)
    leader = next(b for b in (1, 2, 3) if one in r.nodes[b].partitions and r.nodes[b].partitions[one].is_leader)
    assert r.nodes[leader].partitions[one].effective_min_isr == 1
    r.request(leader, ProduceRequest(3, -1, 5_000, one, batch(b"a")))
    for _ in range(3):
        r.tick(10)
    [resp] = r.replies(ProduceResponse)
    assert resp.error is Errors.NONE and r.nodes[leader].partitions[one].log.high_watermark == 1
    state = r.nodes[0].partitions[one]
    assert r.nodes[0].effective_min_isr(state) == 1


def test_a_topics_min_insync_replicas_decides_admission_over_the_brokers():
    r = Router(min_isr=1)
    strict = TopicPartition("strict", 0)
    r.request(0, CreateTopicsRequest(2, "strict", 1, 3, (("min.insync.replicas", "3"),)))
    for _ in range(5):
        r.tick(200)
    leader = next(b for b in (1, 2, 3) if r.nodes[b].partitions[strict].is_leader)
    r.blocked = {b for b in (1, 2, 3) if b != leader}
    for _ in range(120):
        r.tick(500)
    assert len(r.nodes[0].partitions[strict].isr) < 3
    r.request(leader, ProduceRequest(4, -1, 5_000, strict, batch(b"a")))
    assert r.replies(ProduceResponse)[0].error is Errors.NOT_ENOUGH_REPLICAS


def test_consumers_never_read_at_or_above_the_high_watermark():
    r = Router()
    r.blocked = {2, 3}
    r.request(1, ProduceRequest(1, 1, 5_000, TP, batch(b"a")))
    r.request(1, FetchRequest(9, -1, -1, 0, 0, (FetchPartition(TP, -1, 0, -1),)))
    [resp] = r.replies(FetchResponse)
    assert resp.partitions[0].records == () and resp.partitions[0].high_watermark == 0
    r.blocked = set()
    for _ in range(110):  # the followers' dropped fetches time out and are sent again
        r.tick(300)
    assert r.nodes[0].partitions[TP].leader == 1
    r.request(1, FetchRequest(10, -1, -1, 0, 0, (FetchPartition(TP, -1, 0, -1),)))
    [resp] = r.replies(FetchResponse)
    assert len(resp.partitions[0].records) == 1


def test_offset_for_leader_epoch_and_list_offsets_answer_from_the_leader_only():
    r = Router()
    r.request(1, ProduceRequest(1, 1, 5_000, TP, batch(b"a")))
    r.request(1, OffsetForLeaderEpochRequest(2, -1, TP, 0, 0))
    [resp] = r.replies(OffsetForLeaderEpochResponse)
    assert (resp.error, resp.leader_epoch, resp.end_offset) == (Errors.NONE, 0, 1)
    r.request(2, OffsetForLeaderEpochRequest(3, -1, TP, 0, 0))
    assert r.replies(OffsetForLeaderEpochResponse)[0].error is Errors.NOT_LEADER_OR_FOLLOWER
    r.request(1, ListOffsetsRequest(4, TP, -1, 7))
    assert r.replies(ListOffsetsResponse)[0].error is Errors.UNKNOWN_LEADER_EPOCH


def test_a_corrupt_batch_is_refused_and_an_unknown_message_is_an_error():
    import pytest

    from reference.errors import UnexpectedInput

    r = Router()
    bad = bytearray(batch(b"a"))
    bad[-1] ^= 0xFF
    r.request(1, ProduceRequest(1, 1, 5_000, TP, bytes(bad)))
    assert r.replies(ProduceResponse)[0].error is Errors.CORRUPT_MESSAGE
    with pytest.raises(UnexpectedInput, match="no handler for str"):
        r.request(1, "not a kafka message")
    assert r.nodes[1].partitions[TP].log.log_end_offset == 0


def idempotent_batch(pid: int, seq: int) -> bytes:
    return rec.encode_batch([rec.RecordInput(None, b"v%d" % seq)], producer_id=pid,
                            producer_epoch=0, base_sequence=seq)


def test_init_producer_id_gets_a_block_from_the_controller_then_answers():
    r = Router()
    r.request(2, InitProducerIdRequest(1))
    assert r.replies(InitProducerIdResponse)[0].error is Errors.COORDINATOR_LOAD_IN_PROGRESS
    r.request(2, InitProducerIdRequest(2))
    r.request(2, InitProducerIdRequest(3))
    first, second = r.replies(InitProducerIdResponse)
    assert first.error is Errors.NONE and second.producer_id == first.producer_id + 1
    r.request(3, InitProducerIdRequest(4))
    r.request(3, InitProducerIdRequest(5))
    other = r.replies(InitProducerIdResponse)[-1]
    assert other.producer_id >= first.producer_id + 1000  # another broker, another block


def test_a_retried_idempotent_batch_is_answered_with_its_original_offset():
    r = Router()
    for seq in (0, 1):
        r.request(1, ProduceRequest(seq, 1, 5_000, TP, idempotent_batch(42, seq)))
    r.request(1, ProduceRequest(9, 1, 5_000, TP, idempotent_batch(42, 0)))
    replies = r.replies(ProduceResponse)
    assert [(x.error, x.base_offset) for x in replies] == [
        (Errors.NONE, 0), (Errors.NONE, 1), (Errors.NONE, 0)]
    assert r.nodes[1].partitions[TP].log.log_end_offset == 2
    r.request(1, ProduceRequest(10, 1, 5_000, TP, idempotent_batch(42, 5)))
    assert r.replies(ProduceResponse)[0].error is Errors.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_without_the_sequence_check_a_retry_is_written_again():
    r = Router(bugs=frozenset({"no-sequence-check"}))
    r.request(1, ProduceRequest(1, 1, 5_000, TP, idempotent_batch(42, 0)))
    r.request(1, ProduceRequest(2, 1, 5_000, TP, idempotent_batch(42, 0)))
    assert [x.base_offset for x in r.replies(ProduceResponse)] == [0, 1]


def test_the_controller_applies_the_kafka_apis_topic_rules_whoever_asks():
    """A peer-port message gets no more than the Kafka API: the internal topics cannot be
    deleted, and illegal names (".", "..", empty, too long, odd characters) cannot be created."""
    from reference.messages import CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse
    from reference.topics import OFFSETS_TOPIC, TXN_TOPIC

    r = Router()
    r.replies(CreateTopicsResponse)  # the set-up's topic
    for name in (".", "..", "", "a/b", "x" * 250):
        r.request(0, CreateTopicsRequest(10, name, 1, 1))
        [resp] = r.replies(CreateTopicsResponse)
        assert resp.error is Errors.INVALID_TOPIC_EXCEPTION, name
    r.request(0, CreateTopicsRequest(11, OFFSETS_TOPIC, 1, 1))
    r.replies(CreateTopicsResponse)
    for name in (OFFSETS_TOPIC, TXN_TOPIC):
        r.request(0, DeleteTopicsRequest(12, name))
        [resp] = r.replies(DeleteTopicsResponse)
        assert resp.error is Errors.INVALID_TOPIC_EXCEPTION, name
    assert any(tp.topic == OFFSETS_TOPIC for tp in r.nodes[0].partitions)


def test_a_fetch_answer_to_an_older_leader_epoch_is_ignored():
    # found by the queue machine without a bug switch: a follower's fetch waited at a paused
    # leader while the partition moved to another leader and back; the leader, resumed, answered
    # it from the old epoch, and the follower appended that answer's records on top of what the
    # other leader had given it meanwhile: two replicas differed below the high watermark
    from reference import marks

    r = Router()
    # a second topic whose partitions broker 2 also follows from broker 1: its fetcher to
    # broker 1 (and the request in flight) lives on while t-0 moves away and back
    r.request(0, CreateTopicsRequest(2, "u", 3, 3))
    for _ in range(5):
        r.tick(200)
    assert any(p.leader == 1 for tp, p in r.nodes[2].partitions.items() if tp.topic == "u")
    r.request(1, ProduceRequest(1, -1, 5_000, TP, batch(b"a")))
    for _ in range(3):
        r.tick(10)
    held: list = []

    def hold(src, dst, msg):
        if dst == 2 and isinstance(msg, FetchResponse) and msg.partitions[0].records:
            held.append((src, dst, msg))
            return True
        return False

    r.drop = hold
    r.request(1, ProduceRequest(2, -1, 5_000, TP, batch(b"b")))  # broker 2's answer is held
    r.drop = lambda src, dst, msg: False
    assert held and r.nodes[2].partitions[TP].log.log_end_offset == 1
    controller = r.nodes[0]
    for leader in (3, 1):  # away and back: broker 1 leads again, two epochs later
        controller.elect_leader(r.now, TP, leader)
        r._collect(controller)
        r.run()
    follower = r.nodes[2].partitions[TP]
    assert follower.leader == 1 and follower.leader_epoch == 2
    marks.reset()
    before = follower.log.log_end_offset
    r.queue.append(held[0])  # the answer to the fetch of epoch 0 arrives now
    r.drop = lambda src, dst, msg: isinstance(msg, FetchRequest)  # nothing newer meanwhile
    r.run()
    assert follower.log.log_end_offset == before
    assert marks.counts().get("follower-stale-fetch-response") == 1


def _third_out_of_the_isr():
    """A cluster whose broker 3 fell behind (cut off) and left the ISR of ``TP``, led by 1."""
    r = Router()
    leader = r.nodes[1].partitions[TP]
    r.blocked = {3}
    r.request(1, ProduceRequest(1, -1, 5_000, TP, batch(b"a")))
    for _ in range(100):
        r.tick(500)
    assert leader.is_leader and leader.isr == frozenset({1, 2})
    return r, leader


def test_an_isr_change_without_an_answer_stays_pending_and_is_asked_again():
    # found by the compaction machine without a bug switch: the leader's AlterPartition adding
    # a follower was committed, but the controller's answer and its next images never reached
    # the leader (cut off); the leader dropped the pending change on its timeout, counted the
    # smaller ISR, acknowledged a write the added follower did not have, and the controller
    # later elected that follower: the acknowledged write was lost
    from reference.messages import (
        AlterPartitionRequest,
        AlterPartitionResponse,
        BrokerHeartbeatResponse,
        MetadataUpdate,
    )

    r, leader = _third_out_of_the_isr()
    sent: list = []
    silent = (AlterPartitionResponse, MetadataUpdate, BrokerHeartbeatResponse)
    r.drop = lambda src, dst, msg: (dst == 1 and isinstance(msg, silent)) or (
        isinstance(msg, AlterPartitionRequest) and sent.append(msg) is not None)
    r.blocked = set()  # 3 fetches again and catches up: the leader proposes it back; the
    for _ in range(100):  # controller commits that, silently
        r.tick(500)
        if sent:
            break
    assert r.nodes[0].partitions[TP].isr == (1, 2, 3)
    assert leader.pending_isr == frozenset({1, 2, 3}) and len(sent) == 1
    r.blocked = {3}  # and 3 is cut off again before the leader hears anything
    r.tick(r.nodes[1].config.alter_partition_timeout_ms)
    assert leader.pending_isr == frozenset({1, 2, 3})  # still counted for the HW
    assert len(sent) == 2  # and asked again
    r.replies(ProduceResponse)
    r.request(1, ProduceRequest(2, -1, 5_000, TP, batch(b"b")))
    for _ in range(5):
        r.tick(100)
    # the controller's ISR holds 3, which does not have "b": acks=all must not answer yet
    assert [p.error for p in r.replies(ProduceResponse)] == []


def test_an_unanswered_isr_expansion_is_asked_again_with_the_broker_epochs_it_named():
    """Found by the swarm on the correct engine (seed 320): the leader proposed adding a caught-up
    follower (named with its broker epoch), the controller was down, and the follower crashed,
    lost its unflushed log and registered again with a new broker epoch. The leader's retry
    re-read the follower's broker epoch from its latest fetch (the new incarnation's, at offset
    0) and the controller, seeing a live member with its current epoch, let the empty replica
    into the ISR: an acknowledged record was then missing from an ISR member. Kafka's
    AlterPartitionManager resends the submitted item (Partition.prepareIsrExpand fixes the
    epochs once), so the controller refuses it (INELIGIBLE_REPLICA, KIP-841). And the old
    incarnation's last fetch, waiting at the leader, does not put its position back when it
    is answered later (Kafka updates a follower's state only when its fetch arrives)."""
    from reference.messages import AlterPartitionRequest

    r, leader = _third_out_of_the_isr()
    old_epoch = r.nodes[3].broker_epoch
    sent: list = []
    r.drop = lambda src, dst, msg: isinstance(msg, AlterPartitionRequest) and sent.append(msg) is None
    r.blocked = set()  # 3 catches up: the leader proposes it back, but the controller hears nothing
    for _ in range(100):
        r.tick(500)
        if sent:
            break
    assert sent and (3, old_epoch) in sent[0].new_isr
    assert r.nodes[3].partitions[TP].log.log_end_offset == 1
    # 3 crashes with nothing flushed and comes back as a new incarnation with an empty log
    r.timers = [t for t in r.timers if t[2] != 3]
    r.nodes[3] = Broker(3, MemoryStorage(), r.nodes[2].config, 0, incarnation=1)
    r.nodes[3].start(r.now)
    r._collect(r.nodes[3])
    # its fetches reach the leader (from offset 0, in the new broker epoch); no record reaches it
    r.drop = lambda src, dst, msg: (isinstance(msg, AlterPartitionRequest) and sent.append(msg) is None) or (
        dst == 3 and isinstance(msg, FetchResponse))
    r.run()
    for _ in range(100):
        r.tick(100)
        if 3 in leader.followers and leader.followers[3].broker_epoch != old_epoch:
            break
    # the old incarnation's last fetch, waiting at the leader, expires now: read again to be
    # answered, it must not put the old position back (Kafka: updateFetchState = !readFromPurgatory)
    r.tick(r.nodes[1].config.replica_fetch_wait_max_ms)
    new_epoch = r.nodes[3].broker_epoch
    assert new_epoch > old_epoch and r.nodes[0].brokers[3].broker_epoch == new_epoch
    assert leader.followers[3].broker_epoch == new_epoch and leader.followers[3].log_end_offset == 0
    assert r.nodes[3].partitions[TP].log.log_end_offset == 0
    assert leader.pending_isr == frozenset({1, 2, 3})
    # the controller is reachable again when the leader asks again
    n = len(sent)
    r.drop = lambda src, dst, msg: (isinstance(msg, AlterPartitionRequest) and sent.append(msg) is not None) or (
        dst == 3 and isinstance(msg, FetchResponse))
    r.tick(r.nodes[1].config.alter_partition_timeout_ms)
    assert len(sent) > n and all(m.new_isr == sent[0].new_isr for m in sent)  # the same request
    assert r.nodes[0].partitions[TP].isr == (1, 2)  # refused: 3 was judged in sync in its old epoch
    assert leader.isr == frozenset({1, 2}) and leader.pending_isr is None


def test_a_message_or_timer_no_handler_takes_is_an_error_not_dropped():
    """As h11 raises for an event its state machine does not expect: a broker or controller
    given a message type or timer it has no handler for raises UnexpectedInput (in the
    simulator, a failed run); the served host logs it as a peer's mistake and goes on."""
    import logging

    import pytest

    from reference.errors import UnexpectedInput
    from reference.messages import DeleteTopicsResponse
    from reference.server.host import Host

    r = Router()
    stray = DeleteTopicsResponse(1, "t", Errors.NONE)
    with pytest.raises(UnexpectedInput, match="broker 1: no handler for DeleteTopicsResponse from 0"):
        r.nodes[1].receive(r.now, 0, stray)
    with pytest.raises(UnexpectedInput, match="no handler for the timer 'no-such-timer'"):
        r.nodes[1].timer(r.now, "no-such-timer")
    with pytest.raises(UnexpectedInput, match="controller: no handler for FetchResponse"):
        r.nodes[0].receive(r.now, 1, FetchResponse(1, ()))
    with pytest.raises(UnexpectedInput, match="controller: no handler for the timer 'cleaner'"):
        r.nodes[0].timer(r.now, "cleaner")

    host = Host.__new__(Host)  # only its dispatch: no loop, no routing of what comes out
    host.errors, host._route = 0, lambda node: None
    warnings = []
    handler = logging.Handler()
    handler.emit = warnings.append
    logging.getLogger("kafkacheck.server").addHandler(handler)
    try:
        host._call(r.nodes[1], "receive", r.nodes[1].receive, r.now, 0, stray)
    finally:
        logging.getLogger("kafkacheck.server").removeHandler(handler)
    assert host.errors == 0 and "DeleteTopicsResponse" in warnings[0].getMessage()


def test_a_waiting_fetch_answered_at_its_max_wait_reports_the_log_as_it_is_then():
    """A fetch with nothing to return waits up to its max wait. What it read on arrival is
    answered again at the deadline only while the broker counted no change since; a change
    that wakes no waiting fetch (here the log start moved) is in the answer."""
    r = Router()
    for value in (b"a", b"b"):
        r.request(1, ProduceRequest(1, -1, 5_000, TP, batch(value)))
        for _ in range(3):
            r.tick(10)
    r.replies(ProduceResponse)
    log = r.nodes[1].partitions[TP].log
    assert log.high_watermark == 2
    r.request(1, FetchRequest(20, -1, -1, 500, 0, (FetchPartition(TP, -1, 2, -1),)))
    assert r.replies(FetchResponse) == []  # waiting: nothing at offset 2 yet
    assert log.increment_log_start_offset(1)
    for _ in range(6):
        r.tick(100)
    [resp] = [m for m in r.replies(FetchResponse) if m.correlation_id == 20]
    assert resp.partitions[0].log_start_offset == 1 and resp.partitions[0].records == ()
    r.request(1, FetchRequest(21, -1, -1, 500, 0, (FetchPartition(TP, -1, 2, -1),)))
    for _ in range(6):
        r.tick(100)
    [resp] = [m for m in r.replies(FetchResponse) if m.correlation_id == 21]
    assert resp.partitions[0].log_start_offset == 1  # nothing changed: the same answer


def test_a_followers_fetch_asks_from_its_log_as_it_is_now():
    """A follower lists what to fetch again only after its broker counted a change: a
    truncation of its log is one, so the next fetch asks from the new end."""
    r = Router()
    r.request(1, ProduceRequest(1, -1, 5_000, TP, batch(b"a")))
    for _ in range(3):
        r.tick(10)
    follower = r.nodes[2].partitions[TP]
    assert not follower.is_leader and follower.log.log_end_offset == 1
    asked: list[int] = []

    def watch(src, dst, msg):
        if src == 2 and isinstance(msg, FetchRequest):
            asked.extend(fp.fetch_offset for fp in msg.partitions if fp.tp == TP)
        return False

    r.drop = watch
    for _ in range(3):
        r.tick(100)
    assert asked and set(asked) == {1}
    follower.log.truncate_to(0)
    asked.clear()
    for _ in range(2):
        r.tick(100)
    assert asked and asked[0] == 0


def test_a_periodic_flush_is_moot_exactly_while_it_would_flush_nothing():
    # the simulator skips a flush the broker calls moot and sets its next one itself: a moot
    # answer must be all that firing it does (its own timer again), and any change to a log
    # (a produce, a follower's append) must make the next flush real
    r = Router(flush_ms=50)
    answers = []
    for step in range(8):
        if step in (2, 5):
            r.request(1, ProduceRequest(1, -1, 5_000, TP, batch(b"v%d" % step)))
        r.tick(25)
        for b in (1, 2, 3):
            broker = r.nodes[b]
            moot = broker.timer_is_moot(r.now, "flush")
            broker.timer(r.now, "flush")
            out = broker.drain()
            if moot:
                assert out == [Timer(moot, "flush")]
                assert all(p.log.log_end_offset <= p.log.recovery_point for p in broker.partitions.values())
            else:
                assert out[-1] == Timer(50, "flush")
            answers.append(bool(moot))
    assert True in answers and False in answers
