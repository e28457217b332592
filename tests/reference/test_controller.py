"""The controller in events: registration, fencing, elections, AlterPartition, restart."""

from __future__ import annotations

from reference.controller import Controller, ControllerConfig
from reference.errors import Errors
from reference.messages import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreateTopicsRequest,
    MetadataUpdate,
    TopicPartition,
)
from reference.node import Send
from reference.storage import MemoryStorage

TP = TopicPartition("t", 0)


def started(storage=None, **config) -> tuple[Controller, MemoryStorage]:
    storage = storage or MemoryStorage()
    c = Controller(0, storage, ControllerConfig(session_timeout_ms=1_000, **config))
    c.start(0)
    c.drain()
    return c, storage


def register(c: Controller, broker: int, incarnation: int = 1, now: int = 0) -> int:
    c.receive(now, broker, BrokerRegistrationRequest(broker, incarnation))
    replies = [o.message for o in c.drain() if isinstance(o, Send)
               and isinstance(o.message, BrokerRegistrationResponse)]
    return replies[0].broker_epoch


def cluster():
    c, storage = started()
    epochs = {b: register(c, b) for b in (1, 2, 3)}
    c.receive(0, 9, CreateTopicsRequest(1, "t", 1, 3))
    c.drain()
    return c, storage, epochs


def heartbeat(c, epochs, brokers, now):
    for b in brokers:
        c.receive(now, b, BrokerHeartbeatRequest(b, epochs[b], 10**9))
    c.drain()


def test_a_topic_starts_with_the_first_replica_leading_and_all_in_sync():
    c, _s, _e = cluster()
    s = c.partitions[TP]
    assert (s.leader, s.isr, s.leader_epoch) == (1, (1, 2, 3), 0)


def test_a_silent_leader_is_fenced_and_a_live_isr_member_takes_over():
    c, _s, epochs = cluster()
    heartbeat(c, epochs, (2, 3), 900)
    c.timer(1_500, "liveness")
    s = c.partitions[TP]
    assert s.leader == 2 and 1 not in s.isr and s.leader_epoch == 1


def test_without_a_live_isr_member_the_partition_goes_offline_unless_unclean_is_allowed():
    for unclean, leader in ((False, -1), (True, 3)):
        c, _s = started(unclean_leader_election_enable=unclean)
        epochs = {b: register(c, b) for b in (1, 2, 3)}
        c.receive(0, 9, CreateTopicsRequest(1, "t", 1, 3))
        c.drain()
        c.partitions[TP] = c.partitions[TP].__class__(TP, (1, 2, 3), (1, 2), 1, 0, 0)
        heartbeat(c, epochs, (3,), 900)
        c.timer(1_500, "liveness")
        assert c.partitions[TP].leader == leader


def test_alter_partition_is_a_compare_and_set_with_current_broker_epochs():
    c, _s, epochs = cluster()
    s = c.partitions[TP]

    def alter(isr, partition_epoch=s.partition_epoch, leader_epoch=s.leader_epoch):
        c.receive(0, 1, AlterPartitionRequest(7, 1, epochs[1], TP, leader_epoch, partition_epoch,
                                              tuple((b, epochs[b]) for b in isr)))
        return next(o.message for o in c.drain()
                    if isinstance(o, Send) and isinstance(o.message, AlterPartitionResponse))

    assert alter((1, 2)).error is Errors.NONE
    assert alter((1, 2), partition_epoch=s.partition_epoch).error is Errors.INVALID_UPDATE_VERSION
    cur = c.partitions[TP]
    assert alter((1, 2), partition_epoch=cur.partition_epoch, leader_epoch=9).error is (
        Errors.FENCED_LEADER_EPOCH)
    epochs_stale = dict(epochs)
    epochs[3] = register(c, 3, incarnation=2)  # broker 3 restarted: a new epoch
    epochs_old = epochs_stale[3]
    c.receive(0, 1, AlterPartitionRequest(8, 1, epochs[1], TP, cur.leader_epoch, cur.partition_epoch,
                                          ((1, epochs[1]), (2, epochs[2]), (3, epochs_old))))
    reply = next(o.message for o in c.drain()
                 if isinstance(o, Send) and isinstance(o.message, AlterPartitionResponse))
    assert reply.error is Errors.INELIGIBLE_REPLICA


def test_a_restarted_broker_leaves_every_isr():
    c, _s, _epochs = cluster()
    register(c, 2, incarnation=2)
    assert 2 not in c.partitions[TP].isr


def test_metadata_survives_a_controller_restart_and_a_torn_last_record():
    c, storage, _epochs = cluster()
    register(c, 3, incarnation=2)
    before = (c.partitions[TP], c.next_broker_epoch)
    storage.append("controller/metadata.records", b'{"type": "partit')  # torn last write
    c2, _ = started(storage)
    assert (c2.partitions[TP], c2.next_broker_epoch) == before


def test_a_retried_registration_after_a_controller_restart_is_not_a_broker_restart():
    _c, storage, epochs = cluster()
    c2, _ = started(storage)
    assert register(c2, 2, incarnation=1) == epochs[2]
    assert 2 in c2.partitions[TP].isr


def elr_cluster():
    c, storage = started(min_insync_replicas=2)
    epochs = {b: register(c, b) for b in (1, 2, 3)}
    c.receive(0, 9, CreateTopicsRequest(1, "t", 1, 3))
    c.drain()
    return c, storage, epochs


def test_replicas_leaving_a_short_isr_become_eligible_leaders_kip_966():
    c, _s, epochs = elr_cluster()
    heartbeat(c, epochs, (1, 2), 900)
    c.timer(1_500, "liveness")  # 3 fenced: ISR (1, 2) is still at min.insync.replicas
    assert c.partitions[TP].isr == (1, 2) and c.partitions[TP].elr == ()
    heartbeat(c, epochs, (1,), 2_000)
    c.timer(2_600, "liveness")  # 2 fenced: ISR (1) is short, 2 holds everything committed
    s = c.partitions[TP]
    assert (s.leader, s.isr, s.elr) == (1, (1,), (2,))
    # broker 1 crashes (its unflushed records are gone) and comes back as a new process:
    # it leaves the ISR although it was its last member, and must not lead
    register(c, 1, incarnation=2, now=3_000)
    s = c.partitions[TP]
    assert 1 not in s.isr and s.leader != 1
    # the eligible replica comes back and leads, cleanly
    heartbeat(c, {**epochs, 2: epochs[2]}, (2,), 3_100)
    s = c.partitions[TP]
    assert (s.leader, s.isr) == (2, (2,)) and 2 not in s.elr


def test_without_eligible_replicas_a_crashed_last_isr_member_leaves_the_partition_offline():
    c, _s, epochs = elr_cluster()
    heartbeat(c, epochs, (1, 2), 900)
    c.timer(1_500, "liveness")
    heartbeat(c, epochs, (1,), 2_000)
    c.timer(2_600, "liveness")
    register(c, 2, incarnation=2, now=2_700)  # the eligible one crashed as well
    register(c, 1, incarnation=2, now=3_000)
    s = c.partitions[TP]
    assert s.leader == -1 and s.isr == () and s.elr == ()  # unavailable rather than wrong


def test_a_leader_back_from_a_crash_is_not_eligible_even_when_its_isr_falls_short():
    # found by the groups machine without a bug switch (kafkacheck explore): broker 2 and then
    # the leader 1 crash and come back within a millisecond; 3 leads alone, and the
    # controller had put 1 into the ELR, then elected it with its unflushed records gone
    c, _s, epochs = elr_cluster()
    epochs[2] = register(c, 2, incarnation=2, now=100)
    epochs[1] = register(c, 1, incarnation=2, now=200)
    s = c.partitions[TP]
    assert (s.leader, s.isr) == (3, (3,))
    assert s.elr == ()  # neither crashed replica holds for sure what was committed
    heartbeat(c, epochs, (1, 2), 900)
    c.timer(1_600, "liveness")  # 3 is fenced: no replica may lead without losing data
    s = c.partitions[TP]
    assert s.leader == -1 and s.isr == (3,)


def test_an_election_from_the_elr_keeps_the_fenced_last_isr_member_eligible():
    # found by the groups machine without a bug switch: the controller paused past every
    # session fenced all three brokers; 2 (eligible) came back and led, then crashed; 3, the
    # last ISR member with every record, had been dropped from the ISR and the ELR alike, so
    # the partition stayed offline for good
    c, _s, epochs = elr_cluster()
    heartbeat(c, epochs, (2, 3), 900)
    c.timer(1_500, "liveness")  # 1 fenced: ISR (2, 3)
    heartbeat(c, epochs, (3,), 2_000)
    c.timer(2_600, "liveness")  # 2 fenced: ISR (3), 2 eligible
    c.timer(3_700, "liveness")  # 3 fenced as well: offline, 3 still its last ISR member
    s = c.partitions[TP]
    assert (s.leader, s.isr, s.elr) == (-1, (3,), (2,))
    heartbeat(c, epochs, (2,), 3_800)  # 2 is back: elected from the ELR
    s = c.partitions[TP]
    assert (s.leader, s.isr) == (2, (2,)) and s.elr == (3,)
    register(c, 2, incarnation=2, now=3_900)  # and crashes: offline, 3 still eligible
    s = c.partitions[TP]
    assert (s.leader, s.elr) == (-1, (3,))
    heartbeat(c, epochs, (3,), 4_000)  # 3 is back: it leads with every committed record
    assert c.partitions[TP].leader == 3


def test_an_administrative_election_moves_leadership_and_keeps_the_old_leader_in_sync():
    c, _s, epochs = cluster()
    assert c.elect_leader(0, TP, 2) is Errors.NONE
    s = c.partitions[TP]
    assert (s.leader, s.isr, s.leader_epoch) == (2, (1, 2, 3), 1)
    pushed = [o.message.image for o in c.drain() if isinstance(o, Send) and isinstance(o.message, MetadataUpdate)]
    assert len(pushed) == 3 and all(i.partitions[0].leader == 2 for i in pushed)   # every live broker
    assert c.elect_leader(0, TP, 2) is Errors.ELECTION_NOT_NEEDED
    assert c.elect_leader(0, TopicPartition("nope", 0), 1) is Errors.UNKNOWN_TOPIC_OR_PARTITION
    # only a live member of the ISR may be chosen
    c.partitions[TP] = c.partitions[TP].__class__(TP, (1, 2, 3), (1, 2), 2, 1, 1)
    assert c.elect_leader(0, TP, 3) is Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
    heartbeat(c, epochs, (2,), 900)
    c.timer(1_500, "liveness")   # 1 and 3 fenced; 2 leads alone
    assert c.elect_leader(1_500, TP, 1) is Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
    assert c.partitions[TP].leader == 2


def create(c: Controller, req: CreateTopicsRequest):
    c.receive(0, 9, req)
    [resp] = [o.message for o in c.drain() if isinstance(o, Send) and o.dst == 9]
    return resp


def test_manual_assignments_place_each_partition_on_the_replicas_given():
    c, _s, epochs = cluster()
    resp = create(c, CreateTopicsRequest(2, "m", -1, -1, assignments=((0, (3,)), (1, (2,)), (2, (1,)))))
    assert resp.error is Errors.NONE
    placed = {tp.partition: (s.replicas, s.leader, s.isr) for tp, s in c.partitions.items() if tp.topic == "m"}
    assert placed == {0: ((3,), 3, (3,)), 1: ((2,), 2, (2,)), 2: ((1,), 1, (1,))}
    # the only replica fenced: the partition has no leader, and keeps its last ISR member
    heartbeat(c, epochs, (1, 2), 900)
    c.timer(1_500, "liveness")
    s = c.partitions[TopicPartition("m", 0)]
    assert (s.leader, s.isr) == (-1, (3,))


def test_manual_assignments_are_checked_as_kafka_checks_them():
    c, _s, epochs = cluster()
    heartbeat(c, epochs, (1, 2), 900)
    c.timer(1_500, "liveness")  # broker 3 fenced
    bad = Errors.INVALID_REPLICA_ASSIGNMENT
    cases = [
        (2, -1, ((0, (1,)),), Errors.INVALID_REQUEST, "replication factor was not set to -1"),
        (-1, 1, ((0, (1,)),), Errors.INVALID_REQUEST, "numPartitions was not set to -1"),
        (-1, -1, ((0, (1,)), (0, (2,))), bad, "multiple manual partition assignments for partition 0"),
        (-1, -1, ((0, ()),), bad, "empty replica list"),
        (-1, -1, ((0, (1, 7)),), bad, "broker 7, but no such broker is registered"),
        (-1, -1, ((0, (2, 2)),), bad, "the broker 2 more than once"),
        (-1, -1, ((0, (1, 2)), (1, (1,))), bad, "with 1 replica(s), but this is not consistent"),
        (-1, -1, ((0, (3,)),), bad, "are fenced or in controlled shutdown"),
        (-1, -1, ((0, (1,)), (2, (2,))), bad, "consecutive 0-based"),
    ]
    for rf, n, assignments, error, words in cases:
        resp = create(c, CreateTopicsRequest(5, "m", n, rf, assignments=assignments))
        assert (resp.error, words in (resp.message or "")) == (error, True), (assignments, resp)
        assert not any(tp.topic == "m" for tp in c.partitions)
    resp = create(c, CreateTopicsRequest(5, "t", -1, -1, assignments=((0, (1,)),)))
    assert resp.error is Errors.TOPIC_ALREADY_EXISTS
    # a fenced replica may be placed beside a live one, which leads
    resp = create(c, CreateTopicsRequest(5, "m", -1, -1, assignments=((0, (3, 2)),)))
    s = c.partitions[TopicPartition("m", 0)]
    assert resp.error is Errors.NONE and (s.replicas, s.leader, s.isr) == ((3, 2), 2, (2,))
