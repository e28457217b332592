"""RecordBatch v2 (magic 2): the bytes Kafka stores and sends, with CRC-32C.

Theory of operation
-------------------
A batch is a 61-byte header followed by records. The CRC-32C covers everything from the
``attributes`` field to the end of the batch, so the two fields a leader rewrites when it
appends a producer's batch -- ``base_offset`` and ``partition_leader_epoch`` -- are outside
it: assigning offsets is a byte splice, never a re-encode. The broker's hot path only
parses headers (:func:`parse_header`); whole records are decoded by clients and checkers.

Header layout (big-endian)::

    base_offset int64 | batch_length int32 | partition_leader_epoch int32 | magic int8 |
    crc uint32 | attributes int16 | last_offset_delta int32 | base_timestamp int64 |
    max_timestamp int64 | producer_id int64 | producer_epoch int16 | base_sequence int32 |
    records_count int32

``batch_length`` counts the bytes after itself (total size - 12).

Attributes: bits 0-2 compression (only 0 = none is produced here; gzip and, where the wire
server registers them, snappy, lz4 and zstd are decoded), bit 3 timestamp type,
bit 4 transactional, bit 5 control, bit 6 delete-horizon present.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, final

import crc32c

from reference.frozen import frozen, own_init

MAGIC: Final = 2
HEADER_SIZE: Final = 61
LOG_OVERHEAD: Final = 12  # base_offset + batch_length
CRC_START: Final = 21  # the CRC covers bytes [CRC_START:]

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_BASE_OFFSET: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")
# what the log reads of every batch it stores, in one unpack: base offset, partition leader
# epoch, last offset delta, max timestamp, producer id
_LOG_FIELDS: Final = struct.Struct(">q4xi7xi8xqq")
_BASE_AND_DELTA: Final = struct.Struct(">q15xi")


class CorruptRecordError(ValueError):
    """A batch failed validation (bad size, magic, CRC or record framing)."""


@frozen
class Header:
    """One record header (key is text, value is bytes or None)."""

    key: str
    value: bytes | None


@final
@dataclass(init=False, frozen=True, slots=True)
class Record:
    """A decoded record with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()

    def __init__(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[Header, ...] = (),
    ) -> None:
        self.offset = offset  # type: ignore[misc]
        self.timestamp = timestamp  # type: ignore[misc]
        self.key = key  # type: ignore[misc]
        self.value = value  # type: ignore[misc]
        self.headers = headers  # type: ignore[misc]


own_init(Record)


@final
@dataclass(init=False, frozen=True, slots=True)
class BatchHeader:
    """The parsed fixed-size header of a batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def compression(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    def __init__(
        self,
        base_offset: int,
        batch_length: int,
        partition_leader_epoch: int,
        magic: int,
        crc: int,
        attributes: int,
        last_offset_delta: int,
        base_timestamp: int,
        max_timestamp: int,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        records_count: int,
    ) -> None:
        self.base_offset = base_offset  # type: ignore[misc]
        self.batch_length = batch_length  # type: ignore[misc]
        self.partition_leader_epoch = partition_leader_epoch  # type: ignore[misc]
        self.magic = magic  # type: ignore[misc]
        self.crc = crc  # type: ignore[misc]
        self.attributes = attributes  # type: ignore[misc]
        self.last_offset_delta = last_offset_delta  # type: ignore[misc]
        self.base_timestamp = base_timestamp  # type: ignore[misc]
        self.max_timestamp = max_timestamp  # type: ignore[misc]
        self.producer_id = producer_id  # type: ignore[misc]
        self.producer_epoch = producer_epoch  # type: ignore[misc]
        self.base_sequence = base_sequence  # type: ignore[misc]
        self.records_count = records_count  # type: ignore[misc]


own_init(BatchHeader)


# ---------------------------------------------------------------- varints (zig-zag)


def _write_varint(out: bytearray, value: int) -> None:
    v = (value << 1) ^ (value >> 63)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = 0
    result = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecordError("varint runs past the end of the batch")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        _write_varint(out, -1)
    else:
        _write_varint(out, len(data))
        out += data


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = _read_varint(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise CorruptRecordError("record field runs past the end of the batch")
    return bytes(buf[pos:end]), end


# ---------------------------------------------------------------- encoding


@final
@dataclass(init=False, frozen=True, slots=True)
class RecordInput:
    """What a producer hands the encoder: one record's content."""

    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
    timestamp: int = 0

    def __init__(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[Header, ...] = (),
        timestamp: int = 0,
    ) -> None:
        self.key = key  # type: ignore[misc]
        self.value = value  # type: ignore[misc]
        self.headers = headers  # type: ignore[misc]
        self.timestamp = timestamp  # type: ignore[misc]


own_init(RecordInput)


def encode_batch(
    records: list[RecordInput] | tuple[RecordInput, ...],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
) -> bytes:
    """Encode records as one uncompressed RecordBatch v2 with its CRC-32C."""
    if not records:
        raise ValueError("a record batch holds at least one record")
    base_timestamp = records[0].timestamp
    max_timestamp = max(r.timestamp for r in records)
    body = bytearray()
    for delta, r in enumerate(records):
        rec = bytearray()
        rec.append(0)  # record attributes (unused)
        _write_varint(rec, r.timestamp - base_timestamp)
        _write_varint(rec, delta)
        _write_bytes(rec, r.key)
        _write_bytes(rec, r.value)
        _write_varint(rec, len(r.headers))
        for h in r.headers:
            _write_bytes(rec, h.key.encode())
            _write_bytes(rec, h.value)
        _write_varint(body, len(rec))
        body += rec
    attributes = (ATTR_TRANSACTIONAL if transactional else 0) | (ATTR_CONTROL if control else 0)
    header = bytearray(
        _HEADER.pack(
            base_offset,
            HEADER_SIZE - LOG_OVERHEAD + len(body),
            partition_leader_epoch,
            MAGIC,
            0,
            attributes,
            len(records) - 1,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    )
    batch = header + body
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


def rewrite_batch(h: BatchHeader, kept: list[Record]) -> bytes:
    """The batch ``h`` holding only ``kept`` (the cleaner's output): the same base offset,
    last offset delta, producer fields, epoch and attributes; each kept record at its own
    offset. An empty batch is allowed (it keeps a producer's last sequence in the log)."""
    base_timestamp = kept[0].timestamp if kept else h.base_timestamp
    max_timestamp = max((r.timestamp for r in kept), default=h.max_timestamp)
    body = bytearray()
    for r in kept:
        one = bytearray()
        one.append(0)
        _write_varint(one, r.timestamp - base_timestamp)
        _write_varint(one, r.offset - h.base_offset)
        _write_bytes(one, r.key)
        _write_bytes(one, r.value)
        _write_varint(one, len(r.headers))
        for x in r.headers:
            _write_bytes(one, x.key.encode())
            _write_bytes(one, x.value)
        _write_varint(body, len(one))
        body += one
    header = bytearray(_HEADER.pack(
        h.base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body), h.partition_leader_epoch, MAGIC, 0,
        h.attributes, h.last_offset_delta, base_timestamp, max_timestamp, h.producer_id,
        h.producer_epoch, h.base_sequence, len(kept)))
    batch = header + body
    struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[CRC_START:])))
    return bytes(batch)


# ---------------------------------------------------------------- header access (hot path)


# Parsing is a pure function of a batch's bytes, and the same stored batch is parsed again and
# again (by the follower that fetches it, the consumers, the checkers): remember the answers
# for the batches seen last, keyed by their bytes (a bytes object keeps its hash).
_MEMO_MAX: Final = 1 << 14
_headers: Final[dict[bytes, BatchHeader]] = {}
_validated: Final[dict[bytes, BatchHeader]] = {}
_decoded: Final[dict[bytes, tuple[Record, ...]]] = {}


def _remember(memo: dict, batch: bytes, value) -> None:
    if len(memo) >= _MEMO_MAX:
        memo.clear()
    memo[batch] = value


def parse_header(buf: bytes, pos: int = 0) -> BatchHeader:
    """Parse the batch header at ``pos``; checks framing and magic, not the CRC."""
    if pos == 0 and type(buf) is bytes:
        h = _headers.get(buf)
        if h is None:
            h = _parse_header(buf, 0)
            _remember(_headers, buf, h)
        return h
    return _parse_header(buf, pos)


def _parse_header(buf: bytes, pos: int) -> BatchHeader:
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(f"{len(buf) - pos} bytes left, a batch header needs {HEADER_SIZE}")
    h = BatchHeader(*_HEADER.unpack_from(buf, pos))
    if h.magic != MAGIC:
        raise CorruptRecordError(f"magic {h.magic}, only magic 2 (RecordBatch v2) is supported")
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(f"batch length {h.batch_length} is shorter than the header")
    if h.last_offset_delta < 0 or h.records_count < 0:
        raise CorruptRecordError("negative last offset delta or record count")
    return h


def crc_ok(batch: bytes) -> bool:
    """True when the stored CRC-32C matches the bytes it covers."""
    (stored,) = struct.unpack_from(">I", batch, 17)
    return crc32c.crc32c(batch[CRC_START:]) == stored


def validate(batch: bytes) -> BatchHeader:
    """Parse and fully validate one batch (framing, magic, CRC); raise if corrupt."""
    h = _validated.get(batch) if type(batch) is bytes else None
    if h is None:
        h = _validate(batch)
        if type(batch) is bytes:
            _remember(_validated, batch, h)
    return h


def _validate(batch: bytes) -> BatchHeader:
    h = parse_header(batch)
    if h.size != len(batch):
        raise CorruptRecordError(f"batch claims {h.size} bytes but {len(batch)} were given")
    if not crc_ok(batch):
        raise CorruptRecordError(f"CRC-32C mismatch in the batch at offset {h.base_offset}")
    return h


def split_batches(buf: bytes) -> tuple[list[bytes], int]:
    """Cut a byte stream into whole valid batches.

    Returns the batches and the number of bytes they span; scanning stops at the first
    torn (incomplete) or corrupt batch, so ``buf[span:]`` is the invalid tail.
    """
    out: list[bytes] = []
    pos = 0
    while pos < len(buf):
        try:
            h = parse_header(buf, pos)
        except CorruptRecordError:
            break
        end = pos + h.size
        if end > len(buf):
            break  # torn write: the tail of this batch never reached the disk
        batch = bytes(buf[pos:end])
        if not crc_ok(batch):
            break
        out.append(batch)
        pos = end
    return out, pos


def with_offset_and_epoch(batch: bytes, base_offset: int, leader_epoch: int) -> bytes:
    """The leader's rewrite on append: both fields lie outside the CRC."""
    b = bytearray(batch)
    _BASE_OFFSET.pack_into(b, 0, base_offset)
    _INT32.pack_into(b, 12, leader_epoch)
    return bytes(b)


def base_offset_of(batch: bytes) -> int:
    return _BASE_OFFSET.unpack_from(batch, 0)[0]


def last_offset_of(batch: bytes) -> int:
    base, delta = _BASE_AND_DELTA.unpack_from(batch, 0)
    return base + delta


def offsets_of(batch: bytes) -> tuple[int, int]:
    """(base offset, last offset)."""
    base, delta = _BASE_AND_DELTA.unpack_from(batch, 0)
    return base, base + delta


def log_fields_of(batch: bytes) -> tuple[int, int, int, int, int]:
    """(base offset, partition leader epoch, last offset delta, max timestamp, producer id)."""
    return _LOG_FIELDS.unpack_from(batch, 0)


def leader_epoch_of(batch: bytes) -> int:
    return _INT32.unpack_from(batch, 12)[0]


def max_timestamp_of(batch: bytes) -> int:
    return _BASE_OFFSET.unpack_from(batch, 35)[0]


def producer_id_of(batch: bytes) -> int:
    return _BASE_OFFSET.unpack_from(batch, 43)[0]


def records_count_of(batch: bytes) -> int:
    return _INT32.unpack_from(batch, 57)[0]


# ---------------------------------------------------------------- control batches (transaction markers)

CONTROL_ABORT = 0
CONTROL_COMMIT = 1
_CONTROL_KEY = struct.Struct(">hh")  # version, type
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch


def encode_control_batch(producer_id: int, producer_epoch: int, commit: bool,
                         coordinator_epoch: int, timestamp: int = 0) -> bytes:
    """An end-transaction marker: a transactional control batch of one record."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return encode_batch([RecordInput(key, value, (), timestamp)], producer_id=producer_id,
                        producer_epoch=producer_epoch, transactional=True, control=True)


def control_is_commit(batch: bytes) -> bool:
    """For a control batch: True for a commit marker, False for an abort marker."""
    records = decode_records(batch)
    key = records[0].key if records else None
    if key is None or len(key) < _CONTROL_KEY.size:
        raise CorruptRecordError("a control record without a control key")
    _version, kind = _CONTROL_KEY.unpack_from(key)
    if kind not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise CorruptRecordError(f"unknown control record type {kind}")
    return kind == CONTROL_COMMIT


def control_coordinator_epoch(batch: bytes) -> int:
    """For a control batch: the coordinator epoch its marker carries."""
    records = decode_records(batch)
    value = records[0].value if records else None
    if value is None or len(value) < _CONTROL_VALUE.size:
        raise CorruptRecordError("a control record without a control value")
    return _CONTROL_VALUE.unpack_from(value)[1]


# ---------------------------------------------------------------- full decoding (clients)


MAX_DECOMPRESSED = 64 << 20  # a batch that inflates beyond this is refused (a zip bomb)


def _gunzip(data: bytes) -> bytes:
    out = bytearray()
    while data:  # a gzip stream may hold several members
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        out += d.decompress(data, MAX_DECOMPRESSED - len(out) + 1)
        if len(out) > MAX_DECOMPRESSED or d.unconsumed_tail:
            raise CorruptRecordError(f"the batch inflates to more than {MAX_DECOMPRESSED} bytes")
        if not d.eof:
            raise CorruptRecordError("truncated gzip data")
        data = d.unused_data
    return bytes(out)


# compression codec (attributes bits 0-2) -> decompressor of the records section. gzip is
# built in; the wire server adds snappy, lz4 and zstd when their libraries are installed.
DECOMPRESSORS: dict[int, Callable[[bytes], bytes]] = {1: _gunzip}
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def decode_records(batch: bytes) -> list[Record]:
    """Decode every record of a validated batch (compressed ones through DECOMPRESSORS)."""
    if type(batch) is not bytes:
        return _decode_records(batch)
    records = _decoded.get(batch)
    if records is None:
        records = tuple(_decode_records(batch))
        _remember(_decoded, batch, records)
    return list(records)


def _decode_records(batch: bytes) -> list[Record]:
    h = validate(batch)
    if h.compression != 0:
        decompress = DECOMPRESSORS.get(h.compression)
        if decompress is None:
            name = CODEC_NAMES.get(h.compression, str(h.compression))
            raise CorruptRecordError(f"compression codec {name} is not available here")
        try:
            buf = decompress(batch[HEADER_SIZE:])
        except Exception as e:
            raise CorruptRecordError(f"cannot decompress the batch: {e}") from e
        pos = 0
    else:
        buf, pos = batch, HEADER_SIZE
    out: list[Record] = []
    for _ in range(h.records_count):
        length, pos = _read_varint(buf, pos)
        end = pos + length
        if length < 0 or end > len(buf):
            raise CorruptRecordError("record length runs past the end of the batch")
        p = pos + 1  # skip record attributes
        ts_delta, p = _read_varint(buf, p)
        off_delta, p = _read_varint(buf, p)
        key, p = _read_bytes(buf, p)
        value, p = _read_bytes(buf, p)
        n_headers, p = _read_varint(buf, p)
        headers = []
        for _ in range(n_headers):
            hk, p = _read_bytes(buf, p)
            hv, p = _read_bytes(buf, p)
            headers.append(Header((hk or b"").decode(errors="replace"), hv))
        if p != end:
            raise CorruptRecordError("record fields do not fill the record's length")
        out.append(
            Record(h.base_offset + off_delta, h.base_timestamp + ts_delta, key, value, tuple(headers))
        )
        pos = end
    if pos != len(buf):
        raise CorruptRecordError("bytes left over after the last record")
    return out
