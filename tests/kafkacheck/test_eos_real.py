"""``conform --workload eos --group-protocol classic|consumer`` without a real broker: the usage
checks, the run's threads and config, and a processor's bookkeeping (a GroupProcessor driving a
fake member and a fake transactional producer). The run against Apache Kafka is in
tests/kafkacheck/test_kafka.py."""

from __future__ import annotations

import sys
import threading
import time
import types

import pytest

from kafkacheck.cli import main
from kafkacheck.conform.options import ConformOptions
from kafkacheck.conform.protocols import check_group_protocol
from kafkacheck.real import real_run
from kafkacheck.real.handles import GroupMember, NotCommitted, TxnSender, bounded
from kafkacheck.real.real_run import RealMember, RealRun
from kafkacheck.workloads import WORKLOADS
from kafkacheck.workloads.eos_real import GroupProcessor, real_members, real_threads, revoked
from kafkacheck.workloads.eos_values import REAL_GROUP, output_value

# ---------------------------------------------------------------- usage


def _args(client: str, protocol: str | None, workload: str = "eos") -> ConformOptions:
    return ConformOptions(client=client, group_protocol=protocol, workload=workload)


@pytest.mark.parametrize(("client", "protocol"), [("java", "consumer"), ("confluent", "consumer"),
                                                  ("java", "classic"), ("confluent", "classic"),
                                                  ("kafka-python", "classic")])
def test_conform_takes_eos_with_a_group_protocol(client, protocol):
    check_group_protocol(_args(client, protocol))  # no UsageError
    assert _args(client, protocol).members_protocol == protocol


def test_without_a_group_protocol_eos_joins_no_group_and_the_groups_workloads_are_classic():
    assert _args("java", None).members_protocol is None
    assert _args("java", None, "groups").members_protocol == "classic"
    assert _args("java", "classic", "queue").members_protocol is None


def test_kafka_python_is_refused_the_consumer_protocol_for_eos_in_one_line(capsys, tmp_path):
    out = tmp_path / "out"
    assert main(["conform", "--spawn", "reference", "--workload", "eos", "--group-protocol", "consumer",
                 "--out", str(out)]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "kafka-python has only the classic one" in err[0]
    assert not out.exists()


# ---------------------------------------------------------------- the run's threads and config


def _run(eos_subscribe: bool, protocol: str = "classic") -> RealRun:
    return RealRun(WORKLOADS["eos"], types.SimpleNamespace(bootstrap="127.0.0.1:1"), "java", 1.0, 0, protocol,
                   eos_subscribe)


def test_with_a_group_the_processors_are_members_and_the_config_has_the_group():
    w = WORKLOADS["eos"]
    assigning, members = _run(False), _run(True, "consumer")
    assert len(real_threads(assigning, 3, 2)) == 8 and real_members(assigning) == []
    assert len(real_threads(members, 3, 2)) == 5 and len(real_members(members)) == 3
    assert set(w.real_config(assigning)) == {"eos"}  # as before: no group to judge
    config = w.real_config(members)
    assert config["sub_via"] == ["subscribe"] and config["eos"]["group"] == REAL_GROUP
    assert config["groups"] == {"group": REAL_GROUP, "assignor": "range", "static": False, "keys": members.keys(),
                                "final_polls": True, "protocol": "consumer"}
    assert "protocol" not in w.real_config(_run(True))["groups"]
    assert w.real_straggle_apis(members)[-1] == "ConsumerGroupHeartbeat"
    assert w.real_straggle_apis(assigning) == w.straggle_apis


# ---------------------------------------------------------------- a processor's bookkeeping


class _Member(GroupMember):
    """A member's bookkeeping without a client: each poll runs the next scripted step (its
    rebalance callbacks) and returns one record of each partition the step names (default:
    those the member owns); closing reports its partitions revoked."""

    def __init__(self, steps) -> None:
        self.kind, self.topic, self.timeout_s, self.protocol = "java", "in", 1.0, "consumer"
        self._reset()
        self.steps = iter(steps)
        self.offset = 10
        self.rewinds = 0
        self.closed = False

    def _fetch(self):
        keys = next(self.steps, lambda m: None)(self) or sorted(self.owned)
        self.offset += 1
        return [(k.rpartition(":")[0], int(k.rpartition(":")[2]), self.offset, 7) for k in keys]

    def _polled_epoch(self) -> int:
        return self.generation

    def rewind(self) -> None:
        self.rewinds += 1

    def close(self) -> None:
        self.closed = True
        self.revoked_keys(set(self.owned), False)


class _Sender:
    """A transactional producer that records its calls; ``commit_error`` is raised by commit."""

    def __init__(self, commit_error: Exception | None = None) -> None:
        self.calls: list[str] = []
        self.commit_error = commit_error

    def begin(self) -> None:
        self.calls.append("begin")

    def send_many(self, topic, sends):
        self.calls.append("send")
        return [100 + i for i, _ in enumerate(sends)]

    def send_offsets(self, offsets, member) -> int:
        self.calls.append("offsets")
        return member.generation

    def commit(self) -> None:
        self.calls.append("commit")
        if self.commit_error is not None:
            raise self.commit_error

    def abort(self) -> None:
        self.calls.append("abort")

    def close(self) -> None:
        self.calls.append("close")


def _processor(monkeypatch, *members: _Member, sender: _Sender | None = None):
    """A processor of a run whose made members are ``members``, in turn; no op is drawn as an
    abort on purpose."""
    made = iter(members)
    monkeypatch.setattr(real_run, "make_member", lambda *a, **k: next(made))
    run = _run(True, "consumer")
    run.rng = types.SimpleNamespace(random=lambda: 0.9)
    p = GroupProcessor(run, 0, 3, RealMember(run, 0, REAL_GROUP, "read_committed"))
    p.sender = sender or _Sender()
    return run, p


def _done(run: RealRun, f: str = "txn") -> list[dict]:
    return [o for o in run.h.recorder.ops if o["f"] == f and o["type"] != "invoke"]


def test_a_transaction_whose_partition_is_revoked_in_its_poll_aborts_and_rewinds(monkeypatch):
    """As librdkafka may: records of a partition, then its revocation, in one poll."""
    def assign(m):
        m.assigned_keys({"in:0", "in:1"}, 3)

    def revoke(m):  # its callbacks ran after the records of in:1 were fetched
        m.revoked_keys({"in:1"}, False)
        return ["in:0", "in:1"]

    member = _Member([assign, revoke])
    run, p = _processor(monkeypatch, member)
    p.transact()
    p.transact()
    first, second = _done(run)
    assert first["type"] == "ok" and first["generation"] == 3 and first["offsets"] == {"in:0": 12, "in:1": 12}
    assert first["rebalance_log"][0]["owned"] == ["in:0", "in:1"]
    assert second["type"] == "fail" and second["error"] == "revoked" and second["aborted"] is True
    assert second["rebalance_log"][0] == {"type": "revoked", "keys": ["in:1"], "generation": 3}
    assert second["value"][1] == ["send", f"{run.output}:0", [100, output_value(7, 2 * 3)]]  # sent, then aborted
    assert p.sender.calls[-4:] == ["begin", "send", "offsets", "abort"] and member.rewinds == 1


def test_a_revocation_of_a_partition_the_transaction_does_not_carry_lets_it_commit(monkeypatch):
    def assign(m):
        m.assigned_keys({"in:0"}, 3)

    def revoke_other(m):
        m.revoked_keys({"in:2"}, False)

    member = _Member([assign, revoke_other])
    run, p = _processor(monkeypatch, member)
    p.transact()
    p.transact()
    assert [o["type"] for o in _done(run)] == ["ok", "ok"] and member.rewinds == 0
    assert revoked([{"type": "revoked", "keys": [], "generation": 3, "lost": "lost"}], {"in:0"})  # lost: all
    assert not revoked([{"type": "revoked", "keys": ["in:0"], "generation": 3}], set())  # nothing carried


def test_a_commit_refused_for_a_stale_member_epoch_is_a_definite_abort(monkeypatch):
    error = RuntimeError("STALE_MEMBER_EPOCH: CommitFailedException: the member epoch is stale")
    member = _Member([lambda m: m.assigned_keys({"in:0"}, 3)])
    run, p = _processor(monkeypatch, member, sender=_Sender(error))
    p.transact()
    [txn] = _done(run)
    assert txn["type"] == "fail" and txn["error"].startswith("STALE_MEMBER_EPOCH") and member.rewinds == 1
    p.sender.commit_error = NotCommitted("INVALID_TXN_STATE: ...")
    p.transact()
    assert _done(run)[-1]["type"] == "fail"


def test_an_unknown_outcome_starts_a_new_process_with_a_new_member(monkeypatch):
    first = _Member([lambda m: m.assigned_keys({"in:0"}, 3)])
    second = _Member([])
    sender = _Sender(RuntimeError("REQUEST_TIMED_OUT: no answer"))
    run, p = _processor(monkeypatch, first, second, sender=sender)
    before = p.member.process
    p.transact()
    [txn] = _done(run)
    assert txn["type"] == "info" and txn["process"] == before
    assert p.sender is None and sender.calls[-1] == "close" and first.closed and p.member.m is second
    subscribes = _done(run, "subscribe")
    assert [o["process"] for o in subscribes] == [before, p.member.process] and p.member.process != before
    assert subscribes[-1]["rebalance_log"] == [{"type": "revoked", "keys": ["in:0"], "generation": 3}]


def test_a_member_whose_poll_fails_is_given_up_after_the_transaction_aborts(monkeypatch):
    def fail(m):
        raise RuntimeError("REQUEST_TIMED_OUT: the Java client did not answer poll")

    member = _Member([fail])
    run, p = _processor(monkeypatch, member)
    before = p.member.process
    p.transact()
    [txn] = _done(run)
    assert txn["type"] == "fail" and txn["aborted"] is True and txn["value"] == [["poll", {}]]
    assert [o["f"] for o in _done(run, "crash")] == ["crash"] and member.closed
    assert p.member.m is None and p.member.process != before and member.rewinds == 0


def test_a_bounded_call_returns_raises_or_times_out():
    """How a member's kafka-python producer keeps its processor going: its commit, abort and
    send_offsets wait without a timeout while the coordinator cannot be reached."""
    assert bounded(lambda: 5, 1.0) == 5
    with pytest.raises(ValueError, match="refused"):
        bounded(lambda: (_ for _ in ()).throw(ValueError("refused")), 1.0)
    release = threading.Event()
    with pytest.raises(TimeoutError, match="no answer within"):
        bounded(release.wait, 0.1)
    release.set()


class _StuckProducer:
    """librdkafka's transactional producer as a stuck processor met it: send_offsets_to_transaction
    waits past its timeout (its request to the group coordinator has no deadline: librdkafka
    #5456, #5511), and abort_transaction is refused while that call is under way."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls: list[str] = []

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def commit_transaction(self, timeout) -> None:
        self.calls.append("commit")

    def produce(self, topic, value, partition, on_delivery) -> None:
        self.calls.append("produce")
        on_delivery(None, types.SimpleNamespace(offset=lambda: 100))

    def send_offsets_to_transaction(self, offsets, metadata, timeout) -> None:
        self.calls.append("send_offsets")
        self.release.wait(10)

    def abort_transaction(self, timeout) -> None:
        self.calls.append("abort")
        raise RuntimeError("_CONFLICT: Conflicting send_offsets_to_transaction API call is already in progress")

    def flush(self, timeout) -> int:
        self.calls.append("flush")
        return 0


def test_a_confluent_send_offsets_that_outwaits_its_timeout_is_given_up_and_the_member_goes_on(monkeypatch):
    """A member whose producer's send_offsets_to_transaction never returned stopped polling, so
    it never gave back the partitions the coordinator took (unowned-partition after healing):
    the call is bounded, the transaction fails, and the producer is replaced."""
    member = _Member([lambda m: m.assigned_keys({"in:0"}, 3)])
    member.c = types.SimpleNamespace(consumer_group_metadata=lambda: b"CGMDv2:" + (3).to_bytes(4, sys.byteorder))
    producer = _StuckProducer()
    sender = TxnSender.__new__(TxnSender)  # no client: the confluent kind's calls go to the fake
    sender.kind, sender.timeout_s, sender.bounded, sender.p = "confluent", 0.1, True, producer
    run, p = _processor(monkeypatch, member, sender=sender)
    start = time.monotonic()
    try:
        p.transact()
    finally:
        producer.release.set()
    assert time.monotonic() - start < 5
    [txn] = _done(run)
    assert txn["type"] == "fail" and txn["error"].startswith("no answer within") and txn["aborted"] is False
    assert producer.calls == ["begin", "produce", "flush", "send_offsets", "abort", "flush"]
    assert p.sender is None  # the next one fences it, which aborts the transaction
    assert member.rewinds == 1 and p.member.m is member and not member.closed  # the member polls on
