"""The simulated network: connections with per-link latency, resets, stalls and partitions.

Messages between two nodes travel on a connection (one per pair of nodes, as a Kafka client
keeps one per broker), and a connection is TCP: what one end sends reaches the other in the
order sent, or not at all from the first loss on. Each directed link has a latency
distribution (a base plus exponential jitter; one default for all links unless
:meth:`Network.set_link_latency` gives a link its own), and a link's delivery time never goes
below the previous one's, so a message held back holds every later one behind it.

Faults TCP can suffer act on whole connections:

* a partition blocks directed links (``grudge``: node -> nodes it cannot hear from); a message
  sent into a blocked link is lost and *closes its connection* (:meth:`Network.close`), and no
  connection is set up again while either direction is blocked (TCP needs both ways), so a
  one-way partition stops a pair once its connection breaks, as it does between real hosts;
* ``loss`` resets a connection: the message sent when the draw hits is lost with the
  connection, as after a reset by a middlebox;
* ``delay`` adds latency, ``straggle`` stalls a connection for seconds (a message and all
  behind it), past request timeouts: a client that gives up closes the connection and retries
  on a new one, which overtakes the old one's late messages (different connections have no order).

The simulator (:mod:`fault_injection.simulation`) tells both ends of a closed connection (50 ms
later: Kafka's reconnect.backoff.ms), as
a reset or a timeout would: the clients that model their connections fail what they had in
flight and retry, as Kafka's do. Messages already on the wire when a connection closes are
delivered (data sent before the reset). ``reorder`` (messages of a link overtake each other)
and ``duplicate`` (delivered twice) are the two faults TCP never makes, drawn only when asked.

Links are of three kinds (:meth:`Network.link_kind`), once the cluster's roles are known
(:meth:`Network.set_roles`): ``client`` (a client and a broker or the controller),
``replication`` (two brokers: replica fetches) and ``controller`` (a broker and the
controller: heartbeats, metadata, AlterPartition). A fault's ``links`` confines it to some
kinds (None: every link). All choices come from the run's single seeded RNG.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from math import log as _log
from typing import Final


@dataclass(slots=True)
class LinkFaults:
    loss: float = 0.0  # fraction of messages whose connection is reset (the message lost with it)
    duplicate: float = 0.0
    reorder: bool = False
    extra_delay_us: int = 0
    straggle: float = 0.0  # fraction of messages that stall their connection for seconds
    straggle_ms: int = 0
    links: frozenset[str] | None = None  # the link kinds these faults hit (None: every link)


LINK_KINDS = ("client", "replication", "controller")
_NO_FAULTS: Final = LinkFaults()


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
        # pairs (low id, high id) whose connection closed and was not set up again since
        self._closed: set[tuple[int, int]] = set()
        self.sent = 0
        self.dropped = 0
        self.closes = 0
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

    def deliveries(self, src: int, dst: int, now_ns: int, extra_ns: int = 0) -> list[int]:
        """The times (ns) at which a message sent now arrives (``extra_ns`` later than the
        network alone would bring it: a hold-back); [] when it is lost, which closes its
        connection (the caller says so to both ends)."""
        self.sent += 1
        link = (src, dst)
        blocked = self.blocked
        if blocked and (link in blocked or ((dst, src) in blocked and _pair(src, dst) in self._closed)):
            self.dropped += 1  # cut off, or no connection can be set up through a one-way cut
            return []
        f = self.faults
        if f.links is not None and self.link_kind(src, dst) not in f.links:
            f = _NO_FAULTS
        rng = self.rng
        if f.loss and rng.random() < f.loss:
            self.dropped += 1  # the connection is reset
            return []
        base_us, jitter_us = self.link_latency.get(link, self._default_latency)
        # rng.expovariate(1.0 / jitter_us), its very arithmetic (CPython's random.py) without
        # its call: one for every message of a run
        latency_us = base_us + int(-_log(1.0 - rng.random()) / (1.0 / jitter_us)) + f.extra_delay_us
        if f.reorder:
            latency_us += int(rng.expovariate(1.0 / 2000))
        at = now_ns + latency_us * 1000 + extra_ns
        if f.straggle and rng.random() < f.straggle:
            # a stalled connection (a retransmission timeout, a request stuck in the broker's
            # queue while its channel is muted): this message and every later one arrive late
            at += rng.randint(f.straggle_ms // 2, f.straggle_ms) * 1_000_000
        last = self._last_delivery.get(link, 0)
        if not f.reorder and at <= last:
            at = last + 1  # in order on a connection, as over TCP
        if at > last:
            self._last_delivery[link] = at
        if self._closed:
            self._closed.discard(_pair(src, dst))  # a new connection is up
        if f.duplicate and rng.random() < f.duplicate:
            return [at, at + int(rng.expovariate(1.0 / 1000)) * 1000 + 1]
        return [at]

    def close(self, a: int, b: int) -> None:
        """The connection between ``a`` and ``b`` closed (lost a message, reset, crashed or
        closed by an end): the next message between them opens a new one, which need not
        wait behind the old one's late messages."""
        self.closes += 1
        self._last_delivery.pop((a, b), None)
        self._last_delivery.pop((b, a), None)
        self._closed.add(_pair(a, b))

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
        self._closed.clear()
        self.faults = LinkFaults()


def _pair(a: int, b: int) -> tuple[int, int]:
    return (a, b) if a < b else (b, a)
