"""The share coordinator: every share-partition's durable state, in ``__share_group_state``.

Theory of operation
-------------------
A share-partition (one share group's view of one topic partition) lives on the partition's
leader (:mod:`reference.share_fetch`), which acquires records for the group's consumers and
takes their acknowledgements. What must survive the leader, it hands to the share coordinator
of its key (``group:topic:partition``, spread over the partitions of ``__share_group_state`` as
Kafka spreads its keys): the start offset (every offset below it is done) and the state and
delivery count of the records after it that are acknowledged, archived, or were delivered and
came back. Acquisitions are never written (as Kafka: a new leader forgets who held what).

* ReadShareGroupState (a leader loading the share-partition) answers the state and records
  the reader's leader epoch: from then on a lower leader epoch is fenced
  (``FENCED_LEADER_EPOCH``), so a former leader can no longer write.
* WriteShareGroupState carries changed offsets: merged into the state (a batch the writer
  sends replaces the recorded state of its offsets; offsets below the start offset are
  dropped) and written as the key's whole state, answered once committed (rule 3 of
  :mod:`reference.coordinator`). The start offset never goes back (Kafka 4.4; 4.3.x let an
  out-of-order write move it back).

Requests of one key are handled one at a time, each after the write of the one before.

Deviations from Kafka: no InitializeShareGroupState (a key is created, with start offset -1,
by its first read: the group coordinator does not gate assignment on it); the key's whole
state is written each time (no ShareUpdate records between ShareSnapshots); the merge of a
write is "the writer's batch wins" (Kafka combines overlapping batches by delivery count,
then state): the leader sends the current state of every offset it changed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from reference import records as rec
from reference.coordinator import Coordinator, CoordinatorHost, OneAtATime
from reference.errors import Errors
from reference.frozen import frozen
from reference.log import PartitionLog
from reference.marks import mark
from reference.share_messages import (
    ReadShareGroupStateRequest,
    ReadShareGroupStateResponse,
    StateBatch,
    WriteShareGroupStateRequest,
    WriteShareGroupStateResponse,
    share_key,
)
from reference.topics import SHARE_STATE_TOPIC


@frozen
class ShareState:
    state_epoch: int = 0
    leader_epoch: int = -1
    start_offset: int = -1
    batches: tuple[StateBatch, ...] = ()

    def to_json(self) -> dict:
        return {"state_epoch": self.state_epoch, "leader_epoch": self.leader_epoch,
                "start_offset": self.start_offset, "batches": [list(b) for b in self.batches]}

    @classmethod
    def from_json(cls, d: dict) -> ShareState:
        return cls(d["state_epoch"], d["leader_epoch"], d["start_offset"],
                   tuple((b[0], b[1], b[2], b[3]) for b in d["batches"]))


def merge_batches(old: tuple[StateBatch, ...], new: tuple[StateBatch, ...], start_offset: int) -> tuple[StateBatch, ...]:
    """The recorded batches with ``new`` laid over them, offset by offset, those below
    ``start_offset`` dropped, and runs of one state and count coalesced."""
    per: dict[int, tuple[int, int]] = {}
    for first, last, state, count in (*old, *new):
        for o in range(max(first, start_offset), last + 1):
            per[o] = (state, count)
    out: list[StateBatch] = []
    for o in sorted(per):
        state, count = per[o]
        if out and out[-1][1] == o - 1 and out[-1][2:] == (state, count):
            out[-1] = (out[-1][0], o, state, count)
        else:
            out.append((o, o, state, count))
    return tuple(out)


class ShareCoordinator(Coordinator):
    """Acts for the ``__share_group_state`` partitions its broker leads."""

    topic = SHARE_STATE_TOPIC

    def __init__(self, host: CoordinatorHost, num_partitions: int) -> None:
        super().__init__(host, num_partitions)
        self.states: dict[str, ShareState] = {}
        self.busy = OneAtATime()  # the requests of a key, each after the write of the one before

    # ------------------------------------------------------------ requests

    def read(self, now_ms: int, src: int, req: ReadShareGroupStateRequest) -> None:
        key = share_key(req.group_id, req.tp)
        self.busy.run(key, lambda: self._read(src, key, req))

    def _read(self, src: int, key: str, req: ReadShareGroupStateRequest) -> None:
        def answer(error: Errors, s: ShareState | None = None) -> None:
            if s is None or error is not Errors.NONE:
                self.host.send(src, ReadShareGroupStateResponse(req.correlation_id, error))
            else:
                self.host.send(src, ReadShareGroupStateResponse(req.correlation_id, Errors.NONE, s.state_epoch,
                                                                s.start_offset, s.batches))

        error, s = self._admit(key, req.leader_epoch)
        if error is not Errors.NONE:
            return answer(error)
        if req.leader_epoch == s.leader_epoch and key in self.states:
            return answer(Errors.NONE, s)
        new = replace(s, leader_epoch=req.leader_epoch)
        self._persist(key, new, lambda e: answer(e, new))

    def write(self, now_ms: int, src: int, req: WriteShareGroupStateRequest) -> None:
        key = share_key(req.group_id, req.tp)
        self.busy.run(key, lambda: self._write_state(src, key, req))

    def _write_state(self, src: int, key: str, req: WriteShareGroupStateRequest) -> None:
        def answer(error: Errors) -> None:
            self.host.send(src, WriteShareGroupStateResponse(req.correlation_id, error))

        error, s = self._admit(key, req.leader_epoch)
        if error is not Errors.NONE:
            return answer(error)
        if req.state_epoch < s.state_epoch:
            return answer(Errors.FENCED_STATE_EPOCH)
        start = max(s.start_offset, req.start_offset)
        new = ShareState(req.state_epoch, max(s.leader_epoch, req.leader_epoch), start,
                         merge_batches(s.batches, req.batches, start))
        self._persist(key, new, answer)

    def _admit(self, key: str, leader_epoch: int) -> tuple[Errors, ShareState]:
        """A read's or a write's common gate: this coordinator is ready for the key's
        partition, and the leader's epoch is not below the one recorded (a lower one is
        fenced); the key's state (empty if never written)."""
        error = self._ready(self.partition_of(key))
        s = self.states.get(key, ShareState())
        if error is Errors.NONE and leader_epoch < s.leader_epoch:
            mark("share-state-fenced-leader")
            error = Errors.FENCED_LEADER_EPOCH
        return error, s

    # ------------------------------------------------------------ one key at a time, durably

    def _persist(self, key: str, new: ShareState, then: Callable[[Errors], None]) -> None:
        self.busy.writing(key)
        batch = rec.encode_batch([rec.RecordInput(_record_key(key), json.dumps(new.to_json(), sort_keys=True).encode(),
                                                  (), self.host.now_ms)])

        def written(error: Errors) -> None:
            if error is Errors.NONE:
                self.states[key] = new
            then(error if error is Errors.NONE else Errors.COORDINATOR_NOT_AVAILABLE
                 if error is not Errors.NOT_COORDINATOR else error)
            self.busy.done(key)

        self._write(self.host.now_ms, self.partition_of(key), batch, written)

    # ------------------------------------------------------------ loading

    def _load(self, now_ms: int, partition: int, leader_epoch: int, log: PartitionLog) -> None:
        for batch in log.batches():
            try:
                for r in rec.decode_records(batch):
                    if r.key is None or r.value is None:
                        continue
                    key = json.loads(r.key)
                    if key.get("type") == "share-state":
                        self.states[key["key"]] = ShareState.from_json(json.loads(r.value))
            except (rec.CorruptRecordError, ValueError, KeyError):
                continue  # a record this version cannot read is skipped, never fatal
        mark("share-coordinator-loaded")

    def _forget(self, partition: int) -> None:
        for key in [k for k in self.states if self.partition_of(k) == partition]:
            del self.states[key]


def _record_key(key: str) -> bytes:
    return json.dumps({"type": "share-state", "key": key}, sort_keys=True).encode()
