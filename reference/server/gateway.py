"""One client connection: Kafka requests in, engine messages out, and back.

Theory of operation
-------------------
A :class:`Connection` reads size-prefixed frames, decodes each with kafka-python's classes
(:mod:`reference.server.protocol`) and hands it to the handler of its API. A handler turns
the request into engine messages (``reference.messages``; a wire request naming several
partitions becomes one engine request per partition), sends them to the broker this
listener belongs to (or to the controller, for topic changes) under this connection's own
node id, awaits the engine's responses, and returns the wire response as a dict that
:func:`~reference.server.protocol.build` turns into the message. A few read-only APIs
(Metadata, DescribeConfigs, DescribeCluster, DescribeGroups, ListGroups) read the local
broker's state directly, as a broker answers them from its metadata cache.

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

from reference import records as rec
from reference.broker import Broker
from reference.errors import Errors
from reference.group_state import GroupState
from reference.log import LogConfig
from reference.messages import (
    COORDINATOR_GROUP,
    COORDINATOR_TRANSACTION,
    AddOffsetsToTxnRequest,
    AddPartitionsToTxnRequest,
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    EndTxnRequest,
    FetchPartition,
    FetchRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    InitProducerIdRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListOffsetsRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
    PartitionState,
    ProduceRequest,
    SyncGroupRequest,
    TopicPartition,
    TxnOffsetCommitRequest,
)
from reference.server import protocol
from reference.server.host import Host
from reference.topics import INTERNAL_TOPICS, legal_topic_name

log = logging.getLogger("kafkacheck.server")

MAX_IN_FLIGHT = 64
BIG_FRAME = 256 * 1024  # decode and encode frames larger than this off the event loop
YIELD_EVERY = 1000  # topics of one Metadata request handled between two turns of the loop
SMALL_RESPONSE = 64 * 1024  # the budget a request other than Fetch reserves before it is answered
ENGINE_MARGIN_S = 5.0  # how much longer than a request's own timeout we wait for the engine
_CLOSE = object()

# topic configs the engine applies, and those it accepts without acting on them
TOPIC_CONFIGS = ("cleanup.policy", "retention.ms", "retention.bytes", "segment.bytes", "segment.ms",
                 "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "max.compaction.lag.ms",
                 "delete.retention.ms", "min.insync.replicas")
IGNORED_TOPIC_CONFIGS = ("compression.type", "message.timestamp.type",
                         "max.message.bytes", "file.delete.delay.ms", "flush.messages", "flush.ms",
                         "unclean.leader.election.enable",
                         "message.downconversion.enable", "index.interval.bytes",
                         "segment.index.bytes", "segment.jitter.ms", "preallocate")


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


def _e(error: Errors | int) -> int:
    return int(error)


def validate_topic_configs(configs: dict[str, str | None]) -> str | None:
    """None if the engine can take these topic configs, else why not."""
    for name, value in configs.items():
        if name not in TOPIC_CONFIGS and name not in IGNORED_TOPIC_CONFIGS:
            return f"unknown or unsupported topic config {name}"
        if value is None:
            return f"config {name} has no value"
    if "cleanup.policy" in configs and not set(configs["cleanup.policy"].split(",")) <= {"delete", "compact"}:
        return f"cleanup.policy must be delete, compact or both, not {configs['cleanup.policy']!r}"
    if "min.insync.replicas" in configs and not (configs["min.insync.replicas"] or "").isdigit():
        return "min.insync.replicas must be a positive integer"
    try:
        LogConfig.from_topic(LogConfig(), {k: v for k, v in configs.items() if k in TOPIC_CONFIGS})
    except (TypeError, ValueError) as e:
        return f"bad config value: {e}"
    return None


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
                 reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.host = host
        self.info = info
        self.broker = broker
        self.reader = reader
        self.writer = writer
        self.node_id = host.register_client(self._on_message)
        self.pending: dict[int, asyncio.Future] = {}
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
        handler = HANDLERS[key]
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
                configs: tuple[tuple[str, str], ...] = ()) -> Awaitable[Any]:
        return self.call(self.info.controller_id, CreateTopicsRequest, 30.0, name=name,
                         num_partitions=partitions, replication_factor=replication_factor,
                         configs=configs)

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


# ---------------------------------------------------------------- handlers

async def api_versions(c: Connection, req: Any, v: int) -> dict:
    return {"error_code": 0, "throttle_time_ms": 0,
            "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                         for k, (lo, hi) in sorted(protocol.SUPPORTED.items())]}


async def metadata(c: Connection, req: Any, v: int) -> dict:
    image = c.broker.metadata
    topics = c._image_partitions()
    live = [b for b in image.live_brokers if b in c.info.endpoints]
    wanted: list[str | None]
    if req.topics is None or (v == 0 and not req.topics):
        wanted = sorted(topics)
    else:
        wanted = list(dict.fromkeys(t.name for t in req.topics))  # each topic once, as Kafka (a set)
    auto = c.info.auto_create_topics and (v < 4 or req.allow_auto_topic_creation)
    out = []
    for i, name in enumerate(wanted):
        if i and i % YIELD_EVERY == 0:
            await asyncio.sleep(0)  # a request naming many topics does not stall the broker
        if name is None:
            out.append({"error_code": _e(Errors.UNKNOWN_TOPIC_ID), "name": None, "partitions": []})
            continue
        parts = topics.get(name)
        if parts is None:
            error = Errors.UNKNOWN_TOPIC_OR_PARTITION
            if not legal_topic_name(name):
                error = Errors.INVALID_TOPIC_EXCEPTION
            elif auto and name not in INTERNAL_TOPICS:
                c.post(c.info.controller_id, CreateTopicsRequest, name=name,
                       num_partitions=c.info.default_partitions,
                       replication_factor=min(c.info.default_replication_factor, len(live) or 1))
                error = Errors.LEADER_NOT_AVAILABLE
            out.append({"error_code": _e(error), "name": name, "partitions": [],
                        "topic_id": protocol.topic_id(name)})
            continue
        out.append({
            "error_code": 0, "name": name, "topic_id": protocol.topic_id(name),
            "is_internal": name in INTERNAL_TOPICS,
            "partitions": [{
                "error_code": _e(Errors.NONE if s.leader >= 0 else Errors.LEADER_NOT_AVAILABLE),
                "partition_index": s.tp.partition, "leader_id": s.leader,
                "leader_epoch": s.leader_epoch, "replica_nodes": list(s.replicas),
                "isr_nodes": list(s.isr),
                "offline_replicas": [r for r in s.replicas if r not in image.live_brokers],
            } for s in sorted(parts, key=lambda s: s.tp.partition)],
        })
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": b, "host": c._endpoint(b)[0], "port": c._endpoint(b)[1], "rack": None}
                    for b in live],
        "cluster_id": c.info.cluster_id,
        "controller_id": live[0] if live else -1,
        "topics": out,
    }


async def produce(c: Connection, req: Any, v: int) -> dict | None:
    acks = req.acks
    jobs: list[tuple[str, int, Any]] = []
    for t in req.topic_data:
        for p in t.partition_data:
            tp = TopicPartition(t.name, p.index)
            records = p.records or b""
            error = None
            try:
                header = rec.parse_header(records)
                if header.size != len(records):
                    error = Errors.INVALID_RECORD  # exactly one batch per partition (v3+)
            except rec.CorruptRecordError:
                error = Errors.CORRUPT_MESSAGE
            if error is None and acks == 0:
                c.post(c.broker.node_id, ProduceRequest, acks=0, timeout_ms=req.timeout_ms, tp=tp,
                       records=records, transactional_id=req.transactional_id)
            elif error is None:
                jobs.append((t.name, p.index, c.local(
                    ProduceRequest, req.timeout_ms / 1000 + ENGINE_MARGIN_S, acks=acks,
                    timeout_ms=req.timeout_ms, tp=tp, records=records,
                    transactional_id=req.transactional_id)))
            else:
                jobs.append((t.name, p.index, error))
    if acks == 0:
        return None

    def entry(index: int, r: Any) -> dict:
        if isinstance(r, Errors) or r is None:
            error, base, start = (r if r is not None else Errors.REQUEST_TIMED_OUT), -1, -1
        else:
            error, base, start = r.error, r.base_offset, r.log_start_offset
        if error is Errors.TRANSACTION_ABORTABLE and v < 11:
            error = Errors.INVALID_TXN_STATE  # what producers before Produce v11 expect (as Kafka)
        return {"index": index, "error_code": _e(error), "base_offset": base, "log_append_time_ms": -1,
                "log_start_offset": start, "record_errors": [], "error_message": None}

    by_topic = await _per_partition(jobs, entry)
    return {"throttle_time_ms": 0, "responses": [
        {"name": name, "partition_responses": parts} for name, parts in by_topic.items()]}


async def fetch(c: Connection, req: Any, v: int) -> dict:
    parts = []
    for t in req.topics:
        for p in t.partitions:
            parts.append(FetchPartition(TopicPartition(t.topic, p.partition),
                                        p.current_leader_epoch if v >= 9 else -1,
                                        p.fetch_offset, -1, max(p.partition_max_bytes, 1)))
    wait_ms = max(0, min(req.max_wait_ms, 30_000))
    resp = await c.local(FetchRequest, wait_ms / 1000 + ENGINE_MARGIN_S, replica_id=-1,
                         replica_epoch=-1, max_wait_ms=wait_ms,
                         isolation_level=req.isolation_level, partitions=tuple(parts))
    fetched = {r.tp: r for r in resp.partitions} if resp is not None else {}
    by_topic: dict[str, list[dict]] = {}
    for fp in parts:
        r = fetched.get(fp.tp)
        if r is None:
            entry = {"partition_index": fp.tp.partition, "error_code": _e(Errors.REQUEST_TIMED_OUT),
                     "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                     "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}
        elif r.error is not Errors.NONE:  # Kafka answers an error without offsets
            entry = {"partition_index": fp.tp.partition, "error_code": _e(r.error),
                     "high_watermark": -1, "last_stable_offset": -1, "log_start_offset": -1,
                     # a partition Kafka does not know is refused before any read (an empty
                     # list); a failed read has no aborted transactions (null)
                     "aborted_transactions": [] if r.error is Errors.UNKNOWN_TOPIC_OR_PARTITION else None,
                     "preferred_read_replica": -1, "records": b""}
        else:
            entry = {"partition_index": fp.tp.partition, "error_code": _e(r.error),
                     "high_watermark": r.high_watermark,
                     "last_stable_offset": r.last_stable_offset if r.last_stable_offset >= 0 else r.high_watermark,
                     "log_start_offset": r.log_start_offset,
                     "aborted_transactions": [{"producer_id": pid, "first_offset": first}
                                              for pid, first in r.aborted_transactions]
                     if req.isolation_level == 1 else None,
                     "preferred_read_replica": -1, "records": b"".join(r.records)}
        by_topic.setdefault(fp.tp.topic, []).append(entry)
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
            "responses": [{"topic": name, "partitions": ps} for name, ps in by_topic.items()]}


async def _per_partition(jobs: list[tuple[str, int, Any]], entry: Callable[[int, Any], dict]) -> dict[str, list[dict]]:
    """Await every partition's engine call at once and group the replies by topic. ``jobs``
    are (topic, partition, an awaitable, or an Errors answered without the engine);
    ``entry(partition, answer)`` builds a partition's reply (answer None: none came in time)."""
    answers = iter(await asyncio.gather(*(j for *_, j in jobs if not isinstance(j, Errors))))
    by_topic: dict[str, list[dict]] = {}
    for name, index, job in jobs:
        by_topic.setdefault(name, []).append(entry(index, job if isinstance(job, Errors) else next(answers)))
    return by_topic


async def list_offsets(c: Connection, req: Any, v: int) -> dict:
    jobs = []
    for t in req.topics:
        for p in t.partitions:
            jobs.append((t.name, p.partition_index, c.local(
                ListOffsetsRequest, 30.0, tp=TopicPartition(t.name, p.partition_index),
                timestamp=p.timestamp, current_leader_epoch=p.current_leader_epoch if v >= 4 else -1,
                isolation_level=req.isolation_level if v >= 2 else 0)))

    def entry(index: int, r: Any) -> dict:
        if r is None:
            return {"partition_index": index, "error_code": _e(Errors.REQUEST_TIMED_OUT),
                    "timestamp": -1, "offset": -1, "leader_epoch": -1}
        return {"partition_index": index, "error_code": _e(r.error), "timestamp": r.timestamp,
                "offset": r.offset, "leader_epoch": r.leader_epoch}

    by_topic = await _per_partition(jobs, entry)
    return {"throttle_time_ms": 0,
            "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}


async def offset_for_leader_epoch(c: Connection, req: Any, v: int) -> dict:
    jobs = []
    for t in req.topics:
        for p in t.partitions:
            jobs.append((t.topic, p.partition, c.local(
                OffsetForLeaderEpochRequest, 30.0, replica_id=-1,
                tp=TopicPartition(t.topic, p.partition),
                current_leader_epoch=p.current_leader_epoch, leader_epoch=p.leader_epoch)))

    def entry(index: int, r: Any) -> dict:
        error, epoch, end = (Errors.REQUEST_TIMED_OUT, -1, -1) if r is None else (r.error, r.leader_epoch, r.end_offset)
        return {"error_code": _e(error), "partition": index, "leader_epoch": epoch, "end_offset": end}

    by_topic = await _per_partition(jobs, entry)
    return {"throttle_time_ms": 0,
            "topics": [{"topic": n, "partitions": ps} for n, ps in by_topic.items()]}


# ---------------------------------------------------------------- topics and admin

async def create_topics(c: Connection, req: Any, v: int) -> dict:
    live = len(c.broker.metadata.live_brokers)
    existing = c._image_partitions()
    results = []
    created = []
    for t in req.topics:
        partitions = c.info.default_partitions if t.num_partitions == -1 else t.num_partitions
        rf = min(c.info.default_replication_factor, max(live, 1)) if t.replication_factor == -1 \
            else t.replication_factor
        configs = {cfg.name: cfg.value for cfg in t.configs}
        error, message = Errors.NONE, None
        if not legal_topic_name(t.name):
            error, message = Errors.INVALID_TOPIC_EXCEPTION, f"illegal topic name {t.name!r}"
        elif t.name in INTERNAL_TOPICS or t.name in existing:
            error, message = Errors.TOPIC_ALREADY_EXISTS, f"topic {t.name} already exists"
        elif t.assignments:
            error, message = Errors.INVALID_REQUEST, "manual replica assignments are not supported"
        elif partitions < 1:
            error, message = Errors.INVALID_PARTITIONS, "the number of partitions must be at least 1"
        elif rf < 1 or rf > live:
            error, message = Errors.INVALID_REPLICATION_FACTOR, \
                f"replication factor {rf} with {live} live brokers"
        elif (why := validate_topic_configs(configs)) is not None:
            error, message = Errors.INVALID_CONFIG, why
        # v5+ (KIP-525): the new topic's configs; the Java AdminClient needs the list
        entry = {"name": t.name, "topic_id": protocol.topic_id(t.name), "error_code": _e(error),
                 "error_message": message, "num_partitions": partitions, "replication_factor": rf,
                 "configs": [{"name": n, "value": val, "read_only": False, "config_source": src, "is_sensitive": False}
                             for n, val, src in _topic_config_entries(configs)]}
        if error is not Errors.NONE:  # Kafka tells nothing of a topic it refused
            entry.update(num_partitions=-1, replication_factor=-1, configs=[])
        results.append(entry)
        if error is Errors.NONE and not req.validate_only:
            cfg = tuple(sorted((k, v) for k, v in configs.items() if k in TOPIC_CONFIGS))
            created.append((entry, c._create(t.name, partitions, rf, cfg)))
    answers = await asyncio.gather(*(job for _, job in created))
    for (entry, _), r in zip(created, answers, strict=True):
        if r is None:
            entry["error_code"], entry["error_message"] = _e(Errors.REQUEST_TIMED_OUT), "the controller did not answer"
        elif r.error is not Errors.NONE:
            entry["error_code"], entry["error_message"] = _e(r.error), r.error.name
        if entry["error_code"]:
            entry.update(num_partitions=-1, replication_factor=-1, configs=[])
    wait = max(req.timeout_ms, 0) / 1000
    await asyncio.gather(*(c._await_topic(e["name"], True, wait) for e, _ in created if e["error_code"] == 0))
    return {"throttle_time_ms": 0, "topics": results}


async def delete_topics(c: Connection, req: Any, v: int) -> dict:
    existing = c._image_partitions()
    out = []
    jobs = []
    for name in req.topic_names:
        entry = {"name": name, "error_code": 0, "error_message": None}
        out.append(entry)
        if name in INTERNAL_TOPICS:
            entry["error_code"], entry["error_message"] = _e(Errors.INVALID_TOPIC_EXCEPTION), "internal topic"
        elif name not in existing:
            entry["error_code"] = _e(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        else:
            jobs.append((entry, c.call(c.info.controller_id, DeleteTopicsRequest, 30.0, name=name)))
    answers = await asyncio.gather(*(j for _, j in jobs))
    for (entry, _), r in zip(jobs, answers, strict=True):
        entry["error_code"] = _e(Errors.REQUEST_TIMED_OUT if r is None else r.error)
    wait = max(req.timeout_ms, 0) / 1000
    await asyncio.gather(*(c._await_topic(e["name"], False, wait) for e, _ in jobs if e["error_code"] == 0))
    return {"throttle_time_ms": 0, "responses": out}


async def delete_records(c: Connection, req: Any, v: int) -> dict:
    jobs = []
    for t in req.topics:
        for p in t.partitions:
            jobs.append((t.name, p.partition_index, c.local(
                DeleteRecordsRequest, 30.0, tp=TopicPartition(t.name, p.partition_index), offset=p.offset)))

    def entry(index: int, r: Any) -> dict:
        error, low = (Errors.REQUEST_TIMED_OUT, -1) if r is None else (r.error, r.low_watermark)
        return {"partition_index": index, "low_watermark": low, "error_code": _e(error)}

    by_topic = await _per_partition(jobs, entry)
    return {"throttle_time_ms": 0, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}


RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
SOURCE_TOPIC, SOURCE_DEFAULT, SOURCE_STATIC_BROKER = 1, 5, 4


def _topic_config_entries(configs: dict[str, str]) -> list[tuple[str, str | None, int]]:
    base = LogConfig()
    defaults = {
        "cleanup.policy": base.cleanup_policy,
        "retention.ms": "-1" if base.retention_ms is None else str(base.retention_ms),
        "retention.bytes": "-1" if base.retention_bytes is None else str(base.retention_bytes),
        "segment.bytes": str(base.segment_bytes),
        "min.cleanable.dirty.ratio": str(base.min_cleanable_dirty_ratio),
        "min.compaction.lag.ms": str(base.min_compaction_lag_ms),
        "max.compaction.lag.ms": "-1" if base.max_compaction_lag_ms is None else str(base.max_compaction_lag_ms),
        "delete.retention.ms": str(base.delete_retention_ms),
    }
    for name in ("min.insync.replicas", "segment.ms"):  # listed when the topic sets them
        if name in configs:
            defaults[name] = configs[name]
    return [(name, configs.get(name, default), SOURCE_TOPIC if name in configs else SOURCE_DEFAULT)
            for name, default in sorted(defaults.items())]


async def describe_configs(c: Connection, req: Any, v: int) -> dict:
    image = c.broker.metadata
    topic_configs = dict(image.topic_configs)
    topics = c._image_partitions()
    results = []
    for r in req.resources:
        keys = None if r.configuration_keys is None else set(r.configuration_keys)
        entries: list[tuple[str, str | None, int]] = []
        error, message = Errors.NONE, None
        if r.resource_type == RESOURCE_TOPIC:
            if r.resource_name not in topics:
                error, message = Errors.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {r.resource_name}"
            else:
                entries = _topic_config_entries(dict(topic_configs.get(r.resource_name, ())))
        elif r.resource_type == RESOURCE_BROKER:
            if r.resource_name not in ("", str(c.broker.node_id)):
                error, message = Errors.INVALID_REQUEST, f"ask broker {r.resource_name} itself"
            else:
                entries = [(k, val, SOURCE_STATIC_BROKER) for k, val in sorted(c.info.broker_configs.items())]
        else:
            error, message = Errors.INVALID_REQUEST, f"resource type {r.resource_type} is not supported"
        results.append({
            "error_code": _e(error), "error_message": message, "resource_type": r.resource_type,
            "resource_name": r.resource_name,
            "configs": [{"name": n, "value": val, "read_only": r.resource_type == RESOURCE_BROKER,
                         "config_source": src, "is_default": src == SOURCE_DEFAULT, "is_sensitive": False,
                         "synonyms": [], "config_type": 0, "documentation": None}
                        for n, val, src in entries if keys is None or n in keys],
        })
    return {"throttle_time_ms": 0, "results": results}


async def describe_cluster(c: Connection, req: Any, v: int) -> dict:
    live = [b for b in c.broker.metadata.live_brokers if b in c.info.endpoints]
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "endpoint_type": 1,
            "cluster_id": c.info.cluster_id, "controller_id": live[0] if live else -1,
            "brokers": [{"broker_id": b, "host": c._endpoint(b)[0], "port": c._endpoint(b)[1], "rack": None}
                        for b in live]}


# ---------------------------------------------------------------- coordinators and groups

async def find_coordinator(c: Connection, req: Any, v: int) -> dict:
    key_type = req.key_type if v >= 1 else COORDINATOR_GROUP
    keys = list(req.coordinator_keys) if v >= 4 else [req.key]
    if key_type not in (COORDINATOR_GROUP, COORDINATOR_TRANSACTION):
        found = [None] * len(keys)
    else:
        found = await asyncio.gather(*(c.local(FindCoordinatorRequest, 30.0, key=k, key_type=key_type)
                                       for k in keys))
    coordinators = []
    for k, r in zip(keys, found, strict=True):
        if r is None:
            error = Errors.INVALID_REQUEST if key_type not in (0, 1) else Errors.COORDINATOR_NOT_AVAILABLE
            node = -1
        else:
            error, node = r.error, r.node_id
        host, port = c._endpoint(node) if error is Errors.NONE else ("", -1)
        coordinators.append({"key": k, "node_id": node, "host": host, "port": port,
                             "error_code": _e(error), "error_message": None})
    if v >= 4:
        return {"throttle_time_ms": 0, "coordinators": coordinators}
    one = coordinators[0]
    return {"throttle_time_ms": 0, "error_code": one["error_code"], "error_message": None,
            "node_id": one["node_id"], "host": one["host"], "port": one["port"]}


async def join_group(c: Connection, req: Any, v: int) -> dict:
    r = await c.local(JoinGroupRequest, req.rebalance_timeout_ms / 1000 + ENGINE_MARGIN_S if v >= 1
                      else req.session_timeout_ms / 1000 + ENGINE_MARGIN_S,
                      group_id=req.group_id, member_id=req.member_id,
                      group_instance_id=req.group_instance_id if v >= 5 else None,
                      session_timeout_ms=req.session_timeout_ms,
                      rebalance_timeout_ms=req.rebalance_timeout_ms if v >= 1 else req.session_timeout_ms,
                      protocols=tuple((p.name, p.metadata) for p in req.protocols),
                      require_known_member_id=v >= 4)
    if r is None:
        return {"throttle_time_ms": 0, "error_code": _e(Errors.REQUEST_TIMED_OUT), "generation_id": -1,
                "protocol_type": None, "protocol_name": "" if v < 7 else None, "leader": "",
                "member_id": req.member_id, "members": []}
    ok = r.error is Errors.NONE
    return {"throttle_time_ms": 0, "error_code": _e(r.error), "generation_id": r.generation_id,
            "protocol_type": req.protocol_type if ok else None,
            "protocol_name": r.protocol_name if ok or v < 7 else None,
            "leader": r.leader, "skip_assignment": False, "member_id": r.member_id,
            "members": [{"member_id": m, "group_instance_id": None, "metadata": meta} for m, meta in r.members]}


async def sync_group(c: Connection, req: Any, v: int) -> dict:
    r = await c.local(SyncGroupRequest, 60.0, group_id=req.group_id, generation_id=req.generation_id,
                      member_id=req.member_id,
                      assignments=tuple((a.member_id, a.assignment) for a in req.assignments))
    error, assignment = (Errors.REQUEST_TIMED_OUT, b"") if r is None else (r.error, r.assignment)
    return {"throttle_time_ms": 0, "error_code": _e(error), "protocol_type": req.protocol_type if v >= 5 else None,
            "protocol_name": req.protocol_name if v >= 5 else None, "assignment": assignment}


async def heartbeat(c: Connection, req: Any, v: int) -> dict:
    r = await c.local(HeartbeatRequest, 30.0, group_id=req.group_id, generation_id=req.generation_id,
                      member_id=req.member_id)
    return {"throttle_time_ms": 0, "error_code": _e(Errors.REQUEST_TIMED_OUT if r is None else r.error)}


async def leave_group(c: Connection, req: Any, v: int) -> dict:
    members = [(m.member_id, m.group_instance_id) for m in req.members] if v >= 3 else [(req.member_id, None)]
    answers = await asyncio.gather(*(c.local(LeaveGroupRequest, 30.0, group_id=req.group_id, member_id=m)
                                     for m, _ in members))
    errors = [Errors.REQUEST_TIMED_OUT if r is None else r.error for r in answers]
    top = Errors.NONE
    if v < 3 or all(e is not Errors.NONE for e in errors):
        top = errors[0] if errors else Errors.NONE
    if any(e in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE, Errors.COORDINATOR_LOAD_IN_PROGRESS)
           for e in errors):
        top = next(e for e in errors if e is not Errors.NONE)
    return {"throttle_time_ms": 0, "error_code": _e(top),
            "members": [{"member_id": m, "group_instance_id": i, "error_code": _e(e)}
                        for (m, i), e in zip(members, errors, strict=True)]}


def _offsets_reply(topics: list[tuple[str, list[int]]], error: Errors) -> list[dict]:
    return [{"name": name, "partitions": [{"partition_index": p, "error_code": _e(error)} for p in parts]}
            for name, parts in topics]


async def offset_commit(c: Connection, req: Any, v: int) -> dict:
    offsets = tuple((TopicPartition(t.name, p.partition_index), p.committed_offset)
                    for t in req.topics for p in t.partitions)
    r = await c.local(OffsetCommitRequest, 30.0, group_id=req.group_id,
                      generation_id=req.generation_id_or_member_epoch, member_id=req.member_id,
                      offsets=offsets)
    error = Errors.REQUEST_TIMED_OUT if r is None else r.error
    if error is Errors.TRANSACTION_ABORTABLE and v < 5:
        error = Errors.INVALID_TXN_STATE  # what producers before TxnOffsetCommit v5 expect (as Kafka)
    return {"throttle_time_ms": 0, "topics": _offsets_reply(
        [(t.name, [p.partition_index for p in t.partitions]) for t in req.topics], error)}


async def offset_fetch(c: Connection, req: Any, v: int) -> dict:
    if req.topics is None:
        g = c.broker.groups.groups.get(req.group_id, GroupState())
        tps = tuple(sorted(g.committed))
    else:
        tps = tuple(TopicPartition(t.name, p) for t in req.topics for p in t.partition_indexes)
    r = await c.local(OffsetFetchRequest, 30.0, group_id=req.group_id, partitions=tps,
                      require_stable=bool(req.require_stable) if v >= 7 else False)
    error = Errors.REQUEST_TIMED_OUT if r is None else r.error
    committed = dict(r.offsets) if r is not None else {}
    # pending transactional offsets (KIP-447) are a partition's error, as Kafka answers them;
    # a client that only looks at the top-level code would take -1 for "nothing committed"
    # and reset to the earliest offset
    partition_error = error if v < 2 or error is Errors.UNSTABLE_OFFSET_COMMIT else Errors.NONE
    group_error = Errors.NONE if error is Errors.UNSTABLE_OFFSET_COMMIT else error
    by_topic: dict[str, list[dict]] = {}
    for tp in tps:
        by_topic.setdefault(tp.topic, []).append({
            "partition_index": tp.partition, "committed_offset": committed.get(tp, -1),
            "committed_leader_epoch": -1, "metadata": "", "error_code": _e(partition_error)})
    return {"throttle_time_ms": 0, "error_code": _e(group_error),
            "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}


async def describe_groups(c: Connection, req: Any, v: int) -> dict:
    out = []
    for group in req.groups:
        error = c.broker.groups._owns(group)
        g = c.broker.groups.groups.get(group) if error is Errors.NONE else None
        if g is None:
            out.append({"error_code": _e(error), "group_id": group,
                        "group_state": "Dead" if error is Errors.NONE else "",
                        "protocol_type": "", "protocol_data": "", "members": []})
            continue
        out.append({
            "error_code": 0, "group_id": group, "group_state": g.state,
            "protocol_type": "consumer" if g.members or g.protocol else "", "protocol_data": g.protocol,
            "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id, "client_id": "",
                         "client_host": "", "member_metadata": dict(m.protocols).get(g.protocol, b""),
                         "member_assignment": m.assignment} for m in g.members.values()]})
    return {"throttle_time_ms": 0, "groups": out}


async def list_groups(c: Connection, req: Any, v: int) -> dict:
    states = set(req.states_filter) if v >= 4 and req.states_filter else None
    groups = []
    coordinator = c.broker.groups
    for name, g in sorted(coordinator.groups.items()):
        if coordinator.partition_of(name) not in coordinator.loaded:
            continue
        if states is not None and g.state not in states:
            continue
        groups.append({"group_id": name, "protocol_type": "consumer", "group_state": g.state})
    return {"throttle_time_ms": 0, "error_code": 0, "groups": groups}


# ---------------------------------------------------------------- transactions

async def init_producer_id(c: Connection, req: Any, v: int) -> dict:
    r = await c.local(InitProducerIdRequest, 30.0, transactional_id=req.transactional_id,
                      transaction_timeout_ms=req.transaction_timeout_ms,
                      producer_id=req.producer_id if v >= 3 else -1,
                      producer_epoch=req.producer_epoch if v >= 3 else -1)
    if r is None:
        return {"throttle_time_ms": 0, "error_code": _e(Errors.REQUEST_TIMED_OUT), "producer_id": -1,
                "producer_epoch": -1}
    return {"throttle_time_ms": 0, "error_code": _e(r.error), "producer_id": r.producer_id,
            "producer_epoch": r.producer_epoch}


async def add_partitions_to_txn(c: Connection, req: Any, v: int) -> dict:
    topics = [(t.name, list(t.partitions)) for t in req.v3_and_below_topics]
    r = await c.local(AddPartitionsToTxnRequest, 30.0, transactional_id=req.v3_and_below_transactional_id,
                      producer_id=req.v3_and_below_producer_id, producer_epoch=req.v3_and_below_producer_epoch,
                      partitions=tuple(TopicPartition(n, p) for n, ps in topics for p in ps))
    error = Errors.REQUEST_TIMED_OUT if r is None else r.error
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": n, "results_by_partition": [{"partition_index": p, "partition_error_code": _e(error)}
                                             for p in ps]} for n, ps in topics]}


async def add_offsets_to_txn(c: Connection, req: Any, v: int) -> dict:
    r = await c.local(AddOffsetsToTxnRequest, 30.0, transactional_id=req.transactional_id,
                      producer_id=req.producer_id, producer_epoch=req.producer_epoch, group_id=req.group_id)
    return {"throttle_time_ms": 0, "error_code": _e(Errors.REQUEST_TIMED_OUT if r is None else r.error)}


async def end_txn(c: Connection, req: Any, v: int) -> dict:
    r = await c.local(EndTxnRequest, 60.0, transactional_id=req.transactional_id, producer_id=req.producer_id,
                      producer_epoch=req.producer_epoch, commit=bool(req.committed))
    return {"throttle_time_ms": 0, "error_code": _e(Errors.REQUEST_TIMED_OUT if r is None else r.error)}


async def txn_offset_commit(c: Connection, req: Any, v: int) -> dict:
    offsets = tuple((TopicPartition(t.name, p.partition_index), p.committed_offset)
                    for t in req.topics for p in t.partitions)
    r = await c.local(TxnOffsetCommitRequest, 30.0, transactional_id=req.transactional_id, group_id=req.group_id,
                      producer_id=req.producer_id, producer_epoch=req.producer_epoch, offsets=offsets,
                      generation_id=req.generation_id if v >= 3 else -1,
                      member_id=req.member_id if v >= 3 else "",
                      group_instance_id=req.group_instance_id if v >= 3 else None)
    error = Errors.REQUEST_TIMED_OUT if r is None else r.error
    if error is Errors.TRANSACTION_ABORTABLE and v < 5:
        error = Errors.INVALID_TXN_STATE  # what producers before TxnOffsetCommit v5 expect (as Kafka)
    return {"throttle_time_ms": 0, "topics": _offsets_reply(
        [(t.name, [p.partition_index for p in t.partitions]) for t in req.topics], error)}


Handler = Callable[[Connection, Any, int], Awaitable[dict | None]]
HANDLERS: dict[int, Handler] = {
    0: produce, 1: fetch, 2: list_offsets, 3: metadata, 8: offset_commit, 9: offset_fetch,
    10: find_coordinator, 11: join_group, 12: heartbeat, 13: leave_group, 14: sync_group,
    15: describe_groups, 16: list_groups, 18: api_versions, 19: create_topics, 20: delete_topics,
    21: delete_records, 22: init_producer_id, 23: offset_for_leader_epoch, 24: add_partitions_to_txn,
    25: add_offsets_to_txn, 26: end_txn, 28: txn_offset_commit, 32: describe_configs, 60: describe_cluster,
}
assert set(HANDLERS) == set(protocol.SUPPORTED), "every served API needs a handler"
