"""A fault the nemesis cannot carry out against a real broker is recorded in the history and
the run's nemesis goes on; it never dies silently in its thread."""

from __future__ import annotations

import random
import threading

from kafkacheck.conform.real_nemesis import nemesis_loop
from kafkacheck.real.wall_history import History


class _Unkillable:
    alive = True

    def kill(self) -> None:
        raise OSError("no such process")

    def start(self) -> None:
        pass


class _Target:
    processes = {"broker-1": _Unkillable()}
    proxies: dict = {}
    netns = None


def test_a_fault_that_raises_is_recorded_and_the_nemesis_goes_on():
    h, log, stop = History(), [], threading.Event()
    thread = threading.Thread(target=nemesis_loop, args=(_Target(), ["sigkill"], h, random.Random(1), stop, log))
    thread.start()
    timer = threading.Timer(8.5, stop.set)
    timer.start()
    thread.join(20)
    assert not thread.is_alive()
    ops = [o for o in h.recorder.ops if o["process"] == "nemesis"]
    assert len(ops) >= 4 and [o["type"] for o in ops] == ["invoke", "info"] * (len(ops) // 2)
    assert all(o["value"] == {"error": "OSError: no such process"} for o in ops if o["type"] == "info")
    assert len(log) >= 2 and all(e["error"] == "OSError: no such process" for e in log)
