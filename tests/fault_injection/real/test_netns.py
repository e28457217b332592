"""Nodes in network namespaces of their own, and the faults between them
(fault_injection/real/netns.py): who reaches whom under each fault, that clients on the host always
get through, and that nothing a run makes outlives it, not even after its kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fault_injection.real.netns import STATE_DIR, NodeNetwork, remove_leftovers, unavailable

REASON = unavailable()
if REASON and os.environ.get("KAFKACHECK_REQUIRE_NETNS"):  # CI: a machine that cannot must not pass by skipping
    raise RuntimeError(f"{REASON} (KAFKACHECK_REQUIRE_NETNS is set)")
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

SERVER = ("import socket\ns = socket.socket()\ns.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
          "s.bind(('0.0.0.0', 7000))\ns.listen()\nwhile True:\n    c, _ = s.accept()\n    c.sendall(b'hi')\n"
          "    c.close()\n")


def reaches(prefix: list[str], address: str) -> bool:
    code = f"import socket; s = socket.create_connection(('{address}', 7000), timeout=1); assert s.recv(2) == b'hi'"
    return subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True).returncode == 0


def ours(tag: int) -> tuple[list[str], list[str]]:
    namespaces = [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
                  if n.startswith(f"kc{tag}-")]
    links = [line for line in subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.splitlines()
             if f" kc{tag}" in line]
    return namespaces, links


def test_faults_act_between_nodes_and_never_on_clients():
    with NodeNetwork(["a", "b", "c"]) as net:
        servers = [subprocess.Popen([*net.exec_prefix(n), sys.executable, "-c", SERVER]) for n in "abc"]
        a, b, c = (net.address(n) for n in "abc")
        end = time.monotonic() + 10
        while not all(reaches([], x) for x in (a, b, c)) and time.monotonic() < end:
            time.sleep(0.1)
        assert reaches([], a) and reaches(net.exec_prefix("b"), a)
        net.isolate("a")
        assert reaches([], a)  # the zombie: clients still reach it
        assert not reaches(net.exec_prefix("b"), a) and not reaches(net.exec_prefix("a"), b)
        assert reaches(net.exec_prefix("b"), c)
        net.heal()
        net.isolate("a", ports=[7000])  # only the links to or from port 7000
        assert not reaches(net.exec_prefix("b"), a) and reaches([], a)
        net.heal()
        net.split(["a"])
        assert not reaches(net.exec_prefix("c"), a) and reaches(net.exec_prefix("c"), b) and reaches([], a)
        net.heal()
        net.one_way("a")  # a's packets to the others are dropped: no TCP either way
        assert not reaches(net.exec_prefix("a"), b) and reaches([], a) and reaches(net.exec_prefix("b"), c)
        net.heal()
        net.lossy(loss_pct=10, dup_pct=5)
        net.slow()
        assert len(net.faults) == 2
        net.heal()
        assert reaches(net.exec_prefix("b"), a) and not net.faults
        tag = net.tag
        assert ours(tag) != ([], [])
    assert ours(tag) == ([], [])
    assert not (STATE_DIR / f"netns-{tag}.json").exists()
    for s in servers:  # the processes inside were stopped with their namespaces
        assert s.wait(5) == -signal.SIGKILL


def test_the_next_run_removes_what_a_killed_run_left_behind(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(
        "import subprocess, sys, time\n"
        "from fault_injection.real.netns import NodeNetwork\n"
        "net = NodeNetwork(['x', 'y'])\n"
        "net.create()\n"
        "p = subprocess.Popen(net.exec_prefix('x') + ['sleep', '600'])\n"
        "print(net.tag, p.pid, flush=True)\n"
        "time.sleep(600)\n")
    run = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                           cwd=Path(__file__).resolve().parents[2])
    tag, inside = (int(x) for x in run.stdout.readline().split())
    os.kill(run.pid, signal.SIGKILL)  # the run dies without cleaning up
    run.wait()
    assert ours(tag) != ([], []) and Path(f"/proc/{inside}").exists()
    state = json.loads((STATE_DIR / f"netns-{tag}.json").read_text())
    assert state["pid"] == run.pid
    with NodeNetwork(["z"]):  # the next run
        pass
    assert f"netns-{tag}.json" not in os.listdir(STATE_DIR)
    assert ours(tag) == ([], [])
    end = time.monotonic() + 5
    while Path(f"/proc/{inside}").exists() and Path(f"/proc/{inside}/stat").read_text().split()[2] != "Z" \
            and time.monotonic() < end:
        time.sleep(0.1)
    assert not Path(f"/proc/{inside}").exists() or Path(f"/proc/{inside}/stat").read_text().split()[2] == "Z"
    assert remove_leftovers() == []  # nothing else was touched: a live run's files stay
