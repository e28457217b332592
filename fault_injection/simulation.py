"""The deterministic discrete-event simulator that hosts sans-IO nodes.

Theory of operation
-------------------
One heap of events ordered by (virtual time in ns, sequence number); one seeded
``random.Random`` for every choice (latency, loss, faults, workloads). A step pops one
event and hands it to a node: a message delivery (``receive``), a timer (``timer``), or a
scheduled callback of the harness. The node's outputs are routed at once: sends go through
the :class:`~fault_injection.network.Network`, timers back onto the heap tagged with the
node's incarnation (a restarted node never sees its predecessor's timers), events to the
recorder. Nothing depends on wall time, hash order or threads, so a seed and options give
the same history byte for byte.

Processes can be killed (the node object is dropped, its disk loses unflushed data),
restarted (a new node object from the factory, a new incarnation), paused (deliveries and
timers queue up and are handed over in order on resume, with stale views) and given a
clock skew (its ``now_ms`` is offset).

After every step that touched a broker or the controller, the white-box invariants run;
the first violation is kept and, unless ``keep_going``, stops the run.
"""

from __future__ import annotations

import gc
import heapq
import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final

from fault_injection.disk import SimDisk
from fault_injection.network import Network
from reference.broker import Broker
from reference.controller import Controller
from reference.invariants import InvariantChecker, Violation
from reference.node import Close, Event, Node, Output, Send, Timer
from traces.history import Recorder

# what a step does (Final: compiled, the constants themselves, not a lookup each use)
_DELIVER: Final = 0
_TIMER: Final = 1
_CALL: Final = 2
VIOLATIONS_RECORDED_MAX = 100  # per invariant; the count in violation_counts is complete
# a client hears that a connection closed this long after (Kafka's reconnect.backoff.ms: it cannot
# connect again sooner); meanwhile what it sends there is lost. Told at once, a client that
# retries at once toward a peer that refuses it (crashed, cut off) would loop without time passing
RECONNECT_BACKOFF_MS = 50
# skip the timers a node calls moot (Node.timer_is_moot): a speed-up that must change nothing,
# which tests/fault_injection check by running with it off
SKIP_MOOT_TIMERS = True


@contextmanager
def young_collections_only() -> Iterator[None]:
    """Run a simulation inside this: Python's full garbage collections walk every object a run
    holds (every log entry, every recorded op), again and again as the heap grows, a third of
    a run's time. The Python engine makes no reference cycles that outlive a step (a crashed
    node is freed at once, tests/fault_injection check it), so young objects are enough to
    collect meanwhile; compiled, a crashed broker waits for the run's end (mypyc keeps a
    function's nested callbacks in a cycle with its variables)."""
    young, middle, full = gc.get_threshold()
    gc.set_threshold(young, middle, FULL_COLLECTIONS_NEVER)
    try:
        yield
    finally:
        gc.set_threshold(young, middle, full)


FULL_COLLECTIONS_NEVER = 1 << 30


@dataclass(slots=True)
class SimProcess:
    node_id: int
    factory: Callable[[int, SimDisk], Node]
    disk: SimDisk
    node: Node | None = None
    incarnation: int = 0
    paused: bool = False
    skew_ms: int = 0
    backlog: list[tuple[int, tuple]] = field(default_factory=list)
    server: bool = False  # a broker or the controller: the invariants watch its steps
    started_ns: int = 0  # when this incarnation started: what was sent before is not for it

    @property
    def alive(self) -> bool:
        return self.node is not None


class Simulation:
    def __init__(self, seed: int, *, invariants: bool = True, keep_going: bool = False) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_ns = 0
        # (time, sequence, what, and its up to four arguments): one flat tuple a step
        self._heap: list[tuple[int, int, int, Any, Any, Any, Any]] = []
        self._seq = 0
        self.network = Network(self.rng)
        self.recorder = Recorder()
        self.processes: dict[int, SimProcess] = {}
        self.checker = InvariantChecker() if invariants else None
        self.keep_going = keep_going
        self.violations: list[tuple[int, Violation]] = []
        self.violation_counts: dict[str, int] = {}
        self.stopped = False
        self.steps = 0
        self.delivered = 0
        self.skip_moot_timers = SKIP_MOOT_TIMERS
        self.moot_timers = 0
        self.event_hooks: dict[str, Callable[[int, dict], None]] = {}
        # aimed delays (:meth:`hold_back`): (which messages, extra ns) each used once
        self.holds: list[tuple[Callable[[int, int, Any], bool], int]] = []
        # see every event a node outputs (before it is recorded, after the invariant checker); must
        # not change its fields
        self.observers: list[Callable[[int, str, dict], None]] = []
        # (node, peer): the connection between them closed and ``node``, which models its
        # connections, has not yet been told (:meth:`_closed`): what it sends there is lost
        self._unaware: set[tuple[int, int]] = set()
        self._brokers: dict[int, Broker] | None = None
        self._controller: list[Controller | None] | None = None  # cached like _brokers

    # ------------------------------------------------------------ setup

    def add_process(self, node_id: int, factory: Callable[[int, SimDisk], Node]) -> SimProcess:
        proc = SimProcess(node_id, factory, SimDisk(node_id))
        self.processes[node_id] = proc
        return proc

    def start(self, node_id: int) -> None:
        proc = self.processes[node_id]
        if proc.alive:
            return
        proc.incarnation += 1
        proc.started_ns = self.now_ns
        proc.node = proc.factory(proc.incarnation, proc.disk)
        proc.server = isinstance(proc.node, (Broker, Controller))
        self._brokers = None
        self._controller = None
        proc.paused = False
        proc.backlog.clear()
        if self.checker is not None:
            self.checker.node_restarted(node_id)
        self._invoke(proc, "start", ())

    def child_rng(self) -> random.Random:
        """A generator seeded from the run's RNG, for a component that needs its own."""
        return random.Random(self.rng.getrandbits(64))

    def release(self) -> None:
        """Drop the cluster and everything queued, once the run is over. The harness's
        callbacks (node factories, nemesis and workload timers, observers) refer back to the
        simulation, a cycle that only a full garbage collection frees, and it holds every node
        and log of the run: without this, each finished run stays in memory until one, which
        then walks all of it. What was recorded (``recorder``) stays."""
        for proc in self.processes.values():
            if proc.node is not None:
                proc.node.stop()
        self.processes.clear()
        self._heap.clear()
        self.observers.clear()
        self.event_hooks.clear()
        self.holds.clear()
        self._brokers = self._controller = None
        self.checker = None

    # ------------------------------------------------------------ scheduling

    def _push(self, at_ns: int, kind: int, a: Any, b: Any = None, c: Any = None, d: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (at_ns, self._seq, kind, a, b, c, d))

    def call_at(self, at_ns: int, fn: Callable[[], None]) -> None:
        """Run a harness callback at a virtual time."""
        self._push(max(at_ns, self.now_ns), _CALL, fn)

    def act(self, node_id: int, fn: Callable[[Node, int], None]) -> bool:
        """Call ``fn(node, now_ms)`` on a running node now, as if it were an input, and route
        what it outputs (a harness driving a client, such as a Hypothesis state machine).
        False when the node is dead or paused."""
        proc = self.processes[node_id]
        if proc.node is None or proc.paused:
            return False
        fn(proc.node, self.now_ns // 1_000_000 + proc.skew_ms)
        self._route(proc, proc.node.drain())
        return True

    def inject(self, src: int, dst: int, message: Any) -> None:
        """Send a message as if from ``src`` (a harness-only node such as an admin tool)."""
        for at in self.network.deliveries(src, dst, self.now_ns):
            self._push(at, _DELIVER, dst, src, message, self.now_ns)

    def hold_back(self, matches: Callable[[int, int, Any], bool], delay_ms: int) -> None:
        """Deliver the next message sent for which ``matches(src, dst, message)`` is true
        ``delay_ms`` later than the network would (a request stuck in a queue, overtaken by
        retries and later requests on a new connection: an aimed straggler; what its sender
        sends after it on the same connection waits behind it, as over TCP); ``delay_ms`` -1:
        the message is lost and its connection reset instead. Used once; the network's own
        draws are the same as without it."""
        self.holds.append((matches, -1 if delay_ms < 0 else delay_ms * 1_000_000))

    def run_until(self, end_ns: int, stop: Callable[[], bool] | None = None) -> None:
        heap = self._heap
        pop = heapq.heappop
        while heap and not self.stopped:
            if heap[0][0] > end_ns:
                break
            at, _seq, kind, a, b, c, d = pop(heap)
            self.now_ns = at
            self.steps += 1
            # (called with their arguments spelled out: compiled, a direct call)
            if kind == _DELIVER:
                self._deliver(a, b, c, d)
            elif kind == _TIMER:
                self._fire(a, b, c)
            else:
                a()
            if stop is not None and stop():
                return
        if not self.stopped:
            self.now_ns = max(self.now_ns, end_ns)

    # ------------------------------------------------------------ dispatch
    # (the hot path of every run: a step is a few dict lookups and calls, nothing more)

    def _deliver(self, dst: int, src: int, message: Any, sent_ns: int) -> None:
        proc = self.processes.get(dst)
        if proc is None or proc.node is None:
            self._closed(src, dst)
            return  # nobody listens: the connection is refused
        if proc.started_ns > sent_ns:
            return  # sent to an earlier incarnation: its connection died with it
        if proc.paused:
            proc.backlog.append((_DELIVER, (dst, src, message, sent_ns)))
            return
        self.delivered += 1
        node = proc.node
        node.receive(self.now_ns // 1_000_000 + proc.skew_ms, src, message)
        self._after(proc, node)

    def _fire(self, node_id: int, incarnation: int, key: Any) -> None:
        proc = self.processes[node_id]
        node = proc.node
        if node is None or proc.incarnation != incarnation:
            return
        if proc.paused:
            proc.backlog.append((_TIMER, (node_id, incarnation, key)))
            return
        now_ms = self.now_ns // 1_000_000 + proc.skew_ms
        if self.skip_moot_timers:
            moot = node.timer_is_moot(now_ms, key)
            if moot:
                # not called: the node is taken at its word (it would output nothing, or only
                # this timer set again: a periodic one with nothing to do), and the step is
                # checked as any other (a harness's act may have left the checks work)
                self.moot_timers += 1
                self._after(proc, node, () if moot is True else (Timer(moot, key),))
                return
        node.timer(now_ms, key)
        self._after(proc, node)

    def _invoke(self, proc: SimProcess, method: str, args: tuple) -> None:
        node = proc.node
        assert node is not None
        getattr(node, method)(self.now_ns // 1_000_000 + proc.skew_ms, *args)
        self._after(proc, node)

    def _after(self, proc: SimProcess, node: Node, outputs: Sequence[Output] | None = None) -> None:
        """Route what a node output in a step (``outputs``: what it is known to have output
        without being called), then check the invariants it may have broken."""
        self._route(proc, node.drain() if outputs is None else outputs)
        checker = self.checker
        if checker is not None and (proc.server or checker.pending_acks):
            self._check(node)

    def _route(self, proc: SimProcess, outputs: Sequence[Output]) -> None:
        now = self.now_ns
        node_id = proc.node_id
        heap = self._heap
        push = heapq.heappush
        network = self.network
        for out in outputs:
            if isinstance(out, Send):
                dst = out.dst
                if self._unaware and (node_id, dst) in self._unaware:
                    continue  # on a connection that closed before its sender heard
                extra = self._held(node_id, dst, out.message) if self.holds else 0
                if extra < 0:  # lost with its connection (an aimed reset)
                    self._closed(node_id, dst)
                    continue
                ats = network.deliveries(node_id, dst, now, extra)
                for at in ats:
                    self._seq += 1
                    push(heap, (at, self._seq, _DELIVER, dst, node_id, out.message, now))
                if not ats:
                    self._closed(node_id, dst)
            elif isinstance(out, Timer):
                self._seq += 1
                push(heap, (now + int(out.delay_ms * 1_000_000), self._seq, _TIMER,
                            node_id, proc.incarnation, out.key, None))
            elif isinstance(out, Event):
                if self.checker is not None:  # (markers written, for the invariants)
                    self.checker.saw_event(node_id, out.kind, out.fields)
                for observe in self.observers:
                    observe(node_id, out.kind, out.fields)
                hook = self.event_hooks.get(out.kind)
                if hook is not None:
                    hook(node_id, out.fields)
                else:
                    self.recorder.event(now, node_id, out.kind, out.fields)
            elif isinstance(out, Close):
                self._closed(out.peer, node_id, closer=node_id)

    def _closed(self, a: int, b: int, closer: int | None = None) -> None:
        """The connection between ``a`` and ``b`` closed: it lost a message, a peer crashed or
        refused it, or ``closer`` closed it. Each other end that models its connections (a
        node with ``connection_lost(now_ms, peer)``: the clients) hears of it
        :data:`RECONNECT_BACKOFF_MS` later, as a reset or the timeout of a TCP connection
        would tell it, and may connect again; until then what it sends there is lost with the
        connection. Every other node relies on its timeouts."""
        self.network.close(a, b)
        for node_id, peer in ((a, b), (b, a)):
            if node_id != closer:
                self._tell_closed(node_id, peer)

    def _tell_closed(self, node_id: int, peer: int) -> None:
        proc = self.processes.get(node_id)
        if (proc is None or proc.node is None or not hasattr(proc.node, "connection_lost")
                or (node_id, peer) in self._unaware):
            return
        self._unaware.add((node_id, peer))
        # partials of methods, not nested functions: compiled, those would keep the simulation
        # in a reference cycle with their variables after the run
        tell = partial(self._tell, proc, proc.incarnation, node_id, peer)
        self._push(self.now_ns + RECONNECT_BACKOFF_MS * 1_000_000, _CALL, tell)

    def _tell(self, proc: SimProcess, incarnation: int, node_id: int, peer: int) -> None:
        """The news of a closed connection reaches ``node_id`` (a backoff after the close)."""
        self._unaware.discard((node_id, peer))
        hear = partial(self._hear, proc, incarnation, peer)
        if proc.paused and proc.node is not None and proc.incarnation == incarnation:
            proc.backlog.append((_CALL, (hear,)))  # it hears of it when it runs again
        else:
            hear()

    def _hear(self, proc: SimProcess, incarnation: int, peer: int) -> None:
        if proc.node is not None and proc.incarnation == incarnation:
            self._invoke(proc, "connection_lost", (peer,))

    def _held(self, src: int, dst: int, message: Any) -> int:
        for i, (matches, extra) in enumerate(self.holds):
            if matches(src, dst, message):
                del self.holds[i]
                return extra
        return 0

    # ------------------------------------------------------------ invariants

    def brokers(self) -> dict[int, Broker]:
        """The running brokers (cached; processes change only by start and kill)."""
        if self._brokers is None:
            self._brokers = {i: p.node for i, p in self.processes.items()
                             if isinstance(p.node, Broker)}
        return self._brokers

    def controller(self) -> Controller | None:
        if self._controller is None:
            self._controller = [next((p.node for p in self.processes.values()
                                      if isinstance(p.node, Controller)), None)]
        return self._controller[0]

    def _check(self, node: Node) -> None:
        checker = self.checker
        assert checker is not None
        broker = node if isinstance(node, Broker) else None
        controller = self.controller()
        if checker.nothing_to_check(broker, controller):
            return
        self._violate(checker.after_step(broker, controller, self.brokers()))

    def _violate(self, found: list[Violation]) -> None:
        for v in found:
            self.violation_counts[v.invariant] = self.violation_counts.get(v.invariant, 0) + 1
            if self.violation_counts[v.invariant] > VIOLATIONS_RECORDED_MAX:
                continue  # with keep_going one broken rule can fire on every step
            self.violations.append((self.now_ns, v))
            self.recorder.event(self.now_ns, v.node, "invariant-violation", v.to_dict())
            if not self.keep_going:
                self.stopped = True

    def check_all_acked(self) -> None:
        controller = self.controller()
        if self.checker is not None and controller is not None:
            self._violate(self.checker.check_all_acked(controller, self.brokers()))

    # ------------------------------------------------------------ process faults

    def kill(self, node_id: int, torn: bool = False, corrupt: bool = False) -> dict:
        proc = self.processes[node_id]
        if proc.node is None:
            return {"already": "dead"}
        proc.node.stop()
        proc.node = None
        self._brokers = None
        self._controller = None
        proc.paused = False
        proc.backlog.clear()
        proc.disk.full = False
        proc.disk.slow_flush = False
        lost = proc.disk.crash(self.rng, torn=torn, corrupt=corrupt)
        self.recorder.event(self.now_ns, node_id, "crash", lost)
        for other in sorted(self.processes):  # its connections close with it
            if other != node_id:
                self._closed(other, node_id)
        return lost

    def pause(self, node_id: int) -> None:
        proc = self.processes[node_id]
        if proc.alive:
            proc.paused = True

    def resume(self, node_id: int) -> None:
        proc = self.processes[node_id]
        if not proc.alive or not proc.paused:
            return
        proc.paused = False
        backlog, proc.backlog = proc.backlog, []
        for kind, args in backlog:
            if not proc.alive or proc.paused:
                break
            if kind == _DELIVER:
                self._deliver(*args)
            elif kind == _TIMER:
                self._fire(*args)
            else:
                args[0]()
