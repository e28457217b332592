"""Durability and ordering checker for Kafka queue histories (PROTOCOL_NOTES.md section 4).

Pure: a history (ops of TRACE_FORMAT.md) and the run's config in, a verdict out.

Version order per key: every poll result (ok, info and fail alike) and every send whose op
*must have committed* (``ok``, or ``info`` with a value some ok poll read) gives
offset -> values. Offsets are then numbered densely (gaps from markers or compaction do
not count as skips), and each value gets its first and last index.

Anomalies, with Jepsen's meaning:

* ``inconsistent-offsets``: one offset holds two values;
* ``duplicate``: one value at two offsets;
* ``lost-write``: a must-have-committed value that no ok poll read, although ok polls read
  values at later positions of its key;
* ``G1a``: an ok poll read a value whose send op failed;
* ``int-poll-skip`` / ``int-nonmonotonic-poll``: inside one poll, consecutive reads of a key
  jump over a known position / go backwards or repeat;
* ``poll-skip`` / ``nonmonotonic-poll``: one process, successive ok polls of a key (no
  assign or subscribe in between): the same, across ops; allowed when the run used
  ``subscribe`` (rebalances move partitions);
* ``nonmonotonic-send`` / ``int-nonmonotonic-send``: a later send to a key by one process /
  inside one op got an earlier offset.

Instead of Jepsen's ``unseen`` (which cannot tell loss from lag), when the run recorded a
final read after healing (``config.final_read``): ``unread-after-heal`` is an acknowledged
value the final read never saw although it read its key to the end, and
``stale-after-heal`` says the final read could not reach the end within the staleness bound.
``stalled`` reports a run whose clients stopped making progress (``config.stalled``).
Without a final read, unread acknowledged values are counted in ``allowed["unseen"]``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from properties.compaction import Compaction
from properties.groups import check_groups

MAX_REPORTED = 50  # anomalies listed per type; the count is always complete

SUBSCRIBE_ALLOWED = ("poll-skip", "nonmonotonic-poll", "nonatomic-read")
# the cleaner removes records: skips over them are expected on a compacted topic
COMPACTION_ALLOWED = ("poll-skip", "int-poll-skip")


@dataclass(slots=True)
class _Pair:
    invoke: dict
    complete: dict | None  # None: never completed


@dataclass(slots=True)
class Result:
    anomalies: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    allowed: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, kind: str, **evidence: Any) -> None:
        self.counts[kind] += 1
        if len(self.anomalies[kind]) < MAX_REPORTED:
            self.anomalies[kind].append(evidence)


def _pairs(ops: list[dict]) -> list[_Pair]:
    open_ops: dict[Any, _Pair] = {}
    out: list[_Pair] = []
    for op in ops:
        if op["process"] == "nemesis":
            continue
        if op["type"] == "invoke":
            pair = _Pair(op, None)
            open_ops[op["process"]] = pair
            out.append(pair)
        else:
            pair = open_ops.pop(op["process"], None)
            if pair is not None:
                pair.complete = op
    return out


def _sends(op: dict | None) -> list[tuple[str, int | None, Any]]:
    """(key, offset or None, value) of each send micro-op of a completion or invocation."""
    out = []
    if op is None or not isinstance(op.get("value"), list):
        return out
    for mop in op["value"]:
        if not isinstance(mop, list) or not mop or mop[0] != "send" or len(mop) < 3:
            continue
        key, v = str(mop[1]), mop[2]
        if isinstance(v, list) and len(v) == 2:
            out.append((key, v[0], v[1]))
        else:
            out.append((key, None, v))
    return out


def _polls(op: dict | None) -> list[dict[str, list[tuple[int, Any]]]]:
    """Each poll micro-op's result: key -> [(offset, value), ...] in read order."""
    out = []
    if op is None or not isinstance(op.get("value"), list):
        return out
    for mop in op["value"]:
        if (isinstance(mop, list) and len(mop) == 2 and mop[0] == "poll"
                and isinstance(mop[1], dict)):
            res = {}
            for key, pairs in mop[1].items():
                res[str(key)] = [(p[0], p[1]) for p in pairs
                                 if isinstance(p, list) and len(p) >= 2]
            out.append(res)
    return out


def _hashable(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def check(ops: list[dict], config: dict | None = None) -> dict:
    """Judge a history; returns the results.json object of TRACE_FORMAT.md."""
    config = config or {}
    pairs = _pairs(ops)
    r = Result()

    # ---------------------------------------------------------- who wrote and read what
    read_by_ok: dict[str, dict[Any, list[int]]] = defaultdict(lambda: defaultdict(list))
    for pair in pairs:
        c = pair.complete
        if c is not None and c["type"] == "ok":
            for res in _polls(c):
                for key, reads in res.items():
                    for _off, v in reads:
                        read_by_ok[key][_hashable(v)].append(c["index"])

    writer: dict[tuple[str, Any], _Pair] = {}
    for pair in pairs:
        for key, _off, v in _sends(pair.invoke):
            writer[(key, _hashable(v))] = pair

    # ---------------------------------------------------------- version order
    offsets: dict[str, dict[int, set]] = defaultdict(lambda: defaultdict(set))
    value_ops: dict[tuple[str, int, Any], list[int]] = defaultdict(list)
    for pair in pairs:
        c = pair.complete
        if c is None:
            continue
        for res in _polls(c):
            for key, reads in res.items():
                for off, v in reads:
                    if isinstance(off, int):
                        offsets[key][off].add(_hashable(v))
                        value_ops[(key, off, _hashable(v))].append(c["index"])
        committed = c["type"] == "ok"
        for key, off, v in _sends(c):
            hv = _hashable(v)
            must = committed or (c["type"] == "info" and hv in read_by_ok[key])
            if must and isinstance(off, int):
                offsets[key][off].add(hv)
                value_ops[(key, off, hv)].append(c["index"])

    index_of: dict[str, dict[int, int]] = {}
    first_index: dict[tuple[str, Any], int] = {}
    last_index: dict[tuple[str, Any], int] = {}
    for key in sorted(offsets):
        by_offset = offsets[key]
        index_of[key] = {off: i for i, off in enumerate(sorted(by_offset))}
        value_offsets: dict[Any, list[int]] = defaultdict(list)
        for off in sorted(by_offset):
            vals = by_offset[off]
            i = index_of[key][off]
            if len(vals) > 1:
                vs = sorted(vals, key=repr)
                r.add("inconsistent-offsets", key=key, offset=off, values=vs,
                      ops=sorted({o for v in vs for o in value_ops[(key, off, v)]}),
                      explanation=f"offset {off} of {key} holds {len(vs)} different values "
                                  f"{vs}: replicas or readers disagree about the log")
            for v in vals:
                value_offsets[v].append(off)
                first_index.setdefault((key, v), i)
                last_index[(key, v)] = i
        for v, offs in sorted(value_offsets.items(), key=lambda kv: repr(kv[0])):
            if len(offs) > 1 and v is not None:  # tombstones all have the value null
                r.add("duplicate", key=key, value=v, offsets=offs,
                      ops=sorted({o for off in offs for o in value_ops[(key, off, v)]}),
                      explanation=f"value {v} appears at {len(offs)} offsets {offs} of {key}; "
                                  f"it was written once")

    # ---------------------------------------------------------- lost writes and G1a
    compacted = Compaction(ops) if config.get("compacted") else None
    max_read_index: dict[str, int] = {}
    for key, values in read_by_ok.items():
        idx = [first_index[(key, v)] for v in values if (key, v) in first_index]
        if idx:
            max_read_index[key] = max(idx)
    unread_acked: list[tuple[str, Any, int | None, _Pair]] = []
    for pair in pairs:
        c = pair.complete
        if c is None:
            continue
        for key, off, v in _sends(c):
            if v is None:
                continue  # a tombstone: the compaction checker judges those
            hv = _hashable(v)
            read = hv in read_by_ok[key]
            if c["type"] == "fail" and read:
                r.add("G1a", key=key, value=v, writer=c["index"], ops=[c["index"], *read_by_ok[key][hv][:5]],
                      explanation=f"value {v} of {key} was read by op {read_by_ok[key][hv][0]} "
                                  f"although the send that wrote it (op {c['index']}) failed")
            if c["type"] != "ok" or read:
                continue
            li = last_index.get((key, hv))
            top = max_read_index.get(key, -1)
            if compacted is not None and compacted.superseded(key, hv, off):
                r.allowed["compacted-away"] += 1  # a newer record of its key replaced it
            elif li is not None and li <= top:
                r.add("lost-write", key=key, value=v, offset=off, writer=c["index"],
                      ops=[c["index"]],
                      explanation=f"value {v} was acknowledged at offset {off} of {key} "
                                  f"(op {c['index']}) but no poll ever read it, although polls "
                                  f"read later positions of {key}")
            else:
                unread_acked.append((key, v, off, pair))

    if compacted is not None:
        compacted.check(config, r.add, r.allowed)
    _check_txn_reads(pairs, index_of, config, r)
    _check_eos(pairs, offsets, read_by_ok, config, r)
    check_groups(ops, config, r.add)
    _check_final_read(config, unread_acked, r)
    _check_stall(config, r)
    _check_send_order(pairs, index_of, r)
    _check_poll_order(pairs, index_of, config, r)

    # ---------------------------------------------------------- verdict
    sub = "subscribe" in (config.get("sub_via") or [])
    bad = []
    for kind in sorted(r.counts):
        if (kind in SUBSCRIBE_ALLOWED and sub) or (kind in COMPACTION_ALLOWED and compacted is not None):
            r.allowed[kind] += r.counts[kind]
        else:
            bad.append(kind)
    client_ops = [p for p in pairs if p.complete is not None]
    return {
        "valid": not bad,
        "anomaly_types": bad,
        "anomalies": {k: r.anomalies[k] for k in bad},
        "counts": {k: r.counts[k] for k in sorted(r.counts)},
        "allowed": dict(sorted(r.allowed.items())),
        "stats": {
            "ops": len(ops),
            "client_ops": len(client_ops),
            "ok": sum(1 for p in client_ops if p.complete["type"] == "ok"),
            "fail": sum(1 for p in client_ops if p.complete["type"] == "fail"),
            "info": sum(1 for p in client_ops if p.complete["type"] == "info"),
            "keys": len(offsets),
            "nemesis_ops": sum(1 for o in ops if o["process"] == "nemesis") // 2,
        },
    }


def _check_txn_reads(pairs: list[_Pair], index_of: dict, config: dict, r: Result) -> None:
    """Transactions: reads of uncommitted data, and all-or-nothing visibility per key."""
    read_committed = config.get("isolation_level") == "read_committed"
    # precommitted-read: an op read a value it had itself sent earlier in the op
    if read_committed:
        for pair in pairs:
            c = pair.complete
            if c is None or not isinstance(c.get("value"), list):
                continue
            sent: set[tuple[str, Any]] = set()
            for mop in c["value"]:
                if not isinstance(mop, list) or not mop:
                    continue
                if mop[0] == "send" and len(mop) >= 3:
                    v = mop[2]
                    sent.add((str(mop[1]), _hashable(v[1] if isinstance(v, list) and len(v) == 2 else v)))
                elif mop[0] == "poll" and len(mop) == 2 and isinstance(mop[1], dict):
                    for key, reads in mop[1].items():
                        for p in reads:
                            if isinstance(p, list) and len(p) >= 2 and (str(key), _hashable(p[1])) in sent:
                                r.add("precommitted-read", key=str(key), value=p[1], ops=[c["index"]],
                                      explanation=f"op {c['index']} read {p[1]} from {key}, which it "
                                                  f"had sent itself in the same, still open, "
                                                  f"transaction: read_committed exposed "
                                                  f"uncommitted data")
    # nonatomic-read: a process read part of a committed transaction's records in a key and
    # then read past them, never reading the rest
    txn_values: list[tuple[int, str, list[tuple[int, Any]]]] = []  # (op, key, [(index, v)])
    for pair in pairs:
        c = pair.complete
        if c is None or c["type"] != "ok" or c["f"] != "txn":
            continue
        by_key: dict[str, list[tuple[int, Any]]] = defaultdict(list)
        for key, off, v in _sends(c):
            i = index_of.get(key, {}).get(off) if isinstance(off, int) else None
            if i is not None:
                by_key[key].append((i, _hashable(v)))
        txn_values.extend((c["index"], k, vs) for k, vs in by_key.items() if len(vs) > 1)
    if not txn_values:
        return
    read: dict[tuple[Any, str], set] = defaultdict(set)
    top: dict[tuple[Any, str], tuple[int, int]] = {}  # (process, key) -> (max index, op)
    low: dict[tuple[Any, str], int] = {}  # (process, key) -> min index read
    for pair in pairs:
        c = pair.complete
        if c is None or c["type"] == "info":
            continue
        for res in _polls(c):
            for key, reads in res.items():
                idx = index_of.get(key, {})
                for off, v in reads:
                    i = idx.get(off)
                    if i is None:
                        continue
                    read[(c["process"], key)].add(_hashable(v))
                    if i > top.get((c["process"], key), (-1, -1))[0]:
                        top[(c["process"], key)] = (i, c["index"])
                    low[(c["process"], key)] = min(i, low.get((c["process"], key), i))
    for (process, key), values in sorted(read.items(), key=lambda kv: repr(kv[0])):
        for op, k, vs in txn_values:
            if k != key:
                continue
            got = [v for _i, v in vs if v in values]
            if not got or len(got) == len(vs):
                continue
            hi, hi_op = top[(process, key)]
            # the process's reads of the key span the whole transaction (a process that
            # starts reading in the middle of one, after an info op, is no evidence)
            if low[(process, key)] <= min(i for i, _v in vs) and hi > max(i for i, _v in vs):
                missing = [v for _i, v in vs if v not in values]
                r.add("nonatomic-read", key=key, values=sorted(got, key=repr),
                      missing=sorted(missing, key=repr), ops=[op, hi_op],
                      explanation=f"process {process} read {got} of transaction op {op} from "
                                  f"{key} and later positions (op {hi_op}), but never its "
                                  f"{missing}: the transaction was not visible all at once")


def _check_eos(pairs: list[_Pair], offsets: dict, read_by_ok: dict, config: dict, r: Result) -> None:
    """Consume-transform-produce (``config.eos``): every input record below the group's final
    committed offset reaches the output exactly once, and nothing beyond it does."""
    eos = config.get("eos")
    if not eos:
        return
    shift = eos.get("source_shift", 1)
    in_topic, out_topic = eos["input"], eos["output"]
    committed = None
    for pair in pairs:
        c = pair.complete
        if c is not None and c["f"] == "committed" and c["type"] == "ok" and isinstance(c["value"], dict):
            committed = c["value"]
            committed_op = c["index"]
    # output writes that must be in the output: read by a read_committed poll, or sent by a
    # committed transaction
    copies: dict[tuple[str, Any], dict[Any, int]] = defaultdict(dict)  # (in key, source) -> writes
    for key, values in read_by_ok.items():
        if not key.startswith(out_topic + ":"):
            continue
        for v, readers in values.items():
            if isinstance(v, int):
                copies[(in_topic + key[len(out_topic):], v // shift)][v] = readers[0]
    for pair in pairs:
        c = pair.complete
        if c is None or c["type"] != "ok" or c["f"] != "txn":
            continue
        for key, _off, v in _sends(c):
            if key.startswith(out_topic + ":") and isinstance(v, int):
                copies[(in_topic + key[len(out_topic):], v // shift)].setdefault(v, c["index"])
    for (in_key, source), writes in sorted(copies.items(), key=lambda kv: repr(kv[0])):
        if len(writes) > 1:
            r.add("eos-duplicate", key=in_key, value=source, copies=sorted(writes),
                  ops=sorted(set(writes.values())),
                  explanation=f"input value {source} of {in_key} reached the output "
                              f"{len(writes)} times (writes {sorted(writes)}): processed more "
                              f"than once")
    if committed is None:
        return
    final = config.get("final_read") or {}
    for in_key in sorted(committed):
        upto = committed[in_key]
        upto = 0 if upto is None else upto
        for off, values in sorted(offsets.get(in_key, {}).items()):
            for source in values:
                done = (in_key, source) in copies
                if off < upto and not done and final.get("reached_end"):
                    r.add("eos-lost", key=in_key, value=source, offset=off, ops=[committed_op],
                          explanation=f"input value {source} at offset {off} of {in_key} is "
                                      f"below the group's committed offset {upto}, yet it never "
                                      f"reached the output")
                elif off >= upto and not done:
                    r.allowed["eos-unprocessed"] += 1  # after the last commit: not yet processed
                elif off >= upto and done:
                    writes = copies[(in_key, source)]
                    r.add("eos-output-beyond-commit", key=in_key, value=source, offset=off,
                          ops=[*sorted(set(writes.values())), committed_op],
                          explanation=f"input value {source} at offset {off} of {in_key} is in "
                                      f"the output, but the group's committed offset is {upto}: "
                                      f"the output and the offsets were not committed together")


def _check_final_read(config: dict, unread: list, r: Result) -> None:
    final = config.get("final_read") or {}
    if not final.get("performed"):
        r.allowed["unseen"] += len(unread)
        return
    if not final.get("reached_end"):
        r.add("stale-after-heal", ops=[],
              explanation=f"after every fault was healed the final read could not reach the end "
                          f"of every partition within {final.get('staleness_bound_ms')} ms")
    start = final.get("start_ns", 0)
    ends = final.get("end_offsets") or {}
    for key, v, off, pair in unread:
        if pair.complete["time"] >= start:
            continue
        if not final.get("reached_end") and key not in ends:
            continue
        r.add("unread-after-heal", key=key, value=v, offset=off, writer=pair.complete["index"],
              ops=[pair.complete["index"]],
              explanation=f"value {v} was acknowledged at offset {off} of {key} (op "
                          f"{pair.complete['index']}) but the final read after healing read "
                          f"{key} to its end ({ends.get(key)}) without it: the write is lost")


def _check_stall(config: dict, r: Result) -> None:
    stalled = config.get("stalled")
    if not stalled:
        return
    r.add("stalled", ops=[], time=stalled.get("at_ns"),
          explanation=f"no client operation completed for {stalled.get('idle_ms', 0) // 1000} s "
                      f"of virtual time after {stalled.get('at_ns', 0) / 1e9:.1f} s; the workload "
                      f"stopped with {stalled.get('ops_completed')} of {config.get('ops')} ops done")


def _check_send_order(pairs: list[_Pair], index_of: dict, r: Result) -> None:
    last: dict[tuple[Any, str], tuple[int, int, Any]] = {}  # (process, key) -> (index, op, v)
    for pair in pairs:
        c = pair.complete
        if c is None or c["type"] not in ("ok", "info"):
            continue
        within: dict[str, tuple[int, Any]] = {}
        for key, off, v in _sends(c):
            i = index_of.get(key, {}).get(off) if isinstance(off, int) else None
            if i is None:
                continue
            prev_in = within.get(key)
            if prev_in is not None and i <= prev_in[0]:
                r.add("int-nonmonotonic-send", key=key, values=[prev_in[1], v], ops=[c["index"]],
                      explanation=f"op {c['index']} sent {prev_in[1]} then {v} to {key}, but {v} "
                                  f"got an earlier position")
            within[key] = (i, v)
        for key, (i, v) in within.items():
            prev = last.get((c["process"], key))
            if prev is not None and i <= prev[0]:
                r.add("nonmonotonic-send", key=key, values=[prev[2], v], ops=[prev[1], c["index"]],
                      explanation=f"process {c['process']} sent {prev[2]} (op {prev[1]}) and later "
                                  f"{v} (op {c['index']}) to {key}, but {v} got an earlier position")
            last[(c["process"], key)] = (i, c["index"], v)


def _check_poll_order(pairs: list[_Pair], index_of: dict, config: dict, r: Result) -> None:
    last: dict[tuple[Any, str], tuple[int, int, Any]] = {}  # (process, key) -> (index, op, v)
    for pair in pairs:
        c = pair.complete
        if c is None:
            continue
        if c["f"] in ("assign", "subscribe") and c["type"] == "ok":
            changed = c.get("value") if isinstance(c.get("value"), list) else []
            for key in [str(k) for k in changed] + [k for (p, k) in list(last) if p == c["process"]]:
                last.pop((c["process"], key), None)
            continue
        if c["type"] == "info":
            continue  # the process ends with an info op
        # a failed transaction's polls happened all the same: the consumer moved on
        touched = set()
        for entry in c.get("rebalance_log") or []:
            touched.update(str(k) for k in entry.get("keys", []))
        for res in _polls(c):
            for key, reads in res.items():
                idx = index_of.get(key, {})
                prev_i = None
                prev_v = None
                for off, v in reads:
                    i = idx.get(off)
                    if i is None:
                        continue
                    if prev_i is not None and key not in touched:
                        if i > prev_i + 1:
                            r.add("int-poll-skip", key=key, values=[prev_v, v], ops=[c["index"]],
                                  explanation=f"op {c['index']} read {prev_v} then {v} from {key}, "
                                              f"skipping {i - prev_i - 1} known record(s) between them")
                        elif i <= prev_i:
                            r.add("int-nonmonotonic-poll", key=key, values=[prev_v, v], ops=[c["index"]],
                                  explanation=f"op {c['index']} read {prev_v} then {v} from {key}, "
                                              f"going back in the log")
                    if prev_i is None:
                        prev = last.get((c["process"], key))
                        if prev is not None and key not in touched:
                            if i > prev[0] + 1:
                                r.add("poll-skip", key=key, values=[prev[2], v],
                                      ops=[prev[1], c["index"]],
                                      explanation=f"process {c['process']} read {prev[2]} from {key} "
                                                  f"(op {prev[1]}) and next {v} (op {c['index']}), "
                                                  f"skipping {i - prev[0] - 1} known record(s)")
                            elif i <= prev[0]:
                                r.add("nonmonotonic-poll", key=key, values=[prev[2], v],
                                      ops=[prev[1], c["index"]],
                                      explanation=f"process {c['process']} read {prev[2]} from {key} "
                                                  f"(op {prev[1]}) and next {v} (op {c['index']}), "
                                                  f"going back in the log")
                    prev_i, prev_v = i, v
                if prev_i is not None:
                    last[(c["process"], key)] = (prev_i, c["index"], prev_v)


def with_invariant_violations(result: dict, events: list[dict]) -> dict:
    """Add the simulator's white-box invariant violations (events.jsonl) to a verdict."""
    found = [e for e in events if e.get("kind") == "invariant-violation"]
    if not found:
        return result
    result = dict(result)
    result["anomalies"] = dict(result["anomalies"])
    result["anomalies"]["invariant-violation"] = [
        {"key": e.get("key"), "node": e.get("node"), "invariant": e.get("invariant"),
         "time": e.get("time"), "ops": [],
         "explanation": f"broker state broke '{e.get('invariant')}' on node {e.get('node')}: "
                        f"{e.get('detail')}"}
        for e in found[:MAX_REPORTED]
    ]
    result["counts"] = {**result.get("counts", {}), "invariant-violation": len(found)}
    result["anomaly_types"] = sorted({*result["anomaly_types"], "invariant-violation"})
    result["valid"] = False
    return result
