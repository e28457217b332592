"""Reading histories from files: porcupine's Jepsen etcd logs and kv EDN files.

(Run directories of ours are read by :mod:`linearizability.kafka_histories`.)

The etcd logs are read as porcupine's parseJepsenLog reads them: an ``:invoke`` opens an
operation for its process and the next ``:ok`` or ``:fail`` of that process returns it;
``:info`` lines are skipped, so the operation stays pending; a ``:fail :read`` returns with an
unknown value, a ``:fail :cas`` is a cas that did not apply. The line number is the time.
"""

from __future__ import annotations

import re
from pathlib import Path

from linearizability.operations import UNKNOWN, HistoryError, Operation

_ETCD_LINE = re.compile(r"jepsen\.util\s+-\s+(\S+)\s+(:\w+)\s+(:\w+)\s*(.*)$")
_KV_LINE = re.compile(r'\{:process (\d+), :type :(\w+), :f :(\w+), :key "([^"]*)", :value (nil|"[^"]*")\}')


def _etcd_value(text: str, where: str):
    text = text.strip()
    if text in ("nil", ":timed-out"):
        return None
    if text.startswith("["):
        parts = text.strip("[]").split()
        if len(parts) != 2:
            raise HistoryError(f"{where}: a cas value must be [from to], not {text!r}")
        return tuple(int(p) for p in parts)
    try:
        return int(text)
    except ValueError:
        raise HistoryError(f"{where}: cannot read the value {text!r}") from None


def read_etcd_log(path: str | Path) -> list[Operation]:
    """A Jepsen etcd log as register operations (inputs and outputs of models.REGISTER)."""
    path = Path(path)
    open_ops: dict[str, tuple[int, str, object]] = {}
    done: list[Operation] = []
    time = 0
    for line_number, line in enumerate(path.read_text().splitlines(), 1):
        match = _ETCD_LINE.search(line)
        if not match:
            continue
        where = f"{path}:{line_number}"
        process, kind, f, rest = match.groups()
        time += 1
        if kind == ":invoke":
            if process in open_ops:
                raise HistoryError(f"{where}: process {process} invokes while its last operation is open")
            open_ops[process] = (time, f, _etcd_value(rest, where))
        elif kind in (":ok", ":fail"):
            if process not in open_ops:
                raise HistoryError(f"{where}: {kind} for process {process} without an invoke")
            call, invoked_f, value = open_ops.pop(process)
            done.append(_etcd_operation(process, invoked_f, value, kind == ":ok", _etcd_value(rest, where), call,
                                        time, where))
        elif kind != ":info":
            raise HistoryError(f"{where}: unknown type {kind}")
    for process, (call, f, value) in open_ops.items():
        done.append(_etcd_operation(process, f, value, None, None, call, None, str(path)))
    done.sort(key=lambda op: op.call)
    return done


def _etcd_operation(process: str, f: str, value, ok: bool | None, result, call: int, ret: int | None,
                    where: str) -> Operation:
    """ok is None for a pending operation (its outcome unknown)."""
    client = int(process) if process.isdigit() else process
    if f == ":read":
        output = result if ok else UNKNOWN
        return Operation(client, ("read",), call, output, ret)
    if f == ":write":
        if ok is False:
            raise HistoryError(f"{where}: a failed write is not in porcupine's etcd format")
        return Operation(client, ("write", value), call, None, ret)
    if f == ":cas":
        if not isinstance(value, tuple):
            raise HistoryError(f"{where}: a cas needs [from to]")
        return Operation(client, ("cas", *value), call, UNKNOWN if ok is None else ok, ret)
    raise HistoryError(f"{where}: unknown function {f}")


def read_kv_edn(path: str | Path) -> list[Operation]:
    """porcupine's kv files: one EDN map a line, every invoke returned by the same process."""
    path = Path(path)
    open_ops: dict[int, tuple[int, str, str, str | None]] = {}
    done: list[Operation] = []
    for time, line in enumerate(path.read_text().splitlines()):
        if not line.strip():
            continue
        match = _KV_LINE.fullmatch(line.strip())
        if not match:
            raise HistoryError(f"{path}:{time + 1}: not a kv history line: {line[:80]!r}")
        process_text, kind, f, key, raw = match.groups()
        process = int(process_text)
        value = None if raw == "nil" else raw[1:-1]
        if kind == "invoke":
            if process in open_ops:
                raise HistoryError(f"{path}:{time + 1}: process {process} invokes while its last operation is open")
            open_ops[process] = (time, f, key, value)
        elif kind == "ok":
            if process not in open_ops:
                raise HistoryError(f"{path}:{time + 1}: ok for process {process} without an invoke")
            call, invoked_f, invoked_key, invoked_value = open_ops.pop(process)
            if invoked_f == "get":
                done.append(Operation(process, ("get", invoked_key), call, value or "", time))
            elif invoked_f in ("put", "append"):
                done.append(Operation(process, (invoked_f, invoked_key, invoked_value or ""), call, None, time))
            else:
                raise HistoryError(f"{path}:{time + 1}: unknown function :{invoked_f}")
        else:
            raise HistoryError(f"{path}:{time + 1}: the kv format has only :invoke and :ok, not :{kind}")
    for process, (call, f, key, value) in open_ops.items():
        done.append(Operation(process, ("get", key) if f == "get" else (f, key, value or ""), call,
                              UNKNOWN if f == "get" else None, None))
    done.sort(key=lambda op: op.call)
    return done
