"""``kafkacheck conform``'s arguments made into one :class:`ConformOptions`, checked once: the
options hold the command line as the parser gives it (the command that repeats a run is
derived from them) and what the checks made of it."""

from __future__ import annotations

import dataclasses

import pytest

from kafkacheck.commands.common import standalone
from kafkacheck.commands.conform import add_parser, options_from
from kafkacheck.conform.options import COMMAND_LINE, ConformOptions, command_line_defaults
from kafkacheck.exits import UsageError


def _parse(argv: list[str]):
    return standalone(add_parser, "conform", argv)


def test_the_command_line_fields_are_the_parsers_options_with_its_defaults():
    parsed = {k: v for k, v in vars(_parse([])).items() if k != "command"}
    assert list(parsed) == list(COMMAND_LINE)
    assert command_line_defaults() == parsed


def test_the_options_are_checked_once_into_typed_fields():
    options = options_from(_parse(["--spawn", "reference", "--faults", "sigkill, pause", "--cases", "none",
                                   "--broker-config", "min.insync.replicas = 2", "--feature", "transaction.version=1",
                                   "--bug", "ack-before-isr", "--workload", "groups"]))
    assert options.fault_list == ["sigkill", "pause"] and options.node_faults == []
    assert options.broker_settings == {"min.insync.replicas": "2"}
    assert options.feature_levels == {"transaction.version": 1}
    assert options.bugs == {"ack-before-isr"} and options.case_list == [] and options.versions == []
    assert options.members_protocol == "classic"
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.faults = "pause"  # type: ignore[misc]


def test_a_wrong_option_is_one_usage_error():
    with pytest.raises(UsageError, match=r"^--workload-seconds must be positive$"):
        options_from(_parse(["--spawn", "reference", "--workload-seconds", "0"]))


def test_the_reproduce_line_says_the_options_as_given_in_the_parsers_order():
    argv = ["--out", "a dir/x", "--spawn", "reference", "--faults", "straggle", "--straggle-api", "Produce,EndTxn",
            "--broker-config", "min.insync.replicas=2", "--workload-seconds", "7.5"]
    options = options_from(_parse(argv))
    line, changed = options.command()
    assert line == ("kafkacheck conform --spawn reference --workload-seconds 7.5 --faults straggle "
                    "--straggle-api Produce,EndTxn --broker-config min.insync.replicas=2 --out 'a dir/x'")
    assert list(changed) == ["spawn", "workload_seconds", "faults", "straggle_api", "broker_config", "out"]
    assert ConformOptions().command() == ("kafkacheck conform", {})


def test_one_version_of_a_matrix_repeats_alone():
    options = options_from(_parse(["--spawn", "kafka", "--kafka-version", "3.9.1,4.0.0", "--out", "o"]))
    assert options.versions == ["3.9.1", "4.0.0"]
    one = dataclasses.replace(options, kafka_version="4.0.0", out="o/4.0.0", versions=["4.0.0"])
    assert one.command()[0] == "kafkacheck conform --spawn kafka --kafka-version 4.0.0 --out o/4.0.0"
    assert options.command()[0] == "kafkacheck conform --spawn kafka --kafka-version 3.9.1,4.0.0 --out o"
