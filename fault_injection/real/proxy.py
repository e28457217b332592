"""A TCP fault proxy for real brokers: what the simulated network does, on a loopback port.

A :class:`FaultProxy` listens on one port and forwards every connection to one upstream
address (a broker's listener). The broker advertises the proxy's port, so clients reach it
only through the proxy. Faults, applied to the connections open now and to new ones until
:meth:`FaultProxy.heal`:

* ``delay(ms)`` -- every chunk is forwarded ``ms`` later (order kept);
* ``blackhole(direction)`` -- nothing is forwarded in that direction (``"in"``: client to
  broker, ``"out"``: broker to client, ``"both"``); what was held back is delivered at
  heal, as TCP retransmits once a partition heals. One direction is a one-way partition;
* ``drop()`` -- every open connection is reset, and bytes in flight are lost;
* ``close()`` -- open connections are closed and new ones are accepted and closed at once
  (the broker looks down) until heal.

With ``frames=True`` (a Kafka listener) the proxy forwards whole Kafka frames (a 4-byte
size, then the request or response) and knows every request it forwards
(:func:`reference.server.protocol.peek_request`: API, version, correlation id, and for the
transaction APIs the producer and transaction it belongs to). Two things build on that:

* an ``observer`` is told of every request forwarded and of every response delivered to the
  client (``observer("request" | "response", info, frame)``, from the proxy's thread; the
  frame, with its size prefix, is the request's or the response's);
* :meth:`FaultProxy.arm` holds back one request: the first request that a
  :class:`HoldClaim` accepts is not forwarded; the client side of its connection is reset
  at once (``mode="reset"``) or left open and silent (``"abandon"``: the client times out),
  so the client retries on a new connection, while the upstream connection stays open. The
  held bytes reach the broker when :meth:`HeldRequest.release` is called, on that old
  connection, and the broker's answer is kept (:attr:`HeldRequest.answer`): a request
  delivered late, after the client moved on -- a straggler (fault_injection/real/straggle.py).

The proxy runs its own asyncio loop in a daemon thread; the methods are thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reference.server.protocol import peek_request, response_errors

MAX_FRAME = 100 * 1024 * 1024  # a larger size prefix is not a Kafka frame: the connection is cut
ANSWER_TIMEOUT_S = 30.0  # how long a released request's answer is waited for on its old connection


@dataclass(eq=False)  # hashed by identity: kept in a set
class _Pipe:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    peer_writer: asyncio.StreamWriter
    direction: str  # "in" (client -> upstream) or "out"
    conn: _Conn | None = None  # frames mode: the connection both pipes belong to


@dataclass(eq=False)
class _Conn:
    """One client connection in frames mode: the requests forwarded and not yet answered."""

    number: int
    client_w: asyncio.StreamWriter
    upstream_w: asyncio.StreamWriter
    in_flight: dict[int, dict] = field(default_factory=dict)  # correlation id -> request info
    held: HeldRequest | None = None  # set once a request of this connection is held back


class HoldClaim:
    """Which request to hold: :meth:`claim` is asked for every request a frames-mode proxy
    forwards while armed, from the proxies' threads; the first it accepts is held and
    :meth:`on_held` is called with it. Accept at most once (the proxies of a cluster share
    one claim)."""

    mode = "reset"  # or "abandon"

    def claim(self, proxy: str, info: dict) -> bool:
        raise NotImplementedError

    def on_held(self, held: HeldRequest) -> None:
        pass


@dataclass(eq=False)
class HeldRequest:
    """A request the proxy held back: its bytes, what it is, and, once released, the answer."""

    proxy: str
    info: dict
    frame: bytes  # with its size prefix
    held_at: float  # time.monotonic()
    _proxy: FaultProxy | None = None
    _conn: _Conn | None = None
    released_at: float | None = None
    answer: list[str] | None = None  # the error names of the broker's answer (["NONE"] for success)
    outcome: str = ""  # "answered", "no answer", "connection closed before release", "dropped"
    done: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        """Send the held bytes to the broker now, on the connection they came in on."""
        if self._proxy is not None:
            self._proxy._call(self._release)

    def drop(self) -> None:
        """Never deliver it: close its upstream connection."""
        if self._proxy is not None:
            self._proxy._call(lambda: self._finish("dropped", None))

    def _release(self) -> None:
        if self.done.is_set() or self.released_at is not None:
            return
        assert self._conn is not None
        w = self._conn.upstream_w
        if w.is_closing():
            self._finish("connection closed before release", None)
            return
        self.released_at = time.monotonic()
        try:
            w.write(self.frame)
        except (ConnectionError, OSError, RuntimeError):
            self._finish("connection closed before release", None)
            return
        assert self._proxy is not None and self._proxy.loop is not None
        self._proxy.loop.call_later(ANSWER_TIMEOUT_S, lambda: self._finish("no answer", None))

    def _finish(self, outcome: str, answer: list[str] | None) -> None:
        if self.done.is_set():
            return
        self.outcome, self.answer = outcome, answer
        if self._conn is not None:
            _abort(self._conn.upstream_w)
        self.done.set()


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], host: str = "127.0.0.1", port: int = 0, name: str = "",
                 frames: bool = False) -> None:
        self.upstream = upstream
        self.host = host
        self.port = port
        self.name = name or f"proxy->{upstream[1]}"
        self.frames = frames
        self.observer: Callable[[str, dict, bytes | None], None] | None = None
        self.delay_ms = 0.0
        self.blocked: set[str] = set()
        self.refusing = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.server: asyncio.AbstractServer | None = None
        self.pipes: set[_Pipe] = set()
        self.faults: list[str] = []
        self._ready = threading.Event()
        self._healed: asyncio.Event | None = None
        self._claim: HoldClaim | None = None
        self._numbers = itertools.count(1)

    # ------------------------------------------------------------ lifecycle

    def start(self) -> int:
        self.thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self.thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"{self.name} did not start")
        return self.port

    def _run(self) -> None:
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self._healed = asyncio.Event()
        self._healed.set()
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._accept, self.host, self.port, reuse_address=True))
        self.port = self.server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self._shutdown())
        self.loop.close()

    async def _shutdown(self) -> None:
        # a connection accepted just before the stop has its task cancelled before it ran:
        # asyncio's stream callback then asks that task for its exception and logs the
        # CancelledError with a traceback (Ctrl-C printed one); a cancelled task is the stop
        asyncio.get_running_loop().set_exception_handler(_quiet_cancelled)
        if self.server is not None:
            self.server.close()
        for p in list(self.pipes):
            _abort(p.writer)
            if p.conn is not None and p.conn.held is not None:
                p.conn.held._finish("dropped", None)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def stop(self) -> None:
        if self.loop is not None and self.thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)

    # ------------------------------------------------------------ faults

    def _call(self, fn) -> None:
        assert self.loop is not None
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()
        try:
            self.loop.call_soon_threadsafe(run)
        except RuntimeError:  # the proxy has stopped
            return
        done.wait(5)

    def delay(self, ms: float) -> None:
        self.faults.append(f"delay {ms:g} ms")
        self._call(lambda: setattr(self, "delay_ms", float(ms)))

    def blackhole(self, direction: str = "both") -> None:
        if direction not in ("in", "out", "both"):
            raise ValueError(f"direction must be in, out or both, not {direction!r}")
        self.faults.append(f"blackhole {direction}")

        def apply() -> None:
            self.blocked = {"in", "out"} if direction == "both" else {direction}
            assert self._healed is not None
            self._healed.clear()
        self._call(apply)

    def drop(self) -> None:
        """Reset every open connection (in-flight bytes are lost)."""
        self.faults.append("drop")
        self._call(lambda: [_abort(p.writer) for p in list(self.pipes)])

    def close(self) -> None:
        """Close every connection and refuse new ones until heal."""
        self.faults.append("close")

        def apply() -> None:
            self.refusing = True
            for p in list(self.pipes):
                _abort(p.writer)
        self._call(apply)

    def arm(self, claim: HoldClaim) -> None:
        """Hold back the first request ``claim`` accepts (frames mode only)."""
        if not self.frames:
            raise ValueError(f"{self.name} does not read Kafka frames: it cannot hold a request")
        self.faults.append("hold")
        self._call(lambda: setattr(self, "_claim", claim))

    def disarm(self) -> None:
        self._call(lambda: setattr(self, "_claim", None))

    def heal(self) -> None:
        """End delay, blackholes and refusals (a held request is released by its owner)."""
        def apply() -> None:
            self.delay_ms = 0.0
            self.blocked = set()
            self.refusing = False
            self._claim = None
            assert self._healed is not None
            self._healed.set()
        self._call(apply)

    # ------------------------------------------------------------ forwarding

    async def _accept(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            await self._forward(client_r, client_w)
        except asyncio.CancelledError:  # the proxy is stopping: nothing to report
            _abort(client_w)

    async def _forward(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self.refusing:
            _abort(client_w)
            return
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection(*self.upstream), 5)
        except (OSError, TimeoutError):
            _abort(client_w)
            return
        conn = _Conn(next(self._numbers), client_w, up_w) if self.frames else None
        a = _Pipe(client_r, client_w, up_w, "in", conn)
        b = _Pipe(up_r, up_w, client_w, "out", conn)
        self.pipes |= {a, b}
        try:
            if conn is None:
                await asyncio.gather(self._pump(a), self._pump(b))
            else:
                await asyncio.gather(self._pump_requests(a, conn), self._pump_responses(b, conn))
        finally:
            self.pipes -= {a, b}
            _abort(client_w)
            if conn is None or conn.held is None:
                _abort(up_w)

    async def _pass(self, p: _Pipe) -> None:
        """Wait while ``p``'s direction is blackholed, then for the delay."""
        assert self._healed is not None
        while p.direction in self.blocked:
            await self._healed.wait()  # held back: delivered after heal
        if self.delay_ms > 0:
            await asyncio.sleep(self.delay_ms / 1000)

    async def _pump(self, p: _Pipe) -> None:
        try:
            while True:
                data = await p.reader.read(65536)
                if not data:
                    break
                await self._pass(p)
                p.peer_writer.write(data)
                await p.peer_writer.drain()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            _abort(p.peer_writer)

    async def _pump_requests(self, p: _Pipe, conn: _Conn) -> None:
        """Client to broker, a whole request at a time; the one a claim accepts is held."""
        try:
            while True:
                frame = await _read_frame(p.reader)
                if frame is None:
                    break
                if conn.held is not None:
                    continue  # after the held request nothing more of this connection goes through
                await self._pass(p)
                claim = self._claim
                # a request is decoded only while someone asks (a hold armed, an observer)
                info = _peek(frame) if claim is not None or self.observer is not None else None
                if claim is not None and info is not None and claim.claim(self.name, info):
                    self._hold(conn, info, frame, claim)
                    continue
                if info is not None:
                    conn.in_flight[info["correlation_id"]] = info
                p.peer_writer.write(frame)
                await p.peer_writer.drain()
                if info is not None and self.observer is not None:
                    self.observer("request", {**info, "proxy": self.name, "connection": conn.number}, frame)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            if conn.held is None:
                _abort(p.peer_writer)

    def _hold(self, conn: _Conn, info: dict, frame: bytes, claim: HoldClaim) -> None:
        held = HeldRequest(self.name, {**info, "proxy": self.name, "connection": conn.number}, frame,
                           time.monotonic(), self, conn)
        conn.held = held
        self._claim = None
        if claim.mode == "reset":
            _abort(conn.client_w)  # the client sees its connection reset and retries elsewhere
        claim.on_held(held)

    async def _pump_responses(self, p: _Pipe, conn: _Conn) -> None:
        """Broker to client, a whole response at a time; once a request of this connection is
        held, nothing more reaches the client, and the answer to the held request is kept."""
        try:
            while True:
                frame = await _read_frame(p.reader)
                if frame is None:
                    break
                corr = struct.unpack_from(">i", frame, 4)[0] if len(frame) >= 8 else None
                held = conn.held
                if held is not None:
                    if held.released_at is not None and corr == held.info["correlation_id"]:
                        held._finish("answered", response_errors(held.info["api_key"], held.info["api_version"],
                                                                 frame[4:]))
                        break
                    continue  # the client is gone: answers to its earlier requests are lost
                await self._pass(p)
                p.peer_writer.write(frame)
                await p.peer_writer.drain()
                request = conn.in_flight.pop(corr, None) if corr is not None else None
                if request is not None and self.observer is not None:
                    self.observer("response", {**request, "proxy": self.name, "connection": conn.number}, frame)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass
        finally:
            if conn.held is not None:
                conn.held._finish("connection closed before release" if conn.held.released_at is None
                                  else "no answer", None)
            _abort(p.peer_writer)


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """One size-prefixed frame (with its prefix), None at the end of the stream."""
    try:
        prefix = await reader.readexactly(4)
    except asyncio.IncompleteReadError:
        return None
    (size,) = struct.unpack(">i", prefix)
    if size < 0 or size > MAX_FRAME:
        raise ConnectionError(f"a frame of {size} bytes is not Kafka")
    return prefix + await reader.readexactly(size)


def _peek(frame: bytes) -> dict[str, Any] | None:
    try:
        return peek_request(frame[4:])
    except Exception:
        return None


def _quiet_cancelled(loop: asyncio.AbstractEventLoop, context: dict) -> None:
    """The proxy's loop, stopping: a cancelled task is not an error; anything else is logged."""
    if not isinstance(context.get("exception"), asyncio.CancelledError):
        loop.default_exception_handler(context)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a reset (SO_LINGER 0), as a dropped connection looks to the other side."""
    with contextlib.suppress(Exception):
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
