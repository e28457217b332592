"""The share workload with real clients (``kafkacheck conform --workload share``): share
consumers of Apache Kafka's Java client (KafkaShareConsumer) or librdkafka (confluent-kafka's
ShareConsumer), in explicit acknowledgement mode, against a real broker.

Each member thread records what the simulated members record (docs/reference/trace-format.md):
``subscribe`` when a consumer joins, ``acquire`` (one poll; its records with their delivery
counts), ``ack`` (the types drawn, committed with commitSync; the error of each partition).
A member sometimes holds what it got past the lock before acknowledging it (a stall), and
sometimes leaves (close) and joins again as a new consumer. After healing, the members accept
whatever comes until no record came for :func:`quiet_s` (the final phase).

The clients buffer: records a poll returns may come from a ShareFetch sent during an earlier
poll, even one that returned nothing while the fetch was still out. So each acquire says, as
its ``fetch_time``, the invoke of the poll before the last empty one: no lock it reports can
have begun earlier. A client closed with records still buffered lets the broker release them
with their count spent (the rejoin's ``lost_fetches``); and the clients retry a fetch whose
answer a fault lost without saying so, which ``config.share.unseen_in_faults`` tells the
checker.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from kafkacheck.real.kinds import CLIENTS, make_share_member

if TYPE_CHECKING:
    from kafkacheck.real.real_run import RealRun

POLL_S = 0.5
STALL_P = 0.05  # an acquisition held past its lock before it is acknowledged
LEAVE_P = 0.02  # a member that leaves (closes) and joins again
DELIVERY_LIMIT = 5  # group.share.delivery.count.limit: Kafka's default, not changed
# the lock of a broker kafkacheck starts (group.share.record.lock.duration.ms, with the minimum
# a group may set lowered to match); a broker it did not start: the least a group may set there
SPAWNED_LOCK_MS = 5_000
GROUP_MIN_LOCK_MS = 15_000


class ShareRun:
    """What the share members of one run share: the lock, the group's settings, when a record
    last came (the final phase watches it)."""

    def __init__(self, run: RealRun) -> None:
        self.run = run
        given = run.target.broker_config.get("group.share.record.lock.duration.ms")
        self.lock_ms = (int(given) if given else SPAWNED_LOCK_MS) if run.target.processes else GROUP_MIN_LOCK_MS
        self.last_record = time.monotonic()
        self.mutex = threading.Lock()
        self.quiet = False  # the final phase ended with nothing new coming

    def came(self) -> None:
        with self.mutex:
            self.last_record = time.monotonic()

    def quiet_s(self) -> float:
        """How long the final phase waits with nothing new: every lock expired and the records
        they held delivered again."""
        return 2 * self.lock_ms / 1000 + 5


def spawned_broker_config(kind: str) -> dict[str, str]:
    """The settings a broker kafkacheck starts gets for the share workload (Kafka's names):
    a short lock, and (the reference, where it is a broker setting) earliest."""
    out = {"group.share.record.lock.duration.ms": str(SPAWNED_LOCK_MS)}
    if kind == "kafka":
        out["group.share.min.record.lock.duration.ms"] = str(SPAWNED_LOCK_MS)
    if kind == "reference":
        out["share.auto.offset.reset"] = "earliest"
    return out


def prepare(run: RealRun) -> ShareRun:
    """Before the members join: the group reads from the earliest offset (Kafka's default is
    the latest: records written before the first fetch would never be delivered) and, on a
    broker kafkacheck did not start, with the shortest lock a group may set."""
    s = ShareRun(run)
    if run.target.name == "reference":
        return s  # a broker setting there (spawned_broker_config)
    configs = {"share.auto.offset.reset": "earliest"}
    if not run.target.processes:
        configs["share.record.lock.duration.ms"] = str(s.lock_ms)
    client = CLIENTS[run.kind](run.target.bootstrap, run.timeout_s)
    error = client.alter_group_configs(run.group, configs)
    if error:
        raise RuntimeError(f"could not set the share group's configs {configs}: {error}")
    return s


def member_loop(s: ShareRun, i: int) -> None:
    """Member ``i``: acquire, acknowledge (sometimes after a stall), sometimes leave and join
    again; after healing accept everything, until the run is done."""
    run, h = s.run, s.run.h
    process, member, left = h.new_process(), None, 0
    polls: list[int] = []  # the invoke times of this consumer's polls since it joined
    bound = 0  # the earliest its next records' ShareFetch can have been sent
    while not run.done.is_set():
        if member is None:
            member, bound = _join(s, process, left), h.now()
            polls, left = [], 0
            continue
        if not run.healed.is_set() and run.rng.random() < LEAVE_P:
            run.closed(member)  # what it buffered is released, its deliveries spent unseen
            member, left = None, 1
            continue
        polls.append(h.now())
        h.op(process, "invoke", "acquire", None)
        try:
            recs = member.poll(POLL_S)
        except Exception as e:  # the client in an unknown state: a new one, a new process
            h.op(process, "info", "acquire", None, error=str(e)[:80])
            run.closed(member)
            process, member = h.new_process(), None
            continue
        got: dict[str, list] = {}
        for r in recs:
            got.setdefault(f"{r.topic}:{r.partition}", []).append([r.offset, _int(r.value), r.delivery_count])
        h.op(process, "ok", "acquire", got, fetch_time=bound)
        if not recs:
            bound = polls[-2] if len(polls) > 1 else bound  # a fetch out then may still bring records
            continue
        s.came()
        if not _acknowledge(s, process, member, recs):
            run.closed(member)
            process, member = h.new_process(), None
    if member is not None:
        run.closed(member)


def _join(s: ShareRun, process: int, left: int):
    """A new share consumer subscribed to the run's topic (tried again while the brokers
    cannot be reached, until the run is done); its subscribe op carries the ShareFetch answers
    the consumer before it may have left unseen (``left``)."""
    run, h = s.run, s.run.h
    keys = run.keys()
    while not run.done.is_set():
        try:
            member = run.opened(make_share_member(run.kind, run.target.bootstrap, run.topic, run.group,
                                                  run.timeout_s))
        except Exception:
            time.sleep(0.5)
            continue
        h.op(process, "invoke", "subscribe", keys)
        h.op(process, "ok", "subscribe", keys, **({"lost_fetches": left} if left else {}))
        return member
    return None


def _acknowledge(s: ShareRun, process: int, member, recs) -> bool:
    """Acknowledge what a poll got (each type drawn; accept in the final phase), sometimes after
    holding it past its lock; False when the commit's outcome is unknown (the client is given
    up on)."""
    run, h = s.run, s.run.h
    final = run.healed.is_set()
    if not final and run.rng.random() < STALL_P:
        time.sleep(s.lock_ms / 1000 * (1 + run.rng.random()))
    value: dict[str, list] = {}
    for r in sorted(recs, key=lambda r: (r.topic, r.partition, r.offset)):
        kind = "accept" if final else _draw(run.rng.random())
        member.acknowledge(r, kind)
        value.setdefault(f"{r.topic}:{r.partition}", []).append([r.offset, kind])
    h.op(process, "invoke", "ack", value)
    try:
        result = member.commit()
    except Exception as e:
        h.op(process, "info", "ack", None, error=str(e)[:80])
        return False
    # a partition the answer does not name: its outcome unknown
    errors = {key: (result[key] or "NONE") if key in result else "UNKNOWN" for key in value}
    h.op(process, "ok", "ack", {**value, "errors": errors})
    return True


def _draw(x: float) -> str:
    return "accept" if x < 0.8 else "release" if x < 0.95 else "reject"


def _int(value: bytes | None):
    try:
        return None if value is None else int(value)
    except ValueError:
        return value.decode(errors="replace")


def settle(s: ShareRun, members: list[threading.Thread]) -> bool:
    """After healing: the members accept whatever comes until nothing came for
    :meth:`ShareRun.quiet_s` (at most 180 s); then they stop. Whether the phase ended quiet."""
    run = s.run
    s.came()
    run.healed.set()
    deadline = time.monotonic() + 180
    quiet = False
    while time.monotonic() < deadline:
        with s.mutex:
            idle = time.monotonic() - s.last_record
        if idle >= s.quiet_s():
            quiet = True
            break
        time.sleep(0.2)
    run.done.set()
    for t in members:
        t.join(max(1.0, run.timeout_s))
    s.quiet = quiet
    return quiet


def config(s: ShareRun) -> dict:
    """run.json's config.share of a run with real clients."""
    run = s.run
    return {"share": {"group": run.group, "keys": run.keys(), "lock_ms": s.lock_ms, "delivery_limit": DELIVERY_LIMIT,
                      "clock_slack_ms": 50, "final": s.quiet, "unseen_in_faults": True}}
