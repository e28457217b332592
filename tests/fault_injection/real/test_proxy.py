"""The TCP fault proxy against an echo server: pass-through, delay, blackholes (both ways
and one way, held bytes delivered at heal), reset and refused connections."""

from __future__ import annotations

import socket
import socketserver
import threading
import time

import pytest

from fault_injection.real.proxy import FaultProxy


class _Echo(socketserver.BaseRequestHandler):
    def handle(self):
        try:
            while data := self.request.recv(65536):
                self.request.sendall(data)
        except ConnectionError:
            pass  # the proxy reset the connection (drop, close)


@pytest.fixture
def proxy():
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    p = FaultProxy(server.server_address)
    p.start()
    yield p
    p.stop()
    server.shutdown()
    server.server_close()


def _connect(p: FaultProxy) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", p.port), timeout=2)
    return s


def _echo(s: socket.socket, data: bytes, timeout: float = 2) -> bytes:
    s.settimeout(timeout)
    s.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = s.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def test_pass_through_and_delay(proxy):
    s = _connect(proxy)
    assert _echo(s, b"hello") == b"hello"
    proxy.delay(200)
    start = time.monotonic()
    assert _echo(s, b"slow") == b"slow"
    assert time.monotonic() - start >= 0.35  # both directions delayed
    proxy.heal()
    start = time.monotonic()
    assert _echo(s, b"fast") == b"fast"
    assert time.monotonic() - start < 0.2
    s.close()


@pytest.mark.parametrize("direction", ["both", "in", "out"])
def test_blackhole_holds_bytes_until_heal(proxy, direction):
    s = _connect(proxy)
    assert _echo(s, b"before") == b"before"
    proxy.blackhole(direction)
    s.settimeout(0.5)
    s.sendall(b"held")
    with pytest.raises(TimeoutError):
        s.recv(10)
    proxy.heal()
    s.settimeout(2)
    assert s.recv(10) == b"held"  # delivered once the partition heals
    s.close()


def _assert_closed(s, data: bytes) -> None:
    """The connection is reset or closed within three echo attempts."""
    with pytest.raises(OSError):
        for _ in range(3):
            if not _echo(s, data, 1):
                raise ConnectionError("closed")


def test_drop_resets_connections_and_close_refuses_new_ones(proxy):
    s = _connect(proxy)
    assert _echo(s, b"x") == b"x"
    proxy.drop()
    _assert_closed(s, b"y")
    proxy.close()
    with pytest.raises(OSError):  # reset at once: by the connect itself, or by the first echoes
        t = _connect(proxy)
        for _ in range(3):
            if not _echo(t, b"z", 1):
                raise ConnectionError("closed")
    proxy.heal()
    u = _connect(proxy)
    assert _echo(u, b"back") == b"back"
    assert proxy.faults == ["drop", "close"]
