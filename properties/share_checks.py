"""What KIP-932's share groups promise, judged from a share workload's history
(``config.share``; docs/reference/trace-format.md, /work/notes/kip932-spec.md sections 3.5, 3.6
and 8).

Share consumers ``acquire`` records (each with its delivery count) under a time-limited lock
and ``ack`` them (accept, release, reject); Kafka applies one request's acknowledgements of a
partition all or nothing. Offsets name records: a record is ``(key, offset)``. Times are the
ops' invoke (i) and completion (c) times (an acquire's i is its ``fetch_time`` when that is
earlier: a client that buffers returns records fetched during an earlier op); ``clock_slack_ms``
widens every comparison.

* ``share-double-acquired``: a record acquired by P (op A1) and then by Q (A2, Q may be P)
  surely later (i2 > c1) and surely before P's lock could expire (c2 < i1 + lock_ms), while P
  had not possibly released it (below). Allowed as ``share-lock-forgotten`` when a broker
  fault was in force at some time between i1 and c2 (or had ended less than ``settle_ms``,
  default 10 s, before: :func:`fault_windows`): a new leader forgets every acquisition, which
  is never persisted, as Kafka is designed.
* ``share-redelivered-accepted``: a record acquired by an op invoked after an ack accepted
  it (ok, its partition's error ``NONE``): Kafka persists an acceptance before it answers it.
* ``share-lost`` (``final``): an acknowledged write never accepted or rejected (not even
  possibly, by an ack of unknown outcome) whose delivery count, as high as it can have
  become, is below the delivery limit: the final phase should have delivered and accepted it.
  As high as it can have become: its highest count seen, plus one for every acquisition of
  unknown outcome (an ``info`` acquire) and every ShareFetch answer a consumer lost (an op's
  ``lost_fetches``) after the write began: each may have delivered it once, unseen, and a
  record delivered the limit's number of times is archived. With ``unseen_in_faults`` (real
  clients, which retry a fetch whose answer a fault lost without saying so) a record written
  before the last fault window ended is ``share-lost-unseen``, allowed.
* ``share-delivery-limit``: a delivery count above the limit or below 1.
* ``share-aborted-delivered`` (``isolation`` read_committed): a delivered record written by a
  transaction that aborted (a ``txn`` op that ended ``fail``).
* ``share-count-regressed``: a record delivered surely after an earlier delivery with a
  count not above the earlier one. Allowed as ``share-count-forgotten`` when a broker fault
  was in force between the two: the new leader restarts from the persisted count.
* ``share-value-mismatch``: a delivered record's value is not the value acknowledged-written
  at its offset, was written at another offset, belongs to a failed send or to no send, or
  two deliveries of one offset carry different values.

P possibly released a record before time t when, before t, P invoked an ack naming it whose
outcome for its partition is not a definite refusal (an ack that succeeded counts only when
invoked after the acquisition: it was applied before it answered), or after the acquisition
a ``crash`` or a ``subscribe`` (the consumer left; the session's end releases its records),
or P's last op ended ``info`` (the consumer went on under a new process id, which may have
released it).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from properties.analysis import hashable
from traces.history import NEMESIS, HistoryError, check_share_op

INF = float("inf")
# the errors of an acknowledgement (per partition) that say nothing was applied; any other
# error leaves the outcome unknown (the state write may have happened)
REFUSALS = frozenset({"INVALID_RECORD_STATE", "INVALID_REQUEST", "SHARE_SESSION_NOT_FOUND",
                      "INVALID_SHARE_SESSION_EPOCH", "UNKNOWN_TOPIC_OR_PARTITION", "NOT_LEADER_OR_FOLLOWER",
                      "FENCED_LEADER_EPOCH"})
# nemesis ops that end faults (on their nodes, or every fault when they name none)
UNDOES = ("heal", "restart", "resume", "disk-heal")
# faults that take nodes down: a heal of the network does not end them
NODE_DOWN = ("kill", "pause", "sigkill", "lose-unflushed", "disk-fault", "offline-partition", "last-replica-standing")
# how long a fault's effect on leadership outlasts the op that ends it: a leader cut off by a
# partition serves on until it learns, after the heal, that another was elected (Kafka fences a
# broker after broker.session.timeout.ms, 9 s by default); config.share.settle_ms overrides it
SETTLE_MS = 10_000
# faults that last an instant: nothing ends them
INSTANT = ("client-drop", "release", "slow-callback")
# the faults that leave a broker alive but cut off or stopped: still leading, as far as it knows
CUT_OFF = ("partition", "pause", "isolate")


def error_name(e: str) -> str:
    """Kafka's error name: ``InvalidRecordStateException`` (a client's exception) is
    ``INVALID_RECORD_STATE``."""
    if e.isupper() or "_" in e:
        return e
    e = e.rsplit(".", 1)[-1].removesuffix("Exception")
    return re.sub(r"(?<!^)(?=[A-Z])", "_", e).upper()


@dataclass(frozen=True)
class ShareConfig:
    group: str
    keys: tuple[str, ...]
    lock_ns: int
    delivery_limit: int
    slack_ns: int
    final: bool
    settle_ns: int
    unseen_in_faults: bool = False  # real clients: a fault may have made any number of deliveries unseen
    read_committed: bool = False  # share.isolation.level read_committed


def share_config(config: dict) -> ShareConfig:
    """run.json's ``config.share``, checked: HistoryError (one line) when it is malformed."""
    s = config.get("share")
    if not isinstance(s, dict):
        raise HistoryError(f"run.json's config.share must be a JSON object, not {str(s)[:40]}")

    def integer(name: str, low: int, default: int | None = None) -> int:
        v = s.get(name, default)
        if type(v) is not int or v < low:
            raise HistoryError(f"run.json's config.share.{name} must be an integer >= {low}, not {v!r}")
        return v

    keys = s.get("keys") or []
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise HistoryError("run.json's config.share.keys must be a list of keys (\"topic:partition\")")
    final = s.get("final", False)
    if not isinstance(final, bool):
        raise HistoryError(f"run.json's config.share.final must be true or false, not {final!r}")
    unseen = s.get("unseen_in_faults", False)
    if not isinstance(unseen, bool):
        raise HistoryError(f"run.json's config.share.unseen_in_faults must be true or false, not {unseen!r}")
    isolation = s.get("isolation", "read_uncommitted")
    if isolation not in ("read_uncommitted", "read_committed"):
        raise HistoryError(f"run.json's config.share.isolation must be read_uncommitted or read_committed, "
                           f"not {isolation!r}")
    return ShareConfig(str(s.get("group", "")), tuple(keys), integer("lock_ms", 1) * 1_000_000,
                       integer("delivery_limit", 1), integer("clock_slack_ms", 0, 0) * 1_000_000, final,
                       integer("settle_ms", 0, SETTLE_MS) * 1_000_000, unseen, isolation == "read_committed")


@dataclass(slots=True)
class Call:
    """A client op, invocation and completion together."""

    index: int  # the completion's (the invocation's when it never completed)
    process: Any
    f: str
    type: str  # ok, fail, info; info when it never completed
    i: float  # invoke time (an acquire's: or its ``fetch_time``, if earlier)
    c: float  # completion time (INF when it never completed)
    value: Any  # what it asked (the invocation's value; the completion's for an acquire)
    result: Any  # the completion's value (None when it never completed)
    errors: dict  # an ok ack's errors by key
    nodes: dict | None = None  # the broker that answered each key (the op's ``nodes``, when it says)
    lost: int = 0  # ShareFetch answers the consumer lost since its previous op (``lost_fetches``)


@dataclass(slots=True)
class Delivery:
    key: str
    offset: int
    value: Any
    count: int
    op: Call


def _calls(ops: list[dict]) -> tuple[list[Call], list[dict], dict[Any, Call]]:
    """The client ops (in completion order), the nemesis ops, and each process's last op."""
    calls: list[Call] = []
    nemesis: list[dict] = []
    open_: dict[Any, dict] = {}
    for o in ops:
        p = o["process"]
        if p == NEMESIS:
            nemesis.append(o)
            continue
        if o["f"] in ("acquire", "ack"):
            check_share_op(o, f"op {o['index']}")
        if o["type"] == "invoke":
            if p in open_:
                calls.append(_call(open_[p], None))
            open_[p] = o
        else:
            calls.append(_call(open_.pop(p, None), o))
    calls.extend(_call(inv, None) for inv in open_.values())
    last: dict[Any, Call] = {}
    for c in sorted(calls, key=lambda c: c.index):
        last[c.process] = c
    return calls, nemesis, last


def _call(inv: dict | None, comp: dict | None) -> Call:
    src = comp if comp is not None else inv
    assert src is not None
    f = src["f"]
    result = comp.get("value") if comp is not None else None
    value = result if f == "acquire" else src.get("value") if inv is None else inv.get("value")
    errors = {}
    if f == "ack" and comp is not None and comp["type"] == "ok":
        errors = {str(k): error_name(e) for k, e in (result.get("errors") or {}).items()}
    if f == "ack" and isinstance(value, dict):
        value = {k: v for k, v in value.items() if k != "errors"}
    i = inv["time"] if inv is not None else src["time"]
    if f == "acquire" and comp is not None and type(comp.get("fetch_time")) is int:
        i = min(i, comp["fetch_time"])  # a client that buffers: the records were fetched earlier
    nodes = comp.get("nodes") if comp is not None and isinstance(comp.get("nodes"), dict) else None
    lost = src.get("lost_fetches", 0)
    if type(lost) is not int or lost < 0:
        raise HistoryError(f"op {src['index']}: lost_fetches must be a count (an integer >= 0), not {lost!r}")
    return Call(src["index"], src["process"], f, comp["type"] if comp is not None else "info",
                i, comp["time"] if comp is not None else INF, value, result, errors, nodes, lost)


def outcome(ack: Call, key: str) -> str:
    """What an ack did to ``key``'s acknowledgements: ``done``, ``refused`` (nothing applied)
    or ``unknown``."""
    if ack.type == "fail":
        return "refused"
    if ack.type != "ok":
        return "unknown"
    e = ack.errors.get(key)
    return "done" if e == "NONE" else "refused" if e in REFUSALS else "unknown"


def fault_windows(nemesis: list[dict], settle_ns: int = SETTLE_MS * 1_000_000) -> list[tuple[float, float]]:
    """When a broker fault was in force: every nemesis op that does not name only client
    processes (a pause of consumers names its ``processes``), at its instant, and each fault
    from its op until the completion of the op that ends it, or the run's end: ``restart``,
    ``resume`` or ``disk-heal`` of its nodes (of every node when they name none), ``heal`` of
    its nodes or of every node for a fault that is not a node down, ``clock-skew`` back to 0;
    each window goes on ``settle_ns`` longer (leadership settles after the fault)."""
    out: list[tuple[float, float]] = []
    on: dict[tuple[str, str], float] = {}  # (node or "*", the fault) -> since when it holds
    for o in nemesis:
        v = o.get("value") if isinstance(o.get("value"), dict) else {}
        if v.get("processes"):
            continue
        t, f = o["time"], o["f"]
        out.append((t, t))
        named = v.get("nodes") if v.get("nodes") is not None else v.get("node")
        nodes = [str(n) for n in (named if isinstance(named, list) else [] if named is None else [named])]
        if f in UNDOES or (f == "clock-skew" and not v.get("skew_ms")):
            if o["type"] == "invoke":
                continue  # it ends the fault when it completes
            for n, by in list(on):
                if f == "clock-skew":
                    ends = by == "clock-skew" and n in nodes
                elif f == "heal":
                    ends = by not in NODE_DOWN and (not nodes or n in nodes or n == "*")
                else:
                    ends = not nodes or n in nodes
                if ends:
                    out.append((on.pop((n, by)), t))
        elif f == "hold-back":
            out.append((t, t + (v.get("ms") or 0) * 1_000_000))
        elif f not in INSTANT:
            for n in nodes or ["*"]:
                on.setdefault((n, f), t)
    out.extend((t, INF) for t in on.values())
    return [(start, end + settle_ns) for start, end in out]


def check_share(ops: list[dict], config: dict, add, may_lose_acknowledged: bool = False) -> None:
    """Report the share-group anomalies of the module's docstring through ``add(kind, **evidence)``.
    ``may_lose_acknowledged`` (acks 0 or 1, unclean elections): acknowledged writes promise
    nothing, so ``share-lost`` and the comparison with the writes are not judged."""
    sc = share_config(config)
    calls, nemesis, last = _calls(ops)
    windows = sorted(fault_windows(nemesis, sc.settle_ns))
    starts = [w[0] for w in windows]
    reach = list(accumulate((w[1] for w in windows), max))  # the latest end of the windows so far

    def faulted(start: float, end: float) -> bool:
        """Whether a fault window overlaps [start, end]."""
        n = bisect_right(starts, end)
        return n > 0 and reach[n - 1] >= start

    deliveries: dict[tuple[str, int], list[Delivery]] = defaultdict(list)
    acks: dict[tuple[str, int], list[tuple[Call, str]]] = defaultdict(list)  # record -> (ack, type)
    leaves: dict[Any, list[Call]] = defaultdict(list)  # process -> its crashes and subscribes
    for c in calls:
        if c.f == "acquire" and c.type == "ok":
            for key, records in sorted(c.value.items()):
                for off, v, n in records:
                    deliveries[(str(key), off)].append(Delivery(str(key), off, v, n, c))
        elif c.f == "ack" and isinstance(c.value, dict):
            for key, items in c.value.items():
                for off, kind in items:
                    acks[(str(key), off)].append((c, kind))
        elif c.f in ("crash", "subscribe"):
            leaves[c.process].append(c)

    def released(p: Any, record: tuple[str, int], since: float, before: float) -> Call | None:
        """P's op that may have released ``record`` (acquired by P at ``since``) before ``before``."""
        for a, _kind in acks.get(record, ()):
            if a.process != p or a.i >= before:
                continue
            o = outcome(a, record[0])
            if o == "unknown" or (o == "done" and a.i > since):
                return a
        for c in leaves.get(p, ()):
            if since < c.i < before:
                return c
        end = last.get(p)
        if end is not None and end.type == "info" and end.i < before:
            return end
        return None

    slack = sc.slack_ns
    for record, ds in sorted(deliveries.items()):
        key, off = record
        for d in ds:
            if not 1 <= d.count <= sc.delivery_limit:
                add("share-delivery-limit", key=key, offset=off, count=d.count, ops=[d.op.index],
                    explanation=f"op {d.op.index} (process {d.op.process}) acquired offset {off} of {key} with "
                                f"delivery count {d.count}, outside 1..{sc.delivery_limit} (the delivery limit)")
        for d2 in ds:
            a2 = d2.op
            double = forgotten = regressed = count_forgotten = None
            for d1 in ds:
                a1 = d1.op
                if a1 is a2 or not a2.i > a1.c + slack:
                    continue
                fault = faulted(a1.i, a2.c)
                if a2.c < a1.i + sc.lock_ns - slack and released(a1.process, record, a1.i, a2.c) is None:
                    if not fault:
                        double = double or d1
                    else:
                        forgotten = forgotten or d1
                if d2.count <= d1.count:
                    if not fault:
                        regressed = regressed or d1
                    else:
                        count_forgotten = count_forgotten or d1
            first = double or forgotten
            if first is not None:
                a1 = first.op
                held = (a2.c - a1.i) / 1e6
                add("share-double-acquired" if double else "share-lock-forgotten", key=key, offset=off,
                    processes=[a1.process, a2.process], ops=[a1.index, a2.index],
                    explanation=f"offset {off} of {key} was acquired by process {a1.process} (op {a1.index}) and "
                                f"then by process {a2.process} (op {a2.index}, whose fetch began after op {a1.index} "
                                f"completed), at most {held:.0f} ms after the first acquisition began, within "
                                f"its {sc.lock_ns // 1_000_000} ms lock, and process {a1.process} had not "
                                f"released it (no ack of it, crash or leave)"
                                + ("" if double else "; a broker fault was in force meanwhile: a new leader "
                                                     "forgets acquisitions, which are never persisted"))
            low = regressed or count_forgotten
            if low is not None:
                a1 = low.op
                add("share-count-regressed" if regressed else "share-count-forgotten", key=key, offset=off,
                    counts=[low.count, d2.count], ops=[a1.index, a2.index],
                    explanation=f"offset {off} of {key} was delivered with count {low.count} (op {a1.index}) and "
                                f"later with count {d2.count} (op {a2.index}, whose fetch began after op {a1.index} "
                                f"completed): a delivery count only rises"
                                + ("" if regressed else "; a broker fault was in force meanwhile: a new leader "
                                                        "restarts from the persisted count"))
    # (the ops that end them kept: without them no window would ever close)
    zombie = sorted(fault_windows([o for o in nemesis if o["f"] in CUT_OFF or o["f"] in UNDOES], sc.settle_ns))
    # a stale leader: cut off (or paused) from before the accept was answered until after the
    # redelivery's fetch began (its settle time included), one window spanning both
    _redelivered_accepted(deliveries, acks, slack, add, lambda a, b: any(s <= a and b <= e for s, e in zombie),
                          sc.lock_ns)
    _acks_not_held(deliveries, acks, slack, sc.delivery_limit, faulted, add)
    if may_lose_acknowledged:
        return
    acked, sent, failed, aborted = _writes(calls)
    _values(deliveries, acked, sent, failed, add)
    if sc.read_committed:
        _aborted_delivered(deliveries, aborted, add)
    if sc.final:
        _lost(sc, calls, acked, deliveries, acks, add, reach[-1] if reach else None)


def _within_lock(a: Call, ds, lock_ns: int, slack: int) -> bool:
    """Whether ack ``a`` was sent while its process surely still held the record (within the
    lock of its last acquisition of it): a later one may be answered NONE for a record already
    done (below the start offset: archived at the limit, or accepted by another), silently,
    and promises nothing."""
    mine = [d.op for d in ds if d.op.process == a.process and d.op.c <= a.i]
    return bool(mine) and a.i < max(op.i for op in mine) + lock_ns - slack


def _redelivered_accepted(deliveries, acks, slack: int, add, cut_off, lock_ns: int) -> None:
    """An accepted record acquired again; allowed (``share-redelivered-stale-leader``) when
    ``cut_off(a, b)``: one broker was cut off or paused (alive, maybe still thinking it leads)
    from before the accept's answer (``a``) until after the second delivery's fetch began
    (``b``), settle time included: the accept went to the new leader while the old one, which
    never heard of it, went on serving; and the second delivery came from another broker than
    the one that answered the accept (or either is unknown). A window that ended before the
    accept, or began after the redelivery, explains nothing: a leader loads its state from the
    share coordinator, which has every accept answered."""
    for record, items in sorted(acks.items()):
        accepted = [a for a, kind in items if kind == "accept" and outcome(a, record[0]) == "done"
                    and _within_lock(a, deliveries.get(record, ()), lock_ns, slack)]
        if not accepted:
            continue
        a = min(accepted, key=lambda a: a.c)
        for d in deliveries.get(record, ()):
            if d.op.i > a.c + slack:
                key, off = record
                took, gave = _node(a, key), _node(d.op, key)
                stale = cut_off(a.c, d.op.i) and (took is None or gave is None or took != gave)
                add("share-redelivered-stale-leader" if stale else "share-redelivered-accepted", key=key,
                    offset=off, ops=[a.index, d.op.index],
                    explanation=f"process {a.process} accepted offset {off} of {key} (op {a.index}, error NONE), "
                                f"yet process {d.op.process} acquired it again in op {d.op.index}, whose fetch began after "
                                f"that answer (delivery count {d.count}): an accepted record is never delivered "
                                f"again" + ("; a broker was cut off or paused meanwhile, and the record came from "
                                            "another broker than the one that took the accept: a leader that has "
                                            "not learnt it was replaced serves the state it had" if stale else ""))


def _acks_not_held(deliveries, acks, slack: int, limit: int, faulted, add) -> None:
    """``share-ack-not-held``: P's acknowledgement of a record was applied (NONE) although
    another consumer had acquired the record after P did, surely before P's ack was sent, and
    nothing had ended the record (no accept or reject of it that may have been applied before,
    a delivery count below the limit): only the holder may acknowledge a record. Across a
    broker fault judged only when the ops say one broker gave the record to the other
    consumer and answered the ack (a new leader does not know who held what, and a former one
    fails the ack's write)."""
    for record, items in sorted(acks.items()):
        key, off = record
        ds = sorted(deliveries.get(record, ()), key=lambda d: d.op.c)
        for a, _kind in items:
            if outcome(a, key) != "done":
                continue
            mine = [d for d in ds if d.op.process == a.process and d.op.c <= a.i]
            if not mine:
                continue
            since = mine[-1].op
            other = next((d for d in ds if d.op.process != a.process and d.op.i > since.c + slack
                          and d.op.c < a.i - slack), None)
            if other is None or max(d.count for d in ds if d.op.c < a.c) >= limit:
                continue
            node = _node(a, key)
            same = node is not None and node == _node(other.op, key)
            if not same and faulted(since.i, a.c):
                continue  # unless one broker took both: a new leader does not know who held what
            ended = any(b is not a and kind in ("accept", "reject") and outcome(b, key) != "refused" and b.i < a.c
                        for b, kind in items)
            if ended:
                continue
            add("share-ack-not-held", key=key, offset=off, ops=[since.index, other.op.index, a.index],
                explanation=f"process {a.process} acquired offset {off} of {key} (op {since.index}), process "
                            f"{other.op.process} acquired it after that (op {other.op.index}), and then process "
                            f"{a.process}'s acknowledgement of it was applied (op {a.index}, error NONE): only the "
                            f"consumer that holds a record may acknowledge it (Kafka: INVALID_RECORD_STATE)")


def _node(c: Call, key: str) -> int | None:
    """The broker that answered ``c`` for ``key``, when the op says (the simulator's do)."""
    n = (c.nodes or {}).get(key)
    return n if isinstance(n, int) else None


def _writes(calls: list[Call]):
    """The acknowledged writes ``[(key, offset or None, value, op)]`` (of sends, and of
    transactions that committed), every sent value ``{(key, value): op}``, the failed sends'
    and the aborted transactions' ``{(key, value): op}``: a failed send wrote nothing, an
    aborted transaction's records are in the log, never to be read committed."""
    acked: list[tuple[str, int | None, Any, Call]] = []
    sent: dict[tuple[str, Any], Call] = {}
    failed: dict[tuple[str, Any], Call] = {}
    aborted: dict[tuple[str, Any], Call] = {}
    for c in calls:
        if c.f not in ("send", "txn"):
            continue
        for mop in c.value if isinstance(c.value, list) else ():
            if isinstance(mop, list) and len(mop) >= 3 and mop[0] == "send":
                k, v = str(mop[1]), hashable(mop[2])
                sent[(k, v)] = c
                if c.type == "fail":
                    (failed if c.f == "send" else aborted)[(k, v)] = c
        if c.type != "ok":
            continue
        done = [m for m in (c.result if isinstance(c.result, list) else ())
                if isinstance(m, list) and len(m) >= 3 and m[0] == "send"]
        if not done:  # a completion that dropped its value: the invocation's, offsets unknown
            done = [m for m in (c.value if isinstance(c.value, list) else ())
                    if isinstance(m, list) and len(m) >= 3 and m[0] == "send"]
        for m in done:
            ov = m[2]
            if isinstance(ov, list) and len(ov) == 2:
                off = ov[0] if type(ov[0]) is int else None
                acked.append((str(m[1]), off, hashable(ov[1]), c))
            else:
                acked.append((str(m[1]), None, hashable(ov), c))
    return acked, sent, failed, aborted


def _values(deliveries, acked, sent, failed, add) -> None:
    at: dict[tuple[str, int], tuple[Any, Call]] = {}  # (key, offset) -> the value acknowledged there
    where: dict[tuple[str, Any], tuple[int, Call]] = {}  # (key, value) -> its acknowledged offset
    for k, off, v, c in acked:
        if off is not None:
            at.setdefault((k, off), (v, c))
            where.setdefault((k, v), (off, c))
    keys_sent = {k for k, _v in sent}
    for record, ds in sorted(deliveries.items()):
        key, off = record
        for d in ds:
            v = hashable(d.value)
            w = at.get(record)
            ops = [d.op.index]
            if w is not None and w[0] != v:
                why = f"value {w[0]!r} was acknowledged at that offset (op {w[1].index})"
                ops = [w[1].index, d.op.index]
            elif w is None and where.get((key, v), (off,))[0] != off:
                why = f"that value was acknowledged at offset {where[(key, v)][0]} (op {where[(key, v)][1].index})"
                ops = [where[(key, v)][1].index, d.op.index]
            elif (key, v) in failed:
                why = f"the send of that value failed (op {failed[(key, v)].index})"
                ops = [failed[(key, v)].index, d.op.index]
            elif key in keys_sent and v is not None and (key, v) not in sent:
                why = f"nobody sent that value to {key}"
            elif hashable(ds[0].value) != v:
                why = f"op {ds[0].op.index} acquired value {ds[0].value!r} at that offset"
                ops = [ds[0].op.index, d.op.index]
            else:
                continue
            add("share-value-mismatch", key=key, offset=off, value=d.value, ops=ops,
                explanation=f"op {d.op.index} (process {d.op.process}) acquired value {d.value!r} at offset {off} "
                            f"of {key}, but {why}")


def _aborted_delivered(deliveries, aborted, add) -> None:
    for (key, off), ds in sorted(deliveries.items()):
        for d in ds:
            t = aborted.get((key, hashable(d.value)))
            if t is not None:
                add("share-aborted-delivered", key=key, offset=off, value=d.value, ops=[t.index, d.op.index],
                    explanation=f"op {d.op.index} (process {d.op.process}) acquired value {d.value!r} at offset "
                                f"{off} of {key}, written by transaction op {t.index}, which aborted: a share group "
                                f"that reads read_committed never delivers a record of an aborted transaction")
                break


def _lost(sc: ShareConfig, calls, acked, deliveries, acks, add, last_fault: float | None) -> None:
    """share-lost; with ``unseen_in_faults``, share-lost-unseen for a record written before the
    last fault window ended (``last_fault``): a real client's fetch answers lost to a fault are
    retried inside the client, unseen, each possibly a delivery."""
    by_value: dict[tuple[str, Any], int] = {}  # (key, value) -> an offset it was delivered at
    for (key, off), ds in deliveries.items():
        for d in ds:
            by_value.setdefault((key, hashable(d.value)), off)
    # acquisitions of unknown outcome, and ShareFetch answers lost (each op's ``lost_fetches``:
    # known lost by the op's end; those a consumer left behind, going, may land at any time)
    unknown = sorted([c.c for c in calls if c.f == "acquire" and c.type == "info"]
                     + [c.c if c.f == "acquire" else INF for c in calls for _ in range(c.lost)])
    keys = set(sc.keys)
    for key, off, v, w in acked:
        if keys and key not in keys:
            continue
        if off is None:
            off = by_value.get((key, v))
        record = (key, off)
        if any(kind in ("accept", "reject") and outcome(a, key) != "refused" for a, kind in acks.get(record, ())):
            continue
        ds = deliveries.get(record, []) if off is not None else []
        top = max((d.count for d in ds), default=0)
        # acquisitions whose answer was lost may have delivered it unseen, each once
        unseen = len(unknown) - _count_below(unknown, w.i)
        if top + unseen >= sc.delivery_limit:
            continue
        ops = [w.index] + ([max(ds, key=lambda d: d.op.c).op.index] if ds else [])
        seen = f"delivered {len(ds)} time(s), last with count {top}" if ds else "never delivered"
        maybe = sc.unseen_in_faults and last_fault is not None and w.i < last_fault
        add("share-lost-unseen" if maybe else "share-lost", key=key, offset=off, value=v, ops=ops,
            explanation=f"value {v!r} was acknowledged at offset {off} of {key} (op {w.index}) and {seen}, below "
                        f"the delivery limit {sc.delivery_limit}, but never accepted or rejected although the "
                        f"run's final phase went on until nothing new came: it should have been delivered and "
                        f"accepted" + ("; a fault came after its write, and the clients' fetches whose answers it "
                                       "lost (retried inside the client) may each have delivered it unseen"
                                       if maybe else ""))


def _count_below(sorted_times: list[float], t: float) -> int:
    return bisect_right(sorted_times, t)
