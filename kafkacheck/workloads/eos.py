"""The eos workload: consume-transform-produce between two topics, exactly once.

Half of the clients (at least one) are idempotent producers that send unique values to the
input topic. The others are processors: processor ``j`` of ``m`` owns the input partitions
``p`` with ``p % m == j`` and runs one transaction per op:

1. poll its input partitions (read_committed, starting at the group's committed offsets);
2. send every record read to the same partition of the output topic, as the value
   ``input * 2**24 + attempt`` (the attempt numbers this op among all processors' ops);
3. ``sendOffsetsToTransaction`` the next input offsets for the consumer group;
4. commit (or, with probability ``abort_p``, abort on purpose).

The op is a ``txn`` op: its completion holds the poll and the sends; ``offsets`` (an extra
op field) names the input offsets committed with it. After an abort or an unknown outcome
the processor rewinds to the group's committed offsets (recorded as a fresh ``assign``),
which is how an exactly-once application recovers.

With ``--group-protocol`` (:class:`EosMember`) the processors instead subscribe to the input
topic as members of the group (classic or KIP-848's protocol) and commit each transaction's
offsets with their group metadata (KIP-447): one transactional id per processor, zombies
fenced by the group's generation or member epoch, as Kafka Streams' exactly-once v2. A
transaction whose input partitions the group takes back (revoked or lost) before it commits
aborts: the sans-IO member revokes at once, between the poll and the commit, where a Java
application's rebalance callback would run only in its next poll, after the commit. The
coordinator's fencing stays the guarantee: a commit sent before the revocation carries the
generation it was read in, and the next owner's read of the committed offsets
(``require_stable``) waits for that transaction to end. Completions carry the member's
``rebalance_log`` and the ``generation`` the offsets were sent with; the nemesis pauses
processors past their session timeout; after an unknown outcome a processor leaves the group
and joins again as a new process; after healing each polls once more (a ``poll`` op), so
that the consumer-group checks see its last assignment.

With real clients (``kafkacheck conform``) the processors are those of
:mod:`kafkacheck.workloads.eos_real`, assigning or, with ``--group-protocol``, members.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from fault_injection.cluster import MS
from fault_injection.simulation import Simulation
from kafkacheck.real.final_read import final_committed
from kafkacheck.real.kinds import CLIENTS
from kafkacheck.real.real_run import PARTITIONS as REAL_PARTITIONS
from kafkacheck.real.real_run import RealRun
from kafkacheck.workloads.actors import member_config
from kafkacheck.workloads.base import Setup, Workload
from kafkacheck.workloads.client import Budget, ClientBase, FinalReader, decode_value, encode_value, randint
from kafkacheck.workloads.eos_values import GROUP, REAL_GROUP, SOURCE_SHIFT, output_value
from kafkacheck.workloads.queue_client import QueueClient
from kafkacheck.workloads.rules import txn_completion
from reference.consumer import Consumer
from reference.errors import Errors
from reference.group_consumer import GroupConsumer
from reference.messages import TopicPartition
from reference.modern_consumer import ModernGroupConsumer
from reference.node import Node
from reference.producer import ProducerConfig
from reference.txn_producer import GroupMetadata, TransactionalProducer


def output_of(tp: TopicPartition, output_topic: str) -> TopicPartition:
    return TopicPartition(output_topic, tp.partition)


class EosProcessor(ClientBase):
    """A processor that assigns itself ``inputs`` (its ``consumer``, a plain one, reads them)."""

    def __init__(self, node_id: int, index: int, process: int, n_processes: int,
                 inputs: list[TopicPartition], output_topic: str, bootstrap: list[int],
                 rng: random.Random, budget: Budget, producer_config: ProducerConfig,
                 consumer: Consumer, transaction_timeout_ms: int,
                 abort_p: float = 0.1, poll_ms: int = 100, think_ms: int = 20) -> None:
        super().__init__(node_id)
        self.index = index
        self.process = process
        self.n_processes = n_processes
        self.inputs = inputs
        self.output_topic = output_topic
        self.rng = rng
        self.budget = budget
        self.abort_p = abort_p
        self.poll_ms = poll_ms
        self.think_ms = think_ms
        self.producer = TransactionalProducer(node_id, bootstrap, producer_config,
                                              f"eos-{index}", transaction_timeout_ms)
        self.txp = self.producer
        self.consumer = consumer
        self.op: dict | None = None
        self.op_seq = 0
        self.done = False

    def start(self, now_ms: int) -> None:
        self.txp.start(now_ms)  # (its producer)
        self.consumer.start(now_ms)
        self._take_inputs(now_ms)
        self.set_timer(randint(self.rng, 1, 50), "next")

    def _take_inputs(self, now_ms: int) -> None:
        self._assign()

    def _assign(self) -> None:
        keys = [tp.key for tp in self.inputs]
        self.consumer.assign(list(self.inputs))
        self.consumer.reset_positions()  # start at the group's committed offsets
        self.record(process=self.process, type="invoke", f="assign", value=keys)
        self.record(process=self.process, type="ok", f="assign", value=keys)

    # ------------------------------------------------------------ ops

    def _next_op(self, now_ms: int) -> None:
        if self.budget.remaining <= 0:
            self._out_of_ops(now_ms)
            return
        if not self.txp.ready or not self._inputs_ready():
            self.consumer.poll(now_ms)  # fetches the committed offsets first
            self.set_timer(20, "next")
            return
        self._begin(now_ms)

    def _out_of_ops(self, now_ms: int) -> None:
        self.done = True

    def _inputs_ready(self) -> bool:
        return all(tp in self.consumer.positions for tp in self.inputs)

    def _begin(self, now_ms: int) -> None:
        self.budget.remaining -= 1
        self.op_seq += 1
        self.op = {"stage": "poll", "abort": self.rng.random() < self.abort_p, "sends": [],
                   "pending": {}, "poll": {}, "error": None}
        self.record(process=self.process, type="invoke", f="txn", value=[["poll"]])
        self.txp.begin_transaction()
        self.consumer.poll(now_ms)
        self.set_timer(self.poll_ms, ("poll-done", self.op_seq))

    def _finish_poll(self, now_ms: int) -> None:
        op = self.op
        assert op is not None
        records = self._take_input_records()
        nxt: dict[TopicPartition, int] = {}
        attempt = self.op_seq * self.n_processes + self.index
        for r in records:
            v = decode_value(r.value)
            op["poll"].setdefault(r.tp.key, []).append([r.offset, v])
            nxt[r.tp] = r.offset + 1
            if v is None:
                continue
            out = output_of(r.tp, self.output_topic)
            w = output_value(v, attempt)
            send_id = self.txp.send(now_ms, out, encode_value(w))
            op["pending"][send_id] = len(op["sends"])
            op["sends"].append(["send", out.key, w])
        op["offsets"] = {tp.key: o for tp, o in sorted(nxt.items())}
        if nxt:
            self._send_offsets(now_ms, nxt)
        op["stage"] = "sending"
        self._progress(now_ms)

    def _take_input_records(self) -> list:
        return [r for r in self.consumer.take_records() if r.tp in self.inputs]

    def _send_offsets(self, now_ms: int, offsets: dict[TopicPartition, int]) -> None:
        self.txp.send_offsets_to_transaction(now_ms, offsets, GROUP)

    def _progress(self, now_ms: int) -> None:
        op = self.op
        if op is None:
            return
        if op["stage"] == "sending":
            for r in self.txp.take_results():
                i = op["pending"].pop(r.send_id, None)
                if i is None:
                    continue
                _, key, v = op["sends"][i]
                if r.error is Errors.NONE:
                    op["sends"][i] = ["send", key, [r.offset, v]]
                else:
                    op["error"] = op["error"] or r.error.name
            if op["pending"]:
                return
            op["stage"] = "ending"
            if op["error"] is None and self._inputs_moved(op):
                op["error"] = "revoked"  # no commit of offsets the group took back
            if op["abort"] or op["error"] is not None:
                self.txp.abort_transaction(now_ms)
            else:
                self.txp.commit_transaction(now_ms)
        if op["stage"] == "ending" and self.txp.outcome is not None:
            self._complete(now_ms)

    def _complete(self, now_ms: int) -> None:
        op = self.op
        assert op is not None and self.txp.outcome is not None
        outcome, error = self.txp.outcome
        value = [["poll", op["poll"]], *op["sends"]]
        type_, error = txn_completion(outcome, error, op["abort"], op["error"])
        self.record(process=self.process, type=type_, f="txn", value=value, error=error,
                    offsets=op["offsets"], **self._completion_fields(op))
        self.op = None
        self.budget.completed += 1
        if type_ == "info":
            self.process += self.n_processes
        if type_ != "ok":
            self._rewind(now_ms, type_)
        self.set_timer(randint(self.rng, 0, self.think_ms), "next")

    def _inputs_moved(self, op: dict) -> bool:
        """Whether a rebalance took back inputs whose offsets ``op`` carries (never: assigned)."""
        return False

    def _completion_fields(self, op: dict) -> dict:
        """What a txn completion carries besides its offsets."""
        return {}

    def _rewind(self, now_ms: int, type_: str) -> None:
        """After a transaction that did not commit (``fail``) or may have (``info``): back to
        the group's committed offsets."""
        self._assign()

    # ------------------------------------------------------------ inputs

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
                if self.op is not None and seq == self.op_seq and self.op["stage"] == "poll":
                    self._finish_poll(now_ms)


class EosMember(EosProcessor):
    """A processor that subscribes to the input topic as a member of the consumer group
    ``eos`` (its ``consumer``: a classic :class:`GroupConsumer` or KIP-848's
    :class:`ModernGroupConsumer`) and commits each transaction's input offsets with its group
    metadata (KIP-447), so that the coordinator refuses them once the group has moved on.

    ``inputs`` are every partition of the input topic; the group decides which it reads."""

    _log_mark = 0  # where the consumer's rebalance log stood when the transaction began

    def _take_inputs(self, now_ms: int) -> None:
        self._subscribe(now_ms)

    def _subscribe(self, now_ms: int, log: list | None = None) -> None:
        keys = [tp.key for tp in self.inputs]
        self.record(process=self.process, type="invoke", f="subscribe", value=keys)
        self.consumer.subscribe(now_ms, [self.inputs[0].topic])
        self.record(process=self.process, type="ok", f="subscribe", value=keys,
                    **({"rebalance_log": log} if log else {}))

    def _inputs_ready(self) -> bool:
        """A member of the group at rest, with a position in every partition it owns."""
        c = self.consumer
        return c.state == "stable" and all(tp in c.positions for tp in c.owned)

    def _begin(self, now_ms: int) -> None:
        self._log_mark = len(self.consumer.rebalance_log)
        super()._begin(now_ms)

    def _take_input_records(self) -> list:
        return self.consumer.take_records()  # of the partitions it owns

    def _send_offsets(self, now_ms: int, offsets: dict[TopicPartition, int]) -> None:
        c = self.consumer
        assert self.op is not None and c.member_id, "records of owned partitions, yet no membership"
        self.op["generation"] = c.generation
        self.txp.send_offsets_to_transaction(now_ms, offsets, GROUP,
                                             GroupMetadata(c.generation, c.member_id, c.config.group_instance_id))

    def _inputs_moved(self, op: dict) -> bool:
        """A partition whose offsets ``op`` carries was revoked, or the member lost its
        partitions, since the transaction began: its offsets are no longer the member's to
        commit, and the transaction aborts."""
        keys = set(op["offsets"])
        return bool(keys) and any(e["type"] == "revoked" and (e.get("lost") or keys & set(e["keys"]))
                                  for e in self.consumer.rebalance_log[self._log_mark:])

    def _completion_fields(self, op: dict) -> dict:
        fields: dict = {"generation": op["generation"]} if "generation" in op else {}
        log = self.consumer.take_rebalance_log()
        if log:
            fields["rebalance_log"] = log
        return fields

    def _rewind(self, now_ms: int, type_: str) -> None:
        """``fail``: back to the committed offsets of the partitions it owns. ``info``: the
        processor starts over (a new process): it leaves the group and joins again, and its
        next assignment says what the new process owns."""
        if type_ != "info":
            self.consumer.reset_positions()
            return
        self.consumer.close()
        log = self.consumer.take_rebalance_log()
        self.consumer.state = "unjoined"
        self._subscribe(now_ms, log)

    # ------------------------------------------------------------ the end of the run

    def _out_of_ops(self, now_ms: int) -> None:
        self.done = True
        self._idle(now_ms)

    def _idle(self, now_ms: int) -> None:
        """Out of ops: polls on (records dropped, no op) to stay in the group until the run ends."""
        if self.op is None:
            self.consumer.poll(now_ms)
            self.consumer.take_records()
        self.set_timer(self.poll_ms, "idle")

    def final_poll(self, now_ms: int) -> None:
        """After healing, one poll op whose rebalance log says what the member owns last."""
        if self.op is None:
            self.op = {"stage": "final"}
            self.record(process=self.process, type="invoke", f="poll", value=[["poll"]])
            self.consumer.poll(now_ms)
            self.set_timer(self.poll_ms, "final-poll-done")

    def _finish_final_poll(self) -> None:
        got: dict[str, list] = {}
        for r in self.consumer.take_records():
            got.setdefault(r.tp.key, []).append([r.offset, decode_value(r.value)])
        log = self.consumer.take_rebalance_log()
        self.record(process=self.process, type="ok", f="poll", value=[["poll", got]],
                    **({"rebalance_log": log} if log else {}))
        self.op = None

    def timer(self, now_ms: int, key: object) -> None:
        match key:
            case "idle":
                self._idle(now_ms)
            case "final-poll-done":
                self._finish_final_poll()
            case _:
                super().timer(now_ms, key)


class EosWorkload(Workload):
    name = "eos"
    description = ("consume-transform-produce: idempotent producers write an input topic; processors "
                   "copy it to an output topic in transactions with sendOffsetsToTransaction")
    guarantee = "consume-transform-produce copies every input record to the output exactly once"
    # (one assignment each: mypyc cannot compile a multiple assignment in a class body)
    idempotent = True
    transactional = True
    group_coordinator = True
    has_output = True
    straggle_apis = ("EndTxn", "Produce", "AddPartitionsToTxn", "AddOffsetsToTxn", "TxnOffsetCommit")

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        o = setup.options
        self.output_topic = "t1" if o.topic != "t1" else "t2"
        self.producers = max(1, o.clients // 2)  # the input producers; the other clients process

    def topics(self) -> list[tuple[str, int]]:
        return [(self.output_topic, self.setup.options.partitions)]

    def client(self, i: int, node_id: int, rng: random.Random) -> QueueClient | EosProcessor:
        s = self.setup
        n = s.options.clients
        if i < self.producers:
            return QueueClient(node_id, i, n, s.keys, s.broker_ids, rng, s.budget, s.producer, s.consumer,
                               think_ms=150, send_p=1.0)
        j, m = i - self.producers, n - self.producers
        timeout_ms = s.timings["transaction_timeout_ms"]
        if s.options.eos_subscribe:
            return EosMember(node_id, j, i, n, s.keys, self.output_topic, s.broker_ids, rng, s.budget, s.producer,
                             self._member(node_id), timeout_ms)
        return EosProcessor(node_id, j, i, n, [tp for tp in s.keys if tp.partition % m == j],
                            self.output_topic, s.broker_ids, rng, s.budget, s.producer,
                            Consumer(node_id, s.broker_ids, replace(s.consumer, group_id=GROUP)), timeout_ms)

    def _member(self, node_id: int) -> GroupConsumer | ModernGroupConsumer:
        """A processor's consumer in the group, of the run's group protocol and assignor."""
        s, o = self.setup, self.setup.options
        config = member_config(s.consumer, GROUP, o.assignor, s.timings)
        if o.group_protocol == "consumer":  # KIP-848: the coordinator assigns with --assignor
            return ModernGroupConsumer(node_id, s.broker_ids, replace(config, assignors=("range",),
                                                                       server_assignor=o.assignor),
                                       member_id=f"processor-{node_id}")  # its own (KIP-1082)
        return GroupConsumer(node_id, s.broker_ids, config)

    def members(self, clients: list[int]) -> list[int]:
        """With a group, the processors: paused past their session, they wake up as zombies."""
        return clients[self.producers:] if self.setup.options.eos_subscribe else []

    def after_heal(self, sim: Simulation, clients: list[Node]) -> None:
        """With a group, every processor polls once more: its final assignment reaches the history."""
        members = [c for c in clients if isinstance(c, EosMember)]
        for c in members:
            sim.call_at(sim.now_ns, partial(_final_poll, sim, c))
        if members:
            sim.run_until(sim.now_ns + 2_000 * MS)

    def final_reader(self, node_id: int, process: int, deadline_ms: int) -> FinalReader:
        """Both topics, and the group's committed offsets of the input."""
        s = self.setup
        outputs = [TopicPartition(self.output_topic, i) for i in range(s.options.partitions)]
        return FinalReader(node_id, process, s.keys + outputs, s.broker_ids,
                           replace(s.consumer, group_id=GROUP), deadline_ms, committed_keys=s.keys)

    def config(self) -> dict:
        o = self.setup.options
        config = {"transaction_version": o.transaction_version,
                  "eos": {"input": o.topic, "output": self.output_topic, "group": GROUP,
                          "source_shift": SOURCE_SHIFT}}
        if o.eos_subscribe:  # the processors' group, for the consumer-group checks
            config |= {"sub_via": ["subscribe"],
                       "groups": {"group": GROUP, "assignor": o.assignor, "static": False,
                                  "keys": [tp.key for tp in self.setup.keys], "final_polls": True,
                                  **({"protocol": "consumer"} if o.group_protocol == "consumer" else {})}}
        return config

    @classmethod
    def real_threads(cls, run: RealRun, producers: int, consumers: int) -> list[Callable[[], None]]:
        """``producers`` input producers, ``consumers`` read_committed consumers of both topics,
        and without a group the processors (:mod:`kafkacheck.workloads.eos_real`)."""
        from kafkacheck.workloads.eos_real import real_threads
        return real_threads(run, producers, consumers)

    @classmethod
    def real_members(cls, run: RealRun) -> list[Callable[[], None]]:
        """With ``--group-protocol``: the processors, members of the group."""
        from kafkacheck.workloads.eos_real import real_members
        return real_members(run)

    @classmethod
    def real_after_heal(cls, run: RealRun) -> None:
        """The group's committed offsets of the input."""
        final_committed(run.h, CLIENTS[run.kind](run.target.bootstrap, run.timeout_s), REAL_GROUP, run.topic,
                        REAL_PARTITIONS)

    @classmethod
    def real_config(cls, run: RealRun) -> dict:
        config: dict[str, Any] = {"eos": {"input": run.topic, "output": run.output, "group": REAL_GROUP,
                                          "source_shift": SOURCE_SHIFT}}
        if run.eos_subscribe:  # the processors' group, for the consumer-group checks
            config |= {"sub_via": ["subscribe"],
                       "groups": {"group": REAL_GROUP, "assignor": "range", "static": False, "keys": run.keys(),
                                  "final_polls": True,
                                  **({"protocol": "consumer"} if run.group_protocol == "consumer" else {})}}
        return config

    @classmethod
    def real_straggle_apis(cls, run: RealRun) -> tuple[str, ...]:
        """With KIP-848's protocol also a processor's heartbeat (its acknowledgement of a
        revocation, delivered late)."""
        extra = ("ConsumerGroupHeartbeat",) if run.eos_subscribe and run.group_protocol == "consumer" else ()
        return (*cls.straggle_apis, *extra)


def _final_poll(sim: Simulation, c: EosMember) -> None:
    """Ask a processor for its final poll through the simulation, so its outputs are routed."""
    sim.act(c.node_id, lambda node, now_ms: c.final_poll(now_ms))
