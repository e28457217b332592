"""What KIP-848's consumer groups promise beyond the classic protocol's, judged from the
members' rebalance logs (``groups.protocol == "consumer"``).

In the consumer protocol a member's epoch is its own (each member reaches the target
assignment's epoch when it has revoked what it must), so the classic checks that compare
generations across members do not apply (:mod:`properties.group_checks` skips them). What
the coordinator promises instead: a partition is given to a new owner only after its
previous owner released it, by acknowledging its revocation or by leaving the group (fenced,
expired, gone). From the clients:

* ``assigned-before-released``: process Q reported owning partition k (the completion of
  the op whose rebalance log assigned it, Q still holding it then) before process P, which
  had owned k since before that, revoked k cleanly, and that revocation came after Q's
  report (it is in the log of P's op after the one that took P's log last, itself completed
  after Q's report: a member logs a revocation when it makes it, its next poll reports it),
  and P went on as the same member (after the revocation its log reaches an assignment at a
  newer epoch than the revocation's before any loss of its partitions: a member that
  completes a revocation only after the coordinator removed it, as one paused in its
  revocation callback past its session, logs the loss next), and Q was given k at a newer
  epoch than P (a partition's owners get it at rising epochs: Q's grant came after P's; a
  member that reports it later from an older epoch is a member the coordinator had removed,
  which still thought it owned k): the coordinator handed k over while its owner still held
  it and was still a member.

* ``fenced-commit`` (where each commit records the member epoch its request carried,
  ``groups.commit_epochs == "sent"``: the simulator's members): process P's commit of
  partition k at member epoch e was accepted, although it was sent after another process
  reported owning k at a newer epoch. The coordinator gives k to a new owner only once P
  released it, by acknowledging its revocation (P then holds k no more: an older epoch may
  commit only partitions held since, KIP-1251) or by leaving the group (fenced, expired: its
  member is unknown): either way it must refuse the commit. With real clients the recorded
  epoch is the client's when the commit was invoked, and the Java client retries a commit
  with a newer one, so it is not judged there.

* ``rejoin-fenced``: a member's join with epoch 0 (its log's loss while its epoch was 0) was
  refused with FENCED_MEMBER_EPOCH: a member may always rejoin with epoch 0 and its member id
  (KAFKA-19233: a fenced member was kept out until its session ran out, 45 s by default).

A member that learns it was fenced logs its partitions as lost (``"lost"``), with or
without partitions to lose; such a release is not clean, and a member that was still a
zombie when another got its partition is allowed (the coordinator had removed it).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

INF = float("inf")
# the ops that take a member's rebalance log (txn: the eos workload's processors in a group)
_DRAINS = ("poll", "subscribe", "txn")


def check_consumer_protocol(completions: list[dict], invokes: dict[int, dict], add,
                            commit_epochs: str | None = None) -> None:
    """Report ``assigned-before-released``, ``rejoin-fenced`` and (``commit_epochs == "sent"``)
    ``fenced-commit`` through ``add(kind, **evidence)``."""
    _rejoins_fenced(completions, add)
    if commit_epochs == "sent":
        _commits_after_handover(completions, invokes, add)
    holds: dict[str, list[dict]] = defaultdict(list)  # key -> spells of ownership
    open_: dict[tuple[Any, str], dict] = {}
    entries: dict[Any, list[tuple[str, bool, int]]] = defaultdict(list)  # process -> (type, lost, epoch)
    drained: dict[Any, float] = {}  # process -> when an op last took its rebalance log
    for o in completions:
        p = o["process"]
        # what an op's log says happened after the log was last taken (a poll or a subscribe:
        # a member logs its revocations as they happen, an op reports them later)
        since_drained = drained.get(p, -INF)
        if o["f"] in _DRAINS:
            drained[p] = o["time"]
        if o["f"] == "crash" or (o["f"] == "subscribe" and o["type"] == "ok"):
            for key in [k for (q, k) in open_ if q == p]:
                open_.pop((p, key)).update(end="gone", released_after=invokes.get(o["index"], o)["time"])
            entries[p].append(("gone", True, -1))
            continue
        for e in o.get("rebalance_log") or []:
            lost = bool(e.get("lost"))
            entries[p].append((e.get("type", ""), lost, e.get("generation", -1)))
            if e.get("type") == "revoked":
                for k in map(str, e.get("keys", [])):
                    spell = open_.pop((p, k), None)
                    if spell is not None:
                        spell.update(end="lost" if lost else "revoked", end_op=o["index"],
                                     end_at=len(entries[p]) - 1, released_after=since_drained)
            elif e.get("type") == "assigned":
                for k in map(str, e.get("owned", e.get("keys", []))):
                    if (p, k) not in open_:
                        spell = {"process": p, "key": k, "since": o["time"], "op": o["index"], "end": None,
                                 "released_after": INF, "epoch": e.get("generation", -1)}
                        open_[(p, k)] = spell
                        holds[k].append(spell)
    for k, spells in sorted(holds.items()):
        for old in spells:
            if old["end"] != "revoked" or not _went_on(entries[old["process"]], old["end_at"]):
                continue
            for new in spells:
                # each surely held it from the completion of the op that reported it to the
                # invocation of the op that reported its end (nothing, within one op)
                if (new["process"] != old["process"] and old["since"] < new["since"] < old["released_after"]
                        and new["since"] < new["released_after"] and new["epoch"] > old["epoch"]):
                    add("assigned-before-released", key=k, ops=[old["op"], new["op"], old["end_op"]],
                        explanation=f"process {new['process']} owned {k} (op {new['op']}) while process "
                                    f"{old['process']}, its owner since op {old['op']}, had not released it: "
                                    f"it revoked {k} in op {old['end_op']}, invoked after that, and stayed "
                                    f"in the group")


def _went_on(log: list[tuple[str, bool, int]], at: int) -> bool:
    """Whether the member's log after its revocation (entry ``at``) reaches an assignment at
    a newer epoch before a loss: the coordinator took the acknowledgement from a member
    (the same reconciliation's own assignment, at the revocation's epoch, is no evidence)."""
    epoch = log[at][2]
    for kind, lost, e in log[at + 1:]:
        if lost or kind == "gone":
            return False
        if kind == "assigned" and e > epoch:
            return True
    return False


def _commits_after_handover(completions: list[dict], invokes: dict[int, dict], add) -> None:
    grants: dict[str, list[tuple[float, int, Any, int]]] = defaultdict(list)  # key -> (time, epoch, process, op)
    for o in completions:
        for e in o.get("rebalance_log") or []:
            if e.get("type") == "assigned":
                for k in map(str, e.get("owned", e.get("keys", []))):
                    grants[k].append((o["time"], e.get("generation", -1), o["process"], o["index"]))
    for o in completions:
        epoch = o.get("generation")
        if o["f"] != "commit" or o["type"] != "ok" or not isinstance(epoch, int) or epoch <= 0:
            continue
        sent = invokes.get(o["index"], o)["time"]
        for k in sorted(map(str, o.get("value") or {})):
            newer = next(((t, g, p, op) for t, g, p, op in grants[k]
                          if t < sent and g > epoch and p != o["process"]), None)
            if newer is not None:
                _t, g, p, op = newer
                add("fenced-commit", key=k, generation=epoch, newer=g, ops=[op, o["index"]],
                    explanation=f"process {o['process']} committed {k} with member epoch {epoch} (op {o['index']}), "
                                f"sent after process {p} had reported owning {k} at epoch {g} (op {op}): the "
                                f"coordinator accepted a commit from a member that had released {k} or been fenced")
                break


def _rejoins_fenced(completions: list[dict], add) -> None:
    refused: dict[Any, list[int]] = defaultdict(list)  # process -> the ops whose logs have one
    for o in completions:
        for e in o.get("rebalance_log") or []:
            if e.get("lost") == "FENCED_MEMBER_EPOCH" and e.get("generation") == 0:
                refused[o["process"]].append(o["index"])
    for p, ops in sorted(refused.items(), key=lambda kv: kv[1][0]):
        add("rejoin-fenced", key=None, process=p, refusals=len(ops), ops=sorted(set(ops))[:10],
            explanation=f"process {p} joined again with member epoch 0 and was refused FENCED_MEMBER_EPOCH "
                        f"({len(ops)} time(s), first in op {ops[0]}): a member may always rejoin with epoch 0 "
                        f"(KAFKA-19233)")
