"""The workload's nemesis against a real broker: process, network and node faults.

A thread (:func:`nemesis_loop`) picks a fault every 2-4 s among those the target allows,
applies it, holds it, and heals it, recording each as nemesis ops of the history:

* process faults, when kafkacheck started the broker: ``kill`` (kill -9, then restart) and
  ``pause`` (SIGSTOP, then SIGCONT) of a broker process;
* network faults, through the TCP fault proxy in front of each broker: ``partition`` (clients
  cut off both ways), ``one-way``, ``delay`` (300 ms), ``drop`` (open connections reset);
* faults between the nodes of a spawned cluster, each node in a network namespace of its own
  (:mod:`fault_injection.netns`): ``isolate`` (the leader of a partition the workload writes,
  first cut off from the others' replication links, then from every node: the zombie
  leader), ``split`` (a minority against the majority), ``one-way-nodes``, ``lossy-nodes``,
  ``slow-nodes``; held longer than a broker's session timeout, so that elections happen
  under them.
"""

from __future__ import annotations

import random
import threading
from typing import Any

from kafkacheck.conform.history import History

PROCESS_FAULTS = ["kill", "pause"]
NETWORK_FAULTS = ["partition", "one-way", "delay", "drop"]
# between the nodes of a spawned cluster (fault_injection/netns.py; needs root)
NODE_FAULTS = ["isolate", "split", "one-way-nodes", "lossy-nodes", "slow-nodes"]


def _leader_node(target, topic: str, rng: random.Random) -> str | None:
    """The process name of the leader of a random partition of ``topic`` (None if unknown)."""
    from kafkacheck.conform.targets import parse_bootstrap
    from kafkacheck.serve import metadata_probe

    for host, port in parse_bootstrap(target.bootstrap):
        try:
            _brokers, topics = metadata_probe(host, port, 2.0)
        except Exception:
            continue
        leaders = [b for b in topics.get(topic, []) if b >= 0]
        if leaders:
            b = rng.choice(leaders)
            for name in (f"broker-{b}", f"kafka-{b}"):
                if name in target.netns.nodes:
                    return name
    return None


def _plan_node_fault(target, fault: str, topic: str, rng: random.Random) -> dict:
    """The targets of one fault between nodes, as the history records them (``nodes``)."""
    names = sorted(target.netns.nodes)
    if fault in ("isolate", "one-way-nodes"):
        # by default the leader of a partition the workload writes: the zombie leader
        return {"nodes": [_leader_node(target, topic, rng) or rng.choice(names)]}
    if fault == "split":
        # a minority of the nodes against the majority; clients reach both sides
        minority = sorted(rng.sample(names, (len(names) - 1) // 2))
        return {"nodes": minority, "majority": [n for n in names if n not in minority]}
    if fault == "lossy-nodes":
        return {"nodes": names, "loss_pct": rng.choice([5, 10, 20]), "dup_pct": rng.choice([2, 5])}
    return {"nodes": names}


def _node_timings(target) -> tuple[float, float]:
    """(replica lag time, broker session timeout) of the spawned cluster, in seconds: how long
    a leader takes to drop silent followers from the ISR, and the controller to fence a
    silent broker."""
    cluster = target.cluster
    if hasattr(cluster, "nodes"):  # Apache Kafka
        props = cluster.properties(cluster.nodes[0])
        return (int(props.get("replica.lag.time.max.ms", "30000")) / 1000,
                int(props.get("broker.session.timeout.ms", "9000")) / 1000)
    from reference.server.cluster import SERVER_TIMINGS

    return SERVER_TIMINGS["replica_lag_time_max_ms"] / 1000, SERVER_TIMINGS["session_timeout_ms"] / 1000


def _replication_cut(target, node: str) -> dict:
    """The first stage of ``isolate``: how to cut ``node`` off from the replication links of
    the other nodes while it still reaches the controllers (as the history records it)."""
    cluster = target.cluster
    if hasattr(cluster, "nodes"):  # Apache Kafka: each node broker and controller; INTERNAL is replication
        return {"ports": sorted(n.internal_port for n in cluster.nodes)}
    return {"among": sorted(n for n in target.netns.nodes if n != "controller" and n != node)}


def _apply_node_fault(target, fault: str, value: dict) -> None:
    net = target.netns
    if fault == "isolate":
        net.isolate(value["nodes"][0], among=value.get("among"), ports=value.get("ports"))
    elif fault == "one-way-nodes":
        net.one_way(value["nodes"][0])
    elif fault == "split":
        net.split(value["nodes"])
    elif fault == "lossy-nodes":
        net.lossy(value["loss_pct"], value["dup_pct"])
    else:
        net.slow()


def nemesis_loop(target, faults: list[str], h: History, rng: random.Random, stop: threading.Event,
                 nemesis_log: list[dict], topic: str = "") -> None:
    """Until ``stop``: every 2-4 s one fault of ``faults`` (those the target allows), held,
    then healed; each recorded in ``h`` and summarised in ``nemesis_log``."""
    procs = {name: p for name, p in target.processes.items() if name != "controller"}
    usable = [f for f in faults if (f in PROCESS_FAULTS and procs) or (f in NETWORK_FAULTS and target.proxies)
              or (f in NODE_FAULTS and target.netns is not None)]
    if not usable:
        return
    n = _Nemesis(target, h, rng, stop, nemesis_log, topic, procs)
    while not stop.wait(rng.uniform(2.0, 4.0)):
        fault = rng.choice(usable)
        if fault in NODE_FAULTS:
            carried_on = n.node_fault(fault)
        elif fault in NETWORK_FAULTS:
            carried_on = n.network_fault(fault)
        else:
            carried_on = n.process_fault(fault)
        if not carried_on:  # the run ended while a fault was held
            break


class _Nemesis:
    """One fault at a time; each method returns False when the run ended during the fault."""

    def __init__(self, target, h: History, rng: random.Random, stop: threading.Event,
                 nemesis_log: list[dict], topic: str, procs: dict) -> None:
        self.target, self.h, self.rng, self.stop = target, h, rng, stop
        self.nemesis_log, self.topic, self.procs = nemesis_log, topic, procs
        self.lag, self.session = _node_timings(target) if target.netns is not None else (0.0, 0.0)

    def note(self, f: str, name: str, **extra: Any) -> None:
        self.nemesis_log.append({"at_s": round(self.h.now() / 1e9, 2), "f": f, "node": name, **extra})

    def apply(self, f: str, value: dict, action) -> None:
        """Record ``f`` on ``value`` around ``action()``."""
        self.h.op("nemesis", "invoke", f, value)
        action()
        self.h.op("nemesis", "info", f, value)

    def hold_then(self, undo: str, name: str, action) -> bool:
        """Wait 2-4 s, then undo; False when the run ended first."""
        if self.stop.wait(self.rng.uniform(2.0, 4.0)):
            return False
        self.apply(undo, {"nodes": [name]}, action)
        self.note(undo, name)
        return True

    def node_fault(self, fault: str) -> bool:
        target, rng = self.target, self.rng
        value = _plan_node_fault(target, fault, self.topic, rng)
        if fault == "isolate":
            # the zombie leader, the way it comes about: its followers are cut off first
            # (it still reaches the controllers, and may shrink the ISR to itself), then
            # everything
            cut = _replication_cut(target, value["nodes"][0])
            first = {**value, "stage": "replication", **cut}
            self.apply(fault, first, lambda: _apply_node_fault(target, fault, first))
            self.note(fault, value["nodes"][0], stage="replication", **cut)
            # long enough for the leader to drop its silent followers from the ISR (Kafka
            # checks every half lag time, so a follower goes between 1 and 1.5 lag times
            # after it fell silent)
            if self.stop.wait(1.5 * self.lag + 4):
                return False
            value = {**value, "stage": "all"}
        self.h.op("nemesis", "invoke", fault, value)
        _apply_node_fault(target, fault, value)
        if fault == "slow-nodes":
            value = {**value, "how": target.netns.faults[-1]}
        self.h.op("nemesis", "info", fault, value)
        self.note(fault, ",".join(value["nodes"]), **{k: v for k, v in value.items() if k != "nodes"})
        # held longer than a broker's session timeout, so that elections happen under it
        # (an isolated leader is fenced, and another elected, before the heal)
        hold = rng.uniform(6.0, 12.0)
        if fault == "isolate":
            hold = max(hold, self.session + rng.uniform(3.0, 8.0))
        if self.stop.wait(hold):
            return False
        self.apply("heal", {"nodes": value["nodes"]}, target.netns.heal)
        self.note("heal", ",".join(value["nodes"]))
        return True

    def network_fault(self, fault: str) -> bool:
        name = self.rng.choice(sorted(self.target.proxies))
        proxy = self.target.proxies[name]
        value: dict = {"nodes": [name]}
        if fault == "one-way":
            value["direction"] = self.rng.choice(["in", "out"])
        elif fault == "delay":
            value["ms"] = 300
        actions = {"partition": lambda: proxy.blackhole("both"), "one-way": lambda: proxy.blackhole(value["direction"]),
                   "delay": lambda: proxy.delay(300), "drop": proxy.drop}
        self.apply(fault, value, actions[fault])
        self.note(fault, name, **{k: v for k, v in value.items() if k != "nodes"})
        return fault == "drop" or self.hold_then("heal", name, proxy.heal)

    def process_fault(self, fault: str) -> bool:
        name = self.rng.choice(sorted(self.procs))
        proc = self.procs[name]
        self.apply(fault, {"nodes": [name]}, proc.kill if fault == "kill" else proc.pause)
        self.note(fault, name)
        undo, action = ("restart", proc.start) if fault == "kill" else ("resume", proc.resume)
        return self.hold_then(undo, name, action)
