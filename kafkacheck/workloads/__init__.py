"""Workloads: client processes that run operations and record them as history.

Each module holds one workload's clients and its :class:`~kafkacheck.workloads.base.Workload`
(what :func:`kafkacheck.runner.simulate` asks of it); :data:`WORKLOADS` lists them, in the
order the command line shows them. What every client shares is in
:mod:`~kafkacheck.workloads.client`.
"""

from kafkacheck.workloads.at_most_once import AtMostOnceWorkload
from kafkacheck.workloads.base import Setup, Workload
from kafkacheck.workloads.compaction import CompactionWorkload
from kafkacheck.workloads.eos import EosWorkload
from kafkacheck.workloads.groups import GroupsWorkload
from kafkacheck.workloads.queue import IdempotentWorkload, QueueWorkload
from kafkacheck.workloads.share import ShareCommittedWorkload, ShareWorkload
from kafkacheck.workloads.txn import TxnWorkload

WORKLOADS: dict[str, type[Workload]] = {w.name: w for w in (
    QueueWorkload, IdempotentWorkload, TxnWorkload, EosWorkload, GroupsWorkload, CompactionWorkload,
    AtMostOnceWorkload, ShareWorkload, ShareCommittedWorkload)}
TXN_WORKLOADS = tuple(name for name, w in WORKLOADS.items() if w.transactional)
# workloads whose producers are idempotent (Kafka then requires acks=all)
IDEMPOTENT_WORKLOADS = tuple(name for name, w in WORKLOADS.items() if w.idempotent)

__all__ = ["IDEMPOTENT_WORKLOADS", "TXN_WORKLOADS", "WORKLOADS", "Setup", "Workload"]
