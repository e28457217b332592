"""The shapes of the replication model's counterexamples, as fault schedules.

``kafkacheck model-check`` finds counterexamples of the z3 model of replication (stored in
``model_counterexamples.json`` beside this file, so that using them needs no solver). Here a
counterexample's steps become a scripted fault schedule (replica ``r`` is broker ``r + 1`` of
a cluster with as many brokers as the model has replicas, one partition, min.insync.replicas
1) over the queue workload, whose producers append and whose replicas fetch all the time:

* the data steps up to the last fetch before the first control step (``elect``, ``crash``,
  ``restart``, ``shrink``) are the cluster running normally; then the replicas are cut off
  from each other (not from the controller or the clients): in the model no fetch happens
  unless the trace says so, and in the engine none can;
* ``elect r`` of a live ISR member -> an administrative election at the controller (the
  ``elect`` step: Kafka's ElectLeaders; the old leader stays in the ISR); of a replica outside
  the ISR (the ``unclean`` variant) -> the old leader is cut off from everyone until the
  controller fences it and, with the bug switch, elects ``r`` by itself;
* ``crash r`` -> kill the broker; unless it comes back at once, wait until the controller
  has fenced it; ``restart r`` -> restart it;
* ``shrink r`` -> cut ``r`` off from the leader until the leader drops it from the ISR;
* ``fetch r`` after control steps -> open the replicas' links again for a while;
  ``truncate r`` -> the follower truncates as it learns the new epoch: by itself under
  truncate-to-high-watermark; otherwise the election before it slows every message down and
  lets exactly one of the follower's fetches reach the new leader, so that it gets the answer
  it truncates on and no records;
  ``stale-fetch r`` -> open only the link from ``r`` to the leader, so that the
  leader hears ``r``'s fetch (from the log ``r`` has not truncated) but ``r`` never hears the
  answer that would make it truncate;
* ``append r`` / ``advance-hw r`` -> time for the producers to reach the leader and for it to
  answer them.

Waits come from the simulated cluster's timings (``CLUSTER_TIMINGS``). As a template
(:func:`template_schedule`), the same shape gets random parameters: which brokers play the
model's replicas, when it starts, how far apart its steps are. The swarm, the hunt and the
Hypothesis machines play these shapes; ``kafkacheck model-check --replay`` replays one.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from fault_injection.cluster import CLUSTER_TIMINGS, CONTROLLER_ID

COUNTEREXAMPLES_FILE = Path(__file__).with_name("model_counterexamples.json")

TOPIC = "t0"
# the controller checks liveness every 500 ms: a broker silent for this long has been fenced
FENCE_WAIT_MS = CLUSTER_TIMINGS["session_timeout_ms"] + 1_500
SHRINK_WAIT_MS = CLUSTER_TIMINGS["replica_lag_time_max_ms"] + 1_500
ELECT_GAP_MS = 50        # between administrative elections: every broker has the new image
ASK_DELAY_MS = 20        # added to every message while a follower asks where to truncate
SETTLE_MS = 3_000        # normal running before the first control step
DATA_MS = 500            # producers find the leader and append; fetches land
CONTROL = ("crash", "restart", "elect", "shrink")


class _Schedule:
    """The steps written so far, and which replica links are cut."""

    def __init__(self, replicas: int) -> None:
        self.nodes = [r + 1 for r in range(replicas)]
        self.steps: list[dict] = []
        self.blocked: set[tuple[int, int]] = set()   # (from, to)
        self.t = SETTLE_MS
        self.delay_ms = 0

    def add(self, f: str, value) -> None:
        self.steps.append({"at_ms": self.t, "f": f, "value": value})
        if f == "delay":
            self.delay_ms = value["ms"]

    def links(self, blocked: set[tuple[int, int]]) -> None:
        """Make exactly these links cut (heal, then cut again)."""
        if blocked == self.blocked:
            return
        if self.blocked:
            self.add("heal", None)   # also ends a delay: set it again
            if self.delay_ms:
                self.add("delay", {"ms": self.delay_ms})
        grudge: dict[str, list[int]] = {}
        for src, dst in sorted(blocked):
            grudge.setdefault(str(dst), []).append(src)
        if grudge:
            self.add("partition", {"grudge": grudge})
        self.blocked = set(blocked)
        self.t += 1

    def isolated(self) -> set[tuple[int, int]]:
        return {(a, b) for a in self.nodes for b in self.nodes if a != b}

    def cut_off(self, node: int, from_: list[int]) -> set[tuple[int, int]]:
        return {(node, x) for x in from_} | {(x, node) for x in from_}

    def elect(self, r: int) -> None:
        self.add("elect", {"topic": TOPIC, "partition": 0, "leader": _node(r)})

    def election(self, r: int, leader: int, in_isr: bool, leader_alive: bool, seen: list[tuple[str, int]],
                 local_truncation: bool) -> None:
        """``elect r``, the old ``leader`` alive or not; ``seen``: the data steps this
        election's epoch sees (up to the next control step)."""
        if in_isr and leader_alive:
            for x in {x for b, x in seen if b == "stale-fetch"}:
                # a follower fetches the moment it learns the new epoch: the link it fetches
                # over must be open before the election, not after
                self.links(self.blocked - {(_node(x), _node(r))})
            asks = [x for b, x in seen if b == "truncate" and x != r]
            if asks and not local_truncation:
                # the follower must get the answer to exactly one fetch (it truncates on it)
                # and no records: slow every message down, open its links to the new leader,
                # and cut its way there once that first fetch has arrived
                x = _node(asks[0])
                self.links(self.blocked - {(x, _node(r)), (_node(r), x)})
                self.add("delay", {"ms": ASK_DELAY_MS})
                self.elect(r)
                self.t += 5 * ASK_DELAY_MS // 2   # learn the epoch, fetch: 2 hops; the answer is on its way
                self.links(self.blocked | {(x, _node(r))})
                self.t += 3 * ASK_DELAY_MS
                self.add("delay", {"ms": 0})
                self.t += 1
            else:
                self.elect(r)
                self.t += ELECT_GAP_MS
        elif in_isr:
            # the leader is dead and fenced (the crash waited): the controller has elected a
            # live ISR member; name the model's choice
            self.elect(r)
            self.t += ELECT_GAP_MS
        else:
            # outside the ISR: only the controller's own (unclean) election makes r leader
            others = [_node(x) for x in range(len(self.nodes)) if x != leader] + [CONTROLLER_ID]
            self.links(self.blocked | self.cut_off(_node(leader), others))
            self.t += FENCE_WAIT_MS
            self.links(self.blocked - self.cut_off(_node(leader), others))


def schedule_for(steps: list[dict], replicas: int, local_truncation: bool = False) -> list[dict]:
    """The scripted fault schedule of a replication counterexample. ``local_truncation``: the
    variant's followers truncate by themselves as they learn a new epoch (truncate to the high
    watermark); otherwise a follower truncates on its leader's answer to one fetch."""
    out = _Schedule(replicas)
    leader = 0
    alive = set(range(replicas))
    actions = [(s["action"], s["replica"]) for s in steps[1:]]
    # the replicas are cut off from each other after the last fetch before the first control
    # step: what the trace does from there on (appends, a high watermark that advances on
    # positions reported earlier) happens without replication
    first = next((i for i, x in enumerate(actions) if x[0] in CONTROL), len(actions))
    cut = max((i + 1 for i, x in enumerate(actions[:first]) if x[0] == "fetch"), default=0)
    started = False
    for i, (a, r) in enumerate(actions):
        # the data steps up to the next control step, and that step
        upto = next((j for j in range(i + 1, len(actions)) if actions[j][0] in CONTROL), len(actions))
        if i == cut:
            out.links(out.isolated())
            started = True
        if a == "elect":
            # the data steps up to ``upto`` are what this election's epoch sees
            out.election(r, leader, steps[i]["state"]["replicas"][r]["isr"], leader in alive,
                         actions[i + 1:upto], local_truncation)
            leader = r
        elif a == "crash":
            out.add("kill", {"nodes": [_node(r)]})
            alive.discard(r)
            quick = upto < len(actions) and actions[upto] == ("restart", r)
            out.t += 300 if quick else FENCE_WAIT_MS
        elif a == "restart":
            out.add("restart", {"nodes": [_node(r)]})
            alive.add(r)
            out.t += 1_000   # registered again
        elif a == "shrink":
            out.links(out.blocked | out.cut_off(_node(r), [_node(leader)]))
            out.t += SHRINK_WAIT_MS
        elif a == "fetch" and started:
            out.links(set())
            out.t += DATA_MS
        elif a == "truncate":
            # done as the follower learned the epoch: by itself (truncate-to-high-watermark) or
            # on the one answer the election above let through
            out.t += ELECT_GAP_MS
        elif a == "stale-fetch":
            out.links(out.blocked - {(_node(r), _node(leader))})
            out.t += DATA_MS
        else:   # append, advance-hw, expand, or data steps before the first control step
            out.t += DATA_MS if started else 0
    out.t += DATA_MS
    out.links(set())
    return out.steps


def _node(r: int) -> int:
    """The broker that plays the model's replica ``r``."""
    return r + 1


def model_templates() -> dict[str, dict]:
    """The z3 counterexamples of the replication model (kafkacheck model-check), stored so
    that playing one needs no solver; tests/kafkacheck/test_swarm.py checks they are still
    what the model finds."""
    return json.loads(COUNTEREXAMPLES_FILE.read_text())


def template_schedule(variant: str, rng: random.Random, brokers: int,
                      nodes: list[int] | None = None) -> list[dict]:
    """A counterexample's schedule (:func:`schedule_for`) with random parameters: which
    brokers play the model's replicas (drawn from ``nodes``, by default all ``brokers``), when
    it starts, how long the cluster runs normally between its steps."""
    t = model_templates()[variant]
    steps = schedule_for(t["steps"], t["replicas"], local_truncation=variant == "kip101")
    nodes = list(nodes) if nodes is not None else list(range(1, brokers + 1))
    rng.shuffle(nodes)
    relabel = {r + 1: nodes[r] for r in range(t["replicas"])}
    shift = rng.randint(-1_000, 4_000)
    stretch = rng.choice([1.0, 1.0, 1.5, 2.0])
    first = steps[0]["at_ms"] if steps else 0

    def node(n: Any) -> Any:
        return relabel.get(n, n) if isinstance(n, int) else n

    out = []
    for s in steps:
        value = s["value"]
        if s["f"] == "partition":
            value = {"grudge": {str(node(int(k))): sorted(node(x) for x in v)
                                for k, v in value["grudge"].items()}}
        elif s["f"] == "elect":
            value = {**value, "leader": node(value["leader"])}
        elif s["f"] in ("kill", "restart"):
            value = {"nodes": [node(n) for n in value["nodes"]]}
        at = first + shift + int((s["at_ms"] - first) * stretch)
        out.append({"at_ms": max(1_000, at), "f": s["f"], "value": value})
    return out


def seeded_template(variant: str, seed: int, brokers: int) -> list[dict]:
    """``kafkacheck run --template VARIANT --seed SEED``: the template's parameters from the seed."""
    return template_schedule(variant, random.Random(f"kafkacheck-template-{seed}"), brokers)
