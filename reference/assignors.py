"""Partition assignors, run by the group leader (the consumer side of Kafka's protocol).

Each takes the members' subscriptions (member id -> topics), the partition count of each
topic, and the partitions each member owns now, and returns member id -> partitions.

* ``range``: per topic, the members subscribed to it in member-id order each get a
  contiguous range; the first ``n % m`` get one more (Kafka's RangeAssignor).
* ``roundrobin``: all partitions in (topic, partition) order dealt one by one to the
  members in member-id order, skipping members not subscribed to the topic.
* ``sticky``: as balanced as possible (no partition could move to an eligible member with
  at least two fewer), moving as few partitions as possible: members keep what they own
  while that does not break the balance.
* ``cooperative-sticky``: the sticky target, but a partition that changes owner is given to
  nobody in this round: its old owner revokes it first, rejoins, and the next round hands it
  over (KIP-429's two phases).

The server-side assignors of KIP-848's consumer groups (:func:`server_assign`), run by the
group coordinator over the previous target assignment:

* ``uniform`` (the default): the ``sticky`` assignment above, balanced first, then sticky;
* ``range``: the ``range`` assignment, static members first in instance-id order (so that a
  static member that comes back keeps its ranges), then the others in member-id order.
"""

from __future__ import annotations

from reference.messages import TopicPartition

ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")
SERVER_ASSIGNORS = ("uniform", "range")  # KIP-848's; the first is the default


def _all_partitions(subscriptions: dict[str, list[str]], partitions: dict[str, int]) -> list[TopicPartition]:
    topics = sorted({t for ts in subscriptions.values() for t in ts if t in partitions})
    return [TopicPartition(t, p) for t in topics for p in range(partitions[t])]


Assignment = dict[str, list[TopicPartition]]


def range_assign(subscriptions: dict[str, list[str]], partitions: dict[str, int]) -> Assignment:
    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    for topic in sorted({t for ts in subscriptions.values() for t in ts}):
        n = partitions.get(topic, 0)
        members = sorted(m for m, ts in subscriptions.items() if topic in ts)
        if not members or not n:
            continue
        per, extra = divmod(n, len(members))
        start = 0
        for i, m in enumerate(members):
            count = per + (1 if i < extra else 0)
            out[m].extend(TopicPartition(topic, p) for p in range(start, start + count))
            start += count
    return out


def roundrobin_assign(subscriptions: dict[str, list[str]], partitions: dict[str, int]) -> Assignment:
    out: dict[str, list[TopicPartition]] = {m: [] for m in subscriptions}
    members = sorted(subscriptions)
    if not members:
        return out
    i = 0
    for tp in _all_partitions(subscriptions, partitions):
        for _ in range(len(members)):
            m = members[i % len(members)]
            i += 1
            if tp.topic in subscriptions[m]:
                out[m].append(tp)
                break
    return out


def sticky_assign(subscriptions: dict[str, list[str]], partitions: dict[str, int],
                  owned: dict[str, list[TopicPartition]] | None = None) -> dict[str, list[TopicPartition]]:
    owned = owned or {}
    members = sorted(subscriptions)
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    if not members:
        return out
    valid = set(_all_partitions(subscriptions, partitions))
    taken: set[TopicPartition] = set()
    # 1. keep what is still valid (a partition claimed twice stays with the first claimant)
    for m in members:
        for tp in sorted(owned.get(m, [])):
            if tp in valid and tp not in taken and tp.topic in subscriptions[m]:
                out[m].append(tp)
                taken.add(tp)
    # 2. trim members above their fair share so that the rest can be balanced with few moves
    total = len(valid)
    eligible_all = all(set(subscriptions[m]) >= {tp.topic for tp in valid} for m in members)
    if eligible_all:
        base, extra = divmod(total, len(members))
        # members that keep the most get the "+1" slots first: fewer moves
        order = sorted(members, key=lambda m: (-len(out[m]), m))
        quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(order)}
        for m in members:
            while len(out[m]) > quota[m]:
                taken.discard(out[m].pop())
    # 3. hand out the rest, each to the eligible member with the fewest; the partitions
    # fewest members can take go first (they have the least choice)
    def choice(tp: TopicPartition) -> tuple[int, TopicPartition]:
        return sum(1 for m in members if tp.topic in subscriptions[m]), tp

    for tp in sorted(valid - taken, key=choice):
        candidates = [m for m in members if tp.topic in subscriptions[m]]
        if candidates:
            m = min(candidates, key=lambda c: (len(out[c]), c))
            out[m].append(tp)
            taken.add(tp)
    # 4. balance: move a partition to an eligible member with at least two fewer
    moved = True
    while moved:
        moved = False
        for m in sorted(members, key=lambda x: (-len(out[x]), x)):
            for tp in sorted(out[m], reverse=True):
                target = min((c for c in members if tp.topic in subscriptions[c]
                              and len(out[c]) <= len(out[m]) - 2),
                             key=lambda c: (len(out[c]), c), default=None)
                if target is not None:
                    out[m].remove(tp)
                    out[target].append(tp)
                    moved = True
                    break
            if moved:
                break
    return {m: sorted(tps) for m, tps in out.items()}


def cooperative_sticky_assign(subscriptions: dict[str, list[str]], partitions: dict[str, int],
                              owned: dict[str, list[TopicPartition]] | None = None
                              ) -> dict[str, list[TopicPartition]]:
    owned = owned or {}
    target = sticky_assign(subscriptions, partitions, owned)
    owner: dict[TopicPartition, str] = {}
    for m in sorted(owned):
        for tp in owned[m]:
            owner.setdefault(tp, m)
    out = {}
    for m, tps in target.items():
        # a partition still owned by another member waits for its revocation
        out[m] = [tp for tp in tps if owner.get(tp, m) == m or owner[tp] not in subscriptions]
    return out


def assign(name: str, subscriptions: dict[str, list[str]], partitions: dict[str, int],
           owned: dict[str, list[TopicPartition]] | None = None) -> dict[str, list[TopicPartition]]:
    if name == "range":
        return range_assign(subscriptions, partitions)
    if name == "roundrobin":
        return roundrobin_assign(subscriptions, partitions)
    if name == "sticky":
        return sticky_assign(subscriptions, partitions, owned)
    if name == "cooperative-sticky":
        return cooperative_sticky_assign(subscriptions, partitions, owned)
    raise ValueError(f"unknown assignor {name!r}; known: {', '.join(ASSIGNORS)}")


def server_assign(name: str, subscriptions: dict[str, list[str]], partitions: dict[str, int],
                  previous: dict[str, list[TopicPartition]], instances: dict[str, str | None]
                  ) -> dict[str, list[TopicPartition]]:
    """A consumer group's target assignment: member id -> partitions. ``previous``: the
    previous target; ``instances``: each member's ``group.instance.id`` (or None)."""
    if name == "uniform":
        return sticky_assign(subscriptions, partitions, previous)
    if name != "range":
        raise ValueError(f"unknown server assignor {name!r}; known: {', '.join(SERVER_ASSIGNORS)}")
    order = {m: (0, instances[m], m) if instances.get(m) is not None else (1, "", m) for m in subscriptions}
    ranked = sorted(subscriptions, key=lambda m: order[m])
    keyed = {f"{i:09d}": subscriptions[m] for i, m in enumerate(ranked)}
    result = range_assign(keyed, partitions)
    return {m: result[f"{i:09d}"] for i, m in enumerate(ranked)}
