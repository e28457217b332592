"""The covering array a hunt starts with: every pair of the swarm's choices within its first
few dozen runs (kafkacheck/covering.py)."""

from __future__ import annotations

import pytest

from kafkacheck.covering import COVERING_SEEDS, POOL, choices, covering_seeds, pairs
from kafkacheck.swarm import draw
from kafkacheck.swarm_hunt import Steering


@pytest.mark.slow  # 6 s; the pairs test below checks the kept seeds' coverage in the default run
def test_the_kept_seeds_are_the_greedy_covering_of_the_pool():
    assert covering_seeds() == COVERING_SEEDS, "the swarm's draws changed: python -m kafkacheck.covering"
    assert len(COVERING_SEEDS) <= 60 and len(set(COVERING_SEEDS)) == len(COVERING_SEEDS)


def test_every_pair_any_seed_draws_comes_up_in_the_covering_seeds():
    covered = set().union(*(pairs(choices(draw(s))) for s in COVERING_SEEDS))
    drawn = set().union(*(pairs(choices(draw(s))) for s in range(0, POOL, 7)))
    assert drawn <= covered
    # the pairs issue 45 names, among them
    for a, va, b, vb in [("assignor", "cooperative-sticky", "workload", "groups"),
                         ("transaction.version", "2", "workload", "eos"),
                         ("fault:pause", "True", "static members", "True"),
                         ("aimed:request-held-back", "True", "fault:straggle", "True"),
                         ("producer epochs", "near the end", "transaction.version", "2")]:
        assert (a, va, b, vb) in covered


def test_a_choice_that_does_not_apply_is_left_out():
    queue = next(draw(s) for s in range(100) if draw(s).workload == "queue")
    assert "assignor" not in choices(queue) and "transaction.version" not in choices(queue)


def test_a_hunt_runs_the_covering_seeds_first_then_steers_among_the_others():
    steering = Steering(500)
    first = [steering.pick() for _ in COVERING_SEEDS]
    assert first == list(COVERING_SEEDS)
    after = [steering.pick() for _ in range(20)]
    assert not set(after) & set(COVERING_SEEDS) and len(set(after)) == 20
