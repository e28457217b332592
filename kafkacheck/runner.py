"""Runs a workload (:mod:`kafkacheck.workloads`) on a simulated reference cluster and writes
the run directory.

Phases, in virtual time (:class:`_Run` has a method for each):

1. start the controller (node 0) and brokers (1..N); create the topics; start the clients;
2. the workload runs its ``ops`` while the nemesis applies its schedule;
3. every fault is healed, then the cluster gets ``quiet_ms`` with no faults;
4. with ``liveness_ms`` (the swarm), the healed cluster must converge within it; then the
   workload does what it does after healing (group members poll once more);
5. a final reader reads every partition to its end within ``staleness_bound_ms``.

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
from fault_injection.nemesis import OFFLINE, Nemesis, offline_ms, random_schedule
from fault_injection.simulation import Simulation, young_collections_only
from kafkacheck.workloads import WORKLOADS, Setup
from kafkacheck.workloads.client import Budget, FinalReader, consumer_config, producer_config
from reference import marks
from reference.compiled import engine
from reference.consumer import ConsumerConfig
from reference.messages import CreateTopicsRequest, TopicPartition
from reference.node import Node
from reference.producer import ProducerConfig
from reference.topics import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TXN_TOPIC
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
    # the epoch new transactional producer ids start at (0, as Kafka's): near 32766 a run
    # reaches the end of a producer's epochs in a few transactions
    producer_epoch_start: int = 0
    assignor: str = "range"  # groups workload
    static_members: bool = False  # groups workload: group.instance.id per member
    group_protocol: str = "classic"  # groups workloads: "consumer" is KIP-848's
    # eos: its processors subscribe as members of one consumer group of group_protocol (with
    # --assignor) instead of assigning themselves partitions (run: --group-protocol given)
    eos_subscribe: bool = False
    # what a swarm seed varies besides the above (the defaults change nothing)
    timings: dict[str, int] | None = None  # overrides of CLUSTER_TIMINGS
    fault_stable_ms: tuple[int, int] = (1_000, 4_000)  # random schedule: calm between faults
    fault_ms: tuple[int, int] = (1_000, 6_000)  # random schedule: how long a fault lasts
    topic_configs: tuple[tuple[str, str], ...] | None = None  # replaces the compacted topic's
    aimed: list[str] = field(default_factory=list)  # aimed nemesis strategies (fault_injection.aimed)
    liveness_ms: int | None = None  # after healing, demand convergence within this time
    swarm: dict | None = None  # the swarm draw this run came from (recorded in run.json)
    # settings of the clients and brokers besides timings: fields of ProducerConfig
    # (max_in_flight, batch_size, linger_ms; more than one batch in flight without idempotence
    # may reorder a partition's records on a retry, which Kafka permits), ConsumerConfig
    # (max_partition_fetch_bytes, fetch_max_bytes, max_poll_records) and BrokerConfig
    # (replica_fetch_max_bytes, replica_fetch_response_max_bytes) over the harness's
    producer_settings: dict[str, int] | None = None
    consumer_settings: dict[str, int] | None = None
    broker_settings: dict[str, int] | None = None
    # the kinds of link (fault_injection.network) the random schedule's network faults hit,
    # one drawn for each fault: "all", "client", "replication", "controller" (None: all)
    fault_links: list[str] | None = None





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
    run = _Run(options)
    run.start_cluster()
    run.create_topics()
    run.start_clients()
    schedule = run.schedule_faults()
    stalled_at_ns = run.run_ops(progress)
    heal_ns = run.heal()
    liveness = _liveness_phase(run.sim, options.liveness_ms) if (
        not run.sim.stopped and options.liveness_ms is not None) else None
    run.after_heal()
    final_read = run.final_read(heal_ns)
    sim = run.sim
    violations = [{"time": at, **v.to_dict()} for at, v in sim.violations]
    run_meta = run.meta(final_read, stalled_at_ns, liveness)
    stats = {
        "marks": marks.counts(),
        "virtual_seconds": sim.now_ns / 1e9,
        "steps": sim.steps,
        "messages_sent": sim.network.sent,
        "messages_delivered": sim.delivered,
        "messages_dropped": sim.network.dropped,
        "ops_completed": run.budget.completed,
        "faults_applied": len([s for s in schedule if s["at_ms"] * MS <= sim.now_ns]),
        "engine": "{} ({})".format(*engine()),  # compiled or python, and why (reference.compiled)
    }
    # the run is over: break the cycles (the harness's callbacks, the nemesis's own) that would
    # keep the cluster and the history alive until a full collection walked them
    sim.release()
    run.nemesis = None
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "run.json").write_text(json.dumps(run_meta, indent=2, sort_keys=True) + "\n")
        write_jsonl(out_dir / "history.jsonl", sim.recorder.ops)
        write_jsonl(out_dir / "events.jsonl", sim.recorder.events)
        (out_dir / "schedule.json").write_text(json.dumps(schedule, indent=1) + "\n")
    return RunOutcome(out_dir, run_meta, violations, final_read, stats, sim.recorder.ops, sim.recorder.events)


class _Run:
    """One simulated run, phase by phase (the module's docstring)."""

    def __init__(self, options: RunOptions) -> None:
        self.options = options
        self.sim = Simulation(options.seed, invariants=options.invariants, keep_going=options.keep_going)
        self.timings = t = {**CLUSTER_TIMINGS, **(options.timings or {})}
        marks.reset()
        self.broker_config = make_broker_config(options.min_insync_replicas, options.flush_messages,
                                                options.flush_ms, options.transaction_version, t)
        self.kind = WORKLOADS[options.workload]
        if options.producer_epoch_start:
            self.broker_config = replace(self.broker_config, producer_epoch_start=options.producer_epoch_start)
        if self.kind.broker_settings or options.broker_settings:
            self.broker_config = replace(self.broker_config,
                                         **{**self.kind.broker_settings, **(options.broker_settings or {})})
        self.budget = Budget(options.ops)
        self.keys = [TopicPartition(options.topic, i) for i in range(options.partitions)]
        self.topic_configs = ((options.topic_configs if options.topic_configs is not None
                               else COMPACTED_TOPIC_CONFIGS) if self.kind.compacted else ())
        self.clients: list[Node] = []
        self.nemesis: Nemesis | None = None
        # offline-partition: the workload's topics get one replica a partition, placed by a draw
        self.offline = (OFFLINE in options.faults if options.schedule is None
                        else any(step["f"] == OFFLINE for step in options.schedule))
        self.placement: dict[str, list[int]] = {}
        self.expected_ms = 2_000 + options.ops * 70 // max(options.clients, 1)

    def start_cluster(self) -> None:
        o, sim = self.options, self.sim
        self.broker_ids = add_cluster(sim, o.brokers, self.broker_config,
                                      controller_config(o.min_insync_replicas, o.unclean_leader_election,
                                                        self.timings), frozenset(o.bugs))
        sim.start(CONTROLLER_ID)
        for b in self.broker_ids:
            sim.start(b)
        sim.run_until(1_000 * MS)

    def create_topics(self) -> None:
        """The workload topic, the internal topics the workload needs (Kafka creates them on
        first use; the harness creates them up front), and the workload's own."""
        o, sim, kind = self.options, self.sim, self.kind
        internal = min(3, o.brokers)
        place = self._placer()
        sim.inject(ADMIN_ID, CONTROLLER_ID, place(1, o.topic, o.partitions, self.topic_configs))
        if kind.transactional:
            sim.inject(ADMIN_ID, CONTROLLER_ID, CreateTopicsRequest(
                2, TXN_TOPIC, self.broker_config.transaction_state_partitions, internal))
        if kind.group_coordinator:
            sim.inject(ADMIN_ID, CONTROLLER_ID, CreateTopicsRequest(
                3, OFFSETS_TOPIC, self.broker_config.offsets_partitions, internal))
        if kind.share_coordinator:
            sim.inject(ADMIN_ID, CONTROLLER_ID, CreateTopicsRequest(
                99, SHARE_STATE_TOPIC, self.broker_config.share_state_partitions, internal))
        self.workload = kind(Setup(o, self.timings, self.keys, self.broker_ids, self.budget,
                                   self._producer_config(), self._consumer_config()))
        for i, (topic, partitions) in enumerate(self.workload.topics()):
            sim.inject(ADMIN_ID, CONTROLLER_ID, place(4 + i, topic, partitions, ()))
        sim.run_until(2_000 * MS)

    def _placer(self) -> Callable[[int, str, int, tuple], CreateTopicsRequest]:
        """How a workload topic is created: with the run's replication factor, or, for
        offline-partition, with one replica a partition placed by a draw of the run's RNG
        (the brokers in a drawn order, in turn), recorded in ``self.placement``."""
        o = self.options
        if not self.offline:
            return lambda corr, topic, partitions, configs: CreateTopicsRequest(
                corr, topic, partitions, o.replication_factor, configs)
        rng = self.sim.child_rng()

        def place(corr: int, topic: str, partitions: int, configs: tuple) -> CreateTopicsRequest:
            order = rng.sample(self.broker_ids, len(self.broker_ids))
            assignments = tuple((i, (order[i % len(order)],)) for i in range(partitions))
            self.placement.update({f"{topic}:{i}": list(replicas) for i, replicas in assignments})
            return CreateTopicsRequest(corr, topic, -1, -1, configs, assignments=assignments)

        return place

    def _producer_config(self) -> ProducerConfig:
        config = producer_config(self.timings, acks_value(self.options.acks), self.kind.idempotent)
        if self.options.producer_settings:
            config = replace(config, **self.options.producer_settings)
        return config

    def _consumer_config(self) -> ConsumerConfig:
        config = consumer_config(self.timings, self.kind.transactional)
        if self.options.consumer_settings:
            config = replace(config, **self.options.consumer_settings)
        return config

    def start_clients(self) -> None:
        sim = self.sim
        for i in range(self.options.clients):
            node_id = CLIENT_BASE + i
            client_rng = sim.child_rng()

            def make(inc, disk, i=i, node_id=node_id, client_rng=client_rng) -> Node:
                c = self.workload.client(i, node_id, client_rng)
                self.clients.append(c)
                return c

            sim.add_process(node_id, make)
            sim.start(node_id)

    def _processes_of(self, node_id: int) -> list:
        """The history process a client node runs now (none for a broker)."""
        return [c.process for c in self.clients if c.node_id == node_id and hasattr(c, "process")]

    def schedule_faults(self) -> list[dict]:
        """The nemesis and its schedule: scripted, or random over the time the workload is
        expected to need; group members may be paused too; aimed strategies watch the run."""
        o, sim, t = self.options, self.sim, self.timings
        nodes = [CONTROLLER_ID, *self.broker_ids]
        members = self.workload.members([CLIENT_BASE + i for i in range(o.clients)])
        self.nemesis = nemesis = Nemesis(sim, nodes + members, self._processes_of)
        schedule = o.schedule if o.schedule is not None else random_schedule(
            sim.child_rng(), o.faults, nodes, 2_000, self.expected_ms * 2,
            stable_ms=o.fault_stable_ms, fault_ms=o.fault_ms, links=o.fault_links,
            clients=[CLIENT_BASE + i for i in range(o.clients)], placement=self.placement,
            offline_lasting_ms=offline_ms(t))
        if o.schedule is None and members and "pause" in o.faults:
            # members paused past their session timeout miss rebalances and wake up stale
            schedule = sorted(schedule + random_schedule(
                sim.child_rng(), ["pause"], members, 3_000, self.expected_ms * 2,
                stable_ms=(2_000, 6_000), fault_ms=(1_000, 3 * t["member_session_timeout_ms"])),
                key=lambda step: step["at_ms"])
        nemesis.schedule(schedule)
        if o.aimed:
            from fault_injection.aimed import AimedNemesis

            AimedNemesis(sim, nemesis, o.aimed, sim.child_rng(), self.broker_ids, members, t,
                         schedule, self.expected_ms * 2, o.fault_ms, self.placement)
        self.schedule_end_ms = max((s["at_ms"] for s in schedule), default=0)
        return schedule

    def run_ops(self, progress: Callable[[int, int], None] | None) -> int | None:
        """Until every op completed (and the schedule has played out), or the run stopped;
        the time no op completed after for STALL_MS, if it stalled."""
        sim, budget, ops = self.sim, self.budget, self.options.ops
        horizon_ns = (self.expected_ms * 20 + self.schedule_end_ms + 60_000) * MS
        step_ns = 200 * MS
        t_ns = sim.now_ns
        last_progress = (budget.completed, t_ns)
        while not sim.stopped and t_ns < horizon_ns:
            t_ns += step_ns
            sim.run_until(t_ns)
            if progress is not None:
                progress(budget.completed, ops)
            if budget.remaining <= 0 and all(c.op is None for c in self.clients):
                break
            if budget.completed != last_progress[0] or self.nemesis.offline or self._only_paused_busy():
                # (a workload whose ops all touch an offline partition waits for it, and one whose
                # ops are all spent waits for the members the nemesis paused mid-op: no stall)
                last_progress = (budget.completed, t_ns)
            elif t_ns - last_progress[1] > STALL_MS * MS:
                return last_progress[1]  # no client op completed for STALL_MS
        return None

    def _only_paused_busy(self) -> bool:
        """Every op is spent and the clients still in one are paused by the nemesis (a member
        paused up to three session timeouts: longer than STALL_MS), which resumes them."""
        busy = [c for c in self.clients if c.op is not None]
        return (self.budget.remaining <= 0 and bool(busy)
                and all(self.sim.processes[c.node_id].paused for c in busy))

    def heal(self) -> int:
        """Every fault healed (steps left in the schedule are not applied), then a quiet
        period; the time healing began."""
        sim = self.sim
        heal_ns = sim.now_ns
        assert self.nemesis is not None
        self.nemesis.enabled = False
        if not sim.stopped:
            self.nemesis.heal_all()
            sim.run_until(sim.now_ns + self.options.quiet_ms * MS)
        return heal_ns

    def after_heal(self) -> None:
        """What the workload does after healing (group members poll once more): after the
        liveness phase, when there is one, so that it sees the cluster converged (a crashed
        member's session may outlast the quiet period: up to 30 s in a swarm run)."""
        if not self.sim.stopped:
            self.workload.after_heal(self.sim, self.clients)

    def final_read(self, heal_ns: int) -> dict:
        """A reader reads every partition from the beginning to its end, within the
        staleness bound; then every acknowledged write must still be on the ISR."""
        sim, o = self.sim, self.options
        if sim.stopped:
            return {"performed": False}
        start_ms = sim.now_ns // MS
        holder: list[FinalReader] = []

        def make_reader(inc, disk) -> FinalReader:
            holder.append(self.workload.final_reader(READER_ID, o.clients * 1000,
                                                     start_ms + o.staleness_bound_ms))
            return holder[0]

        ending = self._ending_transactions()
        sim.add_process(READER_ID, make_reader)
        sim.start(READER_ID)
        reader = holder[0]
        sim.run_until(sim.now_ns + (o.staleness_bound_ms + 1_000) * MS, stop=lambda: reader.done)
        finished_ms = reader.finished_ms
        if ending & self._ending_transactions():
            # the last stable offsets are taken once every transaction whose end was decided
            # before the final read began has its markers written (Kafka's coordinator answers
            # EndTxn before it writes them), as the final read of a real broker waits for them
            sim.run_until(sim.now_ns + o.staleness_bound_ms * MS,
                          stop=lambda: not ending & self._ending_transactions())
        sim.check_all_acked()
        return {
            "performed": True,
            "start_ns": start_ms * MS,
            "heal_ns": heal_ns,
            "reached_end": reader.reached,
            "took_ms": (finished_ms or sim.now_ns // MS) - start_ms,
            "staleness_bound_ms": o.staleness_bound_ms,
            "end_offsets": {tp.key: off for tp, off in sorted(reader.consumer.end_offsets.items())},
            "stable_offsets": self._stable_offsets(reader.keys),
        }

    def _ending_transactions(self) -> set:
        """The transactions whose coordinators are writing their markers (white box): each
        as its Prepare* metadata, equal wherever the coordinator of its id loads it."""
        return {m.meta for b in self.sim.brokers().values() for m in b.txn.markers.values()}

    def _stable_offsets(self, keys: list[TopicPartition]) -> dict[str, list[int]]:
        """``{"topic:p": [last stable offset, high watermark]}`` as each partition's leader
        holds them at the end of the final read (white box: no request is sent); a partition
        without a running leader is left out."""
        controller, brokers = self.sim.controller(), self.sim.brokers()
        out: dict[str, list[int]] = {}
        for tp in sorted(keys):
            state = controller.partitions.get(tp) if controller is not None else None
            broker = brokers.get(state.leader) if state is not None else None
            p = broker.partitions.get(tp) if broker is not None else None
            if p is not None and p.is_leader:
                out[tp.key] = [p.last_stable_offset(), p.log.high_watermark]
        return out

    def meta(self, final_read: dict, stalled_at_ns: int | None, liveness: dict | None) -> dict:
        """run.json: what the checker needs to decide what is allowed, and how the run was made."""
        o, kind = self.options, self.kind
        config = {
            "acks": o.acks,
            "idempotence": kind.idempotent,
            "isolation_level": "read_committed" if kind.transactional else "read_uncommitted",
            "txn": kind.transactional,
            "transaction_version": None,
            "eos": None,
            "sub_via": ["assign"],
            "groups": None,
            "replication_factor": 1 if self.placement else o.replication_factor,
            "min_insync_replicas": o.min_insync_replicas,
            "partitions": o.partitions,
            "brokers": o.brokers,
            "compacted": kind.compacted,
            "topic_configs": dict(self.topic_configs),
            "bugs": list(o.bugs),
            "ops": o.ops,
            "clients": o.clients,
            "flush_messages": o.flush_messages,
            "flush_ms": o.flush_ms,
            "unclean_leader_election_enable": o.unclean_leader_election,
            "timings_ms": self.timings,
            # the simulator's network keeps TCP's promise but for duplicate and reorder
            # (properties.config_checks.tcp_breaking)
            "network": "connections",
            "final_read": final_read,
            # read by the checker: no client op completed for idle_ms after at_ns
            "stalled": None if stalled_at_ns is None else {
                "at_ns": stalled_at_ns, "idle_ms": STALL_MS, "ops_completed": self.budget.completed},
            **self.workload.config(),
        }
        if liveness is not None:
            config["liveness"] = liveness
        if self.placement:
            config["placement"] = self.placement
        settings = {"producer": o.producer_settings, "consumer": o.consumer_settings,
                    "broker": o.broker_settings}
        if any(settings.values()):
            config["settings"] = {k: v for k, v in settings.items() if v}
        if o.fault_links is not None:
            config["fault_links"] = list(o.fault_links)
        if o.swarm is not None:
            config["swarm"] = o.swarm
        return {
            "format": 1,
            "run_id": run_id_for(o),
            "seed": o.seed,
            "target": "sim",
            "workload": o.workload,
            "started_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "config": config,
            "faults": list(o.faults) if o.schedule is None else ["scripted"],
            "versions": {"kafkacheck": kafkacheck.__version__, "broker": f"reference {kafkacheck.__version__}"},
        }
