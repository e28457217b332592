"""File-backed :class:`reference.storage.Storage`: the engine's files in a data directory.

Each engine file name (``"t0-1/00000000000000000000.log"``, ``"metadata.log"``) is a file
under the root. ``append`` writes through to the operating system at once (``os.write`` on
a file opened with ``O_APPEND``), so a process killed with ``kill -9`` loses nothing it had
appended: the page cache survives the process. ``flush`` is ``fsync`` (a machine crash keeps
only flushed bytes). ``replace`` writes a temporary file, fsyncs it and renames it over the
old one, so a checkpoint is either the old or the new content, never half of each.

Recovery after a crash is the engine's: :meth:`reference.log.PartitionLog.open` cuts a torn
or corrupt tail; the controller drops a torn last metadata record. Temporary files of an
interrupted ``replace`` are removed when the storage opens.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from reference.storage import StorageError

_TMP = ".tmp"


class FileStorage:
    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self._fds: dict[str, int] = {}
        for leftover in self.root.rglob("*" + _TMP):
            leftover.unlink()

    # ------------------------------------------------------------ helpers

    def _path(self, name: str) -> Path:
        if name.startswith("/") or ".." in name.split("/"):
            raise StorageError(errno.EINVAL, f"storage name outside the data directory: {name!r}")
        return self.root / name

    def _fd(self, name: str) -> int:
        fd = self._fds.get(name)
        if fd is None:
            path = self._path(name)
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._fds[name] = fd
        return fd

    def _forget(self, name: str) -> None:
        fd = self._fds.pop(name, None)
        if fd is not None:
            os.close(fd)

    # ------------------------------------------------------------ Storage

    def append(self, name: str, data: bytes) -> None:
        try:
            fd = self._fd(name)
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
        except OSError as e:
            raise StorageError(e.errno or errno.EIO, f"append to {name}: {e.strerror}") from e

    def read(self, name: str) -> bytes:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            return b""
        except OSError as e:
            raise StorageError(e.errno or errno.EIO, f"read {name}: {e.strerror}") from e

    def truncate(self, name: str, size: int) -> None:
        path = self._path(name)
        if not path.exists():
            return
        try:
            os.truncate(path, size)
        except OSError as e:
            raise StorageError(e.errno or errno.EIO, f"truncate {name}: {e.strerror}") from e

    def flush(self, name: str) -> None:
        fd = self._fds.get(name)
        try:
            if fd is not None:
                os.fsync(fd)
            elif self._path(name).exists():
                with open(self._path(name), "rb+") as f:
                    os.fsync(f.fileno())
        except OSError as e:
            raise StorageError(e.errno or errno.EIO, f"fsync {name}: {e.strerror}") from e

    def replace(self, name: str, data: bytes) -> None:
        path = self._path(name)
        tmp = path.with_name(path.name + _TMP)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            self._forget(name)
            os.replace(tmp, path)
            dir_fd = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise StorageError(e.errno or errno.EIO, f"replace {name}: {e.strerror}") from e

    def delete(self, name: str) -> None:
        self._forget(name)
        path = self._path(name)
        try:
            path.unlink(missing_ok=True)
            parent = path.parent
            if parent != self.root and not any(parent.iterdir()):
                parent.rmdir()
        except OSError as e:
            raise StorageError(e.errno or errno.EIO, f"delete {name}: {e.strerror}") from e

    def list(self, prefix: str) -> list[str]:
        names = []
        for path in self.root.rglob("*"):
            if path.is_file() and not path.name.endswith(_TMP):
                rel = path.relative_to(self.root).as_posix()
                if rel.startswith(prefix):
                    names.append(rel)
        return sorted(names)

    def exists(self, name: str) -> bool:
        return self._path(name).is_file()

    def close(self) -> None:
        for name in list(self._fds):
            self._forget(name)
