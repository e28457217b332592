"""The same search as the C++ checker, in plain Python: the oracle of the differential tests
and the engine for models defined in Python.

It follows porcupine's checkSingle step for step: the history as a doubly linked list of call
and return entries, lift and unlift, a cache of (linearized set, state) that is never cleared,
and a stack of (call, state before it) to backtrack through. The set is a Python int used as
a bitset. A :class:`PythonSearch` is resumable, so partitions are interleaved in slices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from linearizability.models import Model
from linearizability.operations import Operation, pending_return_time


class _Entry:
    __slots__ = ("id", "match", "next", "prev")

    def __init__(self, id: int, match: _Entry | None = None) -> None:
        self.id = id
        self.match = match
        self.prev: _Entry | None = None
        self.next: _Entry | None = None


class PythonSearch:
    """One partition's search. ``status`` is ``running``, ``ok``, ``illegal`` or ``unknown``."""

    def __init__(self, model: Model, operations: Sequence[Operation], partial: bool = False,
                 cache_entries_max: int = 0) -> None:
        self.model = model
        self.operations = list(operations)
        self.partial = partial
        self.cache_entries_max = cache_entries_max
        self.head = _Entry(-1)
        self._build()
        self.entry = self.head.next
        self.state = model.init()
        self.linearized = 0
        self.cache: dict[int, list[Any]] = {}
        self.cache_entries = 0
        self.calls: list[tuple[_Entry, Any]] = []
        self.status = "running" if self.operations else "ok"
        self.iterations = 0
        self.longest: list[int] = []
        self.blocked = -1
        self.recorded = False

    def _build(self) -> None:
        pending_at = pending_return_time(self.operations)
        order = []
        for i, op in enumerate(self.operations):
            order.append((op.call, 0, i))
            order.append((pending_at if op.return_time is None else op.return_time, 1, i))
        order.sort()
        returns = {}
        last = self.head
        for _, kind, i in order:
            if kind == 0:
                entry = _Entry(i, returns.setdefault(i, _Entry(i)))
            else:
                entry = returns.setdefault(i, _Entry(i))
            entry.prev = last
            last.next = entry
            last = entry

    def run(self, iterations: int) -> str:
        if self.status != "running":
            return self.status
        step = self.model.step
        equal = self.model.equal
        ops = self.operations
        for _ in range(iterations):
            if self.head.next is None:
                if self.partial:
                    self._record(-1)
                self.status = "ok"
                return self.status
            self.iterations += 1
            entry = self.entry
            if entry.match is not None:
                op = ops[entry.id]
                ok, new_state = step(self.state, op.input, op.output)
                if ok:
                    new_set = self.linearized | (1 << entry.id)
                    bucket = self.cache.setdefault(new_set, [])
                    if not any(equal(seen, new_state) for seen in bucket):
                        bucket.append(new_state)
                        self.cache_entries += 1
                        self.calls.append((entry, self.state))
                        self.state = new_state
                        self.linearized = new_set
                        _lift(entry)
                        self.entry = self.head.next
                        continue
                self.entry = entry.next
            else:
                if self.partial:
                    self._record(entry.id)
                if not self.calls:
                    self.status = "illegal"
                    return self.status
                call, self.state = self.calls.pop()
                self.linearized &= ~(1 << call.id)
                _unlift(call)
                self.entry = call.next
        if self.cache_entries_max and self.cache_entries > self.cache_entries_max:
            self.status = "unknown"
        return self.status

    def give_up(self) -> None:
        if self.status == "running":
            self.status = "unknown"

    def _record(self, blocked: int) -> None:
        if self.recorded and len(self.calls) <= len(self.longest):
            return
        self.recorded = True
        self.longest = [call.id for call, _ in self.calls]
        self.blocked = blocked


def _lift(call: _Entry) -> None:
    call.prev.next = call.next
    if call.next is not None:
        call.next.prev = call.prev
    ret = call.match
    ret.prev.next = ret.next
    if ret.next is not None:
        ret.next.prev = ret.prev


def _unlift(call: _Entry) -> None:
    ret = call.match
    ret.prev.next = ret
    if ret.next is not None:
        ret.next.prev = ret
    call.prev.next = call
    if call.next is not None:
        call.next.prev = call
