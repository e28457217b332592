"""The workload's nemesis against a real broker: process, network and node faults.

A thread (:func:`nemesis_loop`) picks a fault every 2-4 s among those the target allows,
applies it, holds it, and heals it, recording each as nemesis ops of the history:

* process faults, when kafkacheck started the broker: ``sigkill`` (kill -9, then restart),
  ``pause`` (SIGSTOP, then SIGCONT) and ``lose-unflushed`` (a power loss) of a broker process,
  and ``offline-partition`` (every node holding one partition of the workload's topics killed,
  for a drawn time after the partition lost its leader: :mod:`kafkacheck.conform.offline`);
* network faults on the clients' links, through the TCP fault proxy in front of each broker:
  ``client-partition`` (clients cut off both ways), ``client-one-way``, ``client-delay``
  (300 ms), ``client-drop`` (open connections reset);
* ``straggle``, through the same proxies reading Kafka frames (:mod:`fault_injection.real.straggle`):
  one request of a drawn API held back while its client retries on a new connection, and
  delivered late, once the next transaction of its producer has begun or after a drawn
  delay; the history records which request was held (API, correlation id, transactional id,
  producer id and epoch) and, at its release, the broker's answer to it;
* faults between the nodes of a spawned cluster, each node in a network namespace of its own
  (:mod:`fault_injection.real.netns`): ``isolate`` (the leader of a partition the workload writes,
  first cut off from the others' replication links, then from every node: the zombie
  leader), ``split`` (a minority against the majority), ``one-way-nodes``, ``lossy-nodes``,
  ``slow-nodes``; held longer than a broker's session timeout, so that elections happen
  under them.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Any

from fault_injection.real.straggle import STRAGGLE_APIS, Straggler
from kafkacheck.conform.offline import take_offline
from kafkacheck.real.wall_history import History

# the names of fault_injection/vocabulary.py's REAL, by what carries them out
PROCESS_FAULTS = ["sigkill", "pause", "lose-unflushed", "offline-partition"]
NETWORK_FAULTS = ["client-partition", "client-one-way", "client-delay", "client-drop"]
REQUEST_FAULTS = ["straggle"]  # through the proxies too, one request at a time
# between the nodes of a spawned cluster (fault_injection/real/netns.py; needs root)
NODE_FAULTS = ["isolate", "split", "one-way-nodes", "lossy-nodes", "slow-nodes", "last-replica-standing"]


def parse_first(bootstrap: str) -> tuple[str, int]:
    from kafkacheck.conform.targets import parse_bootstrap

    return parse_bootstrap(bootstrap)[0]


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
                 nemesis_log: list[dict], topic: str = "", straggle_apis: tuple[str, ...] = STRAGGLE_APIS,
                 placement: dict[str, list[int]] | None = None, groups: tuple[str, ...] = (),
                 probe=None) -> None:
    """Until ``stop``: every 2-4 s one fault of ``faults`` (those the target allows), held,
    then healed; each recorded in ``h`` and summarised in ``nemesis_log``. ``straggle_apis``:
    the APIs whose requests ``straggle`` may hold; ``placement``: the replicas of each
    partition of the workload's topics, when they were placed for ``offline-partition``;
    ``groups``: the workload's consumer groups (whose coordinators ``offline-partition`` spares);
    ``probe``: the run's hanging-transaction probe (``offline-partition`` has it watch a partition
    that comes back)."""
    procs = {name: p for name, p in target.processes.items() if name != "controller"}
    proxied = NETWORK_FAULTS + REQUEST_FAULTS
    usable = [f for f in faults if (f in PROCESS_FAULTS and procs and (f != "offline-partition" or placement))
              or (f in proxied and target.proxies) or (f in NODE_FAULTS and target.netns is not None)]
    if not usable:
        return
    n = _Nemesis(target, h, rng, stop, nemesis_log, topic, procs, straggle_apis)
    n.probe = probe
    try:
        while not stop.wait(rng.uniform(2.0, 4.0)):
            fault = rng.choice(usable)
            try:
                if fault == "offline-partition":
                    assert placement is not None
                    carried_on = take_offline(n, placement, groups)
                elif fault == "last-replica-standing":
                    carried_on = n.last_replica_standing()
                elif fault in NODE_FAULTS:
                    carried_on = n.node_fault(fault)
                elif fault in NETWORK_FAULTS:
                    carried_on = n.network_fault(fault)
                elif fault in REQUEST_FAULTS:
                    carried_on = n.straggle()
                else:
                    carried_on = n.process_fault(fault)
            except Exception as e:  # a fault that could not be done: recorded, and the faults go on
                n.failed(fault, e)
                carried_on = True
            if not carried_on:  # the run ended while a fault was held
                break
    finally:
        n.close()


class _Nemesis:
    """One fault at a time; each method returns False when the run ended during the fault."""

    def __init__(self, target, h: History, rng: random.Random, stop: threading.Event,
                 nemesis_log: list[dict], topic: str, procs: dict, straggle_apis: tuple[str, ...] = ()) -> None:
        self.target, self.h, self.rng, self.stop = target, h, rng, stop
        self.nemesis_log, self.topic, self.procs = nemesis_log, topic, procs
        self.lag, self.session = _node_timings(target) if target.netns is not None else (0.0, 0.0)
        self.straggle_apis = straggle_apis
        self.straggler: Straggler | None = None
        self.probe = None  # a kafkacheck.conform.txn_probe.TxnProbe

    def close(self) -> None:
        if self.straggler is not None:
            self.straggler.close()

    def failed(self, f: str, error: Exception) -> None:
        """Fault ``f`` raised ``error``: its op ends ``info`` with the error (the run's healing
        undoes whatever part of it was done), and the summary says so."""
        text = f"{type(error).__name__}: {error}"[:200]
        last = next((o for o in reversed(self.h.recorder.ops) if o["process"] == "nemesis"), None)
        if last is None or last["type"] != "invoke":
            self.h.op("nemesis", "invoke", f, {})
        self.h.op("nemesis", "info", f, {"error": text})
        self.nemesis_log.append({"at_s": round(self.h.now() / 1e9, 2), "f": f, "error": text})

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
        if fault == "client-one-way":
            value["direction"] = self.rng.choice(["in", "out"])
        elif fault == "client-delay":
            value["ms"] = 300
        actions = {"client-partition": lambda: proxy.blackhole("both"),
                   "client-one-way": lambda: proxy.blackhole(value["direction"]),
                   "client-delay": lambda: proxy.delay(300), "client-drop": proxy.drop}
        self.apply(fault, value, actions[fault])
        self.note(fault, name, **{k: v for k, v in value.items() if k != "nodes"})
        return fault == "client-drop" or self.hold_then("heal", name, proxy.heal)

    def process_fault(self, fault: str) -> bool:
        name = self.rng.choice(sorted(self.procs))
        proc = self.procs[name]
        if fault == "lose-unflushed":
            self.crash(name, "lose-unflushed")
            return self.hold_then("restart", name, proc.start)
        self.apply(fault, {"nodes": [name]}, proc.kill if fault == "sigkill" else proc.pause)
        self.note(fault, name)
        undo, action = ("restart", proc.start) if fault == "sigkill" else ("resume", proc.resume)
        return self.hold_then(undo, name, action)

    def crash(self, name: str, f: str, **extra: Any) -> None:
        """kill -9 of node ``name``, then its storage cut back to what it had flushed (a power
        loss); the history records what each partition lost (``lost``)."""
        value: dict[str, Any] = {"nodes": [name], **extra}
        self.h.op("nemesis", "invoke", f, value)
        self.procs[name].kill()
        lost = self.target.lose_unflushed(name)
        self.h.op("nemesis", "info", f, {**value, "lost": lost})
        self.note(f, name, lost=len(lost), **extra)

    def last_replica_standing(self) -> bool:
        """The schedule of KIP-966's motivation: the leader of a partition the workload writes
        is cut off from its followers' replication (it still reaches the controllers) until
        its ISR is itself alone; the workload keeps writing; the leader crashes and loses its
        unflushed tail (:meth:`crash`); the network heals; after the controller has fenced
        it, it restarts. Without eligible leader replicas it is elected again as the last ISR
        member and the followers truncate to its shorter log. Returns False when the run
        ended meanwhile (the network is healed; the run's healing restarts the leader)."""
        target, f = self.target, "last-replica-standing"
        name = _leader_node(target, self.topic, self.rng)
        if name is None:
            return not self.stop.is_set()
        cut = _replication_cut(target, name)
        value = {"nodes": [name], "step": "cut-replication", **cut}
        self.apply(f, value, lambda: target.netns.isolate(name, among=cut.get("among"), ports=cut.get("ports")))
        self.note(f, name, step="cut-replication")
        try:
            return self._schedule(name)
        except BaseException:
            target.netns.heal()  # nothing stays cut when a step fails (the run's healing restarts the node)
            raise

    def _schedule(self, name: str) -> bool:
        """last-replica-standing after the cut: wait for the ISR, crash, heal, restart."""
        from kafkacheck.serve import partition_states

        target, f = self.target, "last-replica-standing"
        node_id = int(name.rsplit("-", 1)[1])
        deadline = time.monotonic() + 2 * self.lag + 30
        alone: dict[int, list[int]] = {}
        host, port = parse_first(target.bootstrap)
        while not alone and time.monotonic() < deadline and not self.stop.wait(0.5):
            try:
                states = partition_states(host, port, self.topic)
            except Exception:
                continue
            alone = {p: isr for p, (leader, isr) in states.items() if leader == node_id and isr == [node_id]}
        if self.stop.is_set():
            return self._end_schedule(name)
        self.h.op("nemesis", "info", f, {"nodes": [name], "step": "isr-shrunk" if alone else "isr-not-shrunk",
                                        "partitions": sorted(f"{self.topic}:{p}" for p in alone)})
        self.note(f, name, step="isr-shrunk" if alone else "isr-not-shrunk", partitions=sorted(alone))
        if self.stop.wait(self.rng.uniform(1.0, 3.0)):  # the workload writes to the leader alone
            return self._end_schedule(name)
        self.crash(name, f, step="crash")
        self.apply(f, {"nodes": [name], "step": "heal"}, target.netns.heal)
        # down until the controller has fenced it (its session timeout), so that the election
        # without it happens, or does not, before it is back
        if self.stop.wait(self.session + 3.0):
            return False  # the run's healing restarts it
        proc = self.procs[name]
        self.apply(f, {"nodes": [name], "step": "restart"}, proc.start)
        self.note(f, name, step="restart")
        return True

    def _end_schedule(self, name: str) -> bool:
        """The run ended during the schedule: the network healed (the run's healing restarts
        what is down)."""
        self.apply("last-replica-standing", {"nodes": [name], "step": "heal"}, self.target.netns.heal)
        return False

    def straggle(self) -> bool:
        """One request of a drawn API held back and delivered late (fault_injection/real/straggle.py).
        Returns False when the run ended meanwhile (the held request is released first, so
        that what it does happens before the final read)."""
        if self.straggler is None:
            self.straggler = Straggler(self.target.proxies)
        rng = self.rng
        value: dict[str, Any] = {"nodes": sorted(self.target.proxies), "api": rng.choice(self.straggle_apis),
                                 "mode": rng.choice(["reset", "reset", "abandon"]),
                                 "release": rng.choice(["next-transaction", "next-transaction", "next-transaction",
                                                        "delay"])}
        max_hold = rng.uniform(4.0, 12.0) if value["release"] == "next-transaction" else rng.uniform(1.0, 8.0)
        settle = round(rng.uniform(0.0, 0.05), 3)
        value["max_hold_s"] = round(max_hold, 2)
        self.h.op("nemesis", "invoke", "straggle", value)
        held = self.straggler.hold(value["api"], value["mode"], rng.uniform(3.0, 6.0), self.stop)
        if held is None:
            self.h.op("nemesis", "info", "straggle", {**value, "held": None})
            self.note("straggle", ",".join(value["nodes"]), api=value["api"], held=None)
            return not self.stop.is_set()
        what = {k: held.info[k] for k in ("proxy", "api", "api_version", "correlation_id", "client_id",
                                          "transactional_id", "producer_id", "producer_epoch", "committed",
                                          "partitions", "base_sequence") if held.info.get(k) is not None}
        self.h.op("nemesis", "info", "straggle", {**value, "held": what})
        self.note("straggle", held.proxy, api=held.info["api"], correlation_id=held.info["correlation_id"])
        try:
            why = self.straggler.wait_for_release(held, value["release"], max_hold, self.stop, settle)
        except BaseException:
            held.drop()  # never left held open (Ctrl-C, a failure): its connection is closed
            raise
        release = {"nodes": [held.proxy], "api": held.info["api"], "correlation_id": held.info["correlation_id"],
                   "trigger": why}
        self.h.op("nemesis", "invoke", "release", release)
        held.release()
        # the broker's answer (a Ctrl-C or the run's end waits a few seconds at most)
        deadline = time.monotonic() + 35.0
        while not held.done.wait(0.1) and time.monotonic() < deadline:
            if self.stop.is_set() and time.monotonic() > deadline - 30.0:
                break
        released = held.released_at if held.released_at is not None else time.monotonic()
        result = {**release, "held_ms": round((released - held.held_at) * 1000), "outcome": held.outcome or "no answer",
                  **({"answer": held.answer} if held.answer is not None else {})}
        self.h.op("nemesis", "info", "release", result)
        self.note("release", held.proxy, api=held.info["api"], correlation_id=held.info["correlation_id"],
                  trigger=why, answer=held.answer, held_ms=result["held_ms"])
        return why != "run ended"
