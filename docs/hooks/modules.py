"""mkdocs hook: ``<!-- kafkacheck-modules: PACKAGE -->`` in a page becomes a table of every
module of that package with the first line of its docstring, so the list of modules where a
package is described is always the list in the tree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

MARKER = re.compile(r"<!-- kafkacheck-modules: ([\w/]+) -->")
ROOT = Path(__file__).resolve().parents[2]


ROLE = re.compile(r":(?:mod|class|func|data|meth|attr):`~?([\w.]+)`")


def summary(path: Path, limit: int = 220) -> str | None:
    """The first sentence of a module's docstring, in Markdown (None: it has none)."""
    doc = ast.get_docstring(ast.parse(path.read_text()))
    if not doc or not doc.strip():
        return None
    para = " ".join(doc.strip().split("\n\n")[0].split())
    para = ROLE.sub(lambda m: f"`{m.group(1)}`", para).replace("``", "`")
    m = re.match(r"(.+?\.)(\s|$)", para)
    text = m.group(1) if m else para
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + " …"
    return text


def modules(package: str) -> list[Path]:
    """Every module of ``package`` and its subpackages (not ``__init__.py``)."""
    return sorted(p for p in (ROOT / package).rglob("*.py") if p.name != "__init__.py" and "__pycache__" not in p.parts)


def table(package: str) -> str:
    rows = ["| module | what it is |", "| --- | --- |"]
    for p in modules(package):
        text = summary(p)
        if text is None:
            raise ValueError(f"{p.relative_to(ROOT)} has no docstring")
        rows.append(f"| `{p.relative_to(ROOT)}` | {text.replace('|', '&#124;')} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, page, config, files) -> str:
    def block(m: re.Match) -> str:
        if not (ROOT / m.group(1) / "__init__.py").exists():
            raise ValueError(f"{page.file.src_path}: no package {m.group(1)!r}")
        return table(m.group(1))

    return MARKER.sub(block, markdown)
