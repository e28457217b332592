"""kafkacheck/workloads/client.py's draws: the clients' ``randint`` and ``choice`` draw what
``random.Random``'s do, seed for seed, or every recorded history would change."""

from __future__ import annotations

import random

import pytest

from kafkacheck.workloads.client import choice, randint


@pytest.mark.parametrize("seed", range(5))
def test_randint_and_choice_draw_what_random_draws(seed):
    ours, theirs = random.Random(seed), random.Random(seed)
    keys = [f"t:{p}" for p in range(7)]
    for i in range(2000):
        a, b = i % 5 - 2, i % 5 - 2 + i % 97  # widths 1 to 97, and 2**k exactly among them
        assert randint(ours, a, b) == theirs.randint(a, b)
        assert choice(ours, keys[: 1 + i % 7]) == theirs.choice(keys[: 1 + i % 7])
    big = 10**30 + 7  # more bits than one machine word
    assert randint(ours, 0, big) == theirs.randint(0, big)
    assert ours.random() == theirs.random()  # and the generators stay in step


def test_an_empty_range_is_refused():
    with pytest.raises(ValueError):
        randint(random.Random(0), 3, 2)
    with pytest.raises(IndexError):  # as random.Random's
        choice(random.Random(0), [])
