"""What every workload's real-client threads share: :class:`RealRun`.

A workload's module (:mod:`kafkacheck.workloads`) says which threads run (its
``real_threads``); they record their ops into one :class:`~kafkacheck.real.wall_history.History`
by Jepsen's rules: an invoke and its completion, ``ok`` with offsets, ``fail`` when the
broker certainly refused, ``info`` when the outcome is unknown (a timeout, a lost
connection), after which the thread continues with a new client under a new process id.
:func:`kafkacheck.conform.workload.run_workload` starts them, with the nemesis, and judges
what they recorded.
"""

from __future__ import annotations

import random
import threading
import time
from typing import ClassVar, Protocol

from kafkacheck.real.client_debug import CallWatch
from kafkacheck.real.handles import GroupMember, Poller, TxnSender
from kafkacheck.real.kinds import make_member, make_poller, make_sender, make_txn_sender
from kafkacheck.real.wall_history import History

PARTITIONS = 4
TXN_PAUSE_S = 0.2  # the longest pause inside a transaction, with straggle


class RealWorkload(Protocol):
    """What a run reads of its workload (a :class:`kafkacheck.workloads.base.Workload` subclass,
    which this package below the workloads does not import)."""

    name: ClassVar[str]
    has_output: ClassVar[bool]
    transactional: ClassVar[bool]
    compacted: ClassVar[bool]
    idempotent: ClassVar[bool]
    record_keys: ClassVar[int]
    tombstone_p: ClassVar[float]


class RealRun:
    """One workload run with real clients: its topics, history, counters, the client handles
    it opened, and the loops that several workloads share (a producer of one send per op, a
    consumer assigned every partition, group members settling after healing)."""

    def __init__(self, w: type[RealWorkload], target, kind: str, timeout_s: float, seed: int,
                 group_protocol: str = "classic", eos_subscribe: bool = False) -> None:
        self.w, self.workload = w, w.name
        self.target, self.kind, self.timeout_s = target, kind, timeout_s
        self.group_protocol = group_protocol  # the members' consumer group protocol: classic, or consumer (KIP-848)
        self.eos_subscribe = eos_subscribe  # eos: its processors join a group of group_protocol (else they assign)
        self.rng = random.Random(seed)
        self.h = History()
        self.stop = threading.Event()
        self.counters: dict[str, int] = {}
        self.lock = threading.Lock()
        stamp = int(time.time())
        workload = w.name
        self.topic = f"conform-{workload}-{stamp}"
        self.output = f"conform-{workload}-out-{stamp}" if w.has_output else None
        self.isolation = "read_committed" if w.transactional else "read_uncommitted"
        self.keyed = w.compacted
        self.group = f"kafkacheck-{workload}-{stamp}"
        self.healed = threading.Event()  # groups: faults healed, members converge
        self.done = threading.Event()  # groups: members stop
        self.member_state: dict[int, tuple[int, int, frozenset]] = {}  # member -> (process, generation/epoch, owned)
        self.stopped_members: list[GroupMember] = []  # groups: closed after the last member stopped
        self.open_handles: list = []  # every client handle a loop opened and has not closed yet
        self.pauses = False  # pause inside transactions (set with straggle)
        self.watch = CallWatch(None)  # times client calls (KAFKACHECK_CALL_LOG: run_workload sets one up)
        self.workload_state = None  # what a workload's threads share beyond this (its real_prepare)

    def opened(self, handle):
        """A client handle a loop opened: kept until it is closed, so that the run can close
        the ones a hung thread never will."""
        with self.lock:
            self.open_handles.append(handle)
        return handle

    def closed(self, handle) -> None:
        with self.lock:
            if handle in self.open_handles:
                self.open_handles.remove(handle)
        handle.close()

    def close_leftovers(self) -> None:
        """The handles of client threads still hung in a call when the run ends (kafka-python's
        commit_transaction and abort_transaction wait without a timeout while the coordinator
        cannot be reached): closed from here, so that their I/O threads stop."""
        with self.lock:
            left, self.open_handles = self.open_handles, []
        for handle in left:
            handle.close()

    def next_value(self, key: str) -> int:
        with self.lock:
            self.counters[key] = self.counters.get(key, 0) + 1
            return self.counters[key]

    def keys(self, topic: str | None = None) -> list[str]:
        return [f"{topic or self.topic}:{p}" for p in range(PARTITIONS)]

    def topics(self) -> list[str]:
        return [self.topic] + ([self.output] if self.output else [])

    # ------------------------------------------------------------ producers

    def producer_loop(self) -> None:
        """One send per op (keyed, some of them tombstones, on a compacted topic)."""
        h, rng, topic = self.h, self.rng, self.topic
        idempotent = self.w.idempotent
        process = h.new_process()
        sender = self.sender(idempotent)
        while sender is not None and not self.stop.is_set():
            p = rng.randrange(PARTITIONS)
            key = f"{topic}:{p}"
            value = self.next_value(key)
            rk = None
            if self.keyed:
                rk = f"k{rng.randrange(self.w.record_keys)}"
                if rng.random() < self.w.tombstone_p:
                    value = None
            tail = [rk] if self.keyed else []
            h.op(process, "invoke", "send", [["send", key, value, *tail]])
            offset, err = sender.send(topic, p, value, rk)
            if err is None:
                h.op(process, "ok", "send", [["send", key, [offset, value], *tail]])
                continue
            definite = "NOT_ENOUGH_REPLICAS" in err.upper().replace(" ", "_") and "AFTER" not in err.upper()
            h.op(process, "fail" if definite else "info", "send", [["send", key, [None, value], *tail]],
                 error=err[:80])
            if not definite:  # unknown outcome: a new client under a new process
                self.closed(sender)
                process = h.new_process()
                sender = self.sender(idempotent)
        if sender is not None:
            self.closed(sender)

    def sender(self, idempotent: bool):
        """A new producer client; while the brokers cannot be reached (a fault), try again until
        the run stops (None then) instead of ending this producer's thread."""
        while not self.stop.is_set():
            try:
                return self.opened(make_sender(self.kind, self.target.bootstrap, self.timeout_s, idempotent))
            except Exception:
                time.sleep(0.5)
        return None

    def txn_sender(self, txn_id: str, bounded: bool = False) -> TxnSender | None:
        """A transactional producer (``bounded``: see :func:`~kafkacheck.real.kinds.make_txn_sender`),
        or None after a failed try and a pause."""
        try:
            return self.opened(make_txn_sender(self.kind, self.target.bootstrap, txn_id, self.timeout_s, bounded))
        except Exception:
            time.sleep(0.5)
            return None

    def pause(self, pausing: bool) -> None:
        """A drawn pause inside a transaction (with ``straggle``, in about half of them, as
        Jepsen's intra-transaction delay): it keeps transactions open long enough for a late
        request to land inside one."""
        if pausing:
            time.sleep(self.rng.uniform(0.0, TXN_PAUSE_S))

    def abort(self, sender: TxnSender) -> TxnSender | None:
        """Abort; a producer that cannot abort is closed (None: build a new one, which fences
        and aborts the old transaction)."""
        try:
            sender.abort()
            return sender
        except Exception:
            self.closed(sender)
            return None

    # ------------------------------------------------------------ consumers

    def consumer_loop(self) -> None:
        h, rng = self.h, self.rng
        topics = [self.topic] if self.output is None else [self.topic, self.output]
        tps = [(t, p) for t in topics for p in range(PARTITIONS)]
        keys = [f"{t}:{p}" for t, p in tps]
        process = h.new_process()

        def fresh() -> Poller:
            poller = self.opened(make_poller(self.kind, self.target.bootstrap, tps, self.timeout_s, self.isolation,
                                             keyed=self.keyed))
            h.op(process, "invoke", "assign", keys, seek_to_beginning=True)
            h.op(process, "ok", "assign", keys, seek_to_beginning=True)
            return poller

        poller = fresh()
        while not self.stop.is_set():
            if self.keyed and rng.random() < 0.2:  # compaction: see what the cleaner left
                poller.seek_to_beginning()
                h.op(process, "invoke", "assign", keys, seek_to_beginning=True)
                h.op(process, "ok", "assign", keys, seek_to_beginning=True)
            h.op(process, "invoke", "poll", [["poll"]])
            try:
                got = poller.poll()
            except Exception as e:
                h.op(process, "info", "poll", [["poll", {}]], error=type(e).__name__)
                self.closed(poller)
                process = h.new_process()
                poller = fresh()
                continue
            h.op(process, "ok", "poll", [["poll", got]])
        self.closed(poller)

    def abandon(self, process: int) -> int:
        """A member client given up on: its process ends (a crash, for the group checker, so
        it is not counted among the members after healing); the next one is a new process."""
        self.h.op(process, "invoke", "crash", None)
        self.h.op(process, "info", "crash", None)
        return self.h.new_process()

    def settle_members(self, members: list[threading.Thread]) -> bool:
        """groups, after healing: members poll on until the group settles (two seconds of
        :meth:`converged`) or 60 s pass; then they stop. Whether it settled."""
        with self.lock:
            self.member_state.clear()
        self.healed.set()
        settle = time.monotonic() + 60
        stable_since = None
        while time.monotonic() < settle:
            if self.converged() and len(self.member_state) == len(members):
                stable_since = stable_since or time.monotonic()
                if time.monotonic() - stable_since >= 2:
                    break
            else:
                stable_since = None
            time.sleep(0.2)
        self.done.set()
        for t in members:
            t.join(max(1.0, self.timeout_s))
        for m in self.stopped_members:
            self.closed(m)
        return stable_since is not None

    def converged(self) -> bool:
        """groups: the members that polled after healing own every partition between them; with
        the classic protocol all in one generation; with KIP-848's, where each member has its
        own epoch (one whose partitions did not change learns the group's newest epoch only at
        its next heartbeat), each owning its own partitions, at an epoch of 1 or more (joined)."""
        with self.lock:
            states = list(self.member_state.values())
        owned = [o for _p, _g, o in states]
        if not states or set().union(*owned) != set(self.keys()):
            return False
        if self.group_protocol == "consumer":
            return sum(map(len, owned)) == len(self.keys()) and min(g for _p, g, _o in states) >= 1
        gens = {g for _p, g, _o in states}
        return len(gens) == 1 and min(gens) >= 0


class RealMember:
    """Member ``i`` of a run's consumer group, as the group workloads' threads drive it: each
    step recorded as ops (subscribe, poll with its rebalance log, commit with its generation),
    and a client whose outcome is unknown given up on, the member going on as a new process.
    ``m`` is the client handle, None while it has to join again. ``group`` (default: the
    run's) and ``isolation`` (default: the client's): the eos processors' group, read_committed."""

    def __init__(self, run: RealRun, i: int, group: str | None = None, isolation: str | None = None) -> None:
        self.run, self.i, self.keys = run, i, run.keys()
        self.group, self.isolation = group or run.group, isolation
        self.process = run.h.new_process()
        self.m: GroupMember | None = None
        self.join()

    def join(self, log: list[dict] | None = None) -> None:
        """A new client subscribes (after a failed try, a pause: the brokers may be down); the
        subscribe op carries ``log``, the rebalance log of a client closed before it."""
        run = self.run
        try:
            with run.watch.call("new member (subscribe)"):
                self.m = run.opened(make_member(run.kind, run.target.bootstrap, run.topic, self.group, run.timeout_s,
                                                run.group_protocol, self.isolation))
        except Exception:
            time.sleep(0.5)
            return
        run.h.op(self.process, "invoke", "subscribe", self.keys)
        run.h.op(self.process, "ok", "subscribe", self.keys, **({"rebalance_log": log} if log else {}))

    def rejoin(self) -> None:
        """Leave cleanly and join again."""
        h, m = self.run.h, self.m
        assert m is not None
        h.op(self.process, "invoke", "subscribe", self.keys)
        self.run.closed(m)
        log = m.take_log()
        h.op(self.process, "ok", "subscribe", self.keys, **({"rebalance_log": log} if log else {}))
        self.m = None
        self.join()

    def restart(self) -> None:
        """After an op whose outcome is unknown: the client leaves the group and the member joins
        again as a new process (its subscribe carries the closed client's rebalance log)."""
        m = self.m
        assert m is not None
        with self.run.watch.call("close member"):
            self.run.closed(m)
        self.process = self.run.h.new_process()
        self.m = None
        self.join(m.take_log())

    def poll(self) -> dict | None:
        """One poll: what it returned, or None when the client failed (and was given up on)."""
        run, h, m = self.run, self.run.h, self.m
        assert m is not None
        h.op(self.process, "invoke", "poll", [["poll"]])
        try:
            with run.watch.call("consume"):
                got = m.poll()
        except Exception as e:
            h.op(self.process, "info", "poll", [["poll", {}]], error=type(e).__name__)
            self.give_up()
            return None
        log = m.take_log()
        h.op(self.process, "ok", "poll", [["poll", got]], **({"rebalance_log": log} if log else {}))
        with run.lock:
            run.member_state[self.i] = (self.process, m.generation, frozenset(m.owned))
        return got

    def commit(self, offsets: dict[str, int]) -> None:
        """Commit ``offsets`` in the generation the client holds: ``ok``, ``fail`` when
        certainly refused, ``info`` (and the client given up on) when unknown."""
        h, m = self.run.h, self.m
        assert m is not None
        generation = m._current_generation()
        h.op(self.process, "invoke", "commit", offsets, generation=generation)
        err, definite = m.commit(offsets)
        log = m.take_log()
        extra = {"rebalance_log": log} if log else {}
        if err is None:
            h.op(self.process, "ok", "commit", offsets, generation=generation, **extra)
            return
        h.op(self.process, "fail" if definite else "info", "commit", offsets, generation=generation, error=err,
             **extra)
        if not definite:
            self.give_up()

    def give_up(self) -> None:
        """The client failed: closed, its process ended (a crash); the next one joins as a new process."""
        assert self.m is not None
        with self.run.watch.call("close member"):
            self.run.closed(self.m)
        self.process = self.run.abandon(self.process)
        self.m = None

    def stop(self) -> None:
        """The run is over: the client is closed once every member stopped (a leave now would
        start a rebalance that the members still polling would report)."""
        if self.m is not None:
            with self.run.lock:
                self.run.stopped_members.append(self.m)
