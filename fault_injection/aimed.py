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
  workload topics are placed for ``offline-partition`` (one replica a partition);
* ``leader-after-marker``: a partition's leader has just appended a transaction marker
  (WriteTxnMarkers' COMMIT or ABORT control batch, the broker's ``txn-marker`` event): it is
  cut off from every node at that instant, so that the answers to its followers' waiting
  fetches, which carry the marker, are lost with their connections, and within 0-3 ms it is
  killed (its unflushed marker lost with it), paused or left isolated. A follower that lacks
  the marker is elected; the coordinator, unanswered, must send the marker again to the new
  leader, and the old one, back, must truncate its marker and take the transaction for open
  again until the new marker reaches it (KIP-98's markers; with unclean elections the
  window of KAFKA-7408 and KAFKA-20716: a transaction left without its marker);
* ``isr-shrink-then-crash``: the edges of eligible leader replicas (KIP-966). A partition's
  followers are paused or cut off from its leader (neither loses a record) until the ISR
  shrinks below min.insync.replicas (its followers become eligible leader replicas, ELR) or,
  a quarter of the time with three replicas, to exactly min.insync.replicas; within 0-3 ms
  the leader, the last member of the ISR, is killed (a power loss: its unflushed records
  lost). Then either the followers come back first (a third of the time 0-20 ms after the
  crash: an eligible replica back just as the leader dies) and the crashed leader later, or
  the crashed leader restarts first (an unclean shutdown: it must leave the ISR and the ELR
  and must not lead, KAFKA-15586, KAFKA-18635) and the followers later. Several nodes are
  faulty at once, but only the leader loses records: KIP-966's promise (min.insync.replicas
  - 1 unclean shutdowns lose nothing committed) covers it.

Every choice (whether to strike, when, how, how long) comes from the aimed nemesis's seeded
RNG, so a run stays deterministic (``leader-after-marker`` and ``isr-shrink-then-crash`` draw
from RNGs of their own, seeded from its state without taking from it, so that adding them
changes no draw of the others). One aimed fault at a time, only while the cluster is
otherwise healthy and no scheduled fault is due before it heals: at most one node is faulty
at once, the failure model under which Kafka promises durability (two replicas crashing
together may lose unflushed acknowledged records, and that is not a bug). The exception is
``isr-shrink-then-crash``, whose followers are taken away without losing anything before
its leader crashes: KIP-966 promises that too.
"""

from __future__ import annotations

import random
from functools import partial
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
    "leader-after-marker": "cut off a partition's leader as it appends a transaction marker, then kill, pause "
                           "or isolate it within 0-3 ms",
    "isr-shrink-then-crash": "pause or cut off a partition's followers until its ISR shrinks below (or to) "
                             "min.insync.replicas, then kill the leader",
}
HELD_REQUESTS = (["EndTxnRequest"], ["ProduceRequest"], ["AddPartitionsToTxnRequest"],
                 ["EndTxnRequest", "ProduceRequest"])

# a target change comes at a member's join, leave or expiry only: few chances a run
_RATES = {"heartbeat-held-across-rebalance": (0.3, 0.6, 1.0), "revocation-slow-across-rebalance": (0.3, 0.6, 1.0),
          # one marker a partition a transaction: far fewer chances than appends
          "leader-after-marker": (0.2, 0.5, 1.0)}
# the strategies that take nothing from the shared RNG (so that the others' draws are what
# they are without them): leave-lost draws nothing; the others draw from RNGs of their own
_APART = frozenset({"leave-lost", "leader-after-marker", "isr-shrink-then-crash"})
# which event each of those watches
_OWN_TRIGGERS = {"txn-marker": ("leader-after-marker",), "log-append": ("isr-shrink-then-crash",),
                 "partition-change": ("isr-shrink-then-crash",)}
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
        # (the strategies drawn apart draw from RNGs of their own, seeded from this one's state
        # without taking from it: their eagerness first)
        self.own = {s: _own_rng(rng, s) for s in sorted(self.strategies & _APART - {"leave-lost"})}
        self.rate = {s: self.own[s].choice(_RATES.get(s, (0.01, 0.05, 0.2, 0.5))) for s in self.own}
        self.rate |= {s: rng.choice(_RATES.get(s, (0.01, 0.05, 0.2, 0.5)))
                      for s in sorted(self.strategies - _APART)}
        self.elr: dict | None = None  # isr-shrink-then-crash under way: its partition, leader, steps
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
        if any(kind in self.strategies for kinds in (*_TRIGGERS.values(), *_OWN_TRIGGERS.values())
               for kind in kinds):
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

    def _room(self, start_ms: int) -> int | None:
        """The latest ``end_ms`` for which :meth:`_free` (``start_ms``, ``end_ms``) holds
        (None: not free now)."""
        if not self._free(start_ms, start_ms):
            return None
        margin = 2 * self.timings["session_timeout_ms"]
        return min([self.end_ms, *(b - margin for b, e in self.windows if start_ms < e + margin)])

    def _observe(self, node: int, kind: str, fields: dict) -> None:
        strategies = _TRIGGERS.get(kind)
        if strategies is not None:
            for s in strategies:
                if s in self.strategies and self._applies(s, node, fields) and self.rng.random() < self.rate[s]:
                    self._strike(s, node, fields)
                    break
            if kind == "consumer-group-target":
                self.targets[fields["group"]] = fields["target"]
        for s in _OWN_TRIGGERS.get(kind, ()):
            if s not in self.strategies:
                continue
            if s == "leader-after-marker":
                self._after_marker(node, fields)
            elif kind == "log-append":
                self._shrink_isr(node, fields)
            else:
                self._isr_changed(fields)

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
        target: int | None = node
        begin: dict | None = None
        heal: dict | None = None
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
                self.sim.call_at(at * MS, partial(self._apply, begin))
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

    def _partition(self, key: Any):
        """The controller's state of the partition ``key`` (None if unknown or no controller)."""
        controller = self.sim.controller()
        if controller is None or not isinstance(key, str):
            return None
        return controller.partitions.get(TopicPartition.parse(key))

    def _after_marker(self, node: int, fields: dict) -> None:
        """leader-after-marker: the leader ``node`` has just appended a transaction marker.
        It is cut off at once, in the step that appended it: the answers to its followers'
        waiting fetches, routed after this event, are lost with their connections, so no
        follower holds the marker. Then, 0-3 ms later, the cut is healed as the leader is
        killed or paused, or it stays isolated."""
        s = self._partition(fields.get("key"))
        if s is None or len(s.replicas) < 2 or s.leader != node:
            return  # no follower to fail over to (drawing nothing)
        rng = self.own["leader-after-marker"]
        if rng.random() >= self.rate["leader-after-marker"]:
            return
        now_ms = self.sim.now_ns // MS
        how = rng.choice(["kill", "pause", "isolate"])
        at = now_ms + rng.randint(0, 3)
        lasts = rng.randint(*self.fault_ms)
        if not self._free(now_ms, at + lasts):
            return
        self.busy_until_ms = at + lasts + 2 * self.timings["session_timeout_ms"]
        self.struck += 1
        cut, heal = self._down("isolate", node)
        self._apply(cut)
        if how == "isolate":
            self.sim.call_at((at + lasts) * MS, lambda: self._apply(heal))
            return
        begin, end = self._down(how, node)

        def heal_then_begin() -> None:
            self._apply(heal)
            self._apply(begin)

        self.sim.call_at(at * MS, heal_then_begin)
        self.sim.call_at((at + lasts) * MS, lambda: self._apply(end))

    def _shrink_isr(self, node: int, fields: dict) -> None:
        """isr-shrink-then-crash, first step: at an append by the leader ``node`` of a
        partition of two replicas or more whose min.insync.replicas is 2 or more, its
        followers are paused or cut off from it (the leader shrinks them out of the ISR when
        they lag, the controller when their session expires): as many as take the ISR below
        min.insync.replicas or, with three replicas a quarter of the time, to it exactly. The
        crash comes when the controller's ISR gets there (:meth:`_isr_changed`)."""
        if self.elr is not None:
            return
        s = self._partition(fields.get("key"))
        controller = self.sim.controller()
        if s is None or controller is None or s.leader != node or len(s.replicas) < 2:
            return
        min_isr = controller.effective_min_isr(s)
        if min_isr < 2 or len(s.isr) != len(s.replicas):
            return  # no replica can be eligible (or the ISR is not full: the cluster is not healthy)
        rng = self.own["isr-shrink-then-crash"]
        if rng.random() >= self.rate["isr-shrink-then-crash"]:
            return
        t = self.timings
        now_ms = self.sim.now_ns // MS
        exactly = len(s.isr) > min_isr and rng.random() < 0.25
        target = min_isr if exactly else min_isr - 1  # the ISR's size when the leader dies
        followers = [r for r in s.replicas if r != node]
        out = sorted(rng.sample(followers, len(s.isr) - target))
        how = rng.choice(["pause", "cut"])
        eligible_first = rng.random() < 0.5
        soon = rng.random() < 1 / 3
        at = now_ms + rng.randint(0, 10)
        # the shrink comes by the leader's lag check or (paused followers) the controller's
        # fence, whichever first; the followers come back if it has not come by then
        lag = t["replica_lag_time_max_ms"]
        deadline = at + (min(lag, t["session_timeout_ms"]) if how == "pause" else lag) + 2_000
        # how long after the crash the first comes back: 0-20 ms when soon (an eligible
        # replica back just as the leader dies, or the leader's restart before its session
        # ran out), else as long as a fault; the second, up to a session later; both within
        # the time the cluster is free (drawn within it rather than checked after: checked,
        # the short draws would strike more often than the long ones)
        room = self._room(now_ms)
        left = -1 if room is None else room - deadline - 3
        if left < (20 if soon else self.fault_ms[0]):
            return
        first = rng.randint(0, 20) if soon else rng.randint(self.fault_ms[0], min(self.fault_ms[1], left))
        second = rng.randint(0, min(t["session_timeout_ms"], self.fault_ms[1], left - first))
        until = deadline + 3 + first + second
        self.busy_until_ms = until + 2 * t["session_timeout_ms"]
        self.struck += 1
        away: dict[str, Any]
        back: dict[str, Any]
        if how == "pause":
            away = {"f": "pause", "value": {"nodes": out}}
            back = {"f": "resume", "value": {"nodes": out}}
        else:
            grudge = {str(node): out, **{str(f): [node] for f in out}}
            away = {"f": "partition", "value": {"kind": "cut-from-leader", "grudge": grudge}}
            back = {"f": "heal", "value": None}
        self.elr = {"key": fields["key"], "leader": node, "target": target, "back": back,
                    "eligible_first": eligible_first, "first": first, "second": second, "crashed": False}
        self.sim.call_at(at * MS, lambda: self._apply(away))
        self.sim.call_at(deadline * MS, self._elr_deadline)

    def _isr_changed(self, fields: dict) -> None:
        """isr-shrink-then-crash, second step: the controller changed a partition. When the
        watched one's ISR is down to its target with the same leader, that leader, the last
        member of the ISR (or one of min.insync.replicas members), is killed 0-3 ms later;
        then the followers and the leader come back in the order drawn."""
        e = self.elr
        if e is None or e["crashed"] or fields.get("key") != e["key"]:
            return
        if fields.get("leader") != e["leader"] or len(fields.get("isr", ())) > e["target"]:
            return
        e["crashed"] = True
        rng = self.own["isr-shrink-then-crash"]
        leader = e["leader"]
        at = self.sim.now_ns // MS + rng.randint(0, 3)
        restart = {"f": "restart", "value": {"nodes": [leader]}}
        first, second = (e["back"], restart) if e["eligible_first"] else (restart, e["back"])
        self._later(at, {"f": "kill", "value": {"nodes": [leader]}})
        self._later(at + e["first"], first)
        self._later(at + e["first"] + e["second"], second)

    def _elr_deadline(self) -> None:
        """The ISR did not shrink in time (or the leader moved): the followers come back."""
        e = self.elr
        self.elr = None
        if e is not None and not e["crashed"]:
            self._apply(e["back"])

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
        s = self._partition(key)
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
            self.sim.call_at(t * MS, partial(self._jump, node, skew, t + lasts))
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
            self.sim.call_at(t * MS, partial(self._hold, step))
            t += rng.randint(1_000, 6_000)

    def _hold(self, step: dict) -> None:
        now_ms = self.sim.now_ns // MS
        if not self._free(now_ms, now_ms + step["value"]["ms"]):
            return
        self.busy_until_ms = now_ms + step["value"]["ms"]
        self.struck += 1
        self._apply(step)


def _own_rng(rng: random.Random, name: str) -> random.Random:
    """An RNG for the strategy ``name``, seeded from ``rng``'s state without taking anything
    from it (a copy draws the seed)."""
    copy = random.Random()
    copy.setstate(rng.getstate())
    return random.Random(f"{name}-{copy.getrandbits(64)}")
