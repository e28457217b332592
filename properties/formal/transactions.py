"""A small symbolic model of one transactional producer, its coordinator and one partition,
for KAFKA-17754 and its fix by per-transaction epoch bumps (KIP-890).

State: the producer's current transaction number ``txn`` (1, 2, ...) and epoch ``pepoch``; the
coordinator's ``ongoing`` flag, whether the partition was ``added`` to the transaction, and
each transaction's ``outcome`` (0 undecided, 1 committed, 2 aborted); produce requests in
flight (``M`` slots: the sending transaction and its epoch; the network may hold them for
any time); the partition's largest producer epoch seen ``part_epoch`` and its records (the
sending transaction, and their state: 0 pending in an open transaction, 1 committed, 2
aborted by a marker).

Actions: ``begin`` a transaction; ``send j`` (a produce request of the current transaction
into slot ``j``; the partition is added to the transaction); ``deliver j`` (the partition
takes or refuses the request); ``commit`` / ``abort`` (the coordinator decides and writes the
marker, which settles every pending record of the partition).

* ``txn-17754``: the partition appends any request whose epoch is not older than the
  newest it has seen; the producer keeps its epoch across transactions. A produce of an
  aborted transaction that arrives late becomes part of the next transaction.
* ``txn-kip890``: the coordinator bumps the epoch at every commit or abort and the marker
  carries the new epoch, and the partition asks the coordinator whether the request's
  transaction is ongoing with that epoch before its first append (KIP-890 part 1), so the
  late request is refused.

Invariant ``txn-atomicity``: every settled record has its own transaction's outcome (an
aborted transaction's record never becomes committed, nor the reverse).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import z3

from properties.formal.bmc import relation, replaced
from reference.bugs import Bug

VARIANTS: dict[str, str] = {
    "txn-17754": "KAFKA-17754: one producer epoch for every transaction, partitions append "
                 "without asking the coordinator",
    "txn-kip890": "KIP-890: the epoch is bumped at every commit or abort and partitions verify "
                  "the transaction with the coordinator",
}
BUG_SWITCH: dict[str, str | None] = {"txn-17754": Bug.TXN_UNFENCED_REQUESTS, "txn-kip890": None}
FIELDS = ("txn", "pepoch", "ongoing", "added", "outcome", "fl_on", "fl_txn", "fl_epoch", "part_epoch",
          "rec_txn", "rec_state", "nrec")


@dataclass
class TxnState:
    txn: Any
    pepoch: Any
    ongoing: Any
    added: Any
    outcome: list  # index t-1 for transaction t
    fl_on: list
    fl_txn: list
    fl_epoch: list
    part_epoch: Any
    rec_txn: list
    rec_state: list
    nrec: Any


class TxnModel:
    def __init__(self, variant: str = "txn-kip890", transactions: int = 3, in_flight: int = 2,
                 records: int = 3) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; known: {', '.join(VARIANTS)}")
        self.variant, self.T, self.M, self.N = variant, transactions, in_flight, records

    def fresh(self, k: int) -> TxnState:
        return TxnState(
            txn=z3.Int(f"txn_{k}"), pepoch=z3.Int(f"pepoch_{k}"), ongoing=z3.Bool(f"ongoing_{k}"),
            added=z3.Bool(f"added_{k}"), outcome=[z3.Int(f"outcome_{t}_{k}") for t in range(self.T)],
            fl_on=[z3.Bool(f"flon_{j}_{k}") for j in range(self.M)],
            fl_txn=[z3.Int(f"fltxn_{j}_{k}") for j in range(self.M)],
            fl_epoch=[z3.Int(f"flepoch_{j}_{k}") for j in range(self.M)],
            part_epoch=z3.Int(f"partepoch_{k}"), rec_txn=[z3.Int(f"rectxn_{i}_{k}") for i in range(self.N)],
            rec_state=[z3.Int(f"recstate_{i}_{k}") for i in range(self.N)], nrec=z3.Int(f"nrec_{k}"))

    def init(self, s: TxnState) -> Any:
        c = [s.txn == 0, s.pepoch == 0, z3.Not(s.ongoing), z3.Not(s.added), s.part_epoch == 0, s.nrec == 0]
        c += [o == 0 for o in s.outcome] + [z3.Not(f) for f in s.fl_on] + [x == 0 for x in s.fl_txn + s.fl_epoch]
        c += [x == 0 for x in s.rec_txn + s.rec_state]
        return z3.And(c)

    def wellformed(self, s: TxnState) -> Any:
        c = [s.txn >= 0, s.txn <= self.T, s.nrec >= 0, s.nrec <= self.N, s.pepoch >= 0, s.part_epoch >= 0]
        c += [z3.And(o >= 0, o <= 2) for o in s.outcome]
        c += [z3.And(x >= 0, x <= 2) for x in s.rec_state]
        c += [z3.And(x >= 1, x <= self.T) for x in s.rec_txn] + [z3.And(x >= 1, x <= self.T) for x in s.fl_txn]
        return z3.And(c)

    def _copy(self, s: TxnState, **changes) -> dict:
        d = {k: getattr(s, k) for k in FIELDS}
        d.update(changes)
        return d

    def _outcome_of(self, s: TxnState, t) -> Any:
        out = z3.IntVal(0)
        for i in range(self.T - 1, -1, -1):
            out = z3.If(t == i + 1, s.outcome[i], out)
        return out

    def actions(self, s: TxnState) -> list[tuple[str, int | None, Any, dict]]:
        fix = self.variant == "txn-kip890"
        out: list[tuple[str, int | None, Any, dict]] = []
        out.append(("begin", None, z3.And(z3.Not(s.ongoing), s.txn < self.T),
                    self._copy(s, txn=s.txn + 1, ongoing=z3.BoolVal(True), added=z3.BoolVal(False))))
        for j in range(self.M):
            out.append(("send", j, z3.And(s.ongoing, z3.Not(s.fl_on[j])),
                        self._copy(s, fl_on=replaced(s.fl_on, j, z3.BoolVal(True)), fl_txn=replaced(s.fl_txn, j, s.txn),
                                   fl_epoch=replaced(s.fl_epoch, j, s.pepoch), added=z3.BoolVal(True))))
        for j in range(self.M):
            accept = s.fl_epoch[j] >= s.part_epoch
            if fix:  # KIP-890 part 1: the coordinator confirms the transaction is ongoing in that epoch
                accept = z3.And(accept, s.ongoing, s.pepoch == s.fl_epoch[j], s.txn == s.fl_txn[j])
            room = s.nrec < self.N
            take = z3.And(accept, room)
            rec_txn = [z3.If(z3.And(take, s.nrec == i), s.fl_txn[j], s.rec_txn[i]) for i in range(self.N)]
            rec_state = [z3.If(z3.And(take, s.nrec == i), 0, s.rec_state[i]) for i in range(self.N)]
            out.append(("deliver", j, s.fl_on[j],
                        self._copy(s, fl_on=replaced(s.fl_on, j, z3.BoolVal(False)), rec_txn=rec_txn,
                                   rec_state=rec_state, nrec=z3.If(take, s.nrec + 1, s.nrec),
                                   part_epoch=z3.If(take, s.fl_epoch[j], s.part_epoch))))
        for name, decision in (("commit", 1), ("abort", 2)):
            new_epoch = s.pepoch + 1 if fix else s.pepoch
            settled = [z3.If(z3.And(s.added, i < s.nrec, s.rec_state[i] == 0), decision, s.rec_state[i])
                       for i in range(self.N)]
            outcome = [z3.If(s.txn == t + 1, decision, s.outcome[t]) for t in range(self.T)]
            out.append((name, None, s.ongoing,
                        self._copy(s, ongoing=z3.BoolVal(False), added=z3.BoolVal(False), outcome=outcome,
                                   rec_state=settled, pepoch=new_epoch,
                                   part_epoch=z3.If(z3.And(s.added, new_epoch > s.part_epoch), new_epoch,
                                                    s.part_epoch))))
        return out

    def choices(self) -> list[tuple[str, int | None]]:
        return [(name, j) for name, j, _g, _n in self.actions(self.fresh(-1))]

    def transition(self, s: TxnState, t: TxnState, choice) -> Any:
        return relation(choice, [(g, nxt) for _n, _j, g, nxt in self.actions(s)], s, t, FIELDS)

    def invariants(self, s: TxnState, prev: TxnState | None = None) -> dict[str, Any]:
        ok = [z3.Implies(z3.And(i < s.nrec, s.rec_state[i] != 0), s.rec_state[i] == self._outcome_of(s, s.rec_txn[i]))
              for i in range(self.N)]
        return {"txn-atomicity": z3.And(ok)}

    def lemmas(self, s: TxnState) -> dict[str, Any]:
        """What every reachable state of the fixed protocol satisfies besides txn-atomicity;
        with them the invariant is inductive (k-induction closes at k = 1). The bug variant has
        none: KAFKA-17754 breaks the first."""
        if self.variant != "txn-kip890":
            return {}
        ongoing = z3.If(s.ongoing, 1, 0)
        current = [z3.And(s.ongoing, s.fl_txn[j] == s.txn) for j in range(self.M)]
        return {
            # the epoch counts the ended transactions; the partition has seen no later one
            "epoch-counts-ended-transactions": z3.And(s.pepoch == s.txn - ongoing, s.part_epoch <= s.pepoch),
            # a request in flight carries the current epoch exactly when its transaction is the
            # ongoing one (which added the partition); a request of an ended transaction
            # carries an older epoch
            "stale-requests-carry-older-epochs": z3.And(
                [z3.Implies(s.fl_on[j], z3.And(s.fl_txn[j] <= s.txn, s.fl_epoch[j] <= s.pepoch,
                                               (s.fl_epoch[j] == s.pepoch) == current[j],
                                               z3.Implies(current[j], s.added)))
                 for j in range(self.M)]),
            # pending records belong to the ongoing transaction, which added the partition
            "pending-records-are-the-ongoing-transaction's": z3.And(
                [z3.Implies(z3.And(i < s.nrec, s.rec_state[i] == 0),
                            z3.And(s.ongoing, s.added, s.rec_txn[i] == s.txn)) for i in range(self.N)]
                + [z3.Implies(i < s.nrec, s.rec_txn[i] <= s.txn) for i in range(self.N)]),
            # transactions before the current one are decided, later ones are not
            "outcomes-follow-the-transactions": z3.And(
                [z3.If(t + 1 < s.txn, s.outcome[t] != 0,
                       z3.If(t + 1 == s.txn, (s.outcome[t] != 0) == z3.Not(s.ongoing), s.outcome[t] == 0))
                 for t in range(self.T)]),
        }

    def describe(self, m: z3.ModelRef, s: TxnState) -> dict:
        def num(x) -> int:
            return m.eval(x, model_completion=True).as_long()

        def yes(x) -> bool:
            return z3.is_true(m.eval(x, model_completion=True))

        names = {0: "pending", 1: "committed", 2: "aborted"}
        return {
            "txn": num(s.txn), "epoch": num(s.pepoch), "ongoing": yes(s.ongoing),
            "outcomes": {f"T{t + 1}": names[num(s.outcome[t])] for t in range(self.T) if num(s.outcome[t])},
            "in_flight": [f"T{num(s.fl_txn[j])}@e{num(s.fl_epoch[j])}" for j in range(self.M) if yes(s.fl_on[j])],
            "partition_epoch": num(s.part_epoch),
            "records": [f"T{num(s.rec_txn[i])}:{names[num(s.rec_state[i])]}" for i in range(num(s.nrec))],
        }
