"""One registry of workloads (kafkacheck/workloads/__init__.py): run, hunt, explore and
conform take their workloads from it, so a workload added in one module shows up in all four."""

from __future__ import annotations

import pytest

from kafkacheck.commands import conform, run
from kafkacheck.explore import MACHINES
from kafkacheck.hunt import NO_BUG_SCENARIOS
from kafkacheck.run_machine import RunMachine
from kafkacheck.workloads import WORKLOADS
from kafkacheck.workloads.base import Workload


def _choices(parse_module, option: str) -> list[str]:
    import argparse

    parser = argparse.ArgumentParser()
    parse_module.add_parser(parser.add_subparsers())
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    [command] = sub.choices.values()
    return next(a.choices for a in command._actions if option in a.option_strings)


def test_every_driver_takes_its_workloads_from_the_registry():
    assert list(_choices(run, "--workload")) == list(WORKLOADS)
    assert list(_choices(conform, "--workload")) == [*WORKLOADS, "none"]
    assert [s.workload for s in NO_BUG_SCENARIOS] == list(WORKLOADS)
    variants = {name: m for w in WORKLOADS.values() for name, m in w.variants.items()}
    assert set(MACHINES) <= set(WORKLOADS) | set(variants) and "at-most-once" in MACHINES
    # a workload without a machine of its own has its clients under the machine's faults (run_machine)
    assert all(MACHINES[name] is (WORKLOADS[name].machine if name in WORKLOADS else variants[name])
               or (WORKLOADS[name].machine is None and issubclass(MACHINES[name], RunMachine)) for name in MACHINES)


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_a_workload_says_what_it_is_for_every_driver(name):
    w = WORKLOADS[name]
    assert issubclass(w, Workload) and w.name == name
    assert w.description and w.guarantee and w.hunt_ops > 0
    from fault_injection.real.straggle import STRAGGLE_APIS

    assert w.straggle_apis and set(w.straggle_apis) <= set(STRAGGLE_APIS)
