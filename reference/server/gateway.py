"""One client connection: Kafka requests in, engine messages out, and back.

Theory of operation
-------------------
A :class:`Connection` reads size-prefixed frames, decodes each with kafka-python's classes
(:mod:`reference.server.protocol`) and hands it to the handler of its API
(:mod:`reference.server.apis` and :mod:`reference.server.group_apis`), which sends engine
messages through the connection's :meth:`Connection.call` and returns the wire response as
a dict that :func:`~reference.server.protocol.build` turns into the message.

Order: Kafka answers the requests of one connection in the order they came, and a producer
relies on its batches reaching the log in the order it sent them. Each request gets a task
at once; a task sends its engine messages before its first ``await``, so they reach the
broker in arrival order, and a writer task sends the responses in arrival order. At most
``MAX_IN_FLIGHT`` requests of a connection are pending; beyond that the reader waits.

Limits (what a careless or hostile client meets; Kafka has the same kinds):

* a byte budget per connection (``response_budget_bytes``, 32 MB): a request is read only
  while the responses this connection has not yet taken (computed or being computed, counted
  by their size or, before they exist, by what they may hold: a fetch's partition max bytes)
  fit the budget; one request is always admitted. A client that pipelines requests and never
  reads the answers stops being read (as Kafka mutes a connection while its response is
  being sent), and the broker's memory stays bounded;
* ``idle_timeout_s`` (Kafka's ``connections.max.idle.ms``, 10 minutes): a connection with
  nothing in flight that sends nothing is closed; ``request_timeout_s`` (30 s): a request
  whose bytes stop arriving half way is dropped with its connection (slow loris);
* big requests do not stall the broker: a frame over ``BIG_FRAME`` bytes is decoded and its
  response encoded in a worker thread (the event loop keeps serving heartbeats and other
  clients meanwhile), Metadata answers each distinct topic once (as Kafka does: a set) and
  yields to the loop every ``YIELD_EVERY`` topics;
* the number of connections of a process is capped in :mod:`reference.server.cluster`; at
  the cap, a new connection closes the least recently active idle one (``idle``,
  ``last_active``, ``evict``), so idle sockets held open cannot lock working clients out.

Bad input: a frame larger than ``max_request_bytes``, an unknown API key, a version outside
the served range or a body that does not decode closes the connection (what Kafka does),
except an ApiVersions request of a newer version, which is answered with
UNSUPPORTED_VERSION and the served ranges (KIP-511). Corrupt record batches are refused by
the engine with CORRUPT_MESSAGE; nothing a client sends can stop the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from reference.broker import Broker
from reference.errors import Errors
from reference.messages import (
    CreateTopicsRequest,
    PartitionState,
)
from reference.server import protocol
from reference.server.host import Host

log = logging.getLogger("kafkacheck.server")

MAX_IN_FLIGHT = 64
BIG_FRAME = 256 * 1024  # decode and encode frames larger than this off the event loop
YIELD_EVERY = 1000  # topics of one Metadata request handled between two turns of the loop
SMALL_RESPONSE = 64 * 1024  # the budget a request other than Fetch reserves before it is answered
ENGINE_MARGIN_S = 5.0  # how much longer than a request's own timeout we wait for the engine
_CLOSE = object()

@dataclass
class ClusterInfo:
    """What every listener of a served cluster knows about the others."""

    cluster_id: str
    controller_id: int  # the engine's controller node
    endpoints: dict[int, tuple[str, int]]  # broker id -> (host, port)
    default_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics: bool = True
    max_request_bytes: int = 100 * 1024 * 1024
    response_budget_bytes: int = 32 * 1024 * 1024
    idle_timeout_s: float = 600.0
    request_timeout_s: float = 30.0
    broker_configs: dict[str, str] = field(default_factory=dict)
    transaction_version: int = 2  # the finalized transaction.version ApiVersions names (Kafka 4.x's default)


class _Budget:
    """Bytes of responses a connection owes its client (see the module's Limits)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.changed = asyncio.Event()

    async def take(self, n: int) -> None:
        while self.used > 0 and self.used + n > self.limit:
            self.changed.clear()
            await self.changed.wait()
        self.used += n

    def resize(self, old: int, new: int) -> None:
        self.used += new - old

    def give(self, n: int) -> None:
        self.used -= n
        self.changed.set()


def _response_cost(key: int, request: Any) -> int:
    """What a request's response may hold, before it exists: a fetch's partition max bytes."""
    if key == protocol.FETCH_KEY:
        return sum(max(p.partition_max_bytes, 1) for t in request.topics for p in t.partitions)
    return SMALL_RESPONSE


class Connection:
    def __init__(self, host: Host, info: ClusterInfo, broker: Broker,
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 handlers: dict[int, Callable[[Connection, Any, int], Awaitable[dict | None]]]) -> None:
        self.host = host
        self.handlers = handlers  # API key -> handler (reference.server.apis.HANDLERS)
        self.info = info
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.node_id = host.register_client(self._on_message)
        self.pending: dict[int, asyncio.Future] = {}
        self.on_close: list[Callable[[], None]] = []  # run when the connection ends (before it unregisters)
        self.next_corr = 0
        self.queue: asyncio.Queue = asyncio.Queue(MAX_IN_FLIGHT)
        self.peer = writer.get_extra_info("peername")
        self.budget = _Budget(info.response_budget_bytes)
        self.last_active = asyncio.get_running_loop().time()

    def idle(self) -> bool:
        """Nothing in flight: no request being handled, no response waiting to be taken."""
        return self.queue.empty() and self.budget.used == 0 and not self.pending

    def evict(self) -> None:
        """Close the connection (to make room for a new one); serve() then cleans up."""
        self.writer.close()

    # ------------------------------------------------------------ engine calls

    def _on_message(self, src: int, message: Any) -> None:
        fut = self.pending.pop(getattr(message, "correlation_id", None), None)
        if fut is not None and not fut.done():
            fut.set_result(message)

    def post(self, dst: int, cls: type, **fields: Any) -> None:
        """Send an engine request that gets no answer (acks=0)."""
        self.next_corr += 1
        self.host.deliver(self.node_id, dst, cls(correlation_id=self.next_corr, **fields))

    def call(self, dst: int, cls: type, timeout_s: float, **fields: Any) -> Awaitable[Any]:
        """Send an engine request now; the returned awaitable gives its response, or None
        when none came within ``timeout_s``."""
        self.next_corr += 1
        corr = self.next_corr
        fut = asyncio.get_running_loop().create_future()
        self.pending[corr] = fut
        self.host.deliver(self.node_id, dst, cls(correlation_id=corr, **fields))

        async def wait() -> Any:
            try:
                return await asyncio.wait_for(fut, timeout_s)
            except TimeoutError:
                self.pending.pop(corr, None)
                return None
        return wait()

    def local(self, cls: type, timeout_s: float = 30.0, **fields: Any) -> Awaitable[Any]:
        return self.call(self.broker.node_id, cls, timeout_s, **fields)

    # ------------------------------------------------------------ the connection

    async def _read_head(self) -> bytes | None:
        """The next frame's size prefix; None when the connection has been idle (nothing in
        flight, nothing sent) for ``idle_timeout_s``."""
        while True:
            try:
                return await asyncio.wait_for(self.reader.readexactly(4), self.info.idle_timeout_s)
            except TimeoutError:
                if self.queue.empty() and self.budget.used == 0:
                    return None

    async def serve(self) -> None:
        writer_task = asyncio.create_task(self._write_loop())
        try:
            while True:
                head = await self._read_head()
                if head is None:
                    log.info("closing %s: idle for %g s", self.peer, self.info.idle_timeout_s)
                    break
                (size,) = protocol.SIZE.unpack(head)
                if size < protocol.REQUEST_HEADER.size or size > self.info.max_request_bytes:
                    log.info("closing %s: request size %d outside [%d, %d]", self.peer, size,
                             protocol.REQUEST_HEADER.size, self.info.max_request_bytes)
                    break
                try:
                    frame = await asyncio.wait_for(self.reader.readexactly(size), self.info.request_timeout_s)
                except TimeoutError:
                    log.info("closing %s: a request of %d bytes did not arrive within %g s", self.peer, size,
                             self.info.request_timeout_s)
                    break
                try:
                    if size > BIG_FRAME:  # decoding takes long: let the loop serve others meanwhile
                        request, key, version, corr = await asyncio.to_thread(protocol.decode_request, frame)
                    else:
                        request, key, version, corr = protocol.decode_request(frame)
                except protocol.BadRequest as e:
                    key, version, corr = protocol.peek_header(frame)
                    if key == protocol.API_VERSIONS_KEY and version > protocol.SUPPORTED[key][1]:
                        await self.queue.put((protocol.api_versions_error(corr, Errors.UNSUPPORTED_VERSION), 0))
                        continue
                    log.info("closing %s: %s", self.peer, e)
                    break
                del frame
                self.last_active = asyncio.get_running_loop().time()
                cost = min(_response_cost(key, request), self.budget.limit)
                await self.budget.take(cost)  # stop reading while the client does not read
                task = asyncio.create_task(self._handle(request, key, version, corr))
                await self.queue.put((task, cost))
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass  # the client went away
        finally:
            try:
                self.queue.put_nowait(_CLOSE)
                await writer_task
            except (Exception, asyncio.CancelledError):
                writer_task.cancel()
            for closing in self.on_close:
                closing()
            self.host.unregister_client(self.node_id)
            for fut in self.pending.values():
                fut.cancel()
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    async def _write_loop(self) -> None:
        while True:
            item = await self.queue.get()
            if item is _CLOSE:
                return
            job, cost = item
            try:
                data = await job if isinstance(job, asyncio.Task) else job
            except (Exception, asyncio.CancelledError):
                data = _CLOSE
            if data is _CLOSE:
                self.writer.close()
                return
            if data:
                self.budget.resize(cost, len(data))  # the real size, from now until it is taken
                cost = len(data)
                self.writer.write(data)
                try:
                    await self.writer.drain()
                except (ConnectionError, OSError):
                    return
                self.last_active = asyncio.get_running_loop().time()
            self.budget.give(cost)

    async def _handle(self, request: Any, key: int, version: int, corr: int) -> Any:
        handler = self.handlers[key]
        try:
            log.debug("%s v%d corr %d from %s", protocol.API_NAMES[key], version, corr, self.peer)
            values = await handler(self, request, version)
            log.debug("%s v%d corr %d answered", protocol.API_NAMES[key], version, corr)
            if values is None:
                return None  # acks=0: no response
            if key == protocol.METADATA_KEY and len(values.get("topics") or ()) > YIELD_EVERY:
                return await asyncio.to_thread(protocol.encode_response, key, version, corr, values)
            return protocol.encode_response(key, version, corr, values)
        except Exception:
            log.exception("%s v%d from %s failed", protocol.API_NAMES[key], version, self.peer)
            return _CLOSE

    # ------------------------------------------------------------ metadata helpers

    def _image_partitions(self) -> dict[str, list[PartitionState]]:
        topics: dict[str, list[PartitionState]] = {}
        for s in self.broker.metadata.partitions:
            topics.setdefault(s.tp.topic, []).append(s)
        return topics

    def _endpoint(self, node_id: int) -> tuple[str, int]:
        return self.info.endpoints.get(node_id, ("", -1))

    def _create(self, name: str, partitions: int, replication_factor: int,
                configs: tuple[tuple[str, str], ...] = (),
                assignments: tuple[tuple[int, tuple[int, ...]], ...] = ()) -> Awaitable[Any]:
        return self.call(self.info.controller_id, CreateTopicsRequest, 30.0, name=name,
                         num_partitions=partitions, replication_factor=replication_factor,
                         configs=configs, assignments=assignments)

    async def _await_topic(self, name: str, present: bool, deadline_s: float) -> None:
        """Wait (at most ``deadline_s``) until this broker's metadata shows the topic with a
        leader for every partition, or (``present=False``) no longer shows it."""
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        while loop.time() < end:
            parts = self._image_partitions().get(name)
            if present and parts and all(s.leader >= 0 for s in parts):
                return
            if not present and not parts:
                return
            await asyncio.sleep(0.02)
