"""Aimed nemeses: faults that strike where bugs live, at the moment they matter.

A random schedule strikes at random times; most of its faults land while nothing delicate is
under way. An aimed strategy watches what the nodes do (the events they output) and strikes
within milliseconds of the moment a fault is most likely to expose a mistake:

* ``leader-after-write``: the leader of a partition is killed, paused or isolated just after
  it appended a batch (before its followers have it);
* ``crash-after-append``: a broker crashes just after an append, before any flush (a torn
  write half the time);
* ``election-during-truncation``: the leader is taken away while a follower truncates, so an
  election happens in the middle of the follower's reconciliation;
* ``coordinator-failover-after-endtxn``: the transaction coordinator fails between deciding
  a transaction (EndTxn written) and finishing its markers;
* ``member-paused-across-rebalance``: a group member is paused past its session timeout as a
  rebalance starts;
* ``coordinator-paused-during-rebalance``: the group coordinator's broker is paused past its
  session at the controller as a rebalance starts, with members' joins held there: the
  group's partition moves to another broker, and the paused one, resumed, must tell the
  members it holds that it no longer coordinates (KAFKA-16148);
* ``restart-during-cleaning``: a broker crashes right after its cleaner rewrote a segment;
* ``clock-jump-at-boundary``: a node's clock jumps by about a session, lease or lag timeout
  (a little less or a little more), where expiry decisions flip;
* ``request-held-back``: the next EndTxn, produce or AddPartitionsToTxn request reaches its
  broker only after the client's request timeout, when the client has retried or moved on
  (KAFKA-17754: a delayed request of one transaction landing in the next);
* ``heartbeat-held-across-rebalance``: when a consumer group (KIP-848) gets a new target
  assignment, a member's next two heartbeats that carry its owned partitions (its
  acknowledgements of revocations) reach the coordinator one to four seconds late, while the
  group moves on (KAFKA-16147: a partition pending revocation given back to its member). A
  late request harms no replica, so this one strikes also while other faults are under way;
  it holds the heartbeats of a member the new target takes partitions from;
* ``revocation-slow-across-rebalance``: when a consumer group's new target takes partitions
  from a member, that member's revocation callback runs half a second to six seconds (an
  application flushing its state in onPartitionsRevoked), heartbeating all the while
  without acknowledging, while the group goes on changing. Strikes also under other faults;
* ``leave-lost``: the first two leave heartbeats (member epoch -1, or -2 for a static member)
  of consumer-group (KIP-848) members are lost with their connections (a reset): the
  coordinator keeps such a member at its epoch until its session runs out, and when it
  subscribes again it joins with epoch 0 and the member id it made (KIP-1082) (KAFKA-19233:
  such a member was fenced until its session ran out). Armed two seconds into the run;
  strikes also under other faults;
* ``offline-around-commit``: a transaction is decided (EndTxn written) that wrote to a
  partition of one replica on another broker than its coordinator's: that broker is paused
  past its session, so that the partition has no leader while the coordinator sends its
  markers, for as long as an offline-partition fault lasts (KAFKA-20734). Only in runs whose
  workload topics are placed for ``offline-partition`` (one replica a partition).

Every choice (whether to strike, when, how, how long) comes from the strategy's own seeded
RNG, so a run stays deterministic. One aimed fault at a time, only while the cluster is
otherwise healthy and no scheduled fault is due before it heals: at most one node is faulty
at once, the failure model under which Kafka promises durability (two replicas crashing
together may lose unflushed acknowledged records, and that is not a bug).
"""

from __future__ import annotations

import random
from typing import Any

from fault_injection.nemesis import Nemesis, offline_ms, offline_steps
from fault_injection.simulation import Simulation
from reference.messages import TopicPartition

MS = 1_000_000
LEAVES_LOST = 2  # how many leave heartbeats leave-lost loses in a run

AIMED: dict[str, str] = {
    "leader-after-write": "kill, pause or isolate a partition's leader within milliseconds of an append",
    "crash-after-append": "crash a broker right after an append, before a flush (torn half the time)",
    "election-during-truncation": "take the leader away while a follower truncates",
    "coordinator-failover-after-endtxn": "fail the transaction coordinator between EndTxn and its markers",
    "member-paused-across-rebalance": "pause a group member past its session timeout as a rebalance starts",
    "coordinator-paused-during-rebalance": "pause the group coordinator's broker past its session as a rebalance starts",
    "restart-during-cleaning": "crash a broker right after its cleaner rewrote a segment",
    "clock-jump-at-boundary": "jump a node's clock by about a session, lease or lag timeout",
    "request-held-back": "deliver a client's next EndTxn, produce or AddPartitionsToTxn after its timeout",
    "offline-around-commit": "take a partition of one replica offline as a transaction that wrote there commits",
    "heartbeat-held-across-rebalance": "hold a consumer-group member's acknowledging heartbeats 1-4 s as its "
                                       "group's target changes",
    "revocation-slow-across-rebalance": "slow a consumer-group member's revocation callback 0.5-6 s as its "
                                        "group's target takes partitions from it",
    "leave-lost": "lose consumer-group members' leave heartbeats with their connections",
}
HELD_REQUESTS = (["EndTxnRequest"], ["ProduceRequest"], ["AddPartitionsToTxnRequest"],
                 ["EndTxnRequest", "ProduceRequest"])

# a target change comes at a member's join, leave or expiry only: few chances a run
_RATES = {"heartbeat-held-across-rebalance": (0.3, 0.6, 1.0), "revocation-slow-across-rebalance": (0.3, 0.6, 1.0)}
# which event each event-triggered strategy watches
_TRIGGERS = {
    "log-append": ("leader-after-write", "crash-after-append"),
    "truncate": ("election-during-truncation",),
    "txn-decided": ("coordinator-failover-after-endtxn", "offline-around-commit"),
    "group-rebalance": ("member-paused-across-rebalance", "coordinator-paused-during-rebalance"),
    "compaction": ("restart-during-cleaning",),
    "consumer-group-target": ("revocation-slow-across-rebalance", "heartbeat-held-across-rebalance"),
}


class AimedNemesis:
    """Applies the drawn strategies to a running simulation through ``nemesis`` (so every
    fault is a nemesis op of the history)."""

    def __init__(self, sim: Simulation, nemesis: Nemesis, strategies: list[str], rng: random.Random,
                 brokers: list[int], members: list[int], timings: dict[str, int],
                 schedule: list[dict], end_ms: int, fault_ms: tuple[int, int],
                 placement: dict[str, list[int]] | None = None) -> None:
        unknown = [s for s in strategies if s not in AIMED]
        if unknown:
            raise ValueError(f"unknown aimed strategy {unknown[0]!r}; known: {', '.join(AIMED)}")
        self.sim, self.nemesis, self.rng = sim, nemesis, rng
        self.strategies = set(strategies)
        self.brokers, self.members, self.timings = brokers, members, timings
        self.end_ms, self.fault_ms = end_ms, fault_ms
        self.placement = placement or {}  # offline-partition's placement (one replica a partition)
        # how eager each strategy is: some runs strike at almost every chance, some rarely
        # (leave-lost strikes at every chance it has: it draws nothing, so that the others'
        # draws are what they are without it)
        self.rate = {s: rng.choice(_RATES.get(s, (0.01, 0.05, 0.2, 0.5)))
                     for s in sorted(self.strategies - {"leave-lost"})}
        self.busy_until_ms = 0
        self.struck = 0
        self.targets: dict[str, dict] = {}  # group -> its last target assignment (consumer groups)
        # the random schedule's fault windows: no aimed fault may overlap one
        self.windows: list[tuple[int, int]] = []
        begin = None
        for step in schedule:
            if begin is None:
                begin = step["at_ms"]
            else:
                self.windows.append((begin, step["at_ms"]))
                begin = None
        if any(kind in self.strategies for kinds in _TRIGGERS.values() for kind in kinds):
            sim.observers.append(self._observe)
        if "clock-jump-at-boundary" in self.strategies:
            self._plan_clock_jumps()
        if "request-held-back" in self.strategies:
            self._plan_holds()
        if "leave-lost" in self.strategies:
            step = {"f": "hold-back", "value": {"requests": ["ConsumerGroupHeartbeatRequest"], "epochs": [-1, -2],
                                                "ms": 0, "lost": True, "count": LEAVES_LOST}}
            sim.call_at(2_000 * MS, lambda: self._apply(step))

    # ------------------------------------------------------------ when

    def _free(self, start_ms: int, end_ms: int) -> bool:
        """No other fault now or until ``end_ms`` (plus a margin to recover)."""
        sim = self.sim
        if not self.nemesis.enabled or start_ms < self.busy_until_ms or end_ms > self.end_ms:
            return False
        if sim.network.blocked or sim.network.faults.loss or sim.network.faults.straggle:
            return False
        for p in sim.processes.values():
            if not p.alive or p.paused or p.skew_ms or p.disk.full or p.disk.slow_flush:
                return False
        controller = sim.controller()
        if controller is None or any(set(s.isr) != set(s.replicas) for s in controller.partitions.values()):
            return False  # the last fault's damage is not repaired yet (a replica catching up)
        margin = 2 * self.timings["session_timeout_ms"]
        return not any(b < end_ms + margin and start_ms < e + margin for b, e in self.windows)

    def _observe(self, node: int, kind: str, fields: dict) -> None:
        strategies = _TRIGGERS.get(kind)
        if strategies is None:
            return
        for s in strategies:
            if s in self.strategies and self._applies(s, node, fields) and self.rng.random() < self.rate[s]:
                self._strike(s, node, fields)
                break
        if kind == "consumer-group-target":
            self.targets[fields["group"]] = fields["target"]

    def _applies(self, strategy: str, node: int, fields: dict) -> bool:
        """Whether the event is one the strategy strikes at (drawing nothing when it is not,
        so that runs the strategy cannot strike in stay as they were)."""
        if strategy == "offline-around-commit":
            return bool(self._offline_targets(node, fields))
        if strategy in ("heartbeat-held-across-rebalance", "revocation-slow-across-rebalance"):
            return bool(self._revoking_members(fields))
        return True

    def _revoking_members(self, fields: dict) -> list[int]:
        """The workload's members that a group's new target takes partitions from (they must
        revoke them and acknowledge), by the node their heartbeats come from."""
        before = self.targets.get(fields["group"], {})
        hosts = fields.get("hosts", {})
        return sorted({hosts[mid] for mid, tps in fields["target"].items()
                       if set(before.get(mid, ())) - set(tps) and hosts.get(mid) in self.members})

    def _offline_targets(self, node: int, fields: dict) -> list[str]:
        """The placed partitions of a decided transaction whose replicas the coordinator's
        broker ``node`` does not hold."""
        return [k for k in fields.get("partitions", ()) if k in self.placement and node not in self.placement[k]]

    # ------------------------------------------------------------ how

    def _strike(self, strategy: str, node: int, fields: dict) -> None:
        rng = self.rng
        now_ms = self.sim.now_ns // MS
        at = now_ms + rng.randint(0, 10)
        lasts = rng.randint(*self.fault_ms)
        target, begin, heal = node, None, None
        if strategy == "leader-after-write":
            how = rng.choice(["kill", "pause", "isolate"])
            begin, heal = self._down(how, node)
        elif strategy == "crash-after-append":
            at = now_ms + rng.randint(0, 3)
            begin = ({"f": "disk-fault", "value": {"node": node, "kind": "torn-write"}}
                     if rng.random() < 0.5 else {"f": "kill", "value": {"nodes": [node]}})
            heal = {"f": "restart", "value": {"nodes": [node]}}
        elif strategy == "election-during-truncation":
            target = self._leader_of(fields.get("key"))
            if target is None or target == node:
                return
            begin, heal = self._down(rng.choice(["kill", "isolate"]), target)
        elif strategy == "coordinator-failover-after-endtxn":
            at = now_ms + rng.randint(0, 5)
            begin, heal = self._down(rng.choice(["kill", "isolate", "pause"]), node)
        elif strategy == "member-paused-across-rebalance":
            if not self.members:
                return
            target = rng.choice(self.members)
            at = now_ms + rng.randint(0, 100)
            session = self.timings["member_session_timeout_ms"]
            lasts = rng.randint(session, 3 * session)
            begin = {"f": "pause", "value": {"nodes": [target]}}
            heal = {"f": "resume", "value": {"nodes": [target]}}
        elif strategy == "coordinator-paused-during-rebalance":
            at = now_ms + rng.randint(0, 20)  # while the members' joins wait there
            session = self.timings["session_timeout_ms"]
            lasts = rng.randint(session + session // 2, 3 * session)  # fenced: its partitions move
            begin = {"f": "pause", "value": {"nodes": [node]}}
            heal = {"f": "resume", "value": {"nodes": [node]}}
        elif strategy == "offline-around-commit":
            key = rng.choice(self._offline_targets(node, fields))
            begin, heal, lasts = offline_steps(rng, {key: self.placement[key]}, offline_ms(self.timings))
        elif strategy == "heartbeat-held-across-rebalance":
            at = now_ms + rng.randint(0, 50)
            lasts = rng.randint(1_000, 4_000)
            begin = {"f": "hold-back", "value": {"requests": ["ConsumerGroupHeartbeatRequest"], "ms": lasts,
                                                 "src": rng.choice(self._revoking_members(fields)),
                                                 "having": ["owned"], "count": 2}}
            if self.nemesis.enabled and at >= self.busy_until_ms and at + lasts <= self.end_ms:
                self.busy_until_ms = at + lasts
                self.struck += 1
                self.sim.call_at(at * MS, lambda: self._apply(begin))
            return
        elif strategy == "revocation-slow-across-rebalance":
            self._slow_revocations(fields)
            return
        elif strategy == "restart-during-cleaning":
            at = now_ms + rng.randint(0, 5)
            begin = {"f": "kill", "value": {"nodes": [node]}}
            heal = {"f": "restart", "value": {"nodes": [node]}}
        if begin is None or heal is None or not self._free(at, at + lasts):
            return
        self.busy_until_ms = at + lasts + 2 * self.timings["session_timeout_ms"]
        self.struck += 1
        self.sim.call_at(at * MS, lambda: self._apply(begin))
        self.sim.call_at((at + lasts) * MS, lambda: self._apply(heal))

    def _slow_revocations(self, fields: dict) -> None:
        """Every member the new target takes partitions from revokes slowly, each for its own
        while (set before it hears of the target). Half the time, when the target came with a
        member that joined, that newcomer is paused past its session at once and the
        revocations outlast its expiry: the group gives the partitions back to the members
        still revoking them, then to the newcomer again when it rejoins (KAFKA-16147)."""
        rng, now_ms = self.rng, self.sim.now_ns // MS
        before = self.targets.get(fields["group"])
        hosts = fields.get("hosts", {})
        newcomers = sorted(hosts[m] for m in fields["target"]
                           if before is not None and m not in before and hosts.get(m) in self.members)
        revoking = self._revoking_members(fields)
        steps: list[tuple[int, dict]] = []  # (at_ms, step)
        if newcomers and rng.random() < 0.5:
            gone = rng.choice(newcomers)
            session = self.timings["member_session_timeout_ms"]
            back = rng.randint(1_500, 4_000)  # after its session: it rejoins this much later
            steps += [(now_ms, {"f": "pause", "value": {"nodes": [gone]}}),
                      (now_ms + session + back, {"f": "resume", "value": {"nodes": [gone]}})]
            # each revocation ends after the newcomer expired, before it rejoins
            steps += [(now_ms, {"f": "slow-callback", "value": {"node": n, "ms": session + rng.randint(300, back // 2)}})
                      for n in revoking if n != gone]
        else:
            steps += [(now_ms, {"f": "slow-callback", "value": {"node": n, "ms": rng.randint(500, 6_000)}})
                      for n in revoking]
        until = max(at + step["value"].get("ms", 0) for at, step in steps)
        if not self.nemesis.enabled or now_ms < self.busy_until_ms or until > self.end_ms:
            return
        self.busy_until_ms = until
        self.struck += 1
        for at, step in steps:
            self._later(at, step)

    def _later(self, at_ms: int, step: dict) -> None:
        self.sim.call_at(max(at_ms * MS, self.sim.now_ns), lambda: self._apply(step))

    def _apply(self, step: dict) -> None:
        if self.nemesis.enabled:
            self.nemesis.apply(step)

    def _down(self, how: str, node: int) -> tuple[dict, dict]:
        if how == "kill":
            return {"f": "kill", "value": {"nodes": [node]}}, {"f": "restart", "value": {"nodes": [node]}}
        if how == "pause":
            return {"f": "pause", "value": {"nodes": [node]}}, {"f": "resume", "value": {"nodes": [node]}}
        others = [n for n in self.nemesis.nodes if n != node]
        grudge = {str(node): others, **{str(m): [node] for m in others}}
        return ({"f": "partition", "value": {"kind": "isolate", "grudge": grudge}},
                {"f": "heal", "value": None})

    def _leader_of(self, key: Any) -> int | None:
        controller = self.sim.controller()
        if controller is None or not isinstance(key, str):
            return None
        s = controller.partitions.get(TopicPartition.parse(key))
        return s.leader if s is not None and s.leader >= 0 else None

    def _plan_clock_jumps(self) -> None:
        """Clock jumps at random times, each by a boundary +- a little."""
        rng = self.rng
        boundaries = [self.timings[k] for k in ("session_timeout_ms", "member_session_timeout_ms",
                                                 "replica_lag_time_max_ms", "transaction_timeout_ms")]
        t = 2_000 + rng.randint(1_000, 5_000)
        nodes = sorted(self.nemesis.nodes)
        while t < self.end_ms:
            node = rng.choice(nodes)
            skew = rng.choice([-1, 1]) * (rng.choice(boundaries) + rng.randint(-300, 300))
            lasts = rng.randint(*self.fault_ms)
            self.sim.call_at(t * MS, lambda n=node, s=skew, e=t + lasts: self._jump(n, s, e))
            t += lasts + rng.randint(2_000, 8_000)

    def _jump(self, node: int, skew_ms: int, until_ms: int) -> None:
        now_ms = self.sim.now_ns // MS
        if not self._free(now_ms, until_ms):
            return
        self.busy_until_ms = until_ms + 2 * self.timings["session_timeout_ms"]
        self.struck += 1
        self._apply({"f": "clock-skew", "value": {"node": node, "skew_ms": skew_ms}})
        self.sim.call_at(until_ms * MS, lambda: self._apply(
            {"f": "clock-skew", "value": {"node": node, "skew_ms": 0}}))

    def _plan_holds(self) -> None:
        """At random times, hold back the next request of a kind past the request timeout."""
        rng = self.rng
        t = 2_000 + rng.randint(500, 4_000)
        timeout = self.timings["request_timeout_ms"]
        while t < self.end_ms:
            step = {"f": "hold-back", "value": {"requests": rng.choice(HELD_REQUESTS),
                                                "ms": timeout + rng.randint(100, 3_000)}}
            self.sim.call_at(t * MS, lambda s=step: self._hold(s))
            t += rng.randint(1_000, 6_000)

    def _hold(self, step: dict) -> None:
        now_ms = self.sim.now_ns // MS
        if not self._free(now_ms, now_ms + step["value"]["ms"]):
            return
        self.busy_until_ms = now_ms + step["value"]["ms"]
        self.struck += 1
        self._apply(step)
