"""The fault vocabulary: every name ``--faults`` takes, in the simulator (``kafkacheck run``)
and on real brokers (``kafkacheck conform``), and what it does.

One name, one fault: a name both sides take (:data:`SHARED`) is the same fault on both;
where the two differ, so do their names. The simulator's ``kill`` crashes a node whose disk
keeps only what it flushed (a power loss, as a simulated disk has no page cache), which on a
real broker is ``lose-unflushed``; a real ``sigkill`` keeps the page cache, as the operating
system does. The simulator's ``partition`` cuts nodes off each other, as ``isolate`` and
``split`` do between the nodes of a spawned cluster, while the fault proxy's faults act on
the links of the clients, and say so (``client-partition``). A name of the other side gets a
one-line answer naming its counterpart (:func:`unknown`).
"""

from __future__ import annotations

SIMULATED: dict[str, str] = {
    "partition": "network partitions between nodes: isolate a node, split in halves, one-way links, a ring",
    "kill": "crash a node, losing what its disk had not flushed (a power loss), and restart it later",
    "pause": "pause a node (SIGSTOP) and resume it later with stale views",
    "disk": "torn write or corruption at a crash, disk full, or slow flush on one node",
    "clock-skew": "skew one node's clock by up to a few seconds",
    "loss": "reset connections: a fraction of messages lost, each with its connection (both ends told)",
    "duplicate": "deliver a fraction of messages twice (TCP never does)",
    "reorder": "let messages on one connection overtake each other (TCP never does)",
    "delay": "add latency to every message, between nodes and to clients",
    "straggle": "stall connections for seconds, past request timeouts, so that their clients retry on new "
                "ones that overtake them (a produce or EndTxn of one transaction landing in the next)",
    "offline-partition": "every replica of one partition of the workload's topics down (paused past its broker "
                         "session) while the rest of the cluster, its coordinators included, lives on, then "
                         "back; the workload's topics get one replica per partition for it",
}

REAL: dict[str, str] = {
    "sigkill": "kill -9 a broker process and restart it (the operating system keeps its page cache)",
    "pause": "pause a broker process (SIGSTOP) and resume it (SIGCONT)",
    "lose-unflushed": "a power loss: kill -9, the node's logs cut back to what it had flushed, restart",
    "client-partition": "the clients cut off a broker both ways (its fault proxy)",
    "client-one-way": "the clients cut off a broker in one direction",
    "client-delay": "the clients' traffic to a broker delayed by 300 ms",
    "client-drop": "the clients' open connections to a broker reset",
    "straggle": "one request of a drawn API held back while its client retries on a new connection, "
                "delivered late, once the next transaction of its producer has begun (KAFKA-17754's window)",
    "isolate": "the leader of a partition the workload writes cut off, first from the others' replication "
               "links, then from every other node (still reachable by clients)",
    "split": "a minority of the nodes cut off from the majority",
    "one-way-nodes": "a node's packets to the other nodes dropped",
    "lossy-nodes": "loss and duplicates between nodes",
    "slow-nodes": "slow links between nodes",
    "last-replica-standing": "KIP-966's schedule: a leader cut off from its followers' replication until its "
                             "ISR is itself alone, then its power lost, the network healed, and it restarted",
    "offline-partition": "every node holding one partition of the workload's topics killed (kill -9) while a "
                         "transaction is open there and the rest of the cluster, its coordinators included, lives "
                         "on; back once the partition was without a leader for a drawn time; the workload's topics "
                         "get one replica per partition, placed for it",
}

# the same fault on both sides
SHARED = frozenset({"pause", "straggle", "offline-partition"})

# a name of one side that the other side calls differently, and what to use there
_ON_REAL = {
    "kill": "on a real broker kill -9 keeps the page cache: sigkill; the simulator's kill, which loses "
            "what was not flushed, is lose-unflushed",
    "partition": "between the nodes of a spawned cluster: isolate or split; between clients and a broker: "
                 "client-partition",
    "delay": "client-delay (the clients' links) or slow-nodes (between nodes)",
    "loss": "lossy-nodes (between nodes)",
    "duplicate": "lossy-nodes (loss and duplicates between nodes)",
    "disk": "lose-unflushed (a power loss); disk faults are the simulator's",
    "clock-skew": "only the simulator skews clocks",
    "reorder": "only the simulator reorders messages",
}
_ON_SIMULATOR = {
    "sigkill": "the simulator's kill crashes a node that loses what it had not flushed",
    "lose-unflushed": "the simulator's kill (its disks keep only what was flushed)",
    "client-partition": "the simulator's partition (between nodes) or loss",
    "client-one-way": "the simulator's partition (one of its kinds is one-way)",
    "client-delay": "the simulator's delay",
    "client-drop": "the simulator's loss",
    "isolate": "the simulator's partition (one of its kinds isolates a node)",
    "split": "the simulator's partition (one of its kinds splits the nodes in halves)",
    "one-way-nodes": "the simulator's partition",
    "lossy-nodes": "the simulator's loss and duplicate",
    "slow-nodes": "the simulator's delay",
    "last-replica-standing": "kafkacheck run --template and the aimed nemeses of --swarm",
}


def unknown(name: str, real: bool) -> str:
    """The one-line answer to a fault name the side (``real``: kafkacheck conform) does not take."""
    known = REAL if real else SIMULATED
    counterpart = (_ON_REAL if real else _ON_SIMULATOR).get(name)
    if counterpart:
        return f"{name!r} is a fault of kafkacheck {'run' if real else 'conform'}: {counterpart}"
    return f"unknown fault {name!r}; known: {', '.join(known)}"
