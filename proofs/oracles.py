"""Float64 reference functions, compiled from the derived SymPy expressions (proofs.expressions).

All functions act on the last axis and broadcast over the leading ones; ``weight`` and ``bias`` may
be None (no scale: gamma = 1; no shift: beta = 0). Nothing here is retyped: each function evaluates
an expression the derivations produced and check (claims ln.jacobian, ln.spectral_norm, ...). The
LN expressions are evaluated in the centred row c = x - mu with mu and sigma^2 by two passes, so no
cancellation happens in float64. SymPy, the derivation and the compilation run on first use (cached),
so importing this module costs only numpy.

Undefined points: where sigma^2 + eps = 0 (LN: a constant row with eps = 0) or q + eps = 0
(RMSNorm: a zero row with eps = 0) the function is 0/0, and every output of that row is NaN, never a
finite value (the gradients and the spectral norm too), however the row's mean rounds: a constant row
is detected exactly (all elements equal) and centred to exact zeros. No warning is emitted for them.

>>> x = np.full(3, 3.7)  # its float64 mean is not 3.7: the naive formula turns 0/0 into -1
>>> float(x.mean() - 3.7) != 0, ((x - x.mean()) / x.std()).tolist()
(True, [-1.0, -1.0, -1.0])
>>> layernorm(x, None, None, 0.0).tolist()
[nan, nan, nan]
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import sympy as sp

ArrayLike = np.ndarray | float

_NORM_KEYS = {"layernorm": "ln", "ln": "ln", "rmsnorm": "rms", "rms": "rms"}


def norm_key(kind: str) -> str:
    """The short key ("ln" or "rms") of a norm named "layernorm"/"ln" or "rmsnorm"/"rms" (both spellings are public).

    >>> norm_key("layernorm"), norm_key("rms")
    ('ln', 'rms')
    >>> norm_key("groupnorm")
    Traceback (most recent call last):
    ...
    ValueError: unknown kind 'groupnorm': expected 'layernorm' (or 'ln') or 'rmsnorm' (or 'rms')
    """
    if kind not in _NORM_KEYS:
        raise ValueError(f"unknown kind {kind!r}: expected 'layernorm' (or 'ln') or 'rmsnorm' (or 'rms')")
    return _NORM_KEYS[kind]


def _without(expr: sp.Expr, weight: bool, bias: bool) -> sp.Expr:
    """expr with gamma = 1 when there is no weight and beta = 0 when there is no bias."""
    import sympy as sp

    from proofs import algebra as sym
    from proofs import expressions
    if not weight:
        expr = expressions.unit_weight(expr)
    if not bias:
        expr = expr.replace(lambda e: isinstance(e, sp.Indexed) and e.base == sym.beta, lambda e: sp.S.Zero)
    return expr


@cache
def _compiled(kind: str, what: str, weight: bool, bias: bool = False):
    """The oracle ``what`` of ``kind`` compiled once per process, from its expression derived once per version of
    the derivations (proofs.disk_cache: the derivation is most of a worker's first oracle call)."""
    from proofs import algebra as sym
    from proofs import disk_cache
    from proofs.index_compiler import compile_indexed

    name = f"oracle-{kind}-{what}-{'weight' if weight else 'unit'}-{'bias' if bias else 'none'}"
    expression = disk_cache.expression(name, lambda: _derived(kind, what, weight, bias))
    free = (sym.i, sym.j) if what == "jacobian" else ((sym.i,) if what == "output" else (sym.j,))
    return compile_indexed(expression, free)


def _derived(kind: str, what: str, weight: bool, bias: bool) -> sp.Expr:
    """The derived expression of the oracle ``what`` (LN: in the centred row), without the absent parameters."""
    from proofs import expressions

    derived = {
        "output": lambda: expressions.output(kind),
        "jacobian": lambda: expressions.jacobian(kind),
        "vjp_x": lambda: expressions.vjp_x(kind),
        "vjp_weight": lambda: expressions.vjp_weight(kind),
        "vjp_bias": expressions.vjp_bias,
    }[what]()
    if kind == "ln":
        derived = expressions.centred(derived)
    return _without(derived, weight, bias)


@cache
def _row_statistics():
    from proofs import algebra as sym
    from proofs.index_compiler import compile_indexed

    return compile_indexed(sym.MEAN_DEF, ()), compile_indexed(sym.MS_DEF, ())


def _environment(kind: str, x_: ArrayLike, eps_: ArrayLike, dy_: ArrayLike | None = None,
                 **rows) -> tuple[dict, np.ndarray]:
    """The evaluation environment of one call and the mask of its undefined rows (leading axes)."""
    row = np.asarray(x_, dtype=np.float64)
    if row.ndim == 0:
        raise ValueError("x must have at least one axis (the row)")
    if dy_ is not None:
        row, upstream = np.broadcast_arrays(row, np.asarray(dy_, dtype=np.float64))
        rows["g"] = upstream
    env = {"x": row, "epsilon": np.asarray(eps_, dtype=np.float64), "d": row.shape[-1]}
    env.update({name: np.asarray(value, dtype=np.float64) for name, value in rows.items() if value is not None})
    mean, mean_square = _row_statistics()
    with np.errstate(invalid="ignore", over="ignore"):  # rows holding inf or NaN give NaN rows
        if kind == "ln":
            # A constant row has mu = x_1 exactly; the float64 mean of e.g. (3.7, 3.7, 3.7) is not, and its
            # residue would turn the 0/0 of sigma^2 + eps = 0 into +-1 (and the spectral norm into ~1e15).
            constant = np.all(row == row[..., :1], axis=-1)
            env["mu"] = np.where(constant, row[..., 0], mean(env))
            env["c"] = row - env["mu"][..., None]
            env["sigma^2"] = np.mean(env["c"] ** 2, axis=-1)  # the two-pass variance: MEAN_DEF of c^2
            scale2 = env["sigma^2"] + env["epsilon"]
        else:
            env["q"] = mean_square(env)
            scale2 = env["q"] + env["epsilon"]
    return env, np.asarray(scale2 == 0)


def _evaluate(kind: str, what: str, env: dict, undefined: np.ndarray, **present: bool) -> np.ndarray:
    """The compiled expression on env, shaped [leading..., d] or [leading..., d, d], NaN on undefined rows."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = _compiled(kind, what, **present)(env)
    rank = 2 if what == "jacobian" else 1
    lead = np.broadcast_shapes(env["x"].shape[:-1], undefined.shape)
    out = np.broadcast_to(out, lead + (env["d"],) * rank).copy()
    out[np.broadcast_to(undefined, lead)] = np.nan
    return out


def layernorm(x: ArrayLike, weight: ArrayLike | None, bias: ArrayLike | None, eps: ArrayLike) -> np.ndarray:
    """gamma * (x - mu)/sqrt(sigma^2 + eps) + beta over the last axis (population variance)."""
    env, undefined = _environment("ln", x, eps, gamma=weight, beta=bias)
    return _evaluate("ln", "output", env, undefined, weight=weight is not None, bias=bias is not None)


def rmsnorm(x: ArrayLike, weight: ArrayLike | None, eps: ArrayLike) -> np.ndarray:
    """gamma * x/sqrt(mean(x^2) + eps) over the last axis."""
    env, undefined = _environment("rms", x, eps, gamma=weight)
    return _evaluate("rms", "output", env, undefined, weight=weight is not None)


def _vjp(kind: str, x_: ArrayLike, weight: ArrayLike | None, eps_: ArrayLike, dy_: ArrayLike):
    env, undefined = _environment(kind, x_, eps_, dy_, gamma=weight)
    dx = _evaluate(kind, "vjp_x", env, undefined, weight=weight is not None)
    lead = tuple(range(dx.ndim - 1))
    dweight = None
    if weight is not None:
        dweight = _evaluate(kind, "vjp_weight", env, undefined, weight=True).sum(axis=lead)
    return env, undefined, lead, dx, dweight


def layernorm_vjp(x: ArrayLike, weight: ArrayLike | None, eps: ArrayLike, dy: ArrayLike):
    """(dL/dx, dL/dweight, dL/dbias) for the upstream gradient dy = dL/dy.

    dL/dweight and dL/dbias are summed over the leading axes (shape [d]); dL/dweight is None when
    weight is None.
    """
    env, undefined, lead, dx, dweight = _vjp("ln", x, weight, eps, dy)
    dbias = _evaluate("ln", "vjp_bias", env, undefined, weight=False).sum(axis=lead)
    return dx, dweight, dbias


def rmsnorm_vjp(x: ArrayLike, weight: ArrayLike | None, eps: ArrayLike, dy: ArrayLike):
    """(dL/dx, dL/dweight) for the upstream gradient dy; dL/dweight summed over leading axes, None without weight."""
    _, _, _, dx, dweight = _vjp("rms", x, weight, eps, dy)
    return dx, dweight


def _jacobian(kind: str, x_: ArrayLike, weight: ArrayLike | None, eps_: ArrayLike) -> np.ndarray:
    env, undefined = _environment(kind, x_, eps_, gamma=weight)
    return _evaluate(kind, "jacobian", env, undefined, weight=weight is not None)


def layernorm_jacobian(x: ArrayLike, weight: ArrayLike | None, eps: ArrayLike) -> np.ndarray:
    """J[..., i, j] = dy_i/dx_j of LN."""
    return _jacobian("ln", x, weight, eps)


def rmsnorm_jacobian(x: ArrayLike, weight: ArrayLike | None, eps: ArrayLike) -> np.ndarray:
    """J[..., i, j] = dy_i/dx_j of RMSNorm."""
    return _jacobian("rms", x, weight, eps)


@cache
def _scalar(expr: sp.Expr, *args: sp.Symbol):
    import sympy as sp

    return sp.lambdify(args, expr, modules="numpy")


@cache
def _eigenvalues(kind: str) -> dict:
    """proofs.expressions.eigenvalues(kind), derived once per version of the derivations (proofs.disk_cache)."""
    from proofs import disk_cache, expressions

    return disk_cache.expression(f"eigenvalues-{kind}", lambda: expressions.eigenvalues(kind))


def _spectral(kind: str, x_: ArrayLike, eps_: ArrayLike) -> np.ndarray:
    from proofs import algebra as sym

    env, undefined = _environment(kind, x_, eps_)
    width = env["x"].shape[-1]
    values = _eigenvalues(kind)
    scale = env["sigma^2"] if kind == "ln" else env["q"]
    named = sym.var if kind == "ln" else sym.ms
    # Which eigenspaces exist (claims ln.spectral_norm / rms.spectral_norm): the complement of
    # span{1, xhat} (LN) has dimension >= 1 iff d >= 3, of span{x} (RMSNorm) iff d >= 2.
    smallest_with_complement = 3 if kind == "ln" else 2
    if width >= smallest_with_complement:
        chosen = values["perp"]
    elif kind == "ln" and width == 1:
        chosen = values["ones"]
    else:
        chosen = values["row"]
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.asarray(_scalar(chosen, named, sym.eps)(scale, env["epsilon"]), dtype=np.float64)
    out = np.array(np.broadcast_to(out, np.broadcast_shapes(out.shape, undefined.shape)))
    out[undefined] = np.nan
    return out


def layernorm_spectral_norm(x: ArrayLike, eps: ArrayLike) -> np.ndarray:
    """||J||_2 of LN with gamma = 1 per row.

    0 (d = 1), eps/(sigma^2+eps)^(3/2) (d = 2), 1/sqrt(sigma^2+eps) (d >= 3).
    """
    return _spectral("ln", x, eps)


def rmsnorm_spectral_norm(x: ArrayLike, eps: ArrayLike) -> np.ndarray:
    """||J||_2 of RMSNorm with gamma = 1 per row: eps/(q+eps)^(3/2) (d = 1), 1/sqrt(q+eps) (d >= 2)."""
    return _spectral("rms", x, eps)


DENSE_SPECTRAL_UP_TO = 64


def weighted_spectral_norm(x: ArrayLike, weight: ArrayLike | None, eps: float, kind: str) -> np.ndarray:
    """||J||_2 per row with per-feature gamma (kind: :func:`norm_key`): ||diag(gamma) P|| / sqrt(s^2) in the
    derivation's terms, at most max|gamma| / sqrt(eps). From the derived VJPs, never retyped: with gamma = 1 the
    Jacobian is symmetric, so J v = gamma * J_1^T v and J^T J v = vjp(gamma, gamma * vjp(1, v)); its largest
    eigenvalue by Lanczos (scipy eigsh, relative tolerance 1e-10) beyond DENSE_SPECTRAL_UP_TO,
    the SVD of the Jacobian below."""
    rows = np.atleast_2d(np.asarray(x, dtype=np.float64))
    norms = [weighted_top_singular(row, weight, eps, kind)[0] for row in rows.reshape(-1, rows.shape[-1])]
    return np.asarray(norms).reshape(rows.shape[:-1])


def weighted_top_singular(row: ArrayLike, weight: ArrayLike | None, eps: float, kind: str) -> tuple[float, np.ndarray]:
    """(||J||_2, a unit top right singular vector v: ||J v|| = ||J||_2) of one row (:func:`weighted_spectral_norm`)."""
    from scipy.sparse.linalg import LinearOperator, eigsh

    kind = norm_key(kind)
    row = np.asarray(row, dtype=np.float64)
    gamma = np.ones(row.shape[-1]) if weight is None else np.asarray(weight, dtype=np.float64)
    if row.shape[-1] <= DENSE_SPECTRAL_UP_TO:
        jacobian = (layernorm_jacobian if kind == "ln" else rmsnorm_jacobian)(row, gamma, eps)
        _, singular, right = np.linalg.svd(jacobian)
        return float(singular[0]), right[0]
    vjp = layernorm_vjp if kind == "ln" else rmsnorm_vjp

    def gram(v: np.ndarray) -> np.ndarray:
        inner = gamma * vjp(row, None, eps, np.ravel(v))[0]
        return vjp(row, gamma, eps, inner)[0]

    operator = LinearOperator((row.size, row.size), matvec=gram, dtype=np.float64)
    top, vectors = eigsh(operator, k=1, which="LA", tol=1e-10, ncv=40)
    return float(np.sqrt(max(top[0], 0.0))), vectors[:, 0]


def spectral_norm_bound(eps: ArrayLike, weight: ArrayLike | None = None) -> np.ndarray:
    """max_i |gamma_i| / sqrt(eps): the global Lipschitz bound of LN and RMSNorm (claim ln.spectral_norm)."""
    from proofs import algebra as sym
    from proofs import expressions

    largest = 1.0 if weight is None else np.max(np.abs(np.asarray(weight, dtype=np.float64)), axis=-1)
    expr = expressions.spectral_norm_bound()
    bound = _scalar(expr, expressions.LARGEST_WEIGHT, sym.eps)
    with np.errstate(divide="ignore"):
        return np.asarray(bound(largest, np.asarray(eps, dtype=np.float64)))


def normalized_variance(var: ArrayLike, eps: ArrayLike) -> np.ndarray:
    """Population variance of (x - mu)/sqrt(sigma^2 + eps) for sigma^2 = var: var/(var + eps)."""
    from proofs import algebra as sym
    from proofs import expressions

    return np.asarray(_scalar(expressions.normalized_variance(), sym.var, sym.eps)(var, eps))


def normalized_variance_sensitivity(var: ArrayLike, eps: ArrayLike) -> np.ndarray:
    """d/d(sigma^2) of the normalized variance: eps/(var + eps)^2."""
    from proofs import algebra as sym
    from proofs import expressions

    derivative = expressions.normalized_variance_sensitivity()
    return np.asarray(_scalar(derivative, sym.var, sym.eps)(var, eps))


def dropout_variance_bias(p: ArrayLike, d: ArrayLike, var: ArrayLike, mean: ArrayLike) -> np.ndarray:
    """E_m[Var(z)] - Var(x) of inverted dropout (population variances): p(d-1)/(d(1-p)) (var + mean^2)."""
    from proofs import algebra as sym
    from proofs import expressions

    symbols = (sym.p, sym.d, sym.var, sym.mu)
    return np.asarray(_scalar(expressions.dropout_variance_bias(), *symbols)(p, d, var, mean))
