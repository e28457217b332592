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
* ``reassigned-before-revoked``: a member of generation g was given a partition that
  another member of g still held until g (it revoked the partition only in g, as a
  cooperative member does, or its assignment in g simply left it out): the partition may go
  to a new owner only in a generation after the one its previous owner revoked it in
  (KIP-429's two phases; with the eager protocol every revocation comes before the join);
* ``expired-member-commit``: a member paused for longer than its session timeout
  (``session.timeout.ms``; the nemesis op names its ``processes``) committed with the
  generation it held before the pause, and the commit was accepted, although the coordinator
  must have removed the member meanwhile (static members too, KIP-345); judged only where no
  other fault could have delayed the expiry;
* ``committed-offset-regressed``: an accepted commit set a partition's offset below one
  another commit had set before it was sent (neither was an explicit seek): a committed
  offset never goes backwards, unless a commit whose outcome was unknown may have set the
  lower one;
* ``processed-twice``: with at-most-once delivery (``groups.delivery``), a record processed
  by two commits (:func:`check_at_most_once`);
* with KIP-848's consumer protocol (``groups.protocol == "consumer"``), where each member's
  epoch is its own, ``fenced-commit`` and ``reassigned-before-revoked`` (generations compared
  across members) give way to ``assigned-before-released``
  (:mod:`properties.consumer_group_checks`); a "generation" there is a member epoch;
* ``unowned-partition``: after every fault healed, the members' final assignments in the
  newest generation leave a partition without an owner (or members did not converge on one
  generation). With the consumer protocol, where a member whose partitions did not change
  learns the group's newest epoch only at its next heartbeat, the members' final
  assignments, each at its own epoch, leave a partition without an owner, or give one to two
  members, or a member has no epoch of the group (below 1). In a run with real clients, also
  when no member reported an assignment after healing and the run says its members did not
  settle (``groups.settled`` false).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from properties.consumer_group_checks import check_consumer_protocol

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
    timeline: dict[Any, list[tuple[str, int, set, bool, int]]] = defaultdict(list)
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
                timeline[p].append(("revoked", gen, set(keys), bool(e.get("lost")), o["index"]))
                for k in keys:
                    close(p, k, t)
                    if not e.get("lost"):
                        revocations.append((p, k, gen, o["index"]))
                        pending_revoked[p].append((k, o["index"]))
            elif e.get("type") == "assigned":
                owned = {str(k) for k in e.get("owned", keys)}
                timeline[p].append(("assigned", gen, owned, False, o["index"]))
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
        if o["f"] == "subscribe" and o["type"] == "ok":
            # a (re)join: a member that left the group released everything it held, whether
            # or not its client reported the revocation (a closing client may not)
            timeline[p].append(("left", -1, set(), True, o["index"]))
    # a process ends with its last op (after an info op the client goes on as a new process)
    last_seen: dict[Any, float] = {}
    for o in completions:
        last_seen[o["process"]] = max(last_seen.get(o["process"], 0), o["time"])
    for c in claims:
        c["end"] = min(c["end"], last_seen.get(c["process"], INF))
    _double_ownership(claims, add)
    if groups.get("protocol") == "consumer":  # KIP-848: member epochs are each member's own
        check_consumer_protocol(completions, invokes, add, groups.get("commit_epochs"))
    else:
        _fenced_commits(completions, invokes, assigned_at, add)
        _reassigned_before_revoked(timeline, add)
    _expired_member_commits(ops, config, completions, invokes, timeline, add)
    _committed_offset_regressed(completions, invokes, add)
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
                # (strictly: a client that goes on as a new process after an op whose outcome
                # is unknown hands its partitions to the new process at the old one's last op)
                if b["process"] != a["process"] and b["start"] < a["end"] and a["start"] < b["end"]:
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


def _reassigned_before_revoked(timeline: dict[Any, list], add) -> None:
    """A partition moves to a new owner in a generation after the one its previous owner
    revoked it in. Each member's log says, for every generation it joined, which partitions it
    held until that generation (revoked in it, as cooperative members do, or left out of its
    assignment); no other member may be given one of them in that same generation. A
    revocation because the member was dropped (``lost``) releases at once."""
    released: dict[tuple[int, str], list[tuple[Any, int]]] = defaultdict(list)  # (gen, key) -> (process, op)
    owners: dict[tuple[int, str], list[tuple[Any, int]]] = defaultdict(list)
    for p, entries in timeline.items():
        held: set[str] = set()
        revoked: dict[str, tuple[int, bool, int]] = {}  # since the last assignment: key -> (gen, lost, op)
        for kind, gen, keys, lost, op in entries:
            if kind == "left":
                held, revoked = set(), {}
                continue
            if kind == "revoked":
                for k in keys & held:
                    held.discard(k)
                    revoked[k] = (gen, lost, op)
                continue
            if gen < 0:
                continue
            for k in keys:
                owners[(gen, k)].append((p, op))
            for k, (rgen, rlost, rop) in revoked.items():
                if not rlost and rgen >= gen:
                    released[(gen, k)].append((p, rop))
            for k in held - keys:
                released[(gen, k)].append((p, op))
            held, revoked = set(keys), {}
    for (gen, k), gone in sorted(released.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        for q, qop in owners.get((gen, k), ()):
            for p, rop in gone:
                if p != q:
                    add("reassigned-before-revoked", key=k, generation=gen, ops=[rop, qop],
                        explanation=f"process {p} held {k} until generation {gen} (op {rop}), in "
                                    f"which process {q} was given it (op {qop}): a partition goes to "
                                    f"a new owner only in a generation after its previous owner "
                                    f"revoked it")


# how long after a fault the group coordinator may still be moving or reloading the group
# (a reloaded group's members get a fresh session): the expiry check wants this much calm
EXPIRY_CALM_MS = 10_000
EXPIRY_SLACK_MS = 1_000  # a heartbeat in flight when the pause began


def _disturbed(ops: list[dict]) -> list[tuple[float, float]]:
    """The intervals in which some fault other than a pause of group members was on: a
    network fault until the next heal, a crash until its node restarts, a broker pause until
    it resumes, a disk fault until it heals, a clock skew until it is zero; anything else
    (an election, an unknown fault) at its instant."""
    out: list[tuple[float, float]] = []
    network: float | None = None
    down: dict[Any, float] = {}
    for o in ops:
        if o["process"] != "nemesis" or o["type"] != "info":
            continue
        f, t, v = o["f"], o["time"], o.get("value")
        v = v if isinstance(v, dict) else {}
        if v.get("processes"):
            continue  # a member paused or resumed: what the expiry check looks at
        nodes = v.get("nodes") or ([v["node"]] if "node" in v else [])
        if f in ("partition", "loss", "duplicate", "reorder", "straggle", "delay"):
            network = t if network is None else network
        elif f == "heal":
            if network is not None:
                out.append((network, t))
                network = None
            for n in [n for n in down if n[0] == "heal"]:
                out.append((down.pop(n), t))
        elif (f in ("kill", "pause", "disk-fault", "clock-skew", "offline-partition")
              and not (f == "clock-skew" and not v.get("skew_ms"))):
            disk_undo = "disk-heal" if v.get("kind") in ("full", "slow-flush") else "restart"
            offline_undo = "resume" if v.get("how", "pause") == "pause" else "restart"
            undo = {"pause": "resume", "clock-skew": "clock-skew", "disk-fault": disk_undo,
                    "offline-partition": offline_undo}.get(f, "restart")
            for n in nodes:
                down.setdefault((undo, str(n)), t)
        elif f in ("restart", "resume", "disk-heal", "clock-skew"):
            for n in nodes:
                start = down.pop((f, str(n)), None)
                if start is not None:
                    out.append((start, t))
        elif f == "hold-back":
            out.append((t, t + v.get("ms", 0) * 1e6))
        else:
            out.append((t, t))
    out.extend((t, INF) for t in down.values())
    if network is not None:
        out.append((network, INF))
    return out


def _expired_member_commits(ops, config, completions, invokes, timeline, add) -> None:
    session_ms = (config.get("timings_ms") or {}).get("member_session_timeout_ms")
    if not session_ms:
        return
    paused: dict[Any, float] = {}
    pauses: dict[Any, list[tuple[float, float]]] = defaultdict(list)
    for o in ops:
        v = o.get("value")
        if o["process"] != "nemesis" or o["type"] != "info" or not isinstance(v, dict):
            continue
        for p in v.get("processes") or ():
            if o["f"] == "pause":
                paused[p] = o["time"]
            elif o["f"] == "resume" and p in paused:
                pauses[p].append((paused.pop(p), o["time"]))
    if not pauses:
        return
    disturbed = _disturbed(ops)
    op_time = {o["index"]: o["time"] for o in completions}
    for o in completions:
        p = o["process"]
        if o["f"] != "commit" or o["type"] != "ok" or p not in pauses or not isinstance(o.get("generation"), int):
            continue
        sent = invokes.get(o["index"], o)["time"]
        for start, end in pauses[p]:
            if end > sent or (end - start) / 1e6 <= session_ms + EXPIRY_SLACK_MS:
                continue
            held = [(gen, op) for kind, gen, _k, _l, op in timeline.get(p, ())
                    if kind == "assigned" and op_time.get(op, INF) <= start]
            if not held or held[-1][0] != o["generation"] or held[-1][0] < 0:
                continue
            if any(a <= o["time"] and b + EXPIRY_CALM_MS * 1e6 >= start for a, b in disturbed):
                continue
            add("expired-member-commit", key=None, generation=o["generation"], ops=[held[-1][1], o["index"]],
                explanation=f"process {p} was paused for {(end - start) / 1e6:.0f} ms, longer than its "
                            f"session timeout ({session_ms} ms), and then committed {o['value']} with the "
                            f"generation {o['generation']} it held before (op {o['index']}); the commit was "
                            f"accepted, though the coordinator must have removed the member meanwhile")
            break


def _committed_offset_regressed(completions, invokes, add) -> None:
    """Accepted commits, in the order they were sent: one sent after another was answered
    may not set a lower offset, unless a commit whose outcome is unknown could have."""
    acked: dict[str, list[tuple[float, int, int]]] = defaultdict(list)  # key -> (answered, offset, op)
    unknown: dict[str, list[int]] = defaultdict(list)
    commits = [o for o in completions if o["f"] == "commit" and isinstance(o.get("value"), dict)]
    for o in commits:
        if o["type"] == "info":
            for k, off in o["value"].items():
                if isinstance(off, int):
                    unknown[str(k)].append(off)
    for o in sorted((o for o in commits if o["type"] == "ok"), key=lambda o: invokes.get(o["index"], o)["time"]):
        sent = invokes.get(o["index"], o)["time"]
        for k, off in sorted(o["value"].items()):
            k = str(k)
            if not isinstance(off, int):
                continue
            before = [(t, hi, op) for t, hi, op in acked[k] if t < sent and hi > off]
            if before and not any(u <= off for u in unknown[k]):
                _t, hi, op = max(before, key=lambda x: x[1])
                add("committed-offset-regressed", key=k, offsets=[hi, off], ops=[op, o["index"]],
                    explanation=f"commit op {op} set the committed offset of {k} to {hi}; commit op "
                                f"{o['index']}, sent after it was answered, set it back to {off} and was "
                                f"accepted")
            acked[k].append((o["time"], off, o["index"]))


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
    keys = set((config.get("groups") or {}).get("keys") or [])
    if not members:
        if (config.get("groups") or {}).get("settled") is False:
            # a run with real clients whose members never reported an assignment after healing
            # (a simulated member goes on as a new process without one: no verdict from that)
            add("unowned-partition", key=None, generation=-1, missing=sorted(keys), behind=[], ops=[],
                explanation="after healing no member reported an assignment, and the members did not "
                            "settle (groups.settled is false): no partition was owned")
        return
    top = max(g for g, _o, _op in members.values())
    if (config.get("groups") or {}).get("protocol") == "consumer":
        _final_own_epochs(members, keys, top, add)
        return
    owned = set().union(*(o for g, o, _op in members.values() if g == top))
    behind = sorted(str(p) for p, (g, _o, _op) in members.items() if g < top)
    missing = sorted(keys - owned) if keys else []
    if missing or behind:
        add("unowned-partition", key=None, generation=top, missing=missing, behind=behind,
            ops=sorted(op for _g, _o, op in members.values()),
            explanation=f"after healing, the newest generation {top} leaves {missing or 'no'} "
                        f"partition(s) unowned; members still behind it: {behind or 'none'}")


def _final_own_epochs(members: dict[Any, tuple[int, set, int]], keys: set[str], top: int, add) -> None:
    """``unowned-partition`` of KIP-848's protocol: the final assignments, each at its member's
    own epoch, cover every partition once, and every member has an epoch of the group."""
    owners: dict[str, list] = defaultdict(list)
    for p, (_g, owned, _op) in members.items():
        for k in owned:
            owners[k].append(p)
    missing = sorted(keys - set(owners)) if keys else []
    shared = sorted(k for k, ps in owners.items() if len(ps) > 1)
    unjoined = sorted(str(p) for p, (g, _o, _op) in members.items() if g < 1)
    if missing or shared or unjoined:
        add("unowned-partition", key=None, generation=top, missing=missing, shared=shared, behind=unjoined,
            ops=sorted(op for _g, _o, op in members.values()),
            explanation=f"after healing, the members' final assignments (each at its own member epoch) leave "
                        f"{missing or 'no'} partition(s) unowned and give {shared or 'none'} to two members; "
                        f"members without an epoch of the group: {unjoined or 'none'}")
