"""The storage interface the engine writes through, and an in-memory implementation.

Rule: the engine never opens a file. A node receives a :class:`Storage` from its runtime:
the simulator's disk (``fault_injection.disk``: unflushed writes lost on crash, torn
writes, corruption, disk full) or real files (``reference.server``). Files are named by
relative paths such as ``"t0-1/00000000000000000000.log"``.

Durability contract: ``append`` and ``truncate`` change the file at once, but only what was
``flush``-ed is certain to survive a crash. ``replace`` swaps a small file's whole content
(checkpoints); it is durable once it returns, like Kafka's write-to-temp, fsync, rename.
"""

from __future__ import annotations

from typing import Protocol

from mypy_extensions import mypyc_attr


@mypyc_attr(native_class=False)  # an exception that subclasses a built-in one stays a Python class when compiled
class StorageError(OSError):
    """The storage could not carry out a write (disk full, I/O error)."""


class Storage(Protocol):
    def append(self, name: str, data: bytes) -> None: ...

    def read(self, name: str) -> bytes: ...

    def truncate(self, name: str, size: int) -> None: ...

    def flush(self, name: str) -> None: ...

    def replace(self, name: str, data: bytes) -> None: ...

    def delete(self, name: str) -> None: ...

    def list(self, prefix: str) -> list[str]: ...

    def exists(self, name: str) -> bool: ...


class MemoryStorage:
    """Storage in a dict: every write is durable. For unit tests and tools."""

    def __init__(self) -> None:
        self.files: dict[str, bytearray] = {}

    def append(self, name: str, data: bytes) -> None:
        self.files.setdefault(name, bytearray()).extend(data)

    def read(self, name: str) -> bytes:
        return bytes(self.files.get(name, b""))

    def truncate(self, name: str, size: int) -> None:
        if name in self.files:
            del self.files[name][size:]

    def flush(self, name: str) -> None:
        pass

    def replace(self, name: str, data: bytes) -> None:
        self.files[name] = bytearray(data)

    def delete(self, name: str) -> None:
        self.files.pop(name, None)

    def list(self, prefix: str) -> list[str]:
        return sorted(n for n in self.files if n.startswith(prefix))

    def exists(self, name: str) -> bool:
        return name in self.files
