"""An HTML page of a check, like porcupine's visualisation.

One self-contained file (no network): for every partition, each client's operations as bars
on a time axis (times compressed to their order, as porcupine does, so short and long gaps
read alike), the longest linearization the search found drawn as numbers on the bars with
the model state after each step on hover, the operations it could not place in grey, and
the operation where it got stuck (its return came before it could take effect) outlined in
red. Large partitions show the operations around that point.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

from linearizability.checker import CheckResult, PartitionResult
from linearizability.models import Model

WINDOW_OPS = 400          # a large partition shows this many operations around the failure
STATES_OPS_MAX = 5000     # replay the model for state descriptions up to this many steps


def _partition_data(model: Model, p: PartitionResult, number: int) -> dict[str, Any]:
    ops = p.operations
    order = {op_id: step for step, op_id in enumerate(p.longest)}
    states: dict[int, str] = {}
    if len(p.longest) <= STATES_OPS_MAX:
        state = model.init()
        for op_id in p.longest:
            op = ops[op_id]
            ok, state = model.step(state, op.input, op.output)
            states[op_id] = model.describe_state(state) if ok else "(step refused)"
    shown = list(range(len(ops)))
    if len(ops) > WINDOW_OPS:
        centre = p.blocked if p.blocked is not None else (p.longest[-1] if p.longest else 0)
        by_time = sorted(shown, key=lambda i: ops[i].call)
        at = by_time.index(centre)
        lo = max(0, min(at - WINDOW_OPS // 2, len(by_time) - WINDOW_OPS))
        shown = sorted(by_time[lo:lo + WINDOW_OPS])
    times = sorted({t for i in shown for t in (ops[i].call, ops[i].return_time) if t is not None})
    rank = {t: r for r, t in enumerate(times)}
    end = len(times)
    rows = []
    for i in shown:
        op = ops[i]
        rows.append({
            "id": i, "client": str(op.client_id), "start": rank[op.call],
            "end": end if op.return_time is None else rank[op.return_time],
            "pending": op.return_time is None,
            "desc": model.describe_operation(op.input, op.output),
            "step": order.get(i, -1), "state": states.get(i, ""),
            "index": op.index,
        })
    return {
        "title": f"partition {number}", "verdict": p.verdict, "reason": p.reason,
        "ops": len(ops), "shown": len(shown), "linearized": len(p.longest),
        "blocked": p.blocked, "rows": rows, "width": end + 1,
    }


def _script_json(data) -> str:
    """JSON that is inert inside <script>: no "</script", no "<!--" (which would make the
    HTML parser swallow the rest of the page) and no line separators. Outside strings JSON has
    none of these characters, and inside strings the escapes read back as the same text."""
    text = json.dumps(data)
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def render_html(result: CheckResult, model: Model, path: str | Path, title: str = "") -> Path:
    """Writes the page; partitions that are illegal come first."""
    parts = sorted(enumerate(result.partitions), key=lambda x: (x[1].verdict != "illegal", x[0]))
    data = [_partition_data(model, p, n) for n, p in parts]
    fill = {"__TITLE__": html.escape(title or f"linearizability: {result.model}"),
            "__SUMMARY__": html.escape(result.summary()), "__DATA__": _script_json(data)}
    # one pass: a placeholder's text inside a value is never itself replaced
    page = re.sub("__(?:TITLE|SUMMARY|DATA)__", lambda m: fill[m.group(0)], _PAGE)
    path = Path(path)
    path.write_text(page)
    return path


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body { font: 13px system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; margin: 0 0 4px; }
.summary { color: #555; margin-bottom: 10px; }
.legend span { display: inline-block; margin-right: 14px; }
.sw { width: 12px; height: 12px; display: inline-block; vertical-align: middle; margin-right: 4px; border: 1px solid #666; }
select { margin: 8px 0; }
#info { min-height: 3.2em; background: #f6f6f6; padding: 6px 8px; border-radius: 4px; margin: 6px 0; white-space: pre-wrap; font-family: ui-monospace, monospace; }
svg text { font: 11px ui-monospace, monospace; }
.bar { cursor: pointer; }
</style></head><body>
<h1>__TITLE__</h1>
<div class="summary">__SUMMARY__</div>
<div class="legend"><span><i class="sw" style="background:#7bc47f"></i>in the longest linearization (number = its step)</span>
<span><i class="sw" style="background:#d9d9d9"></i>not placed</span>
<span><i class="sw" style="background:#fff;border:2px solid #d62728"></i>where the search got stuck</span>
<span><i class="sw" style="background:repeating-linear-gradient(45deg,#ccc,#ccc 2px,#fff 2px,#fff 4px)"></i>pending (no return)</span></div>
<select id="pick"></select>
<div id="head"></div>
<div id="info">hover an operation</div>
<div id="chart"></div>
<script>
const DATA = __DATA__;
const pick = document.getElementById('pick');
DATA.forEach((p, i) => { const o = document.createElement('option'); o.value = i;
  o.textContent = p.title + ': ' + p.verdict + (p.reason ? ' (' + p.reason + ')' : '') + ', ' + p.ops + ' ops'; pick.appendChild(o); });
function esc(s) { return String(s).replace(/[&<>]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;'})[c]); }
function draw(i) {
  const p = DATA[i];
  document.getElementById('head').textContent = p.verdict + ': ' + p.linearized + ' of ' + p.ops +
    ' operations linearized' + (p.shown < p.ops ? ' (showing ' + p.shown + ' around the failure)' : '');
  const clients = [...new Set(p.rows.map(r => r.client))].sort((a, b) => (+a - +b) || a.localeCompare(b));
  const rowH = 26, left = 70, unit = Math.max(8, Math.min(40, 1400 / p.width));
  const W = left + unit * p.width + 20, H = rowH * clients.length + 30;
  let s = '<svg width="' + W + '" height="' + H + '" xmlns="http://www.w3.org/2000/svg">';
  s += '<defs><pattern id="hatch" width="4" height="4" patternUnits="userSpaceOnUse" patternTransform="rotate(45)">' +
       '<rect width="2" height="4" fill="#ccc"/></pattern></defs>';
  clients.forEach((c, k) => { s += '<text x="4" y="' + (k * rowH + 18) + '">client ' + esc(c) + '</text>' +
    '<line x1="' + left + '" x2="' + W + '" y1="' + (k * rowH + rowH) + '" y2="' + (k * rowH + rowH) + '" stroke="#eee"/>'; });
  p.rows.forEach((r, j) => {
    const k = clients.indexOf(r.client), x = left + r.start * unit, w = Math.max(4, (r.end - r.start) * unit);
    const y = k * rowH + 4, fill = r.pending ? 'url(#hatch)' : (r.step >= 0 ? '#7bc47f' : '#d9d9d9');
    const stroke = r.id === p.blocked ? '#d62728' : '#666', sw = r.id === p.blocked ? 3 : 1;
    s += '<g class="bar" data-j="' + j + '"><rect x="' + x + '" y="' + y + '" width="' + w + '" height="' + (rowH - 8) +
         '" fill="' + fill + '" stroke="' + stroke + '" stroke-width="' + sw + '" rx="3"/>';
    if (r.step >= 0) s += '<text x="' + (x + 3) + '" y="' + (y + 13) + '">' + r.step + '</text>';
    s += '</g>';
  });
  s += '</svg>';
  const chart = document.getElementById('chart');
  chart.innerHTML = s;
  const show = r => {
    document.getElementById('info').textContent = 'client ' + r.client + ': ' + r.desc +
      (r.index !== null ? '   (history index ' + r.index + ')' : '') + '\\n' +
      (r.step >= 0 ? 'step ' + r.step + ' of the linearization; state after: ' + r.state
                   : (r.id === p.blocked ? 'the search got stuck here: this operation returned before it could take effect'
                                         : 'not in the longest linearization'));
  };
  chart.querySelectorAll('.bar').forEach(g => g.addEventListener('mouseenter', () => show(p.rows[+g.dataset.j])));
  const stuck = p.rows.find(r => r.id === p.blocked);
  if (stuck) show(stuck); else document.getElementById('info').textContent = 'hover an operation';
}
pick.addEventListener('change', () => draw(+pick.value));
if (DATA.length) draw(0);
</script></body></html>
"""
