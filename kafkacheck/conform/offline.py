"""``offline-partition`` on a real cluster: every replica of one partition down while the rest lives on.

The workload's topics are placed for it (:func:`draw_placement`, :func:`create_placed_topics`):
one replica per partition, round robin over the nodes in a drawn order, so that one node down leaves its
partitions without a leader while the internal topics (replicated on every node) keep their
coordinators. The fault (:func:`take_offline`) picks a partition, waiting up to
``OPEN_WAIT_S`` for one where a transaction is open whose coordinator (and the workload's
group coordinators) are on other nodes (a busy transactional cluster always has one; the broker
says so through KIP-664's DescribeProducers, ListTransactions and DescribeTransactions, where it
serves them), kills (kill -9) every node holding it, records when the partition has no leader
any more (the controller fences a node after its broker session), keeps it so for a drawn
time, and restarts the nodes; as soon as the partition has a leader again, the run's
hanging-transaction probe (:mod:`kafkacheck.conform.txn_probe`) watches it for ``WATCH_S``: a
transaction completed without its marker is open there from then until the producer's next
write there ends it, often within a second.
A commit whose transaction wrote the partition then finds it without a leader: Kafka 4.3.0 to
4.4.0 complete such a transaction without that partition's marker (KAFKA-20734).

kill -9 rather than a pause: a killed node's connections are refused at once, so the
transaction coordinator looks for the partition's leader again and again until the controller
has fenced the node; a paused node keeps its connections, and the markers sent to it before it
was fenced wait in its socket until it resumes (or until the coordinator's request timeout).
"""

from __future__ import annotations

import random
import time

OPEN_WAIT_S = 3.0  # how long the fault waits for a transaction open on its partition
HOLD_S = (1.0, 5.0)  # how long the partition stays without a leader
WATCH_S = 3.0  # how long the hanging-transaction probe watches the partition once it has a leader again


def draw_placement(rng: random.Random, topics: list[str], partitions: int, nodes: list[int]) -> dict[str, list[int]]:
    """Every partition of ``topics`` on one node, round robin over ``nodes`` in a drawn order (so
    that one node down takes as few partitions as it can): ``{"topic:p": [node]}``."""
    order = rng.sample(nodes, len(nodes))
    keys = [f"{t}:{p}" for t in topics for p in range(partitions)]
    return {key: [order[i % len(order)]] for i, key in enumerate(keys)}


def create_placed_topics(bootstrap: str, placement: dict[str, list[int]], configs: dict | None,
                         timeout_s: float) -> str | None:
    """Create the topics of ``placement`` with those replicas (CreateTopics with a manual
    assignment: no partition count or replication factor, as Kafka requires), through
    kafka-python's admin client whatever client the run uses; the error, or None."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    by_topic: dict[str, dict[int, list[int]]] = {}
    for key, replicas in placement.items():
        topic, _, p = key.rpartition(":")
        by_topic.setdefault(topic, {})[int(p)] = list(replicas)
    admin = None
    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000))
        admin.create_topics([NewTopic(t, -1, -1, replica_assignments=a, topic_configs=configs or {})
                             for t, a in sorted(by_topic.items())], timeout_ms=int(timeout_s * 1000))
    except Exception as e:
        return str(e) or type(e).__name__
    finally:
        if admin is not None:
            admin.close()
    return None


def process_name(target, node_id: int) -> str | None:
    """The name of node ``node_id``'s process (``kafka-N`` or ``broker-N``)."""
    for name in (f"kafka-{node_id}", f"broker-{node_id}"):
        if name in target.processes:
            return name
    return None


def take_offline(n, placement: dict[str, list[int]], groups: tuple[str, ...] = ()) -> bool:
    """One ``offline-partition`` fault through nemesis ``n`` (kafkacheck.conform.real_nemesis's
    _Nemesis); False when the run ended during it (the run's healing restarts the nodes).
    ``groups``: the consumer groups of the workload, whose coordinators live on too."""
    key, open_since = _choose(n, placement, groups)
    names = [name for node in placement[key] if (name := process_name(n.target, node)) is not None]
    hold = round(n.rng.uniform(*HOLD_S), 2)
    if not names:
        raise RuntimeError(f"no process of kafkacheck's holds {key} (replicas {placement[key]})")
    value = {"partition": key, "nodes": names, "how": "kill", "hold_s": hold,
             "open_transaction": open_since is not None,
             **({"open_since_offset": open_since} if open_since is not None else {})}
    n.apply("offline-partition", value, lambda: [n.procs[name].kill() for name in names])
    n.note("offline-partition", ",".join(names), partition=key, open_transaction=open_since is not None)
    took = _wait_leaderless(n, key, n.session + 30.0)
    if n.stop.is_set():
        return False
    n.h.op("nemesis", "info", "offline-partition", {"partition": key, "nodes": names, "step": "leaderless"
                                                    if took is not None else "still-led",
                                                    **({"after_s": round(took, 2)} if took is not None else {})})
    if n.stop.wait(hold):
        return False
    for name in names:
        n.apply("restart", {"nodes": [name]}, n.procs[name].start)
        n.note("restart", name)
    if n.probe is not None and _wait_led(n, key, 60.0):
        n.probe.watch([key], WATCH_S, n.stop)
    return True


def _choose(n, placement: dict[str, list[int]], groups: tuple[str, ...]) -> tuple[str, int | None]:
    """The partition to take offline, and the first offset of a transaction open there: within
    OPEN_WAIT_S, the first partition (in a drawn order) found with a transaction open whose
    coordinator, and the workload's group coordinators, are on other nodes; else one with any
    transaction open; else the first drawn (None: the broker told of no open transaction, or does
    not serve KIP-664's DescribeProducers, ListTransactions and DescribeTransactions). Every
    producer's coordinator and every partition's leader are looked up first, and only the
    partitions where such a transaction can be are asked, each with one request, so that the
    fault strikes within milliseconds of the transaction's first write there: a transaction is
    open for little longer."""
    from kafkacheck.conform.txn_probe import TxnView, probe_unavailable

    keys = n.rng.sample(sorted(placement), len(placement))
    if probe_unavailable(n.target.apis) is not None:
        return keys[0], None
    view = TxnView(n.target.bootstrap, sorted({b for r in placement.values() for b in r}), 2.0)
    second: tuple[str, int] | None = None
    try:
        busy = {c for g in groups if (c := view.group_coordinator(g)) is not None}
        coordinators = {pid: d.coordinator for pid, (_t, d) in view.owners(None).items()}  # producer id -> node
        nodes, leaders = view.leaders(sorted({k.rpartition(":")[0] for k in keys}))
        # the partitions a transaction of some producer could be struck at, and their leaders
        where = {k: nodes[leaders[k]] for k in keys if leaders.get(k, -1) in nodes
                 and not busy & set(placement[k]) and set(coordinators.values()) - set(placement[k])}
        deadline = time.monotonic() + OPEN_WAIT_S
        while where and time.monotonic() < deadline and not n.stop.is_set():
            for key, address in where.items():
                for pid, (_epoch, start) in view.producers_at(key, address).items():
                    if pid in coordinators and coordinators[pid] not in placement[key]:
                        return key, start
                    second = second or (key, start)
    except Exception:
        pass
    return second if second is not None else (keys[0], None)


def _wait_led(n, key: str, timeout_s: float) -> bool:
    """Whether ``key`` has a leader again within ``timeout_s`` (polled every 20 ms)."""
    from kafkacheck.conform.targets import parse_bootstrap
    from kafkacheck.serve import partition_states

    topic, _, p = key.rpartition(":")
    end = time.monotonic() + timeout_s
    while time.monotonic() < end and not n.stop.wait(0.02):
        for host, port in parse_bootstrap(n.target.bootstrap):
            try:
                states = partition_states(host, port, topic)
            except Exception:
                continue
            if states.get(int(p), (-1,))[0] >= 0:
                return True
            break
    return False


def _wait_leaderless(n, key: str, timeout_s: float) -> float | None:
    """Seconds until the cluster's metadata shows ``key`` without a leader (None: not within
    ``timeout_s``, or the run ended)."""
    from kafkacheck.conform.targets import parse_bootstrap
    from kafkacheck.serve import partition_states

    topic, _, p = key.rpartition(":")
    start = time.monotonic()
    while time.monotonic() - start < timeout_s and not n.stop.wait(0.2):
        for host, port in parse_bootstrap(n.target.bootstrap):
            try:
                states = partition_states(host, port, topic)
            except Exception:
                continue
            if int(p) in states and states[int(p)][0] < 0:
                return time.monotonic() - start
            break
    return None
