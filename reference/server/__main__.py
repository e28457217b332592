"""One process of a served reference cluster: ``python -m reference.server --node N ...``.

``kafkacheck serve`` starts one of these per broker and one for the controller (node 0);
each reads the ports of the others from ``DIR/cluster.json``. SIGTERM or SIGINT stops the
process cleanly (checkpoints written); SIGKILL is a crash that the next start recovers
from.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

from reference.server.cluster import ClusterLayout, DataDirInUse, NodeLock, ServerOptions, ServerProcess


def _log_levels(p: argparse.ArgumentParser, spec: str) -> tuple[str, list[tuple[str, str]]]:
    """``--log-level``: the root's level, then LOGGER=LEVEL pairs."""
    root, *pairs = spec.split(",")
    levels = [(name, level) for name, _eq, level in (pair.partition("=") for pair in pairs)]
    if any(not isinstance(logging.getLevelName(x), int) for x in [root, *(lv for _n, lv in levels)]) \
            or any(not name for name, _lv in levels):
        p.error(f"--log-level {spec!r}: a level (DEBUG, INFO, WARNING, ERROR), then LOGGER=LEVEL pairs")
    return root, levels


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m reference.server",
                                description="one process of a served reference cluster")
    p.add_argument("--data-dir", type=Path, required=True)
    p.add_argument("--node", type=int, action="append", required=True,
                   help="node id to host (0: the controller, 1..N: brokers); repeatable")
    p.add_argument("--brokers", type=int, required=True)
    p.add_argument("--min-insync-replicas", type=int, default=2)
    p.add_argument("--default-replication-factor", type=int, default=3)
    p.add_argument("--unclean-leader-election", action="store_true")
    p.add_argument("--flush-ms", type=int)
    p.add_argument("--flush-messages", type=int)
    p.add_argument("--transaction-version", type=int, default=2, choices=[1, 2])
    p.add_argument("--bugs", default="")
    p.add_argument("--consumer-session-timeout-ms", type=int, default=45_000,
                   help="KIP-848 groups: group.consumer.session.timeout.ms (default 45000)")
    p.add_argument("--consumer-heartbeat-interval-ms", type=int, default=5_000,
                   help="KIP-848 groups: group.consumer.heartbeat.interval.ms (default 5000)")
    p.add_argument("--share-lock-ms", type=int, default=30_000,
                   help="KIP-932 share groups: group.share.record.lock.duration.ms (default 30000)")
    p.add_argument("--share-delivery-limit", type=int, default=5,
                   help="KIP-932 share groups: group.share.delivery.count.limit (default 5)")
    p.add_argument("--share-auto-offset-reset", choices=["earliest", "latest"], default="latest",
                   help="KIP-932 share groups: share.auto.offset.reset of every share group (default latest)")
    p.add_argument("--log-level", default="WARNING",
                   help="the root logger's level, then optionally LOGGER=LEVEL pairs, comma-separated "
                        "(WARNING,kafkacheck.server.cgroup=INFO)")
    p.add_argument("--max-connections", type=int, default=1000)
    p.add_argument("--idle-timeout", type=float, default=600.0)
    p.add_argument("--exit-with-parent", action="store_true",
                   help="stop (cleanly) when the process that started this one is gone: the nodes of "
                        "kafkacheck serve never outlive their launcher, even after its kill -9")
    a = p.parse_args(argv)
    root, levels = _log_levels(p, a.log_level)
    logging.basicConfig(level=root, stream=sys.stderr,
                        format=f"%(asctime)s node {','.join(map(str, a.node))} %(levelname)s %(message)s")
    for name, level in levels:
        logging.getLogger(name).setLevel(level)
    options = ServerOptions(data_dir=a.data_dir, brokers=a.brokers, port=0,
                            min_insync_replicas=a.min_insync_replicas,
                            default_replication_factor=a.default_replication_factor,
                            unclean_leader_election=a.unclean_leader_election, flush_ms=a.flush_ms,
                            flush_messages=a.flush_messages, transaction_version=a.transaction_version,
                            bugs=frozenset(b for b in a.bugs.split(",") if b),
                            max_connections=a.max_connections, idle_timeout_s=a.idle_timeout,
                            consumer_session_timeout_ms=a.consumer_session_timeout_ms,
                            consumer_heartbeat_interval_ms=a.consumer_heartbeat_interval_ms,
                            share_record_lock_duration_ms=a.share_lock_ms,
                            share_delivery_count_limit=a.share_delivery_limit,
                            share_auto_offset_reset=a.share_auto_offset_reset)
    _raise_open_files_limit()
    layout = ClusterLayout.load_or_create(options)
    try:
        lock = NodeLock(options.data_dir, a.node)
    except DataDirInUse as e:
        print(f"python -m reference.server: {e}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run(ServerProcess(options, layout, a.node), os.getppid() if a.exit_with_parent else None))
    finally:
        lock.release()


def _raise_open_files_limit() -> None:
    """Up to the hard limit: the connection cap, not the file limit, should refuse clients."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def run(process: ServerProcess, parent: int | None = None) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await process.start()
    watcher = loop.create_task(_watch_parent(parent, stop)) if parent is not None else None
    await stop.wait()
    if watcher is not None:
        watcher.cancel()
    await process.stop()
    return 0


async def _watch_parent(parent: int, stop: asyncio.Event) -> None:
    """An orphan is re-parented: when the launcher is gone, stop as if told to."""
    while os.getppid() == parent:
        await asyncio.sleep(0.25)
    logging.getLogger("kafkacheck.server").warning("the launcher (pid %d) is gone: stopping", parent)
    stop.set()


if __name__ == "__main__":
    sys.exit(main())
