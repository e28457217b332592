"""The compiled engine (reference/compiled.py, built by compile_engine.py when pip installs
kafkacheck) against the Python engine, its oracle: the same runs make the same bytes. Which
engine runs, and why, and the build's fallback when it cannot compile.

Without a compiled engine of these sources (built with KAFKACHECK_COMPILE=0, or an engine
edited since pip install -e .) the comparisons skip, unless KAFKACHECK_REQUIRE_COMPILED is set
(CI sets it): then they fail."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reference import compiled

ROOT = Path(__file__).resolve().parents[1]


def _need_compiled() -> None:
    ok, why = compiled.available()
    if not ok:
        if os.environ.get("KAFKACHECK_REQUIRE_COMPILED"):
            pytest.fail(f"no compiled engine: {why}")
        pytest.skip(f"no compiled engine: {why}")


def _python(code: str, engine: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter (cwd: the project) with KAFKACHECK_ENGINE=``engine``."""
    env = {**os.environ, "KAFKACHECK_ENGINE": engine}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)


# every engine module imported: which engine, and where each came from
WHERE = ("import importlib; from pathlib import Path; from reference.compiled import engine, engine_modules; "
         "files = [importlib.import_module(m).__file__ for m in engine_modules(Path('.'))]; "
         "print(engine()[0], *files)")


@pytest.mark.parametrize(("engine", "suffix"), [("python", ".py"), ("compiled", ".so")])
def test_every_engine_module_comes_from_the_engine_asked_for(engine, suffix):
    """Python: every module from its source; compiled: every one compiled, never a mix."""
    if engine == "compiled":
        _need_compiled()
    out = _python(WHERE, engine)
    assert out.returncode == 0, out.stderr
    kind, *files = out.stdout.split()
    assert kind == engine
    assert all(f.endswith(suffix) for f in files), files


def test_a_bad_engine_name_is_one_line_and_exit_3():
    out = subprocess.run([sys.executable, "-m", "kafkacheck", "run", "--ops", "10"], capture_output=True, text=True,
                         env={**os.environ, "KAFKACHECK_ENGINE": "fast"}, cwd=ROOT, timeout=120)
    assert out.returncode == 3
    assert out.stderr.strip().splitlines() == [
        "kafkacheck: error: KAFKACHECK_ENGINE='fast': say one of auto, python, compiled"]


def test_kafkacheck_run_says_which_engine_ran(tmp_path):
    out = subprocess.run([sys.executable, "-m", "kafkacheck", "run", "--ops", "50", "--out", str(tmp_path / "r")],
                         capture_output=True, text=True, env={**os.environ, "KAFKACHECK_ENGINE": "python"}, cwd=ROOT,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "│ engine       │ python (KAFKACHECK_ENGINE=python)" in out.stdout


@pytest.mark.parametrize(("wanted", "built", "expected"), [
    ("", (True, "built from these sources"), "compiled"),
    ("auto", (True, "built from these sources"), "compiled"),
    ("", (False, "the engine's sources changed"), "python"),
    ("python", (True, "built from these sources"), "python"),
    ("compiled", (True, "built from these sources"), "compiled"),
])
def test_which_engine_runs(wanted, built, expected):
    kind, why = compiled.choose(wanted, lambda: built)
    assert kind == expected
    assert why  # says why, as kafkacheck run's table shows


def test_asking_for_a_compiled_engine_that_is_not_there_says_why():
    with pytest.raises(compiled.EngineUnavailable, match="no compiled engine: the build did not compile it"):
        compiled.choose("compiled", lambda: (False, "the build did not compile it: KAFKACHECK_COMPILE=0"))


def test_an_engine_edited_since_the_build_is_not_run_compiled(monkeypatch):
    _need_compiled()
    assert compiled.available()[0]
    monkeypatch.setattr(compiled, "digest", lambda root: "an edit since the build")
    ok, why = compiled.available()
    assert not ok
    assert "sources changed" in why


def test_mypy_checks_every_compiled_module():
    """mypyc trusts the annotations of what it compiles: mypy must read every compiled module."""
    import tomllib

    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    unchecked = [m for m in compiled.engine_modules(ROOT)
                 if not any(str(compiled.source_path(Path(), m)).startswith(f) for f in files)]
    assert unchecked == []


def _classes_subclassed_from_outside() -> dict[tuple[str, str], list[str]]:
    """(compiled module, class) -> the classes of the project's other modules (not the tests,
    which run the Python engine) that subclass it, as imported by name."""
    modules = set(compiled.engine_modules(ROOT))
    out: dict[tuple[str, str], list[str]] = {}
    for path in sorted(ROOT.glob("[!.]*/**/*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if module in modules or module.startswith(("tests.", "benchmarks.")):
            continue
        tree = ast.parse(path.read_text())
        imported = {a.asname or a.name: (node.module, a.name) for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module in modules for a in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for base in node.bases:
                    if isinstance(base, ast.Name) and base.id in imported:
                        out.setdefault(imported[base.id], []).append(f"{module}.{node.name}")
    return out


def test_a_compiled_class_subclassed_outside_the_compiled_modules_allows_it():
    """mypyc refuses an interpreted subclass of a compiled class unless the class allows it
    (``@mypyc_attr(allow_interpreted_subclasses=True)``): a TypeError at import, compiled only."""
    closed = []
    for (module, name), subclasses in _classes_subclassed_from_outside().items():
        tree = ast.parse(compiled.source_path(ROOT, module).read_text())
        cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name)
        if not any("allow_interpreted_subclasses=True" in ast.unparse(d) for d in cls.decorator_list):
            closed.append(f"{module}.{name} (subclassed by {', '.join(subclasses)})")
    assert closed == []


def test_the_check_of_open_classes_sees_the_workloads():
    assert ("kafkacheck.workloads.client", "ClientBase") in _classes_subclassed_from_outside()


def test_the_digest_covers_every_engine_source(tmp_path):
    """The digest moves with a byte of any compiled module's source, and with nothing else."""
    for module in compiled.digested_modules(ROOT):
        compiled.source_path(tmp_path, module).parent.mkdir(parents=True, exist_ok=True)
        compiled.source_path(tmp_path, module).write_bytes(compiled.source_path(ROOT, module).read_bytes())
    assert compiled.digest(tmp_path) == compiled.digest(ROOT)
    (tmp_path / "reference" / "compiled.py").write_text("# not compiled: not in the digest\n")
    assert compiled.digest(tmp_path) == compiled.digest(ROOT)
    for module in ("reference.log", "kafkacheck.workloads.client", "reference.frozen"):
        source = compiled.source_path(tmp_path, module)
        before = source.read_bytes()
        source.write_bytes(before + b"\n")
        assert compiled.digest(tmp_path) != compiled.digest(ROOT), module
        source.write_bytes(before)


def test_a_build_that_cannot_compile_still_installs_the_python_engine(tmp_path):
    """compile_engine.py without mypyc (python -S: no site-packages) says why and exits 0:
    the install goes on, and the module reference._built tells reference.compiled there is none."""
    out = subprocess.run([sys.executable, "-S", str(ROOT / "compile_engine.py"), str(tmp_path / "engine")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "kafkacheck will run the Python engine" in out.stdout
    built: dict = {}
    exec((tmp_path / "engine" / "reference" / "_built.py").read_text(), built)
    assert built["DIGEST"] is None
    assert built["WHY"] == "mypyc failed (exit 1: its errors are above)"
    assert "ModuleNotFoundError: No module named 'mypyc'" in out.stderr
    assert not list((tmp_path / "engine").rglob("*.so"))


def test_compiling_can_be_turned_off(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "compile_engine.py"), str(tmp_path / "engine")],
                         capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "KAFKACHECK_COMPILE": "0"})
    assert out.returncode == 0, out.stderr
    built: dict = {}
    exec((tmp_path / "engine" / "reference" / "_built.py").read_text(), built)
    assert (built["DIGEST"], built["WHY"]) == (None, "KAFKACHECK_COMPILE=0 when it was installed")


FREED = """
import gc
from dataclasses import replace
from kafkacheck.runner import RunOptions, simulate
from fault_injection.simulation import Simulation
gc.collect()
gc.disable()
for workload in ("queue", "txn", "groups"):
    simulate(replace(RunOptions(seed=2, ops=600, workload=workload), faults=["kill", "partition"]), None)
print(sum(1 for o in gc.get_objects() if type(o) is Simulation))
"""


@pytest.mark.parametrize("engine", ["python", "compiled"])
def test_a_finished_run_with_crashes_leaves_no_simulation_to_the_cycle_collector(engine):
    """A hunt's worker makes a full collection only every 20 runs: a run kept in a reference
    cycle (compiled, a method's nested functions and its variables make one) would stay in
    memory until then, all of it."""
    if engine == "compiled":
        _need_compiled()
    out = _python(FREED, engine)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["0"]


def _same_bytes(*flags: str) -> None:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "same_bytes.py"), "--compiled", *flags],
                         capture_output=True, text=True, cwd=ROOT, timeout=3000)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert " the same as python " in out.stdout.splitlines()[-1]


def test_the_compiled_engine_makes_the_python_engines_bytes():
    """benchmarks/same_bytes.py --compiled --quick: every workload, the swarm's first seeds,
    the model's templates with their switches and the machines' saved programs, each history
    and events file the same byte for byte from both engines."""
    _need_compiled()
    _same_bytes("--quick")


@pytest.mark.slow
def test_the_compiled_engine_makes_the_python_engines_bytes_on_every_run_of_same_bytes():
    _need_compiled()
    _same_bytes()
