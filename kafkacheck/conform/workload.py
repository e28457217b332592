"""A workload of :mod:`kafkacheck.workloads` with real clients against a real broker, recorded
as a history and judged.

Theory of operation
-------------------
The workload (a :class:`~kafkacheck.workloads.base.Workload` of the registry, the same one
``run``, ``hunt`` and ``explore`` take) says which client threads run (``real_threads``:
producers, consumers, transactional producers, exactly-once processors; ``real_members``:
consumer-group members), with what topic configs, and what its part of the checker's
config is. They run ops against one topic of :data:`~kafkacheck.real.real_run.PARTITIONS`
partitions (and an output topic for ``eos``), every op recorded as an invoke and its
completion in docs/reference/trace-format.md (time: wall-clock nanoseconds since the start),
by the rules of :class:`~kafkacheck.real.real_run.RealRun`.

A nemesis thread, when kafkacheck started the broker, kills (kill -9) and restarts, or
pauses (SIGSTOP) and resumes, broker processes, recorded as nemesis ops; with a fault proxy in
front of each broker it also cuts clients off (both ways or one), delays or resets their
connections. At the end every fault is healed, the cluster is waited for, group members poll
until the group settles, and a final reader reads every partition from the beginning up to
its end offset. The history is written as a run directory and judged by the same checker as
the simulator's runs (:func:`properties.checker.check`, with the checks the config enables).
"""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

from kafkacheck.conform.offline import create_placed_topics, draw_placement
from kafkacheck.conform.real_nemesis import nemesis_loop
from kafkacheck.conform.txn_probe import TxnProbe, probe_unavailable
from kafkacheck.real.client_debug import CallWatch, dump_threads
from kafkacheck.real.final_read import end_offsets, final_read, uncommitted_read
from kafkacheck.real.kinds import CLIENTS, make_poller
from kafkacheck.real.real_run import PARTITIONS, RealRun
from kafkacheck.workloads import WORKLOADS


def run_workload(target, client_kind: str, create_topic, out_dir: Path, seconds: float, faults: list[str],
                 timeout_s: float = 10.0, producers: int = 3, consumers: int = 2, seed: int = 0, log=print,
                 workload: str = "queue", straggle_apis: tuple[str, ...] | None = None,
                 group_protocol: str = "classic", eos_subscribe: bool = False) -> dict:
    """Run ``workload`` (a key of :data:`kafkacheck.workloads.WORKLOADS`) for ``seconds`` under
    ``faults``, heal, read everything back, and judge the history; returns the checker's
    result with ``summary`` and ``run_dir`` added. ``group_protocol``: the consumer group
    protocol of the members of a group workload (classic, or consumer: KIP-848);
    ``eos_subscribe``: eos's processors are members of such a group (else they assign)."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}; known: {', '.join(WORKLOADS)}")
    w = WORKLOADS[workload]
    run = RealRun(w, target, client_kind, timeout_s, seed, group_protocol, eos_subscribe)
    run.pauses = "straggle" in faults
    run.watch = CallWatch.from_env(out_dir, run.h.now)
    placement = _create_topics(run, create_topic, faults, seed, timeout_s)
    rf = 1 if placement else min(3, target.brokers)
    w.real_prepare(run)
    time.sleep(1)
    nemesis_log: list[dict] = []
    threads = [threading.Thread(target=f, daemon=True) for f in w.real_threads(run, producers, consumers)]
    members = [threading.Thread(target=f, daemon=True) for f in w.real_members(run)]
    probe, probe_stop = _start_probe(run)
    nemesis = threading.Thread(target=nemesis_loop, args=(target, faults, run.h, random.Random(seed + 1), run.stop,
                                                          nemesis_log, run.topic,
                                                          straggle_apis or w.real_straggle_apis(run), placement,
                                                          _groups(run), probe[0] if probe else None),
                               daemon=True)
    for t in [*threads, *members, nemesis]:
        t.start()
    try:
        # in short sleeps: Ctrl-C may be delivered to any of the clients' threads, and the main
        # thread only runs the handler once it is back from its sleep
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            time.sleep(min(left, 0.5))
    except BaseException:  # Ctrl-C: the nemesis ends its fault before the brokers are stopped
        run.stop.set()
        run.done.set()
        probe_stop.set()
        nemesis.join(10)
        raise
    run.stop.set()
    nemesis.join(30)
    deadline = time.monotonic() + timeout_s * 3  # one deadline for all: a hung client is reported, not waited on
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = sum(t.is_alive() for t in threads)
    heal_ns = run.h.now()
    target.heal(log)
    converged = None
    if members:
        converged = w.real_settle(run, members)
        hung += sum(t.is_alive() for t in members)
    if hung:
        dump_threads(out_dir / "hung-threads.txt", f"{hung} client thread(s) still running after the workload")
    run.watch.stop()
    run.close_leftovers()
    try:
        final = _read_back(run, log)
    finally:
        probe_stop.set()
    config = _config(run, rf, seconds, {**final, "heal_ns": heal_ns})
    if converged is not None and "groups" in config:  # whether the members settled: for the checker
        config["groups"]["settled"] = converged
    if placement:
        config["placement"] = placement
    if probe is not None:
        probe[1].join(10)
        config["txn_probe"] = probe[0].summary()
    if lines := broker_log_lines(target):
        config["broker_log"] = lines
    result = _write_and_judge(run, out_dir, seed, config, faults)
    acked = sum(1 for op in run.h.recorder.ops if op["f"] in ("send", "txn") and op["type"] == "ok"
                for mop in op["value"] if mop[0] == "send")
    result["summary"] = {"ops": len(run.h.recorder.ops), "acknowledged_sends": acked, "hung_clients": hung,
                         "final_read_reached_end": final["reached_end"], "nemesis": nemesis_log}
    if converged is not None:
        result["summary"]["group_converged"] = converged
    result["run_dir"] = str(out_dir)
    return result


def _create_topics(run: RealRun, create_topic, faults: list[str], seed: int, timeout_s: float) -> dict | None:
    """The workload's topics, by the client under test; with ``offline-partition``, placed for it
    (one replica per partition, round robin over the nodes in a drawn order) by kafkacheck's admin
    client, and the placement returned."""
    w, target = run.w, run.target
    if "offline-partition" not in faults:
        for topic in run.topics():
            error = create_topic(topic, PARTITIONS, min(3, target.brokers), w.real_topic_configs)
            if error:
                raise RuntimeError(f"could not create the workload topic {topic}: {error}")
        return None
    placement = draw_placement(random.Random(seed + 2), run.topics(), PARTITIONS, list(range(1, target.brokers + 1)))
    error = create_placed_topics(target.bootstrap, placement, w.real_topic_configs, timeout_s)
    if error:
        raise RuntimeError(f"could not create the workload topics {', '.join(run.topics())} as placed: {error}")
    return placement


def _groups(run: RealRun) -> tuple[str, ...]:
    """The consumer groups of the workload's config (eos: the processors' group)."""
    group = (run.w.real_config(run).get("eos") or {}).get("group")
    return (group,) if group else ()


def _start_probe(run: RealRun):
    """The hanging-transaction probe of a transactional workload, when the broker serves its
    APIs: ((probe, thread), its stop event), or (None, an event)."""
    stop = threading.Event()
    if not run.w.transactional or probe_unavailable(run.target.apis) is not None:
        return None, stop
    probe = TxnProbe(run.target.bootstrap, [k for t in run.topics() for k in run.keys(t)],
                     list(range(1, run.target.brokers + 1)), run.h.now)
    thread = threading.Thread(target=probe.run, args=(stop,), daemon=True)
    thread.start()
    return (probe, thread), stop


# the broker log lines that are evidence of a hanging transaction: Kafka's marker sender
# skipping a partition it could not find a leader for (KAFKA-20734)
EVIDENCE_LINES = ("likely deleted already",)  # (the reference's txn-markers-skipped event says it too)


def broker_log_lines(target, most: int = 20) -> list[dict]:
    """The lines of EVIDENCE_LINES in the logs of the processes kafkacheck started."""
    out: list[dict] = []
    for name, proc in sorted(target.processes.items()):
        try:
            text = proc.log_path.read_text(errors="replace")
        except OSError:
            continue
        out += [{"node": name, "line": line.strip()[:500]} for line in text.splitlines()
                if any(e in line for e in EVIDENCE_LINES)]
    return out[:most]


def _read_back(run: RealRun, log) -> dict:
    """After healing: what the workload reads first (the eos group's committed offsets),
    every partition's end offset, and the final read up to them (the final_read config, but
    for heal_ns)."""
    h, target = run.h, run.target
    start_ns = h.now()
    run.w.real_after_heal(run)
    ends: dict[str, int] = {}
    end_errors: dict[str, str] = {}
    stable: dict[str, list[int]] = {}
    ends_deadline = time.monotonic() + 60
    client = CLIENTS[run.kind](target.bootstrap, run.timeout_s)
    for t in run.topics():
        got, errors = end_offsets(client, t, PARTITIONS, run.isolation, ends_deadline, stable)
        ends.update(got)
        end_errors.update(errors)
    if end_errors:
        log(f"no end offset for {', '.join(sorted(end_errors))} within 60 s after healing: "
            f"{next(iter(end_errors.values()))}")
    tps = [(t, p) for t in run.topics() for p in range(PARTITIONS)]
    reader = make_poller(run.kind, target.bootstrap, tps, run.timeout_s, run.isolation, keyed=run.keyed)
    positions: dict[str, int] = {}
    reached = final_read(h, reader, [f"{t}:{p}" for t, p in tps], ends, positions)
    uncommitted = {}
    if run.isolation == "read_committed" and stable:  # what the final read skipped: aborted records, markers
        highs = {k: hw for k, (_lso, hw) in stable.items()}
        scan = make_poller(run.kind, target.bootstrap, tps, run.timeout_s, "read_uncommitted", keyed=run.keyed)
        uncommitted = uncommitted_read(scan, highs)
    return {"performed": True, "start_ns": start_ns, "reached_end": reached,
            "took_ms": (h.now() - start_ns) // 1_000_000, "staleness_bound_ms": 60_000,
            "end_offsets": ends, "positions": positions, **({"end_offset_errors": end_errors} if end_errors else {}),
            **({"stable_offsets": stable} if stable else {}), **({"uncommitted": uncommitted} if uncommitted else {})}


def _config(run: RealRun, rf: int, seconds: float, final_read: dict) -> dict:
    """run.json's config: what the checker needs to decide what is allowed."""
    w, target = run.w, run.target
    config = {
        "acks": "all", "idempotence": w.idempotent, "isolation_level": run.isolation,
        "txn": w.transactional, "sub_via": ["assign"], "replication_factor": rf,
        "partitions": PARTITIONS, "brokers": target.brokers, "compacted": w.compacted,
        "client": run.kind, "seconds": seconds, "staleness_bound_ms": 60_000,
        **({"min_insync_replicas": target.min_insync_replicas} if target.min_insync_replicas is not None else {}),
        **({"broker_config": dict(target.broker_config)} if target.broker_config else {}),
        "features": dict(target.features), "bugs": list(target.bugs),
        "final_read": final_read,
        # a real network keeps TCP's promise: the fault proxies and the namespaces cut, reset
        # or stall whole connections, and a straggled request reaches the broker on its old
        # connection after the client's was reset (its answer is the nemesis op's), so the
        # checker judges idempotence-error under every real fault
        # (properties.config_checks.tcp_breaking)
        "network": "connections",
    }
    config.update(w.real_config(run))
    return config


def _write_and_judge(run: RealRun, out_dir: Path, seed: int, config: dict, faults: list[str]) -> dict:
    target = run.target
    return run.h.write_and_judge(out_dir, {"seed": seed, "target": target.name, "workload": run.workload,
                                           "faults": faults}, config, target.version or target.name)
