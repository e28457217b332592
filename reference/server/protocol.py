"""The Kafka wire protocol through kafka-python's ``kafka.protocol`` classes.

kafka-python generates a class per API from Kafka's own JSON message schemas; each class
encodes and decodes every version of its message, requests as well as responses. This
module finds the request and response class of each API key, states which versions the
reference broker serves (``SUPPORTED``), and builds response objects from plain dicts
(:func:`build`), so that the gateway's handlers read like the schema.

Framing: every request is ``int32 size`` + header (api key, api version, correlation id,
client id, and tagged fields in flexible versions) + body; a response is ``int32 size`` +
header (correlation id, tagged fields in flexible versions except for ApiVersions) + body.
"""

from __future__ import annotations

import functools
import socket
import struct
import uuid
from typing import Any

import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.producer  # noqa: F401  (importing the modules registers their classes)
from kafka import codec
from kafka.protocol.api_message import ApiMessage

# KIP-848's and KIP-932's classes, from the project's schemas
import reference.server.kip848_messages
import reference.server.kip932_messages  # noqa: F401
from reference import records as rec

# api key -> (min, max) version served. The upper ends stop before versions whose meaning the
# engine does not have: topic ids instead of names in Produce/Fetch/OffsetCommit/OffsetFetch (v13,
# v13, v10, v10), InitProducerId v5+ (TRANSACTION_ABORTABLE, then
# KIP-939's two-phase commit in v6), and share groups in FindCoordinator (v5+). The KIP-890 part 2 transaction protocol is
# served per request, as Kafka does: EndTxn v5, Produce v12 and TxnOffsetCommit v5 are
# transaction version 2 (the epoch bumped at every end, partitions added by the broker),
# older versions are version 1; ApiVersions v3 names the cluster's finalized
# ``transaction.version`` (TRANSACTION_VERSION_FEATURE), which Apache Kafka's Java client
# reads to choose. KIP-848's consumer groups: ConsumerGroupHeartbeat and ConsumerGroupDescribe,
# OffsetCommit v9 (fenced by member epoch) and OffsetFetch v9 (a member's id and epoch), with
# ``group.version`` finalized at 1 (GROUP_VERSION_FEATURE). KIP-932's share groups:
# ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch and ShareAcknowledge (v2's renew
# acknowledgements and record-limit acquisition refused, KIP-1222/1206), with ``share.version``
# finalized at 1 (SHARE_VERSION_FEATURE).
SUPPORTED: dict[int, tuple[int, int]] = {
    0: (3, 12),   # Produce
    1: (4, 12),   # Fetch
    2: (1, 7),    # ListOffsets
    3: (0, 12),   # Metadata
    8: (2, 9),    # OffsetCommit
    9: (1, 9),    # OffsetFetch
    10: (0, 4),   # FindCoordinator
    11: (0, 9),   # JoinGroup
    12: (0, 4),   # Heartbeat
    13: (0, 5),   # LeaveGroup
    14: (0, 5),   # SyncGroup
    15: (0, 5),   # DescribeGroups
    16: (0, 4),   # ListGroups
    18: (0, 3),   # ApiVersions
    19: (2, 7),   # CreateTopics
    20: (1, 5),   # DeleteTopics
    21: (0, 2),   # DeleteRecords
    22: (0, 4),   # InitProducerId
    23: (2, 4),   # OffsetForLeaderEpoch
    24: (0, 3),   # AddPartitionsToTxn
    25: (0, 3),   # AddOffsetsToTxn
    26: (0, 5),   # EndTxn
    28: (0, 5),   # TxnOffsetCommit
    32: (1, 4),   # DescribeConfigs
    60: (0, 1),   # DescribeCluster
    61: (0, 0),   # DescribeProducers (KIP-664)
    65: (0, 0),   # DescribeTransactions (KIP-664)
    66: (0, 1),   # ListTransactions (KIP-664; v2's transactional id pattern, KIP-1152, is not served)
    68: (0, 1),   # ConsumerGroupHeartbeat (KIP-848; v1's regular expressions are refused)
    69: (0, 1),   # ConsumerGroupDescribe (KIP-848)
    76: (1, 1),   # ShareGroupHeartbeat (KIP-932)
    77: (1, 1),   # ShareGroupDescribe (KIP-932)
    78: (1, 2),   # ShareFetch (KIP-932)
    79: (1, 2),   # ShareAcknowledge (KIP-932)
}

TRANSACTION_VERSION_FEATURE = "transaction.version"
GROUP_VERSION_FEATURE = "group.version"  # 1: KIP-848's consumer groups are enabled
SHARE_VERSION_FEATURE = "share.version"  # 1: KIP-932's share groups are enabled
# the first versions of the transaction protocol's version 2 (KIP-890 part 2)
TV2_VERSIONS = {0: 12, 26: 5, 28: 5}
API_VERSIONS_KEY = 18
FETCH_KEY = 1
METADATA_KEY = 3
REQUEST_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id
SIZE = struct.Struct(">i")


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_subclasses(sub))
    return out


def _registry() -> tuple[dict[int, type], dict[int, type]]:
    requests: dict[int, type] = {}
    responses: dict[int, type] = {}
    for cls in _subclasses(ApiMessage):
        if getattr(cls, "_class_version", None) is not None or getattr(cls, "_json", None) is None:
            continue  # a versioned wrapper, or an abstract base
        (requests if cls.is_request() else responses)[cls.API_KEY] = cls
    return requests, responses


REQUESTS, RESPONSES = _registry()

# the engine decodes gzip itself; the other codecs come from kafka-python where their
# libraries (python-snappy or cramjam, lz4, zstandard) are installed
for _codec, _has, _decode in ((2, codec.has_snappy, codec.snappy_decode), (3, codec.has_lz4, codec.lz4_decode),
                              (4, codec.has_zstd, codec.zstd_decode)):
    if _has():
        rec.DECOMPRESSORS.setdefault(_codec, _decode)
API_NAMES = {key: REQUESTS[key].__name__.removesuffix("Request") for key in SUPPORTED}
_missing = [k for k in SUPPORTED if k not in REQUESTS or k not in RESPONSES]
if _missing:  # pragma: no cover - a kafka-python without these schemas
    raise ImportError(f"kafka-python lacks the message classes of API keys {_missing}")


class BadRequest(Exception):
    """A frame that cannot be answered: Kafka closes the connection."""


def peek_header(frame: bytes) -> tuple[int, int, int]:
    """(api key, api version, correlation id) of a request frame (without its size)."""
    if len(frame) < REQUEST_HEADER.size:
        raise BadRequest(f"a request of {len(frame)} bytes has no header")
    return REQUEST_HEADER.unpack_from(frame)


def decode_request(frame: bytes) -> tuple[Any, int, int, int]:
    """Decode a request frame; returns (request, api key, version, correlation id)."""
    key, version, corr = peek_header(frame)
    cls = REQUESTS.get(key)
    if cls is None or key not in SUPPORTED:
        raise BadRequest(f"unsupported API key {key}")
    low, high = SUPPORTED[key]
    if not low <= version <= high:
        raise BadRequest(f"{API_NAMES[key]} version {version} is outside {low}-{high}")
    try:
        request = cls.decode(frame, version=version, header=True)
    except Exception as e:
        raise BadRequest(f"malformed {API_NAMES[key]} v{version}: {type(e).__name__}: {e}") from e
    missing = _null_where_required(request, version)
    if missing:
        raise BadRequest(f"malformed {API_NAMES[key]} v{version}: {missing} is null")
    return request, key, version, corr


def _null_where_required(obj: Any, version: int, path: str = "") -> str | None:
    """The first array, struct, string or bytes field that is null although the schema does
    not allow it (a length of -1 decodes to None whatever the schema says). A zero uuid also
    decodes to None; that is a legal value."""
    for f in obj.fields.values():
        if not f.for_version_q(version):
            continue
        value = getattr(obj, f.name, None)
        where = f"{path}{f.name}"
        if value is None:
            nullable_kind = f.is_array() or f.is_struct() or getattr(f, "type_str", "") in ("string", "bytes")
            if nullable_kind and not f.nullable_for_version_q(version) and f._tag is None:
                return where
        elif f.is_struct_array():
            for item in value:
                bad = _null_where_required(item, version, where + "[].")
                if bad:
                    return bad
        elif f.is_struct():
            bad = _null_where_required(value, version, where + ".")
            if bad:
                return bad
    return None


def build(cls: type, values: dict) -> Any:
    """A message object of ``cls`` (a message or one of its nested structs) from a dict
    whose nested structs are dicts and struct arrays are lists of dicts."""
    fields = cls.fields
    kwargs = {}
    for name, value in values.items():
        f = fields[name]
        if value is not None and f.is_struct_array():
            value = [build(f.data_class, v) for v in value]
        elif value is not None and f.is_struct():
            value = build(f.data_class, value)
        kwargs[name] = value
    return cls(**kwargs)


def encode_response(key: int, version: int, correlation_id: int, values: dict) -> bytes:
    """The framed bytes of a response (size, header, body)."""
    cls = RESPONSES[key]
    msg = build(cls[version], values)
    msg.with_header(correlation_id=correlation_id)
    return bytes(msg.encode(header=True, framed=True))


def api_versions_error(correlation_id: int, error_code: int) -> bytes:
    """ApiVersions v0 with an error and the supported ranges: what a broker answers to an
    ApiVersions request of a version it does not know (KIP-511)."""
    return encode_response(API_VERSIONS_KEY, 0, correlation_id, {
        "error_code": error_code,
        "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi}
                     for k, (lo, hi) in sorted(SUPPORTED.items())],
    })


_TOPIC_NAMESPACE = uuid.UUID("6ba7b811-9dad-11d1-80b4-00c04fd430c8")


@functools.lru_cache(maxsize=4096)
def topic_id(topic: str) -> uuid.UUID:
    """A stable topic id (Metadata v10+) derived from the name: the engine names topics."""
    return uuid.uuid5(_TOPIC_NAMESPACE, topic)


def names_by_id(topics) -> dict[uuid.UUID, str]:
    """The topic ids of ``topics`` (names), to the names: how a request naming topics by id
    (Metadata v10+, ConsumerGroupHeartbeat) is read."""
    return {topic_id(name): name for name in topics}


def round_trip(host: str, port: int, request: Any, response_class: type, client_id: str,
               timeout_s: float) -> Any:
    """Send one request on a fresh blocking connection and decode its response (the probes of
    kafkacheck serve and conform); ConnectionError when the broker closes first."""
    request.with_header(correlation_id=1, client_id=client_id)
    with socket.create_connection((host, port), timeout=timeout_s) as s:
        s.sendall(bytes(request.encode(header=True, framed=True)))
        size = int.from_bytes(recv_exact(s, 4), "big")
        return response_class.decode(recv_exact(s, size), version=request.API_VERSION, header=True)


def recv_exact(s: socket.socket, n: int) -> bytes:
    """Exactly ``n`` bytes from a blocking socket; ConnectionError when it closes first."""
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


# ---------------------------------------------------------------- what a proxy sees on the wire

# the APIs of the transaction protocol, whose requests name a producer (what a request-aware
# fault proxy holds back: fault_injection/real/straggle.py)
TXN_APIS = {0: "Produce", 22: "InitProducerId", 24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn",
            28: "TxnOffsetCommit"}
_BATCH_PRODUCER = struct.Struct(">qhi")  # producer id, producer epoch, base sequence (at byte 43 of a batch)


def peek_request(frame: bytes) -> dict[str, Any]:
    """What a request frame (without its size) says about itself: ``api_key``,
    ``api_version``, ``correlation_id``, ``client_id``; for the APIs of :data:`TXN_APIS` also
    the producer it comes from (``transactional_id``, ``producer_id``, ``producer_epoch``),
    ``committed`` (EndTxn), ``group_id`` and ``partitions`` (``topic:p`` strings) where the
    request has them. A body that does not decode leaves those out; never raises for a
    frame with a header."""
    key, version, corr = peek_header(frame)
    out: dict[str, Any] = {"api_key": key, "api_version": version, "correlation_id": corr,
                           "api": TXN_APIS.get(key) or (API_NAMES.get(key) or f"api-{key}")}
    if len(frame) >= REQUEST_HEADER.size + 2:
        (n,) = struct.unpack_from(">h", frame, REQUEST_HEADER.size)
        if n >= 0:
            out["client_id"] = frame[REQUEST_HEADER.size + 2:REQUEST_HEADER.size + 2 + n].decode(errors="replace")
    if key not in TXN_APIS or key not in REQUESTS:
        return out
    try:
        req = REQUESTS[key].decode(frame, version=version, header=True)
    except Exception:
        return out
    if key == 24 and version <= 3:
        out.update(transactional_id=req.v3_and_below_transactional_id, producer_id=req.v3_and_below_producer_id,
                   producer_epoch=req.v3_and_below_producer_epoch,
                   partitions=[f"{t.name}:{p}" for t in req.v3_and_below_topics or [] for p in t.partitions or []])
        return out
    for name in ("transactional_id", "producer_id", "producer_epoch", "committed", "group_id"):
        if name in REQUESTS[key].fields and getattr(req, name, None) is not None:
            out[name] = getattr(req, name)
    if key == 0:
        parts = []
        for t in req.topic_data or []:
            for p in t.partition_data or []:  # (v13+ names the topic by its id)
                parts.append(f"{t.name if getattr(t, 'name', None) else getattr(t, 'topic_id', None)}:{p.index}")
                data = p.records
                if data and len(data) >= 61 and "producer_id" not in out:
                    pid, epoch, seq = _BATCH_PRODUCER.unpack_from(data, 43)
                    out.update(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
        out["partitions"] = parts
    elif key == 28:
        out["partitions"] = [f"{t.name}:{p.partition_index}" for t in req.topics or [] for p in t.partitions or []]
    return out


def response_errors(key: int, version: int, frame: bytes) -> list[str] | None:
    """The error names of a response frame (without its size) to a request of ``key`` and
    ``version``, every ``error_code`` in it, in order, ``NONE`` for success; None when the
    bytes do not decode."""
    from kafka.errors import for_code

    cls = RESPONSES.get(key)
    if cls is None:
        return None
    try:
        resp = cls.decode(frame, version=version, header=True)
    except Exception:
        return None
    codes: list[int] = []

    def walk(obj: Any) -> None:
        for f in obj.fields.values():
            if not f.for_version_q(version):
                continue
            value = getattr(obj, f.name, None)
            if f.name.endswith("error_code") and isinstance(value, int):
                codes.append(value)
            elif value is not None and f.is_struct_array():
                for item in value:
                    walk(item)
            elif value is not None and f.is_struct():
                walk(value)

    walk(resp)
    return [("NONE" if c == 0 else getattr(for_code(c), "message", f"ERROR_{c}")) for c in codes]
