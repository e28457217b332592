"""The report's picture of a share run (KIP-932 share groups): who held which record when.

One SVG per partition of a run whose ``config.share`` is set: x the run's time (the timeline's
scale, axis and fault bands), a row per offset. Each delivery is a bar coloured by its holder
(process), from its lock's start as properties/share_checks.py takes it (the acquire's invoke,
or its earlier ``fetch_time``) to the first ack of the record by its holder invoked before the
lock expired (its mark says accept, release or reject, and whether it was applied: error
``NONE`` or none), else a crash or leave (``subscribe``) of the holder, else the lock's expiry.
An ack that ended no delivery of its sender is a diamond. The ops a ``share-*`` anomaly names
are outlined. At most :data:`MAX_OFFSETS` offsets a partition are drawn, the anomalies' first.
docs/explanation/share-groups.md says how to read it. Only the standard library, like
kafkacheck/report.py, which calls :func:`share_section` and draws its axis and fault bands.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable
from pathlib import Path

MAX_OFFSETS = 150  # offsets drawn per partition
NEIGHBOURS = 2  # offsets drawn either side of one an anomaly names
BLOCK = 10  # consecutive offsets drawn together when filling up
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf", "#393b79", "#637939", "#8c6d31", "#6b6ecf", "#e7969c", "#7b4173", "#3182bd")
_MARK_FILL = {"accept": "#1b5e20", "release": "#0d47a1", "reject": "#4a148c"}
_STYLE = ("<style>.share .expiry{fill-opacity:.45}.share .allowed{stroke:#ff6f00;stroke-width:1.5;"
          "stroke-dasharray:3 2}.share .tail{stroke-width:1;stroke-dasharray:2 2}.share .gap{stroke:#bbb;"
          "stroke-dasharray:4 3}</style>")


def _esc(x) -> str:
    return html.escape(str(x), quote=True)


class _Delivery:
    __slots__ = ("applied", "by", "count", "end", "error", "how", "key", "offset", "op", "process", "start")

    def __init__(self, key: str, offset: int, count, process, op: int, start: int) -> None:
        self.key, self.offset, self.count, self.process, self.op, self.start = key, offset, count, process, op, start
        self.end, self.how, self.by, self.applied, self.error = start, "expiry", None, "", None  # set by _end


class _Ack:
    __slots__ = ("applied", "end", "error", "i", "index", "kind", "process", "used")

    def __init__(self, process, index: int, i: int, end: int, kind: str, outcome: tuple[str, object]) -> None:
        self.process, self.index, self.i, self.end, self.kind = process, index, i, end, kind
        (self.applied, self.error), self.used = outcome, False


# ---------------------------------------------------------------- reading the history

def _pairs(path: Path):
    """(invoke, completion or None) of each client acquire, ack, crash and subscribe."""
    pending: dict = {}
    with open(path) as fh:
        for line in fh:
            try:
                o = json.loads(line)
                p, f = o["process"], o["f"]
            except (ValueError, KeyError, TypeError):
                continue
            if p == "nemesis" or f not in ("acquire", "ack", "crash", "subscribe"):
                continue
            if o.get("type") == "invoke":
                if p in pending:
                    yield pending.pop(p), None
                pending[p] = o
            else:
                yield pending.pop(p, None) or o, o
    yield from ((inv, None) for inv in pending.values())


def _outcome(comp: dict | None, key: str) -> tuple[str, object]:
    """Whether an ack was applied for ``key``: ("yes", None), ("no", the error) or ("unknown", None)."""
    if comp is None or comp.get("type") not in ("ok", "fail"):
        return "unknown", None
    if comp["type"] == "fail":
        return "no", comp.get("error") or "fail"
    e = ((comp.get("value") or {}).get("errors") or {}).get(key) if isinstance(comp.get("value"), dict) else None
    return ("yes", None) if e in (None, "NONE") else ("no", e)


def _read(path: Path):
    """The deliveries, the acks by record ``{(key, offset): [_Ack]}`` and each process's crashes
    and leaves ``{process: [(time, "crash" or "leave", op)]}``."""
    deliveries: list[_Delivery] = []
    acks: dict[tuple[str, int], list[_Ack]] = {}
    leaves: dict = {}
    for inv, comp in _pairs(path):
        f, p, t, index = inv["f"], inv["process"], int(inv["time"]), int((comp or inv)["index"])
        if f == "acquire" and comp is not None and comp.get("type") == "ok" and isinstance(comp.get("value"), dict):
            start = min(t, comp["fetch_time"]) if type(comp.get("fetch_time")) is int else t
            for key, records in comp["value"].items():
                deliveries.extend(_Delivery(str(key), int(r[0]), r[2], p, index, start) for r in records)
        elif f == "ack" and isinstance(inv.get("value"), dict):
            end = int(comp["time"]) if comp is not None else t
            for key, items in inv["value"].items():
                for off, kind in items if key != "errors" else ():
                    ack = _Ack(p, index, t, end, str(kind), _outcome(comp, key))
                    acks.setdefault((str(key), int(off)), []).append(ack)
        elif f in ("crash", "subscribe"):
            leaves.setdefault(p, []).append((t, "crash" if f == "crash" else "leave", index))
    return deliveries, acks, leaves


def _end(d: _Delivery, mine: list[_Ack], leaves: list, lock_ns: int, until: int) -> None:
    """How ``d`` ended: its holder's first unused ack invoked after its start and before
    ``until`` (the lock's expiry, or the holder's next delivery of the record), else a crash or
    leave, else the expiry. An ack ends the bar at its completion or at the expiry, if sooner."""
    expiry = d.start + lock_ns
    ack = next((a for a in mine if not a.used and d.start < a.i < until), None)
    leave = next(((t, how, op) for t, how, op in leaves if d.start < t < until), None)
    if ack is not None and (leave is None or ack.i <= leave[0]):
        ack.used = True
        d.end, d.how, d.by = min(max(ack.end, d.start), expiry), ack.kind, ack.index
        d.applied, d.error = ack.applied, ack.error
    elif leave is not None:
        d.end, d.how, d.by = leave
    else:
        d.end = expiry


def _deliveries(path: Path, lock_ns: int):
    """The deliveries by key, ended; and by key the acks that ended none, with their offsets."""
    deliveries, acks, leaves = _read(path)
    by_holder: dict[tuple, list[_Delivery]] = {}
    for d in deliveries:
        by_holder.setdefault((d.key, d.offset, d.process), []).append(d)
    for (key, off, p), ds in by_holder.items():
        ds.sort(key=lambda d: d.start)
        mine = sorted((a for a in acks.get((key, off), ()) if a.process == p), key=lambda a: a.i)
        for n, d in enumerate(ds):
            until = d.start + lock_ns if n + 1 == len(ds) else min(d.start + lock_ns, ds[n + 1].start)
            _end(d, mine, leaves.get(p, []), lock_ns, until)
    by_key: dict[str, list[_Delivery]] = {}
    for d in deliveries:
        by_key.setdefault(d.key, []).append(d)
    stray: dict[str, list[tuple[int, _Ack]]] = {}
    for (key, off), items in acks.items():
        stray.setdefault(key, []).extend((off, a) for a in items if not a.used)
    return by_key, stray


# ---------------------------------------------------------------- what to draw

def _anomalies(results: dict) -> tuple[dict, list]:
    """``{record or None: {op: (kind, violation)}}`` of the ops the share anomalies name (None:
    the anomaly names no record), and the records they name, violations first."""
    named: dict = {}
    records: list = []
    for group, violation in (("anomalies", True), ("allowed_anomalies", False)):
        for kind, items in sorted((results.get(group) or {}).items()):
            for a in items if str(kind).startswith("share-") else ():
                record = (str(a["key"]), a["offset"]) if type(a.get("offset")) is int and "key" in a else None
                for op in a.get("ops") or []:
                    named.setdefault(record, {}).setdefault(op, (kind, violation))
                if record is not None and record not in records:
                    records.append(record)
    return named, records


def _choose(offsets: list[int], hot: list[int], limit: int) -> list[int]:
    """At most ``limit`` of ``offsets`` (sorted): ``hot`` and their neighbours first, then
    blocks of :data:`BLOCK` spread evenly over the rest."""
    present = set(offsets)
    near = (o for off in hot for o in range(off - NEIGHBOURS, off + NEIGHBOURS + 1) if o in present)
    chosen = list(dict.fromkeys(near))[:limit]
    taken = set(chosen)
    rest = [o for o in offsets if o not in taken]
    room = limit - len(chosen)
    if len(rest) > room:
        blocks = [rest[i:i + BLOCK] for i in range(0, len(rest), BLOCK)]
        n = max(math.ceil(room / BLOCK), 1)
        rest = [o for j in range(n) for o in blocks[int(j * len(blocks) / n)]][:room]
    return sorted(set(chosen) | set(rest))


def _slots(ds: list[_Delivery]) -> tuple[dict[int, int], int]:
    """A slot for each of a row's deliveries, overlapping ones (a double acquisition) in
    different slots, drawn one above the other; and how many slots."""
    ends: list[int] = []
    slot: dict[int, int] = {}
    for d in sorted(ds, key=lambda d: d.start):
        free = next((i for i, e in enumerate(ends) if e <= d.start), len(ends))
        ends[free:free + 1] = [d.end]
        slot[id(d)] = free
    return slot, max(len(ends), 1)


# ---------------------------------------------------------------- drawing

def _said(applied: str, error) -> str:
    return {"yes": "applied", "unknown": "outcome unknown"}.get(applied, f"not applied: {error}")


def _how(d: _Delivery, lock_ns: int) -> str:
    if d.how == "expiry":
        return f"lock expired ({lock_ns // 1_000_000} ms after the start)"
    if d.how in ("crash", "leave"):
        return f"{'its consumer crashed' if d.how == 'crash' else 'its consumer left (subscribe)'} (op {d.by})"
    return f"{d.how} by op {d.by}, {_said(d.applied, d.error)}"


def _flag(named: dict, record: tuple, ops) -> tuple[str, str]:
    """What the title and the class say of the anomaly that names one of ``ops`` ("", "": none)."""
    for where in (named.get(record) or {}, named.get(None) or {}):
        for op in ops:
            if op in where:
                kind, violation = where[op]
                return f"; named by {kind}", " anom" if violation else " allowed"
    return "", ""


def _mark(kind: str, applied: str, x1: float, cy: float, s: float) -> str:
    """The mark of how a delivery ended, at its bar's end: an ack's filled when it was applied,
    hollow when not, amber when unknown; a crash's a cross, a leave's a black square."""
    dark = _MARK_FILL.get(kind, "#000")
    paint = f'class="end" fill="{ {"no": "#fff", "unknown": "#ffb300"}.get(applied, dark)}" stroke="{dark}"'
    x, y, w = f"{x1 - s:.1f}", f"{cy - s:.1f}", f"{2 * s:.1f}"
    return {"accept": f'<circle {paint} cx="{x1:.1f}" cy="{cy:.1f}" r="{s:.1f}"/>',
            "release": f'<path {paint} d="M{x},{cy:.1f} l{w},{-s:.1f} v{w} z"/>',
            "reject": f'<rect {paint} x="{x1 - s / 2:.1f}" y="{y}" width="{s:.1f}" height="{w}"/>',
            "crash": f'<path class="end" d="M{x},{y} l{w},{w} m0,-{w} l-{w},{w}" stroke="#000" stroke-width="1.5"/>',
            "leave": f'<rect class="end" x="{x}" y="{y}" width="{w}" height="{w}" fill="#000"/>'}.get(kind, "")


def _bar(d: _Delivery, x: Callable, y: float, h: float, colour: str, flag, lock_ns: int, t1: int) -> str:
    a, b = x(d.start), x(min(d.end, t1))
    title = (f"process {d.process}, offset {d.offset} of {d.key}, delivery count {d.count} (acquire op {d.op}): "
             f"held from {d.start / 1e9:.3f} s to {d.end / 1e9:.3f} s; end: {_how(d, lock_ns)}{flag[0]}")
    out = [f'<rect class="dl {d.how}{flag[1]}" data-process="{_esc(d.process)}" data-op="{d.op}" '
           f'data-offset="{d.offset}" data-end="{d.how}" data-applied="{d.applied}" x="{a:.1f}" y="{y:.1f}" '
           f'width="{max(b - a, 1.0):.1f}" height="{h:.1f}" fill="{colour}"><title>{_esc(title)}</title></rect>']
    if d.applied in ("no", "unknown") and d.end < d.start + lock_ns:  # the lock may have gone on
        out.append(f'<line class="tail" x1="{b:.1f}" x2="{x(min(d.start + lock_ns, t1)):.1f}" y1="{y + h / 2:.1f}" '
                   f'y2="{y + h / 2:.1f}" stroke="{colour}"/>')
    if d.end <= t1:
        out.append(_mark(d.how, d.applied, b, y + h / 2, max(min(h, 8.0), 3.0) / 2))
    return "".join(out)


def _stray(off: int, a: _Ack, key: str, x: Callable, y: float, h: float, colour: str, flag) -> str:
    """An ack that ended no delivery: a diamond at its completion, filled by its type, edged by
    its sender's colour."""
    title = (f"process {a.process}: {a.kind} of offset {off} of {key} (ack op {a.index}) sent at {a.i / 1e9:.3f} s, "
             f"answered at {a.end / 1e9:.3f} s, which ended no delivery of its own (not holding the record, or its "
             f"lock had expired); {_said(a.applied, a.error)}{flag[0]}")
    s, cx, cy = max(min(h, 8.0), 3.0) / 2 + 1, x(a.end), y + h / 2
    return (f'<path class="ack{flag[1]}" data-process="{_esc(a.process)}" data-op="{a.index}" data-offset="{off}" '
            f'data-end="{a.kind}" data-applied="{a.applied}" d="M{cx:.1f},{cy - s:.1f} l{s:.1f},{s:.1f} '
            f'l{-s:.1f},{s:.1f} l{-s:.1f},{-s:.1f} z" fill="{_MARK_FILL.get(a.kind, "#000")}" stroke="{colour}" '
            f'stroke-width="1.5"><title>{_esc(title)}</title></path>')


class _Frame:
    """What every partition's picture shares: the time scale and what draws its axis and faults
    (the report's ``backdrop``), the colours, the anomalies."""

    def __init__(self, backdrop: Callable, t1: int, lock_ns: int, colours: dict, named: dict, width: int) -> None:
        self.backdrop, self.t1, self.lock_ns, self.colours, self.named, self.width = \
            backdrop, t1, lock_ns, colours, named, width


def _rows(rows: list[int], top: float, h: float, width: int) -> str:
    """The offsets' labels (as many as fit), and a dashed line where offsets were left out."""
    out, labels, every = [], [], math.ceil(11 / h)
    for i, off in enumerate(rows):
        gap = i > 0 and off != rows[i - 1] + 1
        if gap:
            out.append(f'<line class="gap" x1="2" x2="{width - 10}" y1="{top + i * h:.1f}" y2="{top + i * h:.1f}">'
                       f'<title>offsets {rows[i - 1] + 1} to {off - 1} not drawn</title></line>')
        if gap or not labels or i - labels[-1] >= every:
            if labels and i - labels[-1] < every:  # a block's first offset is labelled rather than the one above
                labels.pop()
            labels.append(i)
    out += [f'<text class="tick" x="66" y="{top + i * h + h / 2 + 3:.1f}" text-anchor="end">{rows[i]}</text>'
            for i in labels]
    return "".join(out)


def _svg(key: str, ds: list[_Delivery], stray: list, rows: list[int], fr: _Frame) -> str:
    row = {off: i for i, off in enumerate(rows)}
    h, top = max(5.0, min(14.0, 640 / max(len(rows), 1))), 10.0
    y_axis = top + h * len(rows) + 4
    x, backdrop = fr.backdrop(fr.width, top, y_axis)
    out = [f'<svg class="share" data-key="{_esc(key)}" xmlns="http://www.w3.org/2000/svg" width="{fr.width}" '
           f'height="{y_axis + 20:.0f}" viewBox="0 0 {fr.width} {y_axis + 20:.0f}">', _STYLE, backdrop,
           _rows(rows, top, h, fr.width)]
    hot: list[str] = []
    by_row: dict[int, list[_Delivery]] = {}
    for d in ds:
        if d.offset in row:
            by_row.setdefault(d.offset, []).append(d)
    for off, row_ds in by_row.items():
        slot, n = _slots(row_ds)
        bar_h = max((h - 1) / n, 1.0)
        for d in sorted(row_ds, key=lambda d: d.start):
            flag = _flag(fr.named, (key, off), (d.op, d.by))
            y = top + row[off] * h + 0.5 + slot[id(d)] * bar_h
            (hot if flag[1] else out).append(_bar(d, x, y, bar_h, fr.colours[d.process], flag, fr.lock_ns, fr.t1))
    for off, a in stray:
        if off in row:
            flag = _flag(fr.named, (key, off), (a.index,))
            y = top + row[off] * h
            (hot if flag[1] else out).append(_stray(off, a, key, x, y, h, fr.colours.get(a.process, "#000"), flag))
    return "".join(out + hot) + "</svg>"  # the anomalies' last: on top


def _caption(key: str, rows: list[int], offsets: list[int], hot: list[int], ds: list[_Delivery]) -> str:
    drawn = sum(1 for d in ds if d.offset in set(rows))
    if len(rows) == len(offsets):
        return f"Partition {key}: every offset delivered or acknowledged ({len(rows)}), {drawn} deliveries."
    first = f"the {len(set(hot))} a share anomaly, allowed or not, names and {NEIGHBOURS} either side of each, then " \
        if hot else ""
    return (f"Partition {key}: {len(rows)} of {len(offsets)} offsets drawn ({first}blocks of {BLOCK} spread over "
            f"the log), {drawn} of {len(ds)} deliveries; {len(offsets) - len(rows)} offsets left out.")


def _legend(colours: dict) -> str:
    procs = "".join(f"<span><i style='background:{c}'></i>process {_esc(p)}</span>" for p, c in colours.items())
    return (f"<p class='legend'>{procs}</p><p class='legend'><span>&#9679; accept</span><span>&#9664; release</span>"
            "<span>&#9646; reject</span><span>&#10005; crash</span><span>&#9632; leave (subscribe)</span>"
            "<span><i style='background:#1f77b4;opacity:.45'></i>lock expired</span>"
            "<span>hollow: ack not applied, amber: outcome unknown (dotted: the lock may have gone on)</span>"
            "<span>&#9670; an ack that ended no delivery of its sender</span>"
            "<span><i style='border:2px solid #d50000'></i>named by a share anomaly</span>"
            "<span><i style='border:2px dashed #ff6f00'></i>by an allowed one</span></p>")


_HEADING = "<h2 id='share-heading'>Share deliveries</h2>"


def share_section(run_dir: Path, meta: dict, results: dict, t0: int, t1: int, backdrop: Callable) -> str:
    """The page's section on a share run (``config.share``): a picture per partition of the
    run's time ``t0`` to ``t1`` (ns); "" for any other run. ``backdrop(width, top, bottom)``:
    the time scale (``x(t)``) of a picture that wide and the SVG of its axis and fault bands.
    A history it cannot read costs the section, not the page: it says why instead."""
    share = (meta.get("config") or {}).get("share")
    history = Path(run_dir) / "history.jsonl"
    if not isinstance(share, dict) or not history.is_file():
        return ""
    try:
        return _section(history, share, results, t0, t1, backdrop)
    except Exception as e:  # a malformed op: the rest of the page stands
        return f"{_HEADING}<p class='note'>Not drawn: {_esc(type(e).__name__)}: {_esc(str(e)[:200])}</p>"


def _section(history: Path, share: dict, results: dict, t0: int, t1: int, backdrop: Callable) -> str:
    lock_ns = int(share.get("lock_ms") or 30_000) * 1_000_000
    by_key, stray = _deliveries(history, lock_ns)
    named, records = _anomalies(results)
    procs = sorted({d.process for ds in by_key.values() for d in ds},
                   key=lambda p: (0, p, "") if isinstance(p, int) else (1, 0, str(p)))
    width = int(min(max((t1 - t0) / 1e9 * 24, 1120), 8000))
    fr = _Frame(backdrop, t1, lock_ns, {p: _PALETTE[i % len(_PALETTE)] for i, p in enumerate(procs)}, named, width)
    keys = [str(k) for k in share.get("keys") or []]
    parts = []
    for key in keys + sorted(k for k in set(by_key) | set(stray) if k not in keys):
        ds, acks = by_key.get(key, []), stray.get(key, [])
        hot = [off for k, off in records if k == key]
        offsets = sorted({d.offset for d in ds} | {off for off, _ in acks} | set(hot))
        if offsets:
            rows = _choose(offsets, hot, MAX_OFFSETS)
            parts.append(f"<h3>Partition {_esc(key)}</h3><p class='note'>{_esc(_caption(key, rows, offsets, hot, ds))}"
                         f"</p><div class='scroll'>{_svg(key, ds, acks, rows, fr)}</div>")
    return (f"{_HEADING}<p class='note'>Who held which record when: a picture per partition, a row per offset, each "
            "delivery a bar coloured by the consumer that held it, from its lock's start to the ack that ended it (its "
            "mark says which), its consumer's crash or leave, or the lock's expiry (pale). Fault windows are the "
            "shaded bands. Hover for details.</p>" + _legend(fr.colours) + "".join(parts))
