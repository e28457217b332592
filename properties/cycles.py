"""Elle-style dependency cycles over a Kafka history (networkx does the graph work).

Nodes are the ok ops and the info ops that must have committed (:mod:`properties.analysis`).
Edges, each with its type:

* ``ww`` (with ``ww_deps``): from the writer of each value to the writer of the next value
  in its key's version order;
* ``wr``: from the writer of a value to every ok op that read it;
* ``rw`` (anti-dependency, which Jepsen does not build): from an ok op whose last read of a
  key is value v to the writer of the value after v;
* ``process``: from each op to the next op of its process;
* ``realtime``: from each op to every op invoked after it completed, encoded through a
  chain of time nodes so that it costs O(n) edges instead of O(n * concurrency).

Searches, one cycle reported per strongly connected component and type:

* ``G0``: ww edges only (Kafka does not isolate writes: allowed);
* ``G1c``: ww and wr edges with at least one wr; a cycle of wr edges only is a violation,
  with ww edges it is allowed (the writes of two transactions interleave);
* ``G0-process`` / ``G1c-process`` and ``G0-realtime`` / ``G1c-realtime``: the same with
  process or realtime edges, when the cycle needs them;
* ``G-single`` (exactly one rw edge) and ``G2`` (several): read skew. Kafka promises no
  isolation for reads across partitions (markers land per partition and a fetch may stop
  anywhere), so they are reported as allowed. Process and realtime variants of rw cycles
  are not searched: a consumer that lags behind makes them in every Kafka history.

Strongly connected components are found first by an iterative Tarjan over compact
adjacency dicts; only the ops inside a cycle become a networkx graph, where the typed
cycle searches run. The search stops when its budget of work (edges and nodes examined, so
the verdict does not depend on the machine's load) runs out, or at a wall-clock safety net,
and says which and what it did not finish.
"""

from __future__ import annotations

import bisect
import time
from collections import defaultdict, deque
from typing import TYPE_CHECKING, Any

from properties.analysis import Analysis, Op, Report

WW, WR, RW, PROC, RT = 1, 2, 4, 8, 16
NAMES = {WW: "ww", WR: "wr", RW: "rw", PROC: "process", RT: "realtime"}
SHOWN = 50  # cycles explained step by step per type (the checker lists 50 per type)
TRIES = 20  # edges tried per component when looking for an example of an allowed type

if TYPE_CHECKING:
    import networkx as nx


DEFAULT_STEPS = 100_000_000  # edges and search nodes examined: a correct 1M-op history needs 5.7M
DEFAULT_TIME_LIMIT_S = 3600.0  # the outer safety net only; a verdict never hangs on it silently


class Budget:
    """The cycle search's budget, in work: each edge tried and each node a path search expands
    is one step, so the same history gets the same verdict on an idle or a busy machine. A
    wall-clock limit remains as an outer safety net; ``reason`` says which ran out."""

    def __init__(self, steps: int = DEFAULT_STEPS, seconds: float = DEFAULT_TIME_LIMIT_S) -> None:
        self.steps = steps
        self.seconds = seconds
        self.used = 0
        self._next_clock = 0  # read the clock every 4096 steps, and at the first
        self.deadline = time.monotonic() + seconds
        self.reason: str | None = None  # "steps" or "time" once exhausted

    @property
    def exhausted(self) -> bool:
        return self.reason is not None

    def spend(self, n: int = 1) -> bool:
        """Count ``n`` steps; True when the budget is exhausted."""
        self.used += n
        if self.reason is None:
            if self.used > self.steps:
                self.reason = "steps"
            elif self.used >= self._next_clock:
                self._next_clock = self.used + 4096
                if time.monotonic() > self.deadline:
                    self.reason = "time"
        return self.reason is not None

    def out(self) -> bool:
        return self.reason is not None

    def explain(self) -> str:
        if self.reason == "time":
            return (f"the cycle search hit its wall-clock safety net ({self.seconds:g} s) after "
                    f"{self.used:,} of its {self.steps:,} steps; cycles it did not reach are unchecked")
        return (f"the cycle search used up its budget of {self.steps:,} steps (edges and path-search "
                f"nodes examined); cycles it did not reach are unchecked")


class _Graph:
    """Typed edges between dense node ids; ids >= n_ops are realtime time nodes."""

    def __init__(self) -> None:
        self.adj: dict[int, dict[int, int]] = defaultdict(dict)
        self.n_edges = 0

    def link(self, u: int, v: int, t: int) -> None:
        if u != v:
            d = self.adj[u]
            old = d.get(v)
            if old is None:
                self.n_edges += 1
                d[v] = t
            else:
                d[v] = old | t

    def components(self, mask: int) -> list[list[int]]:
        """Strongly connected components (more than one node) of the edges with a type in
        ``mask``: an iterative Tarjan over the compact adjacency, linear in the graph."""
        adj = self.adj
        index: dict[int, int] = {}
        low: dict[int, int] = {}
        on_stack: set[int] = set()
        stack: list[int] = []
        out: list[list[int]] = []
        counter = 0
        for root in list(adj):
            if root in index:
                continue
            index[root] = low[root] = counter
            counter += 1
            stack.append(root)
            on_stack.add(root)
            work = [(root, iter(adj[root].items()))]
            while work:
                node, it = work[-1]
                advanced = False
                for w, t in it:
                    if not t & mask:
                        continue
                    if w not in index:
                        index[w] = low[w] = counter
                        counter += 1
                        stack.append(w)
                        on_stack.add(w)
                        work.append((w, iter(adj[w].items()) if w in adj else iter(())))
                        advanced = True
                        break
                    if w in on_stack and index[w] < low[node]:
                        low[node] = index[w]
                if advanced:
                    continue
                work.pop()
                if work:
                    parent = work[-1][0]
                    if low[node] < low[parent]:
                        low[parent] = low[node]
                if low[node] == index[node]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == node:
                            break
                    if len(comp) > 1:
                        out.append(comp)
        return out

    def nx_graph(self, comps: list[list[int]], mask: int) -> nx.DiGraph:
        import networkx as nx  # only a history with a cycle pays for importing it

        g = nx.DiGraph()
        for comp in comps:
            nodes = set(comp)
            g.add_nodes_from(nodes)
            for u in comp:
                for v, t in self.adj.get(u, {}).items():
                    if t & mask and v in nodes:
                        g.add_edge(u, v, t=t & mask)
        return g


def build(a: Analysis, ww_deps: bool) -> tuple[_Graph, list[Op]]:
    nodes = [op for op in a.ops if op.f in ("send", "poll", "txn") and op.completed
             and (op.type == "ok" or op.index in a.committed)]
    g = _Graph()
    writer_id: dict[tuple[str, Any], int] = {}
    for i, op in enumerate(nodes):
        for key, _o, v in op.sends:
            writer_id[(key, v)] = i
    if ww_deps:
        for key, o in a.orders.items():
            prev = None
            for v in o.by_index:
                w = writer_id.get((key, v))
                if w is not None and prev is not None:
                    g.link(prev, w, WW)
                if w is not None:
                    prev = w
                else:
                    prev = None  # a value nobody committed sits between: no known edge
    for i, op in enumerate(nodes):
        if op.type != "ok" or not op.polls:
            continue
        for key, vs in op.reads().items():
            o = a.orders.get(key)
            top = -1
            for v in vs:
                w = writer_id.get((key, v))
                if w is not None:
                    g.link(w, i, WR)
                if o is not None:
                    top = max(top, o.first.get(v, -1))
            if o is not None and 0 <= top < len(o.by_index) - 1:
                w = writer_id.get((key, o.by_index[top + 1]))
                if w is not None:
                    g.link(i, w, RW)
    last_of: dict[Any, int] = {}
    for i, op in enumerate(nodes):
        prev = last_of.get(op.process)
        if prev is not None:
            g.link(prev, i, PROC)
        last_of[op.process] = i
    # realtime: op -> time node of the first invocation after its completion -> ... -> op
    invokes = sorted((op.invoke_time, i) for i, op in enumerate(nodes))
    times = [t for t, _i in invokes]
    base = len(nodes)
    for j, (_t, i) in enumerate(invokes):
        g.link(base + j, i, RT)
        if j + 1 < len(invokes):
            g.link(base + j, base + j + 1, RT)
    for i, op in enumerate(nodes):
        j = bisect.bisect_right(times, op.time)
        if j < len(invokes):
            g.link(i, base + j, RT)
    return g, nodes


def _cycle_through(succ, comp: set, u: int, v: int, allowed: int, budget: Budget) -> list[int] | None:
    """Shortest path v -> u inside ``comp`` over edges with a type in ``allowed``, closing the
    edge u -> v. None when there is none, or when the budget ran out first (the caller sees
    ``budget.out()``)."""
    prev = {v: None}
    queue = deque([v])
    while queue:
        x = queue.popleft()
        if budget.spend(1 + len(succ[x])):
            return None
        if x == u:
            path = [u]
            while prev[path[-1]] is not None:
                path.append(prev[path[-1]])
            path.reverse()  # v ... u
            return [u, *path[:-1]] if path[0] == v else None
        for y, data in succ[x].items():
            if data["t"] & allowed and y not in prev and y in comp:
                prev[y] = x
                queue.append(y)
    return None


def _search(g: nx.DiGraph, allowed: int, required: int, budget: Budget,
            accept=None, path: int | None = None, tries: int | None = None) -> list[list[int]]:
    """One cycle per strongly connected component of the ``allowed`` edges that uses a
    ``required`` edge (and that ``accept`` takes). Without ``accept`` and ``path`` the first
    try succeeds (every edge of a component lies on a cycle), so the search is complete;
    the example searches for allowed types stop after ``tries`` edges per component."""
    import networkx as nx

    h = nx.DiGraph()
    h.add_edges_from((u, v, {"t": data["t"] & allowed}) for u, v, data in g.edges(data=True)
                     if data["t"] & allowed)
    succ = h.succ  # plain dicts: subgraph views cost more than the search itself
    found = []
    for comp in nx.strongly_connected_components(h):
        if len(comp) < 2:
            continue
        attempts = 0
        done = False
        for u in sorted(comp):
            for v, data in succ[u].items():
                if budget.spend():
                    return found
                if v not in comp or not data["t"] & required:
                    continue
                attempts += 1
                if tries is not None and attempts > tries:
                    done = True
                    break
                cyc = _cycle_through(succ, comp, u, v, allowed if path is None else path, budget)
                if cyc is not None and (accept is None or accept(cyc, h)):
                    found.append(cyc)
                    done = True
                    break
            if done:
                break
    return found


def _edge_types(cyc: list[int], g: nx.DiGraph, prefer: tuple[int, ...]) -> list[int]:
    out = []
    for x, y in zip(cyc, cyc[1:] + cyc[:1], strict=True):
        t = g[x][y]["t"]
        out.append(next(p for p in prefer if t & p))
    return out


def check_cycles(a: Analysis, add: Report, ww_deps: bool, budget: Budget) -> dict:
    """Report every cycle type; returns stats (and whether the budget ran out)."""
    g, nodes = build(a, ww_deps)
    n = len(nodes)
    stats = {"graph_nodes": n, "graph_edges": g.n_edges}

    shown: dict[tuple[str, bool], int] = defaultdict(int)

    def report(kind: str, cyc: list[int], types: list[int], allowed: bool, why: str) -> None:
        shown[(kind, allowed)] += 1
        if shown[(kind, allowed)] > SHOWN:  # counted, not explained: nobody reads the 10,000th
            add(kind, allowed=allowed, cycle=[nodes[i].index for i in cyc if i < n], ops=[])
            return
        steps, ops = _explain(cyc, types, nodes, a, n)
        add(kind, cycle=[s["from"] for s in steps], steps=steps, ops=sorted(set(ops)), allowed=allowed,
            explanation=f"a cycle of {len(steps)} ops: "
                        + "; ".join(s["text"] for s in steps) + f". {why}")

    data_mask = WW | WR
    comps = g.components(data_mask | PROC | RT)
    stats["cyclic_nodes"] = sum(len(c) for c in comps)
    if comps:
        dg = g.nx_graph(comps, data_mask | PROC | RT)
        # plain G0 and G1c
        for cyc in _search(dg, WR, WR, budget):
            report("G1c", cyc, [WR] * len(cyc), False,
                   "Each op read a value the previous one wrote: a read-only dependency cycle, "
                   "impossible when reads see only committed data")
        for cyc in _search(dg, WW | WR, WR, budget, accept=lambda c, s: _has(c, s, WW), tries=TRIES):
            report("G1c", cyc, _edge_types(cyc, dg, (WR, WW)), True,
                   "Write-write and write-read dependencies form a cycle; Kafka does not isolate "
                   "transactions' writes from each other, so it is allowed")
        for cyc in _search(dg, WW, WW, budget):
            report("G0", cyc, [WW] * len(cyc), True,
                   "The ops' writes land in opposite orders in different partitions; Kafka does "
                   "not isolate writes, so it is allowed")
        # process and realtime variants: cycles that need those edges; first, complete, the
        # ones without write-write edges (violations), then examples of the allowed ones
        for extra, name in ((PROC, "process"), (RT, "realtime")):
            for cyc in _search(dg, WR | extra, extra, budget):
                report(f"G1c-{name}", cyc, _edge_types(cyc, dg, (WR, extra)), False,
                       f"The cycle needs {name} order: an op observed a write that, by {name} "
                       f"order, it could not have seen yet")
            for cyc in _search(dg, data_mask | extra, extra, budget, tries=TRIES,
                               accept=lambda c, s: _has(c, s, WW)):
                types = _edge_types(cyc, dg, (WR, WW, extra))
                kind = ("G0" if WR not in types else "G1c") + "-" + name
                report(kind, cyc, types, True,
                       f"The cycle needs {name} order; allowed, since it includes write-write "
                       f"dependencies")
    if budget.out():
        stats.update(budget_exhausted=True, budget_reason=budget.explain(), cycle_steps=budget.used)
        return stats
    # anti-dependency cycles: read skew
    comps = g.components(WW | WR | RW)
    stats["rw_cyclic_nodes"] = sum(len(c) for c in comps)
    if comps:
        rg = g.nx_graph(comps, WW | WR | RW)
        del g, comps  # the whole graph is no longer needed: free it before the searches
        singles = _search(rg, WW | WR | RW, RW, budget, path=WW | WR, tries=TRIES)
        for cyc in singles:
            report("G-single", cyc, _edge_types(cyc, rg, (RW, WR, WW)), True,
                   "An op saw some of another op's writes but missed a later one (read skew); "
                   "Kafka does not isolate reads (markers land per partition and a fetch may "
                   "stop anywhere), so it is allowed")
        for cyc in _search(rg, WW | WR | RW, RW, budget, tries=TRIES,
                           accept=lambda c, s: _count(c, s, RW, WW | WR) > 1):
            report("G2", cyc, _edge_types(cyc, rg, (WR, WW, RW)), True,
                   "Anti-dependencies form a cycle (each op missed a write of the next); Kafka "
                   "does not serialise reads, so it is allowed")
    stats["cycle_steps"] = budget.used
    if budget.out():
        stats.update(budget_exhausted=True, budget_reason=budget.explain())
    return stats


def _has(cyc: list[int], g: nx.DiGraph, t: int) -> bool:
    return any(g[x][y]["t"] & t and not g[x][y]["t"] & WR
               for x, y in zip(cyc, cyc[1:] + cyc[:1], strict=True))


def _count(cyc: list[int], g: nx.DiGraph, t: int, other: int) -> int:
    """Edges of the cycle that can only be of type ``t`` (not of a type in ``other``)."""
    return sum(1 for x, y in zip(cyc, cyc[1:] + cyc[:1], strict=True)
               if g[x][y]["t"] & t and not g[x][y]["t"] & other)


def _explain(cyc: list[int], types: list[int], nodes: list[Op], a: Analysis, n: int):
    """Steps between real ops (time nodes folded into one realtime step)."""
    real = [(i, t) for i, t in zip(cyc, types, strict=True)]
    # rotate so that the cycle starts at an op
    start = next(j for j, (i, _t) in enumerate(real) if i < n)
    real = real[start:] + real[:start]
    steps, ops = [], []
    j = 0
    while j < len(real):
        i, t = real[j]
        k = j + 1
        while k < len(real) and real[k][0] >= n:
            k += 1
        nxt = real[k % len(real)][0] if k < len(real) else real[0][0]
        x, y = nodes[i], nodes[nxt]
        ops.append(x.index)
        steps.append(_step(x, y, t if k == j + 1 else RT, a))
        j = k
    return steps, ops


def _step(x: Op, y: Op, t: int, a: Analysis) -> dict:
    step: dict[str, Any] = {"from": x.index, "to": y.index, "type": NAMES[t]}
    if t == WW:
        ys = {(k, v) for k, _o, v in y.sends}
        for key, _o, v in x.sends:
            o = a.orders.get(key)
            i = o.first.get(v) if o else None
            if i is not None and i + 1 < len(o.by_index) and (key, o.by_index[i + 1]) in ys:
                step.update(key=key, value=v, next_value=o.by_index[i + 1])
                step["text"] = f"op {x.index} sent {v} to {key} just before op {y.index} sent {o.by_index[i + 1]}"
                return step
    elif t == WR:
        xs = {(k, v) for k, _o, v in x.sends}
        for key, vs in sorted(y.reads().items()):  # keys in order: evidence never depends on dict order
            for v in vs:
                if (key, v) in xs:
                    step.update(key=key, value=v)
                    step["text"] = f"op {x.index} sent {v} to {key}, which op {y.index} read"
                    return step
    elif t == RW:
        ys = {(k, v) for k, _o, v in y.sends}
        for key, vs in sorted(x.reads().items()):
            o = a.orders.get(key)
            if not o or not vs:
                continue
            top = max(o.first.get(v, -1) for v in vs)
            if 0 <= top < len(o.by_index) - 1 and (key, o.by_index[top + 1]) in ys:
                step.update(key=key, value=o.by_index[top], next_value=o.by_index[top + 1])
                step["text"] = (f"op {x.index} read {key} only up to {o.by_index[top]}, missing "
                                f"{o.by_index[top + 1]} written by op {y.index}")
                return step
    elif t == PROC:
        step["text"] = f"op {x.index} came before op {y.index} in process {x.process}"
        return step
    if t == RT or "text" not in step:
        step["type"] = "realtime"
        step["text"] = f"op {x.index} completed before op {y.index} was invoked"
    return step
