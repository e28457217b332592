"""The simulated network: per-link latency, loss, duplication, reordering and partitions.

Each directed link has a latency distribution (a base plus exponential jitter; one default
for all links unless :meth:`Network.set_link_latency` gives a link its own). Messages
between two nodes normally arrive in order (Kafka runs over TCP): a link's
delivery time never goes below the previous one's. Faults switch that off for a while:
``reorder`` lets deliveries overtake each other, ``straggle`` holds a fraction of
messages back for seconds (longer than request timeouts) so that retries overtake them,
``loss`` drops, ``duplicate`` delivers twice, ``delay`` adds latency. A partition is a
set of blocked directed links (``grudge``: node -> nodes it cannot hear from), so one-way
and ring partitions are as easy as symmetric ones. All choices come from the run's single seeded RNG.

Links are of three kinds (:meth:`Network.link_kind`), once the cluster's roles are known
(:meth:`Network.set_roles`): ``client`` (a client and a broker or the controller),
``replication`` (two brokers: replica fetches) and ``controller`` (a broker and the
controller: heartbeats, metadata, AlterPartition). A fault's ``links`` confines it to some
kinds (None: every link).
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(slots=True)
class LinkFaults:
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: bool = False
    extra_delay_us: int = 0
    straggle: float = 0.0  # fraction of messages held back for seconds, overtaken by later ones
    straggle_ms: int = 0
    links: frozenset[str] | None = None  # the link kinds these faults hit (None: every link)


LINK_KINDS = ("client", "replication", "controller")
_NO_FAULTS = LinkFaults()


class Network:
    def __init__(self, rng: random.Random, base_latency_us: int = 200,
                 jitter_us: int = 100) -> None:
        self.rng = rng
        self.base_latency_us = base_latency_us
        self.jitter_us = jitter_us
        self._default_latency = (base_latency_us, jitter_us)
        self.blocked: set[tuple[int, int]] = set()  # (src, dst)
        self.link_latency: dict[tuple[int, int], tuple[int, int]] = {}  # (base, jitter) in us
        self.faults = LinkFaults()
        self._last_delivery: dict[tuple[int, int], int] = {}
        self.sent = 0
        self.dropped = 0
        self.controller: int | None = None
        self.brokers: frozenset[int] = frozenset()

    def set_roles(self, controller: int, brokers: list[int]) -> None:
        """Which nodes are the controller and the brokers (every other node is a client)."""
        self.controller = controller
        self.brokers = frozenset(brokers)

    def link_kind(self, src: int, dst: int) -> str:
        """``replication`` between brokers, ``controller`` between a broker and the
        controller, ``client`` for any link of another node."""
        servers = self.brokers
        if src in servers and dst in servers:
            return "replication"
        c = self.controller
        if (src == c and dst in servers) or (dst == c and src in servers):
            return "controller"
        return "client"

    def deliveries(self, src: int, dst: int, now_ns: int) -> list[int]:
        """The times (ns) at which a message sent now arrives; [] when it is lost."""
        self.sent += 1
        link = (src, dst)
        if link in self.blocked:
            self.dropped += 1
            return []
        f = self.faults
        if f.links is not None and self.link_kind(src, dst) not in f.links:
            f = _NO_FAULTS
        rng = self.rng
        if f.loss and rng.random() < f.loss:
            self.dropped += 1
            return []
        base_us, jitter_us = self.link_latency.get(link, self._default_latency)
        latency_us = base_us + int(rng.expovariate(1.0 / jitter_us)) + f.extra_delay_us
        if f.reorder:
            latency_us += int(rng.expovariate(1.0 / 2000))
        at = now_ns + latency_us * 1000
        last = self._last_delivery.get(link, 0)
        if f.straggle and rng.random() < f.straggle:
            # a straggler (a stalled connection, a request stuck in a queue): it arrives
            # late, after messages sent later on the same link
            at += rng.randint(f.straggle_ms // 2, f.straggle_ms) * 1_000_000
        else:
            if not f.reorder and at <= last:
                at = last + 1  # in order on a link, as over TCP
            if at > last:
                self._last_delivery[link] = at
        if f.duplicate and rng.random() < f.duplicate:
            return [at, at + int(rng.expovariate(1.0 / 1000)) * 1000 + 1]
        return [at]

    def set_link_latency(self, src: int, dst: int, base_us: int, jitter_us: int) -> None:
        """Give one directed link its own latency distribution: base + exponential jitter."""
        if base_us < 0 or jitter_us <= 0:
            raise ValueError("latency base must be >= 0 and jitter > 0 microseconds")
        self.link_latency[(src, dst)] = (base_us, jitter_us)

    # ------------------------------------------------------------ partitions

    def partition(self, grudge: dict[int, list[int]]) -> None:
        """Block messages to each key from every node in its list."""
        for dst, srcs in grudge.items():
            for src in srcs:
                self.blocked.add((src, dst))

    def heal(self) -> None:
        self.blocked.clear()
        self.faults = LinkFaults()
