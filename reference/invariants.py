"""White-box invariants over a cluster's state (docs/explanation/protocol-notes.md section 3).

:class:`InvariantChecker` remembers what it must (the committed batch at every offset below
any replica's high watermark, the leader of each partition epoch, the epochs each node has
reached, the acknowledged acks=all records) and is told after every simulated step which
node just acted. The checks are incremental so they can run after every step: a broker's
partitions are looked at again only after a change that the broker counts (``Broker.changes``:
its logs and partitions bump it at every change of a LEO, an HW, the log start, the batches,
the producers' state or an epoch), and then only those whose state moved:

* ``hw-within-leo``: HW <= LEO on every replica;
* ``log-matching``: a batch below a replica's HW equals the batch any other replica held at
  that offset below its HW (committed data never changes);
* ``one-leader-per-epoch``: at most one broker leads a partition in a given leader epoch;
* ``epochs-monotonic``: a node's leader and partition epochs never decrease while it runs,
  and the controller's never do;
* ``leader-hw-monotonic``: the leader's HW never decreases within its epoch;
* ``acked-on-isr``: an acknowledged acks=all record is held by the leader and every live,
  unrestarted member of the controller's ISR (checked for the newest acknowledged batch of
  each partition after every step, for all of them by :meth:`check_all_acked`);
* ``lso-below-open-txn``: a leader's last stable offset never passes the first offset of a
  transaction still open in its log (read_committed must not see it);
* ``txn-complete-after-markers``: a transaction coordinator completes a transaction (writes
  Complete{Commit,Abort}) only after each partition of the transaction got a marker of the
  producer, of the transaction's epoch or a newer one, since the coordinator held it in
  Prepare{Commit,Abort} (the partition leaders' ``txn-marker`` events, told through
  :meth:`InvariantChecker.saw_event`). A marker the coordinator counts as done because the
  partition refused it as fenced is then one a newer epoch or coordinator wrote there;
* ``consumer-group-single-owner``: in a consumer group (KIP-848) as its coordinator has it,
  no partition is held (assigned, or pending revocation) by two members.
"""

from __future__ import annotations

from reference import records as rec
from reference.broker import Broker
from reference.controller import Controller
from reference.frozen import frozen
from reference.log import PartitionLog
from reference.messages import TopicPartition
from reference.txn_metadata import COMPLETE_ABORT, COMPLETE_COMMIT, PREPARE_ABORT, PREPARE_COMMIT, TxnMetadata

_PREPARED = (PREPARE_COMMIT, PREPARE_ABORT)
_COMPLETED = (COMPLETE_COMMIT, COMPLETE_ABORT)


@frozen
class Violation:
    invariant: str
    node: int
    key: str
    detail: str

    def to_dict(self) -> dict:
        return {"invariant": self.invariant, "node": self.node, "key": self.key,
                "detail": self.detail}


def _batch_id(batch: bytes) -> tuple[int, int, bytes]:
    # base offset, last offset and the CRC identify a stored batch
    return rec.base_offset_of(batch), rec.last_offset_of(batch), batch[17:21]


class InvariantChecker:
    def __init__(self) -> None:
        self.committed: dict[TopicPartition, dict[int, tuple[int, int, bytes]]] = {}
        self.committed_records: dict[TopicPartition, dict[int, tuple]] = {}
        self.compacted: set[TopicPartition] = set()
        self.checked_hw: dict[tuple[int, TopicPartition], int] = {}
        self.leaders: dict[tuple[TopicPartition, int], int] = {}
        # node -> partition -> what the checks saw last: leader epoch, partition epoch, HW, LEO,
        # leading (a replica whose five are unchanged needs no check)
        self.seen: dict[int, dict[TopicPartition, tuple[int, int, int, int, bool]]] = {}
        # node -> its broker's count of changes (Broker.changes) and its value at the last scan
        self.scanned: dict[int, tuple[list[int], int]] = {}
        self.controller_epochs: dict[TopicPartition, tuple[int, int]] = {}
        self.acked: dict[TopicPartition, dict[int, tuple[int, int, bytes] | None]] = {}
        self.latest_acked: dict[TopicPartition, int] = {}
        self.pending_acks: list[TopicPartition] = []
        self.checked_metadata_version = -1
        self._controller_version = -1
        self._verified: dict[tuple[int, TopicPartition, int], bytes] = {}
        self.cgroup_changes: dict[int, int] = {}  # consumer-group-single-owner: changes checked
        # txn-complete-after-markers: (producer id, key) -> the epochs of the markers written
        # there, in order; per coordinator node, the count of its changes last seen, and each
        # transaction as last seen there with, in Prepare, the marker counts of its partitions
        self.markers: dict[tuple[int, str], list[int]] = {}
        self.txn_changes: dict[int, int] = {}
        self.txn_seen: dict[int, dict[str, tuple[TxnMetadata, dict[str, int] | None]]] = {}

    # ------------------------------------------------------------ inputs

    def node_restarted(self, node_id: int) -> None:
        self.seen.pop(node_id, None)
        self.scanned.pop(node_id, None)
        self.txn_changes.pop(node_id, None)
        self.txn_seen.pop(node_id, None)
        for k in [k for k in self.checked_hw if k[0] == node_id]:
            del self.checked_hw[k]

    def saw_event(self, node: int, kind: str, fields: dict) -> None:
        """A node's event (the simulator tells every one): markers written are remembered."""
        if kind == "txn-marker":
            self.markers.setdefault((fields["producer_id"], fields["key"]), []).append(fields["producer_epoch"])

    def acknowledged(self, tp: TopicPartition, offset: int) -> None:
        """An acks=all produce of the batch starting at ``offset`` was answered with success."""
        self.acked.setdefault(tp, {})[offset] = None
        if offset > self.latest_acked.get(tp, -1):
            self.latest_acked[tp] = offset
        self.pending_acks.append(tp)

    # ------------------------------------------------------------ checks

    def nothing_to_check(self, broker: Broker | None, controller: Controller | None) -> bool:
        """True when :meth:`after_step` would look at nothing: no acknowledgement waits, the
        controller's metadata and the broker's counts of changes (its logs and partitions, its
        transaction and consumer group coordinators) are as last checked. Three steps in four
        of a run; answered here in one call."""
        if self.pending_acks:
            return False
        if controller is not None and not (
                controller.metadata_version == self._controller_version == self.checked_metadata_version):
            return False
        if broker is None:
            return True
        n = broker.node_id
        last = self.scanned.get(n)
        changes = broker.changes
        return (last is not None and last[0] is changes and last[1] == changes[0]
                and broker.txn.changes == self.txn_changes.get(n)
                and broker.groups.consumer.changes == self.cgroup_changes.get(n))

    def after_step(self, broker: Broker | None, controller: Controller | None,
                   brokers: dict[int, Broker]) -> list[Violation]:
        """Check what the last step can have changed.

        The newest acknowledged batch of a partition is checked on the broker that acted when
        its log got shorter, on every holder when the controller's metadata changed, and on
        every holder right after a new acknowledgement.
        """
        out: list[Violation] = []
        if controller is not None:
            self._check_controller(controller, out)
        shrunk = self._check_broker(broker, out) if broker is not None else []
        if broker is not None and broker.txn.changes != self.txn_changes.get(broker.node_id):
            self._check_txn_completions(broker, out)
        if broker is not None and broker.groups.consumer.changes != self.cgroup_changes.get(broker.node_id):
            self._check_consumer_groups(broker, out)
        if controller is None:
            return out
        if controller.metadata_version != self.checked_metadata_version:
            self.checked_metadata_version = controller.metadata_version
            for tp in sorted(self.latest_acked):
                self._check_acked(tp, [self.latest_acked[tp]], controller, brokers, out)
        elif shrunk and broker is not None:  # (only a broker's step shrinks a log)
            own = {broker.node_id: broker}
            for tp in shrunk:
                if tp in self.latest_acked:
                    self._check_acked(tp, [self.latest_acked[tp]], controller, own, out)
        if self.pending_acks:
            for tp in sorted(set(self.pending_acks)):
                self._check_acked(tp, [self.latest_acked[tp]], controller, brokers, out)
            self.pending_acks.clear()
        return out

    def check_all_acked(self, controller: Controller, brokers: dict[int, Broker]) -> list[Violation]:
        out: list[Violation] = []
        for tp, offsets in sorted(self.acked.items()):
            self._check_acked(tp, sorted(offsets), controller, brokers, out)
        return out

    def _check_controller(self, c: Controller, out: list[Violation]) -> None:
        if c.metadata_version == self._controller_version:
            return
        self._controller_version = c.metadata_version
        for tp, s in c.partitions.items():
            prev = self.controller_epochs.get(tp)
            now = (s.leader_epoch, s.partition_epoch)
            if prev is not None and (now[0] < prev[0] or now[1] < prev[1]):
                out.append(Violation("epochs-monotonic", c.node_id, tp.key,
                                     f"controller epochs went from {prev} to {now}"))
            self.controller_epochs[tp] = now
            if s.leader >= 0 and s.leader not in s.isr:
                out.append(Violation("leader-in-isr", c.node_id, tp.key,
                                     f"leader {s.leader} is not in the ISR {list(s.isr)}"))

    def _check_broker(self, b: Broker, out: list[Violation]) -> list[TopicPartition]:
        """Per-replica checks for partitions whose state changed; returns those whose log
        got shorter (the only way this broker can lose an acknowledged record)."""
        n = b.node_id
        shrunk: list[TopicPartition] = []
        seen = self.seen.get(n)
        if seen is None:
            seen = self.seen[n] = {}
        changes = b.changes
        last = self.scanned.get(n)
        if last is not None and last[0] is changes and last[1] == changes[0]:
            return shrunk  # none of its logs or partitions changed since the last scan
        self.scanned[n] = (changes, changes[0])
        for tp, p in b.partitions.items():
            log = p.log
            prev = seen.get(tp)
            if (prev is not None and prev[3] == log.log_end_offset and prev[2] == log.high_watermark
                    and prev[0] == p.leader_epoch and prev[1] == p.partition_epoch
                    and prev[4] == p.is_leader):
                continue  # nothing this partition's invariants depend on has changed
            cur = (p.leader_epoch, p.partition_epoch, log.high_watermark, log.log_end_offset,
                   p.is_leader)
            if log.high_watermark > log.log_end_offset:
                out.append(Violation("hw-within-leo", n, tp.key,
                                     f"HW {log.high_watermark} > LEO {log.log_end_offset}"))
            if prev is not None:
                if cur[0] < prev[0] or (cur[0] == prev[0] and cur[1] < prev[1]):
                    out.append(Violation("epochs-monotonic", n, tp.key,
                                         f"epochs went from {prev[:2]} to {cur[:2]}"))
                if p.is_leader and prev[4] and cur[0] == prev[0] and cur[2] < prev[2]:
                    out.append(Violation("leader-hw-monotonic", n, tp.key,
                                         f"leader HW went from {prev[2]} to {cur[2]}"))
                if cur[3] < prev[3]:
                    shrunk.append(tp)
            seen[tp] = cur
            if p.is_leader:
                opens = log.producer_state.open_transactions()
                if opens:
                    first = min(opens.values())
                    lso = p.last_stable_offset()
                    if lso > first:
                        out.append(Violation("lso-below-open-txn", n, tp.key,
                                             f"last stable offset {lso} exposes the open "
                                             f"transaction that starts at offset {first}"))
                holder = self.leaders.setdefault((tp, p.leader_epoch), n)
                if holder != n:
                    out.append(Violation("one-leader-per-epoch", n, tp.key,
                                         f"brokers {holder} and {n} both lead epoch {p.leader_epoch}"))
            self._check_matching(n, tp, log, out)
        return shrunk

    def _check_txn_completions(self, b: Broker, out: list[Violation]) -> None:
        """The transactions whose state changed on coordinator ``b``: one seen in Prepare and
        now Complete must have had its markers since (txn-complete-after-markers)."""
        n, coordinator = b.node_id, b.txn
        self.txn_changes[n] = coordinator.changes
        seen = self.txn_seen.setdefault(n, {})
        for txn_id, meta in coordinator.txns.items():
            prev = seen.get(txn_id)
            if prev is not None and prev[0] is meta:
                continue
            if meta.state in _PREPARED:
                seen[txn_id] = (meta, {tp.key: len(self.markers.get((meta.producer_id, tp.key), ()))
                                       for tp in meta.partitions})
                continue
            seen[txn_id] = (meta, None)
            if prev is None or meta.state not in _COMPLETED:
                continue
            prepared, counts = prev
            if counts is None:
                continue
            if (prepared.producer_id, prepared.producer_epoch) != (meta.producer_id, meta.producer_epoch):
                continue  # not the end of that transaction (seen again after an unload)
            for key, before in sorted(counts.items()):
                epochs = self.markers.get((prepared.producer_id, key), [])
                if not any(e >= prepared.producer_epoch for e in epochs[before:]):
                    out.append(Violation(
                        "txn-complete-after-markers", n, key,
                        f"the coordinator completed {txn_id!r} ({meta.state}, producer {prepared.producer_id} "
                        f"epoch {prepared.producer_epoch}) without a marker in {key}"))

    def _check_consumer_groups(self, b: Broker, out: list[Violation]) -> None:
        self.cgroup_changes[b.node_id] = b.groups.consumer.changes
        for group, gs in sorted(b.groups.groups.items()):
            for tp, members in sorted((gs.modern.double_held() if gs.modern is not None else {}).items()):
                out.append(Violation("consumer-group-single-owner", b.node_id, tp.key,
                                     f"group {group!r}: members {sorted(members)} both hold {tp.key}"))

    def _check_matching(self, n: int, tp: TopicPartition, log: PartitionLog, out: list[Violation]) -> None:
        key = (n, tp)
        checked = self.checked_hw.get(key, 0)
        hw = log.high_watermark
        if hw < checked:
            self.checked_hw[key] = hw
            return
        if hw == checked:
            return
        if log.config.compact:
            self.compacted.add(tp)
        if tp in self.compacted:
            # (a restarted replica learns its topic's configs only from the next metadata)
            self._check_matching_records(n, tp, log, checked, hw, out)
            self.checked_hw[key] = hw
            return
        committed = self.committed.setdefault(tp, {})
        for batch in log.read(checked, 1 << 62, hw):
            bid = _batch_id(batch)
            if bid[1] < checked:
                continue
            seen = committed.get(bid[0])
            if seen is None:
                committed[bid[0]] = bid
            elif seen != bid:
                out.append(Violation(
                    "log-matching", n, tp.key,
                    f"offsets {bid[0]}..{bid[1]} below HW {hw} hold a different batch than "
                    f"another replica held there below its HW (offsets {seen[0]}..{seen[1]})"))
        self.checked_hw[key] = hw

    def _check_matching_records(self, n: int, tp: TopicPartition, log: PartitionLog, checked: int, hw: int,
                                out: list[Violation]) -> None:
        """Compacted logs: replicas clean on their own, so batches differ; every record
        they still hold at an offset below the HW must be the same record."""
        seen = self.committed_records.setdefault(tp, {})
        for batch in log.read(checked, 1 << 62, hw):
            if rec.parse_header(batch).is_control:
                continue
            for r in rec.decode_records(batch):
                if r.offset < checked or r.offset >= hw:
                    continue
                ident = (r.key, r.value)
                prev = seen.setdefault(r.offset, ident)
                if prev != ident:
                    out.append(Violation(
                        "log-matching", n, tp.key,
                        f"offset {r.offset} below HW {hw} holds a different record than another "
                        f"replica held there below its HW"))

    def _check_acked(self, tp: TopicPartition, offsets: list[int], c: Controller,
                     brokers: dict[int, Broker], out: list[Violation]) -> None:
        s = c.partitions.get(tp)
        if s is None:
            return
        holders = set(s.isr)
        if s.leader >= 0:
            holders.add(s.leader)
        for r in sorted(holders):
            b = brokers.get(r)
            reg = c.brokers.get(r)
            if b is None or reg is None or reg.fenced or b.broker_epoch != reg.broker_epoch:
                continue  # dead, fenced or restarted since: not a member that must hold it
            p = b.partitions.get(tp)
            if tp in self.compacted or (p is not None and p.log.config.compact):
                continue  # the cleaner may remove acknowledged records; the history judges
            for offset in offsets:
                if p is not None and offset < p.log.log_start_offset:
                    continue  # removed by retention or DeleteRecords
                batch = p.log.batch_at(offset) if p is not None else None
                if batch is not None and self._verified.get((r, tp, offset)) is batch:
                    continue  # the very batch already verified at this offset
                expected = self.acked[tp].get(offset)
                if batch is None:
                    out.append(Violation(
                        "acked-on-isr", r, tp.key,
                        f"acknowledged record at offset {offset} is missing from ISR member {r} "
                        f"(its log ends at {p.log.log_end_offset if p else 0})"))
                    continue
                bid = _batch_id(batch)
                if expected is None:
                    self.acked[tp][offset] = bid
                elif bid != expected:
                    out.append(Violation(
                        "acked-on-isr", r, tp.key,
                        f"ISR member {r} holds a different batch at acknowledged offset {offset}"))
                    continue
                self._verified[(r, tp, offset)] = batch
