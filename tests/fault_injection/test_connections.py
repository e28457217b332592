"""The simulated network keeps TCP's promise on each connection: what one end sends reaches
the other in the order sent, up to the first loss and nothing after it, under every fault but
``reorder`` and ``duplicate``; so the idempotence check applies under those faults, and the
correct engine passes it."""

from __future__ import annotations

from collections import defaultdict

import pytest

import kafkacheck.runner as runner
from fault_injection.network import Network
from fault_injection.simulation import Simulation
from properties.checker import check
from reference.messages import ProduceRequest
from reference.node import Send


class TappedSimulation(Simulation):
    """Records every produce request a client put on a connection and every one a broker
    received, with the connection it travelled on (a pair's count of closes when it was sent)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.closes: dict[tuple[int, int], int] = defaultdict(int)
        self.sent: dict[int, tuple] = {}  # id(message) -> (connection, index on it)
        self.sent_on: dict[tuple, list[int]] = defaultdict(list)
        self.received: dict[tuple, list[int]] = defaultdict(list)
        self._keep: list = []  # the messages, alive so that their ids stay theirs
        close = self.network.close

        def counted_close(a: int, b: int) -> None:
            self.closes[(min(a, b), max(a, b))] += 1
            close(a, b)

        self.network.close = counted_close

    def _route(self, proc, outputs) -> None:
        for out in outputs:
            if type(out) is Send and type(out.message) is ProduceRequest \
                    and (proc.node_id, out.dst) not in self._unaware:  # (those never leave)
                pair = (min(proc.node_id, out.dst), max(proc.node_id, out.dst))
                conn = (proc.node_id, out.dst, self.closes[pair])
                self.sent[id(out.message)] = (conn, len(self.sent_on[conn]))
                self.sent_on[conn].append(len(self.sent_on[conn]))
                self._keep.append(out.message)
        super()._route(proc, outputs)

    def _deliver(self, dst, src, message, sent_ns) -> None:
        proc = self.processes.get(dst)
        if (type(message) is ProduceRequest and proc is not None and proc.node is not None
                and not proc.paused and proc.started_ns <= sent_ns):
            conn, index = self.sent[id(message)]
            self.received[conn].append(index)
        super()._deliver(dst, src, message, sent_ns)


def broken_connections(sim: TappedSimulation) -> list[tuple]:
    """The connections on which a broker received produce requests out of order, twice, or
    after one that was lost."""
    broken = []
    for conn, got in sim.received.items():
        if got != sorted(set(got)) or got != list(range(len(got))):
            broken.append((conn, got[:20]))
    return broken


def tapped_run(monkeypatch, faults: list[str], seed: int, aimed: list[str] | None = None):
    monkeypatch.setattr(runner, "Simulation", TappedSimulation)
    sims: list[TappedSimulation] = []
    real_init = TappedSimulation.__init__

    def remember(self, *a, **k):
        real_init(self, *a, **k)
        sims.append(self)

    monkeypatch.setattr(TappedSimulation, "__init__", remember)
    options = runner.RunOptions(seed=seed, ops=400, workload="idempotent", faults=faults, aimed=aimed or [],
                                fault_stable_ms=(300, 800), fault_ms=(1_500, 4_000),
                                producer_settings={"max_in_flight": 5})
    outcome = runner.simulate(options, None)
    return sims[0], outcome


TCP_FAULTS = [["partition"], ["loss"], ["straggle"], ["delay"], ["kill"], ["pause"]]


@pytest.mark.parametrize("faults", TCP_FAULTS, ids=lambda f: f[0])
def test_a_connection_delivers_a_prefix_of_what_was_sent_in_order(monkeypatch, faults):
    sim, outcome = tapped_run(monkeypatch, faults, seed=3)
    assert sum(len(v) for v in sim.received.values()) > 300  # the run produced
    assert not broken_connections(sim)
    result = check(outcome.ops, outcome.run_meta["config"])
    # the idempotence check ran (network faults no longer void it) and found nothing
    assert "idempotence-error" not in result["anomaly_types"], result["anomaly_types"]
    assert result["valid"] is True, result["anomaly_types"]


def test_faults_close_connections_and_the_producer_retries_on_new_ones(monkeypatch):
    sim, outcome = tapped_run(monkeypatch, ["loss"], seed=3)
    reopened = [c for c in sim.received if c[2] > 0]
    assert sim.network.closes > 0 and reopened  # resets, then produce on new connections
    assert outcome.stats["ops_completed"] >= 300


def test_a_held_back_request_holds_its_connection_until_its_client_gives_up(monkeypatch):
    sim, outcome = tapped_run(monkeypatch, ["partition"], seed=5, aimed=["request-held-back"])
    assert not broken_connections(sim)
    assert "idempotence-error" not in check(outcome.ops, outcome.run_meta["config"])["anomaly_types"]


def test_reorder_breaks_the_promise_and_the_check_sees_it(monkeypatch):
    """The check above can fail: under ``reorder`` a connection delivers out of order."""
    sim, _outcome = tapped_run(monkeypatch, ["reorder"], seed=3)
    assert broken_connections(sim)


def test_a_closed_connection_starts_again_and_a_one_way_cut_stops_a_pair_once_broken():
    net = Network(__import__("random").Random(1))
    net.faults.straggle, net.faults.straggle_ms = 1.0, 4_000
    stalled = net.deliveries(1, 2, 0)[0]
    net.faults.straggle = 0.0
    assert net.deliveries(1, 2, 0)[0] > stalled  # later messages wait behind a stalled one
    net.close(1, 2)
    assert net.deliveries(1, 2, 0)[0] < stalled  # a new connection does not
    net.partition({2: [1]})  # 2 cannot hear 1
    assert net.deliveries(2, 1, 0) != []  # the open connection still carries 2 -> 1
    assert net.deliveries(1, 2, 0) == []  # lost: the simulator closes the connection
    net.close(1, 2)
    assert net.deliveries(2, 1, 0) == []  # and none is set up through a one-way cut
    net.heal()
    assert net.deliveries(2, 1, 0) != [] and net.deliveries(1, 2, 0) != []
