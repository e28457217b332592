"""``@frozen``: a frozen, slotted dataclass whose instances are cheap to build.

A run of the simulator builds a few hundred thousand messages. The ``__init__`` that
``dataclass(frozen=True)`` writes sets each field through ``object.__setattr__`` (the
class's own ``__setattr__`` refuses), a lookup and a call a field. ``@frozen`` keeps
everything the dataclass is (fields, equality, hashing, ``replace``, the refusal to change a
field after ``__init__``) and swaps in an ``__init__`` that stores each field through its
slot's descriptor directly, which is about twice as fast. Classes it cannot speed up
(``__post_init__``, fields outside ``__init__``, keyword-only fields) keep the dataclass's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import FunctionType
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


# a type checker reads a @frozen class as the frozen dataclass it is (PEP 681)
@dataclass_transform(frozen_default=True)
def frozen(cls: type[T]) -> type[T]:
    cls = dataclasses.dataclass(frozen=True, slots=True)(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if hasattr(cls, "__post_init__") or any(not f.init or f.kw_only for f in fields):
        return cls
    cls.__init__ = _init_by_slots(cls, fields)  # type: ignore[method-assign]
    return cls


def own_init(*classes: type) -> None:
    """The classes that the engine builds most often (a fetch's partitions, a poll's records)
    are ``@final @dataclass(init=False, frozen=True, slots=True)`` classes that write their own
    ``__init__``, one store a field in the fields' order: compiled (reference/compiled.py),
    such a class is native, and its ``__init__`` stores the fields directly, ten times as fast
    as @frozen's. Interpreted, the frozen dataclass refuses those stores, so this gives each
    class @frozen's ``__init__`` instead (tests/reference/test_frozen.py holds the two to the
    same fields); compiled, it leaves the native ``__init__`` alone."""
    for cls in classes:
        if isinstance(cls.__dict__.get("__init__"), FunctionType):  # interpreted
            cls.__init__ = _init_by_slots(cls, dataclasses.fields(cls))  # type: ignore[misc]


def _init_by_slots(cls: type, fields: tuple[dataclasses.Field, ...]) -> Callable[..., None]:
    """An ``__init__`` that stores each field through its slot's descriptor."""
    namespace: dict = {"MISSING": dataclasses.MISSING}
    params, body = [], []
    for f in fields:
        namespace[f"set_{f.name}"] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            namespace[f"default_{f.name}"] = f.default
            params.append(f"{f.name}=default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=MISSING")
            body.append(f"    if {f.name} is MISSING:\n        {f.name} = factory_{f.name}()")
        else:
            params.append(f.name)
        body.append(f"    set_{f.name}(self, {f.name})")
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(body or ["    pass"]) + "\n"
    exec(source, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__dict__.get("__init__", object.__init__).__doc__
    return init
