"""What one ``kafkacheck conform`` run is asked to do: :class:`ConformOptions`.

The command (:mod:`kafkacheck.commands.conform`) builds one from its arguments and checks it
once; everything after that (:mod:`kafkacheck.conform.suite`, the matrix of several versions)
takes the options, never the parsed command line. They hold the command line as given (the
fields of :data:`COMMAND_LINE`, named and ordered as the parser's options, so that the command
that repeats a run, :meth:`ConformOptions.command`, is derived from them) and what the checks
made of it (the fields after).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from kafkacheck.workloads import GROUP_WORKLOADS, RUN_GROUP_WORKLOADS

DEFAULT_FAULTS = "sigkill,pause,client-partition,client-delay"

# the options of the command line, in the parser's order (the order the reproduce line says them)
COMMAND_LINE = ("bootstrap", "spawn", "brokers", "kafka_version", "kafka_home", "client", "cases", "profile",
                "workload", "group_protocol", "workload_seconds", "faults", "straggle_api", "broker_config",
                "feature", "bug", "timeout", "out")


@dataclass(slots=True, frozen=True)
class ConformOptions:
    # the command line, as given (its defaults are the parser's: tests/kafkacheck/test_conform_options.py)
    bootstrap: str | None = None  # HOST:PORT[,HOST:PORT...] of a broker the user runs
    spawn: str | None = None  # or the broker kafkacheck starts: reference, tansu or kafka
    brokers: int = 3
    kafka_version: str | None = None  # one version, or several (a matrix) as given
    kafka_home: str | None = None
    client: str = "kafka-python"  # a key of kafkacheck.real.kinds.CLIENTS
    cases: str | None = None  # A,B or none
    profile: str = "full"
    workload: str = "queue"  # a key of kafkacheck.workloads.WORKLOADS, or none
    group_protocol: str | None = None
    workload_seconds: float = 20.0
    faults: str = DEFAULT_FAULTS
    straggle_api: list[str] | None = None
    broker_config: list[str] = field(default_factory=list)  # KEY=VALUE, as given
    feature: list[str] = field(default_factory=list)  # NAME=LEVEL, as given
    bug: str | None = None
    timeout: float = 20.0  # of every client call, seconds
    out: str = "runs/conform"
    # what the checks made of it
    fault_list: list[str] = field(default_factory=list)  # the workload's faults
    node_faults: list[str] = field(default_factory=list)  # those between the nodes of a spawned cluster
    broker_settings: dict[str, str] = field(default_factory=dict)  # for every spawned broker
    feature_levels: dict[str, int] = field(default_factory=dict)  # for StorageTool format
    bugs: frozenset[str] = frozenset()  # the reference broker's bug switches
    case_list: list = field(default_factory=list)  # the cases to run (kafkacheck.conform.cases.Case)
    versions: list[str] = field(default_factory=list)  # the Kafka versions (several: a matrix), or --kafka-home's
    home: Any = None  # --kafka-home's kafkacheck.real.kafka_dist.KafkaHome

    @property
    def members_protocol(self) -> str | None:
        """The consumer group protocol of the workload's members; None when its clients join no
        group (eos's processors join one only when --group-protocol is given)."""
        if self.workload in GROUP_WORKLOADS:
            return self.group_protocol or "classic"
        return self.group_protocol if self.workload in RUN_GROUP_WORKLOADS else None

    def kafka_dist(self):
        """The jars of this run: --kafka-home's, or the release of --kafka-version (one version)."""
        from kafkacheck.real.kafka_dist import DEFAULT_VERSION, KafkaDist

        return self.home if self.home is not None else KafkaDist(self.kafka_version or DEFAULT_VERSION)

    def command(self) -> tuple[str, dict]:
        """The kafkacheck conform command of these options, and those of them that differ from the
        defaults (as run.json records them)."""
        from kafkacheck.reproduce import changed_options, cli_command

        options = changed_options(self, command_line_defaults())
        return cli_command("conform", options), options


def command_line_defaults() -> dict:
    """The options of the command line with their defaults, in the parser's order."""
    defaults = {f.name: f.default if f.default is not MISSING else f.default_factory()
                for f in fields(ConformOptions)}
    return {name: defaults[name] for name in COMMAND_LINE}
