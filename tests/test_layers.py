"""The import table of docs/explanation/architecture.md, enforced on every module of every package."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = {"reference", "fault_injection", "traces", "properties", "linearizability",
           "spark_analysis", "kafkacheck", "tests", "benchmarks"}

# package -> project packages it may import (itself always allowed)
ALLOWED_PROJECT = {
    "reference": set(),
    "reference.server": {"reference"},
    "reference.compiled": set(),  # which engine runs (import machinery: it reads the sources)
    "fault_injection": {"reference", "traces"},
    "fault_injection.real": {"fault_injection", "reference", "traces"},
    "traces": set(),
    "properties": {"traces", "linearizability", "fault_injection", "reference"},
    "linearizability": {"traces"},
    "spark_analysis": {"traces", "properties"},
    "kafkacheck": {"reference", "fault_injection", "traces", "properties", "linearizability",
                   "spark_analysis"},
}
# third-party packages each layer may import (the standard library is always allowed,
# except where FORBIDDEN_STDLIB says otherwise)
ALLOWED_THIRD_PARTY = {
    "reference": {"crc32c", "mypy_extensions"},  # mypyc_attr: how mypyc compiles a class
    "reference.compiled": set(),
    "reference.server": {"crc32c", "kafka"},
    "fault_injection": set(),
    "fault_injection.real": set(),
    # docs/explanation/architecture.md puts the Jepsen import in traces/; issue 4 asks for a maintained EDN
    # parser from PyPI to read Jepsen's history.edn, so traces/ may use edn_format as well
    "traces": {"pyarrow", "edn_format"},
    "properties": {"networkx", "hypothesis", "z3"},
    "linearizability": set(),
    "spark_analysis": {"pyspark", "pyarrow", "pandas", "matplotlib"},
    "kafkacheck": {"rich", "kafka", "confluent_kafka", "pyarrow", "hypothesis", "mypy_extensions"},
}
# the sans-IO core: no I/O, clock or randomness
FORBIDDEN_STDLIB_IN_CORE = {"os", "io", "socket", "time", "random", "datetime", "asyncio",
                            "threading", "subprocess", "pathlib", "select", "selectors",
                            "secrets", "uuid", "shutil", "tempfile", "multiprocessing",
                            "signal", "ssl", "urllib", "http"}
# the deterministic simulator: virtual time and seeded RNGs only (it may read its own data
# files); real time, threads, processes and sockets are fault_injection/real/'s
FORBIDDEN_STDLIB_IN_SIMULATOR = {"os", "socket", "time", "datetime", "asyncio", "threading", "subprocess",
                                 "select", "selectors", "secrets", "uuid", "shutil", "tempfile",
                                 "multiprocessing", "signal", "ssl", "urllib", "http", "io"}


def _layer(module_path: Path) -> str:
    rel = module_path.relative_to(ROOT).with_suffix("")
    parts = rel.parts
    if parts[0] == "reference" and len(parts) > 1 and parts[1] in ("server", "compiled"):
        return f"reference.{parts[1]}"
    if parts[0] == "fault_injection" and len(parts) > 1 and parts[1] == "real":
        return "fault_injection.real"
    return parts[0]


def _imports(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, node.lineno))
    return out


def _modules():
    for pkg in ALLOWED_PROJECT:
        if "." in pkg:
            continue
        yield from sorted((ROOT / pkg).rglob("*.py"))


def test_every_package_imports_only_what_architecture_allows():
    problems = []
    stdlib = sys.stdlib_module_names
    for path in _modules():
        layer = _layer(path)
        own = layer.split(".")[0]
        for name, line in _imports(path):
            top = name.split(".")[0]
            where = f"{path.relative_to(ROOT)}:{line}"
            if top in PROJECT:
                if top == own and not (layer == "reference" and name.startswith("reference.server")) and not (
                        layer == "fault_injection" and name.startswith("fault_injection.real")):
                    continue
                if top not in ALLOWED_PROJECT[layer]:
                    problems.append(f"{where}: {layer} may not import {name}")
            elif top in stdlib or top == "__future__":
                if layer == "reference" and top in FORBIDDEN_STDLIB_IN_CORE:
                    problems.append(f"{where}: the sans-IO core may not import {name}")
                if layer == "fault_injection" and top in FORBIDDEN_STDLIB_IN_SIMULATOR:
                    problems.append(f"{where}: the simulator may not import {name} (fault_injection/real/ may)")
            elif top not in ALLOWED_THIRD_PARTY[layer]:
                problems.append(f"{where}: {layer} may not import third-party {name}")
    assert not problems, "\n".join(problems)


def test_the_sans_io_core_opens_no_files():
    problems = []
    for path in sorted((ROOT / "reference").rglob("*.py")):
        if "server" in path.relative_to(ROOT).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
                    "open", "input", "print"):
                problems.append(f"{path.relative_to(ROOT)}:{node.lineno}: calls {node.func.id}()")
    assert not problems, "\n".join(problems)


def _problems_with_probe(package: str, source: str) -> str:
    """What the layer check says with a module of ``source`` put in ``package`` for a moment."""
    bad = ROOT / package / "_layer_probe_tmp.py"
    bad.write_text(source)
    try:
        test_every_package_imports_only_what_architecture_allows()
    except AssertionError as e:
        return str(e)
    finally:
        bad.unlink()
    raise AssertionError("a forbidden import went unnoticed")


def test_the_layer_checker_catches_a_forbidden_import():
    problems = _problems_with_probe("reference", "import time\nfrom kafkacheck import cli\n")
    assert "may not import time" in problems
    assert "may not import kafkacheck" in problems


def test_the_layer_checker_keeps_threads_and_real_faults_out_of_the_simulator():
    problems = _problems_with_probe("fault_injection", "import threading\nfrom fault_injection.real import proxy\n")
    assert "the simulator may not import threading" in problems
    assert "fault_injection may not import fault_injection.real" in problems


# ---------------------------------------------------------------- import cycles

LIBRARY = ("reference", "fault_injection", "traces", "properties", "linearizability", "spark_analysis",
           "kafkacheck")


def _native_modules() -> set[str]:
    """The compiled extension modules CMakeLists.txt installs into the packages
    (``install(TARGETS name ... DESTINATION package)``): imported, never a cycle."""
    text = (ROOT / "CMakeLists.txt").read_text()
    return {f"{dest.replace('/', '.')}.{name}" for name, dest in
            __import__("re").findall(r"install\(TARGETS\s+(\w+)[^)]*DESTINATION\s+([\w/]+)", text)}


def _module_graph() -> dict[str, set[str]]:
    """Library module -> the library modules it imports: at module level, inside functions
    and under ``if TYPE_CHECKING`` alike (every ``import`` statement in the file)."""
    modules: dict[str, Path] = {}
    for pkg in LIBRARY:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    known = set(modules) | _native_modules()

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            if ".".join(parts[:i]) in known:
                return ".".join(parts[:i])
        return None

    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                # ``from package import module`` imports the module, not the package
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
            for t in targets:
                r = resolve(t)
                if r is not None and r != name and r in modules:
                    graph[name].add(r)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    import networkx as nx

    g = nx.DiGraph([(a, b) for a, bs in graph.items() for b in bs])
    return [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]


def test_no_import_cycle_in_the_library():
    cycles = _cycles(_module_graph())
    assert not cycles, "import cycles (a module reaches itself through these):\n" + "\n".join(
        " <-> ".join(c) for c in cycles)


def test_the_cycle_check_sees_imports_in_functions_and_under_type_checking():
    a, b = ROOT / "reference" / "_cycle_probe_a.py", ROOT / "reference" / "_cycle_probe_b.py"
    a.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from reference import _cycle_probe_b\n")
    b.write_text("def f():\n    from reference._cycle_probe_a import TYPE_CHECKING\n    return TYPE_CHECKING\n")
    try:
        assert ["reference._cycle_probe_a", "reference._cycle_probe_b"] in _cycles(_module_graph())
    finally:
        a.unlink()
        b.unlink()


# ---------------------------------------------------------------- layers inside kafkacheck

# a package of kafkacheck -> the packages of kafkacheck it may not import, anywhere in a module
# (in functions and under TYPE_CHECKING too): the real clients (kafkacheck/real/) are below
# both the workloads and the conformance suite, the workloads below the suite (which runs
# them), and only the dispatcher imports the commands
FORBIDDEN_IN_KAFKACHECK = {
    "kafkacheck.workloads": ("kafkacheck.conform", "kafkacheck.commands"),
    "kafkacheck.real": ("kafkacheck.workloads", "kafkacheck.conform", "kafkacheck.commands"),
    "kafkacheck.conform": ("kafkacheck.commands",),
}


def _imported_names(path: Path, module: str) -> list[tuple[str, int]]:
    """Every name ``module`` (at ``path``) imports, made absolute: ``from kafkacheck import conform``
    is ``kafkacheck.conform``, ``from ..conform import cases`` in a package of kafkacheck too."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            out += [(f"{base}.{a.name}", node.lineno) for a in node.names]
    return out


def _kafkacheck_layer_problems(root: Path) -> list[str]:
    problems = []
    for path in sorted((root / "kafkacheck").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for owner, forbidden in FORBIDDEN_IN_KAFKACHECK.items():
            if module != owner and not module.startswith(owner + "."):
                continue
            for name, line in _imported_names(path, module):
                if any(name == f or name.startswith(f + ".") for f in forbidden):
                    problems.append(f"{path.relative_to(root)}:{line}: {owner} may not import {name}")
    return problems


def test_the_workloads_and_the_real_clients_import_nothing_above_them():
    problems = _kafkacheck_layer_problems(ROOT)
    assert not problems, "\n".join(problems)


def test_the_kafkacheck_layer_check_sees_every_form_of_import(tmp_path):
    probes = {  # package of kafkacheck -> a module's source
        "workloads": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kafkacheck.conform.real_run import R\n"
                     "def f():\n    from kafkacheck import conform\n    from ..conform import cases\n"
                     "from kafkacheck.real.kinds import CLIENTS\nfrom kafkacheck.conformance import x\n",
        "real": "import kafkacheck.workloads.base\nfrom . import kinds\n",
        "conform": "from kafkacheck.commands.conform import main\nfrom kafkacheck.workloads import WORKLOADS\n",
    }
    (tmp_path / "kafkacheck").mkdir()
    (tmp_path / "kafkacheck" / "__init__.py").write_text("")
    for package, source in probes.items():
        (tmp_path / "kafkacheck" / package).mkdir()
        (tmp_path / "kafkacheck" / package / "__init__.py").write_text("")
        (tmp_path / "kafkacheck" / package / "probe.py").write_text(source)
    found = [p.split(": ", 1)[0].rsplit(":", 1) for p in _kafkacheck_layer_problems(tmp_path)]
    assert [(Path(path).parent.name, int(line)) for path, line in found] == [
        ("conform", 1), ("real", 1), ("workloads", 3), ("workloads", 5), ("workloads", 6)], found
