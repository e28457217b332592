"""The sans-IO node contract shared by brokers, the controller and clients.

A node never reads a clock, sleeps, draws random numbers or touches a socket. Its runtime
(the simulator, or the asyncio server) calls

* ``start(now_ms)`` once per process start,
* ``receive(now_ms, src, message)`` for every delivered message,
* ``timer(now_ms, key)`` when a timer it asked for fires,

and after each call takes the node's outputs with :meth:`Node.drain`: :class:`Send`,
:class:`Timer`, :class:`Event` and :class:`Close` objects, in the order the node produced them.
A client that models its connections (as Kafka's clients do: one per broker, closed when a
request on it times out, which fails every request in flight there) outputs :class:`Close`
and has ``connection_lost(now_ms, peer)`` called when the runtime closes one (a reset, a
crashed peer); a runtime without such connections ignores both. Timers
cannot be cancelled; a node ignores a timer that no longer matters. A node may also answer
``timer_is_moot(now_ms, key)``: True promises that ``timer(now_ms, key)`` would change nothing
and output nothing, so a runtime may skip the call; a number ``d`` promises that it would change
nothing and output only ``Timer(d, key)`` (a periodic timer with nothing to do this time), so a
runtime may set that timer itself instead (a speed-up only; the simulator's tests run with and
without it and compare histories byte for byte).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, final

from mypy_extensions import mypyc_attr

from reference.frozen import own_init


# Outputs are frozen dataclasses that write their own __init__, as the messages most built are
# (reference/frozen.py's own_init): compiled, they are built and read natively, where a named
# tuple's construction ran an interpreted __new__ (a run makes a few hundred thousand of them);
# immutable and compared by value, as named tuples were.
@final
@dataclass(init=False, frozen=True, slots=True)
class Send:
    dst: int
    message: Any

    def __init__(self, dst: int, message: Any) -> None:
        self.dst = dst  # type: ignore[misc]
        self.message = message  # type: ignore[misc]


own_init(Send)


@final
@dataclass(init=False, frozen=True, slots=True)
class Timer:
    delay_ms: float
    key: Any

    def __init__(self, delay_ms: float, key: Any) -> None:
        self.delay_ms = delay_ms  # type: ignore[misc]
        self.key = key  # type: ignore[misc]


own_init(Timer)


@final
@dataclass(init=False, frozen=True, slots=True)
class Close:
    """Close the connection to ``peer``: what is sent to it next goes on a new one."""

    peer: int

    def __init__(self, peer: int) -> None:
        self.peer = peer  # type: ignore[misc]


own_init(Close)


@final
@dataclass(init=False, frozen=True, slots=True)
class Event:
    """A white-box event for events.jsonl (kinds listed in docs/reference/trace-format.md)."""

    kind: str
    fields: dict

    def __init__(self, kind: str, fields: dict) -> None:
        self.kind = kind  # type: ignore[misc]
        self.fields = fields  # type: ignore[misc]


own_init(Event)


Output = Send | Timer | Event | Close  # what a step of a node outputs


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled, it stays open to the workloads' clients
class Node:
    """Base class: output buffering. Subclasses implement start/receive/timer."""

    node_id: int
    # a node embedded in another (a client's producer and consumer) tags its timers' keys, so
    # that its host can route them back: its timers' keys become ``timer_tag + (key,)``
    timer_tag: tuple = ()

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self._out: list[Output] = []

    def send(self, dst: int, message: Any) -> None:
        self._out.append(Send(dst, message))

    def set_timer(self, delay_ms: float, key: Any) -> None:
        tag = self.timer_tag
        self._out.append(Timer(delay_ms, (*tag, key) if tag else key))

    def close_connection(self, peer: int) -> None:
        if peer >= 0:
            self._out.append(Close(peer))

    def event(self, kind: str, **fields: Any) -> None:
        self._out.append(Event(kind, fields))

    def emit(self, kind: str, fields: dict) -> None:
        """:meth:`event` with its fields in a dict of their own: compiled, a direct call (the
        frequent events: a client's ops, an advanced high watermark, an append)."""
        self._out.append(Event(kind, fields))

    def drain(self) -> list[Output]:
        out, self._out = self._out, []
        return out

    def start(self, now_ms: int) -> None:
        raise NotImplementedError

    def receive(self, now_ms: int, src: int, message: Any) -> None:
        raise NotImplementedError

    def timer(self, now_ms: int, key: Any) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        """The process is gone (a crash, or the run's end): no input follows. A node whose
        parts refer back to it breaks those cycles here, so that it is freed at once."""

    def timer_is_moot(self, now_ms: int, key: Any) -> bool | float:
        """True only if ``timer(now_ms, key)`` would do nothing at all; a delay if it would only
        set the same timer again after that delay (see the module doc)."""
        return False
