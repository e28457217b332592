"""Histories for the linearizability checker: operations (call and return times) or events.

An :class:`Operation` is one client call with its input, its output and the times it was
called and returned. ``return_time=None`` marks a pending operation (``info`` in our traces,
an ``:info`` in Jepsen's): it may take effect at any point after its call, or, being placed
after everything else, not visibly at all. An output of :data:`UNKNOWN` says the client did
not learn the result (a timed-out read); the models accept any result for it.

Events are the other form porcupine takes: a sequence of call and return events matched by an
id; the position in the sequence is the time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


class _Unknown:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNKNOWN"

    def __reduce__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Any = _Unknown()
"""The output of an operation whose result the client never learned."""


@dataclass(frozen=True, slots=True)
class Operation:
    client_id: int | str
    input: Any
    call: int
    output: Any
    return_time: int | None
    index: int | None = None   # where it came from (a history index), for reports

    @property
    def pending(self) -> bool:
        return self.return_time is None


@dataclass(frozen=True, slots=True)
class Event:
    client_id: int | str
    kind: str            # "call" or "return"
    value: Any           # the input for a call, the output for a return
    id: int              # matches a call with its return


class HistoryError(ValueError):
    """The history cannot be checked as given (the message says why)."""


def events_to_operations(events: Iterable[Event]) -> list[Operation]:
    """Pairs call and return events by id; the position of an event is its time. Calls that
    never return become pending operations."""
    open_calls: dict[int, tuple[Event, int]] = {}
    operations: dict[int, Operation] = {}
    order: list[int] = []
    for time, event in enumerate(events):
        if event.kind == "call":
            if event.id in open_calls or event.id in operations:
                raise HistoryError(f"event {time}: call id {event.id} is used twice")
            open_calls[event.id] = (event, time)
            order.append(event.id)
        elif event.kind == "return":
            if event.id not in open_calls:
                raise HistoryError(f"event {time}: return for id {event.id} without an open call")
            call, call_time = open_calls.pop(event.id)
            operations[event.id] = Operation(call.client_id, call.value, call_time, event.value, time)
        else:
            raise HistoryError(f"event {time}: kind must be 'call' or 'return', not {event.kind!r}")
    for op_id, (call, call_time) in open_calls.items():
        operations[op_id] = Operation(call.client_id, call.value, call_time, UNKNOWN, None)
    return [operations[i] for i in order]


def validate(operations: Sequence[Operation]) -> None:
    for position, op in enumerate(operations):
        if not isinstance(op, Operation):
            raise HistoryError(f"operation {position} is a {type(op).__name__}, not an Operation")
        if op.return_time is not None and op.return_time < op.call:
            raise HistoryError(f"operation {position} returns ({op.return_time}) before its call ({op.call})")


def pending_return_time(operations: Sequence[Operation]) -> int:
    """A time after every call and return: pending operations return there."""
    latest = 0
    for op in operations:
        latest = max(latest, op.call, op.return_time if op.return_time is not None else op.call)
    return latest + 1
