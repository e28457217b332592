"""Runs the queue workload on a simulated reference cluster and writes the run directory.

Phases, in virtual time:

1. start the controller (node 0) and brokers (1..N); create the topic; start the clients;
2. the workload runs its ``ops`` while the nemesis applies its schedule;
3. every fault is healed, then the cluster gets ``quiet_ms`` with no faults;
4. a final reader reads every partition to its end within ``staleness_bound_ms``.

Timings of the simulated cluster are Kafka's defaults scaled down (``CLUSTER_TIMINGS``) so
that a run of a minute of virtual time sees many leader changes; they are written to
``run.json``.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import kafkacheck
from fault_injection.cluster import CLUSTER_TIMINGS, CONTROLLER_ID, MS, add_cluster, controller_config
from fault_injection.cluster import broker_config as make_broker_config
from fault_injection.nemesis import Nemesis, random_schedule
from fault_injection.simulation import Simulation, young_collections_only
from kafkacheck.workloads import IDEMPOTENT_WORKLOADS, TXN_WORKLOADS, WORKLOADS  # noqa: F401 (re-exported)
from kafkacheck.workloads.compaction import CompactionClient
from kafkacheck.workloads.eos import GROUP, SOURCE_SHIFT, EosProcessor
from kafkacheck.workloads.groups import GROUP as MEMBERS_GROUP
from kafkacheck.workloads.groups import GroupMemberClient
from kafkacheck.workloads.queue import Budget, FinalReader, QueueClient
from kafkacheck.workloads.txn import TxnClient
from reference import marks
from reference.consumer import ConsumerConfig
from reference.messages import CreateTopicsRequest, TopicPartition
from reference.producer import ProducerConfig
from reference.txn_coordinator import OFFSETS_TOPIC, TXN_TOPIC
from traces.history import RunRecord, write_jsonl

ADMIN_ID = 90
READER_ID = 91
CLIENT_BASE = 100
STALL_MS = 60_000  # no op completed for this long (virtual): the run is stalled


# the compaction workload's topic: small segments and an eager cleaner, so that it runs often
COMPACTED_TOPIC_CONFIGS = (
    ("cleanup.policy", "compact"),
    ("segment.bytes", "2048"),
    ("min.cleanable.dirty.ratio", "0.2"),
    ("delete.retention.ms", "5000"),
)


@dataclass(slots=True)
class RunOptions:
    seed: int = 0
    ops: int = 10_000
    brokers: int = 3
    partitions: int = 4
    replication_factor: int = 3
    min_insync_replicas: int = 2
    acks: str = "all"
    faults: list[str] = field(default_factory=lambda: ["partition", "kill", "pause", "disk"])
    bugs: list[str] = field(default_factory=list)
    clients: int = 5
    schedule: list[dict] | None = None  # a scripted schedule replaces the random one
    flush_messages: int | None = None
    flush_ms: int | None = None
    unclean_leader_election: bool = False
    quiet_ms: int = 5_000
    staleness_bound_ms: int = 30_000
    keep_going: bool = False
    invariants: bool = True
    topic: str = "t0"
    workload: str = "queue"  # a key of WORKLOADS
    transaction_version: int = 1  # 2: KIP-890 epoch bump at every transaction end
    assignor: str = "range"  # groups workload
    static_members: bool = False  # groups workload: group.instance.id per member
    # what a swarm seed varies besides the above (the defaults change nothing)
    timings: dict[str, int] | None = None  # overrides of CLUSTER_TIMINGS
    fault_stable_ms: tuple[int, int] = (1_000, 4_000)  # random schedule: calm between faults
    fault_ms: tuple[int, int] = (1_000, 6_000)  # random schedule: how long a fault lasts
    topic_configs: tuple[tuple[str, str], ...] | None = None  # replaces the compacted topic's
    aimed: list[str] = field(default_factory=list)  # aimed nemesis strategies (fault_injection.aimed)
    liveness_ms: int | None = None  # after healing, demand convergence within this time
    swarm: dict | None = None  # the swarm draw this run came from (recorded in run.json)





@dataclass(slots=True)
class RunOutcome:
    run_dir: Path | None
    run_meta: dict
    violations: list[dict]
    final_read: dict
    stats: dict
    ops: list[dict] = field(default_factory=list)  # history.jsonl's lines, as written
    events: list[dict] = field(default_factory=list)  # events.jsonl's

    def record(self) -> RunRecord:
        """The run as its directory holds it, without reading it back (the files are these
        dicts written as JSON; tests/kafkacheck/test_runner.py checks the verdicts agree)."""
        return RunRecord(json.loads(json.dumps(self.run_meta)), self.ops, self.events)


def _kick(sim: Simulation, c: GroupMemberClient) -> None:
    """Ask a member for its final poll, through the simulation so its outputs are routed."""
    sim.act(c.node_id, lambda node, now_ms: c.final_poll(now_ms))


def _liveness_phase(sim: Simulation, bound_ms: int) -> dict:
    """Run until the healed cluster has converged (:mod:`kafkacheck.liveness`), polling every
    100 ms of virtual time, for at most ``bound_ms``; what has not converged by then is
    recorded as ``liveness-violation`` events."""
    from kafkacheck.liveness import unconverged

    start = sim.now_ns
    left: list[dict] = []
    while True:
        left = unconverged(sim.controller(), sim.brokers())
        if not left or sim.stopped or sim.now_ns - start >= bound_ms * MS:
            break
        sim.run_until(sim.now_ns + 100 * MS)
    for finding in left:
        sim.recorder.event(sim.now_ns, -1, "liveness-violation",
                           {**finding, "bound_ms": bound_ms})
    return {"bound_ms": bound_ms, "converged": not left,
            "took_ms": (sim.now_ns - start) // MS if not left else None}


def acks_value(acks: str) -> int:
    return {"all": -1, "-1": -1, "1": 1, "0": 0}[acks]


def run_id_for(options: RunOptions) -> str:
    bugs = "-".join(options.bugs) or "correct"
    workload = "" if options.workload == "queue" else f"{options.workload}-"
    return f"seed{options.seed}-{workload}{bugs}"


def simulate(options: RunOptions, out_dir: Path | None,
             progress: Callable[[int, int], None] | None = None) -> RunOutcome:
    """Run the simulation; write its run directory to ``out_dir`` (None: write nothing, the
    outcome keeps the history and events)."""
    with young_collections_only():
        return _simulate(options, out_dir, progress)


def _simulate(options: RunOptions, out_dir: Path | None,
              progress: Callable[[int, int], None] | None) -> RunOutcome:
    sim = Simulation(options.seed, invariants=options.invariants, keep_going=options.keep_going)
    bugs = frozenset(options.bugs)
    t = {**CLUSTER_TIMINGS, **(options.timings or {})}
    marks.reset()
    broker_config = make_broker_config(options.min_insync_replicas, options.flush_messages,
                                       options.flush_ms, options.transaction_version, t)
    broker_ids = add_cluster(sim, options.brokers, broker_config,
                             controller_config(options.min_insync_replicas,
                                               options.unclean_leader_election, t), bugs)
    recorder = sim.recorder

    sim.start(CONTROLLER_ID)
    for b in broker_ids:
        sim.start(b)
    sim.run_until(1_000 * MS)
    compacted = options.workload == "compaction"
    topic_configs = (options.topic_configs if options.topic_configs is not None
                     else COMPACTED_TOPIC_CONFIGS) if compacted else ()
    sim.inject(ADMIN_ID, CONTROLLER_ID, CreateTopicsRequest(
        1, options.topic, options.partitions, options.replication_factor, topic_configs))
    txn = options.workload in TXN_WORKLOADS
    eos = options.workload == "eos"
    output_topic = "t1" if options.topic != "t1" else "t2"
    if txn:
        # Kafka creates its internal topics on first use; the harness creates them up front
        sim.inject(ADMIN_ID, CONTROLLER_ID, CreateTopicsRequest(
            2, TXN_TOPIC, broker_config.transaction_state_partitions,
            min(3, options.brokers)))
    groups = options.workload == "groups"
    if eos or groups:
        sim.inject(ADMIN_ID, CONTROLLER_ID, CreateTopicsRequest(
            3, OFFSETS_TOPIC, broker_config.offsets_partitions, min(3, options.brokers)))
    if eos:
        sim.inject(ADMIN_ID, CONTROLLER_ID, CreateTopicsRequest(
            4, output_topic, options.partitions, options.replication_factor))
    sim.run_until(2_000 * MS)

    keys = [TopicPartition(options.topic, i) for i in range(options.partitions)]
    outputs = [TopicPartition(output_topic, i) for i in range(options.partitions)]
    n_producers = max(1, options.clients // 2)  # eos: input producers; the rest process
    budget = Budget(options.ops)
    idempotent = options.workload in IDEMPOTENT_WORKLOADS
    producer_config = ProducerConfig(
        acks=acks_value(options.acks), linger_ms=2, retry_backoff_ms=50,
        request_timeout_ms=t["request_timeout_ms"], delivery_timeout_ms=t["delivery_timeout_ms"],
        max_in_flight=5 if idempotent else 1, retry_unknown_outcomes=idempotent,
        enable_idempotence=idempotent)
    consumer_config = ConsumerConfig(fetch_max_wait_ms=50, request_timeout_ms=t["request_timeout_ms"],
                                     isolation_level=1 if txn else 0)
    member_config = replace(
        consumer_config, session_timeout_ms=t["member_session_timeout_ms"],
        heartbeat_interval_ms=t["member_heartbeat_interval_ms"],
        rebalance_timeout_ms=t["member_rebalance_timeout_ms"],
        max_poll_interval_ms=t["member_max_poll_interval_ms"], assignors=(options.assignor,),
        enable_auto_commit=False)
    clients: list[QueueClient | TxnClient | EosProcessor | GroupMemberClient] = []
    for i in range(options.clients):
        node_id = CLIENT_BASE + i
        client_rng = sim.child_rng()

        def make(inc, disk, i=i, node_id=node_id, client_rng=client_rng):
            c: QueueClient | TxnClient | EosProcessor | GroupMemberClient
            if groups and i == 0:
                c = QueueClient(node_id, i, options.clients, keys, broker_ids, client_rng, budget,
                                producer_config, consumer_config, think_ms=100, send_p=1.0)
            elif groups:
                c = GroupMemberClient(node_id, i, options.clients, [tp.key for tp in keys],
                                      broker_ids, client_rng, budget, member_config,
                                      options.static_members)
            elif eos and i < n_producers:
                c = QueueClient(node_id, i, options.clients, keys, broker_ids, client_rng, budget,
                                producer_config, consumer_config, think_ms=150, send_p=1.0)
            elif eos:
                j, m = i - n_producers, options.clients - n_producers
                c = EosProcessor(node_id, j, i, options.clients,
                                 [tp for tp in keys if tp.partition % m == j], output_topic,
                                 broker_ids, client_rng, budget, producer_config,
                                 replace(consumer_config, group_id=GROUP),
                                 t["transaction_timeout_ms"])
            elif compacted:
                c = CompactionClient(node_id, i, options.clients, keys, broker_ids, client_rng,
                                     budget, producer_config, consumer_config)
            elif txn:
                c = TxnClient(node_id, i, options.clients, keys, broker_ids, client_rng, budget,
                              producer_config, consumer_config, t["transaction_timeout_ms"])
            else:
                c = QueueClient(node_id, i, options.clients, keys, broker_ids, client_rng, budget,
                                producer_config, consumer_config)
            clients.append(c)
            return c

        sim.add_process(node_id, make)
        sim.start(node_id)

    nodes = [CONTROLLER_ID, *broker_ids]
    members = [CLIENT_BASE + i for i in range(1, options.clients)] if groups else []
    nemesis = Nemesis(sim, nodes + members)
    # the random schedule spans the time the workload is expected to need
    expected_ms = 2_000 + options.ops * 70 // max(options.clients, 1)
    schedule = options.schedule if options.schedule is not None else random_schedule(
        sim.child_rng(), options.faults, nodes, 2_000, expected_ms * 2,
        stable_ms=options.fault_stable_ms, fault_ms=options.fault_ms)
    if options.schedule is None and members and "pause" in options.faults:
        # members paused past their session timeout miss rebalances and wake up stale
        schedule = sorted(schedule + random_schedule(
            sim.child_rng(), ["pause"], members, 3_000, expected_ms * 2,
            stable_ms=(2_000, 6_000), fault_ms=(1_000, 3 * t["member_session_timeout_ms"])),
            key=lambda step: step["at_ms"])
    nemesis.schedule(schedule)
    if options.aimed:
        from fault_injection.aimed import AimedNemesis

        AimedNemesis(sim, nemesis, options.aimed, sim.child_rng(), broker_ids, members, t,
                     schedule, expected_ms * 2, options.fault_ms)

    # phase 2: until every op completed (and the schedule has played out), or the run stopped
    schedule_end_ms = max((s["at_ms"] for s in schedule), default=0)
    horizon_ns = (expected_ms * 20 + schedule_end_ms + 60_000) * MS
    step_ns = 200 * MS
    t_ns = sim.now_ns
    stalled_at_ns = None
    last_progress = (budget.completed, t_ns)
    while not sim.stopped and t_ns < horizon_ns:
        t_ns += step_ns
        sim.run_until(t_ns)
        if progress is not None:
            progress(budget.completed, options.ops)
        if budget.remaining <= 0 and all(c.op is None for c in clients):
            break
        if budget.completed != last_progress[0]:
            last_progress = (budget.completed, t_ns)
        elif t_ns - last_progress[1] > STALL_MS * MS:
            stalled_at_ns = last_progress[1]  # no client op completed for STALL_MS
            break

    # phase 3: heal everything, then a quiet period
    heal_ns = sim.now_ns
    final_read: dict = {"performed": False}
    nemesis.enabled = False  # steps left in the schedule are not applied
    if not sim.stopped:
        nemesis.heal_all()
        sim.run_until(sim.now_ns + options.quiet_ms * MS)
        if groups:
            # every member polls once more: its final assignment reaches the history
            for c in clients:
                if isinstance(c, GroupMemberClient):
                    sim.call_at(sim.now_ns, lambda c=c: _kick(sim, c))
            sim.run_until(sim.now_ns + 2_000 * MS)
    liveness: dict | None = None
    if not sim.stopped and options.liveness_ms is not None:
        liveness = _liveness_phase(sim, options.liveness_ms)
    # phase 4: the final read
    if not sim.stopped:
        start_ms = sim.now_ns // MS
        reader_process = options.clients * 1000
        reader_holder: list[FinalReader] = []

        def make_reader(inc, disk):
            if eos:
                r = FinalReader(READER_ID, reader_process, keys + outputs, broker_ids,
                                replace(consumer_config, group_id=GROUP),
                                start_ms + options.staleness_bound_ms, committed_keys=keys)
            else:
                r = FinalReader(READER_ID, reader_process, keys, broker_ids, consumer_config,
                                start_ms + options.staleness_bound_ms)
            reader_holder.append(r)
            return r

        sim.add_process(READER_ID, make_reader)
        sim.start(READER_ID)
        reader = reader_holder[0]
        sim.run_until(sim.now_ns + (options.staleness_bound_ms + 1_000) * MS,
                      stop=lambda: reader.done)
        final_read = {
            "performed": True,
            "start_ns": start_ms * MS,
            "heal_ns": heal_ns,
            "reached_end": reader.reached,
            "took_ms": (reader.finished_ms or sim.now_ns // MS) - start_ms,
            "staleness_bound_ms": options.staleness_bound_ms,
            "end_offsets": {tp.key: o for tp, o in sorted(reader.consumer.end_offsets.items())},
        }
        sim.check_all_acked()

    violations = [{"time": at, **v.to_dict()} for at, v in sim.violations]
    run_meta = {
        "format": 1,
        "run_id": run_id_for(options),
        "seed": options.seed,
        "target": "sim",
        "workload": options.workload,
        "started_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "config": {
            "acks": options.acks,
            "idempotence": idempotent,
            "isolation_level": "read_committed" if txn else "read_uncommitted",
            "txn": txn,
            "transaction_version": options.transaction_version if txn else None,
            "eos": {"input": options.topic, "output": output_topic, "group": GROUP,
                    "source_shift": SOURCE_SHIFT} if eos else None,
            "sub_via": ["subscribe"] if groups else ["assign"],
            "groups": {"group": MEMBERS_GROUP, "assignor": options.assignor,
                       "static": options.static_members, "keys": [tp.key for tp in keys],
                       "final_polls": groups} if groups else None,
            "replication_factor": options.replication_factor,
            "min_insync_replicas": options.min_insync_replicas,
            "partitions": options.partitions,
            "brokers": options.brokers,
            "compacted": compacted,
            "topic_configs": dict(topic_configs),
            "bugs": list(options.bugs),
            "ops": options.ops,
            "clients": options.clients,
            "flush_messages": options.flush_messages,
            "flush_ms": options.flush_ms,
            "unclean_leader_election_enable": options.unclean_leader_election,
            "timings_ms": t,
            "final_read": final_read,
            # read by the checker: no client op completed for idle_ms after at_ns
            "stalled": None if stalled_at_ns is None else {
                "at_ns": stalled_at_ns, "idle_ms": STALL_MS,
                "ops_completed": budget.completed},
        },
        "faults": list(options.faults) if options.schedule is None else ["scripted"],
        "versions": {"kafkacheck": kafkacheck.__version__, "broker": f"reference {kafkacheck.__version__}"},
    }
    if liveness is not None:
        run_meta["config"]["liveness"] = liveness
    if options.swarm is not None:
        run_meta["config"]["swarm"] = options.swarm
    stats = {
        "marks": marks.counts(),
        "virtual_seconds": sim.now_ns / 1e9,
        "steps": sim.steps,
        "messages_sent": sim.network.sent,
        "messages_delivered": sim.delivered,
        "messages_dropped": sim.network.dropped,
        "ops_completed": budget.completed,
        "faults_applied": len([s for s in schedule if s["at_ms"] * MS <= sim.now_ns]),
    }
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "run.json").write_text(json.dumps(run_meta, indent=2, sort_keys=True) + "\n")
        write_jsonl(out_dir / "history.jsonl", recorder.ops)
        write_jsonl(out_dir / "events.jsonl", recorder.events)
        (out_dir / "schedule.json").write_text(json.dumps(schedule, indent=1) + "\n")
    return RunOutcome(out_dir, run_meta, violations, final_read, stats, recorder.ops, recorder.events)
