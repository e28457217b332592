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

What has been flushed is written down (``track_flushes``, a broker's storage): ``FLUSHED``
(a journal in the root, one line ``SIZE<TAB>NAME`` a change, appended and never rewritten
while the node runs, so that a flush costs one small write however many files there are;
SIZE -1: the file is gone) gives, for every file appended to, its size at its latest
``fsync`` (0 before the first), kept across restarts: the last line of a name wins
(:func:`flushed_sizes`). A storage that opens compacts it to one line a file. :func:`lose_unflushed` uses it to make
a stopped node's directory look as a power loss would leave it: every appended file cut back
to its flushed size (``replace``-d files are durable and stay), and ``POWER_LOSS`` written,
which the node reads when it starts again: its storage did not keep every write (KIP-966's
unclean shutdown). It stays until a clean shutdown (:meth:`FileStorage.mark_clean`), as
Kafka's clean-shutdown file decides, so a node killed again before it registered still
says so at its next start.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from reference.storage import StorageError

_TMP = ".tmp"
FLUSHED = ".flushed.log"  # the journal of each appended file's size at its latest flush
POWER_LOSS = ".power-loss"  # written by lose_unflushed, read and removed by the next start


class FileStorage:
    def __init__(self, root: str | os.PathLike, track_flushes: bool = True) -> None:
        self.root = Path(root)
        self.track_flushes = track_flushes
        self.root.mkdir(parents=True, exist_ok=True)
        self._fds: dict[str, int] = {}
        for leftover in self.root.rglob("*" + _TMP):
            leftover.unlink()
        self._flushed: dict[str, int] = flushed_sizes(self.root) if track_flushes else {}
        self._journal = _open_journal(self.root, self._flushed) if track_flushes else -1
        # a node starting after lose_unflushed (and no clean shutdown since): it may have
        # lost acknowledged records
        self.lost_power = (self.root / POWER_LOSS).exists()

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

    def _note_flushed(self, name: str, size: int | None) -> None:
        """Write down ``name``'s flushed size (None: the file is gone). Written through to the
        operating system, so it survives the process (a power loss is what it describes)."""
        if size is None:
            if self._flushed.pop(name, None) is None:
                return
        elif self._flushed.get(name) == size:
            return
        else:
            self._flushed[name] = size
        os.write(self._journal, _line(name, -1 if size is None else size))

    def append(self, name: str, data: bytes) -> None:
        try:
            fd = self._fd(name)
            if self.track_flushes and name not in self._flushed:
                # what the file held before this process first appended to it is durable (written
                # by replace(), or by an earlier process that stopped cleanly or was cut back)
                self._note_flushed(name, os.fstat(fd).st_size)
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
        if name in self._flushed and self._flushed[name] > size:
            self._note_flushed(name, size)

    def flush(self, name: str) -> None:
        fd = self._fds.get(name)
        try:
            if fd is not None:
                os.fsync(fd)
                size = os.fstat(fd).st_size
            elif self._path(name).exists():
                with open(self._path(name), "rb+") as f:
                    os.fsync(f.fileno())
                    size = os.fstat(f.fileno()).st_size
            else:
                return
        except OSError as e:
            raise StorageError(e.errno or errno.EIO, f"fsync {name}: {e.strerror}") from e
        if name in self._flushed:
            self._note_flushed(name, size)

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
            if name in self._flushed:
                self._note_flushed(name, len(data))
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
        self._note_flushed(name, None)
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
            if path.is_file() and not path.name.endswith(_TMP) and path.name not in (FLUSHED, POWER_LOSS):
                rel = path.relative_to(self.root).as_posix()
                if rel.startswith(prefix):
                    names.append(rel)
        return sorted(names)

    def exists(self, name: str) -> bool:
        return self._path(name).is_file()

    def mark_clean(self) -> None:
        """After a clean shutdown (everything flushed): the storage holds every write again."""
        (self.root / POWER_LOSS).unlink(missing_ok=True)

    def close(self) -> None:
        for name in list(self._fds):
            self._forget(name)
        if self._journal >= 0:
            os.close(self._journal)
            self._journal = -1


def _line(name: str, size: int) -> bytes:
    return f"{size}\t{name}\n".encode()


def flushed_sizes(root: str | os.PathLike) -> dict[str, int]:
    """What ``FLUSHED`` says: each appended file's size at its latest flush (the last line of
    a name wins; a line cut short by a kill mid-write is skipped)."""
    try:
        text = (Path(root) / FLUSHED).read_text()
    except OSError:
        return {}
    sizes: dict[str, int] = {}
    for line in text.splitlines(keepends=True):
        size, tab, name = line.rstrip("\n").partition("\t")
        if not line.endswith("\n") or not tab or not name or not size.lstrip("-").isdigit():
            continue
        if int(size) < 0:
            sizes.pop(name, None)
        else:
            sizes[name] = int(size)
    return sizes


def _open_journal(root: Path, sizes: dict[str, int]) -> int:
    """``FLUSHED`` compacted to one line a file (written whole, then renamed over the old one),
    opened for appending."""
    tmp = root / (FLUSHED + _TMP)
    tmp.write_bytes(b"".join(_line(name, size) for name, size in sorted(sizes.items())))
    os.replace(tmp, root / FLUSHED)
    return os.open(root / FLUSHED, os.O_WRONLY | os.O_APPEND)


def lose_unflushed(root: str | os.PathLike) -> dict[str, int]:
    """Make the directory of a node that is not running look as a power loss would leave it:
    every file appended to is cut back to its size at its latest flush (``FLUSHED``), and
    ``POWER_LOSS`` tells the node, when it starts, that its storage lost writes. Returns the
    bytes cut per file (only files that lost something)."""
    root = Path(root)
    cut: dict[str, int] = {}
    for name, flushed in sorted(flushed_sizes(root).items()):
        path = root / name
        if ".." in name.split("/") or not path.is_file():
            continue
        size = path.stat().st_size
        if size > flushed:
            os.truncate(path, flushed)
            cut[name] = size - flushed
    (root / POWER_LOSS).write_text("")
    return cut
