"""The broker's own view of a run's transactions: hanging transactions as KIP-664 defines them.

While a transactional workload runs (and through the final read), :class:`TxnProbe` asks the
broker every ``INTERVAL_S``, with kafka-python's admin client whatever client the run uses:

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

import contextlib
import threading
from collections.abc import Callable

INTERVAL_S = 1.0
RENEW_AFTER = 10
APIS = {61: "DescribeProducers", 65: "DescribeTransactions", 66: "ListTransactions"}
PENDING = ("Ongoing", "PrepareCommit", "PrepareAbort")


def probe_unavailable(apis: dict[int, tuple[int, int]]) -> str | None:
    """Why a broker advertising ``apis`` cannot be probed (None: it can)."""
    missing = [name for key, name in APIS.items() if key not in apis]
    return f"the broker does not serve {', '.join(missing)}" if missing else None


class TxnView:
    """What the broker says of its transactions, through one kafka-python admin client kept
    across calls (its connections to the brokers that are up stay ready)."""

    def __init__(self, bootstrap: str, brokers: list[int], timeout_s: float = 5.0) -> None:
        self.bootstrap, self.brokers, self.timeout_s = bootstrap, brokers, timeout_s
        self._admin = None

    def admin(self):
        if self._admin is None:
            from kafka import KafkaAdminClient

            self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap,
                                           request_timeout_ms=int(self.timeout_s * 1000))
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            with contextlib.suppress(Exception):
                admin.close()

    def open(self, keys: list[str]) -> dict[str, dict[int, tuple[int, int]]]:
        """Per partition ("topic:p", each leader asked alone, so that one without a leader does
        not hide the others): producer id -> (epoch, first offset of its open transaction)."""
        from kafka import TopicPartition

        admin = self.admin()
        out: dict[str, dict[int, tuple[int, int]]] = {}
        for key in keys:
            topic, _, p = key.rpartition(":")
            tp = TopicPartition(topic, int(p))
            try:
                state = admin.describe_producers([tp]).get(tp)
            except Exception:
                continue
            opened = {s.producer_id: (s.producer_epoch, s.current_transaction_start_offset)
                      for s in (state.active_producers if state else []) if s.current_transaction_start_offset >= 0}
            if opened:
                out[key] = opened
        return out

    def owners(self, pids: set[int]) -> dict[int, tuple[str, object]]:
        """producer id -> (transactional id, its coordinator's description: state, partitions,
        coordinator_id)."""
        admin = self.admin()
        ids: dict[int, str] = {}
        for broker in self.brokers:  # each its own request: a broker down hides only its coordinators
            try:
                listed = admin.list_transactions(broker_ids=[broker], producer_id_filters=sorted(pids))
            except Exception:
                continue
            ids.update((t.producer_id, t.transactional_id) for ts in listed.values() for t in ts)
        described = {}
        for txn_id in sorted(set(ids.values())):  # one at a time: a coordinator down hides only its own
            try:
                described.update(admin.describe_transactions([txn_id]))
            except Exception:
                continue
        return {pid: (txn_id, described[txn_id]) for pid, txn_id in ids.items() if txn_id in described}

    def group_coordinator(self, group: str) -> int | None:
        """The node id of ``group``'s coordinator (FindCoordinator), or None."""
        from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse

        from kafkacheck.conform.targets import parse_bootstrap
        from reference.server.protocol import round_trip

        for host, port in parse_bootstrap(self.bootstrap):
            try:
                resp = round_trip(host, port, FindCoordinatorRequest[2](key=group, key_type=0),
                                  FindCoordinatorResponse, "kafkacheck-probe", self.timeout_s)
            except Exception:
                continue
            if resp.error_code == 0:
                return resp.node_id
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

    def run(self, stop: threading.Event) -> None:
        """Look every INTERVAL_S until ``stop``; errors (a broker down, a leader moving) are
        counted, and the next look tries again with the same admin client (its connections to
        the brokers that are up stay ready; a fresh one would find them not ready yet), a new
        one after RENEW_AFTER errors in a row."""
        in_a_row = 0
        try:
            while not stop.wait(INTERVAL_S):
                try:
                    self.look()
                    self.looks += 1
                    in_a_row = 0
                except Exception as e:
                    self.errors += 1
                    in_a_row += 1
                    self.last_error = f"{type(e).__name__}: {e}"[:200]
                    if in_a_row >= RENEW_AFTER:
                        self.view.close()
                        in_a_row = 0
        finally:
            self.view.close()

    def summary(self) -> dict:
        return {"interval_s": INTERVAL_S, "looks": self.looks, "open_seen": self.open_seen, "errors": self.errors,
                **({"last_error": self.last_error} if self.last_error else {}), "sightings": self.sightings}

    def look(self) -> None:
        first_ns = self.clock()
        opened = self.view.open(self.keys)
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
            if (key, start) in self._seen or again.get(key, {}).get(pid, (None, None))[1] != start:
                continue
            self._seen.add((key, start))
            txn_id, desc = owners[pid]
            self.sightings.append({
                "at_ns": self.clock(), "first_seen_ns": first_ns, "partition": key, "producer_id": pid,
                "producer_epoch": again[key][pid][0], "start_offset": start, "transactional_id": txn_id,
                "coordinator": {"state": desc.state.value, "producer_epoch": desc.producer_epoch,
                                "partitions": sorted(f"{tp.topic}:{tp.partition}" for tp in desc.topic_partitions)}})


def _pending(desc, key: str) -> bool:
    """Whether the coordinator still has a marker to write at ``key`` for this transaction."""
    return desc.state.value in PENDING and any(f"{tp.topic}:{tp.partition}" == key for tp in desc.topic_partitions)
