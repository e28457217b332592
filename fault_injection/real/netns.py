"""Every node of a real cluster in a network namespace of its own, and faults between them.

A :class:`NodeNetwork` makes, for one run, a Linux bridge on the host and one network
namespace per node, joined to the bridge by a veth pair; each node gets an address of the
run's own /24 (``10.213.T.0/24``, T chosen free), the host keeps ``10.213.T.1`` on the bridge,
so clients on the host reach every node. Nothing listens on the host side: servers bind
inside their namespaces.

Faults are nftables rules (table ``ip kafkacheck``) and ``tc`` queueing inside the node
namespaces, so they act between nodes only; the host's clients always get through:

- :meth:`isolate` -- a node cut off from every other node, both ways (the zombie leader);
- :meth:`split` -- the nodes cut into two sides that cannot reach each other;
- :meth:`one_way` -- a node's packets to the other nodes dropped, the reverse delivered;
- :meth:`lossy` -- packets between nodes dropped and duplicated at random (netem, where the
  kernel has it, also reorders);
- :meth:`slow` -- links between nodes slowed: netem delay with jitter where the kernel has
  ``sch_netem``; otherwise an HTB class at a low rate plus random loss, whose TCP
  retransmissions stretch a round trip by hundreds of milliseconds to seconds;
- :meth:`heal` -- all of it undone.

Ownership and cleanup: the run writes ``/run/kafkacheck/netns-T.json`` (its pid and that
process's start time, its namespaces and links) before it creates anything. :meth:`close`
removes everything, the processes inside the namespaces included; a run that died
(``kill -9``) is cleaned up by the next one, which removes the leftovers of every state file
whose process is gone: its namespaces, links and the processes in them, and nothing else.

Needs root (CAP_NET_ADMIN) and iproute2; nftables for the faults. :func:`unavailable` says
why not, in one line, or None.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

STATE_DIR = Path("/run/kafkacheck")
SUBNET = "10.213"  # 10.213.T.0/24 for the run with tag T
TABLE = "kafkacheck"


class NetnsError(RuntimeError):
    pass


def _run(*argv: str, check: bool = True, input_: str | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run(list(argv), capture_output=True, text=True, input=input_)
    if check and p.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: {(p.stderr or p.stdout).strip()}")
    return p


def unavailable() -> str | None:
    """Why node faults cannot run here (one line), or None."""
    if os.geteuid() != 0:
        return "node faults need network namespaces, which need root (run as root, or leave them out)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables"), ("tc", "iproute2")):
        if shutil.which(tool) is None:
            return f"node faults need {tool} ({package}): apt-get install {package}"
    probe = f"kcprobe{os.getpid() % 100000}"
    p = _run("ip", "netns", "add", probe, check=False)
    if p.returncode != 0:
        return f"cannot create a network namespace: {p.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    return None


def _start_time(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _netem_available(ns: str, dev: str) -> bool:
    p = _run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "handle", "9:", "netem",
             "delay", "1ms", check=False)
    if p.returncode == 0:
        _run("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root", check=False)
        return True
    return False


@dataclass
class Node:
    name: str
    namespace: str
    address: str
    host_link: str  # the veth end on the bridge
    link: str = "eth0"  # its end inside the namespace


@dataclass
class NodeNetwork:
    names: list[str]
    tag: int = -1
    nodes: dict[str, Node] = field(default_factory=dict)
    bridge: str = ""
    host_address: str = ""
    netem: bool | None = None
    faults: list[str] = field(default_factory=list)  # what is in force, for the history
    _state: Path | None = None

    # ------------------------------------------------------------ lifecycle

    def __enter__(self) -> NodeNetwork:
        self.create()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create(self) -> None:
        problem = unavailable()
        if problem:
            raise NetnsError(problem)
        remove_leftovers()
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        used = {int(p.stem.split("-")[1]) for p in STATE_DIR.glob("netns-*.json") if p.stem.split("-")[1].isdigit()}
        in_use = _run("ip", "-4", "addr").stdout
        free = [t for t in range(2, 250) if t not in used and f"{SUBNET}.{t}." not in in_use]
        if not free:
            raise NetnsError(f"no free {SUBNET}.T.0/24 subnet for a run's nodes")
        self.tag = random.Random(os.getpid() ^ time.time_ns()).choice(free)
        t = self.tag
        self.bridge = f"kc{t}br"
        self.host_address = f"{SUBNET}.{t}.1"
        for i, name in enumerate(self.names):
            self.nodes[name] = Node(name, f"kc{t}-{name}", f"{SUBNET}.{t}.{10 + i}", f"kc{t}v{i}")
        # the state file first: whatever is created after it can be found and removed
        self._state = STATE_DIR / f"netns-{t}.json"
        self._state.write_text(json.dumps({
            "pid": os.getpid(), "start_time": _start_time(os.getpid()), "bridge": self.bridge,
            "namespaces": [n.namespace for n in self.nodes.values()],
            "links": [n.host_link for n in self.nodes.values()]}))
        try:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{self.host_address}/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
            for n in self.nodes.values():
                _run("ip", "netns", "add", n.namespace)
                _run("ip", "link", "add", n.host_link, "type", "veth", "peer", "name", f"kc{t}p")
                _run("ip", "link", "set", f"kc{t}p", "netns", n.namespace)
                ns = ("ip", "netns", "exec", n.namespace)
                _run(*ns, "ip", "link", "set", f"kc{t}p", "name", n.link)
                _run(*ns, "ip", "addr", "add", f"{n.address}/24", "dev", n.link)
                _run(*ns, "ip", "link", "set", n.link, "up")
                _run(*ns, "ip", "link", "set", "lo", "up")
                _run("ip", "link", "set", n.host_link, "master", self.bridge)
                _run("ip", "link", "set", n.host_link, "up")
                _run(*ns, "nft", "-f", "-", input_=f"table ip {TABLE} {{\n"
                     "  chain input { type filter hook input priority 0; policy accept; }\n"
                     "  chain output { type filter hook output priority 0; policy accept; }\n}\n")
        except BaseException:
            self.close()
            raise
        self.wait_reachable()

    def wait_reachable(self, timeout_s: float = 10.0) -> None:
        """The bridge forwards once its ports are up: wait until every node answers (a refused
        connection to a port nobody listens on is an answer)."""
        import socket

        end = time.monotonic() + timeout_s
        for n in self.nodes.values():
            while True:
                try:
                    socket.create_connection((n.address, 9), timeout=0.5).close()
                    break
                except ConnectionRefusedError:
                    break
                except OSError:
                    if time.monotonic() > end:
                        raise NetnsError(f"node {n.name} ({n.address}) unreachable from the host") from None
                    time.sleep(0.1)

    def close(self) -> None:
        """Remove the run's namespaces, links and bridge, and stop what runs inside them."""
        _remove(self.bridge, [n.namespace for n in self.nodes.values()], [n.host_link for n in self.nodes.values()])
        if self._state is not None:
            self._state.unlink(missing_ok=True)
            self._state = None
        self.nodes.clear()

    # ------------------------------------------------------------ processes

    def exec_prefix(self, name: str) -> list[str]:
        """argv prefix that runs a command in node ``name``'s namespace (the same pid: ``ip
        netns exec`` execs the command)."""
        return ["ip", "netns", "exec", self.nodes[name].namespace]

    def address(self, name: str) -> str:
        return self.nodes[name].address

    # ------------------------------------------------------------ faults

    def _nft(self, name: str, rules: str) -> None:
        _run(*self.exec_prefix(name), "nft", "-f", "-", input_=rules)

    def _others(self, name: str, among: list[str] | None = None) -> str:
        peers = [n.address for k, n in self.nodes.items() if k != name and (among is None or k in among)]
        return "{ " + ", ".join(peers) + " }"

    def isolate(self, name: str, among: list[str] | None = None, ports: list[int] | None = None) -> None:
        """``name`` cannot reach any other node, nor they it; clients reach everyone. With
        ``among``, only those nodes; with ``ports``, only TCP connections to or from those
        ports (a node cut off from the replication links of the others while it still
        reaches the controllers)."""
        peers = self._others(name, among)
        match = ""
        if ports:
            match = "tcp dport { " + ", ".join(map(str, ports)) + " } "
            alt = "tcp sport { " + ", ".join(map(str, ports)) + " } "
        rules = ""
        for m in ([match, alt] if ports else [""]):
            rules += (f"add rule ip {TABLE} output ip daddr {peers} {m}drop\n"
                      f"add rule ip {TABLE} input ip saddr {peers} {m}drop\n")
        self._nft(name, rules)
        self.faults.append(f"isolate {name}" + (f" from {among}" if among else "") + (f" on ports {ports}" if ports
                                                                                    else ""))

    def split(self, side: list[str]) -> None:
        """The nodes of ``side`` and the others cannot reach each other."""
        rest = [k for k in self.nodes if k not in side]
        for name in side:
            peers = self._others(name, rest)
            self._nft(name, f"add rule ip {TABLE} output ip daddr {peers} drop\n"
                            f"add rule ip {TABLE} input ip saddr {peers} drop\n")
        self.faults.append(f"split {sorted(side)} | {sorted(rest)}")

    def one_way(self, name: str) -> None:
        """``name``'s packets to the other nodes are dropped; theirs to it are delivered."""
        self._nft(name, f"add rule ip {TABLE} output ip daddr {self._others(name)} drop\n")
        self.faults.append(f"one-way {name}")

    def lossy(self, loss_pct: int = 10, dup_pct: int = 5) -> None:
        """Packets between nodes dropped (``loss_pct`` %) and duplicated (``dup_pct`` %)."""
        for name in self.nodes:
            rules = ""
            for peer in (n.address for k, n in self.nodes.items() if k != name):
                rules += (f"add rule ip {TABLE} output ip daddr {peer} numgen random mod 100 < {dup_pct} "
                          f"dup to {peer}\n")
            rules += (f"add rule ip {TABLE} output ip daddr {self._others(name)} numgen random mod 100 "
                      f"< {loss_pct} drop\n")
            self._nft(name, rules)
            if self._has_netem():
                self._netem(name, "delay", "5ms", "2ms", "reorder", "75%", "50%")
        self.faults.append(f"lossy {loss_pct}% loss {dup_pct}% duplicates")

    def slow(self, delay_ms: int = 800, jitter_ms: int = 600) -> None:
        """Links between nodes slowed (see the module's docstring)."""
        for name in self.nodes:
            if self._has_netem():
                self._netem(name, "delay", f"{delay_ms}ms", f"{jitter_ms}ms")
            else:
                n = self.nodes[name]
                ns = self.exec_prefix(name)
                _run(*ns, "tc", "qdisc", "add", "dev", n.link, "root", "handle", "1:", "htb", "default", "1",
                     "r2q", "1")
                _run(*ns, "tc", "class", "add", "dev", n.link, "parent", "1:", "classid", "1:1", "htb",
                     "rate", "1gbit", "quantum", "60000")
                _run(*ns, "tc", "class", "add", "dev", n.link, "parent", "1:", "classid", "1:2", "htb",
                     "rate", "256kbit", "ceil", "256kbit", "quantum", "1514")
                for peer in (p.address for k, p in self.nodes.items() if k != name):
                    _run(*ns, "tc", "filter", "add", "dev", n.link, "parent", "1:", "protocol", "ip", "u32",
                         "match", "ip", "dst", f"{peer}/32", "flowid", "1:2")
                self._nft(name, f"add rule ip {TABLE} output ip daddr {self._others(name)} "
                                f"numgen random mod 100 < 3 drop\n")
        self.faults.append(f"slow {delay_ms}±{jitter_ms} ms" if self._has_netem()
                           else "slow: 256 kbit/s and 3% loss between nodes (no sch_netem in this kernel)")

    def _has_netem(self) -> bool:
        if self.netem is None:
            first = next(iter(self.nodes.values()))
            self.netem = _netem_available(first.namespace, first.link)
        return self.netem

    def _netem(self, name: str, *args: str) -> None:
        n = self.nodes[name]
        _run(*self.exec_prefix(name), "tc", "qdisc", "replace", "dev", n.link, "root", "netem", *args)

    def heal(self) -> None:
        for name, n in self.nodes.items():
            self._nft(name, f"flush chain ip {TABLE} input\nflush chain ip {TABLE} output\n")
            _run(*self.exec_prefix(name), "tc", "qdisc", "del", "dev", n.link, "root", check=False)
        self.faults.clear()


def _remove(bridge: str, namespaces: list[str], links: list[str]) -> None:
    for ns in namespaces:
        pids = _run("ip", "netns", "pids", ns, check=False).stdout.split()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
        end = time.monotonic() + 5
        while _run("ip", "netns", "pids", ns, check=False).stdout.split() and time.monotonic() < end:
            time.sleep(0.05)
        _run("ip", "netns", "del", ns, check=False)
    for link in links:
        _run("ip", "link", "del", link, check=False)
    if bridge:
        _run("ip", "link", "del", bridge, check=False)


def remove_leftovers() -> list[str]:
    """Remove what runs that died left behind: for every state file whose process is gone (or
    is another process with the same pid), its namespaces, the processes inside them, its
    links and bridge. Returns the state files cleaned."""
    cleaned = []
    if not STATE_DIR.is_dir():
        return cleaned
    for path in sorted(STATE_DIR.glob("netns-*.json")):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        pid = state.get("pid")
        if isinstance(pid, int) and _start_time(pid) is not None and _start_time(pid) == state.get("start_time"):
            continue  # its run is alive
        _remove(state.get("bridge", ""), list(state.get("namespaces", [])), list(state.get("links", [])))
        path.unlink(missing_ok=True)
        cleaned.append(path.name)
    return cleaned
