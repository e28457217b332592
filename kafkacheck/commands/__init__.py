"""The commands of ``kafkacheck``, one module each.

Every module has ``add_parser(sub)``, which adds its subcommand's parser (options, help,
epilog), and ``main(args) -> int``, which runs it and returns the exit code
(:mod:`kafkacheck.exits`). A new command is one new module and one entry in ``SUMMARIES``,
in the order ``kafkacheck --help`` lists them. The dispatcher (:mod:`kafkacheck.cli`) imports
the module of the command that runs and no other; modules import what only running needs
inside ``main``. ``tests/kafkacheck/test_startup.py`` checks what the quick commands
(``--help``, ``lin``, ``check``) import, ``benchmarks/startup.py`` times them.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# every command and its line in ``kafkacheck --help``, in the order it lists them: the dispatcher
# lists them from here and imports only the module of the command that runs
SUMMARIES: dict[str, str] = {
    "run": "run a workload on the simulated reference cluster under faults and check it",
    "check": "check a run directory or a history.jsonl recorded anywhere",
    "hunt": "hunt for bugs with a swarm of drawn runs; or prove each planted bug is found",
    "explore": "run a Hypothesis state machine against the simulated cluster",
    "lin": "check a history for linearizability (porcupine's algorithm, in C++)",
    "import-jepsen": "convert a Jepsen Kafka-workload history.edn into a run directory",
    "corpus": "generate many simulated runs (or convert run directories) into a Parquet corpus",
    "extract": "write one run of a corpus back out as a run directory",
    "serve": "run the reference broker cluster on real sockets (Kafka wire protocol)",
    "conform": "run the conformance suite against a real Kafka-compatible broker",
    "differential": "send the same scripted requests to the reference broker and Apache Kafka, compare",
    "kafka": "fetch Apache Kafka's jars (and build the Java client driver) for conform --spawn kafka",
    "analyze": "analyse a corpus with Spark: anomalies, rates, time to anomaly, agreement",
    "model-check": "bounded model checking of the replication and transaction protocols (z3)",
}
COMMANDS = tuple(SUMMARIES)


def command(name: str) -> ModuleType:
    """The module of command ``name``."""
    return importlib.import_module(f"kafkacheck.commands.{name.replace('-', '_')}")
