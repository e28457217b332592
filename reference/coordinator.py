"""What the transaction and group coordinators share, and all they may ask of their broker.

A coordinator acts for the partitions of one internal topic that its broker leads
(``__transaction_state`` or ``__consumer_offsets``; a key is spread over them by Java's
``String.hashCode``, as Kafka). Rules of this module:

1. A coordinator sees its broker only through :class:`CoordinatorHost`: sending, timers,
   events, the time of the input being handled, and a few questions about the partitions
   of its topic. It never imports the broker.
2. When the broker starts leading one of those partitions it calls :meth:`on_leader`: the
   coordinator loads the partition's log (the subclass's ``_load``); when it stops,
   :meth:`on_not_leader` forgets the partition (``_forget``) and ends every write of it that
   was waiting (``NOT_COORDINATOR``).
3. A state change is a record written to the partition (:meth:`_write`) that takes effect only
   once the high watermark passes it (the :class:`~reference.purgatory.Purgatory`), so a
   coordinator that fails over loses nothing it answered.
4. It answers for a key only while it is ready (:meth:`_ready`): the partition loaded, the
   broker's lease held, and everything the previous leader wrote committed.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any, ClassVar, Protocol

from reference.errors import Errors
from reference.log import PartitionLog
from reference.messages import TopicPartition
from reference.purgatory import Purgatory


class CoordinatorHost(Protocol):
    """The broker as its coordinators see it."""

    node_id: int
    bugs: frozenset[str]
    now_ms: int  # the time of the input being handled

    def send(self, dst: int, message: Any) -> None: ...

    def close_connection(self, peer: int) -> None:
        """Close the connection to ``peer`` (a request on it got no answer in time)."""

    def set_timer(self, delay_ms: float, key: Any) -> None: ...

    def event(self, kind: str, **fields: Any) -> None: ...

    def corr(self) -> int:
        """A new correlation id for a request the broker sends."""

    def lease_valid(self) -> bool:
        """The broker cannot have been fenced and replaced (it may answer from memory)."""

    def append_internal(self, now_ms: int, tp: TopicPartition, batch: bytes) -> tuple[Errors, int]:
        """Append to a partition the broker leads: (error, the batch's last offset)."""

    def log_of(self, tp: TopicPartition) -> PartitionLog:
        """The log of a partition the broker holds (to load it, or read its producer state)."""

    def caught_up(self, tp: TopicPartition) -> bool:
        """The broker leads ``tp`` and its high watermark has reached the start of its leader
        epoch: everything the previous leader wrote is committed."""

    def isr_satisfied(self, tp: TopicPartition) -> bool:
        """``tp``'s ISR has at least min.insync.replicas members."""

    def leader_of(self, tp: TopicPartition) -> int:
        """The partition's leader in the broker's metadata (-1: none)."""

    def partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has in the broker's metadata (0: no such topic)."""

    def has_partition(self, tp: TopicPartition) -> bool:
        """The partition is in the broker's metadata (with a leader or without one)."""

    def take_producer_id(self) -> int:
        """A producer id of the broker's block (-1 while a new block is on its way)."""

    def verify_txn(self, txn_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition,
                   then: Callable[[Errors], None], add: bool = False) -> None:
        """Ask the transaction coordinator whether ``tp`` is in the producer's transaction
        (``add``: to add it, KIP-890 part 2)."""


class _Stopped:
    """The host of a stopped broker's coordinators: nothing reaches them after it stops."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"the broker has stopped: its coordinators cannot use {name}")


STOPPED: Any = _Stopped()  # what Broker.stop gives its coordinators for a host


class Coordinator:
    topic: ClassVar[str]  # the internal topic it acts for

    def __init__(self, host: CoordinatorHost, num_partitions: int) -> None:
        self.host = host
        self.num_partitions = num_partitions
        self.loaded: dict[int, int] = {}  # partition -> coordinator epoch (its leader epoch)
        self.purgatory = Purgatory()  # state changes waiting for the high watermark

    def partition_of(self, key: str) -> int:
        return partition_for(key, self.num_partitions)

    def _tp(self, partition: int) -> TopicPartition:
        return TopicPartition(self.topic, partition)

    def _ready(self, partition: int) -> Errors:
        """May the coordinator answer for a key of ``partition`` now? (rule 4)"""
        if partition not in self.loaded or not self.host.lease_valid():
            return Errors.NOT_COORDINATOR
        if not self.host.caught_up(self._tp(partition)):
            return Errors.COORDINATOR_LOAD_IN_PROGRESS
        return Errors.NONE

    # ------------------------------------------------------------ leadership (rule 2)

    def on_leader(self, now_ms: int, partition: int, leader_epoch: int) -> None:
        """The broker now leads ``partition`` of the topic, in ``leader_epoch``: load it."""
        self._unload(partition)
        self.loaded[partition] = leader_epoch
        self._load(now_ms, partition, leader_epoch, self.host.log_of(self._tp(partition)))

    def on_not_leader(self, partition: int) -> None:
        self._unload(partition)

    def _unload(self, partition: int) -> None:
        if partition not in self.loaded:
            return
        del self.loaded[partition]
        self._forget(partition)
        self.purgatory.cancel(self._tp(partition), Errors.NOT_COORDINATOR)

    def _load(self, now_ms: int, partition: int, leader_epoch: int, log: PartitionLog) -> None:
        """Read the partition's log into memory, and resume what it left unfinished."""
        raise NotImplementedError

    def _forget(self, partition: int) -> None:
        """Drop what was loaded from ``partition``."""
        raise NotImplementedError

    # ------------------------------------------------------------ durable writes (rule 3)

    def _write(self, now_ms: int, partition: int, batch: bytes, on_done: Callable[[Errors], None]) -> None:
        """Append ``batch``; ``on_done(NONE)`` once the high watermark passes it, or the error."""
        tp = self._tp(partition)
        error, last = self.host.append_internal(now_ms, tp, batch)
        if error is not Errors.NONE:
            on_done(error)
            return
        self.purgatory.park(tp, last + 1, on_done)
        self.on_high_watermark(now_ms, partition)

    def on_high_watermark(self, now_ms: int, partition: int) -> None:
        """The high watermark of ``partition`` may have moved."""
        tp = self._tp(partition)
        if partition not in self.loaded or tp not in self.purgatory:
            return
        self.purgatory.complete(tp, self.host.log_of(tp).high_watermark, self.host.isr_satisfied(tp))


class OneAtATime:
    """The requests of one key (a group, a share-partition) handled one at a time, each after
    the write of the one before, so that each sees the state the log holds: :meth:`run` runs a
    request now, or once the write under way for its key is done; a request that writes calls
    :meth:`writing` first and :meth:`done` when the write is answered, which runs what waited
    (until one of those begins a write of its own)."""

    def __init__(self) -> None:
        self._waiting: dict[str, list[Callable[[], None]]] = {}

    def __contains__(self, key: str) -> bool:
        """A write of ``key`` is under way."""
        return key in self._waiting

    def run(self, key: str, fn: Callable[[], None]) -> None:
        if key in self._waiting:
            self._waiting[key].append(fn)
        else:
            fn()

    def writing(self, key: str) -> None:
        self._waiting.setdefault(key, [])

    def done(self, key: str) -> None:
        waiting = self._waiting.pop(key, [])
        while waiting:
            waiting.pop(0)()
            if key in self._waiting:  # that one is writing: the rest waits for it
                self._waiting[key].extend(waiting)
                return


# a group's write error as the coordinator answers it: the partition moved, or it is down
_TO_COORDINATOR = {Errors.NOT_LEADER_OR_FOLLOWER: Errors.NOT_COORDINATOR, Errors.NOT_COORDINATOR: Errors.NOT_COORDINATOR}


def coordinator_error(error: Errors) -> Errors:
    return error if error is Errors.NONE else _TO_COORDINATOR.get(error, Errors.COORDINATOR_NOT_AVAILABLE)


@lru_cache(maxsize=1 << 12)
def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units), as a signed 32-bit int (remembered: a
    coordinator hashes the same group and transactional ids again and again)."""
    data = s.encode("utf-16-be")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(key.hashCode) % numPartitions`` (abs clears the sign bit)."""
    return (java_string_hash(key) & 0x7FFFFFFF) % num_partitions
