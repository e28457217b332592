"""Crash recovery of the served cluster: kill -9 of brokers (one process each) and of the
whole cluster, torn tails on disk, and the file storage's contract."""

from __future__ import annotations

import os
import time

import pytest

from reference import records as rec
from reference.log import PartitionLog
from reference.server.cluster import ServerOptions
from reference.server.storage import FileStorage
from reference.storage import StorageError

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka import TopicPartition as CTP  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafkacheck.serve import ReferenceCluster  # noqa: E402


def test_file_storage_contract(tmp_path):
    s = FileStorage(tmp_path)
    s.append("a/1.log", b"hello ")
    s.append("a/1.log", b"world")
    assert s.read("a/1.log") == b"hello world"
    s.truncate("a/1.log", 5)
    s.flush("a/1.log")
    assert s.read("a/1.log") == b"hello"
    s.replace("a/meta", b"{}")
    assert s.list("a/") == ["a/1.log", "a/meta"] and s.exists("a/meta")
    s.delete("a/1.log")
    assert not s.exists("a/1.log") and s.read("a/1.log") == b""
    with pytest.raises(StorageError):
        s.append("../escape", b"x")
    (tmp_path / "a" / "meta.tmp").write_bytes(b"half a checkpoint")
    s.close()
    again = FileStorage(tmp_path)  # a leftover of an interrupted replace is removed
    assert again.list("") == ["a/meta"]


def test_torn_tail_on_disk_is_cut_at_reopen(tmp_path):
    s = FileStorage(tmp_path)
    log = PartitionLog.open(s, "t-0")
    for i in range(5):
        log.append_as_leader(rec.encode_batch([rec.RecordInput(None, b"v%d" % i, (), 0)]), 0)
    segment = s.list("t-0/")[0]
    whole = s.read(segment)
    s.close()
    with open(tmp_path / segment, "ab") as f:  # the first bytes of a sixth batch
        f.write(rec.encode_batch([rec.RecordInput(None, b"torn", (), 0)])[:30])
    reopened = PartitionLog.open(FileStorage(tmp_path), "t-0")
    assert reopened.log_end_offset == 5
    assert reopened.recovered_bytes_cut == 30
    assert (tmp_path / segment).read_bytes() == whole


def _produce(bootstrap: str, topic: str, values: list[bytes], acked: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "message.timeout.ms": 20_000})
    for v in values:
        p.produce(topic, value=v, on_delivery=lambda e, m: acked.append(m.value()) if e is None else None)
        p.poll(0)
    p.flush(30)


def _read_all(bootstrap: str, topic: str, partitions: int, want: int, timeout_s: float = 40) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify-" + topic, "enable.auto.commit": False,
                  "auto.offset.reset": "earliest"})
    c.assign([CTP(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    end = time.monotonic() + timeout_s
    while len(got) < want and time.monotonic() < end:
        m = c.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    return got


def test_kill_9_of_brokers_and_of_the_whole_cluster_loses_nothing_acknowledged(tmp_path):
    options = ServerOptions(data_dir=tmp_path / "data", brokers=3, port=0, min_insync_replicas=2)
    topic = "durable"
    acked: list[bytes] = []
    with ReferenceCluster(options) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, 2, 3)])[topic].result(20)
        _produce(cluster.bootstrap, topic, [b"a%d" % i for i in range(200)], acked)
        victim = cluster.process_of(1)
        assert victim is not None
        victim.kill()  # a broker dies mid-run; the others carry on
        _produce(cluster.bootstrap, topic, [b"b%d" % i for i in range(200)], acked)
        victim.start()
        cluster.wait_ready(30)
        _produce(cluster.bootstrap, topic, [b"c%d" % i for i in range(200)], acked)
        for p in cluster.processes().values():  # the whole cluster crashes at once
            p.kill()
        for p in cluster.processes().values():
            p.start()
        cluster.wait_ready(40)
        got = _read_all(cluster.bootstrap, topic, 2, len(acked))
    assert len(acked) >= 550  # the faults above cost a few sends at most
    assert set(acked) <= set(got), f"lost {sorted(set(acked) - set(got))[:10]}"
    assert len(got) == len(set(got)), "a value was stored twice (idempotence)"
    assert not any(p.alive for p in cluster.processes().values())
    assert os.path.exists(tmp_path / "data" / "cluster.json")
