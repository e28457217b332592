"""``report.html`` and ``report.json`` of a run directory: one self-contained page per run.

:func:`write_report` reads what a run directory holds (run.json, history.jsonl, events.jsonl
when there is one, results.json when the run was judged) and writes beside them:

- ``report.json``: what shaped the target (its name, version, features, broker configs and
  bug switches), the run's options and the command that reproduces it, the verdict's summary,
  and what the page drew (docs/reference/trace-format.md lists the fields);
- ``report.html``: the verdict, every anomaly with its explanation and links to its operations
  (every allowed anomaly folded to a line that says why it is allowed, opened on a click); a
  timeline of the operations (one lane per process, a process's lane reused once it has ended)
  with the fault windows as bands and the node events as marks; latency per operation type and
  throughput over time with the fault windows shaded; the target and the options. Inline CSS,
  SVG (:mod:`kafkacheck.report_svg`) and a few lines of script: nothing is fetched when the
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
import json
import math
import sys
from pathlib import Path

from kafkacheck import report_history as history
from kafkacheck import report_svg as svg

MAX_TIMELINE_OPS = 20_000  # client ops drawn on the timeline before sampling
SAMPLED_TIMELINE_OPS = 12_000  # what a sampled timeline draws (besides the anomaly ops)
MAX_POINTS = 6_000  # latency points drawn (besides the anomaly ops)
MAX_MARKS = 3_000  # node-event marks drawn
MAX_EXAMPLES = 10  # examples shown of each anomaly type
MAX_OP_LINKS = 12  # op links shown per example


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
        out.append(f"<li>{svg.esc(a.get('explanation') or history.summary(a, 300))}"
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
        out.append("<p>" + ", ".join(f'<a href="#anomaly-{svg.esc(k)}">{svg.esc(k)}</a> '
                                     f'({counts.get(k, len((results.get("anomalies") or {}).get(k, [])))})'
                                     for k in types) + "</p>")
    elif valid is True:
        out.append("<p>No anomaly found.</p>")
    for reason in results.get("unknown") or []:
        out.append(f"<p>Undecided: {svg.esc(reason)}</p>")
    out.append("</section>")
    box, out = "".join(out), []
    for k in types:
        items = (results.get("anomalies") or {}).get(k, [])
        n = counts.get(k, len(items))
        out.append(f"<details open class='anomaly' id='anomaly-{svg.esc(k)}'><summary>{svg.esc(k)}: {n}</summary>"
                   + (f"<p class='note'>{min(len(items), MAX_EXAMPLES)} of {n} shown; results.json has them all."
                      "</p>" if n > MAX_EXAMPLES else "")
                   + _examples(k, items, known, event_link) + "</details>")
    allowed = results.get("allowed") or {}
    examples = results.get("allowed_anomalies") or {}
    why = results.get("allowed_why") or {}
    if allowed or examples:
        out.append("<section id='allowed'><h2>Allowed anomalies</h2><p class='note'>Reported, not violations: "
                   "Kafka does not promise otherwise (<code>--forbid TYPE</code> makes one a violation). "
                   "Each folded to a line: click it for its examples.</p>")
        for k in sorted(set(allowed) | set(examples)):
            items = examples.get(k, [])
            reason = f" <span class='why'>{svg.esc(why[k])}</span>" if why.get(k) else ""
            out.append(f"<details class='allowed' id='allowed-{svg.esc(k)}'><summary>{svg.esc(k)}: "
                       f"{allowed.get(k, len(items))}{reason}</summary>" + _examples(k, items[:5], known, event_link)
                       + "</details>")
        out.append("</section>")
    if types:
        out.insert(0, "<h2>Anomalies</h2>")
    return box, "".join(out)


def _table(rows: list[tuple[str, object]]) -> str:
    return "<table class='kv'>" + "".join(
        f"<tr><th>{svg.esc(k)}</th><td>{svg.esc(svg.fmt(v))}</td></tr>" for k, v in rows
        if v not in (None, "", [], {})) + "</table>"


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.2em 2em;color:#222}
h1{font-size:1.4em;margin:.2em 0} h2{font-size:1.2em} h3{font-size:1.05em;margin:.8em 0 .3em}
.meta,.note{color:#555;font-size:.9em}
.verdict{padding:.4em 1em;border-radius:6px;margin:.6em 0}
.verdict h2{margin:.2em 0}.verdict.ok{background:#e8f5e9}.verdict.bad{background:#ffebee}
.verdict.unknown,.verdict.none{background:#fff8e1}
.anomaly li,.allowed li{margin:.3em 0}
.allowed .why{font-weight:400;color:#555}
details summary{font-weight:600;margin:.5em 0;cursor:pointer} .ops{font-size:.9em}
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
  var d=el.closest?el.closest('details'):null;
  if(d){d.open=true;}
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


def _sample(ops: list[history.Op], keep: set[int], limit: int, target: int) -> tuple[list[history.Op], int]:
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
    meta = history.read_json(d / "run.json")
    results = history.read_json(d / "results.json")
    old = history.read_json(d / "report.json")
    ops, nemesis = history.read_history(d / "history.jsonl")
    events, event_counts = history.read_events(d / "events.jsonl")
    times = [o.t0 for o in ops[:1]] + [op["time"] for op in nemesis[:1]]
    t0 = min(times + [e["time"] for _, e in events[:1]], default=0)
    t1 = max([o.t1 or o.t0 for o in ops[-200:]] + [op["time"] for op in nemesis[-1:]]
             + [int(e["time"]) for _, e in events[-1:]] + [t0 + 1])
    t1 = max(t1, max((o.t1 or o.t0 for o in ops), default=t1))
    windows = history.fault_windows(nemesis, t1)

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

    history.read_values(d / "history.jsonl", drawn)
    timeline = svg.timeline(ops, drawn, windows, shown_events, t0, t1, flagged, event_ids)
    plots = svg.plots(ops, points, windows, t0, t1) if any(o.t1 is not None for o in ops) else ""
    share = ""
    if isinstance(config.get("share"), dict):  # a share run: who held which record when
        from kafkacheck.share_picture import share_section

        def backdrop(width: int, top: float, bottom: float):  # the timeline's time scale, axis and fault bands
            x = svg.Scale(t0, t1, 70.0, width - 10)
            return x, svg.bands(windows, x, 0, bottom, False) + svg.axis(x, t0, t1, top, bottom)
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
    legend = ("<p class='legend'>" + "".join(f"<span><i style='background:{c}'></i>{svg.esc(f)}</span>"
                                             for f, c in svg.TYPE_COLOURS.items() if any(o.f == f for o in ops))
              + "<span><i style='background:#ffb300'></i>info (unknown outcome)</span>"
              "<span><i style='background:#1e88e5;opacity:.35'></i>fail (pale)</span>"
              "<span><i style='border:2px solid #d50000'></i>named by an anomaly</span>"
              "<span><i style='background:#b39ddb;opacity:.6'></i>fault window</span>"
              + "".join(f"<span><i style='background:{c}'></i>{svg.esc(k)}</span>" for k, c in svg.EVENT_COLOURS.items()
                        if any(e['kind'] == k for _, e in shown_events)) + "</p>")
    page = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{svg.esc(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><style>{_CSS}</style></head><body>
<h1>{svg.esc(title)}</h1>
<p class="meta">{' &middot; '.join(svg.esc(part) for part in [
    target['version'] or target['name'] or 'unknown target',
    *([f"workload {meta['workload']}"] if meta.get('workload') is not None else []),
    *([f"seed {meta['seed']}"] if meta.get('seed') is not None else []),
    f"bug switches {', '.join(target['bugs']) or 'none'}",
    f"{len(ops):,} client operations, {len(windows)} fault{'' if len(windows) == 1 else 's'}"])}</p>
{verdict}
<h2 id="timeline-heading">Timeline</h2>
<p class="note">One lane per client process (a lane goes on with the next process of the same client);
each bar an operation from invoke to completion, its colour its type; fault windows are the shaded bands,
node events the marks below the lanes. Hover for details.{(' Sampled: ' + svg.esc('; '.join(sampled)) + '.')
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
