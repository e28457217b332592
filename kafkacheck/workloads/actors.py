"""Simulated client processes that a Hypothesis state machine commands, one op at a time.

An :class:`Actor` is a sans-IO node hosting one reference client (a producer, a
transactional producer, a consumer or a group consumer). The state machine hands it
commands (``send``, ``poll``, ``txn``, ``commit``, ``crash``, ``leave``, ``seek``); the actor
runs them in order, one op in flight, and records each op's invocation and completion as
``Event("history", ...)`` outputs at the virtual time they happen, with Jepsen's rules: a
send is ``ok`` when every record got an offset, ``fail`` when each certainly failed, ``info``
otherwise; after an ``info`` op the actor continues as a new process.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any

from mypy_extensions import mypyc_attr

from kafkacheck.workloads.rules import commit_completion, send_completion, txn_completion
from reference.consumer import Consumer, ConsumerConfig
from reference.errors import Errors
from reference.group_consumer import GroupConsumer
from reference.messages import TopicPartition
from reference.modern_consumer import ModernGroupConsumer
from reference.node import Node, Timer
from reference.producer import Producer, ProducerConfig
from reference.txn_producer import TransactionalProducer

PROCESS_STRIDE = 100  # a process that continues after an info op is process + stride
POLL_MS = 150


def _int(raw: bytes | None) -> int | None:
    try:
        return None if raw is None else int(raw)
    except ValueError:
        return None


@mypyc_attr(allow_interpreted_subclasses=True)  # compiled, it stays open to the share machine's Sharer
class Actor(Node):
    """Runs queued commands on its client, records them as ops."""

    def __init__(self, node_id: int, process: int) -> None:
        super().__init__(node_id)
        self.process = process
        self.client: Any = None
        self.gen = 0  # incarnation of the client: timers of a replaced client are ignored
        self.queue: deque = deque()
        self.op: dict | None = None
        self.seq = 0

    # ------------------------------------------------------------ node plumbing

    def start(self, now_ms: int) -> None:
        self.client.start(now_ms)
        self.started(now_ms)
        self._progress(now_ms)

    def started(self, now_ms: int) -> None:
        """After the client started (a consumer assigns here)."""

    def receive(self, now_ms: int, src: int, message: object) -> None:
        self.client.receive(now_ms, src, message)
        self._progress(now_ms)

    def connection_lost(self, now_ms: int, peer: int) -> None:
        """What the client had in flight to ``peer`` ends as its timeouts would."""
        expired_by = getattr(self.client, "expired_by", None)
        for key in expired_by(peer) if expired_by is not None else ():
            self.timer(now_ms, ("c", self.gen, key))

    def timer(self, now_ms: int, key: object) -> None:
        match key:
            case ("c", gen, inner):
                if gen == self.gen:
                    self.client.timer(now_ms, inner)
            case ("op", seq):
                if self.op is not None and seq == self.seq:
                    self.on_timer(now_ms)
        self._progress(now_ms)

    def drain(self) -> list:
        out = super().drain()
        for o in self.client.drain():
            out.append(Timer(o.delay_ms, ("c", self.gen, o.key)) if type(o) is Timer else o)
        return out

    # ------------------------------------------------------------ commands and ops

    def command(self, now_ms: int, cmd: tuple) -> None:
        self.queue.append(cmd)
        self._progress(now_ms)

    @property
    def idle(self) -> bool:
        return self.op is None and not self.queue

    def _progress(self, now_ms: int) -> None:
        if self.op is not None:
            self.check(now_ms)
        while self.op is None and self.queue and self.ready():
            self.seq += 1
            self.begin(now_ms, self.queue.popleft())
            if self._busy():  # not self.op: mypy (and so mypyc) would still take it for None here
                self.check(now_ms)

    def _busy(self) -> bool:
        return self.op is not None

    def ready(self) -> bool:
        return True

    def begin(self, now_ms: int, cmd: tuple) -> None:
        raise NotImplementedError

    def check(self, now_ms: int) -> None:
        """See whether the op in flight completed."""

    def on_timer(self, now_ms: int) -> None:
        """The op's own timer fired."""

    def record(self, type_: str, f: str, value: Any, **extra: Any) -> None:
        self.event("history", process=self.process, type=type_, f=f, value=value,
                   **{k: v for k, v in extra.items() if v is not None})

    def complete(self, type_: str, f: str, value: Any, **extra: Any) -> None:
        self.record(type_, f, value, **extra)
        self.op = None
        if type_ == "info":
            self.process += PROCESS_STRIDE
            self.continued()

    def continued(self) -> None:
        """After an info op, as a new process."""


class Writer(Actor):
    """A producer (acks and idempotence from its config). ``("send", [(tp, value, record
    key or None), ...])``; a value of None is a tombstone."""

    def __init__(self, node_id: int, process: int, bootstrap: list[int], config: ProducerConfig) -> None:
        super().__init__(node_id, process)
        self.client = Producer(node_id, bootstrap, config)

    def begin(self, now_ms: int, cmd: tuple) -> None:
        _f, sends = cmd
        value = [["send", tp.key, v] + ([k] if k is not None else []) for tp, v, k in sends]
        self.record("invoke", "send", value)
        ids = [self.client.send(now_ms, tp, None if v is None else str(v).encode(),
                                None if k is None else k.encode()) for tp, v, k in sends]
        self.op = {"sends": sends, "ids": ids, "results": {}}

    def check(self, now_ms: int) -> None:
        op = self.op
        assert op is not None
        for r in self.client.take_results():
            op["results"][r.send_id] = r
        if len(op["results"]) < len(op["ids"]):
            return
        type_, value, error, acknowledged = send_completion(
            [(tp.key, v, k) for tp, v, k in op["sends"]], [op["results"][i] for i in op["ids"]])
        if self.client.config.acks == -1:
            for key, offset in acknowledged:
                self.event("acked", key=key, offset=offset)  # watched by the invariants
        self.complete(type_, "send", value, error=error)


class TxnWriter(Actor):
    """A transactional producer. ``("txn", [(tp, value), ...], abort, dwell_ms)``: begin, send
    every record, stay in the transaction ``dwell_ms`` longer (an application's processing
    time), then commit (or abort on purpose, or abort after a failed send)."""

    def __init__(self, node_id: int, process: int, bootstrap: list[int], config: ProducerConfig,
                 transactional_id: str, timeout_ms: int) -> None:
        super().__init__(node_id, process)
        self.client = TransactionalProducer(node_id, bootstrap, config, transactional_id, timeout_ms)

    def ready(self) -> bool:
        return self.client.ready

    def begin(self, now_ms: int, cmd: tuple) -> None:
        _f, sends, abort, *rest = cmd
        dwell_ms = rest[0] if rest else 0
        self.record("invoke", "txn", [["send", tp.key, v] for tp, v in sends])
        self.client.begin_transaction()
        ids = [self.client.send(now_ms, tp, str(v).encode()) for tp, v in sends]
        self.op = {"sends": sends, "ids": ids, "results": {}, "abort": abort, "ending": False,
                   "error": None, "end_after_ms": now_ms + dwell_ms}
        if dwell_ms:
            self.set_timer(dwell_ms, ("op", self.seq))

    def on_timer(self, now_ms: int) -> None:
        self.check(now_ms)

    def check(self, now_ms: int) -> None:
        op = self.op
        assert op is not None
        for r in self.client.take_results():
            op["results"][r.send_id] = r
            if r.error is not Errors.NONE and op["error"] is None:
                op["error"] = r.error.name
        if op["error"] is None and now_ms < op["end_after_ms"]:
            return  # still processing: the transaction stays open
        if not op["ending"] and (len(op["results"]) == len(op["ids"]) or op["error"] is not None):
            op["ending"] = True
            if op["abort"] or op["error"] is not None:
                self.client.abort_transaction(now_ms)
            else:
                self.client.commit_transaction(now_ms)
        if not op["ending"] or self.client.outcome is None:
            return
        outcome, error = self.client.outcome
        value = []
        for (tp, v), i in zip(op["sends"], op["ids"], strict=True):
            r = op["results"].get(i)
            if r is not None and r.error is Errors.NONE:
                value.append(["send", tp.key, [r.offset, v]])
            else:
                value.append(["send", tp.key, v])
        type_, error = txn_completion(outcome, error, op["abort"], op["error"])
        self.complete(type_, "txn", value, error=error)


class Reader(Actor):
    """A consumer assigned to every partition. ``("poll",)`` fetches for POLL_MS;
    ``("seek",)`` goes back to the beginning (an assign op with ``seek_to_beginning``)."""

    def __init__(self, node_id: int, process: int, bootstrap: list[int], config: ConsumerConfig,
                 keys: list[TopicPartition], record_keys: bool = False) -> None:
        super().__init__(node_id, process)
        self.keys = keys
        self.record_keys = record_keys
        self.client = Consumer(node_id, bootstrap, config)

    def started(self, now_ms: int) -> None:
        self._assign(False)

    def continued(self) -> None:
        self._assign(False)

    def _assign(self, seek: bool) -> None:
        keys = [tp.key for tp in self.keys]
        self.client.assign(list(self.keys))
        if seek:
            self.client.seek_to_beginning()
            self.client.records = []
        extra = {"seek_to_beginning": True} if seek else {}
        self.record("invoke", "assign", keys, **extra)
        self.record("ok", "assign", keys, **extra)

    def begin(self, now_ms: int, cmd: tuple) -> None:
        if cmd[0] == "seek":
            self._assign(True)
            return
        self.record("invoke", "poll", [["poll"]])
        self.client.poll(now_ms)
        self.op = {"f": "poll"}
        self.set_timer(POLL_MS, ("op", self.seq))

    def on_timer(self, now_ms: int) -> None:
        got: dict[str, list] = {}
        for r in self.client.take_records():
            read: list = [r.offset, _int(r.value)]
            if self.record_keys:
                read.append(r.key.decode(errors="replace") if r.key is not None else None)
            got.setdefault(r.tp.key, []).append(read)
        self.complete("ok", "poll", [["poll", got]])


class Member(Actor):
    """A consumer-group member subscribed to the topic. Commands: ``("poll",)`` (the
    completion carries its rebalance log), ``("commit",)`` (the positions after what it
    read, in its current generation), ``("crash",)`` (torn down without leaving and rebuilt as
    a new process), ``("leave",)`` (leaves cleanly and joins again)."""

    def __init__(self, node_id: int, process: int, bootstrap: list[int], config: ConsumerConfig,
                 topic: str, keys: list[str], protocol: str = "classic") -> None:
        super().__init__(node_id, process)
        self.bootstrap = bootstrap
        self.config = config
        self.topic = topic
        self.keys = keys
        self.protocol = protocol  # the group protocol: classic, or consumer (KIP-848)
        self.client = self._new_client()

    def _new_client(self) -> GroupConsumer | ModernGroupConsumer:
        kind = ModernGroupConsumer if self.protocol == "consumer" else GroupConsumer
        c = kind(self.node_id, self.bootstrap, self.config)
        c._corr += self.gen * 10**9  # answers to the predecessor's requests never match
        return c

    def started(self, now_ms: int) -> None:
        self._subscribe(now_ms)

    def continued(self) -> None:
        self.record("invoke", "subscribe", self.keys)
        self.client.subscribe(self.client._now_ms, [self.topic])
        self.record("ok", "subscribe", self.keys)

    def _subscribe(self, now_ms: int, log: list | None = None) -> None:
        self.record("invoke", "subscribe", self.keys)
        self.client.subscribe(now_ms, [self.topic])
        self.record("ok", "subscribe", self.keys, rebalance_log=log or None)

    def begin(self, now_ms: int, cmd: tuple) -> None:
        f = cmd[0]
        if f == "poll" or (f == "commit" and not self._commit(now_ms)):
            self.record("invoke", "poll", [["poll"]])
            self.client.poll(now_ms)
            self.op = {"f": "poll"}
            self.set_timer(POLL_MS, ("op", self.seq))
        elif f == "crash":
            self.record("invoke", "crash", None)
            self.record("info", "crash", None)
            self.process += PROCESS_STRIDE
            self.gen += 1
            self.client = self._new_client()
            self.client.start(now_ms)
            self._subscribe(now_ms)
        elif f == "leave":
            self.client.close()
            log = self.client.take_rebalance_log()
            self.client.state = "unjoined"
            self._subscribe(now_ms, log)

    def _commit(self, now_ms: int) -> bool:
        c = self.client
        offsets = {tp: o for tp, o in c.consumed.items() if tp in c.owned}
        if not offsets or c._commit_corr >= 0:
            return False  # nothing to commit: the command becomes a poll
        value = {tp.key: o for tp, o in sorted(offsets.items())}
        self.op = {"f": "commit", "value": value, "generation": c.generation}
        self.record("invoke", "commit", value, generation=c.generation)
        c.commit(offsets)
        return True

    def check(self, now_ms: int) -> None:
        op = self.op
        if op is None or op["f"] != "commit" or self.client.commit_result is None:
            return
        result = self.client.commit_result
        type_ = commit_completion(result)
        self.complete(type_, "commit", op["value"], generation=op["generation"],
                      error=None if type_ == "ok" else result.name)

    def on_timer(self, now_ms: int) -> None:
        got: dict[str, list] = {}
        for r in self.client.take_records():
            got.setdefault(r.tp.key, []).append([r.offset, _int(r.value)])
        log = self.client.take_rebalance_log()
        self.complete("ok", "poll", [["poll", got]], rebalance_log=log or None)


def member_config(config: ConsumerConfig, group: str, assignor: str, timings: dict) -> ConsumerConfig:
    return replace(config, group_id=group, assignors=(assignor,), enable_auto_commit=False,
                   session_timeout_ms=timings["member_session_timeout_ms"],
                   heartbeat_interval_ms=timings["member_heartbeat_interval_ms"],
                   rebalance_timeout_ms=timings["member_rebalance_timeout_ms"],
                   max_poll_interval_ms=timings["member_max_poll_interval_ms"])
