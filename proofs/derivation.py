"""A derivation is a sequence of steps, each a relation the code verifies.

Three kinds of step:

* ``Equal(lhs, rhs, why)``: verified when ``lhs - rhs`` simplifies to exactly 0 (after the finite-sum
  rules of :func:`proofs.algebra.reduce_sums`, with the step's ``aggregates``, and its substitutions).
* ``AtMost(lhs, rhs, why, certificate)``: ``lhs <= rhs`` under the symbols' assumptions; verified when
  ``rhs - lhs - certificate`` simplifies to 0 and SymPy proves ``certificate >= 0``.
* ``Fact(text, why, check)``: a statement about concrete objects (all 2^d masks, the characteristic
  polynomial for d = 1..6, a witness), verified by running ``check`` which returns True or False.

Nothing is asserted: :meth:`Derivation.verify` re-runs every check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import sympy as sp

from proofs.algebra import LN_AGGREGATES, reduce_sums


class DerivationError(AssertionError):
    """A step whose relation the code could not verify."""


def is_zero(expr: sp.Expr) -> bool:
    """True when SymPy reduces expr to exactly 0 (a cheap normal form first, then simplify)."""
    expr = sp.expand(expr)
    if expr == 0:
        return True
    if sp.cancel(sp.together(expr)) == 0:
        return True
    return sp.simplify(expr) == 0


def evaluated(expr: sp.Expr) -> sp.Expr:
    """expr with its unevaluated derivatives and deferred operations (e.g. an expectation over masks)
    carried out; the row sums stay symbolic."""
    expr = expr.replace(lambda e: hasattr(e, "deferred"), lambda e: e.deferred())
    return expr.replace(lambda e: isinstance(e, sp.Derivative), lambda e: e.doit(deep=False))


@dataclass(frozen=True)
class Equal:
    lhs: sp.Expr
    rhs: sp.Expr
    why: str
    aggregates: Mapping[sp.Expr, sp.Expr] = field(default_factory=lambda: LN_AGGREGATES)
    given: Mapping[sp.Expr, sp.Expr] = field(default_factory=dict)

    relation = "="

    def verify(self) -> bool:
        difference = evaluated(sp.sympify(self.lhs) - sp.sympify(self.rhs))
        difference = reduce_sums(difference, self.aggregates)
        return is_zero(difference.subs(self.given))


@dataclass(frozen=True)
class AtMost:
    lhs: sp.Expr
    rhs: sp.Expr
    why: str
    certificate: sp.Expr

    relation = r"\le"

    def verify(self) -> bool:
        if not is_zero(self.rhs - self.lhs - self.certificate):
            return False
        return bool(sp.simplify(self.certificate).is_nonnegative)


@dataclass(frozen=True)
class Fact:
    text: str  # LaTeX (math mode)
    why: str
    check: Callable[[], bool]

    relation = None

    def verify(self) -> bool:
        return bool(self.check())


Step = Equal | AtMost | Fact


@dataclass(frozen=True)
class Derivation:
    steps: tuple[Step, ...]
    notes: tuple[str, ...] = ()

    def failures(self) -> list[tuple[int, Step]]:
        """(position, step) of every step whose relation does not verify."""
        return [(n, step) for n, step in enumerate(self.steps, 1) if not step.verify()]

    def check(self) -> None:
        failed = self.failures()
        if failed:
            n, step = failed[0]
            raise DerivationError(f"step {n} does not verify ({step.why})")
