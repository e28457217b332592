"""Models: what a sequential object does, as porcupine's ``Model`` (init, step, equal,
partition, describe).

A model written in Python is a :class:`Model` whose functions the pure-Python search calls.
The built-in models have the same Python definition (their meaning, and the oracle's model)
plus ``native``: the name of the C++ twin in ``linearizability/cpp/models.hpp`` and an
encoder that turns operations into the tuples the C++ side reads.

Built-in models (:data:`MODELS`):

- ``register``: read / write / compare-and-set on one register (porcupine's etcd model).
  Inputs ``("read",)``, ``("write", v)``, ``("cas", expected, new)``; outputs: the value read
  (``None`` for nil), anything for a write, ``True``/``False`` for a cas.
- ``kv``: get / put / append on string values, partitioned by key (porcupine's kv model).
  Inputs ``("get", key)``, ``("put", key, v)``, ``("append", key, v)``; a get outputs the value.
- ``kv-map``: the same operations checked as one map, without partitioning.
- ``partition-log``: a Kafka partition's committed log, partitioned by topic-partition.
  ``("append", key, value)`` outputs the offset it got; ``("read", key, position)`` outputs
  the records ``((offset, value), ...)`` it returned from ``position`` (``None``: the first
  record's offset). Appends go past every offset already in the log; a read's records must
  be in the log, and none of the log's records between the position and the last record
  returned may be missing; an empty read with a position says nothing is at or after it.
  Offsets may have gaps (transaction markers, aborted records). An append whose offset is
  unknown has no visible effect (if it was ever read, give it the offset it was read at).
- ``committed-offsets``: consumer-group offsets, a register per (group, partition):
  ``("commit", key, offset)`` and ``("committed", key)`` outputting the offset or ``None``.
"""

from __future__ import annotations

import operator
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from linearizability.operations import UNKNOWN, HistoryError, Operation

NIL = -(2**63)   # the C++ side's "nothing" for register values and log positions


def _describe(input: Any, output: Any) -> str:
    return f"{input!r} -> {output!r}"


@dataclass(frozen=True)
class Model:
    name: str
    init: Callable[[], Any]
    step: Callable[[Any, Any, Any], tuple[bool, Any]]
    equal: Callable[[Any, Any], bool] = operator.eq
    partition: Callable[[Sequence[Operation]], list[list[Operation]]] | None = None
    describe_operation: Callable[[Any, Any], str] = _describe
    describe_state: Callable[[Any], str] = repr
    native: str | None = None
    encode: Callable[[Sequence[Operation], int], list[tuple]] | None = None
    # Optional: narrows the operations' intervals without changing which linearizations are
    # valid, and may reorder them (the search tries simultaneous calls in list order); returns
    # (position in the given list, prepared operation) in the order to search. Both engines
    # search the prepared operations; results name the operations as given.
    prepare: Callable[[Sequence[Operation]], list[tuple[int, Operation]]] | None = None


def partition_by(key: Callable[[Operation], Any]) -> Callable[[Sequence[Operation]], list[list[Operation]]]:
    def partition(operations: Sequence[Operation]) -> list[list[Operation]]:
        groups: dict[Any, list[Operation]] = defaultdict(list)
        for op in operations:
            groups[key(op)].append(op)
        return list(groups.values())

    return partition


def _times(op: Operation, pending_at: int) -> tuple[int, int]:
    return op.call, (pending_at if op.return_time is None else op.return_time)


def _int(value: Any, what: str) -> int:
    if value is None:
        return NIL
    if isinstance(value, bool) or not isinstance(value, int) or not NIL < value < 2**63:
        raise HistoryError(f"{what} must be a 64-bit integer or None, not {value!r}")
    return value


# -- register (porcupine's etcd model) ---------------------------------------------------------

def _register_step(state: Any, input: tuple, output: Any) -> tuple[bool, Any]:
    match input:
        case ("read",):
            return output is UNKNOWN or output == state, state
        case ("write", value):
            return True, value
        case ("cas", expected, new):
            hit = state == expected
            return output is UNKNOWN or bool(output) == hit, (new if hit else state)
    raise HistoryError(f"register: unknown input {input!r}")


def _register_encode(operations: Sequence[Operation], pending_at: int) -> list[tuple]:
    out = []
    for op in operations:
        call, ret = _times(op, pending_at)
        known = op.output is not UNKNOWN
        match op.input:
            case ("read",):
                out.append((call, ret, 0, known, _int(op.output, "a read value") if known else 0, 0, False))
            case ("write", value):
                out.append((call, ret, 1, known, _int(value, "a written value"), 0, False))
            case ("cas", expected, new):
                out.append((call, ret, 2, known, _int(expected, "cas expected"), _int(new, "cas new"),
                            bool(op.output) if known else False))
            case _:
                raise HistoryError(f"register: unknown input {op.input!r}")
    return out


def _register_describe(input: tuple, output: Any) -> str:
    shown = "?" if output is UNKNOWN else ("nil" if output is None else output)
    match input:
        case ("read",):
            return f"read() -> {shown}"
        case ("write", value):
            return f"write({value})"
        case ("cas", expected, new):
            return f"cas({expected}, {new}) -> {shown}"
    return _describe(input, output)


REGISTER = Model("register", init=lambda: None, step=_register_step, describe_operation=_register_describe,
                 describe_state=lambda s: "nil" if s is None else str(s), native="register", encode=_register_encode)


# -- key-value maps (porcupine's kv models) -----------------------------------------------------

def _kv_apply(value: str, input: tuple, output: Any) -> tuple[bool, str]:
    match input:
        case ("get", _):
            return output is UNKNOWN or output == value, value
        case ("put", _, new):
            return True, new
        case ("append", _, suffix):
            return True, value + suffix
    raise HistoryError(f"kv: unknown input {input!r}")


def _kv_map_step(state: dict, input: tuple, output: Any) -> tuple[bool, dict]:
    key = input[1]
    ok, value = _kv_apply(state.get(key, ""), input, output)
    if not ok:
        return False, state
    if input[0] == "get":
        return True, state
    new = dict(state)
    new[key] = value
    return True, new


def _kv_encode(operations: Sequence[Operation], pending_at: int) -> list[tuple]:
    keys: dict[Any, int] = {}
    out = []
    for op in operations:
        call, ret = _times(op, pending_at)
        kind = {"get": 0, "put": 1, "append": 2}.get(op.input[0]) if isinstance(op.input, tuple) else None
        if kind is None or len(op.input) != (2 if kind == 0 else 3):
            raise HistoryError(f"kv: unknown input {op.input!r}")
        key = keys.setdefault(op.input[1], len(keys))
        known = op.output is not UNKNOWN
        text = (op.output if known else "") if kind == 0 else op.input[2]
        if not isinstance(text, str):
            raise HistoryError(f"kv: values must be strings, not {text!r}")
        out.append((call, ret, kind, known, key, text))
    return out


def _kv_describe(input: tuple, output: Any) -> str:
    match input:
        case ("get", key):
            return f"get({key!r}) -> {'?' if output is UNKNOWN else repr(output)}"
        case (verb, key, value):
            return f"{verb}({key!r}, {value!r})"
    return _describe(input, output)


KV = Model("kv", init=lambda: "", step=_kv_apply, partition=partition_by(lambda op: op.input[1]),
           describe_operation=_kv_describe, describe_state=repr, native="kv", encode=_kv_encode)
KV_MAP = Model("kv-map", init=dict, step=_kv_map_step, describe_operation=_kv_describe,
               describe_state=lambda s: repr(dict(sorted(s.items()))), native="kv-map", encode=_kv_encode)


# -- a Kafka partition's log ---------------------------------------------------------------------

def _log_step(state: tuple, input: tuple, output: Any) -> tuple[bool, tuple]:
    """state: the log as ((offset, value), ...) in offset order."""
    match input:
        case ("append", _, value):
            if output is UNKNOWN:
                return True, state
            offsets = [o for o, _ in state]
            if output in offsets or (offsets and output < offsets[-1]):
                return False, state
            return True, (*state, (output, value))
        case ("read", _, position):
            records = tuple(output)
            if position is None:
                if not records:
                    return True, state
                position = records[0][0]
            log = dict(state)
            if any(log.get(offset, _ABSENT) != value for offset, value in records):
                return False, state
            last = records[-1][0] if records else None
            inside = [o for o, _ in state if o >= position and (last is None or o <= last)]
            return len(inside) == len(records), state
    raise HistoryError(f"partition-log: unknown input {input!r}")


_ABSENT = object()


def _log_encode(operations: Sequence[Operation], pending_at: int) -> list[tuple]:
    out = []
    for op in operations:
        call, ret = _times(op, pending_at)
        match op.input:
            case ("append", _, value):
                known = op.output is not UNKNOWN
                out.append((call, ret, 0, known, _int(op.output, "an offset") if known else 0,
                            _int(value, "a value"), []))
            case ("read", _, position):
                flat = []
                for offset, value in op.output:
                    flat.append(_int(offset, "an offset"))
                    flat.append(_int(value, "a value"))
                out.append((call, ret, 1, True, _int(position, "a position"), 0, flat))
            case _:
                raise HistoryError(f"partition-log: unknown input {op.input!r}")
    return out


def _log_describe(input: tuple, output: Any) -> str:
    match input:
        case ("append", _, value):
            return f"append({value}) -> {'?' if output is UNKNOWN else output}"
        case ("read", _, position):
            shown = " ".join(f"{o}:{v}" for o, v in output) or "nothing"
            return f"read(from {'?' if position is None else position}) -> {shown}"
    return _describe(input, output)


def _log_state(state: tuple) -> str:
    if len(state) > 12:
        head = " ".join(f"{o}:{v}" for o, v in state[:4])
        tail = " ".join(f"{o}:{v}" for o, v in state[-6:])
        return f"[{head} ... ({len(state) - 10} more) ... {tail}]"
    return "[" + " ".join(f"{o}:{v}" for o, v in state) + "]"


def _log_prepare(operations: Sequence[Operation]) -> list[tuple[int, Operation]]:
    """Appends take effect in offset order, so an append must happen before any append at a
    higher offset returns, and after any append at a lower offset is called. Narrowing the
    intervals that way keeps every valid linearization; ordering simultaneous calls by offset
    makes the search try the order that can work first. Without both, many concurrent or
    pending appends make the search explode."""
    out = list(operations)
    appends = sorted((op.output, i) for i, op in enumerate(operations)
                     if op.input[0] == "append" and op.output is not UNKNOWN and isinstance(op.output, int))
    # returns: the earliest return among strictly higher offsets
    earliest = None
    j = len(appends)
    while j > 0:
        k = j
        while k > 0 and appends[k - 1][0] == appends[j - 1][0]:
            k -= 1
        group = [i for _, i in appends[k:j]]
        if earliest is not None:
            for i in group:
                op = out[i]
                ret = earliest if op.return_time is None else min(op.return_time, earliest)
                out[i] = replace(op, return_time=max(ret, op.call))
        for i in group:
            r = operations[i].return_time
            if r is not None:
                earliest = r if earliest is None else min(earliest, r)
        j = k
    # calls: the latest call among strictly lower offsets
    latest = None
    j = 0
    while j < len(appends):
        k = j
        while k < len(appends) and appends[k][0] == appends[j][0]:
            k += 1
        group = [i for _, i in appends[j:k]]
        if latest is not None:
            for i in group:
                op = out[i]
                end = op.return_time
                out[i] = replace(op, call=max(op.call, latest) if end is None else min(max(op.call, latest), end))
        for i in group:
            latest = operations[i].call if latest is None else max(latest, operations[i].call)
        j = k

    def order(i: int) -> tuple:
        op = out[i]
        offset = op.output if op.input[0] == "append" and isinstance(op.output, int) else -1
        return (op.call, offset, i)

    return [(i, out[i]) for i in sorted(range(len(out)), key=order)]


PARTITION_LOG = Model("partition-log", init=tuple, step=_log_step, partition=partition_by(lambda op: op.input[1]),
                      describe_operation=_log_describe, describe_state=_log_state, native="log", encode=_log_encode,
                      prepare=_log_prepare)


# -- committed consumer-group offsets -------------------------------------------------------------

def _offsets_to_register(input: tuple) -> tuple:
    match input:
        case ("commit", _, offset):
            return ("write", offset)
        case ("committed", _):
            return ("read",)
    raise HistoryError(f"committed-offsets: unknown input {input!r}")


def _offsets_step(state: Any, input: tuple, output: Any) -> tuple[bool, Any]:
    return _register_step(state, _offsets_to_register(input), output)


def _offsets_encode(operations: Sequence[Operation], pending_at: int) -> list[tuple]:
    as_register = [replace(op, input=_offsets_to_register(op.input)) for op in operations]
    return _register_encode(as_register, pending_at)


def _offsets_describe(input: tuple, output: Any) -> str:
    match input:
        case ("commit", key, offset):
            return f"commit({key}, {offset})"
        case ("committed", key):
            return f"committed({key}) -> {'?' if output is UNKNOWN else output}"
    return _describe(input, output)


COMMITTED_OFFSETS = Model("committed-offsets", init=lambda: None, step=_offsets_step,
                          partition=partition_by(lambda op: op.input[1]), describe_operation=_offsets_describe,
                          describe_state=lambda s: "none" if s is None else str(s), native="register",
                          encode=_offsets_encode)


MODELS: dict[str, Model] = {m.name: m for m in (REGISTER, KV, KV_MAP, PARTITION_LOG, COMMITTED_OFFSETS)}


def get_model(name: str) -> Model:
    try:
        return MODELS[name]
    except KeyError:
        raise HistoryError(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}") from None
