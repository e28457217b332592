"""The controller: broker registration and liveness, topics, leader election, ISR changes.

Theory of operation
-------------------
The controller is a node of its own with durable metadata: every change is a JSON record
appended to ``controller/metadata.records`` and flushed before anyone is told (a quorum
controller comes later). After a restart it replays that log and gives every registered
broker a fresh session.

* Registration gives a broker a new broker epoch. A broker that registers again has
  restarted and may have lost its unflushed tail, so it leaves every ISR it was in
  (the "lossy unclean shutdown" rule); it is re-admitted only through AlterPartition with
  the new epoch.
* A broker that misses heartbeats for ``session_timeout_ms`` is fenced: it leaves every ISR
  (except as the last member, as KRaft keeps it) and loses leadership.
* Elections pick the first live ISR replica in assignment order and bump the leader epoch
  and the partition epoch. Without a live ISR replica the partition goes offline, unless
  ``unclean_leader_election_enable``.
* AlterPartition is a compare-and-set on (leader epoch, partition epoch); new ISR members
  must be live and named with their current broker epoch (KIP-841, KIP-966).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from reference.bugs import Bug
from reference.errors import Errors, UnexpectedInput
from reference.frozen import frozen
from reference.marks import mark
from reference.messages import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    MetadataImage,
    MetadataUpdate,
    PartitionState,
    TopicPartition,
)
from reference.node import Node
from reference.storage import Storage, StorageError
from reference.topics import INTERNAL_TOPICS, legal_topic_name

# Not a partition log: the simulated disk faults that corrupt partition logs spare it, as
# the controller stands in for a replicated quorum.
METADATA_LOG = "controller/metadata.records"
PRODUCER_ID_BLOCK_SIZE = 1000


@frozen
class ControllerConfig:
    session_timeout_ms: int = 9_000
    liveness_check_interval_ms: int = 500
    unclean_leader_election_enable: bool = False
    min_insync_replicas: int = 1  # for eligible leader replicas (KIP-966)


@dataclass(slots=True)
class _BrokerRecord:
    broker_epoch: int
    fenced: bool
    last_heartbeat_ms: int


class Controller(Node):
    def __init__(self, node_id: int, storage: Storage, config: ControllerConfig,
                 bugs: frozenset[str] = frozenset()) -> None:
        super().__init__(node_id)
        self.storage = storage
        self.config = config
        self.bugs = bugs
        self.brokers: dict[int, _BrokerRecord] = {}
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.next_broker_epoch = 1
        self.metadata_version = 0
        self.registrations: dict[int, int] = {}  # broker id -> incarnation registered
        self.next_producer_id = 0  # the start of the next block of producer ids to hand out
        self.topic_configs: dict[str, tuple[tuple[str, str], ...]] = {}
        self.deleted_topics: set[str] = set()

    # ------------------------------------------------------------ durability

    def start(self, now_ms: int) -> None:
        self._load()
        for b in self.brokers.values():
            b.last_heartbeat_ms = now_ms  # a fresh session for everyone
        self.event("recover", metadata_version=self.metadata_version,
                   brokers=sorted(self.brokers))
        self.set_timer(self.config.liveness_check_interval_ms, "liveness")
        self._push()

    def _load(self) -> None:
        """Replay the metadata log into fresh in-memory state."""
        self.brokers = {}
        self.partitions = {}
        self.registrations = {}
        self.topic_configs = {}
        self.deleted_topics = set()
        self.next_broker_epoch = 1
        self.next_producer_id = 0
        self.metadata_version = 0
        data = self.storage.read(METADATA_LOG) if self.storage.exists(METADATA_LOG) else b""
        good = 0
        for line in data.split(b"\n"):
            if not line:
                good += 1
                continue
            try:
                self._replay(json.loads(line))
            except (ValueError, KeyError, TypeError):
                break  # a torn last record: it was never acknowledged
            good += len(line) + 1
        if good < len(data):
            self.storage.truncate(METADATA_LOG, good)

    def _storage_failed(self, now_ms: int, error: StorageError) -> None:
        """A change could not be made durable (a full or failing disk): forget everything
        not in the metadata log, as a restart would, and carry on; the request that needed
        it gets no answer and is retried by its sender."""
        heartbeats = {i: b.last_heartbeat_ms for i, b in self.brokers.items()}
        version = self.metadata_version
        self._load()
        for i, b in self.brokers.items():
            b.last_heartbeat_ms = heartbeats.get(i, now_ms)
        # versions only go up: brokers ignore an image not newer than the one they have
        self.metadata_version = max(self.metadata_version, version)
        self.event("storage-error", error=str(error), metadata_version=self.metadata_version)
    def _replay(self, r: dict) -> None:
        match r["type"]:
            case "broker":
                self.brokers[r["id"]] = _BrokerRecord(r["epoch"], r["fenced"], 0)
                self.registrations[r["id"]] = r.get("incarnation", -1)
                self.next_broker_epoch = max(self.next_broker_epoch, r["epoch"] + 1)
            case "topic":
                self.topic_configs[r["name"]] = tuple((k, v) for k, v in r["configs"])
            case "delete-topic":
                self.deleted_topics.add(r["name"])
                self.topic_configs.pop(r["name"], None)
                for tp in [tp for tp in self.partitions if tp.topic == r["name"]]:
                    del self.partitions[tp]
            case "producer-ids":
                self.next_producer_id = max(self.next_producer_id, r["next"])
            case "partition":
                tp = TopicPartition(r["topic"], r["partition"])
                self.deleted_topics.discard(tp.topic)
                self.partitions[tp] = PartitionState(
                    tp, tuple(r["replicas"]), tuple(r["isr"]), r["leader"],
                    r["leader_epoch"], r["partition_epoch"], tuple(r.get("elr", ())))
        self.metadata_version += 1

    def _commit(self, record: dict) -> None:
        self.storage.append(METADATA_LOG, json.dumps(record, sort_keys=True).encode() + b"\n")
        self.storage.flush(METADATA_LOG)
        self.metadata_version += 1

    def _commit_broker(self, broker_id: int) -> None:
        b = self.brokers[broker_id]
        self._commit({"type": "broker", "id": broker_id, "epoch": b.broker_epoch,
                      "fenced": b.fenced, "incarnation": self.registrations.get(broker_id, -1)})

    def _commit_partition(self, s: PartitionState) -> None:
        self.partitions[s.tp] = s
        self.deleted_topics.discard(s.tp.topic)
        self._commit({"type": "partition", "topic": s.tp.topic, "partition": s.tp.partition,
                      "replicas": list(s.replicas), "isr": list(s.isr), "leader": s.leader,
                      "leader_epoch": s.leader_epoch, "partition_epoch": s.partition_epoch,
                      "elr": list(s.elr)})
        self.event("partition-change", key=s.tp.key, leader=s.leader,
                   leader_epoch=s.leader_epoch, isr=list(s.isr),
                   partition_epoch=s.partition_epoch)

    # ------------------------------------------------------------ metadata

    def image(self) -> MetadataImage:
        live = tuple(sorted(i for i, b in self.brokers.items() if not b.fenced))
        parts = tuple(self.partitions[tp] for tp in sorted(self.partitions))
        configs = tuple(sorted(self.topic_configs.items()))
        return MetadataImage(self.metadata_version, live, parts, configs, tuple(sorted(self.deleted_topics)))

    def _push(self) -> None:
        image = self.image()
        for broker_id, b in sorted(self.brokers.items()):
            if not b.fenced:
                self.send(broker_id, MetadataUpdate(image))

    def _live(self, broker_id: int) -> bool:
        b = self.brokers.get(broker_id)
        return b is not None and not b.fenced

    # ------------------------------------------------------------ dispatch

    def receive(self, now_ms: int, src: int, message: object) -> None:
        try:
            self._receive(now_ms, src, message)
        except StorageError as e:
            self._storage_failed(now_ms, e)

    def _receive(self, now_ms: int, src: int, message: object) -> None:
        match message:
            case BrokerHeartbeatRequest():
                self._on_heartbeat(now_ms, src, message)
            case AlterPartitionRequest():
                self._on_alter_partition(src, message)
            case BrokerRegistrationRequest():
                self._on_registration(now_ms, src, message)
            case CreateTopicsRequest():
                self._on_create_topics(src, message)
            case AllocateProducerIdsRequest():
                self._on_allocate_producer_ids(src, message)
            case DeleteTopicsRequest():
                self._on_delete_topics(src, message)
            case _:
                raise UnexpectedInput(f"controller: no handler for {type(message).__name__} from {src}")

    def timer(self, now_ms: int, key: Any) -> None:
        if key == "liveness":
            self.set_timer(self.config.liveness_check_interval_ms, "liveness")
            try:
                changed = False
                for broker_id, b in sorted(self.brokers.items()):
                    if not b.fenced and now_ms - b.last_heartbeat_ms > self.config.session_timeout_ms:
                        self._fence(broker_id)
                        changed = True
                if changed:
                    self._push()
            except StorageError as e:
                self._storage_failed(now_ms, e)
        else:
            raise UnexpectedInput(f"controller: no handler for the timer {key!r}")

    def _on_registration(self, now_ms: int, src: int, req: BrokerRegistrationRequest) -> None:
        if self.registrations.get(req.broker_id) == req.incarnation:
            b = self.brokers[req.broker_id]  # a retried registration: answer it again
            self.send(src, BrokerRegistrationResponse(req.incarnation, Errors.NONE, b.broker_epoch))
            return
        epoch = self.next_broker_epoch
        self.next_broker_epoch += 1
        restarted = req.broker_id in self.brokers
        self.brokers[req.broker_id] = _BrokerRecord(epoch, False, now_ms)
        self.registrations[req.broker_id] = req.incarnation
        self._commit_broker(req.broker_id)
        self.event("broker-registered", broker=req.broker_id, broker_epoch=epoch,
                   restarted=restarted)
        if restarted and not req.storage_intact:
            # a restart may have lost unflushed records: the broker leaves every ISR (even as
            # its last member) and every ELR, and catches up before it may lead again
            self._remove_from_isrs(req.broker_id, reelect_if_leader=True, unclean=True)
        elif restarted:
            # nothing was lost, but the old process's leaderships are gone: a new leader epoch
            # for every partition it led (it may be chosen again)
            self._remove_from_isrs(req.broker_id, reelect_if_leader=True)
        self._elect_offline(req.broker_id)
        self.send(src, BrokerRegistrationResponse(req.incarnation, Errors.NONE, epoch))
        self._push()

    def _on_heartbeat(self, now_ms: int, src: int, req: BrokerHeartbeatRequest) -> None:
        b = self.brokers.get(req.broker_id)
        if b is None or b.broker_epoch != req.broker_epoch:
            self.send(src, BrokerHeartbeatResponse(req.broker_epoch, Errors.STALE_BROKER_EPOCH, None))
            return
        b.last_heartbeat_ms = now_ms
        if b.fenced:
            b.fenced = False
            self._commit_broker(req.broker_id)
            self._elect_offline(req.broker_id)
            self._push()
        image = self.image() if req.metadata_version < self.metadata_version else None
        self.send(src, BrokerHeartbeatResponse(req.broker_epoch, Errors.NONE, image, req.sent_ms))

    def _fence(self, broker_id: int) -> None:
        self.brokers[broker_id].fenced = True
        self._commit_broker(broker_id)
        mark("controller-broker-fenced")
        self.event("broker-fenced", broker=broker_id)
        self._remove_from_isrs(broker_id, reelect_if_leader=True)

    def effective_min_isr(self, s: PartitionState) -> int:
        """The topic's min.insync.replicas (else the cluster's), at most the replication factor
        (Kafka's getTopicEffectiveMinIsr, KAFKA-15583)."""
        value = dict(self.topic_configs.get(s.tp.topic, ())).get("min.insync.replicas")
        configured = int(value) if value is not None and value.isdigit() else self.config.min_insync_replicas
        return min(configured, len(s.replicas)) if s.replicas else configured

    def _elr_after(self, s: PartitionState, isr: tuple[int, ...]) -> tuple[int, ...]:
        """KIP-966: replicas leaving an ISR below min.insync.replicas become eligible; an
        ISR back at min.insync.replicas needs no ELR."""
        if len(isr) >= self.effective_min_isr(s):
            return ()
        removed = [r for r in s.isr if r not in isr]
        return tuple(r for r in s.replicas if (r in s.elr or r in removed) and r not in isr)

    def _remove_from_isrs(self, broker_id: int, reelect_if_leader: bool, unclean: bool = False) -> None:
        for tp in sorted(self.partitions):
            s = self.partitions[tp]
            if unclean and s.isr == (broker_id,):
                mark("controller-last-isr-member-unclean")
            if unclean and broker_id in s.elr:
                s = replace(s, elr=tuple(r for r in s.elr if r != broker_id),
                            partition_epoch=s.partition_epoch + 1)
                self._commit_partition(s)
            if s.leader == broker_id and reelect_if_leader:
                self._elect(s, exclude=broker_id, unclean=unclean)
            elif broker_id in s.isr and (len(s.isr) > 1 or unclean):
                isr = tuple(r for r in s.isr if r != broker_id)
                # a crashed member is not eligible; a fenced one that left a short ISR is
                elr = s.elr if unclean else self._elr_after(s, isr)
                self._commit_partition(replace(s, isr=isr, elr=elr,
                                               partition_epoch=s.partition_epoch + 1))

    def _elect_offline(self, broker_id: int) -> None:
        """A broker came (back): elect leaders for offline partitions it can lead."""
        for tp in sorted(self.partitions):
            s = self.partitions[tp]
            if s.leader < 0 and broker_id in s.replicas:
                self._elect(s)

    def _elect(self, s: PartitionState, exclude: int = -1, unclean: bool = False) -> None:
        live = [r for r in s.replicas if r != exclude and self._live(r)]
        live_isr = [r for r in live if r in s.isr]
        live_elr = [r for r in live if r in s.elr and r not in s.isr]
        elr = s.elr
        if Bug.UNCLEAN_ELECTION in self.bugs:
            outside = [r for r in live if r not in s.isr]
            candidates = outside or live_isr
            isr = (candidates[0],) if outside else tuple(r for r in s.isr if r != exclude)
        elif live_isr:
            candidates = live_isr
            isr = tuple(r for r in s.isr if r != exclude) if len(s.isr) > 1 else s.isr
            elr = self._elr_after(s, isr)
            if unclean:
                # a leader back from a crash that may have lost records is not eligible
                # (KIP-966); left in the ELR it could be elected with the records gone
                elr = tuple(r for r in elr if r != exclude)
        elif live_elr:
            # KIP-966: an eligible leader replica holds everything committed: a clean election.
            # The ISR members it replaces (a fenced last member) stay eligible, as Kafka's
            # PartitionChangeBuilder keeps them: dropped, a partition whose new leader then
            # crashes would stay offline although a replica with every record comes back
            mark("controller-elect-from-elr")
            if unclean:
                mark("controller-elect-from-elr-after-unclean")
            candidates = live_elr
            isr = (live_elr[0],)
            elr = tuple(r for r in self._elr_after(s, isr) if not (unclean and r == exclude))
        elif self.config.unclean_leader_election_enable and live:
            mark("controller-unclean-election")
            candidates = live
            isr = (live[0],)
            elr = ()
        else:
            candidates = []
            # KRaft keeps the last ISR member while the partition is offline, unless that
            # member just came back from a crash that may have lost records
            isr = tuple(r for r in s.isr if r != exclude) if unclean else s.isr
        leader = candidates[0] if candidates else -1
        if leader < 0 and s.leader < 0 and isr == s.isr and elr == s.elr:
            return
        if leader < 0:
            mark("controller-partition-offline")
        if leader >= 0 and leader not in isr:
            isr = (*isr, leader)
        self._commit_partition(replace(s, leader=leader, isr=isr, elr=elr,
                                       leader_epoch=s.leader_epoch + 1,
                                       partition_epoch=s.partition_epoch + 1))

    def elect_leader(self, now_ms: int, tp: TopicPartition, broker_id: int) -> Errors:
        """An administrative election (Kafka's ElectLeaders, as for a preferred-replica
        election or a controlled move): ``broker_id`` leads ``tp`` in a new leader epoch. It
        must be a live member of the ISR; the ISR stays as it is, the old leader included (it
        becomes a follower and must truncate and fetch like any other)."""
        s = self.partitions.get(tp)
        if s is None:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        if s.leader == broker_id:
            return Errors.ELECTION_NOT_NEEDED
        if broker_id not in s.isr or not self._live(broker_id):
            return Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
        mark("controller-admin-election")
        try:
            self._commit_partition(replace(s, leader=broker_id, leader_epoch=s.leader_epoch + 1,
                                           partition_epoch=s.partition_epoch + 1))
        except StorageError as e:
            self._storage_failed(now_ms, e)
            return Errors.KAFKA_STORAGE_ERROR
        self._push()
        return Errors.NONE

    # ------------------------------------------------------------ requests

    def _on_alter_partition(self, src: int, req: AlterPartitionRequest) -> None:
        s = self.partitions.get(req.tp)
        error = Errors.NONE
        if s is None:
            error = Errors.UNKNOWN_TOPIC_OR_PARTITION
        elif not self._live(req.broker_id) or self.brokers[req.broker_id].broker_epoch != req.broker_epoch:
            error = Errors.STALE_BROKER_EPOCH
        elif s.leader != req.broker_id or s.leader_epoch != req.leader_epoch:
            error = Errors.FENCED_LEADER_EPOCH
        elif s.partition_epoch != req.partition_epoch:
            error = Errors.INVALID_UPDATE_VERSION
        else:
            new_isr = tuple(r for r, _ in req.new_isr)
            if req.broker_id not in new_isr:
                error = Errors.INVALID_REQUEST
            for r, epoch in req.new_isr:
                if r in s.isr:
                    continue
                b = self.brokers.get(r)
                if r not in s.replicas or b is None or b.fenced or b.broker_epoch != epoch:
                    error = Errors.INELIGIBLE_REPLICA
        if error is not Errors.NONE or s is None:
            mark("controller-alter-partition-refused")
            self.send(src, AlterPartitionResponse(req.correlation_id, req.tp, error, None))
            return
        ordered = tuple(r for r in s.replicas if r in {m for m, _ in req.new_isr})
        new = replace(s, isr=ordered, elr=self._elr_after(s, ordered),
                      partition_epoch=s.partition_epoch + 1)
        self._commit_partition(new)
        self.send(src, AlterPartitionResponse(req.correlation_id, req.tp, Errors.NONE, new))
        self._push()

    def _on_allocate_producer_ids(self, src: int, req: AllocateProducerIdsRequest) -> None:
        b = self.brokers.get(req.broker_id)
        if b is None or b.fenced or b.broker_epoch != req.broker_epoch:
            self.send(src, AllocateProducerIdsResponse(req.correlation_id, Errors.STALE_BROKER_EPOCH))
            return
        start = self.next_producer_id
        # durable before it is handed out: a restarted controller never repeats a block
        self._commit({"type": "producer-ids", "next": start + PRODUCER_ID_BLOCK_SIZE})
        self.next_producer_id = start + PRODUCER_ID_BLOCK_SIZE
        self.send(src, AllocateProducerIdsResponse(req.correlation_id, Errors.NONE, start,
                                                   PRODUCER_ID_BLOCK_SIZE))

    def _on_create_topics(self, src: int, req: CreateTopicsRequest) -> None:
        if not legal_topic_name(req.name):  # whoever asks: the Kafka API's rule holds here too
            self.send(src, CreateTopicsResponse(req.correlation_id, req.name, Errors.INVALID_TOPIC_EXCEPTION))
            return
        if req.assignments:
            self._create_assigned(src, req)
            return
        if req.num_partitions < 1:
            self.send(src, CreateTopicsResponse(req.correlation_id, req.name, Errors.INVALID_PARTITIONS))
            return
        if any(tp.topic == req.name for tp in self.partitions):
            self.send(src, CreateTopicsResponse(req.correlation_id, req.name,
                                                Errors.TOPIC_ALREADY_EXISTS))
            return
        brokers = sorted(self.brokers)
        if req.replication_factor < 1 or req.replication_factor > len(brokers):
            self.send(src, CreateTopicsResponse(req.correlation_id, req.name,
                                                Errors.INVALID_REPLICATION_FACTOR))
            return
        if req.configs:
            self.topic_configs[req.name] = tuple(req.configs)
            self._commit({"type": "topic", "name": req.name, "configs": [list(c) for c in req.configs]})
        for i in range(req.num_partitions):
            replicas = tuple(brokers[(i + j) % len(brokers)] for j in range(req.replication_factor))
            live = [r for r in replicas if self._live(r)]
            leader = live[0] if live else -1
            isr = tuple(live) if live else replicas
            self._commit_partition(PartitionState(TopicPartition(req.name, i), replicas, isr,
                                                  leader, 0, 0))
        self.send(src, CreateTopicsResponse(req.correlation_id, req.name, Errors.NONE))
        self._push()

    def _create_assigned(self, src: int, req: CreateTopicsRequest) -> None:
        """A topic whose replicas the request places (Kafka's ReplicationControlManager.createTopic
        with manual assignments, its checks in its order and words)."""
        message: str | None
        if any(tp.topic == req.name for tp in self.partitions):
            error, message = Errors.TOPIC_ALREADY_EXISTS, f"Topic '{req.name}' already exists."
        else:
            error, message = self._check_assignments(req)
        if error is not Errors.NONE:
            self.send(src, CreateTopicsResponse(req.correlation_id, req.name, error, message))
            return
        if req.configs:
            self.topic_configs[req.name] = tuple(req.configs)
            self._commit({"type": "topic", "name": req.name, "configs": [list(c) for c in req.configs]})
        for index, replicas in sorted(req.assignments):
            live = tuple(r for r in replicas if self._live(r))
            self._commit_partition(PartitionState(TopicPartition(req.name, index), tuple(replicas), live,
                                                  live[0], 0, 0))
        self.send(src, CreateTopicsResponse(req.correlation_id, req.name, Errors.NONE))
        self._push()

    def _check_assignments(self, req: CreateTopicsRequest) -> tuple[Errors, str | None]:
        if req.replication_factor != -1:
            return Errors.INVALID_REQUEST, ("A manual partition assignment was specified, but replication "
                                            "factor was not set to -1.")
        if req.num_partitions != -1:
            return Errors.INVALID_REQUEST, ("A manual partition assignment was specified, but numPartitions "
                                            "was not set to -1.")
        bad = Errors.INVALID_REPLICA_ASSIGNMENT
        seen: set[int] = set()
        size = None
        for index, replicas in req.assignments:
            if index in seen:
                return bad, f"Found multiple manual partition assignments for partition {index}"
            seen.add(index)
            if not replicas:
                return bad, "The manual partition assignment includes an empty replica list."
            ids = sorted(replicas)
            for i, b in enumerate(ids):
                if b not in self.brokers:
                    return bad, (f"The manual partition assignment includes broker {b}, but no such "
                                 "broker is registered.")
                if i and ids[i - 1] == b:
                    return bad, f"The manual partition assignment includes the broker {b} more than once."
            if size is not None and len(ids) != size:
                return bad, (f"The manual partition assignment includes a partition with {len(ids)} "
                             f"replica(s), but this is not consistent with previous partitions, which "
                             f"have {size} replica(s).")
            size = len(ids)
            if not any(self._live(b) for b in ids):
                return bad, (f"All brokers specified in the manual partition assignment for partition "
                             f"{index} are fenced or in controlled shutdown.")
        if seen != set(range(len(seen))):
            return bad, "partitions should be a consecutive 0-based integer sequence"
        return Errors.NONE, None

    def _on_delete_topics(self, src: int, req: DeleteTopicsRequest) -> None:
        """Remove a topic from the metadata; each replica deletes its log when the image
        without it arrives (a broker that was down deletes it on its next image). The internal
        topics cannot be deleted, whoever asks (as through the Kafka API)."""
        if req.name in INTERNAL_TOPICS:
            self.send(src, DeleteTopicsResponse(req.correlation_id, req.name, Errors.INVALID_TOPIC_EXCEPTION))
            return
        if not any(tp.topic == req.name for tp in self.partitions):
            self.send(src, DeleteTopicsResponse(req.correlation_id, req.name,
                                                Errors.UNKNOWN_TOPIC_OR_PARTITION))
            return
        self._commit({"type": "delete-topic", "name": req.name})
        self.deleted_topics.add(req.name)
        self.topic_configs.pop(req.name, None)
        for tp in [tp for tp in self.partitions if tp.topic == req.name]:
            del self.partitions[tp]
        self.event("topic-deleted", topic=req.name)
        self.send(src, DeleteTopicsResponse(req.correlation_id, req.name, Errors.NONE))
        self._push()
