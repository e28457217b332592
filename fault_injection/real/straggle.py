"""Stragglers on real brokers: one request held back in the fault proxies and delivered late.

The simulator's ``straggle`` fault holds random messages back for seconds; against a real
broker the same window is opened on purpose, one request at a time, through the
request-aware :class:`~fault_injection.real.proxy.FaultProxy` in front of every broker:

1. :meth:`Straggler.hold` arms every proxy of the cluster to hold back the first request of
   one API (EndTxn, Produce, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit; a
   consumer group member's ConsumerGroupHeartbeat or OffsetCommit). The client's
   connection is reset (or abandoned until the client times out), so the client retries on
   a new connection, which goes through; the held bytes wait on the old one.
2. :meth:`Straggler.wait_for_release` waits for the moment to deliver them: once the next
   transaction of the same transactional id has begun (an EndTxn or InitProducerId of that
   id went through since the hold, and then a successful answer to its first transactional
   Produce or TxnOffsetCommit came back: it holds data), or after a drawn delay.
3. :meth:`HeldRequest.release` delivers them; the broker's answer is what the history
   records: ``NONE`` to an EndTxn that arrived inside a later transaction is KAFKA-17754
   happening (before KIP-890 part 2 the epoch does not change between transactions, so the
   coordinator cannot tell the late request from a current one); ``PRODUCER_FENCED`` or
   ``INVALID_PRODUCER_EPOCH`` is the fix at work.
   A group member's request belongs to no transaction: it is released after a drawn delay,
   when the member may have moved on (KIP-848: a late heartbeat's epoch and owned
   partitions, a late commit's member epoch).

The straggler watches every request and response the proxies forward (their ``observer``),
keyed by transactional id; its methods are called from one thread (the nemesis) while the
observer runs in the proxies' threads.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from fault_injection.real.proxy import FaultProxy, HeldRequest, HoldClaim
from reference.server.protocol import response_errors

STRAGGLE_APIS = ("EndTxn", "Produce", "AddPartitionsToTxn", "AddOffsetsToTxn", "TxnOffsetCommit",
                 "ConsumerGroupHeartbeat", "OffsetCommit", "ShareFetch", "ShareAcknowledge")
# what shows that the next transaction has begun and holds data: the answer to its first
# write (of records, or of offsets); a late EndTxn that arrives before that would find
# nothing to end, or race the AddPartitionsToTxn that opens the transaction
_BEGINS = frozenset({"Produce", "TxnOffsetCommit"})
# what ends a transaction, or the producer's epoch
_ENDS = frozenset({"EndTxn", "InitProducerId"})


class _Claim(HoldClaim):
    """Accepts the first request of ``api`` any proxy sees, once."""

    def __init__(self, api: str, mode: str, straggler: Straggler) -> None:
        self.api, self.mode, self.straggler = api, mode, straggler
        self.taken = False
        self.closed = False  # hold() stopped waiting: what is held after that is let go at once
        self.lock = threading.Lock()
        self.held: HeldRequest | None = None
        self.event = threading.Event()

    def claim(self, proxy: str, info: dict) -> bool:
        if info.get("api") != self.api:
            return False
        if self.api == "Produce" and info.get("producer_id", -1) < 0:
            return False  # a producer without an id (no idempotence): nothing can land late
        with self.lock:
            if self.taken:
                return False
            self.taken = True
            return True

    def on_held(self, held: HeldRequest) -> None:
        with self.lock:
            late = self.closed
            if not late:
                self.held = held
        if late:  # nobody will release it: it goes on now, as if it had not been held
            held.release()
            return
        self.straggler._watch(held)
        self.event.set()


@dataclass
class _Watch:
    """What happened to one transactional id since a request of it was held."""

    txn_id: str
    ended: bool = False  # an EndTxn or InitProducerId of the id was sent (went through the proxy) since
    began: threading.Event = field(default_factory=threading.Event)
    began_with: str = ""


class Straggler:
    """Holds one request at a time across ``proxies`` (frames mode) and releases it late."""

    def __init__(self, proxies: dict[str, FaultProxy]) -> None:
        self.proxies = proxies
        self.lock = threading.Lock()
        self.watch: _Watch | None = None
        for p in proxies.values():
            p.observer = self._observe

    def hold(self, api: str, mode: str, wait_s: float, stop: threading.Event | None = None) -> HeldRequest | None:
        """Arm every proxy to hold the next request of ``api`` (``mode`` reset or abandon);
        the held request, or None when none came within ``wait_s`` (or ``stop`` was set)."""
        if api not in STRAGGLE_APIS:
            raise ValueError(f"cannot hold {api!r}: one of {', '.join(STRAGGLE_APIS)}")
        if mode not in ("reset", "abandon"):
            raise ValueError(f"mode must be reset or abandon, not {mode!r}")
        claim = _Claim(api, mode, self)
        for p in self.proxies.values():
            p.arm(claim)
        end = time.monotonic() + wait_s
        while not claim.event.wait(0.05):
            if time.monotonic() >= end or (stop is not None and stop.is_set()):
                break
        with claim.lock:
            claim.taken = True  # nothing more may be held by this claim
        for p in self.proxies.values():
            p.disarm()
        claim.event.wait(0.5)  # a hold that raced the end of the wait
        with claim.lock:
            claim.closed = True
            return claim.held

    def wait_for_release(self, held: HeldRequest, policy: str, max_hold_s: float,
                         stop: threading.Event | None = None, settle_s: float = 0.0) -> str:
        """Block until it is time to release ``held``: with ``policy`` ``next-transaction``,
        ``settle_s`` after the next transaction of its transactional id began (or after
        ``max_hold_s`` at most); with ``delay``, after ``max_hold_s``. Returns why:
        ``next transaction began (<api>)``, ``delay`` or ``run ended``."""
        end = held.held_at + max_hold_s
        watch = self.watch if policy == "next-transaction" else None
        while True:
            if stop is not None and stop.is_set():
                return "run ended"
            if watch is not None and watch.began.is_set():
                if settle_s > 0:
                    (stop.wait if stop is not None else time.sleep)(settle_s)
                return f"next transaction began ({watch.began_with})"
            if time.monotonic() >= end:
                return "delay"
            if watch is not None:
                watch.began.wait(min(0.05, max(0.0, end - time.monotonic())))
            elif stop is not None:
                stop.wait(min(0.05, max(0.0, end - time.monotonic())))
            else:
                time.sleep(min(0.05, max(0.0, end - time.monotonic())))

    def close(self) -> None:
        for p in self.proxies.values():
            if p.observer == self._observe:
                p.observer = None

    # ------------------------------------------------------------ the proxies' threads

    def _watch(self, held: HeldRequest) -> None:
        txn_id = held.info.get("transactional_id")
        with self.lock:
            self.watch = _Watch(txn_id) if txn_id else None

    def _observe(self, event: str, info: dict, frame: bytes | None) -> None:
        watch = self.watch
        if watch is None or info.get("transactional_id") != watch.txn_id:
            return
        api = info.get("api")
        with self.lock:
            if event == "request" and api in _ENDS:
                watch.ended = True
            elif event == "response" and watch.ended and api in _BEGINS and not watch.began.is_set():
                errors = response_errors(info["api_key"], info["api_version"], frame[4:]) if frame else None
                if errors and all(e == "NONE" for e in errors):  # the write went in: data to end
                    watch.began_with = api
                    watch.began.set()
