"""The pictures of a run's report (:mod:`kafkacheck.report`), drawn as inline SVG by hand: the
timeline (one lane per client process, each op a bar from its invoke to its completion, fault
windows as bands, node events as marks), the latency and throughput plots, and the scale, axis,
bands and legend they share (:mod:`kafkacheck.share_picture` draws on the same backdrop).

Only the standard library is imported: ``kafkacheck check`` writes the report and has to start
fast.
"""

from __future__ import annotations

import html
import json
import math

from kafkacheck import report_history as history

# the node events drawn, by colour (others are grey)
EVENT_COLOURS = {"leader-elected": "#2e7d32", "isr-shrink": "#c62828", "isr-expand": "#1565c0",
                  "crash": "#000", "recover": "#6d4c41", "truncate": "#ef6c00", "broker-fenced": "#6a1b9a",
                  "broker-unfenced": "#8e24aa", "invariant-violation": "#d50000",
                  "liveness-violation": "#d50000", "group-generation": "#00838f"}


TYPE_COLOURS = {"send": "#1e88e5", "poll": "#00897b", "txn": "#8e24aa", "commit": "#f4511e", "committed": "#6d4c41",
                 "assign": "#9e9e9e", "subscribe": "#9e9e9e", "crash": "#000000"}


_FAULT_COLOURS = {"partition": "#ffcc80", "kill": "#ef9a9a", "sigkill": "#ef9a9a", "pause": "#b39ddb",
                  "disk-fault": "#bcaaa4", "clock-skew": "#80deea", "lose-unflushed": "#ef9a9a",
                  "offline-partition": "#f48fb1"}


OTHER_COLOUR = "#757575"


def esc(x) -> str:
    return html.escape(str(x), quote=True)


def fmt(v) -> str:
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


class Scale:
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


def axis(x: Scale, t0: int, t1: int, y_top: float, y_axis: float) -> str:
    out = [f'<line class="axis" x1="{x.x0:.1f}" x2="{x.x0 + x.w:.1f}" y1="{y_axis:.1f}" y2="{y_axis:.1f}"/>']
    for s in _ticks(t0, t1):
        px = x(int(s * 1e9))
        out.append(f'<line class="grid" x1="{px:.1f}" x2="{px:.1f}" y1="{y_top:.1f}" y2="{y_axis:.1f}"/>'
                   f'<text class="tick" x="{px:.1f}" y="{y_axis + 12:.1f}" text-anchor="middle">{s:g} s</text>')
    return "".join(out)


def bands(windows: list[dict], x: Scale, y0: float, y1: float, labels: bool) -> str:
    out = []
    for i, w in enumerate(windows):
        a, b = x(w["start"]), x(w["end"])
        colour = _FAULT_COLOURS.get(w["f"], "#fff59d")
        title = (f"{w['f']} {', '.join(w['nodes'])} {(w['end'] - w['start']) / 1e9:.2f} s from "
                 f"{w['start'] / 1e9:.3f} s (history index {w['index']}): {w['value']}")
        ident = f' id="fault-{i}"' if labels else ""
        out.append(f'<rect class="fault"{ident} x="{a:.1f}" y="{y0:.1f}" width="{max(b - a, 1.5):.1f}" '
                   f'height="{y1 - y0:.1f}" fill="{colour}"><title>{esc(title)}</title></rect>')
        if labels:
            out.append(f'<text class="flabel" x="{a + 2:.1f}" y="{y0 + 10 + 11 * (i % 3):.1f}">'
                       f'{esc(w["f"])} {esc(",".join(w["nodes"]))}</text>')
    return "".join(out)


def _lanes(ops: list[history.Op], end_ns: int) -> tuple[dict, list[list]]:
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


def timeline(ops: list[history.Op], drawn: list[history.Op], windows: list[dict], events: list[tuple[int, dict]],
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
    x = Scale(t0, t1, left, width - 10)
    out = [f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height:.0f}" '
           f'viewBox="0 0 {width} {height:.0f}">',
           bands(windows, x, 0, y_axis, True), axis(x, t0, t1, top, y_axis)]
    for i, lane in enumerate(lanes):
        y = top + i * lane_h
        label = ", ".join(f"p{p}" for p in lane[1][:3]) + ("\u2026" if len(lane[1]) > 3 else "")
        if lane_h >= 8 or i % max(1, int(10 / lane_h)) == 0:
            out.append(f'<text class="lane" x="2" y="{y + lane_h * 0.8:.1f}">{esc(label)}'
                       f'<title>processes {esc(", ".join(map(str, lane[1])))}</title></text>')
    bar_h = max(lane_h - 2, 2)
    hot = []
    for op in drawn:
        y = top + lane_of[op.process] * lane_h + (lane_h - bar_h) / 2
        a = x(op.t0)
        b = x(op.t1 if op.t1 is not None else t1)
        cls = f"op {esc(op.type)}" + (" anom" if op.index in flagged else "")
        took = "" if op.t1 is None else f", {(op.t1 - op.t0) / 1e6:.1f} ms"
        title = (f"op {op.index} (invoke {op.inv}): process {op.process} {op.f} {op.type}"
                 + (f" {op.error}" if op.error else "") + f" at {op.t0 / 1e9:.3f} s{took}: {op.value}")
        el = (f'<rect id="op-{op.index}" data-inv="{op.inv}" class="{cls}" x="{a:.1f}" y="{y:.1f}" '
              f'width="{max(b - a, 1.0):.1f}" height="{bar_h:.1f}" fill="{TYPE_COLOURS.get(op.f, OTHER_COLOUR)}">'
              f'<title>{esc(title)}</title></rect>')
        (hot if op.index in flagged else out).append(el)
    out.extend(hot)  # drawn last: on top
    for i, n in enumerate(nodes):
        y = y_nodes + i * node_h
        out.append(f'<text class="lane" x="2" y="{y + 9:.1f}">node {esc(n)}</text>'
                   f'<line class="nodelane" x1="{left}" x2="{width - 10}" y1="{y + 6:.1f}" y2="{y + 6:.1f}"/>')
    row = {n: i for i, n in enumerate(nodes)}
    for line_no, e in events:
        kind = e["kind"]
        px, y = x(int(e["time"])), y_nodes + row[str(e.get("node"))] * node_h + 6
        colour = EVENT_COLOURS.get(kind, OTHER_COLOUR)
        detail = ", ".join(f"{k} {fmt(v)}" for k, v in e.items() if k not in ("kind", "time", "node"))
        title = f"{kind} on node {e.get('node')} at {int(e['time']) / 1e9:.3f} s: {detail}"
        ident = event_ids.get(line_no)
        id_attr = f' id="{ident}"' if ident else ""
        bad = " anom" if ident else ""
        out.append(f'<path{id_attr} class="mark{bad}" d="M{px:.1f},{y - 5:.1f} l4,5 l-4,5 l-4,-5 z" fill="{colour}">'
                   f'<title>{esc(title[:300])}</title></path>')
    out.append("</svg>")
    return "".join(out)


def _quantile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def plots(ops: list[history.Op], points: list[history.Op], windows: list[dict], t0: int, t1: int) -> str:
    """Latency per op type (points, and each bucket's p99 of every op) and throughput (ok
    completions per second, per type, of every op) over time, the fault windows shaded."""
    width, h, left = 1100, 220, 70.0
    done = [o for o in ops if o.t1 is not None]
    types = sorted({o.f for o in done}, key=lambda f: (-sum(1 for o in done if o.f == f), f))[:6]
    x = Scale(t0, t1, left, width - 10)
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
           f'viewBox="0 0 {width} {h}">', bands(windows, x, top, bottom, False), axis(x, t0, t1, top, bottom)]
    for ms in _lat_ticks(lat_min, lat_max, log):
        yy = y_lat(ms)
        lat.append(f'<line class="grid" x1="{left}" x2="{width - 10}" y1="{yy:.1f}" y2="{yy:.1f}"/>'
                   f'<text class="tick" x="{left - 4}" y="{yy + 3:.1f}" text-anchor="end">{ms:g} ms</text>')
    for o in points:
        if o.t1 is None or o.f not in types:
            continue
        ms = (o.t1 - o.t0) / 1e6
        lat.append(f'<circle class="pt {esc(o.type)}" cx="{x(o.t1):.1f}" cy="{y_lat(ms):.1f}" r="1.6" '
                   f'fill="{TYPE_COLOURS.get(o.f, OTHER_COLOUR)}"/>')
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
                       f'stroke="{TYPE_COLOURS.get(f, OTHER_COLOUR)}"><title>p99 latency of {esc(f)}</title></polyline>')
    lat.append(_legend(types, left, 12) + "</svg>")
    per_s = 1e9 / size
    peak = max([max(v) for v in thr.values()] + [max(bad)] + [1]) * per_s
    thru = [f'<svg id="throughput" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" '
            f'viewBox="0 0 {width} {h}">', bands(windows, x, top, bottom, False), axis(x, t0, t1, top, bottom)]
    for frac in (0, 0.5, 1):
        yy = bottom - frac * (bottom - top)
        thru.append(f'<text class="tick" x="{left - 4}" y="{yy + 3:.1f}" text-anchor="end">{_rate(peak * frac)}/s</text>'
                    f'<line class="grid" x1="{left}" x2="{width - 10}" y1="{yy:.1f}" y2="{yy:.1f}"/>')
    series = [(f, thr[f], TYPE_COLOURS.get(f, OTHER_COLOUR), "") for f in types]
    series.append(("fail/info", bad, "#e53935", ' stroke-dasharray="4 3"'))
    for name, counts, colour, dash in series:
        pts = " ".join(f"{x(t0 + (i + 0.5) * size):.1f},{bottom - c * per_s / peak * (bottom - top):.1f}"
                       for i, c in enumerate(counts))
        thru.append(f'<polyline class="q" points="{pts}" stroke="{colour}"{dash}><title>{esc(name)} per second'
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
        colour = "#e53935" if name == "fail/info" else TYPE_COLOURS.get(name, OTHER_COLOUR)
        out.append(f'<rect x="{x0 + 10 + i * 90}" y="{y - 8}" width="10" height="10" fill="{colour}"/>'
                   f'<text class="tick" x="{x0 + 24 + i * 90}" y="{y + 1}">{esc(name)}</text>')
    return "".join(out)
