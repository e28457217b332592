"""The simulator's speed-ups change nothing, and what they rely on holds."""

from __future__ import annotations

import gc
import hashlib
import weakref
from dataclasses import replace
from pathlib import Path

import pytest

import fault_injection.simulation as simulation
from kafkacheck.runner import RunOptions, simulate
from kafkacheck.swarm import draw


def _hashes(out: Path) -> tuple[str, str]:
    return tuple(hashlib.sha256((out / f).read_bytes()).hexdigest()  # type: ignore[return-value]
                 for f in ("history.jsonl", "events.jsonl"))


@pytest.mark.parametrize("options", [RunOptions(seed=3, ops=800, workload="txn"),
                                     RunOptions(seed=4, ops=1500, workload="groups"),
                                     draw(5, 600),
                                     RunOptions(seed=6, ops=300, workload="txn", flush_ms=1)],
                         ids=["txn", "groups", "swarm", "flush-every-ms"])
def test_skipping_moot_timers_changes_no_byte_of_a_run(tmp_path, monkeypatch, options):
    simulate(options, tmp_path / "skipping")
    monkeypatch.setattr(simulation, "SKIP_MOOT_TIMERS", False)
    simulate(options, tmp_path / "firing")
    assert _hashes(tmp_path / "skipping") == _hashes(tmp_path / "firing")


@pytest.mark.parametrize("workload", ["queue", "txn", "eos", "groups", "compaction"])
def test_a_crashed_broker_is_freed_at_once_without_the_cycle_collector(monkeypatch, workload):
    # the simulation runs with full collections off (young_collections_only): a reference
    # cycle in the engine would keep every crashed broker's logs in memory until the run ends
    freed, kept = [], []
    kill = simulation.Simulation.kill

    def watching_kill(self, node_id, torn=False, corrupt=False):
        node = self.processes[node_id].node
        ref = weakref.ref(node) if node is not None else None
        del node
        lost = kill(self, node_id, torn, corrupt)
        if ref is not None:
            (kept if ref() is not None else freed).append(type(ref() or object()).__name__)
        return lost

    monkeypatch.setattr(simulation.Simulation, "kill", watching_kill)
    gc.disable()
    try:
        simulate(replace(RunOptions(seed=2, ops=800, workload=workload), faults=["kill"]), None)
    finally:
        gc.enable()
    assert freed, "no broker was killed: the test proves nothing"
    assert kept == []


def test_full_collections_are_off_only_while_simulating():
    before = gc.get_threshold()
    with simulation.young_collections_only():
        assert gc.get_threshold()[2] == simulation.FULL_COLLECTIONS_NEVER
    assert gc.get_threshold() == before


@pytest.mark.parametrize("workload", ["queue", "groups", "share"])
def test_a_finished_run_is_freed_by_reference_counting(workload):
    """Once a run has returned, its cluster and history wait for no full collection: the
    harness's callbacks refer back to the simulation, and Simulation.release (with the
    nemesis dropped) breaks those cycles. A hunt's worker then needs no full collection per
    run; a few small cycles of the engine's own (a group coordinator's) are what is left."""
    gc.collect()
    gc.disable()
    try:
        outcome = simulate(RunOptions(seed=1, ops=300, workload=workload), None)
        assert len(outcome.ops) > 300
        del outcome
        left = gc.collect()
    finally:
        gc.enable()
    assert left < 300, f"{left} objects of a finished run were left to the cycle collector"
