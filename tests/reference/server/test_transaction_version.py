"""KIP-890 part 2 on the wire: the served reference names its finalized transaction.version in
ApiVersions v3, takes Produce v12 as adding its partition to the transaction (no
AddPartitionsToTxn), bumps the epoch at an EndTxn v5 and answers it with the new epoch, and
fences a late EndTxn of the previous epoch, while older request versions keep version 1's
meaning (no bump: what kafka-python and librdkafka speak). Raw requests through the wire codec,
one connection each, as a straggler arrives."""

from __future__ import annotations

import time

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from reference import records as rec
from reference.server.cluster import InThreadCluster, ServerOptions
from reference.server.protocol import REQUESTS, RESPONSES, build, round_trip

TOPIC = "tv"


def _call(cluster, key: int, version: int, values: dict):
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    return round_trip(host, int(port), build(REQUESTS[key][version], values), RESPONSES[key], "tv-test", 10.0)


def _produce(cluster, version: int, txn: str, pid: int, epoch: int, seq: int):
    batch = rec.encode_batch([rec.RecordInput(None, b"v%d" % seq, (), 0)], producer_id=pid, producer_epoch=epoch,
                             base_sequence=seq, transactional=True)
    resp = _call(cluster, 0, version, {"transactional_id": txn, "acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": TOPIC, "partition_data": [{"index": 0, "records": batch}]}]})
    return resp.responses[0].partition_responses[0].error_code


def _end(cluster, version: int, txn: str, pid: int, epoch: int, commit: bool = True):
    return _call(cluster, 26, version, {"transactional_id": txn, "producer_id": pid, "producer_epoch": epoch,
                                        "committed": commit})


def _retrying(fn, ok=lambda r: r == 0, timeout_s: float = 15.0):
    """Call until ``ok`` (a coordinator still loading, a transaction still completing)."""
    end = time.monotonic() + timeout_s
    while True:
        r = fn()
        if ok(r) or time.monotonic() > end:
            return r
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with InThreadCluster(ServerOptions(data_dir=tmp_path_factory.mktemp("tv"), brokers=1, port=0,
                                       min_insync_replicas=1, default_replication_factor=1)) as c:
        _retrying(lambda: _call(c, 19, 5, {"topics": [{"name": TOPIC, "num_partitions": 1, "replication_factor": 1,
                                                        "assignments": [], "configs": []}],
                                           "timeout_ms": 5000, "validate_only": False}).topics[0].error_code,
                  ok=lambda e: e in (0, 36))
        yield c


def _init(cluster, txn: str) -> tuple[int, int]:
    r = _retrying(lambda: _call(cluster, 22, 4, {"transactional_id": txn, "transaction_timeout_ms": 60000,
                                                 "producer_id": -1, "producer_epoch": -1}),
                  ok=lambda r: r.error_code == 0)
    assert r.error_code == 0
    return r.producer_id, r.producer_epoch


def test_api_versions_names_the_finalized_transaction_version(cluster):
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    resp = round_trip(host, int(port), ApiVersionsRequest[3](client_software_name="t", client_software_version="1"),
                      ApiVersionsResponse, "tv-test", 5.0)
    assert [(f.name, f.max_version_level) for f in resp.finalized_features] == [("group.version", 1),
                                                                                 ("share.version", 1),
                                                                                 ("transaction.version", 2)]
    versions = {k.api_key: k.max_version for k in resp.api_keys}
    assert versions[0] == 12 and versions[26] == 5 and versions[28] == 5


def test_version_2_bumps_the_epoch_at_every_end_and_fences_a_late_end(cluster):
    pid, epoch = _init(cluster, "tv2")
    # no AddPartitionsToTxn: Produce v12 adds its partition itself
    assert _retrying(lambda: _produce(cluster, 12, "tv2", pid, epoch, 0)) == 0
    done = _end(cluster, 5, "tv2", pid, epoch)
    assert (done.error_code, done.producer_id, done.producer_epoch) == (0, pid, epoch + 1)
    # the next transaction, under the new epoch; the previous epoch's EndTxn arrives late
    assert _retrying(lambda: _produce(cluster, 12, "tv2", pid, epoch + 1, 0)) == 0
    late = _end(cluster, 5, "tv2", pid, epoch)
    assert late.error_code == 90  # PRODUCER_FENCED: it cannot end the transaction under way
    assert _produce(cluster, 12, "tv2", pid, epoch, 1) != 0  # nor can a late write of the old epoch
    assert _retrying(lambda: _end(cluster, 5, "tv2", pid, epoch + 1).error_code) == 0


def test_older_versions_keep_version_1_and_the_late_end_lands_as_kafka_lets_it(cluster):
    """What KAFKA-17754 is: with version 1 the epoch never changes, so a late EndTxn ends the
    transaction under way. The reference does what Apache Kafka does with such clients."""
    pid, epoch = _init(cluster, "tv1")
    add = {"v3_and_below_transactional_id": "tv1", "v3_and_below_producer_id": pid,
           "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}]}
    first = _retrying(lambda: _call(cluster, 24, 3, add).results_by_topic_v3_and_below[0].results_by_partition[0]
                      .partition_error_code)
    assert first == 0
    assert _produce(cluster, 11, "tv1", pid, epoch, 0) == 0
    assert _end(cluster, 3, "tv1", pid, epoch).error_code == 0
    second = _retrying(lambda: _call(cluster, 24, 3, add).results_by_topic_v3_and_below[0].results_by_partition[0]
                       .partition_error_code)
    assert second == 0  # the next transaction, same epoch
    assert _end(cluster, 3, "tv1", pid, epoch).error_code == 0  # a "late" commit ends it: version 1 cannot tell
