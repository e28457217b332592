"""``offline-partition`` on a real cluster: every replica of one partition down while the rest lives on.

The workload's topics are placed for it (:func:`draw_placement`, :func:`create_placed_topics`):
one replica per partition, round robin over the nodes in a drawn order, so that one node down leaves its
partitions without a leader while the internal topics (replicated on every node) keep their
coordinators. The fault (:func:`take_offline`) picks a partition, waits up to
``OPEN_WAIT_S`` for a transaction to be open there (a busy transactional cluster always has
one; the broker says so through KIP-664's DescribeProducers, where it serves it), kills (kill -9)
every node holding it, records when the partition has no leader any more (the controller
fences a node after its broker session), keeps it so for a drawn time, and restarts the nodes.
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
HOLD_S = (2.0, 10.0)  # how long the partition stays without a leader


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


def take_offline(n, placement: dict[str, list[int]]) -> bool:
    """One ``offline-partition`` fault through nemesis ``n`` (kafkacheck.conform.real_nemesis's
    _Nemesis); False when the run ended during it (the run's healing restarts the nodes)."""
    key = n.rng.choice(sorted(placement))
    names = [name for node in placement[key] if (name := process_name(n.target, node)) is not None]
    hold = round(n.rng.uniform(*HOLD_S), 2)
    if not names:
        raise RuntimeError(f"no process of kafkacheck's holds {key} (replicas {placement[key]})")
    open_since = _wait_open(n, key)
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
    return True


def _wait_open(n, key: str) -> int | None:
    """The first offset of a transaction open at ``key``, as its leader tells (None: none
    within OPEN_WAIT_S, or the broker does not serve DescribeProducers)."""
    if 61 not in n.target.apis:
        return None
    from kafka import KafkaAdminClient, TopicPartition

    topic, _, p = key.rpartition(":")
    tp = TopicPartition(topic, int(p))
    deadline = time.monotonic() + OPEN_WAIT_S
    admin = None
    try:
        admin = KafkaAdminClient(bootstrap_servers=n.target.bootstrap, request_timeout_ms=2000)
        while time.monotonic() < deadline and not n.stop.is_set():
            try:
                state = admin.describe_producers([tp]).get(tp)
            except Exception:
                state = None
            starts = [s.current_transaction_start_offset for s in (state.active_producers if state else [])
                      if s.current_transaction_start_offset >= 0]
            if starts:
                return min(starts)
            n.stop.wait(0.05)
    except Exception:
        return None
    finally:
        if admin is not None:
            admin.close()
    return None


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
