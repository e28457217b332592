"""The txn workload: Jepsen-style transactions of 1-4 sends and polls, some aborted on purpose.

Each :class:`TxnClient` holds a :class:`~reference.txn_producer.TransactionalProducer` (its
own transactional id) and a read_committed consumer assigned to every partition. One op is
one Kafka transaction: ``["send", key, value]`` and ``["poll"]`` micro-ops run in order (a
send waits for its acknowledgement, a poll fetches once), then the transaction commits,
or, with probability ``abort_p``, aborts on purpose.

Completions: ``ok`` when the commit succeeded; ``fail`` when the transaction certainly
aborted (on purpose, a send failed, or the coordinator fenced it), carrying what was learnt
before; ``info`` when the commit's outcome is unknown (after which the client continues as a
new process, Jepsen's rule).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import initialize, rule

from fault_injection.cluster import CLUSTER_TIMINGS, MS
from fault_injection.simulation import Simulation
from kafkacheck.real.handles import NotCommitted
from kafkacheck.real.real_run import PARTITIONS as REAL_PARTITIONS
from kafkacheck.real.real_run import RealRun
from kafkacheck.workloads.actors import Reader, TxnWriter
from kafkacheck.workloads.base import Workload
from kafkacheck.workloads.client import Budget, ClientBase, choice, decode_value, encode_value, randint
from kafkacheck.workloads.machine import BROKERS, PARTITIONS, ClusterMachine
from kafkacheck.workloads.queue_client import assign_every_key, unique_value
from kafkacheck.workloads.rules import txn_completion
from reference.consumer import Consumer, ConsumerConfig
from reference.errors import Errors
from reference.messages import TopicPartition
from reference.producer import ProducerConfig
from reference.topics import TXN_TOPIC
from reference.txn_producer import TransactionalProducer


class TxnClient(ClientBase):
    def __init__(self, node_id: int, index: int, n_clients: int, keys: list[TopicPartition],
                 bootstrap: list[int], rng: random.Random, budget: Budget,
                 producer_config: ProducerConfig, consumer_config: ConsumerConfig,
                 transaction_timeout_ms: int, abort_p: float = 0.15, poll_ms: int = 100,
                 think_ms: int = 20) -> None:
        super().__init__(node_id)
        self.index = index
        self.n_clients = n_clients
        self.keys = keys
        self.rng = rng
        self.budget = budget
        self.abort_p = abort_p
        self.poll_ms = poll_ms
        self.think_ms = think_ms
        self.producer = TransactionalProducer(node_id, bootstrap, producer_config, f"txn-{index}",
                                              transaction_timeout_ms)
        self.txp = self.producer
        self.consumer = Consumer(node_id, bootstrap, consumer_config)
        self.process = index
        self.counters = {tp: 0 for tp in keys}
        self.op: dict | None = None
        self.op_seq = 0
        self.done = False

    def start(self, now_ms: int) -> None:
        self.txp.start(now_ms)  # (its producer)
        self.consumer.start(now_ms)
        self._assign()
        self.set_timer(randint(self.rng, 1, 50), "next")

    # the same assign op and unique values as the queue's
    def _assign(self) -> None:
        assign_every_key(self, self.process, self.keys)

    def _value(self, tp: TopicPartition) -> int:
        return unique_value(self.counters, tp, self.n_clients, self.index)

    # ------------------------------------------------------------ ops

    def _next_op(self, now_ms: int) -> None:
        if self.budget.remaining <= 0:
            self.done = True
            return
        if not self.txp.ready:
            self.set_timer(20, "next")  # the producer is (re)initialising
            return
        self.budget.remaining -= 1
        self.op_seq += 1
        mops: list[list] = []
        for _ in range(randint(self.rng, 1, 4)):
            if self.rng.random() < 0.6:
                tp = choice(self.rng, self.keys)
                mops.append(["send", tp.key, self._value(tp)])
            else:
                mops.append(["poll"])
        self.op = {"mops": mops, "i": 0, "results": [], "send_id": -1, "ending": False,
                   "abort": self.rng.random() < self.abort_p, "error": None}
        self.record(process=self.process, type="invoke", f="txn", value=mops)
        self.txp.begin_transaction()
        self._step(now_ms)

    def _step(self, now_ms: int) -> None:
        """Run micro-ops until one has to wait."""
        op = self.op
        assert op is not None
        while op["i"] < len(op["mops"]) and op["error"] is None:
            mop = op["mops"][op["i"]]
            if mop[0] == "send":
                if op["send_id"] < 0:
                    op["send_id"] = self.txp.send(now_ms, TopicPartition.parse(mop[1]), encode_value(mop[2]))
                    self._collect_send()
                if op["send_id"] >= 0:
                    return  # waiting for the acknowledgement
            else:
                if not op.get("polling"):
                    op["polling"] = True
                    self.consumer.poll(now_ms)
                    self.set_timer(self.poll_ms, ("poll-done", self.op_seq))
                return
        if not op["ending"]:
            op["ending"] = True
            if op["abort"] or op["error"] is not None:
                self.txp.abort_transaction(now_ms)
            else:
                self.txp.commit_transaction(now_ms)
        self._check_outcome(now_ms)

    def _collect_send(self) -> None:
        op = self.op
        if op is None:
            return
        for r in self.txp.take_results():
            if r.send_id != op["send_id"]:
                continue
            mop = op["mops"][op["i"]]
            op["send_id"] = -1
            op["i"] += 1
            if r.error is Errors.NONE:
                op["results"].append(["send", mop[1], [r.offset, mop[2]]])
            else:
                op["results"].append(["send", mop[1], mop[2]])
                op["error"] = r.error.name

    def _finish_poll(self, now_ms: int) -> None:
        op = self.op
        assert op is not None
        got: dict[str, list] = {}
        for r in self.consumer.take_records():
            got.setdefault(r.tp.key, []).append([r.offset, decode_value(r.value)])
        op["results"].append(["poll", got])
        op["polling"] = False
        op["i"] += 1
        self._step(now_ms)

    def _check_outcome(self, now_ms: int) -> None:
        op = self.op
        if op is None or not op["ending"] or self.txp.outcome is None:
            return
        outcome, error = self.txp.outcome
        # micro-ops that never ran are left out of the completion
        value = op["results"]
        type_, error = txn_completion(outcome, error, op["abort"], op["error"])
        self.record(process=self.process, type=type_, f="txn", value=value, error=error)
        if type_ == "fail":
            self._rewind(value)
        self.op = None
        self.budget.completed += 1
        if type_ == "info":
            self.process += self.n_clients
            self._assign()
        self.set_timer(randint(self.rng, 0, self.think_ms), "next")

    def _rewind(self, value: list) -> None:
        """An aborted transaction's polls are undone: the consumer goes back to the first
        record it read in each partition, as an exactly-once processor must (what it read
        was never committed as consumed)."""
        first: dict[str, int] = {}
        for mop in value:
            if mop[0] == "poll":
                for key, records in mop[1].items():
                    if records:
                        first.setdefault(key, records[0][0])
        for key, offset in first.items():
            self.consumer.seek(TopicPartition.parse(key), offset)

    # ------------------------------------------------------------ inputs

    def _progress(self, now_ms: int) -> None:
        op = self.op
        if op is None:
            return
        if op["send_id"] >= 0:
            self._collect_send()
            if op["send_id"] < 0:
                self._step(now_ms)
                return
        if op["ending"]:
            self._check_outcome(now_ms)

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self._route_message(now_ms, src, message)
        self._progress(now_ms)

    def timer(self, now_ms: int, key: object) -> None:
        if self._route_timer(now_ms, key):
            self._progress(now_ms)
            return
        match key:
            case "next":
                if self.op is None:
                    self._next_op(now_ms)
            case ("poll-done", seq):
                if self.op is not None and seq == self.op_seq and self.op.get("polling"):
                    self._finish_poll(now_ms)


class TxnMachine(ClusterMachine):
    """Two transactional producers and two read_committed consumers."""

    read_committed = True
    focus: ClassVar[tuple[str, ...]] = (
        "txn-coordinator-loaded-unfinished", "txn-coordinator-resumed-markers", "txn-producer-fenced",
        "txn-concurrent-transactions", "txn-timed-out", "txn-marker-retried", "txn-marker-to-moved-leader",
        "produce-txn-raced-marker")

    def internal_topics(self) -> list[str]:
        return [TXN_TOPIC]

    @initialize(seed=st.integers(0, 2**16), placed=st.booleans())
    def boot(self, seed: int, placed: bool = False) -> None:
        """``placed``: the topic gets one replica a partition, for ``offline_partition``."""
        if placed:
            self._boot(seed, placed=True)
        else:
            self._boot(seed)  # (as programs recorded before placed existed replay)

    def make_actors(self) -> None:
        for w in range(2):
            self.add_actor(partial(self._writer, f"machine-txn-{w}"))
        for _ in range(2):
            # (a partial of a module function, not a lambda: mypyc cannot compile a closure in a
            # method of the machine, a Python class; it reads the machine when called, as the lambda)
            self.add_actor(partial(_reader, self))

    def _writer(self, transactional_id: str, node: int, i: int) -> TxnWriter:
        return TxnWriter(node, i, BROKERS, self.producer_config(), transactional_id,
                         CLUSTER_TIMINGS["transaction_timeout_ms"])

    def config(self) -> dict:
        return {**super().config(), "idempotence": True, "txn": True, "isolation_level": "read_committed"}

    @rule(writer=st.integers(0, 1), partitions=st.lists(st.integers(0, PARTITIONS - 1), min_size=1, max_size=4),
          abort=st.booleans(), dwell_ms=st.sampled_from([0, 200, 1_000, 2_000]))
    def transaction(self, writer: int, partitions: list[int], abort: bool, dwell_ms: int = 0) -> None:
        """Begin, send, stay in the transaction ``dwell_ms`` (processing), then commit (or
        abort on purpose)."""
        self._step("transaction", writer=writer, partitions=partitions, abort=abort, dwell_ms=dwell_ms)
        self.command(writer, ("txn", [(self.keys[p], self.value(self.keys[p])) for p in partitions],
                              abort, dwell_ms))

    @rule(reader=st.integers(0, 1))
    def poll(self, reader: int) -> None:
        self._step("poll", reader=reader)
        self.command(2 + reader, ("poll",))

    @rule(writer=st.integers(0, 1), request=st.sampled_from(["EndTxnRequest", "ProduceRequest",
                                                             "AddPartitionsToTxnRequest"]),
          ms=st.sampled_from([2_300, 3_000, 5_000]))
    def hold_back(self, writer: int, request: str, ms: int) -> None:
        """The writer's next request of this kind reaches the broker ``ms`` late, past its
        timeout, after the writer gave up on it and went on (KAFKA-17754: a delayed EndTxn or
        produce of one transaction lands in the next)."""
        self._step("hold_back", writer=writer, request=request, ms=ms)
        assert self.sim is not None
        sim = self.sim
        node = self.actors[writer].node_id
        # (partials of module functions, not lambdas: mypyc cannot compile a closure in a method
        # of the machine, a Python class)
        sim.hold_back(partial(_sent_by, node, request), ms)
        held = sim.holds[-1]
        # time passes until the request is sent and held (for at most 3 s): healing at the
        # program's end would release a hold still waiting
        sim.run_until(sim.now_ns + 3_000 * MS, stop=partial(_released, sim, held))

    @rule(partition=st.integers(0, PARTITIONS - 1), ms=st.sampled_from([3_000, 6_000, 12_000]))
    def offline_partition(self, partition: int, ms: int) -> None:
        """KAFKA-20734's window (with a ``placed`` boot): the broker of the partition's one
        replica paused for ``ms``, past its session (the partition has no leader), then resumed,
        while the writers' transactions go on."""
        self._step("offline_partition", partition=partition, ms=ms)
        if not self.options.get("placed"):
            return
        assert self.sim is not None
        node = BROKERS[partition]
        self._fault("offline-partition", {"partition": self.keys[partition].key, "nodes": [node], "how": "pause"})
        self.sim.run_until(self.sim.now_ns + ms * MS)
        self._fault("resume", {"nodes": [node]})

    @rule(p=st.sampled_from([0.05, 0.2, 0.5]), ms=st.sampled_from([3_000, 6_000]))
    def straggle(self, p: float, ms: int) -> None:
        """A share ``p`` of messages is held back for ``ms`` (a stalled connection), past the
        request timeout, so that retries and the next transaction's requests overtake them:
        a produce or EndTxn of one transaction arriving in the next (KAFKA-17754). Healed
        by ``fault(heal)``."""
        self._step("straggle", p=p, ms=ms)
        self._fault("straggle", {"p": p, "ms": ms})


def _reader(machine: ClusterMachine, node: int, i: int) -> Reader:
    return Reader(node, i, BROKERS, machine.consumer_config(True), machine.keys)


def _sent_by(node: int, request: str, src: int, _dst: int, m: Any) -> bool:
    """Whether message ``m`` is a request named ``request`` sent by ``node`` (a hold's match)."""
    return src == node and type(m).__name__ == request


def _released(sim: Simulation, held: tuple[Callable[[int, int, Any], bool], int]) -> bool:
    """Whether the hold ``held`` met its message (it is no longer waiting)."""
    return held not in sim.holds


class TxnEpochEndMachine(TxnMachine):
    """The txn machine at transaction version 2, its producer ids starting 2 epochs before
    their last (32766): each writer reaches the end of its epochs, and moves to a new producer
    id, within its first transactions."""

    broker_settings: ClassVar[dict[str, Any]] = {"transaction_version": 2, "producer_epoch_start": 32_764}
    focus = (*TxnMachine.focus, "txn-producer-id-rotated")


# ------------------------------------------------------------ with real clients

def real_txn_loop(run: RealRun) -> None:
    """txn: one op is a transaction of 1-3 sends."""
    h, rng, topic = run.h, run.rng, run.topic
    process = h.new_process()
    txn_id = f"kafkacheck-{topic}-{process}"
    sender = None
    while not run.stop.is_set():
        if sender is None:
            sender = run.txn_sender(txn_id)
            continue
        sends = [(p, run.next_value(f"{topic}:{p}"))
                 for p in (rng.randrange(REAL_PARTITIONS) for _ in range(rng.randint(1, 3)))]
        h.op(process, "invoke", "txn", [["send", f"{topic}:{p}", v] for p, v in sends], transactional_id=txn_id)
        done: list = []
        abort_on_purpose = rng.random() < 0.2
        pausing = run.pauses and rng.random() < 0.5
        try:
            sender.begin()
            for p, v in sends:
                done.append(["send", f"{topic}:{p}", [sender.send(topic, p, v), v]])
                run.pause(pausing)
        except Exception as e:
            rest = [["send", f"{topic}:{p}", [None, v]] for p, v in sends[len(done):]]
            sender = run.abort(sender)
            h.op(process, "fail", "txn", done + rest, error=str(e)[:80], transactional_id=txn_id,
                 aborted=sender is not None)
            continue
        if abort_on_purpose:
            sender = run.abort(sender)
            h.op(process, "fail", "txn", done, error="aborted on purpose", transactional_id=txn_id,
                 aborted=sender is not None)
            continue
        run.pause(pausing)
        try:
            sender.commit()
            h.op(process, "ok", "txn", done, transactional_id=txn_id)
        except NotCommitted as e:  # certainly not committed: its sends must never be read
            sender = run.abort(sender)
            h.op(process, "fail", "txn", done, error=str(e)[:80], transactional_id=txn_id, aborted=sender is not None)
        except Exception as e:
            h.op(process, "info", "txn", done, error=str(e)[:80], transactional_id=txn_id)
            run.closed(sender)
            sender = None
            process = h.new_process()
    if sender is not None:
        run.closed(sender)


class TxnWorkload(Workload):
    name = "txn"
    description = ("Jepsen-style transactions of 1-4 sends and polls (read_committed), about 15% "
                   "aborted on purpose")
    guarantee = "committed transactions are read whole, aborted ones never (read_committed)"
    # (one assignment each: mypyc cannot compile a multiple assignment in a class body)
    idempotent = True
    transactional = True
    machine = TxnMachine
    variants = {"txn-epoch-end": TxnEpochEndMachine}  # version 2 at the end of the producers' epochs
    straggle_apis = ("EndTxn", "Produce", "AddPartitionsToTxn")

    def client(self, i: int, node_id: int, rng: random.Random) -> TxnClient:
        s = self.setup
        return TxnClient(node_id, i, s.options.clients, s.keys, s.broker_ids, rng, s.budget,
                         s.producer, s.consumer, s.timings["transaction_timeout_ms"])

    def config(self) -> dict:
        return {"transaction_version": self.setup.options.transaction_version}

    @classmethod
    def real_threads(cls, run: RealRun, producers: int, consumers: int) -> list[Callable[[], None]]:
        """``producers`` transactional producers (one op: a transaction of 1-3 sends, about one in
        five aborted on purpose) and ``consumers`` read_committed consumers."""
        # (a partial: a class method holds no closure, which mypyc cannot compile)
        return [partial(real_txn_loop, run)] * producers + [run.consumer_loop] * consumers
