"""Engine messages between processes: the brokers and the controller of a served cluster.

When the nodes of a cluster run in separate processes (one per broker, one for the
controller), a :class:`~reference.node.Send` to a node of another process travels over a
loopback TCP link. Each frame is ``int32 length`` + JSON of ``[src, dst, message]``; a
message is encoded by :func:`encode` from the frozen dataclasses of
:mod:`reference.messages` (only those classes are decoded back, so a peer can never make
this process build an arbitrary object). Links are lossy on purpose: a message for a peer
that is down or unreachable is dropped, and the engine retries as it does over the
simulated network.

Node ids of client connections carry their process (``client_base``), so a response from
the controller to a connection of broker 2 finds its way back.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import logging
import struct
from typing import Any

from reference import messages
from reference.errors import Errors
from reference.messages import TopicPartition

log = logging.getLogger("kafkacheck.server")

_LEN = struct.Struct(">i")
CLIENT_SPAN = 10_000_000  # client ids of the process of node n are (n + 1) * CLIENT_SPAN + k
MAX_FRAME = 256 * 1024 * 1024
_CLASSES = {name: cls for name, cls in vars(messages).items()
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


class Peers:
    """Links to the other processes of the cluster; ``deliver(src, dst, message)`` is called
    for every message that arrives."""

    def __init__(self, addresses: dict[int, tuple[str, int]], deliver) -> None:
        self.addresses = addresses  # node id -> internal (host, port) of its process
        self.deliver = deliver
        self.links: dict[int, _Link] = {}
        self.server: asyncio.AbstractServer | None = None

    async def listen(self, host: str, port: int) -> int:
        self.server = await asyncio.start_server(self._accept, host, port)
        return self.server.sockets[0].getsockname()[1]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
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
            link = self.links[owner] = _Link(self.addresses[owner])
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

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
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
