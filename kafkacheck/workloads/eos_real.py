"""The eos workload with real clients (``kafkacheck conform --workload eos``): its processors.

Without ``--group-protocol`` each processor assigns itself its input partitions
(:func:`real_processor_loop`, as the simulated :class:`~kafkacheck.workloads.eos.EosProcessor`):
a read_committed consumer of group ``kafkacheck-eos`` starting at its committed offsets, one
transaction per op, and after an abort or an unknown outcome a fresh consumer (an ``assign``
op) at the committed offsets.

With ``--group-protocol classic`` or ``consumer`` (:class:`GroupProcessor`, as the simulated
:class:`~kafkacheck.workloads.eos.EosMember`) the processors are the members of that group, as
Kafka Streams' exactly-once v2 runs them: one consumer each, subscribed to the input topic
(read_committed; classic: the range assignor; consumer, KIP-848: the coordinator's range
assignor), and one transactional producer each, its transactional id kept across
rebalances. A transaction polls, sends the outputs, sends the offsets with the consumer's
group metadata (``sendOffsetsToTransaction(offsets, consumer.groupMetadata())``, KIP-447:
the coordinator refuses them once the generation or member epoch is stale) and commits, or
aborts (on purpose, one in ten; or, error ``revoked``, when the poll's rebalance callbacks
revoked a partition whose offsets it carries, or lost the member's partitions). A refusal
of the offsets or of the commit is a definite abort (``fail``); after one the processor
seeks back to the group's committed offsets (read_committed: the offset fetch waits for a
transaction still carrying offsets). After an unknown outcome (``info``) it starts over as a
new process: a new producer, which fences the old one, and a new member. Completions carry
the member's ``rebalance_log`` and the ``generation`` the offsets went with. When the
workload stops the processors poll on (``poll`` ops), and after healing until the group
settles, so that the consumer-group checks see each one's last assignment.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kafkacheck.real.handles import NotCommitted, Poller, TxnSender, commit_refused, maybe_committed
from kafkacheck.real.kinds import make_poller
from kafkacheck.real.real_run import PARTITIONS as REAL_PARTITIONS
from kafkacheck.real.real_run import RealMember, RealRun
from kafkacheck.workloads.eos_values import REAL_GROUP, output_value

PROCESSORS = 3  # the members of the group (--group-protocol)
ABORT_P = 0.1  # a transaction aborted on purpose


def real_threads(run: RealRun, producers: int, consumers: int) -> list[Callable[[], None]]:
    """``producers`` input producers, ``consumers`` read_committed consumers of both topics, and
    without a group as many assigning processors (up to one a partition)."""
    if run.eos_subscribe:  # the processors are members (real_members)
        return [run.producer_loop] * producers + [run.consumer_loop] * consumers
    m = max(1, min(REAL_PARTITIONS, producers))
    return ([run.producer_loop] * producers + [lambda j=j: real_processor_loop(run, j, m) for j in range(m)]
            + [run.consumer_loop] * consumers)


def real_members(run: RealRun) -> list[Callable[[], None]]:
    """With a group, the processors: they poll on after healing until the group settles."""
    if not run.eos_subscribe:
        return []
    return [lambda j=j: group_processor_loop(run, j, PROCESSORS) for j in range(PROCESSORS)]


# ------------------------------------------------------------ processors that assign


def real_processor_loop(run: RealRun, j: int, m: int) -> None:
    """Processor ``j`` of ``m``: one transaction per op, as the simulated :class:`EosProcessor`."""
    h, rng = run.h, run.rng
    assert run.output is not None
    inputs = [(run.topic, p) for p in range(REAL_PARTITIONS) if p % m == j]
    in_keys = [f"{t}:{p}" for t, p in inputs]
    process = h.new_process()
    txn_id = f"kafkacheck-{run.output}-{j}"
    sender: TxnSender | None = None
    poller: Poller | None = None
    seq = 0
    while not run.stop.is_set():
        if sender is None:
            sender = run.txn_sender(txn_id)  # fences its predecessor
            continue
        if poller is None:  # (re)start at the group's committed offsets
            try:
                poller = run.opened(make_poller(run.kind, run.target.bootstrap, inputs, run.timeout_s,
                                                 "read_committed", group=REAL_GROUP))
            except Exception:
                time.sleep(0.5)
                continue
            h.op(process, "invoke", "assign", in_keys)
            h.op(process, "ok", "assign", in_keys)
        seq += 1
        attempt = seq * m + j
        abort_on_purpose = rng.random() < 0.1
        h.op(process, "invoke", "txn", [["poll"]], transactional_id=txn_id)
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
                    nxt[(run.topic, p)] = off + 1
                    if v is not None:
                        planned.append((p, output_value(v, attempt)))
            results = sender.send_many(run.output, planned) if planned else []
            for (p, w), r in zip(planned, results, strict=True):
                done.append(["send", f"{run.output}:{p}", [r if isinstance(r, int) else None, w]])
            failed = [r for r in results if not isinstance(r, int)]
            if failed:
                raise RuntimeError(failed[0])
            if nxt:
                sender.send_offsets(nxt, poller)
        except Exception as e:
            rest = [["send", f"{run.output}:{p}", [None, w]] for p, w in planned[len(done):]]
            sender = run.abort(sender)
            h.op(process, "fail", "txn", [["poll", got], *done, *rest], error=str(e)[:80],
                 offsets={f"{t}:{p}": o for (t, p), o in sorted(nxt.items())}, transactional_id=txn_id,
                 aborted=sender is not None)
            run.closed(poller)
            poller = None
            continue
        offsets = {f"{t}:{p}": o for (t, p), o in sorted(nxt.items())}
        if abort_on_purpose:
            sender = run.abort(sender)
            h.op(process, "fail", "txn", [["poll", got], *done], error="intentional-abort", offsets=offsets,
                 transactional_id=txn_id, aborted=sender is not None)
            run.closed(poller)
            poller = None
            continue
        run.pause(run.pauses and rng.random() < 0.5)
        try:
            sender.commit()
            h.op(process, "ok", "txn", [["poll", got], *done], offsets=offsets, transactional_id=txn_id)
        except NotCommitted as e:  # certainly not committed: rewind to the committed offsets
            sender = run.abort(sender)
            h.op(process, "fail", "txn", [["poll", got], *done], error=str(e)[:80], offsets=offsets,
                 transactional_id=txn_id, aborted=sender is not None)
            run.closed(poller)
            poller = None
        except Exception as e:
            h.op(process, "info", "txn", [["poll", got], *done], error=str(e)[:80], offsets=offsets,
                 transactional_id=txn_id)
            run.closed(sender)
            sender = None
            run.closed(poller)
            poller = None
            process = h.new_process()
    if sender is not None:
        run.closed(sender)
    if poller is not None:
        run.closed(poller)


# ------------------------------------------------------------ members of the group


def group_processor_loop(run: RealRun, j: int, n: int) -> None:
    """Processor ``j`` of ``n``, a member of the group ``kafkacheck-eos``."""
    threading.current_thread().name = f"eos-processor-{j}"  # names its calls and clients in debug logs
    GroupProcessor(run, j, n, RealMember(run, j, REAL_GROUP, "read_committed")).loop()


def revoked(log: list[dict], keys: set[str]) -> bool:
    """Whether a member's rebalance ``log`` revokes one of ``keys`` (the partitions whose
    offsets a transaction carries) or loses the member's partitions."""
    return bool(keys) and any(e["type"] == "revoked" and (e.get("lost") or keys & set(e["keys"])) for e in log)


def stale_member(e: Exception) -> bool:
    """Whether a failed commit was refused because the member's generation or member epoch is
    stale (the producer failed at its offsets, so no EndTxn committed it)."""
    text = f"{type(e).__name__} {e}"
    return commit_refused(text) and not maybe_committed(text)


@dataclass
class _Txn:
    """What one transaction did: the poll, the sends (answered, then planned), the offsets."""

    got: dict = field(default_factory=dict)
    sends: list = field(default_factory=list)  # ["send", key, [offset or None, value]] of the sends made
    planned: list = field(default_factory=list)  # (partition, output value)
    nxt: dict = field(default_factory=dict)  # (topic, partition) -> the next input offset
    generation: int | None = None  # the one the offsets were sent with

    def value(self, output: str) -> list:
        rest = [["send", f"{output}:{p}", [None, w]] for p, w in self.planned[len(self.sends):]]
        return [["poll", self.got], *self.sends, *rest]

    @property
    def offsets(self) -> dict[str, int]:
        return {f"{t}:{p}": o for (t, p), o in sorted(self.nxt.items())}


class GroupProcessor:
    """A processor as a member of the group: its ``member`` (the consumer, and the process its
    ops are recorded under) and its transactional producer ``sender``."""

    def __init__(self, run: RealRun, j: int, n: int, member: RealMember) -> None:
        self.run, self.j, self.n, self.member = run, j, n, member
        self.txn_id = f"kafkacheck-{run.output}-{j}"
        self.sender: TxnSender | None = None
        self.seq = 0

    def loop(self) -> None:
        """Transactions until the workload stops; then polls until the run is done."""
        run, member = self.run, self.member
        while not run.stop.is_set():
            if self.sender is None:
                # fences its predecessor; no call of it hangs (a member holds partitions)
                with run.watch.call("init_transactions"):
                    self.sender = run.txn_sender(self.txn_id, bounded=True)
            elif member.m is None:
                member.join()
            else:
                self.transact()
        if self.sender is not None:
            with run.watch.call("close producer"):
                run.closed(self.sender)
            self.sender = None
        while not run.done.is_set():  # in the group until it settles after healing
            if member.m is None:
                member.join()
            else:
                member.poll()
        member.stop()

    def transact(self) -> None:
        """One transaction: poll, copy, send the offsets, then commit or abort."""
        run, member, sender = self.run, self.member, self.sender
        m = member.m
        assert m is not None and sender is not None
        self.seq += 1
        attempt = self.seq * self.n + self.j
        on_purpose = run.rng.random() < ABORT_P
        run.h.op(member.process, "invoke", "txn", [["poll"]], transactional_id=self.txn_id)
        t = _Txn()
        mark = len(m.log)  # the callbacks of the poll below are the transaction's
        try:
            with run.watch.call("begin_transaction"):
                sender.begin()
        except Exception as e:
            self._fail(t, str(e))
            return
        try:
            with run.watch.call("consume"):
                t.got = m.poll()
        except Exception as e:  # the member's client failed: given up, it joins again
            self._fail(t, str(e), rewind=False)
            member.give_up()
            return
        try:
            self._copy(t, attempt)
        except Exception as e:  # a send failed, or the offsets were refused (a stale generation)
            self._fail(t, str(e))
            return
        if revoked(m.log[mark:], set(t.offsets)):
            self._fail(t, "revoked")  # no commit of offsets the group took back
        elif on_purpose:
            self._fail(t, "intentional-abort")
        else:
            self._commit(t)

    def _copy(self, t: _Txn, attempt: int) -> None:
        """Send every record polled to the output, then the next input offsets with the
        member's group metadata; raises when a send failed or the offsets were refused."""
        run, sender = self.run, self.sender
        assert sender is not None and run.output is not None
        for key, pairs in t.got.items():
            topic, _, p = key.rpartition(":")
            for off, v in pairs:
                t.nxt[(topic, int(p))] = off + 1
                if v is not None:
                    t.planned.append((int(p), output_value(v, attempt)))
        with run.watch.call(f"produce+flush {len(t.planned)}"):
            results = sender.send_many(run.output, t.planned) if t.planned else []
        for (p, w), r in zip(t.planned, results, strict=True):
            t.sends.append(["send", f"{run.output}:{p}", [r if isinstance(r, int) else None, w]])
        failed = [r for r in results if not isinstance(r, int)]
        if failed:
            raise RuntimeError(failed[0])
        if t.nxt:
            with run.watch.call("send_offsets_to_transaction"):
                t.generation = sender.send_offsets(t.nxt, self.member.m)

    def _commit(self, t: _Txn) -> None:
        run, sender = self.run, self.sender
        assert sender is not None
        run.pause(run.pauses and run.rng.random() < 0.5)
        try:
            with run.watch.call("commit_transaction"):
                sender.commit()
        except Exception as e:
            if isinstance(e, NotCommitted) or stale_member(e):
                self._fail(t, str(e))
            else:
                self._unknown(t, str(e))
            return
        self._record(t, "ok")

    def _fail(self, t: _Txn, error: str, rewind: bool = True) -> None:
        """Certainly not committed: aborted (a producer that cannot abort is replaced, which
        aborts it), recorded ``fail``, and back to the group's committed offsets."""
        assert self.sender is not None
        with self.run.watch.call("abort_transaction"):
            self.sender = self.run.abort(self.sender)
        self._record(t, "fail", error=error[:80], aborted=self.sender is not None)
        if rewind:
            self._rewind()

    def _unknown(self, t: _Txn, error: str) -> None:
        """An unknown outcome (``info``): a new producer (it fences this one and aborts the
        transaction unless it committed) and a new member, under a new process."""
        assert self.sender is not None
        self._record(t, "info", error=error[:80])
        with self.run.watch.call("close producer"):
            self.run.closed(self.sender)
        self.sender = None
        self.member.restart()

    def _rewind(self) -> None:
        """Back to the committed offsets of the partitions the member has; a client that
        cannot seek is given up (a new one starts at the committed offsets)."""
        m = self.member.m
        assert m is not None
        try:
            with self.run.watch.call("rewind (committed+seek)"):
                m.rewind()
        except Exception:
            self.member.give_up()

    def _record(self, t: _Txn, type_: str, **extra) -> None:
        """The transaction's completion, with the member's rebalance log since its last op."""
        m, run = self.member.m, self.run
        assert run.output is not None
        log = m.take_log() if m is not None else []
        fields = {"offsets": t.offsets, "transactional_id": self.txn_id, **extra,
                  **({"generation": t.generation} if t.generation is not None else {}),
                  **({"rebalance_log": log} if log else {})}
        run.h.op(self.member.process, type_, "txn", t.value(run.output), **fields)
