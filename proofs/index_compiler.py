"""Turn an index-notation SymPy expression into a float64 numpy function (the oracles' generator).

An expression in ``x[i]``, ``gamma[j]``, ``KroneckerDelta(i, j)``, row sums ``Sum(f(k), (k, 1, d))``
and scalar symbols compiles to a function of an environment ``{name: array}``: an IndexedBase named
``x`` reads ``env["x"]`` (shape ``[..., d]``, leading axes broadcast), a scalar symbol reads
``env[name]`` (a number or an array over the leading axes), ``d`` is the row width. The result has
one trailing axis per free index (``free``, in order): ``y_i`` gives ``[..., d]``, ``J_ij`` gives
``[..., d, d]``, an index-free expression gives ``[...]``. Row sums become numpy sums over the last
axis; everything else goes through :func:`sympy.lambdify`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import sympy as sp

from proofs.algebra import d as width_symbol

Env = dict[str, object]
_NODES = (sp.Indexed, sp.Sum, sp.KroneckerDelta)


def compile_indexed(expr: sp.Expr, free: Sequence[sp.Symbol]) -> Callable[[Env], np.ndarray]:
    """A numpy function of an environment evaluating ``expr`` with trailing axes for ``free``."""
    return _compile(_hoisted(sp.sympify(expr)), tuple(free))


def _hoisted(expr: sp.Expr) -> sp.Expr:
    """Every row sum split into terms, with the factors free of its index outside (O(d) work, not O(d^2))."""

    def split(node: sp.Sum) -> sp.Expr:
        (index, _, _), = node.limits
        total = sp.S.Zero
        for term in sp.Add.make_args(sp.expand(node.function)):
            const, dependent = term.as_independent(index, as_Add=False)
            total += const * sp.Sum(dependent, *node.limits)
        return total

    return expr.replace(lambda e: isinstance(e, sp.Sum) and len(e.limits) == 1, split)


def _outermost(expr: sp.Expr) -> list[sp.Expr]:
    found: list[sp.Expr] = []

    def walk(node: sp.Expr) -> None:
        if isinstance(node, _NODES):
            if node not in found:
                found.append(node)
            return
        for arg in node.args:
            walk(arg)

    walk(expr)
    return found


def _compile(expr: sp.Expr, axes: tuple[sp.Symbol, ...]) -> Callable[[Env], np.ndarray]:
    nodes = _outermost(expr)
    placeholders = [sp.Dummy(f"n{n}") for n in range(len(nodes))]
    readers = [_reader(node, axes) for node in nodes]
    body = expr.xreplace(dict(zip(nodes, placeholders, strict=True)))
    scalars = sorted(body.free_symbols - set(placeholders) - set(axes), key=str)
    function = sp.lambdify([*placeholders, *scalars], body, modules="numpy")
    rank = len(axes)

    def evaluate(env: Env) -> np.ndarray:
        args = [read(env) for read in readers]
        for symbol in scalars:
            value = env["d"] if symbol == width_symbol else env[symbol.name]
            args.append(np.reshape(np.asarray(value, dtype=np.float64), np.shape(value) + (1,) * rank))
        return np.asarray(function(*args), dtype=np.float64)

    return evaluate


def _placed(array: np.ndarray, position: int, rank: int) -> np.ndarray:
    """``array`` (last axis the row) with its row axis at trailing axis ``position`` of ``rank``."""
    index = (Ellipsis, *(slice(None) if n == position else None for n in range(rank)))
    return array[index]


def _reader(node: sp.Expr, axes: tuple[sp.Symbol, ...]) -> Callable[[Env], np.ndarray]:
    rank = len(axes)
    if isinstance(node, sp.Indexed):
        name, (index,) = node.base.label.name, node.indices
        position = axes.index(index)
        return lambda env: _placed(np.asarray(env[name], dtype=np.float64), position, rank)
    if isinstance(node, sp.KroneckerDelta):
        first, second = (axes.index(a) for a in node.args)

        def kronecker(env: Env) -> np.ndarray:
            eye = np.eye(int(env["d"]))
            index = tuple(slice(None) if n in (first, second) else None for n in range(rank))
            return eye[index]

        return kronecker
    (index, lower, upper), = node.limits
    if (lower, upper) != (1, width_symbol):
        raise ValueError(f"only whole-row sums compile, not {node}")
    body = _compile(node.function, (*axes, index))

    def row_sum(env: Env) -> np.ndarray:
        terms = np.asarray(body(env))
        terms = np.reshape(terms, (1,) * (rank + 1 - terms.ndim) + terms.shape)
        if terms.shape[-1] == 1:  # a body constant along the row: d equal terms
            return terms[..., 0] * env["d"]
        return np.sum(terms, axis=-1)

    return row_sum
