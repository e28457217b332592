"""The broker's own view of a run's transactions: hanging transactions as KIP-664 defines them.

While a transactional workload runs (and through the final read), :class:`TxnProbe` asks the
broker every ``INTERVAL_S``, with requests of its own (kafka-python's protocol classes, whatever
client the run uses; :class:`TxnView`):

1. each partition's leader, which producer ids have a transaction open there and since which
   offset (DescribeProducers: ``current_txn_start_offset``);
2. the coordinators, which transactional id each of those producer ids belongs to
   (ListTransactions) and what that transaction is (DescribeTransactions: its state and the
   partitions it still has to write markers to);
3. the leaders again: a transaction still open since the same offset is recorded, with what
   its coordinator said in between (``open_transactions`` in run.json's ``config.txn_probe``).

It records what the broker said; the checker's ``hanging-transaction`` (properties/txn_checks.py)
judges it beside the history: a transaction open at a partition that its coordinator no longer
has there (complete, or on without it), or open since the first record of a transaction whose
end was acknowledged before the coordinator was asked while the coordinator had moved on to a
later one, never got its marker there. A coordinator names a transaction complete, and begins
the producer's next one, only after every marker was acknowledged, and a partition's open
transaction starts at a new offset once a marker closed it, so the leader's second answer
cannot be a transaction merely slow to end. When the nemesis takes a partition offline
(``offline-partition``) it has the probe watch that partition as it gets its leader back
(:meth:`TxnProbe.watch`). Brokers that do not serve the three APIs are not probed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

INTERVAL_S = 1.0
SEEN_MAX = 50  # what the coordinator said of one open transaction, at most this many times
APIS = {61: "DescribeProducers", 65: "DescribeTransactions", 66: "ListTransactions"}


def probe_unavailable(apis: dict[int, tuple[int, int]]) -> str | None:
    """Why a broker advertising ``apis`` cannot be probed (None: it can)."""
    missing = [name for key, name in APIS.items() if key not in apis]
    return f"the broker does not serve {', '.join(missing)}" if missing else None


@dataclass(frozen=True)
class TxnState:
    """What a coordinator said of a transactional id (DescribeTransactions)."""

    state: str
    producer_epoch: int
    partitions: frozenset[str]  # "topic:p", the partitions whose markers it still has to write
    coordinator: int


class TxnView:
    """What the broker says of its transactions: every question one request on a fresh
    connection to the node that answers it (the leader, the coordinator), found through a
    Metadata or FindCoordinator request of its own, so that a node that went down and came back
    is asked as soon as it answers (a long-lived admin client keeps its picture of the cluster)."""

    def __init__(self, bootstrap: str, brokers: list[int], timeout_s: float = 5.0) -> None:
        self.bootstrap, self.brokers, self.timeout_s = bootstrap, brokers, timeout_s

    def _ask(self, host: str, port: int, request, response_class):
        from reference.server.protocol import round_trip

        return round_trip(host, port, request, response_class, "kafkacheck-probe", self.timeout_s)

    def leaders(self, topics: list[str]) -> tuple[dict[int, tuple[str, int]], dict[str, int]]:
        """(node id -> (host, port), "topic:p" -> its leader's node id)."""
        return self._metadata(topics)

    def producers_at(self, key: str, address: tuple[str, int]) -> dict[int, tuple[int, int]]:
        """One DescribeProducers of ``key`` ("topic:p") to the node at ``address``: producer id ->
        (epoch, first offset of its open transaction); empty when it does not answer."""
        from kafka.protocol.admin import DescribeProducersRequest, DescribeProducersResponse

        topic, _, p = key.rpartition(":")
        request = DescribeProducersRequest[0](topics=[DescribeProducersRequest.TopicRequest(
            name=topic, partition_indexes=[int(p)])])
        try:
            resp = self._ask(*address, request, DescribeProducersResponse)
        except Exception:
            return {}
        return {a.producer_id: (a.producer_epoch, a.current_txn_start_offset)
                for t in resp.topics for q in t.partitions if q.error_code == 0
                for a in q.active_producers if a.current_txn_start_offset >= 0}

    def _metadata(self, topics: list[str]):
        """(node id -> (host, port), "topic:p" -> leader) from the first node that answers."""
        from kafka.protocol.metadata import MetadataRequest, MetadataResponse

        from kafkacheck.conform.targets import parse_bootstrap

        for host, port in parse_bootstrap(self.bootstrap):
            try:
                resp = self._ask(host, port, MetadataRequest[1](topics=topics), MetadataResponse)
            except Exception:
                continue
            nodes = {b.node_id: (b.host, b.port) for b in resp.brokers}
            leaders = {f"{t.name}:{q.partition_index}": q.leader_id for t in resp.topics for q in t.partitions}
            return nodes, leaders
        raise ConnectionError(f"no node of {self.bootstrap} answered Metadata")

    def open(self, keys: list[str]) -> dict[str, dict[int, tuple[int, int]]]:
        """Per partition ("topic:p", each leader asked alone, so that one without a leader does
        not hide the others): producer id -> (epoch, first offset of its open transaction)."""
        out: dict[str, dict[int, tuple[int, int]]] = {}
        for key, pid, epoch, start in self._each(keys):
            out.setdefault(key, {})[pid] = (epoch, start)
        return out

    def _each(self, keys: list[str]):
        nodes, leaders = self._metadata(sorted({k.rpartition(":")[0] for k in keys}))
        for key in keys:
            if leaders.get(key, -1) in nodes:
                for pid, (epoch, start) in self.producers_at(key, nodes[leaders[key]]).items():
                    yield key, pid, epoch, start

    def owners(self, pids: set[int] | None) -> dict[int, tuple[str, TxnState]]:
        """producer id -> (transactional id, what its coordinator says of it), for ``pids``
        (None: every producer id the coordinators know)."""
        from kafka.protocol.admin import ListTransactionsRequest, ListTransactionsResponse

        nodes, _ = self._metadata([])
        ids: dict[int, str] = {}
        for node in sorted(nodes):  # each its own request: a node down hides only its coordinators
            try:
                resp = self._ask(*nodes[node], ListTransactionsRequest[0](state_filters=[], producer_id_filters=sorted(
                    pids or ())), ListTransactionsResponse)
            except Exception:
                continue
            if resp.error_code == 0:
                ids.update((t.producer_id, t.transactional_id) for t in resp.transaction_states)
        described = {i: d for i in sorted(set(ids.values())) if (d := self.describe(i)) is not None}
        return {pid: (txn_id, described[txn_id]) for pid, txn_id in ids.items() if txn_id in described}

    def describe(self, txn_id: str) -> TxnState | None:
        """What ``txn_id``'s coordinator says of it (None: no answer)."""
        from kafka.protocol.admin import DescribeTransactionsRequest, DescribeTransactionsResponse

        found = self._coordinator(txn_id, 1)
        if found is None:
            return None
        node, host, port = found
        try:
            resp = self._ask(host, port, DescribeTransactionsRequest[0](transactional_ids=[txn_id]),
                             DescribeTransactionsResponse)
        except Exception:
            return None
        for t in resp.transaction_states:
            if t.error_code == 0 and t.transactional_id == txn_id:
                return TxnState(t.transaction_state, t.producer_epoch,
                                frozenset(f"{d.topic}:{q}" for d in t.topics for q in d.partitions), node)
        return None

    def coordinator(self, key: str, key_type: int) -> int | None:
        """The node id of the coordinator of a group (``key_type`` 0) or transactional id (1)."""
        found = self._coordinator(key, key_type)
        return found[0] if found is not None else None

    def group_coordinator(self, group: str) -> int | None:
        return self.coordinator(group, 0)

    def _coordinator(self, key: str, key_type: int) -> tuple[int, str, int] | None:
        from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

        from kafkacheck.conform.targets import parse_bootstrap

        for host, port in parse_bootstrap(self.bootstrap):
            try:
                resp = self._ask(host, port, FindCoordinatorRequest[2](key=key, key_type=key_type),
                                 FindCoordinatorResponse)
            except Exception:
                continue
            if resp.error_code == 0:
                return resp.node_id, resp.host, resp.port
        return None


class TxnProbe:
    """Watches the transactions open at ``keys`` ("topic:p") until stopped: :attr:`opened`, one
    entry per partition, producer id and first offset, with what the coordinator said each time
    (``seen``: ``[first asked ns, asked again ns, coordinator state, whether the coordinator
    still had that partition in the transaction]``, an item when that changed or a second went by)."""

    def __init__(self, bootstrap: str, keys: list[str], brokers: list[int], clock: Callable[[], int],
                 timeout_s: float = 5.0) -> None:
        self.view = TxnView(bootstrap, brokers, timeout_s)
        self.keys, self.clock = keys, clock
        self.opened: dict[tuple[str, int, int], dict] = {}
        self.looks = 0
        self.errors = 0
        self.last_error: str | None = None
        self._lock = threading.Lock()  # the probe's thread and the nemesis's (watch) both look

    def run(self, stop: threading.Event) -> None:
        """Look every INTERVAL_S until ``stop``; errors (a node down, a leader moving) are
        counted, and the next look tries again."""
        while not stop.wait(INTERVAL_S):
            self._look_counted(None)

    def watch(self, keys: list[str], seconds: float, stop: threading.Event) -> None:
        """Look at ``keys`` again and again for ``seconds`` (the nemesis, as a partition it took
        offline gets its leader back: a transaction the coordinator completed without the
        partition's marker is open there from then until the producer's next write there ends
        it, often within a second)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not stop.wait(0.02):
            self._look_counted(keys)

    def _look_counted(self, keys: list[str] | None) -> None:
        try:
            self.look(keys)
            self.looks += 1
        except Exception as e:
            self.errors += 1
            self.last_error = f"{type(e).__name__}: {e}"[:200]

    def summary(self) -> dict:
        with self._lock:
            opened = [self.opened[k] for k in sorted(self.opened)]
        return {"interval_s": INTERVAL_S, "looks": self.looks, "errors": self.errors,
                **({"last_error": self.last_error} if self.last_error else {}), "open_transactions": opened}

    def look(self, keys: list[str] | None = None) -> None:
        """One look: the open transactions, their coordinators' word, and the open ones again
        (only a transaction still open since the same offset after the coordinator answered is
        recorded)."""
        first_ns = self.clock()
        opened = self.view.open(keys or self.keys)
        if not opened:
            return
        owners = self.view.owners({pid for per in opened.values() for pid in per})
        again = self.view.open(sorted(opened))
        last_ns = self.clock()
        for key, per in sorted(opened.items()):
            for pid, (epoch, start) in sorted(per.items()):
                if again.get(key, {}).get(pid, (None, None))[1] == start and pid in owners:
                    self._record(key, pid, epoch, start, owners[pid], first_ns, last_ns)

    def _record(self, key: str, pid: int, epoch: int, start: int, owner: tuple[str, TxnState], first_ns: int,
                last_ns: int) -> None:
        txn_id, desc = owner
        item = [first_ns, last_ns, desc.state, key in desc.partitions]
        with self._lock:
            entry = self.opened.setdefault((key, pid, start), {
                "partition": key, "producer_id": pid, "producer_epoch": epoch, "start_offset": start,
                "transactional_id": txn_id, "seen": []})
            seen = entry["seen"]
            if seen and seen[-1][2:] == item[2:] and first_ns - seen[-1][0] < 1e9:
                return
            if len(seen) >= SEEN_MAX:
                seen.pop()  # the first ones and the latest stay
            seen.append(item)
