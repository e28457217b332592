"""Faults, simulated and real.

In the deterministic simulator (one seeded RNG, virtual time): :mod:`~fault_injection.simulation`
(the event loop and processes), :mod:`~fault_injection.network` (latency, loss, duplication,
reordering, partitions), :mod:`~fault_injection.disk` (unflushed writes lost on crash, torn
writes, corruption, full or slow disk), :mod:`~fault_injection.cluster` (a simulated cluster
and its timings), :mod:`~fault_injection.nemesis` (fault schedules, random or scripted),
:mod:`~fault_injection.aimed` (faults aimed at delicate moments) and
:mod:`~fault_injection.model_shapes` (the z3 model's counterexamples as schedules).

Against real brokers, apart in :mod:`fault_injection.real` (the only part with real time,
threads, processes and sockets; ``tests/test_layers.py`` keeps them out of the simulator):
:mod:`~fault_injection.real.proxy` (a TCP fault proxy in front of a broker),
:mod:`~fault_injection.real.straggle` (one request held back across a cluster's proxies),
:mod:`~fault_injection.real.processes` (kill -9, SIGSTOP and restarts of local processes) and
:mod:`~fault_injection.real.netns` (every node in a network namespace of its own: partitions,
loss and slow links between nodes with nftables and tc).

The names of both, and which of them mean the same fault, are :mod:`~fault_injection.vocabulary`.
"""

import importlib

import reference  # noqa: F401  (installs reference.compiled's finder: the simulator's core is compiled with the engine)

# the package's names, imported when first used (PEP 562): importing one module of the package
# (``kafkacheck check`` needs only a few) does not import all of it
_EXPORTS = {
    "SimDisk": "fault_injection.disk",
    "FAULTS": "fault_injection.nemesis",
    "Nemesis": "fault_injection.nemesis",
    "load_schedule": "fault_injection.nemesis",
    "random_schedule": "fault_injection.nemesis",
    "Network": "fault_injection.network",
    "Simulation": "fault_injection.simulation",
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = ["FAULTS", "Nemesis", "Network", "SimDisk", "Simulation", "load_schedule",
           "random_schedule"]
