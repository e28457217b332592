"""Local process control for real brokers: start, kill -9, pause, resume, restart, stop.

The real-world counterpart of the simulator's process faults. Every process is started by
this module, known by its pid, and stopped by its pid (never by name); a
:class:`ProcessGroup` stops everything it started when closed, also after an error.
Output goes to a log file per process, so a broker that dies can be diagnosed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class LocalProcess:
    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen | None = None
    paused: bool = False
    starts: int = 0
    history: list[tuple[float, str]] = field(default_factory=list)
    log_offset: int = 0  # the size of the log file when the latest start began

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    @property
    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> None:
        if self.alive:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it from here
        self.log_offset = log.tell()
        try:
            self.popen = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env=self.env,
                                          start_new_session=True)
        finally:
            log.close()
        self.paused = False
        self.starts += 1
        self._note("start")

    def log_since_start(self) -> str:
        """What the process wrote to its log since its latest start."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def kill(self) -> None:
        """kill -9: the process dies at once; what it wrote to files stays."""
        if self.alive:
            assert self.popen is not None
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait()
            self.paused = False
            self._note("kill")

    def pause(self) -> None:
        if self.alive and not self.paused:
            assert self.popen is not None
            self.popen.send_signal(signal.SIGSTOP)
            self.paused = True
            self._note("pause")

    def resume(self) -> None:
        if self.alive and self.paused:
            assert self.popen is not None
            self.popen.send_signal(signal.SIGCONT)
            self.paused = False
            self._note("resume")

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL if it does not end in time."""
        if self.popen is None or self.popen.poll() is not None:
            return
        if self.paused:
            self.popen.send_signal(signal.SIGCONT)
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.popen.send_signal(signal.SIGKILL)
            self.popen.wait()
        self.paused = False
        self._note("stop")

    def _note(self, what: str) -> None:
        self.history.append((time.time(), what))


class ProcessGroup:
    """Processes started together and stopped together (a context manager)."""

    def __init__(self) -> None:
        self.processes: dict[str, LocalProcess] = {}

    def add(self, name: str, argv: list[str], log_path: Path, env: dict[str, str] | None = None) -> LocalProcess:
        p = LocalProcess(name, argv, log_path, env if env is not None else dict(os.environ))
        self.processes[name] = p
        return p

    def start_all(self) -> None:
        for p in self.processes.values():
            p.start()

    def stop_all(self) -> None:
        for p in self.processes.values():
            p.stop()

    def __enter__(self) -> ProcessGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()
