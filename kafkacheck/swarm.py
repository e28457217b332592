"""Swarm testing: each seed draws its own run, so a hunt covers many shapes of the system.

As TigerBeetle's VOPR does it: a swarm seed draws the workload, which fault kinds are on
(some seeds switch off whole classes: network, process, disk, clock), which kinds of link the
network faults hit (all, client, replication, controller: :mod:`fault_injection.network`),
how often faults come and how long they last, the configuration (acks, replication factor,
min.insync.replicas, idempotence and transactions through the workload, the transaction
version, the assignor, static membership), and every setting a guarantee depends on over its
whole range, extremes included (:func:`_spread`): the timings (the brokers' sessions and
heartbeats, replica lag and fetch wait, request, delivery and transaction timeouts, the
members' session, heartbeat, rebalance timeout and max.poll.interval.ms, checkpoint and
cleaner intervals) within the constraints Kafka puts between them; the producer's batches in
flight (1-5 with idempotence), batch size and linger; the consumers' and followers' fetch
sizes down to one byte and max.poll.records; the compacted topic's segment size, dirty ratio
and delete.retention.ms (0 to past the run's end); the flush policy (never, every message,
every N messages, every T ms). Then the aimed nemesis strategies
(:mod:`fault_injection.aimed`; some drawn apart from RNGs of their own, so that adding them
changed no other choice of a seed: the consumer-protocol ones, ``offline-around-commit``,
``leader-after-marker``, ``isr-shrink-then-crash``) or a model template (the shape of one of the z3
counterexamples, :mod:`kafkacheck.replay`, with random parameters). The run's own seed is the
swarm seed, so ``kafkacheck run --swarm SEED`` reproduces the run from the seed alone.

After healing, a liveness phase demands convergence within a bound
(:mod:`kafkacheck.liveness`).
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

from fault_injection.aimed import AIMED
from fault_injection.cluster import CLUSTER_TIMINGS
from fault_injection.model_shapes import model_templates, template_schedule
from fault_injection.nemesis import NETWORK_FAULTS, OFFLINE
from kafkacheck.runner import RunOptions
from kafkacheck.workloads import IDEMPOTENT_WORKLOADS, TXN_WORKLOADS, WORKLOADS
from reference.assignors import ASSIGNORS, SERVER_ASSIGNORS

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
SWARM_OPS = {"txn": 500, "eos": 500, "share": 1_000}
# the aimed strategies that only make sense for some workloads (offline-around-commit: drawn
# with offline-partition, by _offline)
_AIMED_FOR = {"coordinator-failover-after-endtxn": TXN_WORKLOADS,
              "request-held-back": (*TXN_WORKLOADS, "idempotent"),
              "member-paused-across-rebalance": ("groups",),
              "coordinator-paused-during-rebalance": ("groups",),
              "restart-during-cleaning": ("compaction",),
              "offline-around-commit": (), "heartbeat-held-across-rebalance": (),
              "revocation-slow-across-rebalance": (), "leave-lost": (),
              # drawn apart, by _marker_failover and _elr_edge
              "leader-after-marker": (), "isr-shrink-then-crash": ()}
OFFLINE_P = 0.4  # transactional seeds that take a partition offline
OFFLINE_AIMED_P = 0.5  # of those, the ones that also aim it at commits
CONSUMER_PROTOCOL_P = 0.5  # groups seeds that speak KIP-848's consumer protocol
EOS_GROUP_P = 0.5  # eos seeds whose processors subscribe as members of one group (KIP-447)
HELD_ACK_P = 0.5  # of those, the ones that hold members' acknowledgements across target changes
SLOW_REVOCATION_P = 0.75  # and, drawn apart, the ones whose members' revocations are slow
LEAVE_LOST_P = 0.5  # and the ones that lose members' leave heartbeats
EPOCH_END_P = 0.25  # transactional seeds whose producer ids start near the end of their epochs
SHARE_P = 0.5  # queue seeds (without a model template) that become share-group (KIP-932) runs
MARKER_FAILOVER_P = 0.3  # transactional seeds that fail a partition's leader over as it writes a marker
ELR_EDGE_P = 0.2  # acks=all seeds that drive a partition to the edges of its eligible leader replicas
# the aimed strategies that may crash a broker (a power loss): not with offline-partition
AIMED_CRASHING = frozenset({"leader-after-write", "crash-after-append", "election-during-truncation",
                            "coordinator-failover-after-endtxn", "restart-during-cleaning",
                            "leader-after-marker", "isr-shrink-then-crash"})
DEFAULT_OPS = 2_000
# the kinds of link a network fault may hit: all at once, or one kind (fault_injection.network)
LINKS = ("all", "client", "replication", "controller")


def _spread(rng: random.Random, lo: int, hi: int) -> int:
    """A value of [lo, hi]: each extreme a fifth of the time, else log-uniform in between (0
    as ``lo`` is an extreme too), so that no setting is drawn only in its comfortable middle."""
    hi = max(lo, hi)
    r = rng.random()
    if r < 0.2:
        return lo
    if r < 0.4:
        return hi
    return min(hi, max(lo, round(math.exp(rng.uniform(math.log(max(lo, 1)), math.log(max(hi, 1)))))))


def _timings(rng: random.Random) -> dict[str, int]:
    """The cluster's and the clients' timeouts, each over its range (Kafka's defaults scaled
    down by about 15, as CLUSTER_TIMINGS are), with the constraints Kafka puts between them."""
    t: dict[str, int] = {}
    # the brokers' sessions at the controller (broker.session.timeout.ms) and their
    # heartbeats (broker.heartbeat.interval.ms), which must be shorter: at most a third
    t["session_timeout_ms"] = _spread(rng, 600, 20_000)
    t["heartbeat_interval_ms"] = _spread(rng, 50, t["session_timeout_ms"] // 3)
    # replica.fetch.wait.max.ms must stay below replica.lag.time.max.ms (Kafka's documentation):
    # a follower's long poll would otherwise drop it from the ISR; twice the wait at least
    t["replica_fetch_wait_max_ms"] = _spread(rng, 10, 500)
    t["replica_lag_time_max_ms"] = _spread(rng, max(500, 2 * t["replica_fetch_wait_max_ms"]), 30_000)
    t["request_timeout_ms"] = _spread(rng, 300, 30_000)
    # delivery.timeout.ms >= linger.ms + request.timeout.ms, or the producer refuses to start
    # (the producer's linger is 2 ms unless drawn: the runner adds nothing to it here)
    t["delivery_timeout_ms"] = _spread(rng, t["request_timeout_ms"] + 60, max(60_000, 3 * t["request_timeout_ms"]))
    t["transaction_timeout_ms"] = _spread(rng, 1_000, 60_000)
    # a member's session (group.min/max.session.timeout.ms scaled: 400 ms to 30 s), its
    # heartbeats at most a third of it (Kafka's advice; it rejects none below the session),
    # the rebalance timeout drawn apart from the session: long enough for members that
    # heartbeat and poll (every 250 ms at most) to rejoin in time, else every rebalance
    # would expel the members that had not yet heard of it and never end
    t["member_session_timeout_ms"] = _spread(rng, 400, 30_000)
    t["member_heartbeat_interval_ms"] = _spread(rng, 30, t["member_session_timeout_ms"] // 3)
    t["member_rebalance_timeout_ms"] = _spread(rng, max(1_000, 3 * t["member_heartbeat_interval_ms"]), 60_000)
    # max.poll.interval.ms: the members poll every 250 ms at most, so 1 s at least
    t["member_max_poll_interval_ms"] = _spread(rng, 1_000, 60_000)
    t["high_watermark_checkpoint_interval_ms"] = _spread(rng, 50, 10_000)
    t["log_cleaner_backoff_ms"] = _spread(rng, 50, 5_000)
    return t


def _flush(rng: random.Random) -> tuple[int | None, int | None]:
    """flush.messages and flush.ms: never (Kafka's default), every message, every N
    messages, every T ms, or both."""
    mode = rng.choice(["none", "none", "every-message", "messages", "ms", "both"])
    messages = 1 if mode == "every-message" else _spread(rng, 2, 1_000) if mode in ("messages", "both") else None
    ms = _spread(rng, 1, 5_000) if mode in ("ms", "both") else None
    return messages, ms


def draw(seed: int, ops: int = DEFAULT_OPS, share: bool = True) -> RunOptions:
    """The run a swarm seed stands for (deterministic: the same seed, the same run).
    ``share=False``: the run the seed stood for before share groups joined the swarm (a queue
    run where it is now a share run: the regression runs pinned on such seeds)."""
    rng = random.Random(f"kafkacheck-swarm-{seed}")
    workload = rng.choice(SWARM_WORKLOADS)
    ops = min(ops, SWARM_OPS.get(workload, ops))
    classes = [c for c in FAULT_CLASSES if rng.random() < 0.7]
    faults = [f for c in classes for f in FAULT_CLASSES[c] if rng.random() < 0.5
              and (f not in TCP_BREAKING or workload == "idempotent")]
    # which kinds of link the network faults hit (each fault draws one of these)
    links = [k for k in LINKS if rng.random() < 0.6] or [rng.choice(LINKS)]
    stable = rng.choice([(200, 1_000), (1_000, 4_000), (3_000, 10_000)])
    lasting = rng.choice([(300, 2_000), (1_000, 6_000), (4_000, 15_000)])
    rf = rng.choice([3, 3, 2])
    min_isr = rng.choice([1, 2]) if rf == 3 else 1
    acks = "all" if workload in IDEMPOTENT_WORKLOADS or rng.random() < 0.8 else "1"
    timings = _timings(rng)
    timings = {k: v for k, v in timings.items() if v != CLUSTER_TIMINGS[k]}
    flush = _flush(rng)
    # the producer: batches in flight (max.in.flight.requests.per.connection, 1 to 5 with
    # idempotence; without it the harness keeps 1, since more may reorder a partition's
    # records on a retry, which Kafka permits and the checker would report), batch.size
    # (1: a record a batch) and linger.ms
    producer = {"batch_size": _spread(rng, 1, 16_384), "linger_ms": _spread(rng, 0, 50)}
    in_flight = rng.randint(1, 5)
    if workload in IDEMPOTENT_WORKLOADS:
        producer["max_in_flight"] = in_flight
    elif "straggle" in faults:
        # without sequence numbers a request that timed out (its send's outcome unknown) and
        # lands late may land after the op's next batch: Kafka permits it, the checker reports
        # int-nonmonotonic-send (swarm seed 23 found it). An op's sends then share one batch,
        # the harness's (batch.size 16 KiB, linger 2 ms)
        del producer["batch_size"], producer["linger_ms"]
    # delivery.timeout.ms >= linger.ms + request.timeout.ms (Kafka refuses less)
    t_req = timings.get("request_timeout_ms", CLUSTER_TIMINGS["request_timeout_ms"])
    t_del = timings.get("delivery_timeout_ms", CLUSTER_TIMINGS["delivery_timeout_ms"])
    if t_del < t_req + producer.get("linger_ms", 2):
        timings["delivery_timeout_ms"] = t_req + producer.get("linger_ms", 2)
    # the consumers' fetch sizes, down to a byte (a response then holds one batch: Kafka
    # always returns the first batch of the first partition that has one) and max.poll.records
    consumer = {"max_partition_fetch_bytes": _spread(rng, 1, 1 << 20),
                "fetch_max_bytes": _spread(rng, 1, 52_428_800),
                "max_poll_records": _spread(rng, 1, 1_000)}
    # the followers' (replica.fetch.max.bytes, replica.fetch.response.max.bytes)
    broker = {"replica_fetch_max_bytes": _spread(rng, 1, 1 << 20),
              "replica_fetch_response_max_bytes": _spread(rng, 1, 10 << 20)}
    aimed = sorted(s for s in AIMED if workload in _AIMED_FOR.get(s, (workload,)) and rng.random() < 0.3)
    if set(faults) & CRASHES or set(aimed) - {"member-paused-across-rebalance", "clock-jump-at-boundary"}:
        # Kafka does not fsync: with min.insync.replicas 1 a crash of the one replica that
        # acknowledged a write may lose it, and a crash of the last ISR member leaves the
        # partition offline (KIP-966 keeps no replica eligible after an unclean shutdown).
        # Neither is a bug, so crashing runs keep a second in-sync copy.
        min_isr = 2
    partitions = rng.choice([1, 2, 4])
    transaction_version = rng.choice([1, 2]) if workload in TXN_WORKLOADS else 1
    assignor = rng.choice(ASSIGNORS) if workload == "groups" else "range"
    static = workload == "groups" and rng.random() < 0.5
    # the compacted topic: segments of one batch (about 100 bytes) to 64 KiB, a cleaner that
    # cleans at any dirt (0) to only when all is dirty (1), tombstones kept from not at all
    # to past the end of the run (about a minute of virtual time)
    ratio = rng.choice(["0", "1", f"{rng.uniform(0, 1):.2f}"])
    topic_configs = (("cleanup.policy", "compact"),
                     ("segment.bytes", str(_spread(rng, 100, 1 << 16))),
                     ("min.cleanable.dirty.ratio", ratio),
                     ("delete.retention.ms", str(_spread(rng, 0, 120_000))))
    options = RunOptions(
        seed=seed, ops=ops, workload=workload, faults=faults, acks=acks, replication_factor=rf,
        min_insync_replicas=min_isr, partitions=partitions, transaction_version=transaction_version,
        assignor=assignor, static_members=static, flush_messages=flush[0], flush_ms=flush[1],
        timings=timings or None, fault_stable_ms=stable, fault_ms=lasting, aimed=aimed,
        topic_configs=topic_configs if workload == "compaction" else None,
        producer_settings=producer, consumer_settings=consumer, broker_settings=broker,
        fault_links=links if set(faults) & NETWORK_FAULTS else None)
    if workload == "queue" and rng.random() < 0.3:
        # a model template: as many brokers as the model has replicas, as in its replay
        variant = rng.choice(sorted(model_templates()))
        replicas = model_templates()[variant]["replicas"]
        options = replace(options, schedule=template_schedule(variant, rng, replicas),
                          faults=[], aimed=[], brokers=replicas, replication_factor=replicas,
                          min_insync_replicas=1, partitions=1, swarm={"template": variant},
                          fault_links=None)
    options = _share(seed, options) if share else options
    options = _offline(seed, options)
    options = _group_protocol(seed, options)
    options = _epoch_end(seed, options)
    options = _marker_failover(seed, options)
    options = _elr_edge(seed, options)
    t = {**CLUSTER_TIMINGS, **(options.timings or {})}
    if WORKLOADS[options.workload].subscribe or options.eos_subscribe:
        # a member that crashed stays in its group, owning partitions, until its session
        # expires (up to 30 s here): Kafka's dynamic membership. The quiet period after
        # healing outlasts it, so that the members' final polls see the group without it
        options = replace(options, quiet_ms=max(options.quiet_ms, t["member_session_timeout_ms"] + 1_000))
    # after healing: a transaction to time out, a lagging follower to be dropped, a member's
    # session to expire and the rebalance that follows to end
    liveness_ms = max(t["transaction_timeout_ms"], t["replica_lag_time_max_ms"],
                      t["member_session_timeout_ms"] + t["member_rebalance_timeout_ms"],
                      t["member_max_poll_interval_ms"], 2 * t["session_timeout_ms"]) + 15_000
    return replace(options, liveness_ms=liveness_ms, swarm={"seed": seed, **(options.swarm or {})})


def _offline(seed: int, options: RunOptions) -> RunOptions:
    """Some transactional seeds take a partition offline (``offline-partition``, with its
    one-replica placement) and some of those aim it at commits (``offline-around-commit``),
    drawn from an RNG of their own, so that every other seed draws what it drew before. Those
    seeds lose the faults and aimed strategies that crash a broker (kill, disk): a power loss
    of a partition's only replica may lose acknowledged writes, which Kafka permits."""
    if options.workload not in TXN_WORKLOADS or options.schedule is not None:
        return options
    rng = random.Random(f"kafkacheck-swarm-offline-{seed}")
    if rng.random() >= OFFLINE_P:
        return options
    aimed = [a for a in options.aimed if a not in AIMED_CRASHING]
    if rng.random() < OFFLINE_AIMED_P:
        aimed = sorted([*aimed, "offline-around-commit"])
    faults = [f for f in options.faults if f not in CRASHES]
    return replace(options, faults=[*faults, OFFLINE], aimed=aimed,
                   fault_links=options.fault_links if set(faults) & NETWORK_FAULTS else None)


def _share(seed: int, options: RunOptions) -> RunOptions:
    """Half the queue seeds without a model template run the share workload instead (KIP-932:
    consumers of one share group acquiring records under locks), drawn from an RNG of their
    own, so that every other seed draws what it drew before. Its producer is idempotent, so
    acks=all and 1-5 batches in flight, as the idempotent seeds draw them."""
    if options.workload != "queue" or options.schedule is not None:
        return options
    rng = random.Random(f"kafkacheck-swarm-share-{seed}")
    if rng.random() >= SHARE_P:
        return options
    producer = {**(options.producer_settings or {}), "max_in_flight": rng.randint(1, 5)}
    producer.setdefault("batch_size", _spread(rng, 1, 16_384))
    producer.setdefault("linger_ms", _spread(rng, 0, 50))
    return replace(options, workload="share", acks="all", producer_settings=producer,
                   ops=min(options.ops, SWARM_OPS["share"]))


def _epoch_end(seed: int, options: RunOptions) -> RunOptions:
    """A quarter of the transactional seeds start their producer ids' epochs within 40 of the
    last (32766), so that their runs reach it: under transaction version 2, where every end
    bumps the epoch, the producer moves to a new producer id within a few dozen transactions;
    under version 1 a fence or a timed-out transaction takes the last epochs. Drawn from an RNG
    of its own, so that every other choice of a seed is what it was before."""
    if options.workload not in TXN_WORKLOADS:
        return options
    rng = random.Random(f"kafkacheck-swarm-epoch-end-{seed}")
    if rng.random() >= EPOCH_END_P:
        return options
    return replace(options, producer_epoch_start=32_766 - rng.randint(0, 40))


def _marker_failover(seed: int, options: RunOptions) -> RunOptions:
    """Some transactional seeds fail a partition's leader over just as it appends a
    transaction marker (``leader-after-marker``), drawn from an RNG of its own, so that every
    other choice of a seed is what it was before. Not with ``offline-partition`` (its
    partitions have one replica: nothing to fail over to, and a crash may lose acknowledged
    writes); min.insync.replicas 2, as for every crashing strategy."""
    if options.workload not in TXN_WORKLOADS or options.schedule is not None or OFFLINE in options.faults:
        return options
    return _crashing_strategy(seed, options, "marker-failover", MARKER_FAILOVER_P, "leader-after-marker")


def _elr_edge(seed: int, options: RunOptions) -> RunOptions:
    """Some seeds whose producers ask acks=all drive a partition to the edges of its eligible
    leader replicas (``isr-shrink-then-crash``, KIP-966: an ISR below or at
    min.insync.replicas and its last member crashing), drawn from an RNG of its own, so that
    every other choice of a seed is what it was before. min.insync.replicas 2: with 1 no
    replica is ever eligible, and a crash of the last in-sync copy may lose acknowledged
    writes. Not the model templates (their schedules are the model's) nor ``offline-partition``
    (one replica a partition), nor acks=1 (a write the leader alone acknowledged is not the
    ELR's to keep)."""
    if options.schedule is not None or OFFLINE in options.faults or options.acks != "all":
        return options
    return _crashing_strategy(seed, options, "elr-edge", ELR_EDGE_P, "isr-shrink-then-crash")


def _crashing_strategy(seed: int, options: RunOptions, name: str, p: float, strategy: str) -> RunOptions:
    """``strategy`` added with probability ``p``, drawn from the RNG
    ``kafkacheck-swarm-NAME-SEED`` of its own, with min.insync.replicas 2."""
    if random.Random(f"kafkacheck-swarm-{name}-{seed}").random() >= p:
        return options
    return replace(options, aimed=sorted([*options.aimed, strategy]), min_insync_replicas=2)


def _group_protocol(seed: int, options: RunOptions) -> RunOptions:
    """Half the groups seeds speak KIP-848's consumer protocol (the coordinator assigns, with
    the uniform or range assignor); half the eos seeds have their processors join a group
    (classic or consumer, an assignor of that protocol); drawn from RNGs of their own, so
    that every other choice of a seed is what it was before."""
    if options.workload == "eos":
        rng = random.Random(f"kafkacheck-swarm-eos-group-{seed}")
        if rng.random() >= EOS_GROUP_P:
            return options
        protocol = rng.choice(("classic", "consumer"))
        assignor = rng.choice(SERVER_ASSIGNORS if protocol == "consumer" else ASSIGNORS)
        return replace(options, eos_subscribe=True, group_protocol=protocol, assignor=assignor)
    if options.workload != "groups":
        return options
    rng = random.Random(f"kafkacheck-swarm-group-protocol-{seed}")
    if rng.random() >= CONSUMER_PROTOCOL_P:
        return options
    assignor = rng.choice(SERVER_ASSIGNORS)
    aimed = options.aimed
    if rng.random() < HELD_ACK_P:  # (aimed strategies of this protocol only: drawn here)
        aimed = sorted([*aimed, "heartbeat-held-across-rebalance"])
    if rng.random() < SLOW_REVOCATION_P:
        aimed = sorted([*aimed, "revocation-slow-across-rebalance"])
    if rng.random() < LEAVE_LOST_P:
        aimed = sorted([*aimed, "leave-lost"])
    return replace(options, group_protocol="consumer", assignor=assignor, aimed=aimed)


def _settings(o: RunOptions) -> list[tuple[str, object]]:
    return [(k, v) for d in (o.producer_settings, o.consumer_settings, o.broker_settings)
            for k, v in sorted((d or {}).items())]


def describe(o: RunOptions) -> str:
    """One line: what the seed drew."""
    parts = [o.workload, f"ops {o.ops}", "faults " + (",".join(o.faults) or "none"),
             f"acks {o.acks}", f"rf {o.replication_factor}", f"min.isr {o.min_insync_replicas}",
             f"partitions {o.partitions}", f"calm {o.fault_stable_ms[0]}-{o.fault_stable_ms[1]} ms",
             f"faults last {o.fault_ms[0]}-{o.fault_ms[1]} ms"]
    if o.fault_links:
        parts.append("network faults on " + ",".join(o.fault_links) + " links")
    if o.workload in TXN_WORKLOADS:
        parts.append(f"transaction version {o.transaction_version}")
        if o.producer_epoch_start:
            parts.append(f"producer epochs from {o.producer_epoch_start}")
    if o.workload == "groups":
        parts.append(("consumer protocol, " if o.group_protocol == "consumer" else "")
                     + f"assignor {o.assignor}" + (", static members" if o.static_members else ", dynamic members"))
    if o.eos_subscribe:
        parts.append(f"processors in a {o.group_protocol} group, assignor {o.assignor}")
    if o.topic_configs:
        parts.append(" ".join(f"{k}={v}" for k, v in o.topic_configs[1:]))
    flush = [f"every {o.flush_messages} messages"] if o.flush_messages else []
    flush += [f"every {o.flush_ms} ms"] if o.flush_ms else []
    parts.append("flush " + (" and ".join(flush) or "never (the OS's)"))
    if o.timings:
        parts.append(" ".join(f"{k}={v}" for k, v in sorted(o.timings.items())))
    if _settings(o):
        parts.append(" ".join(f"{k}={v}" for k, v in _settings(o)))
    if o.aimed:
        parts.append("aimed " + ",".join(o.aimed))
    if o.swarm and "template" in o.swarm:
        parts.append(f"model template {o.swarm['template']}")
    if o.quiet_ms != RunOptions().quiet_ms:
        parts.append(f"quiet {o.quiet_ms} ms after healing")
    parts.append(f"liveness bound {o.liveness_ms} ms")
    return "; ".join(parts)


def _magnitude(v: object) -> str:
    """A drawn number's order of magnitude (the steering learns from a few values of each
    setting, not from every value the range holds)."""
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return v
    if not isinstance(v, (int, float)) or v < 10:
        return str(v)
    return f"1e{math.floor(math.log10(v))}"


def features(o: RunOptions) -> list[str]:
    """The drawn choices the steering learns from (which of them reach rare marks)."""
    out = [f"workload={o.workload}", f"rf={o.replication_factor}", f"min.isr={o.min_insync_replicas}",
           f"calm={o.fault_stable_ms[0]}", f"lasting={o.fault_ms[0]}", f"partitions={o.partitions}",
           f"flush.messages={_magnitude(o.flush_messages)}", f"flush.ms={_magnitude(o.flush_ms)}"]
    out += [f"fault={f}" for f in o.faults] + [f"aimed={a}" for a in o.aimed]
    out += [f"links={k}" for k in o.fault_links or ()]
    if o.workload == "groups":
        out += [f"assignor={o.assignor}", f"static={o.static_members}", f"group.protocol={o.group_protocol}"]
    if o.eos_subscribe:
        out += [f"assignor={o.assignor}", f"group.protocol={o.group_protocol}"]
    if o.workload in TXN_WORKLOADS:
        out.append(f"transaction.version={o.transaction_version}")
        if o.producer_epoch_start:
            out.append("producer.epochs=near-end")
    out += [f"{k}={_magnitude(v)}" for k, v in sorted((o.timings or {}).items())]
    out += [f"{k}={_magnitude(v)}" for k, v in _settings(o)]
    out += [f"{k}={_magnitude(v)}" for k, v in (o.topic_configs or ())[1:]]
    if o.swarm and "template" in o.swarm:
        out.append(f"template={o.swarm['template']}")
    return out
