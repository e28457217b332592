"""Bounded model checking and k-induction over a symbolic transition system.

A model gives ``fresh(k)`` (the state variables of step ``k``), ``init(s)``,
``transition(s, t, choice)``, ``choices()`` (what each value of a step's choice variable
means: (action, replica)), ``invariants(s, prev)`` (name -> formula), ``wellformed(s)`` and
``describe(model, s)``, and optionally ``lemmas(s)`` (name -> formula): facts about reachable
states that strengthen the invariants so that k-induction can close; BMC checks them like
invariants (a counterexample to one names it ``lemma NAME``: the lemma is wrong, not the
protocol). :func:`check` unrolls the transition
relation one step at a time on one incremental solver and asks, at every depth, whether some
invariant can be false; the first satisfying assignment is the shortest counterexample.
:func:`k_induction` asks whether ``k`` consecutive good (well-formed) states always lead to a
good one; when that is unsatisfiable and BMC found nothing up to ``k``, the invariants hold
at every depth.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import z3


@dataclass
class Result:
    variant: str
    depth: int
    violated: str | None = None  # the invariant a counterexample breaks
    steps: list[dict] = field(default_factory=list)  # [{"action", "replica", "state"}] from the initial state
    seconds: float = 0.0
    checked_depth: int = 0  # BMC found nothing up to this depth
    induction: int | None = None  # k at which k-induction closed
    unknown: str | None = None  # z3 answered neither sat nor unsat at depth checked_depth + 1 (its reason)

    @property
    def ok(self) -> bool:
        """No counterexample and every depth asked was decided."""
        return self.violated is None and self.unknown is None


def _solve(solver: z3.Solver) -> Any:
    """``solver.check()``, where an answer that is neither sat nor unsat is never read as
    either: z3 catches Ctrl-C itself and answers unknown ("canceled"), which becomes the
    KeyboardInterrupt Python never saw; any other unknown is returned for the caller to report."""
    verdict = solver.check()
    if verdict == z3.unknown and solver.reason_unknown() in ("canceled", "interrupted from keyboard"):
        raise KeyboardInterrupt
    return verdict


def properties(model, s, prev=None) -> dict[str, Any]:
    """The invariants and, named ``lemma NAME``, the model's lemmas, at state ``s``."""
    out = dict(model.invariants(s, prev))
    lemmas = getattr(model, "lemmas", None)
    if lemmas is not None:
        out.update({f"lemma {name}": f for name, f in lemmas(s).items()})
    return out


def check(model, depth: int, progress=None) -> Result:
    start = time.monotonic()
    solver = z3.Solver()
    states = [model.fresh(0)]
    solver.add(model.init(states[0]))
    choices = model.choices()
    picks = []
    result = Result(model.variant, depth)
    for k in range(depth + 1):
        if k > 0:
            pick = z3.Int(f"choice_{k}")
            picks.append(pick)
            states.append(model.fresh(k))
            solver.add(model.transition(states[k - 1], states[k], pick))
        invs = properties(model, states[k], states[k - 1] if k > 0 else None)
        solver.push()
        solver.add(z3.Or([z3.Not(f) for f in invs.values()]))
        verdict = _solve(solver)
        if verdict == z3.unknown:
            result.unknown = solver.reason_unknown() or "unknown"
            result.seconds = time.monotonic() - start
            return result
        if verdict == z3.sat:
            m = solver.model()
            result.violated = next(name for name, f in invs.items() if z3.is_false(m.eval(f, model_completion=True)))
            result.steps = [{"action": "init", "replica": None, "state": model.describe(m, states[0])}]
            for i in range(k):
                action, replica = choices[m.eval(picks[i]).as_long()]
                result.steps.append({"action": action, "replica": replica,
                                     "state": model.describe(m, states[i + 1])})
            result.depth = k
            result.seconds = time.monotonic() - start
            return result
        solver.pop()
        result.checked_depth = k
        if progress is not None:
            progress(k, time.monotonic() - start)
        # the invariants hold at step k on every path: keep them as facts for deeper steps
        solver.add(z3.And(list(invs.values())))
    result.seconds = time.monotonic() - start
    return result


def k_induction(model, k: int) -> bool | None:
    """True when k good consecutive states (from any well-formed state) always step to a good
    one; "good" takes in the model's lemmas. With BMC clean to depth k - 1 (the base case) the
    invariants then hold at every depth. False when some such path steps to a bad state, None
    when z3 could not decide."""
    solver = z3.Solver()
    states = [model.fresh(1000 + i) for i in range(k + 1)]
    for i, s in enumerate(states):
        solver.add(model.wellformed(s))
        if i > 0:
            solver.add(model.transition(states[i - 1], s, z3.Int(f"ichoice_{i}")))
    for i in range(k):
        solver.add(z3.And(list(properties(model, states[i], states[i - 1] if i > 0 else None).values())))
    solver.add(z3.Not(z3.And(list(properties(model, states[k], states[k - 1]).values()))))
    verdict = _solve(solver)
    return None if verdict == z3.unknown else verdict == z3.unsat


def as_dict(r: Result) -> dict[str, Any]:
    return {"variant": r.variant, "depth": r.depth, "violated": r.violated, "steps": r.steps,
            "seconds": round(r.seconds, 3), "checked_depth": r.checked_depth, "induction": r.induction,
            "unknown": r.unknown}


def relation(choice, options: list[tuple[Any, dict]], s: Any, t: Any, fields: tuple[str, ...]) -> Any:
    """The constraint that state ``t`` follows ``s`` by option number ``choice`` of
    ``options`` (each a guard and the next value of every field, a scalar or nested lists of
    them). Every scalar of ``t`` is one if-then-else chain over the options that change it,
    which keeps the frame conditions shared (and the solver fast)."""
    sels = [choice == i for i in range(len(options))]
    c = [choice >= 0, choice < len(options)]
    c += [z3.Implies(sel, guard) for sel, (guard, _nxt) in zip(sels, options, strict=True)]
    for key in fields:
        for path, old_v, new_v in _leaves(getattr(s, key), getattr(t, key)):
            expr = old_v
            for sel, (_guard, nxt) in reversed(list(zip(sels, options, strict=True))):
                val = _at(nxt[key], path)
                if not (z3.is_expr(val) and val.eq(old_v)):
                    expr = z3.If(sel, val, expr)
            c.append(new_v == expr)
    return z3.And(c)


def replaced(values: list, i: int, v) -> list:
    """A copy of ``values`` with item ``i`` set to ``v`` (a next-state field)."""
    out = list(values)
    out[i] = v
    return out


def _leaves(cur, nxt, path=()):
    """(path, current value, next-state variable) for every scalar of a state field."""
    if isinstance(cur, list):
        for i, (a, b) in enumerate(zip(cur, nxt, strict=True)):
            yield from _leaves(a, b, (*path, i))
    else:
        yield path, cur, nxt


def _at(value, path):
    for i in path:
        value = value[i]
    return value
