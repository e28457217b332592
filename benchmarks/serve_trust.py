"""What the served reference broker must keep holding, measured: the figures of
docs/reference/served-broker.md ("What the served broker enforces, and what held") come from
this script.

    python benchmarks/serve_trust.py [--records 110000] [--frames 4470] [--only NAME ...]

Probes (each starts its own ``kafkacheck serve``-style cluster in a temporary directory, one
process per node unless said otherwise, and stops it by pid):

- ``durability``: a confluent-kafka producer (acks=all, idempotent) writes ``--records``
  distinct values to a 3-partition, replication-factor-3 topic while the probe kills nodes
  with ``kill -9`` at 25%, 50% and 75% of the sends, in three scenarios: every node at once
  (controller and brokers), the leader of partition 0, and a single-process cluster. Then
  everything is read back: ``lost`` counts acknowledged values that are not there.
- ``fuzz``: ``--frames`` mutated frames (reference/server/fuzz.py) at the brokers of a
  3-broker cluster, then: did any node die or log a traceback, and are 50 records
  acknowledged before the fuzzing intact?
- ``binds``: every listening socket of every node process (from /proc): its address.
- ``attacks``: the hostile clients of issue 22 at their measured size: 64 unread pipelined
  fetches on each of 4 connections (broker growth), one Metadata request naming 300,000 empty
  topics (the longest wait of another client, and whether leadership moved), a forged
  DeleteTopics on the peer port, 20,000 idle sockets (a new client's wait; log size), and
  ``kill -9`` of the launcher (do its nodes outlive it?).
- ``source``: pickle, marshal, shelve, eval or exec anywhere in the project's sources.

Everything prints as it goes; the summary table comes last. Exit 1 if a probe did not hold.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafkacheck.serve import ReferenceCluster  # noqa: E402
from reference.server.cluster import ServerOptions  # noqa: E402

TOPIC = "durable"
PARTITIONS = 3


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ durability


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(30)


def _leader_of(bootstrap: str, topic: str, partition: int) -> int:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=20)
    return md.topics[topic].partitions[partition].leader


def _read_back(bootstrap: str, topic: str, want: set[bytes], timeout_s: float = 120) -> set[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe-read", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "log_level": 2})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: set[bytes] = set()
    end = time.monotonic() + timeout_s
    idle_since = time.monotonic()
    while time.monotonic() < end:
        msgs = c.consume(10_000, 0.5)
        for m in msgs:
            if m.error() is None:
                got.add(m.value())
        if msgs:
            idle_since = time.monotonic()
        if want <= got or time.monotonic() - idle_since > 15:
            break
    c.close()
    return got


def durability(scenario: str, records: int) -> dict:
    """Sends paced over about 30 s; kill -9 at 25/50/75% of them; read everything back."""
    single = scenario == "single-process cluster"
    with tempfile.TemporaryDirectory(prefix="kc-trust-") as tmp:
        options = ServerOptions(data_dir=Path(tmp) / "data", brokers=3, port=0, min_insync_replicas=2)
        with ReferenceCluster(options, single_process=single) as cluster:
            _create(cluster.bootstrap, TOPIC, PARTITIONS)
            acked: set[bytes] = set()
            failed = [0]
            sent = [0]

            def on_delivery(err, msg) -> None:
                if err is None:
                    acked.add(msg.value())
                else:
                    failed[0] += 1

            producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                 "enable.idempotence": True, "message.timeout.ms": 120_000,
                                 "linger.ms": 5, "log_level": 2})
            kills: list[str] = []

            def faults() -> None:
                for fraction in (0.25, 0.5, 0.75):
                    while sent[0] < fraction * records:
                        time.sleep(0.05)
                    if scenario == "every node":
                        victims = list(cluster.processes().values())
                    elif scenario == "leader of partition 0":
                        leader = _leader_of(cluster.bootstrap, TOPIC, 0)
                        victims = [cluster.process_of(leader)]
                    else:
                        victims = list(cluster.processes().values())
                    for p in victims:
                        p.kill()
                    kills.append("+".join(p.name for p in victims))
                    time.sleep(1.0)
                    for p in victims:
                        p.start()
                    cluster.wait_ready(60)

            t = threading.Thread(target=faults)
            t.start()
            start = time.monotonic()
            pace = records / 30.0
            for i in range(records):
                while True:
                    try:
                        producer.produce(TOPIC, value=b"v%d" % i, partition=i % PARTITIONS,
                                         on_delivery=on_delivery)
                        break
                    except BufferError:
                        producer.poll(0.1)
                sent[0] = i + 1
                if i % 500 == 0:
                    producer.poll(0)
                    ahead = sent[0] / pace - (time.monotonic() - start)
                    if ahead > 0:
                        time.sleep(ahead)
            t.join()
            left = producer.flush(180)
            got = _read_back(cluster.bootstrap, TOPIC, acked)
    lost = len(acked - got)
    log(f"  {scenario}: {len(acked):,} acknowledged, {failed[0]:,} failed, {left} unresolved, "
        f"{lost} lost; kills: {', '.join(kills)}")
    return {"probe": f"kill -9: {scenario}", "acknowledged": len(acked), "lost": lost,
            "held": lost == 0 and left == 0}


# ------------------------------------------------------------------ fuzz and binds


def _listening(pid: int) -> list[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table, v6 in (("tcp", False), ("tcp6", True), ("udp", False), ("udp6", True)):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            listening = f[3] == "0A" if table.startswith("tcp") else True
            if f[9] in inodes and listening:
                out.append(f"{table}:{_addr(f[1], v6)}")
    return out


def _addr(hexaddr: str, v6: bool) -> str:
    host, port = hexaddr.split(":")
    if not v6:
        ip = ".".join(str(b) for b in reversed(bytes.fromhex(host)))
    else:
        words = [bytes.fromhex(host[i:i + 8])[::-1].hex() for i in range(0, 32, 8)]
        ip = socket.inet_ntop(socket.AF_INET6, bytes.fromhex("".join(words)))
    return f"{ip}:{int(port, 16)}"


def fuzz_and_binds(frames: int) -> list[dict]:
    from reference.server.fuzz import send_mutated

    rng = random.Random(20261124)
    with tempfile.TemporaryDirectory(prefix="kc-trust-") as tmp:
        options = ServerOptions(data_dir=Path(tmp) / "data", brokers=3, port=0)
        with ReferenceCluster(options) as cluster:
            binds = {name: _listening(p.pid) for name, p in cluster.processes().items() if p.pid}
            _create(cluster.bootstrap, "fuzzed", 1)
            producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "log_level": 2})
            before = []
            for i in range(50):
                producer.produce("fuzzed", value=b"before-%d" % i,
                                 on_delivery=lambda e, m: before.append(m.value()) if e is None else None)
            producer.flush(30)
            pids = {name: p.pid for name, p in cluster.processes().items()}
            ports = sorted(cluster.layout.client_ports.values())
            answered, closed = send_mutated(
                "127.0.0.1", ports, frames, rng,
                progress=lambda n: log(f"  fuzz: {n:,} frames sent") if n % 1000 == 0 else None)
            dead = [name for name, p in cluster.processes().items() if not p.alive or p.pid != pids[name]]
            tracebacks = sum(p.log_path.read_text(errors="replace").count("Traceback")
                             for p in cluster.processes().values())
            got = _read_back(cluster.bootstrap, "fuzzed", set(before), 30) if not dead else set()
    intact = len(before) == 50 and set(before) <= got
    log(f"  fuzz: {frames:,} frames, {answered:,} answered, {closed:,} closed by the broker; dead nodes "
        f"{dead or 'none'}, {tracebacks} tracebacks in the logs, records before intact: {intact}")
    addresses = sorted({a.split(":", 1)[1].rsplit(":", 1)[0] for v in binds.values() for a in v})
    log(f"  binds: {json.dumps(binds)}")
    return [{"probe": f"fuzz: {frames:,} mutated frames", "acknowledged": len(before),
             "lost": len(set(before) - got), "held": not dead and tracebacks == 0 and intact,
             "note": f"{answered:,} answered, {closed:,} closed, {len(dead)} nodes died, {tracebacks} tracebacks"},
            {"probe": "listening addresses of every node", "held": addresses == ["127.0.0.1"],
             "note": ", ".join(addresses)}]


# ------------------------------------------------------------------ attacks


def _serve(data_dir: Path, *extra: str) -> tuple[subprocess.Popen, list[int], dict[str, int]]:
    """``kafkacheck serve --brokers 3``: the launcher, the client ports of brokers 1-3, the pids."""
    proc = subprocess.Popen([sys.executable, "-m", "kafkacheck", "serve", "--brokers", "3", "--port", "0",
                             "--data-dir", str(data_dir), *extra], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    ports, pids = [], {}
    for line in proc.stdout:
        if line.startswith("bootstrap "):
            ports = [int(a.rsplit(":", 1)[1]) for a in line.split()[1].split(",")]
        elif line.startswith("pids "):
            pids = {k: int(v) for k, v in (x.split("=") for x in line.split()[1:])}
            break
    if not ports:
        raise SystemExit("kafkacheck serve did not start")
    return proc, ports, pids


def _stop(proc: subprocess.Popen, pids: dict[str, int]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    for pid in pids.values():
        end = time.monotonic() + 10
        while _alive(pid) and time.monotonic() < end:
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


_HOLDER = """
import socket, sys
ports = [int(p) for p in sys.argv[2].split(",")]
held = []
for i in range(int(sys.argv[1])):
    try:
        held.append(socket.create_connection(("127.0.0.1", ports[i % len(ports)]), timeout=5))
    except OSError:
        pass
print(len(held), flush=True)
sys.stdin.read()
"""


def _hold_sockets(ports: list[int], count: int, holders: int = 4) -> tuple[list[subprocess.Popen], int]:
    """``count`` idle connections, held by ``holders`` child processes (one process's file
    descriptor limit may be lower than ``count``); they close when their stdin does."""
    procs = [subprocess.Popen([sys.executable, "-c", _HOLDER, str(count // holders), ",".join(map(str, ports))],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(holders)]
    return procs, sum(int(p.stdout.readline() or 0) for p in procs)


def _leaders(port: int) -> dict[str, list[int]]:
    from kafkacheck.serve import metadata_probe

    return metadata_probe("127.0.0.1", port, 10)[1]


def attacks() -> list[dict]:
    from kafka.protocol.consumer import FetchRequest
    from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest

    from reference.messages import DeleteTopicsRequest
    from reference.server import peers
    from reference.server.fuzz import frame
    from reference.server.protocol import recv_exact, round_trip

    rows = []
    with tempfile.TemporaryDirectory(prefix="kc-trust-") as tmp:
        data = Path(tmp) / "data"
        proc, ports, pids = _serve(data)
        port = ports[0]
        try:
            _create(f"127.0.0.1:{port}", "big", 1)
            producer = Producer({"bootstrap.servers": f"127.0.0.1:{port}", "acks": "all", "log_level": 2})
            value = os.urandom(100_000)
            for _ in range(80):
                producer.produce("big", value=value, partition=0)
            producer.flush(60)
            leaders_before = _leaders(port)
            leader = leaders_before["big"][0]
            leader_port = ports[leader - 1]
            pid = pids[f"broker-{leader}"]
            # 1. unread pipelined fetches
            before = _rss_mb(pid)
            T = FetchRequest
            fetch = T[4](replica_id=-1, max_wait_ms=10, min_bytes=1, max_bytes=50 << 20, isolation_level=0,
                         topics=[T.FetchTopic(topic="big", partitions=[T.FetchTopic.FetchPartition(
                             partition=0, fetch_offset=0, partition_max_bytes=50 << 20)])])
            peak = before
            for _round in range(2):
                socks = []
                for _ in range(4):
                    s = socket.create_connection(("127.0.0.1", leader_port))
                    s.setblocking(False)
                    for i in range(64):
                        try:
                            s.sendall(frame(fetch, i))
                        except BlockingIOError:
                            break
                    socks.append(s)
                end = time.monotonic() + 10
                while time.monotonic() < end:
                    peak = max(peak, _rss_mb(pid))
                    time.sleep(0.2)
                for s in socks:
                    s.close()
            moved = _leaders(port)["big"] != leaders_before["big"]
            log(f"  unread fetches: broker RSS {before:.0f} MB -> peak {peak:.0f} MB; leadership moved: {moved}")
            rows.append({"probe": "4 x 64 unread pipelined fetches, twice", "held": peak - before < 500 and not moved,
                         "note": f"RSS {before:.0f} -> {peak:.0f} MB, leadership moved: {moved}"})
            # 2. Metadata with 300,000 empty names
            worst = [0.0]
            done = threading.Event()

            def probe() -> None:
                while not done.is_set():
                    t0 = time.monotonic()
                    round_trip("127.0.0.1", leader_port, ApiVersionsRequest[0](), ApiVersionsResponse, "p", 60)
                    worst[0] = max(worst[0], time.monotonic() - t0)
                    time.sleep(0.05)

            th = threading.Thread(target=probe)
            th.start()
            t0 = time.monotonic()
            try:
                with socket.create_connection(("127.0.0.1", leader_port), timeout=120) as s:
                    s.sendall(frame(MetadataRequest[1](topics=[""] * 300_000), 7))
                    size = int.from_bytes(recv_exact(s, 4), "big")
                    recv_exact(s, size)
            finally:
                done.set()
                th.join()
            took = time.monotonic() - t0
            moved = _leaders(port)["big"] != leaders_before["big"]
            log(f"  Metadata of 300,000 names: answered in {took:.1f} s; another client waited at most "
                f"{worst[0]:.2f} s; leadership moved: {moved}")
            rows.append({"probe": "Metadata naming 300,000 topics", "held": worst[0] < 3.0 and not moved,
                         "note": f"answered in {took:.1f} s, other client's worst wait {worst[0]:.2f} s, "
                                 f"leadership moved: {moved}"})
            # 3. a forged DeleteTopics on the controller's peer port
            peer_port = json.loads((data / "cluster.json").read_text())["peer_ports"]["0"]
            forged = peers.encode(1, 0, DeleteTopicsRequest(1, "__consumer_offsets"))
            with socket.create_connection(("127.0.0.1", peer_port), timeout=10) as s:
                s.sendall(forged * 3)
                time.sleep(2)
            kept = {"__consumer_offsets", "__transaction_state"} <= set(_leaders(port))
            log(f"  forged DeleteTopics on the peer port: internal topics kept: {kept}")
            rows.append({"probe": "forged DeleteTopics on the peer port", "held": kept,
                         "note": "refused (no proof of the cluster's secret)" if kept else "deleted"})
            # 4. 20,000 idle sockets
            logs_before = sum(f.stat().st_size for f in (data / "logs").glob("*.log"))
            t0 = time.monotonic()
            holders, opened_n = _hold_sockets(ports, 20_000)
            opened = time.monotonic() - t0
            t1 = time.monotonic()
            ok, why = True, ""
            try:
                _leaders(port)
            except Exception as e:  # a refused client is the finding
                ok, why = False, f" ({type(e).__name__}: {e})"
            wait = time.monotonic() - t1
            for h in holders:
                h.stdin.close()
                h.wait(30)
            time.sleep(2)
            logs_after = sum(f.stat().st_size for f in (data / "logs").glob("*.log"))
            grown_kb = (logs_after - logs_before) / 1024
            log(f"  20,000 idle sockets ({opened_n:,} opened in {opened:.1f} s): a new client served: {ok}{why} "
                f"in {wait:.2f} s; logs grew {grown_kb:.1f} KB")
            rows.append({"probe": "20,000 idle sockets", "held": ok and wait < 5 and grown_kb < 100,
                         "note": f"new client served in {wait:.2f} s, logs +{grown_kb:.1f} KB"})
        finally:
            _stop(proc, pids)
        # 5. kill -9 of the launcher
        proc, ports, pids = _serve(data)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        t0 = time.monotonic()
        while any(_alive(p) for p in pids.values()) and time.monotonic() - t0 < 15:
            time.sleep(0.1)
        survivors = [n for n, p in pids.items() if _alive(p)]
        gone = time.monotonic() - t0
        _stop(proc, pids)
        log(f"  kill -9 of the launcher: nodes gone in {gone:.1f} s; survivors: {survivors or 'none'}")
        rows.append({"probe": "kill -9 of the launcher", "held": not survivors,
                     "note": f"its {len(pids)} nodes gone in {gone:.1f} s"})
    return rows


# ------------------------------------------------------------------ source


def source() -> dict:
    # eval/exec as builtins (not z3's model.eval), and the modules that run code while loading
    pattern = re.compile(r"(\bimport (pickle|marshal|shelve|dill)\b|\bfrom (pickle|marshal|shelve|dill)\b|"
                         r"(?<![.\w])(eval|exec)\(|yaml\.load\(|yaml\.unsafe_load)")
    hits = []
    for top in ("reference", "kafkacheck", "traces", "properties", "linearizability", "fault_injection",
                "spark_analysis"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line) and not line.lstrip().startswith("#"):
                    hits.append(f"{path.relative_to(ROOT)}:{n}")
    log(f"  source: {len(hits)} uses of pickle/marshal/shelve/eval/exec{': ' + ', '.join(hits) if hits else ''}")
    return {"probe": "pickle, marshal, shelve, eval, exec in the sources", "held": not hits,
            "note": ", ".join(hits) or "none"}


PROBES = ("durability", "fuzz", "attacks", "source")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=110_000, help="records per kill -9 scenario (default 110000)")
    ap.add_argument("--frames", type=int, default=4470, help="mutated frames (default 4470)")
    ap.add_argument("--only", nargs="+", choices=PROBES, default=list(PROBES), help="run only these probes")
    args = ap.parse_args()
    rows: list[dict] = []
    start = time.monotonic()
    if "durability" in args.only:
        log("durability (kill -9 while a producer writes):")
        for scenario in ("every node", "leader of partition 0", "single-process cluster"):
            rows.append(durability(scenario, args.records))
    if "fuzz" in args.only:
        log("fuzz and listening addresses:")
        rows += fuzz_and_binds(args.frames)
    if "attacks" in args.only:
        log("hostile clients:")
        rows += attacks()
    if "source" in args.only:
        rows.append(source())
    print("\n| probe | acknowledged | lost | held | notes |\n| --- | ---: | ---: | --- | --- |")
    for r in rows:
        ack = f"{r['acknowledged']:,}" if "acknowledged" in r else ""
        lost = str(r["lost"]) if "lost" in r else ""
        print(f"| {r['probe']} | {ack} | {lost} | {'yes' if r['held'] else 'NO'} | {r.get('note', '')} |")
    total = sum(r.get("acknowledged", 0) for r in rows if r["probe"].startswith("kill"))
    lost = sum(r.get("lost", 0) for r in rows if r["probe"].startswith("kill"))
    print(f"\nkill -9: {lost} of {total:,} acknowledged records lost; {time.monotonic() - start:.0f} s in all")
    return 0 if all(r["held"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
