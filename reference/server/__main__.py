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
import signal
import sys
from pathlib import Path

from reference.server.cluster import ClusterLayout, ServerOptions, ServerProcess


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
    p.add_argument("--bugs", default="")
    p.add_argument("--log-level", default="WARNING")
    a = p.parse_args(argv)
    logging.basicConfig(level=a.log_level, stream=sys.stderr,
                        format=f"%(asctime)s node {','.join(map(str, a.node))} %(levelname)s %(message)s")
    options = ServerOptions(data_dir=a.data_dir, brokers=a.brokers, port=0,
                            min_insync_replicas=a.min_insync_replicas,
                            default_replication_factor=a.default_replication_factor,
                            unclean_leader_election=a.unclean_leader_election, flush_ms=a.flush_ms,
                            bugs=frozenset(b for b in a.bugs.split(",") if b))
    layout = ClusterLayout.load_or_create(options)
    return asyncio.run(run(ServerProcess(options, layout, a.node)))


async def run(process: ServerProcess) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await process.start()
    await stop.wait()
    await process.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
