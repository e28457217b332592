"""The broker's own view of a run's transactions: hanging transactions as KIP-664 defines them.

While a transactional workload runs (and through the final read), :class:`TxnProbe` asks the
broker every ``INTERVAL_S``, with requests of its own (kafka-python's protocol classes, whatever
client the run uses; :class:`TxnView`):

1. each partition's leader, which producer ids have a transaction open there and since which
   offset (DescribeProducers: ``current_txn_start_offset``);
2. the coordinators, which transactional id each of those producer ids belongs to
   (ListTransactions) and what that transaction is (DescribeTransactions: its state and the
   partitions it still has pending);
3. for every open transaction its coordinator does not have pending at that partition (Empty,
   CompleteCommit, CompleteAbort, or Ongoing or Prepare* without it), the leader again: if it
   still has the transaction open since the same offset, that is a *sighting* of a hanging
   transaction. A coordinator names a transaction complete only after every marker was
   acknowledged, and a partition's open transaction starts a new offset once its marker closed
   it, so the second answer cannot be a transaction that was merely slow to end.

The sightings (one per partition and first offset, with the time, producer id and epoch, the
transactional id and what the coordinator said) go to run.json's ``config.txn_probe``, where
the checker's ``hanging-transaction`` (properties/txn_checks.py) reads them. Brokers that do not
serve the three APIs are not probed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

INTERVAL_S = 1.0
APIS = {61: "DescribeProducers", 65: "DescribeTransactions", 66: "ListTransactions"}
PENDING = ("Ongoing", "PrepareCommit", "PrepareAbort")


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

    def each_open(self, keys: list[str]):
        """(key, producer id, first offset) of each open transaction, partition by partition in
        the order of ``keys``, as each leader answers."""
        for key, pid, _epoch, start in self._each(keys):
            yield key, pid, start

    def _each(self, keys: list[str]):
        from kafka.protocol.admin import DescribeProducersRequest, DescribeProducersResponse

        nodes, leaders = self._metadata(sorted({k.rpartition(":")[0] for k in keys}))
        for key in keys:
            topic, _, p = key.rpartition(":")
            if leaders.get(key, -1) not in nodes:
                continue
            request = DescribeProducersRequest[0](topics=[DescribeProducersRequest.TopicRequest(
                name=topic, partition_indexes=[int(p)])])
            try:
                resp = self._ask(*nodes[leaders[key]], request, DescribeProducersResponse)
            except Exception:
                continue
            for t in resp.topics:
                for q in t.partitions:
                    for a in (q.active_producers if q.error_code == 0 else []):
                        if a.current_txn_start_offset >= 0:
                            yield key, a.producer_id, a.producer_epoch, a.current_txn_start_offset

    def owners(self, pids: set[int]) -> dict[int, tuple[str, TxnState]]:
        """producer id -> (transactional id, what its coordinator says of it)."""
        from kafka.protocol.admin import ListTransactionsRequest, ListTransactionsResponse

        nodes, _ = self._metadata([])
        ids: dict[int, str] = {}
        for node in sorted(nodes):  # each its own request: a node down hides only its coordinators
            try:
                resp = self._ask(*nodes[node], ListTransactionsRequest[0](state_filters=[], producer_id_filters=sorted(
                    pids)), ListTransactionsResponse)
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
    """Looks for hanging transactions on ``keys`` ("topic:p") until stopped."""

    def __init__(self, bootstrap: str, keys: list[str], brokers: list[int], clock: Callable[[], int],
                 timeout_s: float = 5.0) -> None:
        self.view = TxnView(bootstrap, brokers, timeout_s)
        self.keys, self.clock = keys, clock
        self.sightings: list[dict] = []
        self.looks = 0
        self.errors = 0
        self.last_error: str | None = None
        self.open_seen = 0  # looks that found a transaction open somewhere
        self._seen: set[tuple[str, int]] = set()
        self._lock = threading.Lock()  # the probe's thread and the nemesis's (watch) both look

    def run(self, stop: threading.Event) -> None:
        """Look every INTERVAL_S until ``stop``; errors (a node down, a leader moving) are
        counted, and the next look tries again."""
        while not stop.wait(INTERVAL_S):
            try:
                self.look()
                self.looks += 1
            except Exception as e:
                self.errors += 1
                self.last_error = f"{type(e).__name__}: {e}"[:200]

    def summary(self) -> dict:
        return {"interval_s": INTERVAL_S, "looks": self.looks, "open_seen": self.open_seen, "errors": self.errors,
                **({"last_error": self.last_error} if self.last_error else {}), "sightings": self.sightings}

    def watch(self, keys: list[str], seconds: float, stop: threading.Event) -> None:
        """Look at ``keys`` again and again for ``seconds`` (the nemesis, as a partition it took
        offline gets its leader back: a transaction the coordinator completed without the
        partition's marker is open there from then until the producer's next write there ends
        it, often within a second)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end and not stop.wait(0.02):
            try:
                self.look(keys)
            except Exception as e:
                self.errors += 1
                self.last_error = f"{type(e).__name__}: {e}"[:200]

    def look(self, keys: list[str] | None = None) -> None:
        first_ns = self.clock()
        opened = self.view.open(keys or self.keys)
        if not opened:
            return
        self.open_seen += 1
        owners = self.view.owners({pid for per in opened.values() for pid in per})
        suspects = {(key, pid): start for key, per in opened.items() for pid, (_e, start) in per.items()
                    if pid in owners and not _pending(owners[pid][1], key)}
        if not suspects:
            return
        again = self.view.open(sorted({key for key, _pid in suspects}))
        for (key, pid), start in sorted(suspects.items()):
            with self._lock:
                if (key, start) in self._seen or again.get(key, {}).get(pid, (None, None))[1] != start:
                    continue
                self._seen.add((key, start))
            txn_id, desc = owners[pid]
            self.sightings.append({
                "at_ns": self.clock(), "first_seen_ns": first_ns, "partition": key, "producer_id": pid,
                "producer_epoch": again[key][pid][0], "start_offset": start, "transactional_id": txn_id,
                "coordinator": {"state": desc.state, "producer_epoch": desc.producer_epoch,
                                "partitions": sorted(desc.partitions)}})


def _pending(desc: TxnState, key: str) -> bool:
    """Whether the coordinator still has a marker to write at ``key`` for this transaction."""
    return desc.state in PENDING and key in desc.partitions
