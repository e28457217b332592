"""Fault schedules (nemeses): random ones from a fault list, and scripted ones from JSON.

A schedule is a list of steps ``{"at_ms": T, "f": F, "value": {...}}`` in time order. A
random schedule is drawn up front from the run's RNG: one fault at a time, each healed
after a while, with stable periods in between, so at most one node is down at once (the
failure model under which Kafka with RF 3 and min.insync.replicas 2 promises durability).
A scripted schedule is the same JSON, written by hand or taken from a run's
``schedule.json``, so a failure can be replayed with other seeds or options.

Every applied step is recorded as a nemesis invoke/info pair in the history.

Fault names (``--faults``, :data:`fault_injection.vocabulary.SIMULATED`): ``partition``
(isolate a node, halves, one-way, ring), ``kill`` (crash losing unflushed writes, then
restart), ``pause`` (then resume), ``disk`` (torn write or corruption at a crash, disk full,
slow flush), ``clock-skew``, ``loss``, ``duplicate``, ``reorder``, ``delay``, ``straggle``.

A random schedule given ``links`` (the swarm draws them) aims each network fault at one kind
of link (:mod:`fault_injection.network`): ``client`` (a broker cut off from the clients, a
client from the brokers, one way or both; loss, delay... on the clients' links only),
``replication`` (between brokers only), ``controller`` (between the brokers and the
controller only), or ``all`` (as without ``links``). A confined link fault's step says so
(``"links": ["replication"]``); a confined partition's kind is named ``client:...``,
``replication:...`` or ``controller:...``.

A ``hold-back`` step (``{"requests": [request type names], "ms": M}``) delays the next request
of one of those kinds by M ms beyond the network's own delay (a request stuck in a broker's
queue, processed after the client gave up on it and went on): the aimed nemeses use it.
Optional: ``"src"`` (only requests from that node), ``"dst"`` (only messages to that node: a
kind may name an answer, e.g. ``ConsumerGroupHeartbeatResponse``), ``"having"`` (field names
that must be set, e.g. a heartbeat's ``owned``: an acknowledgement), ``"epochs"`` (the member
epochs a heartbeat must carry: ``[-1, -2]``, a leave), ``"count"`` (the next N such) and
``"lost": true`` (each such message is lost and its connection reset instead: both ends hear
of it as of any reset; ``ms`` is then 0).

A ``slow-callback`` step (``{"node": client node, "ms": M}``) makes the next revocation of
that consumer-group member (KIP-848) take M ms, as an application's onPartitionsRevoked that
flushes its state: meanwhile it heartbeats without acknowledging. Its outcome says whether
the node runs such a member (``"applied"``).

``offline-partition`` takes every replica of one partition of the workload's topics down while
the rest of the cluster lives on: the runner places those topics with one replica a partition
(``placement``: ``{"topic:p": [node]}``, drawn from the run's RNG), and the step pauses the
partition's node(s) past the broker session, so that the controller fences them and the
partition has no leader (``{"partition": "t0:1", "nodes": [2], "how": "pause"}``), for long
enough that transactions that wrote there end while it has none (:func:`offline_ms`); it ends
with ``resume`` of the same nodes. It cannot go with ``kill`` or ``disk``
(:func:`offline_conflict`): the power loss of a partition's only replica loses acknowledged
writes, which Kafka permits.

Scripted schedules may also hold ``elect`` steps (``{"topic": T, "partition": P, "leader":
N}``): an administrative leader election at the controller, as Kafka's ElectLeaders does for
a preferred-replica election; the old leader stays in the ISR. The model-check replays use it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from functools import partial
from typing import Any

from fault_injection.cluster import CONTROLLER_ID
from fault_injection.simulation import Simulation
from fault_injection.vocabulary import REAL, SIMULATED, unknown
from reference.messages import TopicPartition

FAULTS = SIMULATED  # the simulator's fault names (fault_injection/vocabulary.py)


class ScheduleError(ValueError):
    """A scripted schedule that cannot be used (one line for the user)."""


def parse_faults(text: str) -> list[str]:
    names = [f.strip() for f in text.split(",") if f.strip()]
    for n in names:
        if n not in FAULTS and n != "none":
            raise ValueError(unknown(n, real=False) + ("" if n in REAL else ", or none"))
    return [n for n in names if n != "none"]


def _partition_grudge(rng: random.Random, nodes: list[int]) -> tuple[str, dict[int, list[int]]]:
    kind = rng.choice(["isolate", "halves", "one-way", "ring"])
    if kind == "isolate":
        n = rng.choice(nodes)
        others = [m for m in nodes if m != n]
        grudge = {n: others, **{m: [n] for m in others}}
    elif kind == "halves":
        shuffled = nodes[:]
        rng.shuffle(shuffled)
        cut = len(shuffled) // 2
        a, b = shuffled[:cut], shuffled[cut:]
        grudge = {**{m: b for m in a}, **{m: a for m in b}}
    elif kind == "one-way":
        dst, src = rng.sample(nodes, 2)
        grudge = {dst: [src]}
    else:  # a ring: each node hears only its two neighbours, no majority agrees
        shuffled = nodes[:]
        rng.shuffle(shuffled)
        k = len(shuffled)
        grudge = {}
        for i, m in enumerate(shuffled):
            near = {shuffled[(i - 1) % k], shuffled[(i + 1) % k], m}
            grudge[m] = [x for x in shuffled if x not in near]
    return kind, {k: sorted(v) for k, v in sorted(grudge.items()) if v}


def _scoped_grudge(rng: random.Random, links: str, controller: int, brokers: list[int],
                   clients: list[int]) -> tuple[str, dict[int, list[int]]]:
    """A partition of one kind of link only (``client``, ``replication`` or ``controller``):
    the other links of the nodes it cuts stay up (a broker its clients cannot reach that
    still replicates; a broker cut off from the controller that still serves its clients)."""
    if links == "client":
        kind = rng.choice(["broker-from-clients", "client-from-brokers", "clients-one-way"])
        if kind == "broker-from-clients":
            b = rng.choice(brokers)
            grudge = {b: clients, **{c: [b] for c in clients}}
        elif kind == "client-from-brokers":
            c = rng.choice(clients)
            grudge = {c: brokers, **{b: [c] for b in brokers}}
        else:  # one broker deaf to the clients, or the clients deaf to it
            b = rng.choice(brokers)
            grudge = {b: clients} if rng.random() < 0.5 else {c: [b] for c in clients}
    elif links == "replication":
        kind = rng.choice(["broker-from-brokers", "brokers-one-way"])
        b = rng.choice(brokers)
        others = [m for m in brokers if m != b]
        if kind == "broker-from-brokers":
            grudge = {b: others, **{m: [b] for m in others}}
        else:
            grudge = {b: [rng.choice(others)]} if others else {}
    else:
        kind = rng.choice(["controller-from-brokers", "broker-from-controller", "controller-one-way"])
        if kind == "controller-from-brokers":
            grudge = {controller: brokers, **{b: [controller] for b in brokers}}
        elif kind == "broker-from-controller":
            b = rng.choice(brokers)
            grudge = {b: [controller], controller: [b]}
        else:  # a broker's heartbeats lost, or the controller's answers to it
            b = rng.choice(brokers)
            grudge = {controller: [b]} if rng.random() < 0.5 else {b: [controller]}
    return f"{links}:{kind}", {k: sorted(v) for k, v in sorted(grudge.items()) if v}


NETWORK_FAULTS = frozenset({"partition", "loss", "duplicate", "reorder", "delay", "straggle"})
OFFLINE = "offline-partition"
POWER_LOSS = ("kill", "disk")  # the faults offline-partition cannot go with


def offline_conflict(faults: list[str]) -> str | None:
    """The one-line refusal of ``offline-partition`` with a power loss, or None."""
    lost = [f for f in POWER_LOSS if f in faults]
    if OFFLINE not in faults or not lost:
        return None
    return (f"--faults offline-partition cannot go with {' or '.join(lost)}: the power loss of a partition's only "
            "replica loses acknowledged writes, which Kafka permits")


def offline_ms(timings: dict[str, int], liveness_check_ms: int = 500) -> tuple[int, int]:
    """How long an offline partition stays down: the controller fences its broker after the
    session (checked every ``liveness_check_ms``); a producer whose sends to it wait gives up
    after its delivery (or request) timeout and aborts, and the coordinator looks for the
    partition's leader for that abort's marker; a transaction the producer leaves open is
    aborted by the coordinator after the transaction timeout: up to that much longer."""
    least = (timings["session_timeout_ms"] + liveness_check_ms
             + max(timings["delivery_timeout_ms"], timings["request_timeout_ms"]) + 1_000)
    return least, least + timings["transaction_timeout_ms"]


def offline_steps(rng: random.Random, placement: dict[str, list[int]],
                  lasting_ms: tuple[int, int]) -> tuple[dict, dict, int]:
    """One drawn partition of ``placement`` offline: its begin and end steps, and how long."""
    if not placement:
        raise ValueError("offline-partition needs the workload's topics placed (placement)")
    key = rng.choice(sorted(placement))
    nodes = list(placement[key])
    return ({"f": OFFLINE, "value": {"partition": key, "nodes": nodes, "how": "pause"}},
            {"f": "resume", "value": {"nodes": nodes}}, rng.randint(*lasting_ms))


def random_schedule(rng: random.Random, faults: list[str], nodes: list[int], start_ms: int,
                    end_ms: int, stable_ms: tuple[int, int] = (1_000, 4_000),
                    fault_ms: tuple[int, int] = (1_000, 6_000), links: list[str] | None = None,
                    clients: list[int] | None = None, placement: dict[str, list[int]] | None = None,
                    offline_lasting_ms: tuple[int, int] = (0, 0)) -> list[dict]:
    """Faults one at a time between start and end; each fault is followed by its healing.

    ``links`` (None: the schedule of old, every network fault on every link, partitions
    between the controller and brokers ``nodes``, the first of them the controller): the link
    kinds a network fault is drawn to hit, ``all`` or one of
    :data:`fault_injection.network.LINK_KINDS` (``client`` needs ``clients``). ``placement``
    and ``offline_lasting_ms``: the partitions ``offline-partition`` may take down, and for how
    long (:func:`offline_ms`)."""
    steps: list[dict] = []
    t = start_ms + rng.randint(*stable_ms)
    while faults and t < end_ms:
        f = rng.choice(faults)
        d = rng.randint(*fault_ms)
        n = rng.choice(nodes)
        scope = rng.choice(links) if links and f in NETWORK_FAULTS else "all"
        begin: dict[str, Any]
        heal: dict[str, Any]
        if scope != "all" and f == "partition":
            kind, grudge = _scoped_grudge(rng, scope, nodes[0], nodes[1:], clients or [])
            begin, heal = ({"f": "partition", "value": {"kind": kind, "grudge": {
                str(k): v for k, v in grudge.items()}}}, {"f": "heal", "value": None})
        elif f == OFFLINE:
            begin, heal, d = offline_steps(rng, placement or {}, offline_lasting_ms)
        else:
            begin, heal = _fault_steps(rng, f, n, nodes)
            if scope != "all":
                begin["value"] = {**begin["value"], "links": [scope]}
        steps.append({"at_ms": t, **begin})
        steps.append({"at_ms": t + d, **heal})
        t += d + rng.randint(*stable_ms)
    return steps


def _fault_steps(rng: random.Random, f: str, n: int, nodes: list[int]) -> tuple[dict, dict]:
    if f == "partition":
        kind, grudge = _partition_grudge(rng, nodes)
        return ({"f": "partition", "value": {"kind": kind, "grudge": {str(k): v for k, v in grudge.items()}}},
                {"f": "heal", "value": None})
    if f == "kill":
        return {"f": "kill", "value": {"nodes": [n]}}, {"f": "restart", "value": {"nodes": [n]}}
    if f == "pause":
        return {"f": "pause", "value": {"nodes": [n]}}, {"f": "resume", "value": {"nodes": [n]}}
    if f == "disk":
        kind = rng.choice(["torn-write", "corrupt", "full", "slow-flush"])
        if kind in ("torn-write", "corrupt"):
            return ({"f": "disk-fault", "value": {"node": n, "kind": kind}},
                    {"f": "restart", "value": {"nodes": [n]}})
        return ({"f": "disk-fault", "value": {"node": n, "kind": kind}},
                {"f": "disk-heal", "value": {"node": n}})
    if f == "clock-skew":
        skew = rng.choice([-1, 1]) * rng.randint(100, 5_000)
        return ({"f": "clock-skew", "value": {"node": n, "skew_ms": skew}},
                {"f": "clock-skew", "value": {"node": n, "skew_ms": 0}})
    if f in ("loss", "duplicate"):
        return {"f": f, "value": {"p": round(rng.uniform(0.05, 0.3), 3)}}, {"f": "heal", "value": None}
    if f == "reorder":
        return {"f": "reorder", "value": {}}, {"f": "heal", "value": None}
    if f == "straggle":
        return ({"f": "straggle", "value": {"p": round(rng.uniform(0.02, 0.1), 3),
                                            "ms": rng.randint(3_000, 8_000)}},
                {"f": "heal", "value": None})
    if f == "delay":
        return ({"f": "delay", "value": {"ms": rng.randint(5, 200)}}, {"f": "heal", "value": None})
    raise ValueError(f"unknown fault {f!r}")


STEP_FS = {"partition", "heal", "kill", "restart", "pause", "resume", "disk-fault",
           "disk-heal", "clock-skew", "loss", "duplicate", "reorder", "delay", "straggle", "elect",
           "hold-back", "slow-callback", OFFLINE}


def load_schedule(path: str) -> list[dict]:
    """Read a scripted schedule (a JSON list of steps) and check its shape."""
    try:
        with open(path, encoding="utf-8") as fh:
            steps = json.load(fh)
    except FileNotFoundError:
        raise ScheduleError(f"{path}: no such schedule file") from None
    except (OSError, ValueError) as e:
        raise ScheduleError(f"{path}: not a JSON schedule ({e})") from None
    if not isinstance(steps, list):
        raise ScheduleError(f"{path}: a schedule is a JSON list of steps")
    for i, s in enumerate(steps):
        if not isinstance(s, dict) or not isinstance(s.get("at_ms"), int) or s.get("f") not in STEP_FS:
            raise ScheduleError(
                f"{path}: step {i} must be {{\"at_ms\": int, \"f\": one of {sorted(STEP_FS)}, "
                f"\"value\": ...}}")
        if s["f"] == OFFLINE and not _offline_value_ok(s.get("value")):
            raise ScheduleError(f"{path}: step {i}: an offline-partition step's value is {{\"partition\": "
                                "\"topic:p\", \"nodes\": [broker ids], \"how\": \"pause\"}} (the simulator "
                                "pauses; a kill would be a power loss)")
    kinds = {"disk" if s["f"] == "disk-fault" else s["f"] for s in steps}
    if OFFLINE in kinds and (why := offline_conflict(sorted(kinds))) is not None:
        raise ScheduleError(f"{path}: {why.removeprefix('--faults ')}")
    return sorted(steps, key=lambda s: s["at_ms"])


def _offline_value_ok(v: Any) -> bool:
    return (isinstance(v, dict) and isinstance(v.get("partition"), str) and v.get("how") == "pause"
            and isinstance(v.get("nodes"), list) and bool(v["nodes"])
            and all(isinstance(n, int) for n in v["nodes"]))


class Nemesis:
    """Applies schedule steps to a simulation and records them as nemesis ops."""

    def __init__(self, sim: Simulation, nodes: list[int],
                 processes_of: Callable[[int], list[Any]] | None = None) -> None:
        self.sim = sim
        self.nodes = nodes
        self.enabled = True
        # the history processes a client node runs (group members): a pause or resume of
        # such a node names them, so that the checker knows whose session it stopped
        self.processes_of = processes_of
        self.offline: set[int] = set()  # the nodes an offline-partition fault holds down

    def schedule(self, steps: list[dict]) -> None:
        for step in steps:
            self.sim.call_at(step["at_ms"] * 1_000_000, partial(self._scheduled, step))

    def _scheduled(self, step: dict) -> None:
        if self.enabled:
            self.apply(step)

    def apply(self, step: dict) -> None:
        sim = self.sim
        f = step["f"]
        value: Any = step.get("value")  # the step's JSON, of f's shape (None for some)
        if f in ("pause", "resume") and self.processes_of is not None:
            processes = [p for n in value["nodes"] for p in self.processes_of(n)]
            if processes:
                value = {**value, "processes": processes}
        sim.recorder.op(sim.now_ns, "nemesis", "invoke", f, value)
        result: Any = self._do(f, value)
        sim.recorder.op(sim.now_ns, "nemesis", "info", f, value if result is None else result)

    def _do(self, f: str, v: Any) -> Any:
        sim = self.sim
        if f == "partition":
            sim.network.partition({int(k): list(x) for k, x in v["grudge"].items()})
        elif f == "heal":
            sim.network.heal()
        elif f == "kill":
            return {"nodes": v["nodes"], "crash": {str(n): sim.kill(n) for n in v["nodes"]}}
        elif f == "restart":
            for n in v["nodes"]:
                sim.start(n)
        elif f in ("pause", OFFLINE):  # (offline-partition: its nodes paused past their session)
            for n in v["nodes"]:
                sim.pause(n)
            if f == OFFLINE:
                self.offline.update(v["nodes"])
        elif f == "resume":
            for n in v["nodes"]:
                sim.resume(n)
            self.offline.difference_update(v["nodes"])
        elif f == "disk-fault":
            return self._disk_fault(v)
        elif f == "disk-heal":
            disk = sim.processes[v["node"]].disk
            disk.full = False
            disk.slow_flush = False
            disk.complete_slow_flushes()
        elif f == "clock-skew":
            sim.processes[v["node"]].skew_ms = v["skew_ms"]
        elif f in ("loss", "duplicate", "reorder", "straggle", "delay"):
            faults = sim.network.faults
            if f == "loss":
                faults.loss = v["p"]
            elif f == "duplicate":
                faults.duplicate = v["p"]
            elif f == "reorder":
                faults.reorder = True
            elif f == "straggle":
                faults.straggle = v["p"]
                faults.straggle_ms = v["ms"]
            else:
                faults.extra_delay_us = v["ms"] * 1000
            if v.get("links"):  # confined to these kinds of link (fault_injection.network)
                faults.links = frozenset(v["links"])
        elif f == "elect":
            return self._elect(v)
        elif f == "slow-callback":
            applied: list[bool] = []

            def slow(node: Any, _now: int) -> None:  # (a group member's client, of kafkacheck.workloads)
                applied.append(node.slow_callback(v["ms"]))

            sim.act(v["node"], slow)
            return {**v, "applied": bool(applied and applied[0])}
        elif f == "hold-back":
            kinds, src, dst, having = (frozenset(v["requests"]), v.get("src"), v.get("dst"),
                                       tuple(v.get("having", ())))
            epochs = frozenset(v["epochs"]) if "epochs" in v else None
            for _ in range(v.get("count", 1)):
                sim.hold_back(lambda s, d, m: type(m).__name__ in kinds and (src is None or s == src)
                              and (dst is None or d == dst)
                              and (epochs is None or getattr(m, "member_epoch", None) in epochs)
                              and all(getattr(m, a, None) is not None for a in having),
                              -1 if v.get("lost") else v["ms"])
        return None

    def _elect(self, v: dict) -> Any:
        outcome: dict = {**v}
        tp = TopicPartition(v["topic"], v["partition"])

        def elect(node: Any, now_ms: int) -> None:  # (the controller: act hands it as a Node)
            outcome.update(error=node.elect_leader(now_ms, tp, v["leader"]).name)

        if not self.sim.act(CONTROLLER_ID, elect):
            outcome["error"] = "controller down"
        return outcome

    def _disk_fault(self, v: dict) -> Any:
        sim = self.sim
        n, kind = v["node"], v["kind"]
        if kind in ("torn-write", "corrupt"):
            return {**v, "crash": sim.kill(n, torn=kind == "torn-write", corrupt=kind == "corrupt")}
        disk = sim.processes[n].disk
        if kind == "full":
            disk.full = True
        elif kind == "slow-flush":
            disk.slow_flush = True
        return None

    def heal_all(self) -> None:
        """End every fault: heal the network, fix disks and clocks, resume and restart nodes."""
        sim = self.sim
        self.apply({"f": "heal", "value": None})
        sim.holds.clear()  # requests still to be held back go on time
        for n in self.nodes:
            p = sim.processes[n]
            if p.disk.full or p.disk.slow_flush:
                self.apply({"f": "disk-heal", "value": {"node": n}})
            if p.skew_ms:
                self.apply({"f": "clock-skew", "value": {"node": n, "skew_ms": 0}})
            if p.alive and p.paused:
                self.apply({"f": "resume", "value": {"nodes": [n]}})
            if not p.alive:
                self.apply({"f": "restart", "value": {"nodes": [n]}})
