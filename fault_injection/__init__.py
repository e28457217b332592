"""The deterministic simulator (virtual time, seeded RNG, network, disk, processes) and
fault schedules. Real-world injectors for external brokers come with a later issue."""

from fault_injection.disk import SimDisk
from fault_injection.nemesis import FAULTS, Nemesis, load_schedule, random_schedule
from fault_injection.network import Network
from fault_injection.simulation import Simulation

__all__ = ["FAULTS", "Nemesis", "Network", "SimDisk", "Simulation", "load_schedule",
           "random_schedule"]
