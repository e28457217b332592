"""The purgatory: operations waiting for a partition's high watermark to pass their write.

An acks=all produce, a transaction marker and a coordinator's state change all mean the same:
"this is appended; answer once the high watermark passes it" (Kafka's DelayedProduce). Each
parks here with the offset the high watermark must reach (the offset after its write) and,
for a client's request, a deadline.

* :meth:`Purgatory.complete` runs whenever a partition's high watermark may have moved. It
  ends, in the order they were parked, the operations the high watermark now covers: with
  ``NONE``, or ``NOT_ENOUGH_REPLICAS_AFTER_APPEND`` when the ISR has meanwhile fallen below
  min.insync.replicas (the write is committed by fewer copies than promised).
* :meth:`Purgatory.expire` ends those past their deadline with ``REQUEST_TIMED_OUT``.
* :meth:`Purgatory.cancel` ends all of a partition's operations with an error: its
  leadership moved away, its topic was deleted, its coordinator unloaded it.

Every operation ends exactly once, through its ``on_done(error)``. An operation parked by
another's ``on_done`` while :meth:`complete` runs is looked at in the same pass; an
``on_done`` that calls :meth:`complete` again (a coordinator's next write, parked and looked at
at once) neither ends an operation a second time nor puts an ended one back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from reference.errors import Errors
from reference.messages import TopicPartition


@dataclass(slots=True)
class Waiting:
    required_offset: int  # the high watermark must reach this
    on_done: Callable[[Errors], None]
    deadline_ms: int | None = None  # None: it waits as long as the partition is led here


class Purgatory:
    def __init__(self) -> None:
        self._waiting: dict[TopicPartition, list[Waiting]] = {}

    def park(self, tp: TopicPartition, required_offset: int, on_done: Callable[[Errors], None],
             deadline_ms: int | None = None) -> None:
        self._waiting.setdefault(tp, []).append(Waiting(required_offset, on_done, deadline_ms))

    def __contains__(self, tp: TopicPartition) -> bool:
        """Whether operations of ``tp`` are waiting (callers skip computing what
        :meth:`complete` needs when none are)."""
        return bool(self._waiting.get(tp))

    def complete(self, tp: TopicPartition, high_watermark: int, isr_satisfied: bool) -> None:
        # The operations are taken out before any on_done runs: an on_done may park another
        # (looked at in this pass too) or call complete again (a coordinator's next write),
        # and neither may see, or put back, an operation already ended.
        keep: list[Waiting] = []
        while waiting := self._waiting.pop(tp, None):
            for w in waiting:
                if high_watermark >= w.required_offset:
                    w.on_done(Errors.NONE if isr_satisfied else Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)
                else:
                    keep.append(w)
        if keep:
            self._waiting[tp] = keep

    def expire(self, tp: TopicPartition, now_ms: int) -> None:
        keep: list[Waiting] = []
        for w in self._waiting.pop(tp, []):  # (taken out first, as in complete)
            if w.deadline_ms is not None and w.deadline_ms <= now_ms:
                w.on_done(Errors.REQUEST_TIMED_OUT)
            else:
                keep.append(w)
        if keep or tp in self._waiting:
            self._waiting[tp] = keep + self._waiting.get(tp, [])

    def due(self, tp: TopicPartition, now_ms: int) -> bool:
        """Whether :meth:`expire` would end anything now."""
        return any(w.deadline_ms is not None and w.deadline_ms <= now_ms for w in self._waiting.get(tp, ()))

    def cancel(self, tp: TopicPartition, error: Errors) -> None:
        for w in self._waiting.pop(tp, []):
            w.on_done(error)
