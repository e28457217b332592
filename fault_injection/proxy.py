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

The proxy runs its own asyncio loop in a daemon thread; the methods are thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from dataclasses import dataclass, field


@dataclass(eq=False)  # hashed by identity: kept in a set
class _Pipe:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    peer_writer: asyncio.StreamWriter
    direction: str  # "in" (client -> upstream) or "out"
    held: list[bytes] = field(default_factory=list)


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], host: str = "127.0.0.1", port: int = 0, name: str = "") -> None:
        self.upstream = upstream
        self.host = host
        self.port = port
        self.name = name or f"proxy->{upstream[1]}"
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
        if self.server is not None:
            self.server.close()
        for p in list(self.pipes):
            _abort(p.writer)
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
        self.loop.call_soon_threadsafe(run)
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

    def heal(self) -> None:
        def apply() -> None:
            self.delay_ms = 0.0
            self.blocked = set()
            self.refusing = False
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
        a = _Pipe(client_r, client_w, up_w, "in")
        b = _Pipe(up_r, up_w, client_w, "out")
        self.pipes |= {a, b}
        try:
            await asyncio.gather(self._pump(a), self._pump(b))
        finally:
            self.pipes -= {a, b}
            _abort(client_w)
            _abort(up_w)

    async def _pump(self, p: _Pipe) -> None:
        assert self._healed is not None
        try:
            while True:
                data = await p.reader.read(65536)
                if not data:
                    break
                while p.direction in self.blocked:
                    await self._healed.wait()  # held back: delivered after heal
                if self.delay_ms > 0:
                    await asyncio.sleep(self.delay_ms / 1000)
                p.peer_writer.write(data)
                await p.peer_writer.drain()
        except (ConnectionError, OSError, asyncio.CancelledError):
            pass
        finally:
            _abort(p.peer_writer)


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with a reset (SO_LINGER 0), as a dropped connection looks to the other side."""
    with contextlib.suppress(Exception):
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()
