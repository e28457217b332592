"""A hunt worker's runs: full garbage collections held during a run, one every few runs."""

from __future__ import annotations

import gc

from fault_injection.simulation import FULL_COLLECTIONS_NEVER
from kafkacheck import hunt_tasks


def test_a_run_holds_full_collections_and_every_nth_run_ends_with_one(monkeypatch):
    before = gc.get_threshold()
    collected = []
    monkeypatch.setattr(hunt_tasks.gc, "collect", lambda *a: collected.append(1) or 0)
    monkeypatch.setattr(hunt_tasks, "_runs_done", [0])

    def run(job):
        assert gc.get_threshold()[2] == FULL_COLLECTIONS_NEVER
        return job * 2

    results = [hunt_tasks._one_run(run, i) for i in range(2 * hunt_tasks.FULL_COLLECTION_EVERY + 1)]
    assert results == [2 * i for i in range(2 * hunt_tasks.FULL_COLLECTION_EVERY + 1)]
    assert len(collected) == 2
    assert gc.get_threshold() == before


def _double(job):
    return job * 2


def _fail(job):
    raise ValueError(job)


def test_a_finished_run_wakes_the_hunts_wait_whether_it_succeeded_or_failed():
    with hunt_tasks.Tasks(1) as pool:
        for fn in (_double, _fail):
            h = pool.submit(fn, 3)
            h.wait(60)
            assert pool._done.is_set()  # told before its result is ready
            pool.wait(3600)  # a run finished since the last wait: returns at once
            assert not pool._done.is_set()
        assert h.ready() and not h.successful()
