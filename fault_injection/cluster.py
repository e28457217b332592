"""A simulated reference cluster: the controller (node 0) and brokers 1..N in a Simulation.

Timings are Kafka's defaults scaled down (``CLUSTER_TIMINGS``) so that a minute of virtual
time sees many leader changes. Shared by the runner (``kafkacheck run``) and the Hypothesis
state machines of the workloads (:mod:`kafkacheck.explore`).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from fault_injection.disk import SimDisk
from fault_injection.simulation import Simulation
from reference.broker import Broker, BrokerConfig
from reference.controller import Controller, ControllerConfig
from reference.messages import TopicPartition

CONTROLLER_ID = 0
MS = 1_000_000

CLUSTER_TIMINGS = {
    "replica_lag_time_max_ms": 3_000,
    "replica_fetch_wait_max_ms": 200,
    "replica_fetch_backoff_ms": 100,
    "replica_fetch_timeout_ms": 2_000,
    "heartbeat_interval_ms": 300,
    "registration_retry_ms": 500,
    "alter_partition_timeout_ms": 2_000,
    "high_watermark_checkpoint_interval_ms": 2_000,
    "session_timeout_ms": 2_000,
    "request_timeout_ms": 2_000,
    "delivery_timeout_ms": 6_000,
    "transaction_timeout_ms": 10_000,
    "member_session_timeout_ms": 3_000,
    "member_heartbeat_interval_ms": 500,
    "member_rebalance_timeout_ms": 4_000,
    "member_max_poll_interval_ms": 6_000,
    "log_cleaner_backoff_ms": 1_000,
}


def broker_config(min_insync_replicas: int = 2, flush_messages: int | None = None,
                  flush_ms: int | None = None, transaction_version: int = 1,
                  timings: dict[str, int] | None = None) -> BrokerConfig:
    return BrokerConfig.from_timings(timings or CLUSTER_TIMINGS, min_insync_replicas=min_insync_replicas,
                                     flush_messages=flush_messages, flush_ms=flush_ms,
                                     transaction_version=transaction_version)


def controller_config(min_insync_replicas: int = 2, unclean: bool = False,
                      timings: dict[str, int] | None = None) -> ControllerConfig:
    return ControllerConfig(session_timeout_ms=(timings or CLUSTER_TIMINGS)["session_timeout_ms"],
                            unclean_leader_election_enable=unclean,
                            min_insync_replicas=min_insync_replicas)


def add_cluster(sim: Simulation, brokers: int, bconfig: BrokerConfig, cconfig: ControllerConfig,
                bugs: Iterable[str] = ()) -> list[int]:
    """Add the controller and the brokers to ``sim`` (not started); returns the broker ids.
    Clients' ``history`` events become ops of the run's recorder, stamped with the virtual
    time; with invariants on, every acks=all acknowledgement is watched until the end."""
    bugs = frozenset(bugs)
    broker_ids = list(range(1, brokers + 1))
    sim.network.set_roles(CONTROLLER_ID, broker_ids)
    sim.add_process(CONTROLLER_ID, lambda inc, disk: Controller(CONTROLLER_ID, disk, cconfig, bugs))
    for b in broker_ids:
        sim.add_process(b, partial(_broker, b, bconfig, bugs))
    recorder = sim.recorder

    def history(node: int, f: dict) -> None:
        recorder.op(sim.now_ns, f.pop("process"), f.pop("type"), f.pop("f"), f.pop("value"), **f)

    sim.event_hooks["history"] = history
    if sim.checker is not None:
        checker = sim.checker
        sim.event_hooks["acked"] = lambda node, f: checker.acknowledged(
            TopicPartition.parse(f["key"]), f["offset"])
    return broker_ids


def _broker(broker_id: int, bconfig: BrokerConfig, bugs: frozenset[str], incarnation: int, disk: SimDisk) -> Broker:
    """Broker ``broker_id``'s process as (re)started (a partial of it is its factory)."""
    return Broker(broker_id, disk, bconfig, CONTROLLER_ID, incarnation, bugs)
