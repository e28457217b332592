"""reference/frozen.py: @frozen's classes, and the classes that write their own ``__init__``
(``own_init``), which compiled run that ``__init__`` and interpreted run @frozen's."""

from __future__ import annotations

import ast
import dataclasses
import importlib
from pathlib import Path

import pytest

from reference.frozen import frozen, own_init

ROOT = Path(__file__).resolve().parents[2]


def _own_init_classes() -> list[tuple[str, ast.ClassDef]]:
    """Every class of the engine handed to ``own_init``, and every dataclass of it that writes
    its own ``__init__`` (``init=False``), with its module's name."""
    found = []
    for path in sorted((ROOT / "reference").glob("*.py")):
        tree = ast.parse(path.read_text())
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        for node in tree.body:
            if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name) and node.value.func.id == "own_init"):
                found += [(f"reference.{path.stem}", classes[a.id]) for a in node.value.args]
            elif isinstance(node, ast.ClassDef) and "dataclass(init=False, slots=True)" in map(
                    ast.unparse, node.decorator_list):
                found.append((f"reference.{path.stem}", node))
    return found


OWN_INIT = _own_init_classes()


def test_the_engine_hands_its_most_built_classes_to_own_init():
    names = {c.name for _, c in OWN_INIT}
    assert {"FetchRequest", "FetchedPartition", "ConsumedRecord", "BatchHeader", "IndexEntry", "DelayedFetch"} <= names


@pytest.mark.parametrize(("module", "node"), OWN_INIT, ids=[c.name for _, c in OWN_INIT])
def test_a_hand_written_init_takes_and_stores_the_fields_in_order(module, node):
    """What the compiled engine runs (the class's own ``__init__``) is what the Python engine
    runs (@frozen's, built from the fields): the same parameters, defaults and stores."""
    namespace = vars(importlib.import_module(module))
    cls = namespace[node.name]
    assert [ast.unparse(d) for d in node.decorator_list] in (
        ["final", "dataclass(init=False, frozen=True, slots=True)"], ["dataclass(init=False, slots=True)"])
    fields = dataclasses.fields(cls)
    [init] = [n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"]
    params = [a.arg for a in init.args.args]
    assert params == ["self", *(f.name for f in fields)]
    defaults = [eval(ast.unparse(d), namespace) for d in init.args.defaults]
    declared = [f.default for f in fields if f.default is not dataclasses.MISSING]
    assert defaults == declared and all(f.default_factory is dataclasses.MISSING for f in fields)
    stores = [(ast.unparse(s.targets[0]), ast.unparse(s.value)) for s in init.body]
    assert stores == [(f"self.{f.name}", f.name) for f in fields]


FROZEN = [(m, c) for m, c in OWN_INIT if "final" in map(ast.unparse, c.decorator_list)]


@pytest.mark.parametrize(("module", "node"), FROZEN, ids=[c.name for _, c in FROZEN])
def test_interpreted_an_own_init_class_gets_frozens_init(module, node):
    cls = getattr(importlib.import_module(module), node.name)
    assert cls.__init__.__code__.co_filename == "<string>"  # @frozen's, not the class's own


@dataclasses.dataclass(init=False, frozen=True, slots=True)
class _Pair:
    a: int
    b: tuple = ()

    def __init__(self, a: int, b: tuple = ()) -> None:
        self.a = a  # type: ignore[misc]
        self.b = b  # type: ignore[misc]


def test_own_init_makes_an_interpreted_class_buildable_and_keeps_it_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        _Pair(1)  # the frozen dataclass refuses the class's own stores
    own_init(_Pair)
    p = _Pair(1)
    assert (p.a, p.b) == (1, ()) and _Pair(b=(2,), a=3) == _Pair(3, (2,))
    assert hash(p) == hash(_Pair(1)) and dataclasses.replace(p, a=2) == _Pair(2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.a = 5  # type: ignore[misc]


def test_frozen_builds_what_a_frozen_dataclass_builds():
    @frozen
    class Point:
        x: int
        y: int = 2
        z: list = dataclasses.field(default_factory=list)

    p = Point(1)
    assert (p.x, p.y, p.z) == (1, 2, []) and Point(1) == p and Point(y=3, x=1).y == 3
    assert Point(1).z is not p.z  # a fresh default each time
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 3  # type: ignore[misc]
    assert not hasattr(p, "__dict__")  # slotted
