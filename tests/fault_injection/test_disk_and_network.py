"""The simulated disk and network behave as their fault models say."""

from __future__ import annotations

import random

import pytest

from fault_injection.disk import SimDisk
from fault_injection.network import Network
from reference.storage import StorageError


def test_a_crash_keeps_exactly_the_flushed_bytes():
    d = SimDisk(1)
    d.append("a/0.log", b"12345")
    d.flush("a/0.log")
    d.append("a/0.log", b"678")
    lost = d.crash(random.Random(1))
    assert d.read("a/0.log") == b"12345" and lost["lost_bytes"] == 3


def test_a_torn_write_leaves_part_of_the_unflushed_tail():
    d = SimDisk(1)
    d.append("a/0.log", b"xx")
    d.flush("a/0.log")
    d.append("a/0.log", b"abcdefgh")
    d.crash(random.Random(3), torn=True)
    kept = d.read("a/0.log")
    assert kept.startswith(b"xx") and 2 < len(kept) < 10


def test_corruption_flips_one_bit_of_durable_data():
    d = SimDisk(1)
    d.append("a/0.log", bytes(64))
    d.flush("a/0.log")
    out = d.crash(random.Random(5), corrupt=True)
    data = d.read("a/0.log")
    assert sum(bin(b).count("1") for b in data) == 1 and out["corrupted"]["file"] == "a/0.log"


def test_a_full_disk_refuses_appends_and_slow_flushes_are_not_durable_yet():
    d = SimDisk(1)
    d.full = True
    with pytest.raises(StorageError):
        d.append("a/0.log", b"x")
    d.full = False
    d.slow_flush = True
    d.append("a/0.log", b"abc")
    d.flush("a/0.log")
    d.crash(random.Random(0))
    assert d.read("a/0.log") == b""
    d.append("a/0.log", b"abc")
    d.flush("a/0.log")
    d.complete_slow_flushes()
    d.crash(random.Random(0))
    assert d.read("a/0.log") == b"abc"


def test_links_are_fifo_unless_reordering_and_partitions_block_one_direction():
    net = Network(random.Random(7))
    times = [net.deliveries(1, 2, 0)[0] for _ in range(200)]
    assert times == sorted(times)
    net.faults.reorder = True
    times = [net.deliveries(1, 2, 0)[0] for _ in range(200)]
    assert times != sorted(times)
    net.heal()
    net.partition({2: [1]})
    assert net.deliveries(1, 2, 0) == [] and net.deliveries(2, 1, 0) != []
    net.heal()
    net.faults.duplicate = 1.0
    assert len(net.deliveries(1, 2, 0)) == 2


def test_a_link_can_have_its_own_latency_distribution():
    net = Network(random.Random(2), base_latency_us=200, jitter_us=100)
    net.set_link_latency(1, 3, 50_000, 1_000)
    slow = [net.deliveries(1, 3, 0)[0] for _ in range(50)]
    fast = [net.deliveries(1, 2, 0)[0] for _ in range(50)]
    assert min(slow) >= 50_000_000 and max(fast) < 50_000_000
    with pytest.raises(ValueError):
        net.set_link_latency(1, 2, 10, 0)


def test_a_latency_is_the_base_plus_an_exponential_draw_of_the_runs_rng():
    # the network inlines random.expovariate's arithmetic (one call less for every message):
    # a seed must keep drawing what expovariate draws, or every recorded history changes
    net, rng = Network(random.Random(11), base_latency_us=200, jitter_us=250), random.Random(11)
    for now in range(0, 300_000_000_000, 100_000_000):  # one every 100 ms: none waits on another
        assert net.deliveries(1, 2, now) == [now + (200 + int(rng.expovariate(1.0 / 250))) * 1000]
