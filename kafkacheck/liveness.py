"""The liveness phase of a run: after every fault is healed, the cluster must converge.

Safety checkers judge what the clients saw; a cluster can also fail by never getting
anywhere: a partition left without a leader or with a follower that never catches up, a
transaction that stays open (its records hidden from read_committed readers for ever), a
consumer group that never settles. With every node up and the network whole, Kafka promises
all three end within bounded time (replica.lag.time.max.ms, transaction.timeout.ms, the
rebalance timeout). :func:`unconverged` says what has not converged yet; the runner polls it
for ``liveness_ms`` of virtual time after healing and records what is left as
``liveness-violation`` events, which the verdict counts as the ``liveness`` anomaly.
"""

from __future__ import annotations

from reference.broker import Broker
from reference.controller import Controller
from reference.group_state import COMPLETING, PREPARING
from reference.txn_metadata import ONGOING, PREPARE_ABORT, PREPARE_COMMIT


def unconverged(controller: Controller | None, brokers: dict[int, Broker]) -> list[dict]:
    """What keeps the cluster from having converged, one dict per finding (empty: converged).
    Only meaningful when every node runs and the network is healed."""
    out: list[dict] = []
    if controller is None:
        return [{"what": "controller", "key": "", "detail": "the controller is not running"}]
    for tp, s in sorted(controller.partitions.items()):
        live = [r for r in s.replicas if r in brokers]
        if s.leader < 0:
            out.append({"what": "partition-offline", "key": tp.key,
                        "detail": f"no leader (ISR {list(s.isr)}, replicas {list(s.replicas)})"})
            continue
        if set(s.isr) != set(live):
            out.append({"what": "isr-not-full", "key": tp.key,
                        "detail": f"ISR {sorted(s.isr)} of live replicas {sorted(live)}"})
        leader = brokers.get(s.leader)
        p = leader.partitions.get(tp) if leader is not None else None
        if p is None or not p.is_leader or p.leader_epoch != s.leader_epoch:
            out.append({"what": "leader-unaware", "key": tp.key,
                        "detail": f"broker {s.leader} does not lead epoch {s.leader_epoch}"})
            continue
        log = p.log
        if log.high_watermark != log.log_end_offset:
            out.append({"what": "high-watermark-behind", "key": tp.key,
                        "detail": f"leader HW {log.high_watermark} < LEO {log.log_end_offset}"})
        for r in live:
            f = brokers[r].partitions.get(tp)
            if r != s.leader and (f is None or f.log.log_end_offset != log.log_end_offset):
                out.append({"what": "replica-behind", "key": tp.key,
                            "detail": f"replica {r} ends at "
                                      f"{f.log.log_end_offset if f else 'nothing'}, the leader at "
                                      f"{log.log_end_offset}"})
        opens = log.producer_state.open_transactions()
        if opens:
            out.append({"what": "transaction-open", "key": tp.key,
                        "detail": f"producers {sorted(opens)} still have open transactions here "
                                  f"(last stable offset {p.last_stable_offset()})"})
    for b in brokers.values():
        for txn_id, meta in sorted(b.txn.txns.items()):
            if meta.state in (ONGOING, PREPARE_COMMIT, PREPARE_ABORT):
                out.append({"what": "transaction-unfinished", "key": txn_id,
                            "detail": f"coordinator {b.node_id} holds it in state {meta.state}"})
        for group, g in sorted(b.groups.groups.items()):
            if g.state in (PREPARING, COMPLETING):
                out.append({"what": "group-unsettled", "key": group,
                            "detail": f"coordinator {b.node_id}: {g.state} in generation "
                                      f"{g.generation} with {len(g.members)} member(s)"})
            modern = g.modern.state() if g.modern is not None else "Empty"
            if modern not in ("Empty", "Stable"):
                out.append({"what": "group-unsettled", "key": group,
                            "detail": f"coordinator {b.node_id}: consumer group {modern} at group epoch "
                                      f"{g.modern.group_epoch} with {len(g.modern.members)} member(s)"})
    return out
