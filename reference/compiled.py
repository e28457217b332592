"""Which engine runs: the one mypyc compiled when pip built kafkacheck, or the Python source.

The engine (every module of :mod:`reference` but the served broker's, this one, the package's
``__init__`` and :mod:`reference.frozen`) with the simulator's core and the simulated harness
(:data:`HARNESS`: the cluster, the nemeses, what the workloads' clients share) type-checks, so pip's build
compiles it with mypyc into C extension modules installed with the sources (beside them in a
wheel; in site-packages, where the editable install's finder prefers them, for ``pip install
-e``) by ``compile_engine.py``, which ``CMakeLists.txt`` runs. They run the same code byte for byte
(``tests/test_compiled.py``) about twice as fast. The Python
source stays the oracle: it is what the tests exercise, what a stale build falls back to,
and what ``KAFKACHECK_ENGINE=python`` asks for.

:func:`install` puts :class:`EngineFinder` first on ``sys.meta_path`` (``reference/__init__.py``
calls it; ``fault_injection`` and ``kafkacheck.workloads`` import ``reference`` first). At the first import of an engine
module it decides, once per process, between the two, for all of them together (compiled
modules call each other directly, so the engine is never half compiled):

* ``KAFKACHECK_ENGINE=python``: the Python source;
* ``KAFKACHECK_ENGINE=compiled``: the compiled modules, or :class:`EngineUnavailable` saying
  why not;
* unset (or ``auto``): the compiled modules if the build made them from the sources as they
  are now (the digest of their bytes, recorded by the build in the module ``reference._built``), else
  the Python source: an engine edited since ``pip install -e .`` runs as edited.

This module is the package's import machinery, not the sans-IO engine: it reads files.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path

ENV = "KAFKACHECK_ENGINE"
CHOICES = ("auto", "python", "compiled")
BUILT = "reference._built"  # written by compile_engine.py into the wheel, never into the sources
# not compiled: the package's init and this module (import machinery), the frozen-dataclass
# decorator (mypyc reads it as a PEP 681 transform, and cannot compile it), the served broker
NOT_COMPILED = {"__init__", "compiled", "frozen", "_built"}
# besides reference/: the simulator's core and the simulated harness (the cluster, the nemeses,
# what the workloads' clients share and the queue workload's client, which the others extend),
# each package of which imports reference first. Not the other workloads' own modules: they
# hold their Hypothesis machines too, whose rules Hypothesis cannot decorate once compiled (a
# compiled method has no __name__)
HARNESS = ("fault_injection.simulation", "fault_injection.network", "fault_injection.disk",
           "fault_injection.cluster", "fault_injection.nemesis", "fault_injection.aimed",
           *(f"kafkacheck.workloads.{m}" for m in ("base", "client", "actors", "rules", "eos_values", "queue_client")))


class EngineUnavailable(ImportError):
    """KAFKACHECK_ENGINE=compiled, and there is no compiled engine of these sources."""


def engine_modules(root: Path) -> list[str]:
    """The compiled modules' names, from the sources under ``root`` (the project or the
    install's directory that holds ``reference/`` and ``fault_injection/``)."""
    names = [f"reference.{p.stem}" for p in sorted((root / "reference").glob("*.py")) if p.stem not in NOT_COMPILED]
    return names + list(HARNESS)


def source_path(root: Path, module: str) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def digested_modules(root: Path) -> list[str]:
    """The compiled modules, and the frozen-dataclass decorator whose meaning mypyc compiled
    into them."""
    return [*engine_modules(root), "reference.frozen"]


def digest(root: Path) -> str:
    """sha256 over the names and source bytes of :func:`digested_modules`: what the build
    records, and what the sources must still hash to for the compiled modules to run."""
    h = hashlib.sha256()
    for module in digested_modules(root):
        h.update(module.encode() + b"\0" + source_path(root, module).read_bytes() + b"\0")
    return h.hexdigest()


def _root() -> Path:
    return Path(__file__).resolve().parent.parent


def available() -> tuple[bool, str]:
    """Whether a compiled engine of the sources as they are now is installed, and if not why."""
    try:
        built = importlib.import_module(BUILT)
    except ImportError:
        return False, "kafkacheck was not built by pip here (no module reference._built)"
    if built.DIGEST is None:
        return False, f"the build did not compile it: {built.WHY}"
    if digest(_root()) != built.DIGEST:
        return False, "the engine's sources changed since the build (pip install -e . compiles them again)"
    return True, "built from these sources"


def choose(wanted: str, available: Callable[[], tuple[bool, str]]) -> tuple[str, str]:
    """The engine ``KAFKACHECK_ENGINE=wanted`` asks for, given whether a compiled one of
    these sources is ``available``: ``("python" or "compiled", why)``."""
    wanted = wanted or "auto"
    if wanted not in CHOICES:
        raise EngineUnavailable(f"{ENV}={wanted!r}: say one of {', '.join(CHOICES)}")
    if wanted == "python":
        return "python", f"{ENV}=python"
    ok, why = available()
    if ok:
        return "compiled", f"mypyc, {why}"
    if wanted == "compiled":
        raise EngineUnavailable(f"{ENV}=compiled, but there is no compiled engine: {why}")
    return "python", why


class EngineFinder:
    """First on ``sys.meta_path``: an engine module comes from its Python source when the
    Python engine runs; otherwise the usual finders find the compiled module (an extension
    module is preferred to a source file of the same name, and the editable install's finder
    prefers what the build installed)."""

    def __init__(self) -> None:
        self.root = _root()
        self.modules = frozenset(engine_modules(self.root))
        self.engine: str | None = None  # "python" or "compiled", once decided
        self.why = ""

    def decide(self) -> str:
        if self.engine is None:
            self.engine, self.why = choose(os.environ.get(ENV, ""), available)
        return self.engine

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        if fullname not in self.modules or self.decide() == "compiled":
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(self.root, fullname))


def install() -> EngineFinder:
    """Put the engine's finder first on ``sys.meta_path`` (once per process)."""
    for finder in sys.meta_path:
        if isinstance(finder, EngineFinder):
            return finder
    finder = EngineFinder()
    sys.meta_path.insert(0, finder)
    return finder


def engine() -> tuple[str, str]:
    """Which engine this process runs (deciding now if no engine module was imported yet),
    and why: ``("compiled", ...)`` or ``("python", ...)``."""
    finder = install()
    return finder.decide(), finder.why
