"""A symbolic model of one Kafka partition's replication, checked with z3 by bounded model
checking (BMC) and, where it closes, k-induction.

State (for ``n`` replicas and logs of at most ``L`` records; a record is a unique id, with the
leader epoch it was written in):

* per replica: ``alive``, ``leo`` (log end offset), ``log[i]`` and ``lep[i]`` (record id and
  epoch at offset ``i``), ``hw`` (its high watermark), ``known`` (the leader epoch it has
  truncated for and follows; -1 after a restart), ``pos`` (the leader's view of its fetch
  position) and ``isr`` (in the controller's ISR);
* the controller's ``leader`` (-1 when none) and leader ``epoch``; ``nid``, the next record id;
* ghosts: ``cn`` records are committed (acknowledged to acks=all producers) and ``cid[i]`` is
  the id committed at offset ``i``.

Actions (one per step; ``r`` the replica it acts on):

* ``append r``: the leader appends a record in its epoch;
* ``fetch r``: a follower that follows the current epoch reports its position (its log end)
  and copies the leader's next record; its high watermark becomes the leader's, capped by its
  log end;
* ``truncate r``: a follower learns the current epoch and truncates where its log diverges
  from the leader's (KIP-101/279); the variants truncate to their high watermark instead;
* ``advance-hw r``: the leader moves its high watermark to the smallest position of the ISR
  (itself counting its log end); what lies below is committed;
* ``shrink r`` / ``expand r``: the controller removes a follower from the ISR (always safe),
  or adds one that follows the current epoch and reached the leader's high watermark;
* ``crash r`` / ``restart r``: a broker stops (the controller notices a dead leader) and comes
  back with its log and high-watermark checkpoint; it must truncate again before fetching, and
  (KRaft's registration, as in the engine) it leaves an ISR it shares with others;
* ``elect r``: the controller makes a live ISR member leader in a new epoch (the old leader
  may still be alive: a controlled move); the ISR keeps its live members. The leader's view
  of fetch positions starts again at 0 (KIP-320: positions from an older epoch do not count).

Variants switch one rule off, re-creating a historical bug (docs/explanation/protocol-notes.md section 2):

* ``fixed``: the protocol as Kafka has it today;
* ``kip101``: followers truncate to their own high watermark on restart and on learning a new
  leader (before KIP-101);
* ``kip279-hole``: the epoch lookup falls back to the follower's high watermark when the
  leader holds no record of the follower's last epoch (before KIP-279);
* ``no-epoch-hw``: KIP-320 rule 3 removed: the leader keeps fetch positions across epochs and
  counts the position of a follower that has not truncated;
* ``unclean``: the controller may elect a live replica outside the ISR (its ISR becomes just
  that replica).

Invariants (as in the public TLA+ specifications of Kafka replication), checked in every
state: ``leader-completeness`` (every committed record is in the live leader's log at its
offset), ``log-matching`` (two replicas agree below the smaller of their high watermarks),
``leader-in-isr``, ``one-leader-per-epoch`` and ``epochs-monotonic`` (these two hold by
construction with a single controller, and are checked anyway).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import z3

from properties.formal.bmc import relation, replaced
from reference.bugs import Bug

VARIANTS: dict[str, str] = {
    "fixed": "today's protocol: truncation by leader epoch (KIP-101, KIP-279), epoch-checked "
             "high watermark (KIP-320), clean elections only",
    "kip101": "followers truncate to their own high watermark on restart and on a new leader",
    "kip279-hole": "the epoch lookup falls back to the high watermark when the leader has no "
                   "record of the follower's last epoch",
    "no-epoch-hw": "KIP-320 rule 3 removed: fetch positions survive elections and a follower "
                   "that has not truncated is counted toward the high watermark",
    "unclean": "unclean leader election: a live replica outside the ISR may be elected",
}
# the engine's bug switch that re-creates each variant (kafkacheck run --bug)
BUG_SWITCH: dict[str, str | None] = {
    "fixed": None, "kip101": Bug.TRUNCATE_TO_HIGH_WATERMARK, "kip279-hole": Bug.EPOCH_LOOKUP_FALLS_BACK_TO_HW,
    "no-epoch-hw": Bug.HW_WITHOUT_EPOCH_CHECK, "unclean": Bug.UNCLEAN_ELECTION,
}
FIELDS = ("alive", "leo", "log", "lep", "hw", "known", "pos", "isr", "leader", "epoch", "nid", "cn", "cid",
          "epoch_leader")


@dataclass
class State:
    alive: list
    leo: list
    log: list  # [replica][offset]
    lep: list
    hw: list
    known: list
    pos: list
    isr: list
    leader: Any
    epoch: Any
    nid: Any
    cn: Any
    cid: list
    epoch_leader: list = field(default_factory=list)  # ghost: who led each epoch (-1: nobody yet)


def _select(values: list, index) -> Any:
    """values[index] for a symbolic index."""
    out = values[-1]
    for i in range(len(values) - 2, -1, -1):
        out = z3.If(index == i, values[i], out)
    return out


def _min(a, b):
    return z3.If(a < b, a, b)


class Model:
    def __init__(self, variant: str = "fixed", replicas: int = 2, log_len: int = 2, max_epoch: int = 8) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
        if not 2 <= replicas <= 3:
            raise ValueError("the model has 2 or 3 replicas")
        self.variant, self.n, self.L, self.E = variant, replicas, log_len, max_epoch
        self.R = range(replicas)

    # ------------------------------------------------------------ state

    def fresh(self, k: int) -> State:
        def ints(name: str) -> list:
            return [z3.Int(f"{name}_{r}_{k}") for r in self.R]

        return State(
            alive=[z3.Bool(f"alive_{r}_{k}") for r in self.R],
            leo=ints("leo"),
            log=[[z3.Int(f"log_{r}_{i}_{k}") for i in range(self.L)] for r in self.R],
            lep=[[z3.Int(f"lep_{r}_{i}_{k}") for i in range(self.L)] for r in self.R],
            hw=ints("hw"), known=ints("known"), pos=ints("pos"),
            isr=[z3.Bool(f"isr_{r}_{k}") for r in self.R],
            leader=z3.Int(f"leader_{k}"), epoch=z3.Int(f"epoch_{k}"), nid=z3.Int(f"nid_{k}"),
            cn=z3.Int(f"cn_{k}"), cid=[z3.Int(f"cid_{i}_{k}") for i in range(self.L)],
            epoch_leader=[z3.Int(f"eleader_{e}_{k}") for e in range(self.E + 1)])

    def init(self, s: State) -> Any:
        c = [s.leader == 0, s.epoch == 0, s.nid == 1, s.cn == 0]
        for r in self.R:
            c += [s.alive[r], s.leo[r] == 0, s.hw[r] == 0, s.known[r] == 0, s.pos[r] == 0, s.isr[r]]
            c += [s.log[r][i] == 0 for i in range(self.L)] + [s.lep[r][i] == 0 for i in range(self.L)]
        c += [x == 0 for x in s.cid]
        c += [s.epoch_leader[0] == 0] + [x == -1 for x in s.epoch_leader[1:]]
        return z3.And(c)

    def wellformed(self, s: State) -> Any:
        """Bounds every reachable state satisfies (used by k-induction)."""
        c = [s.leader >= -1, s.leader < self.n, s.epoch >= 0, s.epoch <= self.E, s.cn >= 0, s.cn <= self.L,
             s.nid >= 1]
        for r in self.R:
            c += [s.leo[r] >= 0, s.leo[r] <= self.L, s.hw[r] >= 0, s.pos[r] >= 0, s.known[r] >= -1,
                  s.known[r] <= s.epoch]
        return z3.And(c)

    # ------------------------------------------------------------ actions

    def _copy(self, s: State, **changes) -> dict:
        d = {k: getattr(s, k) for k in FIELDS}
        d.update(changes)
        return d

    def _common_prefix(self, s: State, f: int) -> Any:
        """How many leading records the follower shares with the leader (by record id)."""
        lead_log = [_select([s.log[r][i] for r in self.R], s.leader) for i in range(self.L)]
        lead_leo = _select(s.leo, s.leader)
        out = z3.IntVal(self.L)
        for i in range(self.L - 1, -1, -1):
            match = z3.And(i < s.leo[f], i < lead_leo, s.log[f][i] == lead_log[i])
            out = z3.If(match, out, i)
        return out

    def actions(self, s: State, r: int) -> dict[str, tuple[Any, dict]]:
        """For replica ``r``: action -> (guard, next-state fields)."""
        v, L = self.variant, self.L
        out: dict[str, tuple[Any, dict]] = {}
        is_leader = s.leader == r
        leader_alive = z3.And(s.leader >= 0, _select(s.alive, s.leader))
        lead_leo = _select(s.leo, s.leader)
        lead_hw = _select(s.hw, s.leader)

        # append
        log_r = [z3.If(s.leo[r] == i, s.nid, s.log[r][i]) for i in range(L)]
        lep_r = [z3.If(s.leo[r] == i, s.epoch, s.lep[r][i]) for i in range(L)]
        out["append"] = (z3.And(is_leader, s.alive[r], s.leo[r] < L),
                         self._copy(s, log=replaced(s.log, r, log_r), lep=replaced(s.lep, r, lep_r),
                                    leo=replaced(s.leo, r, s.leo[r] + 1), nid=s.nid + 1))

        # fetch: report the position, copy the leader's next record, learn its high watermark
        follower = z3.And(z3.Not(is_leader), s.alive[r], leader_alive)
        more = s.leo[r] < lead_leo
        nxt_log = [z3.If(z3.And(more, s.leo[r] == i), _select([s.log[x][i] for x in self.R], s.leader),
                         s.log[r][i]) for i in range(L)]
        nxt_lep = [z3.If(z3.And(more, s.leo[r] == i), _select([s.lep[x][i] for x in self.R], s.leader),
                         s.lep[r][i]) for i in range(L)]
        new_leo = z3.If(more, s.leo[r] + 1, s.leo[r])
        out["fetch"] = (z3.And(follower, s.known[r] == s.epoch),
                        self._copy(s, log=replaced(s.log, r, nxt_log), lep=replaced(s.lep, r, nxt_lep),
                                   leo=replaced(s.leo, r, new_leo), pos=replaced(s.pos, r, s.leo[r]),
                                   hw=replaced(s.hw, r, _min(lead_hw, new_leo))))

        # stale fetch: a follower that has not truncated reports its log end, and (without the
        # KIP-320 check) the leader takes it
        if v == "no-epoch-hw":
            out["stale-fetch"] = (z3.And(follower, s.known[r] < s.epoch),
                                  self._copy(s, pos=replaced(s.pos, r, s.leo[r])))

        # truncate on learning the current epoch
        cp = self._common_prefix(s, r)
        to_hw = _min(s.hw[r], s.leo[r])
        if v == "kip101":
            target = to_hw
        elif v == "kip279-hole":
            last_epoch = _select([s.lep[r][i] for i in range(L)], s.leo[r] - 1)
            lead_has = z3.Or([z3.And(i < lead_leo, _select([s.lep[x][i] for x in self.R], s.leader) == last_epoch)
                              for i in range(L)])
            target = z3.If(z3.Or(s.leo[r] == 0, lead_has), cp, to_hw)
        else:
            target = cp
        out["truncate"] = (z3.And(follower, s.known[r] < s.epoch),
                           self._copy(s, leo=replaced(s.leo, r, target),
                                      hw=replaced(s.hw, r, _min(s.hw[r], target)),
                                      known=replaced(s.known, r, s.epoch)))

        # advance the high watermark to the smallest ISR position
        big = z3.IntVal(L + 1)
        hw_new = s.leo[r]
        for x in self.R:
            if x != r:
                hw_new = _min(hw_new, z3.If(s.isr[x], s.pos[x], big))
        new_cid = [z3.If(z3.And(i < hw_new, i >= s.cn), s.log[r][i], s.cid[i]) for i in range(L)]
        out["advance-hw"] = (z3.And(is_leader, s.alive[r], hw_new > s.hw[r]),
                             self._copy(s, hw=replaced(s.hw, r, hw_new), cn=z3.If(hw_new > s.cn, hw_new, s.cn),
                                        cid=new_cid))

        # ISR changes
        out["shrink"] = (z3.And(z3.Not(is_leader), s.isr[r]), self._copy(s, isr=replaced(s.isr, r, False)))
        out["expand"] = (z3.And(follower, z3.Not(s.isr[r]), s.known[r] == s.epoch, s.pos[r] >= lead_hw),
                         self._copy(s, isr=replaced(s.isr, r, True)))

        # crash and restart
        out["crash"] = (s.alive[r], self._copy(s, alive=replaced(s.alive, r, False),
                                               leader=z3.If(is_leader, -1, s.leader)))
        restart_leo = to_hw if v == "kip101" else s.leo[r]
        # KRaft: the controller takes a broker that registers again out of every ISR it shares
        # with others (its new process must catch up before it counts again)
        others_in_isr = z3.Or([s.isr[x] for x in self.R if x != r])
        out["restart"] = (z3.Not(s.alive[r]), self._copy(s, alive=replaced(s.alive, r, True),
                                                          known=replaced(s.known, r, -1),
                                                          leo=replaced(s.leo, r, restart_leo),
                                                          isr=replaced(s.isr, r, z3.And(s.isr[r],
                                                                                        z3.Not(others_in_isr)))))

        # election
        eligible = z3.BoolVal(True) if v == "unclean" else s.isr[r]
        new_epoch = s.epoch + 1
        if v == "unclean":
            new_isr = [z3.If(s.isr[r], z3.And(s.isr[x], s.alive[x]) if x != r else z3.BoolVal(True),
                             z3.BoolVal(x == r)) for x in self.R]
        else:
            new_isr = [z3.And(s.isr[x], s.alive[x]) for x in self.R]
        new_pos = s.pos if v == "no-epoch-hw" else [z3.IntVal(0) for _ in self.R]
        out["elect"] = (z3.And(s.alive[r], z3.Not(is_leader), eligible, s.epoch < self.E),
                        self._copy(s, leader=z3.IntVal(r), epoch=new_epoch, known=replaced(s.known, r, new_epoch),
                                   isr=new_isr, pos=new_pos,
                                   epoch_leader=[z3.If(new_epoch == e, z3.If(s.epoch_leader[e] == -1, r, -2),
                                                       s.epoch_leader[e]) for e in range(self.E + 1)]))
        return out

    def choices(self) -> list[tuple[str, int]]:
        """What a step's choice variable numbers: (action, replica)."""
        probe = self.fresh(-1)
        return [(name, r) for r in self.R for name in self.actions(probe, r)]

    def transition(self, s: State, t: State, choice) -> Any:
        """The constraint that ``t`` follows ``s`` by the action numbered ``choice`` (an index
        of :meth:`choices`)."""
        options = [(guard, nxt) for r in self.R for guard, nxt in self.actions(s, r).values()]
        return relation(choice, options, s, t, FIELDS)

    # ------------------------------------------------------------ invariants

    def invariants(self, s: State, prev: State | None = None) -> dict[str, Any]:
        lead = s.leader
        lead_alive = z3.And(lead >= 0, _select(s.alive, lead))
        lead_leo = _select(s.leo, lead)
        complete = [z3.Implies(z3.And(lead_alive, i < s.cn),
                               z3.And(i < lead_leo, _select([s.log[r][i] for r in self.R], lead) == s.cid[i]))
                    for i in range(self.L)]
        matching = []
        for a in self.R:
            for b in self.R:
                if a < b:
                    for i in range(self.L):
                        below = z3.And(i < s.hw[a], i < s.hw[b], i < s.leo[a], i < s.leo[b])
                        matching.append(z3.Implies(below, s.log[a][i] == s.log[b][i]))
        out = {
            "leader-completeness": z3.And(complete),
            "log-matching": z3.And(matching),
            "leader-in-isr": z3.Implies(lead >= 0, _select(s.isr, lead)),
            "one-leader-per-epoch": z3.And([x != -2 for x in s.epoch_leader]),
        }
        out["epochs-monotonic"] = (z3.BoolVal(True) if prev is None else
                                   z3.And([s.epoch >= prev.epoch] + [z3.Or(s.known[r] >= prev.known[r], s.known[r] == -1)
                                                                     for r in self.R]))
        return out

    # ------------------------------------------------------------ reading a model

    def describe(self, m: z3.ModelRef, s: State) -> dict:
        def ev(x):
            return m.eval(x, model_completion=True)

        def num(x) -> int:
            return ev(x).as_long()

        reps = []
        for r in self.R:
            leo = num(s.leo[r])
            reps.append({
                "alive": z3.is_true(ev(s.alive[r])), "isr": z3.is_true(ev(s.isr[r])),
                "log": [f"m{num(s.log[r][i])}@e{num(s.lep[r][i])}" for i in range(min(leo, self.L))],
                "hw": num(s.hw[r]), "known": num(s.known[r]), "pos": num(s.pos[r]),
            })
        cn = num(s.cn)
        return {"leader": num(s.leader), "epoch": num(s.epoch), "replicas": reps,
                "committed": [f"m{num(s.cid[i])}" for i in range(min(cn, self.L))]}
