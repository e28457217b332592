"""``report.html`` and ``report.json`` of a run directory: one self-contained page per run.

:func:`write_report` reads what a run directory holds (run.json, history.jsonl, events.jsonl
when there is one, results.json when the run was judged) and writes beside them:

- ``report.json``: what shaped the target (its name, version, features, broker configs and
  bug switches), the run's options and the command that reproduces it, the verdict's summary,
  and what the page drew (docs/reference/trace-format.md lists the fields);
- ``report.html``: the verdict, every anomaly and allowed anomaly with its explanation and
  links to its operations; a timeline of the operations (one lane per process, a process's lane
  reused once it has ended) with the fault windows as bands and the node events as marks; latency
  per operation type and throughput over time with the fault windows shaded; the target and the
  options. Inline CSS, SVG drawn here and a few lines of script: nothing is fetched when the
  page is opened.

Large runs are sampled: past :data:`MAX_TIMELINE_OPS` client operations the timeline draws
every k-th one and the latency plot :data:`MAX_POINTS` points, both always keeping the
operations the page links to (its examples' ops); the throughput and the latency quantile lines count every
operation. The page says what it sampled.

Only the standard library is imported: ``kafkacheck check`` writes the report and has to start
fast.
"""

from __future__ import annotations

import contextlib
import html
import json
import math
import sys
from pathlib import Path

MAX_TIMELINE_OPS = 20_000  # client ops drawn on the timeline before sampling
SAMPLED_TIMELINE_OPS = 12_000  # what a sampled timeline draws (besides the anomaly ops)
MAX_POINTS = 6_000  # latency points drawn (besides the anomaly ops)
MAX_MARKS = 3_000  # node-event marks drawn
MAX_EXAMPLES = 10  # examples shown of each anomaly type
MAX_OP_LINKS = 12  # op links shown per example

# node events not drawn: too many and too fine for a timeline (the run directory keeps them)
_QUIET_EVENTS = frozenset({"hw-advance", "log-append", "fsync", "txn-marker", "registered", "broker-registered",
                           "partition-change", "compaction"})
# the node events drawn, by colour (others are grey)
_EVENT_COLOURS = {"leader-elected": "#2e7d32", "isr-shrink": "#c62828", "isr-expand": "#1565c0",
                  "crash": "#000", "recover": "#6d4c41", "truncate": "#ef6c00", "broker-fenced": "#6a1b9a",
                  "broker-unfenced": "#8e24aa", "invariant-violation": "#d50000",
                  "liveness-violation": "#d50000", "group-generation": "#00838f"}
# a fault that ends another: the ops it ends (None: any still open but a node's own state)
_ENDS: dict[str, frozenset[str] | None] = {
    "resume": frozenset({"pause", "offline-partition"}),
    "restart": frozenset({"kill", "sigkill", "disk-fault", "lose-unflushed", "crash", "offline-partition"}),
    "start": frozenset({"kill", "sigkill", "stop"}),
    "disk-heal": frozenset({"disk-fault"}),
    "release": frozenset({"straggle"}),
    "heal": None,
}
_NODE_STATE = frozenset({"pause", "kill", "sigkill", "disk-fault", "lose-unflushed", "clock-skew", "crash", "stop",
                         "offline-partition"})
_INSTANT = frozenset({"client-drop", "elect"})  # done at once: windows of no length
_LEVELS = ("skew_ms", "ms", "p")  # a fault set to 0 on every level it has (delay ms 0, loss p 0) ends it
_TYPE_COLOURS = {"send": "#1e88e5", "poll": "#00897b", "txn": "#8e24aa", "commit": "#f4511e", "committed": "#6d4c41",
                 "assign": "#9e9e9e", "subscribe": "#9e9e9e", "crash": "#000000"}
_FAULT_COLOURS = {"partition": "#ffcc80", "kill": "#ef9a9a", "sigkill": "#ef9a9a", "pause": "#b39ddb",
                  "disk-fault": "#bcaaa4", "clock-skew": "#80deea", "lose-unflushed": "#ef9a9a",
                  "offline-partition": "#f48fb1"}
_OTHER_COLOUR = "#757575"


# ---------------------------------------------------------------- reading the run directory

_DECODER = json.JSONDecoder()


def _loads(line: str):
    """``json.loads`` of a history line, without its Python wrapper's cost (a third of reading
    a million-op history); a line that does not start with its value goes to ``json.loads``."""
    try:
        return _DECODER.scan_once(line, 0)[0]
    except StopIteration:
        return json.loads(line)


def _read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _summary(value, limit: int = 90) -> str:
    text = json.dumps(value, separators=(",", ":"), default=str)
    return text if len(text) <= limit else text[:limit - 1] + "\u2026"


class _Op:
    __slots__ = ("comp", "error", "f", "inv", "line", "process", "t0", "t1", "type", "value")

    def __init__(self, inv: int, process, f: str, t0: int, line: int) -> None:
        self.inv, self.process, self.f, self.t0 = inv, process, f, t0
        self.comp: int | None = None
        self.t1: int | None = None
        self.type = "invoke"
        self.error: str | None = None
        self.line = line  # history.jsonl's line whose value the op shows: its completion's, else its invoke's
        self.value = ""  # that value, short: read by _read_values for the ops drawn only

    @property
    def index(self) -> int:
        return self.comp if self.comp is not None else self.inv


def _read_history(path: Path) -> tuple[list[_Op], list[dict]]:
    """Client ops paired invoke-completion (in invoke order) and the nemesis's ops, as recorded;
    the client ops' values are left to :func:`_read_values` (summarising a million values
    took most of a large run's report)."""
    ops: list[_Op] = []
    nemesis: list[dict] = []
    pending: dict = {}
    names: dict[str, str] = {}  # one string per op name and type, not one per op
    if not path.is_file():
        return ops, nemesis
    with open(path) as fh:
        for n, line in enumerate(fh):
            if not line.strip():
                continue
            try:
                o = _loads(line)
                index, process, kind, t = int(o["index"]), o["process"], o["type"], int(o["time"])
            except (ValueError, KeyError, TypeError):
                continue
            if process == "nemesis":
                nemesis.append({"index": index, "time": t, "type": kind, "f": str(o.get("f")), "value": o.get("value")})
                continue
            f = str(o.get("f"))
            f = names.setdefault(f, f)
            if kind == "invoke":
                op = _Op(index, process, f, t, n)
                pending[process] = op
                ops.append(op)
                continue
            op = pending.pop(process, None)
            if op is None:  # a completion without its invoke
                op = _Op(index, process, f, t, n)
                ops.append(op)
            kind = str(kind)
            op.comp, op.t1, op.type, op.line = index, t, names.setdefault(kind, kind), n
            if o.get("error") is not None:
                op.error = str(o.get("error"))
    return ops, nemesis


def _read_values(path: Path, ops: list[_Op]) -> None:
    """The values of ``ops`` (the ones drawn), kept short: a second pass over the history that
    parses only their lines."""
    wanted = {op.line: op for op in ops}
    if not wanted:
        return
    last = max(wanted)
    with open(path) as fh:
        for n, line in enumerate(fh):
            op = wanted.get(n)
            if op is not None:
                op.value = _summary(_loads(line).get("value"), 90 if op.comp is not None else 60)
            elif n > last:
                break


def _read_events(path: Path) -> tuple[list[tuple[int, dict]], dict[str, int]]:
    """The node events worth drawing, with their line number in events.jsonl; counts of all."""
    events: list[tuple[int, dict]] = []
    counts: dict[str, int] = {}
    if not path.is_file():
        return events, counts
    with open(path) as fh:
        for n, line in enumerate(fh):
            try:
                e = json.loads(line)
                kind = str(e["kind"])
                int(e["time"])
            except (ValueError, KeyError, TypeError):
                continue
            counts[kind] = counts.get(kind, 0) + 1
            if kind not in _QUIET_EVENTS:
                events.append((n, e))
    return events, counts


def _nodes_of(value) -> list[str]:
    if not isinstance(value, dict):
        return []
    if isinstance(value.get("nodes"), list):
        return [str(n) for n in value["nodes"]]
    if value.get("node") is not None:
        return [str(value["node"])]
    return []


def fault_windows(nemesis: list[dict], end_ns: int) -> list[dict]:
    """The faults as windows ``{"f", "start", "end", "nodes", "value", "index"}``: a fault from
    its completion (or its invoke, without one) until the op that undoes it begins (resume ends
    a pause of the same node, restart a kill, heal the network faults, the same fault set to 0
    (a clock skew of 0, a delay of 0 ms, a loss of p 0) that fault); one never undone lasts to
    ``end_ns``; a hold-back lasts its ``ms``. Faults done at once (a connection reset, a forced
    election) are windows of no length."""
    windows: list[dict] = []
    open_: list[dict] = []
    last_invoke: dict[str, int] = {}
    for op in nemesis:
        f, value = op["f"], op["value"]
        if op["type"] == "invoke":
            last_invoke[f] = op["time"]
            continue
        started = last_invoke.pop(f, op["time"])
        nodes = _nodes_of(value)
        levels = [value.get(k) for k in _LEVELS if k in value] if isinstance(value, dict) else []
        is_end = f in _ENDS or (f != "hold-back" and bool(levels) and not any(levels))
        if is_end:
            ends = _ENDS.get(f, frozenset({f}))
            candidates = [w for w in open_ if (w["f"] not in _NODE_STATE if ends is None else w["f"] in ends)]
            if nodes:
                same = [w for w in candidates if set(w["nodes"]) & set(nodes)]
                candidates = same or ([candidates[0]] if candidates and ends is not None else candidates)
            for w in candidates:
                w["end"] = started
                open_.remove(w)
            continue
        end = op["time"] if f in _INSTANT else None
        if f == "hold-back" and isinstance(value, dict) and isinstance(value.get("ms"), (int, float)):
            end = op["time"] + int(value["ms"] * 1e6)  # it lasts what it says
        w = {"f": f, "start": op["time"], "end": end, "nodes": nodes, "value": _summary(value, 120),
             "index": op["index"]}
        windows.append(w)
        if w["end"] is None:
            open_.append(w)
    for w in open_:
        w["end"] = max(end_ns, w["start"])
    return windows


# ---------------------------------------------------------------- what shaped the target

def _target(meta: dict) -> dict:
    config = meta.get("config") or {}
    versions = meta.get("versions") or {}
    features = dict(config.get("features") or {})
    if config.get("transaction_version") and "transaction.version" not in features:
        features["transaction.version"] = config["transaction_version"]
    brokers: dict = {}
    if meta.get("target") == "sim":
        brokers = {"min.insync.replicas": config.get("min_insync_replicas"),
                   "unclean.leader.election.enable": config.get("unclean_leader_election_enable"),
                   "log.flush.interval.messages": config.get("flush_messages"),
                   "log.flush.interval.ms": config.get("flush_ms")}
        brokers = {k: v for k, v in brokers.items() if v is not None}
        settings = config.get("settings") or {}
        brokers.update({f"broker.{k}": v for k, v in (settings.get("broker") or {}).items()})
        if config.get("timings_ms"):
            brokers["timings_ms"] = config["timings_ms"]
    else:
        brokers = dict(config.get("broker_config") or {})
        if config.get("min_insync_replicas") is not None:
            brokers.setdefault("min.insync.replicas", config["min_insync_replicas"])
    if config.get("topic_configs"):
        brokers["topic configs"] = config["topic_configs"]
    out = {"name": meta.get("target"), "version": versions.get("broker"), "features": features,
           "broker_config": brokers, "bugs": list(config.get("bugs") or []),
           "brokers": config.get("brokers"), "replication_factor": config.get("replication_factor"),
           "partitions": config.get("partitions"), "acks": config.get("acks")}
    if config.get("client"):
        out["client"] = config["client"]
    if config.get("placement"):  # offline-partition: the replicas each partition was created with
        out["placement"] = config["placement"]
    if config.get("imported_from"):
        out["imported_from"] = config["imported_from"]
    return out


def _reproduce(meta: dict, results: dict, old: dict) -> str | None:
    if results.get("reproduce"):
        return results["reproduce"]
    if meta.get("options"):
        try:
            from kafkacheck.reproduce import command_line
            return command_line(meta["options"])
        except (ValueError, TypeError):
            pass
    return old.get("reproduce")


# ---------------------------------------------------------------- the page's pieces

def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def _fmt(v) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


class _Scale:
    def __init__(self, t0: int, t1: int, x0: float, x1: float) -> None:
        self.t0, self.span, self.x0, self.w = t0, max(t1 - t0, 1), x0, x1 - x0

    def __call__(self, t: int) -> float:
        return self.x0 + (t - self.t0) * self.w / self.span


def _ticks(t0: int, t1: int, n: int = 10) -> list[float]:
    span = max((t1 - t0) / 1e9, 1e-3)
    raw = span / n
    step = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * step:
            step *= m
            break
    first = math.ceil(t0 / 1e9 / step) * step
    return [first + i * step for i in range(int((t1 / 1e9 - first) / step) + 1)]


def _axis(x: _Scale, t0: int, t1: int, y_top: float, y_axis: float) -> str:
    out = [f'<line class="axis" x1="{x.x0:.1f}" x2="{x.x0 + x.w:.1f}" y1="{y_axis:.1f}" y2="{y_axis:.1f}"/>']
    for s in _ticks(t0, t1):
        px = x(int(s * 1e9))
        out.append(f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{y_top:.1f}" y2="{y_axis:.1f}"/>'
                   f'<text class="tick" x="{px:.1f}" y="{y_axis + 12:.1f}" text-anchor="middle">{s:g} s</text>')
    return "".join(out)


def _bands(windows: list[dict], x: _Scale, y0: float, y1: float, labels: bool) -> str:
    out = []
    for i, w in enumerate(windows):
        a, b = x(w["start"]), x(w["end"])
        colour = _FAULT_COLOURS.get(w["f"], "#fff59d")
        title = (f"{w['f']} {', '.join(w['nodes'])} {(w['end'] - w['start']) / 1e9:.2f} s from "
                 f"{w['start'] / 1e9:.3f} s (history index {w['index']}): {w['value']}")
        ident = f' id="fault-{i}"' if labels else ""
        out.append(f'<rect class="fault"{ident} x="{a:.1f}" y="{y0:.1f}" width="{max(b - a, 1.5):.1f}" '
                   f'height="{y1 - y0:.1f}" fill="{colour}"><title>{_esc(title)}</title></rect>')
        if labels:
            out.append(f'<text class="flabel" x="{a + 2:.1f}" y="{y0 + 10 + 11 * (i % 3):.1f}">'
                       f'{_esc(w["f"])} {_esc(",".join(w["nodes"]))}</text>')
    return "".join(out)


def _lanes(ops: list[_Op], end_ns: int) -> tuple[dict, list[list]]:
    """A lane for each process, a lane reused only once its process has crashed (its last op
    ended info, or never ended) and ended: a client that goes on under a new process id after
    an info goes on in the same lane, and two clients are never drawn as one."""
    spans: dict = {}
    for op in ops:
        s = spans.setdefault(op.process, [op.t0, op.t0, False])
        s[1] = max(s[1], op.t1 if op.t1 is not None else end_ns)
        s[2] = op.type in ("info", "invoke")  # ops are in invoke order: its last op says
    lane_of: dict = {}
    lanes: list[list] = []  # [free from (None: never), processes]
    for process, (a, b, crashed) in sorted(spans.items(), key=lambda kv: (kv[1][0], str(kv[0]))):
        for i, lane in enumerate(lanes):
            if lane[0] is not None and lane[0] < a:
                lane[0] = b if crashed else None
                lane[1].append(process)
                lane_of[process] = i
                break
        else:
            lane_of[process] = len(lanes)
            lanes.append([b if crashed else None, [process]])
    return lane_of, lanes


def _timeline(ops: list[_Op], drawn: list[_Op], windows: list[dict], events: list[tuple[int, dict]],
              t0: int, t1: int, flagged: set[int], event_ids: dict[int, str]) -> str:
    lane_of, lanes = _lanes(ops, t1)
    nodes = sorted({str(e.get("node")) for _, e in events}, key=lambda n: (len(n), n))
    per_lane = [0] * len(lanes)
    for o in drawn:
        per_lane[lane_of[o.process]] += 1
    busiest = max(per_lane, default=0)
    width = int(min(max(busiest * 2.5, 1120), 8000))
    lane_h = max(4.0, min(16.0, 640 / max(len(lanes), 1)))
    top, left = 40.0, 70.0
    node_h = 12.0
    y_ops_end = top + lane_h * len(lanes)
    y_nodes = y_ops_end + 10
    y_axis = y_nodes + node_h * len(nodes) + 8
    height = y_axis + 20
    x = _Scale(t0, t1, left, width - 10)
    out = [f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0f}" '
           f'viewBox="0 0 {width} {height:.0f}">',
           _bands(windows, x, 0, y_axis, True), _axis(x, t0, t1, top, y_axis)]
    for i, lane in enumerate(lanes):
        y = top + i * lane_h
        label = ", ".join(f"p{p}" for p in lane[1][:3]) + ("\u2026" if len(lane[1]) > 3 else "")
        if lane_h >= 8 or i % max(1, int(10 / lane_h)) == 0:
            out.append(f'<text class="lane" x="2" y="{y + lane_h * 0.8:.1f}">{_esc(label)}'
                       f'<title>processes {_esc(", ".join(map(str, lane[1])))}</title></text>')
    bar_h = max(lane_h - 2, 2)
    hot = []
    for op in drawn:
        y = top + lane_of[op.process] * lane_h + (lane_h - bar_h) / 2
        a = x(op.t0)
        b = x(op.t1 if op.t1 is not None else t1)
        cls = f"op {_esc(op.type)}" + (" anom" if op.index in flagged else "")
        took = "" if op.t1 is None else f", {(op.t1 - op.t0) / 1e6:.1f} ms"
        title = (f"op {op.index} (invoke {op.inv}): process {op.process} {op.f} {op.type}"
                 + (f" {op.error}" if op.error else "") + f" at {op.t0 / 1e9:.3f} s{took}: {op.value}")
        el = (f'<rect id="op-{op.index}" data-inv="{op.inv}" class="{cls}" x="{a:.1f}" y="{y:.1f}" '
              f'width="{max(b - a, 1.0):.1f}" height="{bar_h:.1f}" fill="{_TYPE_COLOURS.get(op.f, _OTHER_COLOUR)}">'
              f'<title>{_esc(title)}</title></rect>')
        (hot if op.index in flagged else out).append(el)
    out.extend(hot)  # drawn last: on top
    for i, n in enumerate(nodes):
        y = y_nodes + i * node_h
        out.append(f'<text class="lane" x="2" y="{y + 9:.1f}">node {_esc(n)}</text>'
                   f'<line class="nodelane" x1="{left}" x2="{width - 10}" y1="{y + 6:.1f}" y2="{y + 6:.1f}"/>')
    row = {n: i for i, n in enumerate(nodes)}
    for line_no, e in events:
        kind = e["kind"]
        px, y = x(int(e["time"])), y_nodes + row[str(e.get("node"))] * node_h + 6
        colour = _EVENT_COLOURS.get(kind, _OTHER_COLOUR)
        detail = ", ".join(f"{k} {_fmt(v)}" for k, v in e.items() if k not in ("kind", "time", "node"))
        title = f"{kind} on node {e.get('node')} at {int(e['time']) / 1e9:.3f} s: {detail}"
        ident = event_ids.get(line_no)
        id_attr = f' id="{ident}"' if ident else ""
        bad = " anom" if ident else ""
        out.append(f'<path{id_attr} class="mark{bad}" d="M{px:.1f},{y - 5:.1f} l4,5 l-4,5 l-4,-5 z" fill="{colour}">'
                   f'<title>{_esc(title[:300])}</title></path>')
    out.append("</svg>")
    return "".join(out)


def _quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def _plots(ops: list[_Op], points: list[_Op], windows: list[dict], t0: int, t1: int) -> str:
    """Latency per op type (points, and each bucket's p99 of every op) and throughput (ok
    completions per second, per type, of every op) over time, the fault windows shaded."""
    width, h, left = 1100, 220, 70.0
    done = [o for o in ops if o.t1 is not None]
    types = sorted({o.f for o in done}, key=lambda f: (-sum(1 for o in done if o.f == f), f))[:6]
    x = _Scale(t0, t1, left, width - 10)
    buckets = 100
    size = max(t1 - t0, 1) / buckets  # ns, maybe less than 1: an imported Jepsen test's history lasts 3 ns
    lat_max = max(((o.t1 - o.t0) / 1e6 for o in done), default=1.0)
    lat_min = max(min(((o.t1 - o.t0) / 1e6 for o in done), default=0.1), 0.01)
    log = lat_max / lat_min > 50
    top, bottom = 20.0, h - 25.0

    def y_lat(ms: float) -> float:
        if log:
            lo, hi = math.log10(lat_min), math.log10(max(lat_max, lat_min * 1.01))
            v = (math.log10(max(ms, lat_min)) - lo) / (hi - lo)
        else:
            v = ms / max(lat_max, 1e-9)
        return bottom - v * (bottom - top)

    lat = [f'<svg id="latency" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
           f'viewBox="0 0 {width} {h}">', _bands(windows, x, top, bottom, False), _axis(x, t0, t1, top, bottom)]
    for ms in _lat_ticks(lat_min, lat_max, log):
        yy = y_lat(ms)
        lat.append(f'<line class="grid" x1="{left}" x2="{width - 10}" y1="{yy:.1f}" y2="{yy:.1f}"/>'
                   f'<text class="tick" x="{left - 4}" y="{yy + 3:.1f}" text-anchor="end">{ms:g} ms</text>')
    for o in points:
        if o.t1 is None or o.f not in types:
            continue
        ms = (o.t1 - o.t0) / 1e6
        lat.append(f'<circle class="pt {_esc(o.type)}" cx="{x(o.t1):.1f}" cy="{y_lat(ms):.1f}" r="1.6" '
                   f'fill="{_TYPE_COLOURS.get(o.f, _OTHER_COLOUR)}"/>')
    per: dict[str, list[list[float]]] = {f: [[] for _ in range(buckets)] for f in types}
    thr: dict[str, list[int]] = {f: [0] * buckets for f in types}
    bad = [0] * buckets
    for o in done:
        b = min(int((o.t1 - t0) / size), buckets - 1)
        if o.f in per:
            per[o.f][b].append((o.t1 - o.t0) / 1e6)
            if o.type == "ok":
                thr[o.f][b] += 1
        if o.type != "ok":
            bad[b] += 1
    for f in types:
        pts = [(x(t0 + (i + 0.5) * size), y_lat(_quantile(sorted(v), 0.99)))
               for i, v in enumerate(per[f]) if v]
        if pts:
            lat.append(f'<polyline class="q" points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}" '
                       f'stroke="{_TYPE_COLOURS.get(f, _OTHER_COLOUR)}"><title>p99 latency of {_esc(f)}</title></polyline>')
    lat.append(_legend(types, left, 12) + "</svg>")
    per_s = 1e9 / size
    peak = max([max(v) for v in thr.values()] + [max(bad)] + [1]) * per_s
    thru = [f'<svg id="throughput" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
            f'viewBox="0 0 {width} {h}">', _bands(windows, x, top, bottom, False), _axis(x, t0, t1, top, bottom)]
    for frac in (0, 0.5, 1):
        yy = bottom - frac * (bottom - top)
        thru.append(f'<text class="tick" x="{left - 4}" y="{yy + 3:.1f}" text-anchor="end">{_rate(peak * frac)}/s</text>'
                    f'<line class="grid" x1="{left}" x2="{width - 10}" y1="{yy:.1f}" y2="{yy:.1f}"/>')
    series = [(f, thr[f], _TYPE_COLOURS.get(f, _OTHER_COLOUR), "") for f in types]
    series.append(("fail/info", bad, "#e53935", ' stroke-dasharray="4 3"'))
    for name, counts, colour, dash in series:
        pts = " ".join(f"{x(t0 + (i + 0.5) * size):.1f},{bottom - c * per_s / peak * (bottom - top):.1f}"
                       for i, c in enumerate(counts))
        thru.append(f'<polyline class="q" points="{pts}" stroke="{colour}"{dash}><title>{_esc(name)} per second'
                    f'</title></polyline>')
    thru.append(_legend([*types, "fail/info"], left, 12) + "</svg>")
    scale = "logarithmic" if log else "linear"
    return (f"<h3>Latency per operation type</h3><p class='note'>Each point an operation at its completion "
            f"({scale} scale); lines: the 99th percentile of every operation of the type in each of {buckets} "
            f"time buckets.</p><div class='plot'>{''.join(lat)}</div>"
            f"<h3>Throughput</h3><p class='note'>Operations completed ok per second, per type, and those that "
            f"ended fail or info (dashed), in {buckets} time buckets of {size / 1e9:.3g} s.</p>"
            f"<div class='plot'>{''.join(thru)}</div>")


def _rate(v: float) -> str:
    return f"{v:.0f}" if v == 0 or 1 <= v < 100_000 else f"{v:.2g}"


def _lat_ticks(lo: float, hi: float, log: bool) -> list[float]:
    if log:
        return [10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
                if lo <= 10.0 ** e <= hi * 1.0001]
    step = 10 ** math.floor(math.log10(max(hi, 1e-9) / 4))
    return [i * step for i in range(int(hi / step) + 1)][:: max(1, int(hi / step) // 5)]


def _legend(names: list[str], x0: float, y: float) -> str:
    out = []
    for i, name in enumerate(names):
        colour = "#e53935" if name == "fail/info" else _TYPE_COLOURS.get(name, _OTHER_COLOUR)
        out.append(f'<rect x="{x0 + 10 + i * 90}" y="{y - 8}" width="10" height="10" fill="{colour}"/>'
                   f'<text class="tick" x="{x0 + 24 + i * 90}" y="{y + 1}">{_esc(name)}</text>')
    return "".join(out)


def _op_links(ops: list, known: set[int]) -> str:
    shown = [o for o in ops if isinstance(o, int)][:MAX_OP_LINKS]
    links = " ".join(f'<a class="oplink" href="#op-{o}">op {o}</a>' if o in known else f"op {o}" for o in shown)
    more = len(ops) - len(shown)
    return links + (f" and {more} more" if more > 0 else "")


def _examples(kind: str, items: list[dict], known: set[int], event_link) -> str:
    out = []
    for a in items[:MAX_EXAMPLES]:
        links = _op_links(a.get("ops") or [], known)
        ev = event_link(a)
        if ev:
            links += f' <a class="oplink" href="#{ev}">the event at {int(a["time"]) / 1e9:.3f} s</a>'
        out.append(f"<li>{_esc(a.get('explanation') or _summary(a, 300))}"
                   + (f"<div class='ops'>{links}</div>" if links else "") + "</li>")
    return "<ul>" + "".join(out) + "</ul>"


def _verdict_html(results: dict, known: set[int], event_link) -> tuple[str, str]:
    """The verdict's box, and the anomalies and allowed anomalies with their examples."""
    if not results:
        return ("<section id='verdict' class='verdict none'><h2>Not judged yet</h2><p>No results.json: run "
                "<code>kafkacheck check DIR</code> to judge this history (it writes this page again).</p></section>", "")
    valid = results.get("valid")
    word, cls = ("VALID", "ok") if valid is True else ("UNKNOWN", "unknown") if valid == "unknown" else ("INVALID", "bad")
    counts = results.get("counts") or {}
    out = [f"<section id='verdict' class='verdict {cls}'><h2>{word}</h2>"]
    types = results.get("anomaly_types") or []
    if types:
        out.append("<p>" + ", ".join(f'<a href="#anomaly-{_esc(k)}">{_esc(k)}</a> '
                                     f'({counts.get(k, len((results.get("anomalies") or {}).get(k, [])))})'
                                     for k in types) + "</p>")
    elif valid is True:
        out.append("<p>No anomaly found.</p>")
    for reason in results.get("unknown") or []:
        out.append(f"<p>Undecided: {_esc(reason)}</p>")
    out.append("</section>")
    box, out = "".join(out), []
    for k in types:
        items = (results.get("anomalies") or {}).get(k, [])
        n = counts.get(k, len(items))
        out.append(f"<details open class='anomaly' id='anomaly-{_esc(k)}'><summary>{_esc(k)}: {n}</summary>"
                   + (f"<p class='note'>{min(len(items), MAX_EXAMPLES)} of {n} shown; results.json has them all."
                      "</p>" if n > MAX_EXAMPLES else "")
                   + _examples(k, items, known, event_link) + "</details>")
    allowed = results.get("allowed") or {}
    examples = results.get("allowed_anomalies") or {}
    if allowed or examples:
        out.append("<section id='allowed'><h2>Allowed anomalies</h2><p class='note'>Reported, not violations: "
                   "Kafka does not promise otherwise (<code>--forbid TYPE</code> makes one a violation).</p>")
        for k in sorted(set(allowed) | set(examples)):
            items = examples.get(k, [])
            out.append(f"<details open class='allowed' id='allowed-{_esc(k)}'><summary>{_esc(k)}: "
                       f"{allowed.get(k, len(items))}</summary>" + _examples(k, items[:5], known, event_link)
                       + "</details>")
        out.append("</section>")
    if types:
        out.insert(0, "<h2>Anomalies</h2>")
    return box, "".join(out)


def _table(rows: list[tuple[str, object]]) -> str:
    return "<table class='kv'>" + "".join(
        f"<tr><th>{_esc(k)}</th><td>{_esc(_fmt(v))}</td></tr>" for k, v in rows
        if v not in (None, "", [], {})) + "</table>"


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.2em 2em;color:#222}
h1{font-size:1.4em;margin:.2em 0} h2{font-size:1.2em} h3{font-size:1.05em;margin:.8em 0 .3em}
.meta,.note{color:#555;font-size:.9em}
.verdict{padding:.4em 1em;border-radius:6px;margin:.6em 0}
.verdict h2{margin:.2em 0}.verdict.ok{background:#e8f5e9}.verdict.bad{background:#ffebee}
.verdict.unknown,.verdict.none{background:#fff8e1}
.anomaly li,.allowed li{margin:.3em 0} details summary{font-weight:600;margin:.5em 0;cursor:pointer} .ops{font-size:.9em}
a.oplink{font-family:monospace;margin-right:.4em}
code,.cmd{font-family:monospace;background:#f4f4f4;padding:.1em .3em}
.scroll{overflow:auto;border:1px solid #ddd;max-height:760px}
.plot{overflow-x:auto}
table.kv{border-collapse:collapse}
table.kv th,table.kv td{border-bottom:1px solid #eee;padding:.25em .6em;text-align:left;vertical-align:top;font-size:.9em}
table.kv td{font-family:monospace;word-break:break-all;max-width:900px}
svg text{font-size:10px;fill:#333} svg .tick{fill:#666}
svg .axis{stroke:#999} svg .grid{stroke:#eee} svg .nodelane{stroke:#ddd}
svg .fault{opacity:.45} svg .flabel{fill:#4e342e;font-size:9px}
svg .op.fail{fill-opacity:.35} svg .op.info{fill:#ffb300}
svg .op.invoke{fill:#bdbdbd}
svg .anom{stroke:#d50000;stroke-width:2}
svg .pt{opacity:.55} svg .pt.info,svg .pt.fail{opacity:.9}
svg polyline.q{fill:none;stroke-width:1.5}
svg .target{stroke:#000;stroke-width:4;animation:flash .5s 4 alternate}
@keyframes flash{from{opacity:1}to{opacity:.15}}
.legend span{display:inline-block;margin-right:1em;font-size:.85em}
.legend i{display:inline-block;width:12px;height:10px;margin-right:.3em;vertical-align:middle}
"""

_JS = """
(function(){
function find(id){
  var el=document.getElementById(id);
  var m=/^op-(\\d+)$/.exec(id);
  if(!el&&m){el=document.querySelector('[data-inv="'+m[1]+'"]');}
  return el;
}
function show(id){
  var el=find(id);
  if(!el){return false;}
  var old=document.querySelectorAll('.target');
  for(var i=0;i<old.length;i++){old[i].classList.remove('target');}
  el.getBoundingClientRect();
  el.classList.add('target');
  el.scrollIntoView({block:'center',inline:'center'});
  return true;
}
document.addEventListener('click',function(e){
  var a=e.target.closest?e.target.closest('a.oplink'):null;
  if(!a){return;}
  var id=a.getAttribute('href').slice(1);
  if(show(id)){e.preventDefault();history.replaceState(null,'','#'+id);}
});
function fromHash(){if(location.hash.length>1){show(decodeURIComponent(location.hash.slice(1)));}}
window.addEventListener('hashchange',fromHash);
window.addEventListener('load',fromHash);
})();
"""


def _sample(ops: list[_Op], keep: set[int], limit: int, target: int) -> tuple[list[_Op], int]:
    """``ops`` whole when there are ``limit`` or fewer, else every k-th and the ones in
    ``keep``; and k (1: not sampled)."""
    if len(ops) <= limit:
        return ops, 1
    k = math.ceil(len(ops) / target)
    return [o for i, o in enumerate(ops) if i % k == 0 or o.index in keep], k


def write_report(run_dir: str | Path, reproduce: str | None = None, options: dict | None = None) -> Path | None:
    """Write ``report.json`` and ``report.html`` into ``run_dir`` from what it holds;
    ``reproduce`` and ``options``: the command that made the run and its options, when the
    directory does not say them (a conform run's). Returns the page's path.

    Never raises (but Ctrl-C): the report is not worth a verdict, so a failure (a full disk,
    an unwritable directory, a file it cannot read) is one line on stderr, removes the
    report files it may have left stale, and returns None; the command goes on to its
    verdict and exit code."""
    d = Path(run_dir)
    try:
        return _write_report(d, reproduce, options)
    except Exception as e:  # whatever it is, the run's verdict stands
        print(f"kafkacheck: {d}: report.html not written: {type(e).__name__}: {e}", file=sys.stderr)
        for name in ("report.html", "report.json"):
            with contextlib.suppress(OSError):
                (d / name).unlink(missing_ok=True)
        return None


def _write_report(d: Path, reproduce: str | None, options: dict | None) -> Path:
    meta = _read_json(d / "run.json")
    results = _read_json(d / "results.json")
    old = _read_json(d / "report.json")
    ops, nemesis = _read_history(d / "history.jsonl")
    events, event_counts = _read_events(d / "events.jsonl")
    times = [o.t0 for o in ops[:1]] + [op["time"] for op in nemesis[:1]]
    t0 = min(times + [e["time"] for _, e in events[:1]], default=0)
    t1 = max([o.t1 or o.t0 for o in ops[-200:]] + [op["time"] for op in nemesis[-1:]]
             + [int(e["time"]) for _, e in events[-1:]] + [t0 + 1])
    t1 = max(t1, max((o.t1 or o.t0 for o in ops), default=t1))
    windows = fault_windows(nemesis, t1)

    anomalies = results.get("anomalies") or {}
    allowed_ex = results.get("allowed_anomalies") or {}
    flagged = {o for items in anomalies.values() for a in items for o in (a.get("ops") or []) if isinstance(o, int)}

    def links(examples: dict, n: int) -> set[int]:  # the ops the page links to: see _examples, _op_links
        return {o for items in examples.values() for a in items[:n]
                for o in [o for o in (a.get("ops") or []) if isinstance(o, int)][:MAX_OP_LINKS]}

    # a sampled page keeps the ops it links to, not every op an anomaly names (a buggy run's
    # anomalies may name more ops than a page can draw)
    linked_anomalies = links(anomalies, MAX_EXAMPLES)
    linked = linked_anomalies | links(allowed_ex, 5)
    # the invariant violations the results name, as the node events that recorded them
    event_ids: dict[int, str] = {}
    by_time = {(int(e["time"]), str(e.get("node"))): n for n, e in events if e["kind"] in (
        "invariant-violation", "liveness-violation")}

    def event_link(a: dict) -> str | None:
        if a.get("ops") or a.get("time") is None:
            return None
        n = by_time.get((int(a["time"]), str(a.get("node"))))
        if n is None:
            return None
        event_ids[n] = f"ev-{n}"
        return f"ev-{n}"

    verdict, details = _verdict_html(results, {o.index for o in ops} | {o.inv for o in ops}, event_link)
    drawn, k = _sample(ops, linked, MAX_TIMELINE_OPS, SAMPLED_TIMELINE_OPS)
    points, kp = _sample(ops, linked_anomalies, MAX_POINTS, MAX_POINTS)
    shown_events = events
    if len(events) > MAX_MARKS:
        step = math.ceil(len(events) / MAX_MARKS)
        keep = set(event_ids)
        shown_events = [(n, e) for i, (n, e) in enumerate(events) if i % step == 0 or n in keep]
    sampled = []
    if k > 1:
        sampled.append(f"the timeline draws {len(drawn):,} of {len(ops):,} client operations (every {k}th, and "
                       "every operation the examples below link to)")
    if kp > 1:
        sampled.append(f"the latency plot draws {len(points):,} points (every {kp}th operation, and the anomalies' "
                       "linked ones); its p99 lines and the throughput count every operation")
    if len(shown_events) < len(events):
        sampled.append(f"{len(shown_events):,} of {len(events):,} node events are marked")

    target = _target(meta)
    config = meta.get("config") or {}
    report = {
        "format": 1,
        "run_id": meta.get("run_id"),
        "target": target,
        "workload": meta.get("workload"),
        "seed": meta.get("seed"),
        "faults": meta.get("faults"),
        "options": meta.get("options") or options or old.get("options"),
        "reproduce": reproduce or _reproduce(meta, results, old),
        "started_at": meta.get("started_at"),
        "kafkacheck": (meta.get("versions") or {}).get("kafkacheck"),
        "verdict": None if not results else {
            "valid": results.get("valid"), "anomaly_types": results.get("anomaly_types") or [],
            "counts": results.get("counts") or {}, "allowed": results.get("allowed") or {},
            "unknown": results.get("unknown") or []},
        "history": {"client_ops": len(ops), "nemesis_ops": len(nemesis), "fault_windows": len(windows),
                    "node_events": event_counts},
        "drawn": {"timeline_ops": len(drawn), "latency_points": len(points), "node_events": len(shown_events),
                  "sampled": sampled},
    }
    (d / "report.json").write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")

    _read_values(d / "history.jsonl", drawn)
    timeline = _timeline(ops, drawn, windows, shown_events, t0, t1, flagged, event_ids)
    plots = _plots(ops, points, windows, t0, t1) if any(o.t1 is not None for o in ops) else ""
    share = ""
    if isinstance(config.get("share"), dict):  # a share run: who held which record when
        from kafkacheck.share_picture import share_section

        def backdrop(width: int, top: float, bottom: float):  # the timeline's time scale, axis and fault bands
            x = _Scale(t0, t1, 70.0, width - 10)
            return x, _bands(windows, x, 0, bottom, False) + _axis(x, t0, t1, top, bottom)
        share = share_section(d, meta, results, t0, t1, backdrop)
    title = f"kafkacheck: {meta.get('run_id') or d.name}"
    target_rows = [("target", target["name"]), ("version", target["version"]), ("features", target["features"]),
                   ("bug switches", ", ".join(target["bugs"]) or "none"), ("client", target.get("client")),
                   ("brokers", target["brokers"]), ("replication factor", target["replication_factor"]),
                   ("partitions", target["partitions"]), ("acks", target["acks"]),
                   ("replica placement", target.get("placement"))]
    target_rows += [(f"broker config {k}", v) for k, v in target["broker_config"].items()]
    target_rows += [("imported from", target.get("imported_from"))]
    run_rows = [("reproduce", report["reproduce"]), ("options", report["options"]), ("workload", meta.get("workload")),
                ("seed", meta.get("seed")), ("faults", ", ".join(meta.get("faults") or []) or "none"),
                ("started", meta.get("started_at")), ("kafkacheck", report["kafkacheck"]),
                ("client operations", len(ops)), ("nemesis operations", len(nemesis))]
    run_rows += [(f"config {k}", v) for k, v in sorted(config.items())
                 if k not in ("bugs", "timings_ms", "final_read", "topic_configs", "broker_config", "features",
                              "placement")]
    legend = ("<p class='legend'>" + "".join(f"<span><i style='background:{c}'></i>{_esc(f)}</span>"
                                             for f, c in _TYPE_COLOURS.items() if any(o.f == f for o in ops))
              + "<span><i style='background:#ffb300'></i>info (unknown outcome)</span>"
              "<span><i style='background:#1e88e5;opacity:.35'></i>fail (pale)</span>"
              "<span><i style='border:2px solid #d50000'></i>named by an anomaly</span>"
              "<span><i style='background:#b39ddb;opacity:.6'></i>fault window</span>"
              + "".join(f"<span><i style='background:{c}'></i>{_esc(k)}</span>" for k, c in _EVENT_COLOURS.items()
                        if any(e['kind'] == k for _, e in shown_events)) + "</p>")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head><body>
<h1>{_esc(title)}</h1>
<p class="meta">{' &middot; '.join(_esc(part) for part in [
    target['version'] or target['name'] or 'unknown target',
    *([f"workload {meta['workload']}"] if meta.get('workload') is not None else []),
    *([f"seed {meta['seed']}"] if meta.get('seed') is not None else []),
    f"bug switches {', '.join(target['bugs']) or 'none'}",
    f"{len(ops):,} client operations, {len(windows)} fault{'' if len(windows) == 1 else 's'}"])}</p>
{verdict}
<h2 id="timeline-heading">Timeline</h2>
<p class="note">One lane per client process (a lane goes on with the next process of the same client);
each bar an operation from invoke to completion, its colour its type; fault windows are the shaded bands,
node events the marks below the lanes. Hover for details.{(' Sampled: ' + _esc('; '.join(sampled)) + '.')
if sampled else ''}</p>
{legend}
<div class="scroll">{timeline}</div>
{details}
{share}
{plots}
<h2>Target</h2>{_table(target_rows)}
<h2>Run</h2>{_table(run_rows)}
<script>{_JS}</script>
</body></html>
"""
    path = d / "report.html"
    path.write_text(page)
    return path
