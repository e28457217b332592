"""Workloads: client processes that run operations and record them as history.

Each module holds one workload's clients and its :class:`~kafkacheck.workloads.base.Workload`
(what :func:`kafkacheck.runner.simulate` asks of it); :data:`WORKLOADS` lists them, in the
order the command line shows them; which of them join a consumer group, and the group
protocols and assignors that go with them (:func:`group_options_conflict`, run's and
conform's), is here too. What every client shares is in :mod:`~kafkacheck.workloads.client`.

What the clients share (``client``, ``actors``, ``rules``, ``base``, ``eos_values``) and the
queue workload's client (``queue_client``, which the others extend) are compiled with the
engine (:mod:`reference.compiled`); the other workloads' own modules are not yet, as each holds
its Hypothesis machine too, whose rules Hypothesis cannot decorate once compiled. The comments
on what mypyc cannot compile in those modules are for when the machines move out.
"""

import reference  # noqa: F401  (first: reference.compiled's finder; what the clients share is compiled with the engine)
from kafkacheck.workloads.at_most_once import AtMostOnceWorkload
from kafkacheck.workloads.base import Setup, Workload
from kafkacheck.workloads.compaction import CompactionWorkload
from kafkacheck.workloads.eos import EosWorkload
from kafkacheck.workloads.groups import GroupsWorkload
from kafkacheck.workloads.queue import IdempotentWorkload, QueueWorkload
from kafkacheck.workloads.share import ShareCommittedWorkload, ShareWorkload
from kafkacheck.workloads.txn import TxnWorkload
from reference.assignors import ASSIGNORS, SERVER_ASSIGNORS

WORKLOADS: dict[str, type[Workload]] = {w.name: w for w in (
    QueueWorkload, IdempotentWorkload, TxnWorkload, EosWorkload, GroupsWorkload, CompactionWorkload,
    AtMostOnceWorkload, ShareWorkload, ShareCommittedWorkload)}
TXN_WORKLOADS = tuple(name for name, w in WORKLOADS.items() if w.transactional)
# workloads whose producers are idempotent (Kafka then requires acks=all)
IDEMPOTENT_WORKLOADS = tuple(name for name, w in WORKLOADS.items() if w.idempotent)
GROUP_WORKLOADS = ("groups", "at-most-once")  # the workloads whose members join a consumer group
# also eos, whose processors (run's simulated ones, conform's real ones) join one when
# --group-protocol is given (without it they assign themselves their partitions)
RUN_GROUP_WORKLOADS = (*GROUP_WORKLOADS, "eos")


def group_options_conflict(workload: str, protocol: str | None, assignor: str,
                           workloads: tuple[str, ...] = GROUP_WORKLOADS) -> str | None:
    """The one-line refusal of a group protocol and assignor that do not go together (or go
    with a workload whose clients join no group), or None; run's and conform's. ``protocol``
    None: not given (classic); ``workloads`` beyond :data:`GROUP_WORKLOADS` join a group only
    when it is given (run's eos)."""
    joins = workload in (workloads if protocol is not None else GROUP_WORKLOADS)
    protocol = protocol or "classic"
    if protocol == "consumer" and not joins:
        names = ", ".join(workloads[:-1]) + " and " + workloads[-1]
        return (f"--group-protocol consumer goes with the {names} workloads: the "
                f"{workload} workload's clients do not join a consumer group")
    known = SERVER_ASSIGNORS if protocol == "consumer" else ASSIGNORS
    if joins and assignor not in known:
        return (f"--assignor {assignor} is not an assignor of the {protocol} protocol; "
                f"choose from {', '.join(known)}")
    return None


__all__ = ["GROUP_WORKLOADS", "IDEMPOTENT_WORKLOADS", "RUN_GROUP_WORKLOADS", "TXN_WORKLOADS", "WORKLOADS", "Setup",
           "Workload", "group_options_conflict"]
