"""Differential testing against Apache Kafka: the comparison itself (no broker needed), and
the whole suite against the reference broker and a one-node Kafka (marked ``kafka``)."""

from __future__ import annotations

import json

import pytest

from kafkacheck.cli import main
from kafkacheck.conform import differential as d
from reference import records as rec


def test_invented_values_are_renamed_in_order_and_what_differs_between_clusters_is_dropped():
    names = d.Names("-x1")
    answer = {"throttle_time_ms": 7, "producer_id": 4711, "error_code": 0, "brokers": [{"node_id": 3}],
              "topics": [{"name": "t-x1", "topic_id": "abc"}], "member_id": "consumer-1-uuid"}
    again = {"producer_id": 4711, "member_id": "consumer-2-uuid"}
    assert d.normalise(answer, names) == {"error_code": 0, "member_id": "member-1", "producer_id": "producer-1",
                                          "topics": [{"name": "t"}]}
    assert d.normalise(again, names) == {"member_id": "member-2", "producer_id": "producer-1"}


def test_record_sets_are_compared_as_decoded_batches():
    data = rec.encode_batch([rec.RecordInput(b"k", b"v")], base_offset=5, producer_id=9, producer_epoch=0,
                            base_sequence=0, transactional=True)
    [batch] = d.decode_record_set(data)
    assert batch["base_offset"] == 5 and batch["records"] == [[5, "k", "v"]] and batch["transactional"]
    marker = d.decode_record_set(rec.encode_control_batch(9, 0, False, 3))
    assert marker[0]["control"] and marker[0]["commit"] is False


def test_every_difference_is_found_and_only_declared_ones_are_excused():
    target = {"produce": {"error_code": 0, "topics": [{"configs": None}]}}
    kafka = {"produce": {"error_code": 6, "topics": [{"configs": [{"name": "a"}]}]}}
    dev = d.Deviation("x", "s*", "produce", "topics[0].configs*", "why")
    found = d.compare("script", target, kafka, [dev])
    by_path = {f.path: f for f in found}
    assert by_path["error_code"].declared is None and (by_path["error_code"].target, by_path["error_code"].kafka) == (0, 6)
    assert by_path["topics[0].configs"].declared == "x"
    assert by_path["topics[0].configs[0].name"].declared == "x"
    # a declared deviation that no difference needs any more is reported as stale
    result = d.Result(d.compare("script", target, target, [dev]), {}, {"script": {}}, [dev])
    assert result.undeclared == [] and result.stale == [dev]


def test_versions_are_the_highest_both_brokers_serve():
    a = {0: (3, 11), 1: (4, 12), 99: (0, 1)}
    b = {0: (0, 13), 1: (4, 18)}
    assert d.common_versions(a, b) == {0: 11, 1: 12}


def test_every_declared_deviation_is_in_the_docs():
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "reference" / "deviations.md").read_text()
    for dev in d.DEVIATIONS:
        assert f"`{dev.id}`" in doc, dev.id


@pytest.mark.kafka
def test_the_reference_answers_every_script_as_apache_kafka_does_or_says_why(kafka_dist, tmp_path):
    code = main(["differential", "--out", str(tmp_path)])
    report = json.loads((tmp_path / "differential.json").read_text())
    undeclared = [x for x in report["differences"] if x["declared"] is None]
    assert code == 0, undeclared[:20] or report["errors"] or report["stale_deviations"]
    assert report["scripts"] == [sc.name for sc in d.SCRIPTS] and not report["errors"]
    assert report["kafka_version"] == "Apache Kafka 4.3.1"
    # the scripts really ran on both: the transaction script saw its abort on both brokers
    steps = report["steps"]["transactions"]
    for side in ("target", "kafka"):
        aborted = steps[side]["after-abort-read-committed"]["responses"][0]["partitions"][0]["aborted_transactions"]
        assert aborted == [{"first_offset": 1, "producer_id": "producer-1"}], side
