"""The compaction workload: keyed updates and deletes on a compacted topic, and readers that
start again from the beginning.

Each client holds an idempotent producer and a consumer assigned to every partition. Ops:

* ``send``: 1-3 records, each to a random partition with one of a few record keys
  (``["send", key, value, record_key]``); about one in eight is a tombstone (value null);
* ``poll``: one fetch round; about one poll in five first seeks to the beginning (recorded
  as an ``assign`` with ``seek_to_beginning``), so readers see what the cleaner left.

Poll results carry record keys (``[offset, value, record_key]``). The topic is created with
``cleanup.policy=compact``, small segments and a low ``min.cleanable.dirty.ratio`` so that
the cleaner runs often during the run.
"""

from __future__ import annotations

import random

from kafkacheck.workloads.base import Workload
from kafkacheck.workloads.client import Budget, decode_value, encode_value
from kafkacheck.workloads.queue import QueueClient
from reference.consumer import ConsumerConfig
from reference.errors import Errors
from reference.messages import TopicPartition
from reference.producer import ProducerConfig

RECORD_KEYS = 6  # per partition
TOMBSTONE_P = 0.125


class CompactionClient(QueueClient):
    def __init__(self, node_id: int, index: int, n_clients: int, keys: list[TopicPartition],
                 bootstrap: list[int], rng: random.Random, budget: Budget,
                 producer_config: ProducerConfig, consumer_config: ConsumerConfig) -> None:
        super().__init__(node_id, index, n_clients, keys, bootstrap, rng, budget, producer_config,
                         consumer_config)

    def _next_op(self, now_ms: int) -> None:
        if self.budget.remaining <= 0:
            self.done = True
            return
        if self.rng.random() < 0.5:
            self.budget.remaining -= 1
            self.op_seq += 1
            sends = []
            for _ in range(self.rng.randint(1, 3)):
                tp = self.rng.choice(self.keys)
                record_key = f"k{self.rng.randrange(RECORD_KEYS)}"
                value = None if self.rng.random() < TOMBSTONE_P else self._value(tp)
                sends.append(["send", tp.key, value, record_key])
            self.op = {"f": "send", "value": sends}
            self.results = [None] * len(sends)
            self.pending = {}
            self.record(process=self.process, type="invoke", f="send", value=sends)
            for i, (_, key, value, record_key) in enumerate(sends):
                send_id = self.producer.send(now_ms, TopicPartition.parse(key),
                                             None if value is None else encode_value(value),
                                             record_key.encode())
                self.pending[send_id] = i
            self._collect_sends(now_ms)
            return
        self.budget.remaining -= 1
        self.op_seq += 1
        if self.rng.random() < 0.2:
            keys = [tp.key for tp in self.keys]
            self.consumer.assign(list(self.keys))
            self.consumer.seek_to_beginning()
            self.consumer.records = []
            self.record(process=self.process, type="invoke", f="assign", value=keys,
                        seek_to_beginning=True)
            self.record(process=self.process, type="ok", f="assign", value=keys,
                        seek_to_beginning=True)
        self._start_poll(now_ms)

    def _collect_sends(self, now_ms: int) -> None:
        for r in self.producer.take_results():
            i = self.pending.pop(r.send_id, None)
            if i is not None:
                self.results[i] = r
        if self.op is None or self.op["f"] != "send" or self.pending:
            return
        value = []
        errors = set()
        all_failed = True
        maybe = False
        for (_, key, v, record_key), r in zip(self.op["value"], self.results, strict=True):
            if r.error is Errors.NONE:
                all_failed = False
                value.append(["send", key, [r.offset if r.offset >= 0 else None, v], record_key])
            else:
                errors.add(r.error.name)
                maybe = maybe or r.maybe_appended
                value.append(["send", key, v, record_key])
        type_ = "ok" if not errors else ("fail" if all_failed and not maybe else "info")
        self.record(process=self.process, type=type_, f="send", value=value,
                    error=",".join(sorted(errors)) if errors else None)
        self._finish_op(now_ms, type_)

    def _finish_poll(self, now_ms: int) -> None:
        got: dict[str, list] = {}
        for r in self.consumer.take_records():
            got.setdefault(r.tp.key, []).append(
                [r.offset, decode_value(r.value), r.key.decode() if r.key is not None else None])
        self.record(process=self.process, type="ok", f="poll", value=[["poll", got]])
        self._finish_op(now_ms, "ok")


class CompactionWorkload(Workload):
    name = "compaction"
    description = ("keyed updates and tombstones on a compacted topic (small segments, an eager "
                   "cleaner); readers seek back to the beginning")
    idempotent = compacted = True

    def client(self, i: int, node_id: int, rng: random.Random) -> CompactionClient:
        s = self.setup
        return CompactionClient(node_id, i, s.options.clients, s.keys, s.broker_ids, rng, s.budget,
                                s.producer, s.consumer)
