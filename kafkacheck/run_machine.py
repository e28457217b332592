"""A workload of ``kafkacheck run`` as a Hypothesis machine, for the workloads without a machine
of their own (eos, share-committed).

Its clients are the workload's (:meth:`kafkacheck.workloads.base.Workload.client`): they run
:data:`RunMachine.ops` ops by themselves, drawing what to do from the run's RNG, while the
machine's rules (:class:`kafkacheck.workloads.machine.ClusterMachine`'s) bring faults to the
servers and let time pass: Hypothesis searches and shrinks the fault programs, not the
clients' choices. At the end every fault heals, the clients finish their ops, and the run's own
final read and configuration (:mod:`kafkacheck.runner`) judge the history, as ``kafkacheck
run`` would.
"""

from __future__ import annotations

from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import initialize

from fault_injection.nemesis import Nemesis
from kafkacheck.runner import RunOptions, _Run
from kafkacheck.workloads.machine import SERVERS, ClusterMachine


class RunMachine(ClusterMachine):
    """The workload's own clients, OPS ops, under the rules' faults."""

    workload: ClassVar[str] = ""
    ops: ClassVar[int] = 40

    @initialize(seed=st.integers(0, 2**16))
    def boot(self, seed: int) -> None:
        self.steps.append(("boot", {"seed": seed}))
        run = self.run = _Run(RunOptions(seed=seed, ops=self.ops, workload=self.workload, faults=[], clients=4,
                                         bugs=list(self.bugs)))
        run.start_cluster()
        run.create_topics()
        run.start_clients()
        self.sim = run.sim
        self.keys = run.keys
        self.nemesis = run.nemesis = Nemesis(run.sim, SERVERS)
        run.schedule_end_ms = 0
        self.meta: dict[str, Any] | None = None

    def make_actors(self) -> None:
        """(The workload's clients are the run's: started at boot.)"""

    def _finish(self) -> None:
        """Heal, let the clients finish their ops, then the run's after-heal and final read."""
        run, sim = self.run, self.sim
        assert sim is not None
        if sim.stopped:
            return
        self.nemesis.heal_all()
        for c in run.clients:
            sim.resume(c.node_id)
        stalled = run.run_ops(None)
        heal_ns = run.heal()
        run.after_heal()
        self.final_read = run.final_read(heal_ns)
        self.meta = run.meta(self.final_read, stalled, None)

    def config(self) -> dict:
        return self.meta["config"] if self.meta is not None else super().config()


def run_machine(workload: str, description: str) -> type[RunMachine]:
    """The machine of ``workload``: its clients under the rules' faults."""
    doc = f"The {workload} workload's own clients ({RunMachine.ops} ops) under the rules' faults: {description}."
    return type(f"RunMachine_{workload.replace('-', '_')}", (RunMachine,),
                {"workload": workload, "__doc__": doc, "__module__": __name__})
