"""The handlers of KIP-664's APIs, which find hanging transactions: DescribeProducers (what a
partition's replica keeps of each producer, its open transaction's first offset included),
ListTransactions and DescribeTransactions (what a transaction coordinator holds).

They read the local broker's state directly, as Kafka answers them from its log's producer
state and its transaction state cache (no request goes through the engine's network); the
answers follow Kafka 4.3's KafkaApis, ReplicaManager.activeProducerState and
TransactionCoordinator.handle{List,Describe}Transactions. :mod:`reference.server.apis` routes
requests here.
"""

from __future__ import annotations

from typing import Any

from reference.errors import Errors
from reference.messages import TopicPartition
from reference.server.gateway import Connection
from reference.server.host import now_ms
from reference.topics import legal_topic_name
from reference.txn_metadata import TxnState


async def describe_producers(c: Connection, req: Any, v: int) -> dict:
    """Each partition's producers as this broker's replica keeps them, leader or follower
    (Kafka answers from the local log: ``Partition.activeProducerState``)."""
    topics = c._image_partitions()
    out = []
    for t in req.topics:
        if not legal_topic_name(t.name):
            error = Errors.INVALID_TOPIC_EXCEPTION
        else:
            error = Errors.NONE if t.name in topics else Errors.UNKNOWN_TOPIC_OR_PARTITION
        out.append({"name": t.name, "partitions": [_producers_of(c, TopicPartition(t.name, i), error)
                                                   for i in t.partition_indexes]})
    return {"throttle_time_ms": 0, "topics": out}


def _producers_of(c: Connection, tp: TopicPartition, error: Errors) -> dict:
    p = c.broker.partitions.get(tp) if error is Errors.NONE else None
    if error is Errors.NONE and (p is None or c.broker.broker_epoch < 0):
        error = c.broker.not_led_here(tp)
    if p is None or error is not Errors.NONE:
        return {"partition_index": tp.partition, "error_code": int(error), "error_message": None,
                "active_producers": []}
    return {"partition_index": tp.partition, "error_code": 0, "error_message": None, "active_producers": [
        {"producer_id": pid, "producer_epoch": e.producer_epoch,
         "last_sequence": e.batches[-1].last_sequence if e.batches else -1,
         "last_timestamp": e.last_timestamp, "coordinator_epoch": e.coordinator_epoch,
         "current_txn_start_offset": e.txn_first_offset}
        for pid, e in p.log.producer_state.active_producers()]}


async def list_transactions(c: Connection, req: Any, v: int) -> dict:
    """The transactions of this broker's coordinator, filtered by state, producer id and (v1)
    how long they have been running; state names it does not know are listed back."""
    known = {s.value for s in TxnState}
    states = set(req.state_filters)
    pids = set(req.producer_id_filters)
    duration_ms = req.duration_filter if v >= 1 else -1
    error, metas = c.broker.txn.listing()
    now = now_ms()
    listed = [m for m in metas
              if (not pids or m.producer_id in pids) and (not states or m.state in states)
              and (duration_ms < 0 or now - m.start_ms > duration_ms)]
    return {"throttle_time_ms": 0, "error_code": int(error),
            "unknown_state_filters": sorted(s for s in states if s not in known) if error is Errors.NONE else [],
            "transaction_states": [{"transactional_id": m.transactional_id, "producer_id": m.producer_id,
                                    "transaction_state": str(m.state)} for m in listed]}


async def describe_transactions(c: Connection, req: Any, v: int) -> dict:
    out = []
    for txn_id in req.transactional_ids:
        error, meta = c.broker.txn.describe(txn_id)
        if meta is None:
            out.append({"error_code": int(error), "transactional_id": txn_id, "transaction_state": "",
                        "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
                        "producer_epoch": -1, "topics": []})
            continue
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(meta.partitions):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        out.append({"error_code": 0, "transactional_id": txn_id, "transaction_state": str(meta.state),
                    "transaction_timeout_ms": meta.timeout_ms, "transaction_start_time_ms": meta.start_ms,
                    "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
                    "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]})
    return {"throttle_time_ms": 0, "transaction_states": out}
