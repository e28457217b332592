"""The simulator's workloads with real clients against a real broker, recorded as a history.

Theory of operation
-------------------
Client threads run ops against one topic of :data:`PARTITIONS` partitions (the keys of the
history); every op is recorded as an invoke and its completion in docs/reference/trace-format.md (time:
wall-clock nanoseconds since the start): ``ok`` with offsets, ``fail`` when the broker
certainly refused, ``info`` when the outcome is unknown (a timeout, a lost connection), after
which the client is rebuilt under a new process id. The workloads:

* ``queue``: producer threads send unique integers, one send per op, acks=all and no retries
  (a send whose outcome is unknown is never retried); consumer threads are assigned every
  partition and poll;
* ``idempotent``: the same with ``enable.idempotence`` (the client retries, up to 5 batches
  in flight): no duplicate may appear;
* ``txn``: transactional producers; one op is a transaction of 1-3 sends, about one in five
  aborted on purpose; consumers read with read_committed;
* ``eos``: consume-transform-produce: idempotent producers write an input topic; processor
  ``j`` of ``m`` owns the input partitions ``p % m == j``, polls them (read_committed, from
  the group's committed offsets), copies every record to the same partition of an output
  topic as ``input * 2**24 + attempt`` and commits the input offsets with the output in one
  transaction (``sendOffsetsToTransaction``); after an abort or an unknown outcome it rewinds
  to the committed offsets. At the end a ``committed`` op reads the group's offsets;
* ``compaction``: keyed updates (a few record keys per partition, about one in eight a
  tombstone) to a compacted topic whose segments roll every 100 ms; consumers sometimes seek back to the
  beginning to see what the cleaner left;
* ``groups``: a producer writes every partition while members of one consumer group
  (subscribe, the range assignor) poll, commit the positions they reached (with the
  generation they hold) and sometimes leave and join again; every poll's completion carries
  the member's ``rebalance_log`` (revocations and assignments with their generation, taken
  from the client's rebalance callbacks). After healing the members poll until they agree
  on one generation that covers every partition.

A nemesis thread, when kafkacheck started the broker, kills (kill -9) and restarts, or
pauses (SIGSTOP) and resumes, broker processes, recorded as nemesis ops; with a fault proxy in
front of each broker it also cuts clients off (both ways or one), delays or resets their
connections. At the end every fault is healed, the cluster is waited for, and a final reader
reads every partition from the beginning up to its end offset. The history is written as a
run directory and judged by the same checker as the simulator's runs
(:func:`properties.queue.check`, with the transaction, exactly-once and compaction checks the
config enables).
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from kafkacheck.conform.final_read import end_offsets, final_committed, final_read
from kafkacheck.conform.handles import GroupMember, NotCommitted, Poller, TxnSender
from kafkacheck.conform.kinds import CLIENTS, make_member, make_poller, make_sender, make_txn_sender
from kafkacheck.conform.real_nemesis import nemesis_loop
from kafkacheck.conform.wall_history import History

PARTITIONS = 4
TXN_PAUSE_S = 0.2  # the longest pause inside a transaction, with straggle
WORKLOADS = {
    "queue": "acknowledged sends are read back, once, in order",
    "idempotent": "an idempotent producer's retries never duplicate or reorder a send",
    "txn": "committed transactions are read whole, aborted ones never (read_committed)",
    "eos": "consume-transform-produce copies every input record to the output exactly once",
    "compaction": "a compacted topic keeps the newest value of every record key",
    "groups": "a consumer group gives each partition to one member per generation and refuses fenced commits",
}
EOS_GROUP = "kafkacheck-eos"
SOURCE_SHIFT = 1 << 24  # an eos output value: input * SOURCE_SHIFT + attempt
RECORD_KEYS = 6  # compaction: record keys per partition
TOMBSTONE_P = 0.125
# segments roll by time: Kafka 4.0 refuses segment.bytes below 1 MiB (KIP-1030)
COMPACTED_CONFIGS = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01", "segment.ms": "100",
                     "delete.retention.ms": "600000"}


class _Run:
    """One workload run: its topics, history, counters and client loops."""

    def __init__(self, workload: str, target, kind: str, timeout_s: float, seed: int) -> None:
        self.workload, self.target, self.kind, self.timeout_s = workload, target, kind, timeout_s
        self.rng = random.Random(seed)
        self.h = History()
        self.stop = threading.Event()
        self.counters: dict[str, int] = {}
        self.lock = threading.Lock()
        stamp = int(time.time())
        self.topic = f"conform-{workload}-{stamp}"
        self.output = f"conform-{workload}-out-{stamp}" if workload == "eos" else None
        self.isolation = "read_committed" if workload in ("txn", "eos") else "read_uncommitted"
        self.keyed = workload == "compaction"
        self.group = f"kafkacheck-groups-{stamp}"
        self.healed = threading.Event()  # groups: faults healed, members converge
        self.done = threading.Event()  # groups: members stop
        self.member_state: dict[int, tuple[int, int, frozenset]] = {}  # member -> (process, generation, owned)
        self.stopped_members: list[GroupMember] = []  # groups: closed after the last member stopped
        self.open_handles: list = []  # every client handle a loop opened and has not closed yet
        self.pauses = False  # pause inside transactions (set with straggle)

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
        """queue, idempotent, compaction, and the eos input: one send per op."""
        h, rng, topic = self.h, self.rng, self.topic
        idempotent = self.workload != "queue"
        process = h.new_process()
        sender = self._sender(idempotent)
        while sender is not None and not self.stop.is_set():
            p = rng.randrange(PARTITIONS)
            key = f"{topic}:{p}"
            value = self.next_value(key)
            rk = None
            if self.keyed:
                rk = f"k{rng.randrange(RECORD_KEYS)}"
                if rng.random() < TOMBSTONE_P:
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
                sender = self._sender(idempotent)
        if sender is not None:
            self.closed(sender)

    def _sender(self, idempotent: bool):
        """A new producer client; while the brokers cannot be reached (a fault), try again until
        the run stops (None then) instead of ending this producer's thread."""
        while not self.stop.is_set():
            try:
                return self.opened(make_sender(self.kind, self.target.bootstrap, self.timeout_s, idempotent))
            except Exception:
                time.sleep(0.5)
        return None

    def _txn_sender(self, txn_id: str) -> TxnSender | None:
        try:
            return self.opened(make_txn_sender(self.kind, self.target.bootstrap, txn_id, self.timeout_s))
        except Exception:
            time.sleep(0.5)
            return None

    def txn_loop(self) -> None:
        """txn: one op is a transaction of 1-3 sends."""
        h, rng, topic = self.h, self.rng, self.topic
        process = h.new_process()
        txn_id = f"kafkacheck-{topic}-{process}"
        sender = None
        while not self.stop.is_set():
            if sender is None:
                sender = self._txn_sender(txn_id)
                continue
            sends = [(p, self.next_value(f"{topic}:{p}"))
                     for p in (rng.randrange(PARTITIONS) for _ in range(rng.randint(1, 3)))]
            h.op(process, "invoke", "txn", [["send", f"{topic}:{p}", v] for p, v in sends])
            done: list = []
            abort_on_purpose = rng.random() < 0.2
            pausing = self.pauses and rng.random() < 0.5
            try:
                sender.begin()
                for p, v in sends:
                    done.append(["send", f"{topic}:{p}", [sender.send(topic, p, v), v]])
                    self.pause(pausing)
            except Exception as e:
                rest = [["send", f"{topic}:{p}", [None, v]] for p, v in sends[len(done):]]
                sender = self._abort(sender)
                h.op(process, "fail", "txn", done + rest, error=str(e)[:80])
                continue
            if abort_on_purpose:
                sender = self._abort(sender)
                h.op(process, "fail", "txn", done, error="aborted on purpose")
                continue
            self.pause(pausing)
            try:
                sender.commit()
                h.op(process, "ok", "txn", done)
            except NotCommitted as e:  # certainly not committed: its sends must never be read
                h.op(process, "fail", "txn", done, error=str(e)[:80])
                sender = self._abort(sender)
            except Exception as e:
                h.op(process, "info", "txn", done, error=str(e)[:80])
                self.closed(sender)
                sender = None
                process = h.new_process()
        if sender is not None:
            self.closed(sender)

    def pause(self, pausing: bool) -> None:
        """A drawn pause inside a transaction (with ``straggle``, in about half of them, as
        Jepsen's intra-transaction delay): it keeps transactions open long enough for a late
        request to land inside one."""
        if pausing:
            time.sleep(self.rng.uniform(0.0, TXN_PAUSE_S))

    def _abort(self, sender: TxnSender) -> TxnSender | None:
        """Abort; a producer that cannot abort is closed (None: build a new one, which fences
        and aborts the old transaction)."""
        try:
            sender.abort()
            return sender
        except Exception:
            self.closed(sender)
            return None

    def eos_loop(self, j: int, m: int) -> None:
        """eos processor ``j`` of ``m``."""
        h, rng = self.h, self.rng
        assert self.output is not None
        inputs = [(self.topic, p) for p in range(PARTITIONS) if p % m == j]
        in_keys = [f"{t}:{p}" for t, p in inputs]
        process = h.new_process()
        sender: TxnSender | None = None
        poller: Poller | None = None
        seq = 0
        while not self.stop.is_set():
            if sender is None:
                sender = self._txn_sender(f"kafkacheck-{self.output}-{j}")  # fences its predecessor
                continue
            if poller is None:  # (re)start at the group's committed offsets
                try:
                    poller = self.opened(make_poller(self.kind, self.target.bootstrap, inputs, self.timeout_s,
                                                     "read_committed", group=EOS_GROUP))
                except Exception:
                    time.sleep(0.5)
                    continue
                h.op(process, "invoke", "assign", in_keys)
                h.op(process, "ok", "assign", in_keys)
            seq += 1
            attempt = seq * m + j
            abort_on_purpose = rng.random() < 0.1
            h.op(process, "invoke", "txn", [["poll"]])
            got: dict = {}
            done: list = []
            planned: list = []
            nxt: dict[tuple[str, int], int] = {}
            try:
                sender.begin()
                got = poller.poll(100)
                for key, pairs in got.items():
                    p = int(key.rsplit(":", 1)[1])
                    for off, v in pairs:
                        nxt[(self.topic, p)] = off + 1
                        if v is not None:
                            planned.append((p, v * SOURCE_SHIFT + attempt))
                results = sender.send_many(self.output, planned) if planned else []
                for (p, w), r in zip(planned, results, strict=True):
                    done.append(["send", f"{self.output}:{p}", [r if isinstance(r, int) else None, w]])
                failed = [r for r in results if not isinstance(r, int)]
                if failed:
                    raise RuntimeError(failed[0])
                if nxt:
                    sender.send_offsets(nxt, poller)
            except Exception as e:
                rest = [["send", f"{self.output}:{p}", [None, w]] for p, w in planned[len(done):]]
                sender = self._abort(sender)
                h.op(process, "fail", "txn", [["poll", got], *done, *rest], error=str(e)[:80],
                     offsets={f"{t}:{p}": o for (t, p), o in sorted(nxt.items())})
                self.closed(poller)
                poller = None
                continue
            offsets = {f"{t}:{p}": o for (t, p), o in sorted(nxt.items())}
            if abort_on_purpose:
                sender = self._abort(sender)
                h.op(process, "fail", "txn", [["poll", got], *done], error="intentional-abort", offsets=offsets)
                self.closed(poller)
                poller = None
                continue
            self.pause(self.pauses and rng.random() < 0.5)
            try:
                sender.commit()
                h.op(process, "ok", "txn", [["poll", got], *done], offsets=offsets)
            except NotCommitted as e:  # certainly not committed: rewind to the committed offsets
                h.op(process, "fail", "txn", [["poll", got], *done], error=str(e)[:80], offsets=offsets)
                sender = self._abort(sender)
                self.closed(poller)
                poller = None
            except Exception as e:
                h.op(process, "info", "txn", [["poll", got], *done], error=str(e)[:80], offsets=offsets)
                self.closed(sender)
                sender = None
                self.closed(poller)
                poller = None
                process = h.new_process()
        if sender is not None:
            self.closed(sender)
        if poller is not None:
            self.closed(poller)

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

    def member_loop(self, i: int) -> None:
        """groups: member ``i`` polls, commits, sometimes leaves and joins again."""
        h, rng, keys = self.h, self.rng, self.keys()
        process = h.new_process()

        def join() -> GroupMember | None:
            try:
                member = self.opened(make_member(self.kind, self.target.bootstrap, self.topic, self.group,
                                                 self.timeout_s))
            except Exception:
                time.sleep(0.5)
                return None
            h.op(process, "invoke", "subscribe", keys)
            h.op(process, "ok", "subscribe", keys)
            return member

        m = join()
        while not self.done.is_set():
            if m is None:
                m = join()
                continue
            healed = self.healed.is_set()
            r = rng.random()
            if not healed and r < 0.02:  # leave cleanly and join again
                h.op(process, "invoke", "subscribe", keys)
                self.closed(m)
                log = m.take_log()
                h.op(process, "ok", "subscribe", keys, **({"rebalance_log": log} if log else {}))
                m = join()
                continue
            offsets = m.reached()
            if not healed and r < 0.2 and offsets:
                generation = m._current_generation()
                h.op(process, "invoke", "commit", offsets, generation=generation)
                err, definite = m.commit(offsets)
                log = m.take_log()
                extra = {"rebalance_log": log} if log else {}
                if err is None:
                    h.op(process, "ok", "commit", offsets, generation=generation, **extra)
                    continue
                h.op(process, "fail" if definite else "info", "commit", offsets, generation=generation,
                     error=err, **extra)
                if not definite:  # unknown outcome: a new member under a new process
                    self.closed(m)
                    process = self._abandon(process)
                    m = None
                continue
            h.op(process, "invoke", "poll", [["poll"]])
            try:
                got = m.poll()
            except Exception as e:
                h.op(process, "info", "poll", [["poll", {}]], error=type(e).__name__)
                self.closed(m)
                process = self._abandon(process)
                m = None
                continue
            log = m.take_log()
            h.op(process, "ok", "poll", [["poll", got]], **({"rebalance_log": log} if log else {}))
            with self.lock:
                self.member_state[i] = (process, m.generation, frozenset(m.owned))
        if m is not None:  # closed once every member stopped: a leave now would start a
            with self.lock:   # rebalance that the members still polling would report
                self.stopped_members.append(m)

    def _abandon(self, process: int) -> int:
        """A member client given up on: its process ends (a crash, for the group checker, so
        it is not counted among the members after healing); the next one is a new process."""
        self.h.op(process, "invoke", "crash", None)
        self.h.op(process, "info", "crash", None)
        return self.h.new_process()

    def settle_members(self, members: list[threading.Thread]) -> bool:
        """groups, after healing: members poll on until the group settles (two seconds in one
        generation covering every partition) or 60 s pass; then they stop. Whether it settled."""
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
        """groups: every member polled after healing, all in one generation covering every partition."""
        with self.lock:
            states = list(self.member_state.values())
        gens = {g for _p, g, _o in states}
        owned = set().union(*(o for _p, _g, o in states)) if states else set()
        return len(gens) == 1 and min(gens) >= 0 and owned == set(self.keys())

    def threads(self, producers: int, consumers: int) -> list[threading.Thread]:
        loops: list = []
        if self.workload == "groups":
            return [threading.Thread(target=self.producer_loop, daemon=True)]
        if self.workload == "txn":
            loops += [self.txn_loop] * producers
        elif self.workload == "eos":
            m = max(1, min(PARTITIONS, producers))
            loops += [self.producer_loop] * producers
            loops += [lambda j=j: self.eos_loop(j, m) for j in range(m)]
        else:
            loops += [self.producer_loop] * producers
        loops += [self.consumer_loop] * consumers
        return [threading.Thread(target=f, daemon=True) for f in loops]


# the requests each workload sends that ``straggle`` may hold back (fault_injection/straggle.py)
STRAGGLE_APIS = {"txn": ("EndTxn", "Produce", "AddPartitionsToTxn"),
                 "eos": ("EndTxn", "Produce", "AddPartitionsToTxn", "AddOffsetsToTxn", "TxnOffsetCommit")}


def run_queue(target, client_kind: str, create_topic, out_dir: Path, seconds: float, faults: list[str],
              timeout_s: float = 10.0, producers: int = 3, consumers: int = 2, seed: int = 0, log=print,
              workload: str = "queue", straggle_apis: tuple[str, ...] | None = None) -> dict:
    """Run ``workload`` (a key of :data:`WORKLOADS`) for ``seconds`` under ``faults``, heal,
    read everything back, and judge the history; returns the checker's result with
    ``summary`` and ``run_dir`` added."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")
    run = _Run(workload, target, client_kind, timeout_s, seed)
    run.pauses = "straggle" in faults
    rf = min(3, target.brokers)
    for topic in run.topics():
        error = create_topic(topic, PARTITIONS, rf, COMPACTED_CONFIGS if workload == "compaction" else None)
        if error:
            raise RuntimeError(f"could not create the workload topic {topic}: {error}")
    time.sleep(1)
    nemesis_log: list[dict] = []
    threads = run.threads(producers, consumers)
    members = ([threading.Thread(target=run.member_loop, args=(i,), daemon=True) for i in range(3)]
               if workload == "groups" else [])
    nemesis = threading.Thread(target=nemesis_loop, args=(target, faults, run.h, random.Random(seed + 1), run.stop,
                                                          nemesis_log, run.topic,
                                                          straggle_apis or STRAGGLE_APIS.get(workload, ("Produce",))),
                               daemon=True)
    for t in [*threads, *members, nemesis]:
        t.start()
    try:
        # in short sleeps: Ctrl-C may be delivered to any of the clients' threads, and the main
        # thread only runs the handler once it is back from its sleep
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.5))
    except BaseException:  # Ctrl-C: the nemesis ends its fault before the brokers are stopped
        run.stop.set()
        run.done.set()
        nemesis.join(10)
        raise
    run.stop.set()
    nemesis.join(30)
    deadline = time.monotonic() + timeout_s * 3  # one deadline for all: a hung client is reported, not waited on
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = sum(t.is_alive() for t in threads)
    heal_ns = run.h.now()
    target.heal(log)
    converged = None
    if members:
        converged = run.settle_members(members)
        hung += sum(t.is_alive() for t in members)
    run.close_leftovers()
    final = _read_back(run, log)
    config = _config(run, rf, seconds, {**final, "heal_ns": heal_ns})
    result = _write_and_judge(run, out_dir, seed, config, faults)
    acked = sum(1 for op in run.h.recorder.ops if op["f"] in ("send", "txn") and op["type"] == "ok"
                for mop in op["value"] if mop[0] == "send")
    result["summary"] = {"ops": len(run.h.recorder.ops), "acknowledged_sends": acked, "hung_clients": hung,
                         "final_read_reached_end": final["reached_end"], "nemesis": nemesis_log}
    if converged is not None:
        result["summary"]["group_converged"] = converged
    result["run_dir"] = str(out_dir)
    return result


def _read_back(run: _Run, log) -> dict:
    """After healing: the eos group's committed offsets, every partition's end offset, and
    the final read up to them (the final_read config, but for heal_ns)."""
    h, target = run.h, run.target
    start_ns = h.now()
    if run.workload == "eos":
        final_committed(h, CLIENTS[run.kind](target.bootstrap, run.timeout_s), EOS_GROUP, run.topic, PARTITIONS)
    ends: dict[str, int] = {}
    end_errors: dict[str, str] = {}
    ends_deadline = time.monotonic() + 60
    client = CLIENTS[run.kind](target.bootstrap, run.timeout_s)
    for t in run.topics():
        got, errors = end_offsets(client, t, PARTITIONS, run.isolation, ends_deadline)
        ends.update(got)
        end_errors.update(errors)
    if end_errors:
        log(f"no end offset for {', '.join(sorted(end_errors))} within 60 s after healing: "
            f"{next(iter(end_errors.values()))}")
    tps = [(t, p) for t in run.topics() for p in range(PARTITIONS)]
    reader = make_poller(run.kind, target.bootstrap, tps, run.timeout_s, run.isolation, keyed=run.keyed)
    reached = final_read(h, reader, [f"{t}:{p}" for t, p in tps], ends)
    return {"performed": True, "start_ns": start_ns, "reached_end": reached,
            "took_ms": (h.now() - start_ns) // 1_000_000, "staleness_bound_ms": 60_000,
            "end_offsets": ends, **({"end_offset_errors": end_errors} if end_errors else {})}


def _config(run: _Run, rf: int, seconds: float, final_read: dict) -> dict:
    """run.json's config: what the checker needs to decide what is allowed."""
    workload, target = run.workload, run.target
    config = {
        "acks": "all", "idempotence": workload != "queue", "isolation_level": run.isolation,
        "txn": workload in ("txn", "eos"), "sub_via": ["assign"], "replication_factor": rf,
        "partitions": PARTITIONS, "brokers": target.brokers, "compacted": workload == "compaction",
        "client": run.kind, "seconds": seconds, "staleness_bound_ms": 60_000,
        **({"min_insync_replicas": target.min_insync_replicas} if target.min_insync_replicas is not None else {}),
        **({"broker_config": dict(target.broker_config)} if target.broker_config else {}),
        "final_read": final_read,
    }
    if workload == "eos":
        config["eos"] = {"input": run.topic, "output": run.output, "group": EOS_GROUP, "source_shift": SOURCE_SHIFT}
    if workload == "compaction":
        config["topic_configs"] = dict(COMPACTED_CONFIGS)
    if workload == "groups":
        config["sub_via"] = ["subscribe"]
        config["groups"] = {"group": run.group, "assignor": "range", "static": False, "keys": run.keys(),
                            "final_polls": True}
    return config


def _write_and_judge(run: _Run, out_dir: Path, seed: int, config: dict, faults: list[str]) -> dict:
    target = run.target
    return run.h.write_and_judge(out_dir, {"seed": seed, "target": target.name, "workload": run.workload,
                                           "faults": faults}, config, target.version or target.name)
