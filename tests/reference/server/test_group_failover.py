"""A group coordinator that loses its partition while a rebalance waits, over the wire with
kafka-python: the joins it held are answered NOT_COORDINATOR, so their members join the new
coordinator (issue 34, item 5: the `groups` workload's `unowned-partition` with kafka-python);
with the bug switch group-unload-strands-joins they are dropped, and kafka-python waits for
the answer (max.poll.interval.ms + 5 s) owning nothing."""

from __future__ import annotations

import time

import pytest

from reference.server.cluster import ServerOptions

kafka = pytest.importorskip("kafka")
from kafka import KafkaConsumer  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402

from kafkacheck.serve import ReferenceCluster  # noqa: E402

TOPIC, GROUP = "failover", "failover-group"


def _member(bootstrap: str) -> KafkaConsumer:
    c = KafkaConsumer(bootstrap_servers=bootstrap.split(","), group_id=GROUP, enable_auto_commit=False,
                      auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500,
                      request_timeout_ms=21000)  # as the conformance workload's members
    c.subscribe([TOPIC])
    return c


def _rebalance_across_a_coordinator_pause(tmp_path, bugs: frozenset[str], settle_s: float) -> tuple[bool, str]:
    """A joins; B's JoinGroup waits at the coordinator for A to rejoin (A does not poll);
    the coordinator's broker is paused past its session, so its __consumer_offsets partition
    moves, and resumed. Whether both members then settle in one generation within
    ``settle_s``, and what B ended with."""
    options = ServerOptions(data_dir=tmp_path / "data", brokers=3, port=0, bugs=bugs)
    with ReferenceCluster(options) as cluster:
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap.split(","))
        admin.create_topics([NewTopic(TOPIC, 2, 3)])
        admin.close()
        a = _member(cluster.bootstrap)
        end = time.monotonic() + 30
        while not a.assignment() and time.monotonic() < end:
            a.poll(500)
        assert a.assignment(), "the first member never joined"
        coordinator = int(str(a._coordinator.coordinator_id).rsplit("-", 1)[-1])
        b = _member(cluster.bootstrap)
        for _ in range(4):  # its JoinGroup is held: the group waits for A
            b.poll(500)
        assert not b.assignment()
        process = cluster.process_of(coordinator)
        assert process is not None
        process.pause()
        time.sleep(8)  # past the broker session (3 s): the partition gets a new leader
        process.resume()
        end = time.monotonic() + settle_s
        settled = False
        while time.monotonic() < end and not settled:
            a.poll(300)
            b.poll(300)
            settled = (bool(b.assignment()) and a._coordinator.stable() and b._coordinator.stable()
                       and a.group_metadata().generation_id == b.group_metadata().generation_id)
        got = f"B generation {b.group_metadata().generation_id}, assigned {sorted(tp.partition for tp in b.assignment())}"
        for c in (a, b):
            c.close(autocommit=False)
        return settled, got


def test_joins_held_by_a_coordinator_that_loses_its_partition_are_answered(tmp_path):
    settled, got = _rebalance_across_a_coordinator_pause(tmp_path, frozenset(), 30)
    assert settled, got


@pytest.mark.slow
def test_with_the_bug_switch_the_held_join_is_never_answered(tmp_path):
    settled, got = _rebalance_across_a_coordinator_pause(tmp_path, frozenset({"group-unload-strands-joins"}), 30)
    assert not settled, got
