"""Swarm testing: each seed draws its own run, so a hunt covers many shapes of the system.

As TigerBeetle's VOPR does it: a swarm seed draws the workload, which fault kinds are on
(some seeds switch off whole classes: network, process, disk, clock), how often faults come
and how long they last, the configuration (acks, replication factor, min.insync.replicas,
idempotence and transactions through the workload, the transaction version, the assignor,
static members, compaction settings, the flush policy), the timings (session timeouts,
replica lag, request and transaction timeouts) and the aimed nemesis strategies
(:mod:`fault_injection.aimed`) or a model template (the shape of one of the z3
counterexamples, :mod:`kafkacheck.replay`, with random parameters). The run's own seed is the
swarm seed, so ``kafkacheck run --swarm SEED`` reproduces the run from the seed alone.

After healing, a liveness phase demands convergence within a bound
(:mod:`kafkacheck.liveness`).
"""

from __future__ import annotations

import random
from dataclasses import replace

from fault_injection.aimed import AIMED
from fault_injection.cluster import CLUSTER_TIMINGS
from fault_injection.model_shapes import model_templates, template_schedule
from kafkacheck.runner import RunOptions
from kafkacheck.workloads import IDEMPOTENT_WORKLOADS, TXN_WORKLOADS
from reference.assignors import ASSIGNORS

FAULT_CLASSES: dict[str, tuple[str, ...]] = {
    "network": ("partition", "loss", "duplicate", "reorder", "delay", "straggle"),
    "process": ("kill", "pause"),
    "disk": ("disk",),
    "clock": ("clock-skew",),
}
# queue twice: it carries the model templates too
# messages delivered twice or out of order on one connection: TCP never does that, so Kafka
# makes no promise under them except for the idempotent producer, whose sequence numbers exist
# for retries (docs/tutorials/first-run.md: a non-idempotent queue run with `duplicate` reports duplicates)
TCP_BREAKING = ("duplicate", "reorder")
CRASHES = {"kill", "disk"}  # faults that crash a node (losing what it did not flush)
SWARM_WORKLOADS = ("queue", "queue", "idempotent", "txn", "eos", "groups", "compaction")
# the transactional workloads cost about six times as much a op: fewer ops keep runs short
SWARM_OPS = {"txn": 500, "eos": 500}
# the aimed strategies that only make sense for some workloads
_AIMED_FOR = {"coordinator-failover-after-endtxn": TXN_WORKLOADS,
              "request-held-back": (*TXN_WORKLOADS, "idempotent"),
              "member-paused-across-rebalance": ("groups",),
              "restart-during-cleaning": ("compaction",)}
DEFAULT_OPS = 2_000


def draw(seed: int, ops: int = DEFAULT_OPS) -> RunOptions:
    """The run a swarm seed stands for (deterministic: the same seed, the same run)."""
    rng = random.Random(f"kafkacheck-swarm-{seed}")
    workload = rng.choice(SWARM_WORKLOADS)
    ops = min(ops, SWARM_OPS.get(workload, ops))
    classes = [c for c in FAULT_CLASSES if rng.random() < 0.7]
    faults = [f for c in classes for f in FAULT_CLASSES[c] if rng.random() < 0.5
              and (f not in TCP_BREAKING or workload == "idempotent")]
    stable = rng.choice([(200, 1_000), (1_000, 4_000), (3_000, 10_000)])
    lasting = rng.choice([(300, 2_000), (1_000, 6_000), (4_000, 15_000)])
    rf = rng.choice([3, 3, 2])
    min_isr = rng.choice([1, 2]) if rf == 3 else 1
    acks = "all" if workload in IDEMPOTENT_WORKLOADS or rng.random() < 0.8 else "1"
    timings = {
        "session_timeout_ms": rng.choice([1_000, 2_000, 4_000]),
        "replica_lag_time_max_ms": rng.choice([1_000, 3_000, 6_000]),
        "request_timeout_ms": rng.choice([1_000, 2_000, 4_000]),
        "transaction_timeout_ms": rng.choice([3_000, 10_000, 20_000]),
        "member_session_timeout_ms": rng.choice([1_500, 3_000, 6_000]),
        "high_watermark_checkpoint_interval_ms": rng.choice([200, 2_000, 5_000]),
    }
    timings["delivery_timeout_ms"] = max(6_000, 2 * timings["request_timeout_ms"])
    timings["member_rebalance_timeout_ms"] = timings["member_session_timeout_ms"] + 1_000
    timings["member_max_poll_interval_ms"] = 2 * timings["member_session_timeout_ms"]
    timings = {k: v for k, v in timings.items() if v != CLUSTER_TIMINGS[k]}
    flush = rng.choice([(None, None), (None, None), (1, None), (10, None), (None, 100)])
    aimed = sorted(s for s in AIMED if workload in _AIMED_FOR.get(s, (workload,)) and rng.random() < 0.3)
    if set(faults) & CRASHES or set(aimed) - {"member-paused-across-rebalance", "clock-jump-at-boundary"}:
        # Kafka does not fsync: with min.insync.replicas 1 a crash of the one replica that
        # acknowledged a write may lose it, and a crash of the last ISR member leaves the
        # partition offline (KIP-966 keeps no replica eligible after an unclean shutdown).
        # Neither is a bug, so crashing runs keep a second in-sync copy.
        min_isr = 2
    options = RunOptions(
        seed=seed, ops=ops, workload=workload, faults=faults, acks=acks, replication_factor=rf,
        min_insync_replicas=min_isr, partitions=rng.choice([1, 2, 4]),
        transaction_version=rng.choice([1, 2]) if workload in TXN_WORKLOADS else 1,
        assignor=rng.choice(ASSIGNORS) if workload == "groups" else "range",
        static_members=workload == "groups" and rng.random() < 0.4,
        flush_messages=flush[0], flush_ms=flush[1], timings=timings or None,
        fault_stable_ms=stable, fault_ms=lasting, aimed=aimed,
        topic_configs=(("cleanup.policy", "compact"),
                       ("segment.bytes", str(rng.choice([1_024, 2_048, 8_192]))),
                       ("min.cleanable.dirty.ratio", str(rng.choice([0.01, 0.2, 0.5]))),
                       ("delete.retention.ms", str(rng.choice([500, 5_000, 20_000]))))
        if workload == "compaction" else None)
    if workload == "queue" and rng.random() < 0.3:
        # a model template: as many brokers as the model has replicas, as in its replay
        variant = rng.choice(sorted(model_templates()))
        replicas = model_templates()[variant]["replicas"]
        options = replace(options, schedule=template_schedule(variant, rng, replicas),
                          faults=[], aimed=[], brokers=replicas, replication_factor=replicas,
                          min_insync_replicas=1, partitions=1, swarm={"template": variant})
    t = {**CLUSTER_TIMINGS, **(options.timings or {})}
    liveness_ms = max(t["transaction_timeout_ms"], t["member_rebalance_timeout_ms"],
                      t["replica_lag_time_max_ms"]) + 15_000
    return replace(options, liveness_ms=liveness_ms, swarm={"seed": seed, **(options.swarm or {})})


def describe(o: RunOptions) -> str:
    """One line: what the seed drew."""
    parts = [o.workload, f"ops {o.ops}", "faults " + (",".join(o.faults) or "none"),
             f"acks {o.acks}", f"rf {o.replication_factor}", f"min.isr {o.min_insync_replicas}",
             f"partitions {o.partitions}", f"calm {o.fault_stable_ms[0]}-{o.fault_stable_ms[1]} ms",
             f"faults last {o.fault_ms[0]}-{o.fault_ms[1]} ms"]
    if o.workload in TXN_WORKLOADS:
        parts.append(f"transaction version {o.transaction_version}")
    if o.workload == "groups":
        parts.append(f"assignor {o.assignor}" + (", static members" if o.static_members else ""))
    if o.topic_configs:
        parts.append(" ".join(f"{k}={v}" for k, v in o.topic_configs[1:]))
    if o.flush_messages or o.flush_ms:
        parts.append(f"flush every {o.flush_messages} messages" if o.flush_messages
                     else f"flush every {o.flush_ms} ms")
    if o.timings:
        parts.append(" ".join(f"{k}={v}" for k, v in sorted(o.timings.items())))
    if o.aimed:
        parts.append("aimed " + ",".join(o.aimed))
    if o.swarm and "template" in o.swarm:
        parts.append(f"model template {o.swarm['template']}")
    parts.append(f"liveness bound {o.liveness_ms} ms")
    return "; ".join(parts)


def features(o: RunOptions) -> list[str]:
    """The drawn choices the steering learns from (which of them reach rare marks)."""
    out = [f"workload={o.workload}", f"rf={o.replication_factor}", f"min.isr={o.min_insync_replicas}",
           f"calm={o.fault_stable_ms[0]}", f"lasting={o.fault_ms[0]}", f"partitions={o.partitions}"]
    out += [f"fault={f}" for f in o.faults] + [f"aimed={a}" for a in o.aimed]
    out += [f"{k}={v}" for k, v in sorted((o.timings or {}).items())]
    if o.swarm and "template" in o.swarm:
        out.append(f"template={o.swarm['template']}")
    return out
