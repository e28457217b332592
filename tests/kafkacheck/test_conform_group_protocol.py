"""``conform --group-protocol consumer`` (KIP-848) without a real Kafka: the refusals (a client
or a workload without the protocol, a broker without ConsumerGroupHeartbeat), the members'
incremental bookkeeping, and when a group of the consumer protocol has converged. The runs
against Apache Kafka are in tests/kafkacheck/test_kafka.py."""

from __future__ import annotations

import argparse
import socket
import threading
import types

import pytest

from kafkacheck.cli import main
from kafkacheck.commands.conform import _straggle_apis
from kafkacheck.conform.options import ConformOptions
from kafkacheck.conform.protocols import check_broker_protocol
from kafkacheck.exits import UsageError
from kafkacheck.real.handles import GroupMember, commit_refused
from kafkacheck.real.real_run import RealRun
from kafkacheck.workloads import WORKLOADS
from properties.checker import check
from reference.server.protocol import recv_exact


def _refused(capsys, argv: list[str]) -> str:
    """The one line on stderr of a conform command that exits 3."""
    assert main(["conform", *argv]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(("argv", "says"), [
    (["--client", "kafka-python", "--workload", "groups"], "--client java or confluent"),
    (["--workload", "at-most-once"], "kafka-python has only the classic one"),  # kafka-python: the default client
    (["--client", "java", "--workload", "txn"], "goes with the groups, at-most-once and eos workloads"),
    (["--client", "confluent", "--workload", "queue"], "the queue workload's clients do not join a consumer group"),
])
def test_consumer_protocol_refused_before_anything_starts(capsys, tmp_path, argv, says):
    out = tmp_path / "out"
    line = _refused(capsys, ["--spawn", "reference", "--group-protocol", "consumer", *argv, "--out", str(out)])
    assert says in line
    assert not out.exists()  # refused before the report directory, let alone a broker


def test_a_broker_without_consumer_group_heartbeat_is_refused_after_api_versions(capsys, tmp_path):
    from kafkacheck.conform.targets import TargetError, tansu_binary

    try:
        tansu_binary()
    except TargetError as e:
        pytest.skip(str(e))
    line = _refused(capsys, ["--spawn", "tansu", "--client", "confluent", "--workload", "groups",
                             "--group-protocol", "consumer", "--out", str(tmp_path / "tansu")])
    assert "does not advertise ConsumerGroupHeartbeat (API 68)" in line and "--group-protocol classic" in line


def test_the_broker_check_reads_the_advertised_apis_then_asks(monkeypatch):
    from kafkacheck.conform import targets

    answers_unsupported = [False]
    monkeypatch.setattr(targets, "consumer_protocol_off", lambda host, port, timeout_s: answers_unsupported[0])
    options = ConformOptions(group_protocol="consumer", timeout=5.0)
    target = types.SimpleNamespace(apis={18: (0, 4), 68: (0, 1)}, first=lambda: ("127.0.0.1", 9092))
    check_broker_protocol(options, target)  # advertised and served: nothing to say
    answers_unsupported[0] = True  # Kafka 3.9's default: advertised, refused
    with pytest.raises(UsageError, match="answers it UNSUPPORTED_VERSION: its KIP-848 consumer groups are off"):
        check_broker_protocol(options, target)
    target.apis.pop(68)
    with pytest.raises(UsageError, match=r"127\.0\.0\.1:9092 does not advertise ConsumerGroupHeartbeat"):
        check_broker_protocol(options, target)
    check_broker_protocol(ConformOptions(group_protocol="classic", timeout=5.0), target)  # needs none


@pytest.mark.parametrize(("error", "off"), [(35, True), (16, False), (69, False)])
def test_the_probe_heartbeat_tells_a_protocol_that_is_off(error, off):
    """A broker answering the probe's leave UNSUPPORTED_VERSION (35) has the protocol off;
    NOT_COORDINATOR (16, Kafka 4) or GROUP_ID_NOT_FOUND (69, the reference) serve it."""
    from kafkacheck.conform.targets import consumer_protocol_off
    from reference.server.protocol import encode_response, peek_header

    server = socket.create_server(("127.0.0.1", 0))
    asked: list[tuple[int, int, int]] = []

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            size = int.from_bytes(recv_exact(conn, 4), "big")
            key, version, corr = peek_header(recv_exact(conn, size))
            asked.append((key, version, corr))
            conn.sendall(encode_response(key, version, corr, {
                "throttle_time_ms": 0, "error_code": error, "error_message": None, "member_id": None,
                "member_epoch": -1, "heartbeat_interval_ms": 0, "assignment": None}))

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    try:
        assert consumer_protocol_off("127.0.0.1", server.getsockname()[1], 5.0) is off
    finally:
        thread.join(5)
        server.close()
    assert asked and asked[0][:2] == (68, 0)


def test_straggle_may_hold_a_members_heartbeat_and_commit():
    assert _straggle_apis("ConsumerGroupHeartbeat,OffsetCommit") == ["ConsumerGroupHeartbeat", "OffsetCommit"]
    with pytest.raises(argparse.ArgumentTypeError, match="Heartbeat"):
        _straggle_apis("Heartbeat")
    classic, consumer = (_run("groups", protocol) for protocol in ("classic", "consumer"))
    assert WORKLOADS["groups"].real_straggle_apis(classic) == ("Produce",)
    assert WORKLOADS["at-most-once"].real_straggle_apis(consumer) == ("Produce", "ConsumerGroupHeartbeat",
                                                                      "OffsetCommit")
    assert WORKLOADS["groups"].real_config(consumer)["groups"]["protocol"] == "consumer"
    assert "protocol" not in WORKLOADS["groups"].real_config(classic)["groups"]


def test_a_refused_commit_of_the_consumer_protocol_is_definite():
    assert commit_refused("KafkaError{code=STALE_MEMBER_EPOCH,val=113}")
    assert commit_refused("FENCED_MEMBER_EPOCH: FencedMemberEpochException: The member epoch is fenced")
    assert not commit_refused("REQUEST_TIMED_OUT: TimeoutException: timed out")


# ---------------------------------------------------------------- the members' bookkeeping


class _Member(GroupMember):
    """The bookkeeping of a GroupMember without its client: polls return one record of
    ``t:0`` and then the member epoch of ``epochs``."""

    def __init__(self, protocol: str, epochs=()) -> None:
        self.kind, self.topic, self.timeout_s, self.protocol = "confluent", "t", 1.0, protocol
        self._reset()
        self.epochs = iter(epochs)

    def _fetch(self):
        return [("t", 0, 7, 1)]

    def _polled_epoch(self) -> int:
        return next(self.epochs)


def test_consumer_protocol_assignments_add_to_what_the_member_owns():
    m = _Member("consumer")
    m.assigned_keys({"t:0", "t:1"}, 2)
    m.assigned_keys({"t:2"}, 4)  # incremental: only the partition added
    assert m.owned == {"t:0", "t:1", "t:2"} and m.generation == 4
    m.revoked_keys({"t:0"}, False)
    assert m.owned == {"t:1", "t:2"}
    assert m.take_log() == [
        {"type": "assigned", "keys": ["t:0", "t:1"], "generation": 2, "owned": ["t:0", "t:1"]},
        {"type": "assigned", "keys": ["t:2"], "generation": 4, "owned": ["t:0", "t:1", "t:2"]},
        {"type": "revoked", "keys": ["t:0"], "generation": 4}]
    classic = _Member("classic")
    classic.assigned_keys({"t:0", "t:1"}, 2)
    classic.assigned_keys({"t:2"}, 3)  # eager: the whole assignment
    assert classic.owned == {"t:2"}


def test_after_a_poll_a_new_epoch_or_a_bare_revocation_is_noted():
    m = _Member("consumer", epochs=[4, 4, 6, 0, 6])
    m.assigned_keys({"t:0", "t:1"}, 4)
    assert m.poll() == {"t:0": [[7, 1]]} and m.positions == {"t:0": 8}
    m.revoked_keys({"t:1"}, False)  # revoked, nothing added: what it owns is noted at the epoch it holds
    m.poll()
    m.poll()  # epoch 6, the same partitions
    m.poll()  # no epoch of the group (rejoining): nothing to note
    m.poll()  # nothing changed since the last note
    log = m.take_log()
    assert [(e["type"], e["keys"], e["generation"], e.get("owned")) for e in log] == [
        ("assigned", ["t:0", "t:1"], 4, ["t:0", "t:1"]), ("revoked", ["t:1"], 4, None),
        ("assigned", [], 4, ["t:0"]), ("assigned", [], 6, ["t:0"])]
    assert m.generation == 6
    classic = _Member("classic", epochs=[9])
    classic.poll()
    assert classic.take_log() == []  # the classic protocol's callbacks say everything


def test_two_members_bookkeeping_judged_by_the_consumer_protocols_checks():
    """A partition handed over at a newer epoch after its owner revoked it, as the members log it."""
    p, q = _Member("consumer", epochs=[3, 3, 5]), _Member("consumer", epochs=[5])
    ops: list[dict] = []

    def poll(process: int, m: _Member, before=None) -> None:
        ops.append({"index": len(ops), "time": len(ops), "process": process, "type": "invoke", "f": "poll",
                    "value": [["poll"]]})
        if before:
            before()
        got = m.poll()
        ops.append({"index": len(ops), "time": len(ops), "process": process, "type": "ok", "f": "poll",
                    "value": [["poll", got]], "rebalance_log": m.take_log()})

    poll(1, p, lambda: p.assigned_keys({"t:0", "t:1"}, 3))
    poll(1, p, lambda: p.revoked_keys({"t:1"}, False))
    poll(2, q, lambda: q.assigned_keys({"t:1"}, 5))
    poll(1, p)  # p learns epoch 5
    config = {"sub_via": ["subscribe"], "groups": {"group": "g", "assignor": "range", "keys": ["t:0", "t:1"],
                                                   "protocol": "consumer"}}
    assert check(ops, config)["valid"] is True
    assert ops[-1]["rebalance_log"] == [{"type": "assigned", "keys": [], "generation": 5, "owned": ["t:0"]}]


# ---------------------------------------------------------------- convergence after healing


def _run(workload: str, protocol: str) -> RealRun:
    return RealRun(WORKLOADS[workload], types.SimpleNamespace(bootstrap="127.0.0.1:1"), "java", 1.0, 0, protocol)


def _converged(protocol: str, *states: tuple[int, set[int]]) -> bool:
    run = _run("groups", protocol)
    run.member_state = {i: (i, epoch, frozenset(f"{run.topic}:{p}" for p in owned))
                        for i, (epoch, owned) in enumerate(states)}
    return run.converged()


def test_a_consumer_protocol_group_converges_with_an_epoch_per_member():
    # a member whose partitions did not change is a heartbeat behind the group's epoch
    assert _converged("consumer", (7, {0, 1}), (5, {2}), (7, {3}))
    assert not _converged("classic", (7, {0, 1}), (5, {2}), (7, {3}))
    assert _converged("classic", (7, {0, 1}), (7, {2}), (7, {3}))
    assert not _converged("consumer", (7, {0, 1}), (7, {1, 2}), (7, {3}))  # one partition, two owners
    assert not _converged("consumer", (7, {0, 1}), (7, {2}), (7, set()))  # partition 3 unowned
    assert not _converged("consumer", (7, {0, 1}), (0, {2}), (7, {3}))  # a member with no epoch of the group
    assert not _converged("consumer")
