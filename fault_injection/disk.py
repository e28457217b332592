"""The simulated disk: a :class:`reference.storage.Storage` whose unflushed writes can die.

Each file is a bytearray and a durable length: ``append`` and ``truncate`` change the bytes
at once, ``flush`` makes them durable. :meth:`SimDisk.crash` applies a power loss: every
file falls back to its durable prefix, except that a torn write may leave part of the
unflushed tail, and corruption flips a bit in the durable bytes. ``replace`` (checkpoints)
is durable at once, like write-to-temp, fsync, rename.

Faults: ``full`` (appends raise StorageError), ``slow_flush_ms`` (a flush becomes durable
only later), and at crash time ``torn`` and ``corrupt``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from reference.marks import mark
from reference.storage import StorageError


@dataclass(slots=True)
class _File:
    data: bytearray = field(default_factory=bytearray)
    durable: int = 0


class SimDisk:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.files: dict[str, _File] = {}
        self.full = False
        self.slow_flush = False
        self.pending_flushes: list[tuple[str, int]] = []  # (name, length) not yet durable
        self.bytes_written = 0
        self.flushes = 0

    # ------------------------------------------------------------ Storage

    def append(self, name: str, data: bytes) -> None:
        if self.full:
            raise StorageError(28, "No space left on device (simulated)")
        f = self.files.get(name)
        if f is None:  # (not setdefault: that would build a _File for every append)
            f = self.files[name] = _File()
        f.data.extend(data)
        self.bytes_written += len(data)

    def read(self, name: str) -> bytes:
        f = self.files.get(name)
        return bytes(f.data) if f is not None else b""

    def truncate(self, name: str, size: int) -> None:
        f = self.files.get(name)
        if f is not None:
            del f.data[size:]
            f.durable = min(f.durable, size)

    def flush(self, name: str) -> None:
        f = self.files.get(name)
        if f is None:
            return
        self.flushes += 1
        if self.slow_flush:
            self.pending_flushes.append((name, len(f.data)))
        else:
            f.durable = len(f.data)

    def replace(self, name: str, data: bytes) -> None:
        if self.full and name not in self.files:
            raise StorageError(28, "No space left on device (simulated)")
        self.files[name] = _File(bytearray(data), len(data))

    def delete(self, name: str) -> None:
        self.files.pop(name, None)

    def list(self, prefix: str) -> list[str]:
        return sorted(n for n in self.files if n.startswith(prefix))

    def exists(self, name: str) -> bool:
        return name in self.files

    # ------------------------------------------------------------ faults

    def complete_slow_flushes(self) -> None:
        for name, length in self.pending_flushes:
            f = self.files.get(name)
            if f is not None:
                f.durable = max(f.durable, min(length, len(f.data)))
        self.pending_flushes.clear()

    def unflushed_bytes(self) -> int:
        return sum(len(f.data) - f.durable for f in self.files.values())

    def crash(self, rng: random.Random, torn: bool = False, corrupt: bool = False) -> dict:
        """Lose what was not flushed. Returns a description for the history."""
        self.pending_flushes.clear()
        lost = 0
        torn_files: list[str] = []
        for name in sorted(self.files):
            f = self.files[name]
            unflushed = len(f.data) - f.durable
            keep = f.durable
            if torn and unflushed > 1 and name.endswith(".log"):
                keep += rng.randrange(1, unflushed)  # part of the last write reached the disk
                torn_files.append(name)
            lost += len(f.data) - keep
            del f.data[keep:]
            f.durable = len(f.data)
        corrupted = None
        if corrupt:
            logs = [n for n in sorted(self.files) if n.endswith(".log") and self.files[n].data]
            if logs:
                name = rng.choice(logs)
                f = self.files[name]
                pos = rng.randrange(len(f.data))
                f.data[pos] ^= 1 << rng.randrange(8)
                corrupted = {"file": name, "byte": pos}
        if lost:
            mark("disk-lost-unflushed")
        if torn_files or corrupted:
            mark("disk-torn-or-corrupt")
        return {"lost_bytes": lost, "torn": torn_files, "corrupted": corrupted}
