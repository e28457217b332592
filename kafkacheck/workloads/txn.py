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

from kafkacheck.workloads.base import Workload
from kafkacheck.workloads.client import Budget, ClientBase, decode_value, encode_value
from kafkacheck.workloads.queue import QueueClient
from reference.consumer import Consumer, ConsumerConfig
from reference.errors import Errors
from reference.messages import TopicPartition
from reference.producer import ProducerConfig
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
        self.producer.start(now_ms)
        self.consumer.start(now_ms)
        self._assign()
        self.set_timer(self.rng.randint(1, 50), "next")

    _assign = QueueClient._assign  # the same assign op and unique values as the queue's
    _value = QueueClient._value

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
        for _ in range(self.rng.randint(1, 4)):
            if self.rng.random() < 0.6:
                tp = self.rng.choice(self.keys)
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
        if outcome == "committed":
            type_ = "ok"
            error = None
        elif outcome == "aborted":
            type_ = "fail"
            error = "intentional-abort" if op["abort"] and op["error"] is None else (
                op["error"] or error or "aborted")
        else:
            type_ = "info"
            error = error or "unknown-outcome"
        self.record(process=self.process, type=type_, f="txn", value=value, error=error)
        if type_ == "fail":
            self._rewind(value)
        self.op = None
        self.budget.completed += 1
        if type_ == "info":
            self.process += self.n_clients
            self._assign()
        self.set_timer(self.rng.randint(0, self.think_ms), "next")

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


class TxnWorkload(Workload):
    name = "txn"
    description = ("Jepsen-style transactions of 1-4 sends and polls (read_committed), about 15% "
                   "aborted on purpose")
    idempotent = transactional = True

    def client(self, i: int, node_id: int, rng: random.Random) -> TxnClient:
        s = self.setup
        return TxnClient(node_id, i, s.options.clients, s.keys, s.broker_ids, rng, s.budget,
                         s.producer, s.consumer, s.timings["transaction_timeout_ms"])

    def config(self) -> dict:
        return {"transaction_version": self.setup.options.transaction_version}
