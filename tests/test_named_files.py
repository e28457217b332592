"""Every file a docstring, a comment or a page names exists, and every module a docstring
names with ``:mod:`` is one: names that outlive the files they point to are how docs drift."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = ("reference", "kafkacheck", "tests", "docs", "benchmarks", "fault_injection", "traces", "properties",
       "linearizability", "spark_analysis", ".ci")
# a path: folders and a file with one of these suffixes, not part of a longer word or path
PATH = re.compile(r"(?<![\w./-])((?:[\w.-]+/)+[\w.-]+\.(?:py|md|toml|yml|yaml|cpp|h|java|go|sh|json|edn))(?![\w/])")
SHOUTED = re.compile(r"(?<![\w./-])([A-Z][A-Z0-9_]+\.md)\b")  # a notes file in capitals, as the first notes were
MODULE = re.compile(r":mod:`~?([\w.]+)`")


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.py", "*.md", "*.toml", "*.yml"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return [ROOT / line for line in out.splitlines() if (ROOT / line).exists()]


def _exists(path: str, near: Path) -> bool:
    # from the root, from the file's folder, or from docs/ (mkdocs.yml's nav)
    return any((base / path).exists() for base in (ROOT, near.parent, ROOT / "docs"))


def test_every_named_file_exists():
    files = _tracked()
    names = {f.name for f in files} | {p.name for p in ROOT.iterdir()}
    missing = []
    for f in files:
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            for m in PATH.finditer(line):
                path = m.group(1)
                if (path.split("/")[0] in TOP and not re.search(r"[*{}]|[A-Z]{3,}", path)
                        and not _exists(path, f)):
                    missing.append(f"{f.relative_to(ROOT)}:{n}: {path}")
            for m in SHOUTED.finditer(line):
                if m.group(1) not in names:
                    missing.append(f"{f.relative_to(ROOT)}:{n}: {m.group(1)}")
    assert not missing, "\n".join(missing)


def test_every_module_a_docstring_names_is_one():
    missing = []
    for f in _tracked():
        if f.suffix != ".py":
            continue
        for n, line in enumerate(f.read_text().splitlines(), 1):
            for m in MODULE.finditer(line):
                name = m.group(1)
                if name.startswith("."):  # relative to the module's package
                    name = ".".join(f.relative_to(ROOT).parent.parts) + name
                parts = name.split(".")
                # a module, a package, or a name inside a module (module.function)
                if not any((ROOT.joinpath(*parts[:k]).with_suffix(".py")).exists()
                           or (ROOT.joinpath(*parts[:k]) / "__init__.py").exists()
                           for k in range(len(parts), 0, -1) if k >= len(parts) - 1):
                    missing.append(f"{f.relative_to(ROOT)}:{n}: {m.group(1)}")
    assert not missing, "\n".join(missing)


def test_every_module_is_listed_where_its_package_is_described():
    """docs/explanation/architecture.md lists every package's modules through the build hook
    docs/hooks/modules.py (each by the first sentence of its docstring)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("modules_hook", ROOT / "docs" / "hooks" / "modules.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = (ROOT / "docs" / "explanation" / "architecture.md").read_text()
    packages = [t for t in TOP if (ROOT / t / "__init__.py").exists() and t != "tests"]
    assert [p for p in packages if f"<!-- kafkacheck-modules: {p} -->" not in page] == []
    for package in packages:
        listed = hook.table(package)  # raises for a module without a docstring
        assert all(f"`{m.relative_to(ROOT)}`" in listed for m in hook.modules(package))
