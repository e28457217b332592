"""Kafka histories (docs/reference/trace-format.md) as linearizability histories.

For the ``partition-log`` model every send micro-op becomes an append on its topic-partition
and every non-empty poll result a read, both spanning their operation's invoke and
completion (for a transaction, the whole transaction: its records become visible when it
commits):

- an ``ok`` send gives the offset it was acknowledged at; a ``fail`` send did not happen and
  is left out (a failed transaction too, unless consumers read uncommitted data); an ``info``
  send, a send whose offset was not returned, and with ``acks`` 0 or 1 every send, is pending:
  it took effect at the offset a read saw its value at, before the first read that saw it
  returned, or, if nobody read it, not visibly
  (such an append can always be placed after everything else, so it is left out: pending
  operations without effect only make the search longer);
- a producer that is not idempotent may append a value more than once (a retry after a lost
  acknowledgement); in such runs every further offset a value was read at becomes one more
  append of it over the same interval;
- a read's position is the offset after the same consumer's previous read of that partition
  when the run assigned partitions by hand (no rebalance moves it) and nothing reset the
  consumer in between, else the first offset returned. Empty polls say nothing (a poll may
  time out) and are left out.

For ``committed-offsets``: an ``ok`` or ``info`` commit writes each partition's offset
(``info`` pending), and so does a transaction's ``offsets`` field (sendOffsetsToTransaction);
an ``ok`` committed reads them.

Compacted topics do not fit the log model (compaction removes records from the middle of the
log by design), so their runs are refused with a clear message.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from linearizability.operations import UNKNOWN, HistoryError, Operation
from traces.history import iter_history, locate_run, named_values

KAFKA_MODELS = ("partition-log", "committed-offsets")


def read_run(path: str | os.PathLike, model: str) -> tuple[dict, list[Operation]]:
    """A run directory (or history.jsonl) as operations for ``model``; returns (run.json, ops)."""
    meta, history, _directory = locate_run(path)
    config = meta.get("config") or {}
    if model == "partition-log":
        if config.get("compacted"):
            raise HistoryError("the partition-log model does not apply to compacted topics: compaction removes "
                               "records from the log by design (use kafkacheck check for compaction runs)")
        return meta, log_operations(iter_history(history, named_values(meta)), config)
    if model == "committed-offsets":
        return meta, offset_operations(iter_history(history, named_values(meta)))
    raise HistoryError(f"a run directory is checked with one of the models {', '.join(KAFKA_MODELS)}, not {model!r}")


def _pairs(ops: Iterable[dict]):
    """(invoke, completion or None) per client op, in invoke order; nemesis ops skipped."""
    open_ops: dict[Any, dict] = {}
    for raw in ops:
        process = raw["process"]
        if process == "nemesis":
            continue
        if raw["type"] == "invoke":
            if process in open_ops:
                yield open_ops.pop(process), None
            open_ops[process] = raw
        else:
            yield open_ops.pop(process, raw), raw
    for inv in open_ops.values():
        yield inv, None


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def log_operations(ops: Iterable[dict], config: dict) -> list[Operation]:
    weak_acks = str(config.get("acks", "all")) in ("0", "1")
    uncommitted_visible = config.get("isolation_level") == "read_uncommitted"
    assigned = list(config.get("sub_via") or ["assign"]) == ["assign"]
    appends: list[Operation] = []
    reads: list[Operation] = []
    may_duplicate = not config.get("idempotence") and not config.get("txn")
    read_at: dict[tuple[str, Any], dict[int, int]] = {}   # (key, value) -> {offset: first read's return}
    position: dict[Any, dict[str, int]] = {}      # process -> key -> offset after its last read
    for inv, comp in _pairs(ops):
        f = inv["f"]
        process = inv["process"]
        call = inv["time"]
        if f in ("assign", "subscribe", "crash"):
            position.pop(process, None)
            continue
        if f not in ("send", "poll", "txn"):
            continue
        kind = comp["type"] if comp is not None else "info"
        ret = comp["time"] if comp is not None and kind != "info" else None
        sent = _sends(comp or inv)
        if not sent and comp is not None:
            sent = _sends(inv)   # a completion that dropped its value
        if kind != "fail" or (f == "txn" and uncommitted_visible):
            for mop in sent:
                key, result = mop[1], mop[2]
                if isinstance(result, list) and len(result) == 2:
                    offset, v = result
                else:
                    offset, v = None, result
                if v is None:
                    raise HistoryError(f"op {inv['index']}: a tombstone (compaction) does not fit the log model")
                known = kind == "ok" and _is_int(offset) and not weak_acks
                appends.append(Operation(process, ("append", key, v), call, offset if known else UNKNOWN,
                                         ret if known else None, (comp or inv)["index"]))
        if comp is None:
            continue
        for mop in comp.get("value") or []:
            if not (isinstance(mop, list) and len(mop) == 2 and mop[0] == "poll" and isinstance(mop[1], dict)):
                continue
            for key, records in mop[1].items():
                got = tuple((r[0], r[1]) for r in records if isinstance(r, list) and len(r) >= 2 and _is_int(r[0]))
                if not got:
                    continue
                for offset, v in got:
                    seen = read_at.setdefault((key, v), {})
                    seen[offset] = min(seen.get(offset, comp["time"]), comp["time"])
                positions = position.setdefault(process, {})
                start = positions.get(key) if assigned else None
                reads.append(Operation(process, ("read", key, start), call, got, comp["time"], comp["index"]))
                positions[key] = got[-1][0] + 1
        if f == "txn" and kind != "ok":
            # an aborted or unknown transaction rewinds its consumer (its reads are not consumed)
            position.pop(process, None)
    resolved = []
    for op in appends:
        offsets = read_at.get((op.input[1], op.input[2]), {})
        if op.output is UNKNOWN:
            if not offsets:
                continue
            offset = next(iter(offsets))
            op = replace(op, output=offset, return_time=_read_by(op, offsets[offset]))
        resolved.append(op)
        if may_duplicate:
            resolved.extend(replace(op, output=offset, return_time=_read_by(op, seen))
                            for offset, seen in offsets.items() if offset != op.output)
    return sorted(resolved + reads, key=lambda op: (op.call, op.index or 0))


def _sends(op: dict) -> list:
    return [m for m in op.get("value") or [] if isinstance(m, list) and len(m) >= 3 and m[0] == "send"]


def _read_by(op: Operation, read_return: int) -> int:
    """An append a read saw took effect before that read returned: its return time (pending
    appends otherwise return after everything, which makes the search explode)."""
    end = read_return if op.return_time is None else min(op.return_time, read_return)
    return max(op.call, end)


def offset_operations(ops: Iterable[dict]) -> list[Operation]:
    out: list[Operation] = []
    for inv, comp in _pairs(ops):
        f = inv["f"]
        kind = comp["type"] if comp is not None else "info"
        offsets = inv.get("value") if f == "commit" else (comp or inv).get("offsets") if f == "txn" else None
        if kind in ("ok", "info") and isinstance(offsets, dict):
            ret = comp["time"] if kind == "ok" else None
            for key, offset in sorted(offsets.items()):
                out.append(Operation(inv["process"], ("commit", key, offset), inv["time"], None, ret,
                                     (comp or inv)["index"]))
        elif f == "committed" and kind == "ok" and isinstance(comp.get("value"), dict):
            for key, offset in sorted(comp["value"].items()):
                out.append(Operation(inv["process"], ("committed", key), inv["time"], offset, comp["time"],
                                     comp["index"]))
    return out
