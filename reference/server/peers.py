"""Engine messages between processes: the brokers and the controller of a served cluster.

When the nodes of a cluster run in separate processes (one per broker, one for the
controller), a :class:`~reference.node.Send` to a node of another process travels over a
loopback TCP link. Each frame is ``int32 length`` + JSON of ``[src, dst, message]``; a
message is encoded by :func:`encode` from the frozen dataclasses of
:mod:`reference.messages`, :mod:`reference.group_messages` and :mod:`reference.share_messages`
(only those classes are decoded back, so a peer can never make this process build an
arbitrary object). Links are lossy on purpose: a message for a peer
that is down or unreachable is dropped, and the engine retries as it does over the
simulated network.

Node ids of client connections carry their process (``client_base``), so a response from
the controller to a connection of broker 2 finds its way back.

Authentication: the peer port takes engine messages, so only the cluster's own processes
may talk to it. The launcher writes a random secret into the data directory (``peer.secret``,
mode 0600); a listener opens every connection with a fresh nonce, and the connecting side
must answer HMAC-SHA256(secret, nonce) within a few seconds, or the connection is closed
(logged once a minute). The engine applies the Kafka API's rules to what arrives anyway
(no deleting internal topics, no illegal topic names): the secret keeps strangers out, the
rules keep mistakes in.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import hmac
import json
import logging
import os
import secrets
import struct
import time
from pathlib import Path
from typing import Any

from reference import group_messages, messages, share_messages
from reference.errors import Errors
from reference.messages import TopicPartition

log = logging.getLogger("kafkacheck.server")

_LEN = struct.Struct(">i")
CLIENT_SPAN = 10_000_000  # client ids of the process of node n are (n + 1) * CLIENT_SPAN + k
MAX_FRAME = 256 * 1024 * 1024
# the engine's messages (reference.messages; the consumer groups' in reference.group_messages,
# KIP-932's in reference.share_messages), by name
_CLASSES = {name: cls for module in (messages, group_messages, share_messages) for name, cls in vars(module).items()
            if isinstance(cls, type) and dataclasses.is_dataclass(cls)}


def client_base(node_id: int) -> int:
    return (node_id + 1) * CLIENT_SPAN


def owner_of(node_id: int) -> int:
    """The node whose process hosts ``node_id`` (itself for a node, the host's node for a
    client connection)."""
    return node_id // CLIENT_SPAN - 1 if node_id >= CLIENT_SPAN else node_id


def _enc(v: Any) -> Any:
    if isinstance(v, Errors):
        return {"E": int(v)}
    if isinstance(v, TopicPartition):
        return {"T": [v.topic, v.partition]}
    if isinstance(v, bytes | bytearray | memoryview):
        return {"B": base64.b64encode(bytes(v)).decode()}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {"@": type(v).__name__, "f": [_enc(getattr(v, f.name)) for f in dataclasses.fields(v)]}
    if isinstance(v, tuple | list):
        return [_enc(x) for x in v]
    if v is None or isinstance(v, bool | int | float | str):
        return v
    raise TypeError(f"cannot send a {type(v).__name__} between processes")


def _dec(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_dec(x) for x in v)
    if isinstance(v, dict):
        if "E" in v:
            return Errors(v["E"])
        if "T" in v:
            return TopicPartition(v["T"][0], int(v["T"][1]))
        if "B" in v:
            return base64.b64decode(v["B"])
        cls = _CLASSES[v["@"]]
        return cls(*(_dec(x) for x in v["f"]))
    return v


def encode(src: int, dst: int, message: Any) -> bytes:
    body = json.dumps([src, dst, _enc(message)], separators=(",", ":")).encode()
    return _LEN.pack(len(body)) + body


def decode(body: bytes) -> tuple[int, int, Any]:
    src, dst, message = json.loads(body)
    return int(src), int(dst), _dec(message)


NONCE_BYTES = 16
HANDSHAKE_TIMEOUT_S = 5.0
SECRET_FILE = "peer.secret"


def load_or_create_secret(data_dir: Path) -> bytes:
    """The cluster's peer secret: created once (32 random bytes, owner-only), then read."""
    path = data_dir / SECRET_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    text = path.read_text().strip()
    if len(text) < 32:
        raise ValueError(f"{path}: not a peer secret")
    return bytes.fromhex(text)


def proof(secret: bytes, nonce: bytes) -> bytes:
    return hmac.new(secret, b"kafkacheck-peer:" + nonce, hashlib.sha256).digest()


class LogOnce:
    """Log a kind of trouble at most once a minute (a flood must not fill the disk)."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}
        self.count: dict[str, int] = {}

    def warning(self, kind: str, msg: str, *args: Any) -> None:
        now = time.monotonic()
        self.count[kind] = self.count.get(kind, 0) + 1
        if now - self.last.get(kind, -1e9) >= 60:
            n = self.count.pop(kind)
            self.last[kind] = now
            log.warning(msg + (f" ({n} times in the last minute)" if n > 1 else ""), *args)


class Peers:
    """Links to the other processes of the cluster; ``deliver(src, dst, message)`` is called
    for every message that arrives from an authenticated peer."""

    def __init__(self, addresses: dict[int, tuple[str, int]], deliver, secret: bytes) -> None:
        self.addresses = addresses  # node id -> internal (host, port) of its process
        self.deliver = deliver
        self.secret = secret
        self.links: dict[int, _Link] = {}
        self.server: asyncio.AbstractServer | None = None
        self.once = LogOnce()

    async def listen(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(self._accept, host, port)
        return self.server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            nonce = secrets.token_bytes(NONCE_BYTES)
            writer.write(nonce)
            try:
                answer = await asyncio.wait_for(reader.readexactly(32), HANDSHAKE_TIMEOUT_S)
            except (TimeoutError, asyncio.IncompleteReadError):
                answer = b""
            if not hmac.compare_digest(answer, proof(self.secret, nonce)):
                self.once.warning("peer-auth", "refused a peer connection from %s: it did not prove the "
                                  "cluster's secret", writer.get_extra_info("peername"))
                return
            while True:
                (size,) = _LEN.unpack(await reader.readexactly(4))
                if not 0 < size <= MAX_FRAME:
                    break
                try:
                    src, dst, message = decode(await reader.readexactly(size))
                except (ValueError, KeyError, TypeError, IndexError) as e:
                    log.warning("dropping an undecodable peer message: %s", e)
                    continue
                self.deliver(src, dst, message)
        except (asyncio.IncompleteReadError, ConnectionError, OSError, asyncio.CancelledError):
            pass  # the peer went away, or this process is stopping
        finally:
            writer.close()

    def send(self, src: int, dst: int, message: Any) -> None:
        owner = owner_of(dst)
        if owner not in self.addresses:
            return
        link = self.links.get(owner)
        if link is None:
            link = self.links[owner] = _Link(self.addresses[owner], self.secret)
        link.send(encode(src, dst, message))

    async def close(self) -> None:
        for link in self.links.values():
            link.close()
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await self.server.wait_closed()


class _Link:
    """One outgoing connection; reconnects on the next send after a failure.

    The peer never writes on this connection, so end-of-file from it means its process is
    gone: the link closes at once, and the next message opens a new connection (to the
    restarted process). Without that, the first message after a peer's restart went into the
    dead connection and was lost: a request the engine retries survives that, but a client's
    CreateTopics waiting for the controller's one answer did not (it hung for its timeout)."""

    QUEUE_MAX = 10_000

    def __init__(self, address: tuple[str, int], secret: bytes) -> None:
        self.address = address
        self.secret = secret
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(self.QUEUE_MAX)
        self.task: asyncio.Task | None = None

    def send(self, frame: bytes) -> None:
        if self.queue.full():
            return  # the peer is not keeping up (or is paused): drop, the engine retries
        self.queue.put_nowait(frame)
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(*self.address), 2.0)
        except (OSError, TimeoutError):
            while not self.queue.empty():
                self.queue.get_nowait()  # unreachable: what was queued is lost
            return
        try:  # the listener's nonce, and our proof of the secret
            nonce = await asyncio.wait_for(reader.readexactly(NONCE_BYTES), HANDSHAKE_TIMEOUT_S)
            writer.write(proof(self.secret, nonce))
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            writer.close()
            while not self.queue.empty():
                self.queue.get_nowait()
            return
        gone = asyncio.ensure_future(reader.read(1))
        try:
            while True:
                get = asyncio.ensure_future(self.queue.get())
                await asyncio.wait({get, gone}, return_when=asyncio.FIRST_COMPLETED)
                if gone.done():
                    if get.done():  # taken, not sent: back in line for the next connection
                        self._requeue(get.result())
                    get.cancel()
                    break
                writer.write(get.result())
                await asyncio.wait_for(writer.drain(), 5.0)
        except (ConnectionError, OSError, TimeoutError):
            pass
        finally:
            gone.cancel()
            writer.close()
        if not self.queue.empty():  # messages came while the peer was gone: a new connection
            self.task = asyncio.get_running_loop().create_task(self._run())

    def _requeue(self, frame: bytes) -> None:
        rest = [frame]
        while not self.queue.empty():
            rest.append(self.queue.get_nowait())
        for f in rest:
            self.queue.put_nowait(f)

    def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
