"""Consumer-group safety and liveness, judged from the members' rebalance logs.

Each member's op completions carry its ``rebalance_log``: ``assigned`` entries (with the
generation and everything the member ``owned`` afterwards) and ``revoked`` entries. A claim
is "process P owns key k in generation g" from the completion of the op that reported it
until P reports k revoked, reports a newer assignment, or crashes.

* ``double-ownership``: two processes own one partition in the same generation at
  overlapping times (the coordinator handed one partition to two members);
* ``fenced-commit``: a commit with generation g succeeded although it was sent after
  another member had already been assigned a newer generation (the coordinator accepted a
  commit from a fenced member);
* ``cooperative-revoked-unmoved``: with cooperative-sticky, a member revoked a partition
  before it knew the next assignment (eager-style, in an older generation), and the next
  assignment gave that partition straight back to it;
* ``processed-twice``: with at-most-once delivery (``groups.delivery``), a record processed
  by two commits (:func:`check_at_most_once`);
* ``unowned-partition``: after every fault healed, the members' final assignments in the
  newest generation leave a partition without an owner (or members did not converge on one
  generation).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

INF = float("inf")


def check_groups(ops: list[dict], config: dict, add) -> None:
    """Report group anomalies through ``add(kind, **evidence)``."""
    groups = config.get("groups")
    if not groups:
        return
    completions = [o for o in ops if o["process"] != "nemesis" and o["type"] != "invoke"]
    invokes = {}
    open_invoke: dict[Any, dict] = {}
    for o in ops:
        if o["process"] == "nemesis":
            continue
        if o["type"] == "invoke":
            open_invoke[o["process"]] = o
        else:
            inv = open_invoke.pop(o["process"], None)
            if inv is not None:
                invokes[o["index"]] = inv

    # claims: (process, key, generation, start, op) and their ends
    claims: list[dict] = []
    current: dict[Any, dict[str, dict]] = defaultdict(dict)  # process -> key -> open claim
    assigned_at: list[tuple[int, float, Any, int]] = []  # (generation, time, process, op)
    members_at: dict[int, set] = defaultdict(set)
    owned_at: dict[tuple[Any, int], set] = {}
    revocations: list[tuple[Any, str, int, int]] = []  # (process, key, generation, op)
    pending_revoked: dict[Any, list[tuple[str, int]]] = defaultdict(list)  # process -> (key, op)
    next_assignment: dict[tuple[Any, int, str], tuple[int, set, int]] = {}
    final_state: dict[Any, tuple[int, set, int]] = {}
    crash_time: dict[Any, float] = {}

    def close(process, key, t):
        c = current[process].pop(key, None)
        if c is not None:
            c["end"] = t

    for o in completions:
        p, t = o["process"], o["time"]
        if o["f"] == "crash":
            crash_time[p] = invokes.get(o["index"], o)["time"]
            for key in list(current[p]):
                close(p, key, crash_time[p])
            continue
        for e in o.get("rebalance_log") or []:
            gen = e.get("generation", -1)
            keys = [str(k) for k in e.get("keys", [])]
            if e.get("type") == "revoked":
                for k in keys:
                    close(p, k, t)
                    if not e.get("lost"):
                        revocations.append((p, k, gen, o["index"]))
                        pending_revoked[p].append((k, o["index"]))
            elif e.get("type") == "assigned":
                owned = {str(k) for k in e.get("owned", keys)}
                for k, rop in pending_revoked.pop(p, []):
                    next_assignment[(p, rop, k)] = (gen, owned, o["index"])
                for k in list(current[p]):
                    close(p, k, t)
                for k in sorted(owned):
                    c = {"process": p, "key": k, "generation": gen, "start": t, "end": INF,
                         "op": o["index"]}
                    claims.append(c)
                    current[p][k] = c
                assigned_at.append((gen, t, p, o["index"]))
                members_at[gen].add(p)
                owned_at[(p, gen)] = owned
                final_state[p] = (gen, owned, o["index"])
    # a process ends with its last op (after an info op the client goes on as a new process)
    last_seen: dict[Any, float] = {}
    for o in completions:
        last_seen[o["process"]] = max(last_seen.get(o["process"], 0), o["time"])
    for c in claims:
        c["end"] = min(c["end"], last_seen.get(c["process"], INF))
    _double_ownership(claims, add)
    _fenced_commits(completions, invokes, assigned_at, add)
    if groups.get("assignor") == "cooperative-sticky":
        _cooperative(revocations, next_assignment, add)
    if groups.get("final_polls"):
        _final(ops, config, final_state, crash_time, add)
    if groups.get("delivery") == "at-most-once":
        check_at_most_once(ops, groups, add)


def check_at_most_once(ops: list[dict], groups: dict, add) -> None:
    """At-most-once delivery (``groups.delivery``): a member processes the records of a poll
    when its next op, a commit of the positions after them, succeeds; no record may be
    processed twice, by one member or by two. A crash, a rejoin or another poll before the
    commit drops the poll's records (lost to the group: allowed)."""
    keys = set(groups.get("keys") or [])
    polled: dict[Any, tuple[int, dict[str, list]]] = {}  # process -> (poll op, records by key)
    processed: dict[tuple[str, Any], tuple[Any, int, int, int]] = {}  # (key, value) -> (process, offset, poll, commit)
    for o in ops:
        p, f, t = o["process"], o["f"], o["type"]
        if p == "nemesis" or t == "invoke":
            continue
        if f == "poll" and t == "ok":
            reads = {key: records for mop in o["value"] or [] if mop[0] == "poll" and len(mop) > 1
                     for key, records in mop[1].items() if not keys or key in keys}
            polled[p] = (o["index"], reads)
            continue
        last = polled.pop(p, None)
        if f != "commit" or t != "ok" or last is None or not isinstance(o["value"], dict):
            continue
        poll_op, reads = last
        for key, upto in sorted(o["value"].items()):
            for offset, value, *_ in reads.get(key, ()):
                if value is None or upto is None or offset >= upto:
                    continue
                first = processed.setdefault((key, value), (p, offset, poll_op, o["index"]))
                if first[3] == o["index"]:
                    continue
                fp, foff, fpoll, fcommit = first
                add("processed-twice", key=key, value=value, offsets=[foff, offset],
                    ops=[fpoll, fcommit, poll_op, o["index"]],
                    explanation=f"value {value} of {key} was processed twice: by process {fp} (poll op {fpoll}, "
                                f"its commit op {fcommit} succeeded) and by process {p} (poll op {poll_op}, "
                                f"commit op {o['index']} succeeded), though each commits before it "
                                f"processes (at-most-once delivery)")


def _double_ownership(claims: list[dict], add) -> None:
    by: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for c in claims:
        by[(c["key"], c["generation"])].append(c)
    for (key, gen), cs in sorted(by.items()):
        cs.sort(key=lambda c: c["start"])
        for i, a in enumerate(cs):
            for b in cs[i + 1:]:
                if b["process"] != a["process"] and b["start"] <= a["end"] and a["start"] <= b["end"]:
                    add("double-ownership", key=key, generation=gen, ops=[a["op"], b["op"]],
                        explanation=f"processes {a['process']} and {b['process']} both owned {key} "
                                    f"in generation {gen} at the same time")


def _fenced_commits(completions, invokes, assigned_at, add) -> None:
    newest: list[tuple[float, int, Any, int]] = sorted((t, g, p, op) for g, t, p, op in assigned_at)
    for o in completions:
        if o["f"] != "commit" or o["type"] != "ok" or not isinstance(o.get("generation"), int):
            continue
        gen = o["generation"]
        if gen < 0:
            continue
        sent = invokes.get(o["index"], o)["time"]
        for t, g, p, op in newest:
            if t >= sent:
                break
            if g > gen and p != o["process"]:
                add("fenced-commit", key=None, generation=gen, newer=g, ops=[op, o["index"]],
                    explanation=f"process {o['process']} committed {o['value']} with generation "
                                f"{gen} (op {o['index']}), sent after process {p} had been "
                                f"assigned generation {g} (op {op}): a fenced member's commit "
                                f"was accepted")
                break


def _cooperative(revocations, next_assignment, add) -> None:
    """A cooperative member revokes a partition only when the assignment of the generation it
    just joined moves it away: its revocation then carries that new generation. A revocation
    of an older generation (before joining, eager-style) of a partition the next assignment
    gives straight back to the same member was a revocation of an unmoved partition."""
    for p, k, gen, op in revocations:
        nxt = next_assignment.get((p, op, k))
        if nxt is None:
            continue
        next_gen, owned, next_op = nxt
        if gen < next_gen and k in owned:
            add("cooperative-revoked-unmoved", key=k, generation=gen, ops=[op, next_op],
                explanation=f"process {p} revoked {k} in generation {gen} before rejoining, "
                            f"and generation {next_gen} gave it straight back: a cooperative "
                            f"member revokes only partitions that move")


def _final(ops, config, final_state, crash_time, add) -> None:
    final = config.get("final_read") or {}
    heal = final.get("heal_ns")
    if heal is None:
        return
    alive = {o["process"] for o in ops if o["process"] != "nemesis" and o["type"] == "invoke"
             and o["f"] == "poll" and o["time"] >= heal and o["process"] in final_state}
    members = {p: final_state[p] for p in alive if p not in crash_time}
    if not members:
        return
    top = max(g for g, _o, _op in members.values())
    keys = set((config.get("groups") or {}).get("keys") or [])
    owned = set().union(*(o for g, o, _op in members.values() if g == top))
    behind = sorted(str(p) for p, (g, _o, _op) in members.items() if g < top)
    missing = sorted(keys - owned) if keys else []
    if missing or behind:
        add("unowned-partition", key=None, generation=top, missing=missing, behind=behind,
            ops=sorted(op for _g, _o, op in members.values()),
            explanation=f"after healing, the newest generation {top} leaves {missing or 'no'} "
                        f"partition(s) unowned; members still behind it: {behind or 'none'}")
