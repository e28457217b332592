"""``kafkacheck serve``: the reference cluster on real sockets (Kafka wire protocol)."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from kafkacheck.commands import SUMMARIES
from kafkacheck.exits import EXIT_UNKNOWN, UsageError
from kafkacheck.serve import ClusterNotReady, ReferenceCluster, describe_timings
from reference.server.cluster import DataDirInUse, ServerOptions


def add_parser(sub: argparse._SubParsersAction) -> None:
    srv = sub.add_parser(
        "serve", help=SUMMARIES["serve"],
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


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(args: argparse.Namespace) -> int:
    if args.brokers < 1:
        raise UsageError("--brokers must be at least 1")
    if args.max_connections < 1 or args.idle_timeout <= 0:
        raise UsageError("--max-connections must be at least 1 and --idle-timeout positive")
    if not 0 <= args.port <= 65535 - args.brokers:
        raise UsageError("--port must be 0 (free ports) or a port with room for one per broker")
    rf = args.default_replication_factor if args.default_replication_factor is not None else min(3, args.brokers)
    min_isr = args.min_insync_replicas if args.min_insync_replicas is not None else min(2, rf)
    if not 1 <= rf <= args.brokers or not 1 <= min_isr <= rf:
        raise UsageError("need 1 <= --min-insync-replicas <= --default-replication-factor <= --brokers")
    data_dir = Path(args.data_dir)
    options = ServerOptions(data_dir=data_dir, brokers=args.brokers, port=args.port,
                            min_insync_replicas=min_isr, default_replication_factor=rf,
                            unclean_leader_election=args.unclean_leader_election, flush_ms=args.flush_ms,
                            max_connections=args.max_connections, idle_timeout_s=args.idle_timeout)
    try:
        cluster = ReferenceCluster(options, single_process=args.single_process,
                                   log_level="INFO" if args.verbose else "WARNING")
    except ValueError as e:
        raise UsageError(str(e)) from None
    mode = "one process" if args.single_process else f"{args.brokers + 1} processes"
    print(f"starting {args.brokers} brokers and a controller ({mode}), data in {data_dir}", flush=True)
    try:
        cluster.start(timeout_s=args.ready_timeout)
    except DataDirInUse as e:
        cluster.stop()
        raise UsageError(f"{e}: one kafkacheck serve per data directory") from None
    except ClusterNotReady as e:
        cluster.stop()
        print(f"kafkacheck: error: {e}", file=sys.stderr)
        return EXIT_UNKNOWN
    print(f"bootstrap {cluster.bootstrap}", flush=True)
    print("pids " + " ".join(f"{n}={p}" for n, p in cluster.pids.items()), flush=True)
    print(f"timings: {describe_timings()}", flush=True)
    print("Ctrl-C stops the cluster", flush=True)
    signal.signal(signal.SIGTERM, _interrupt)  # kill PID stops the brokers too
    try:
        while True:
            time.sleep(0.5)
            dead = [p.name for p in cluster.processes().values() if not p.alive]
            if dead:
                print(f"{', '.join(dead)} exited (see {cluster.log_dir}); stopping", file=sys.stderr)
                cluster.stop()
                return EXIT_UNKNOWN
    except KeyboardInterrupt:
        print("stopping", flush=True)
    finally:
        cluster.stop()
    return 0
