"""Second derivatives of LayerNorm and RMSNorm (claims ln.second_order / rms.second_order): the closed form, its
float64 oracle and the rounding-error bound of a kernel that evaluates it.

Per row (last axis), with r = rstd = 1/sqrt(sigma^2 + eps) (LN) or 1/sqrt(mean(x^2) + eps) (RMS), xhat = (x - mu) r
or x r, v = w dy (w the effective weight, 1 without one) and the symmetric

    Jn t = r (t - [mean(t)]_LN - xhat <xhat, t>/d)          (= d xhat / d x applied to t)

the first-order outputs are dx = Jn v, dweight = sum_rows dy xhat, dbias = sum_rows dy. For upstream gradients u
[..., d] of dx, a [d] of dweight and c [d] of dbias, the scalar S = sum_rows <u, dx> + <a, dweight> + <c, dbias> has

    dS/d dy = w Jn u + xhat a + c
    dS/dw   = sum_rows dy Jn u
    dS/dx   = Jn(dy a - r/d <u, xhat> v) - r m Jn u - r^2/d xhat F,
              m = <xhat, v>/d,   F = <u, v> - m <u, xhat> - [mean(v) sum(u)]_LN

(derived in proofs.claims.second_order from d r/dx = -r^2 xhat/d and d xhat/dx = Jn, and checked there against
SymPy's differentiation of the written-out rows). :func:`closed_form` is that formula written once over numpy
arrays: the derivation's Facts evaluate it on arrays of SymPy expressions, :func:`second_order` (the oracle) on
float64 rows, and :func:`second_order_bound` on absolute values.

The bound (rigorous under the model below). Write |P| for the closed form with every leaf replaced by its absolute
value and every minus by a plus (:func:`closed_form` with ``sign=+1`` on absolute leaves): |Jn|(t) = r (|t| + mean|t|
+ |xhat| <|xhat|, |t|>/d), and so on; it is the sum of the absolute values of the closed form's monomials.
Model: the kernel evaluates an expression tree with the closed form's monomials (the closed form itself, in any
order of its sums, or autograd through a two-pass norm, whose graph expands to the same monomials), every path from
a leaf to the output through at most K roundings of unit roundoff u_acc (the backward's accumulation: the
statistics' precision for a kernel declaring ``backward_precision="storage"``), from the leaves
xhat^ = xhat + e, |e| <= Xi, and r^ = r (1 + e_r), |e_r| <= eps_r (the forward error model's pieces:
proofs.error_model's backward pieces, the same Xi and eps_r the first-order bound uses), dy, w, u, a, c exact (the
inputs as received; the effective weight offset + weight one more rounding, counted in K), intermediate results in
the normal range or zero, and for 16-bit x at most STORAGE_ROUNDINGS = 2 more roundings on a path in x's own
precision u_s (an intermediate gradient a backward kernel writes in x's dtype, as ours writes J_n t, or that
autograd passes through a cast of the forward; their factor (1 + u_s)^2 joins (1 + gamma_K)). Each monomial M is then
computed as M(leaves^)(1 + theta_M), |theta_M| <= gamma_K, and

    |M(leaves^)(1 + theta_M) - M(leaves)| <= (1 + gamma_K) |M|(|leaves| + errors) - |M|(|leaves|)

(a product's perturbation is at most the perturbed product of the absolute values minus the exact one), so summed
over the monomials and rounded once more to the output's dtype (unit roundoff u_out):

    |P^ - P| <= (1 + gamma_K)(1 + u_out) |P|(|xhat| + Xi, r (1 + eps_r), |dy|, |w|, |u|, |a|, |c|)
                - |P|(|xhat|, r, |dy|, |w|, |u|, |a|, |c|) + eta(u_out)

plus the float64 oracle's own error (the same at u = 2^-53, its own Xi and eps_r). K is counted from the formula:
a row sum of d products is d roundings deep, a product or a sum of two one; with one more for the effective weight,
K = 2d + 12 for dS/dx (<u, xhat> inside t, then <xhat, t> inside Jn), d + 9 for dS/d dy and d + n + 6 for dS/dw
(n rows summed). inf where gamma_K is (K u_acc >= 1) or where the forward model does not apply (rho_t >= 1), NaN on
undefined rows (sigma^2 + eps = 0).
"""

from __future__ import annotations

import numpy as np

from proofs import oracles, probabilistic, reduction
from proofs.error_model import DEFAULT_BOUND, RowQuantities, _backward_pieces, _declared, _lam

ORACLE_U = 2.0**-53
NAMES = ("dy", "x", "weight")  # the second-order outputs: dS/d dy, dS/dx, dS/dw
STORAGE_ROUNDINGS = 2  # intermediate roundings to a 16-bit x's dtype on a path (module docstring)


def closed_form(xhat, r, dy, w, u, a, c, centred: bool, sign: int = -1) -> tuple:
    """(dS/d dy [..., d], dS/dx [..., d], dS/dw [d]) of the module's formula, on numpy arrays (float64, or object
    arrays of SymPy expressions): xhat, dy, u [..., d]; r [..., 1]; w, a, c [d]. ``sign=+1`` on absolute values gives
    |P|, the sum of the monomials' absolute values."""
    d = xhat.shape[-1]

    def rowsum(t):
        return t.sum(axis=-1, keepdims=True)

    def jn(t):
        out = t + sign * xhat * (rowsum(xhat * t) / d)
        return r * (out + sign * (rowsum(t) / d) if centred else out)

    v = w * dy
    jn_u = jn(u)
    m = rowsum(xhat * v) / d
    f = rowsum(u * v) + sign * m * rowsum(u * xhat)
    if centred:
        f = f + sign * (rowsum(v) / d) * rowsum(u)
    grad_dy = w * jn_u + xhat * a + c
    grad_x = jn(dy * a + sign * (r / d) * rowsum(u * xhat) * v) + sign * r * m * jn_u + sign * (r * r / d) * xhat * f
    grad_w = (dy * jn_u).reshape(-1, d).sum(axis=0)
    return grad_dy, grad_x, grad_w


def _leaves(x, weight, dy, u, a, c) -> tuple:
    row, upstream, up = np.broadcast_arrays(*(np.asarray(t, dtype=np.float64) for t in (x, dy, u)))
    d = row.shape[-1]
    vector = [np.zeros(d) if t is None else np.asarray(t, dtype=np.float64) for t in (a, c)]
    w = np.ones(d) if weight is None else np.asarray(weight, dtype=np.float64)
    return row, upstream, up, w, *vector


def second_order(x, weight, eps, dy, u, a, c, kind: str) -> dict[str, np.ndarray]:
    """The float64 oracle: {"dy": dS/d dy, "x": dS/dx, "weight": dS/dw} for the rows x [..., d] (weight the effective
    weight or None, a and c None for absent parameters); the statistics by two passes, NaN on undefined rows."""
    row, upstream, up, w, a_, c_ = _leaves(x, weight, dy, u, a, c)
    q = RowQuantities.of(row, eps, oracles.norm_key(kind))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = np.sqrt(q.inv_s2)
        values = closed_form(q.normalized, r, upstream, w, up, a_, c_, oracles.norm_key(kind) == "ln")
    return dict(zip(NAMES, values, strict=True))


def depths(width: int, rows: int) -> dict[str, int]:
    """K per output: the most roundings on a path from a leaf (the module docstring)."""
    return {"dy": width + 9, "x": 2 * width + 12, "weight": width + rows + 6}


def _perturbed(q: RowQuantities, xi: np.ndarray, eps_r: np.ndarray, upstream, w, up, a_, c_, centred: bool,
               slack: dict[str, float], u_out: dict[str, float]) -> dict[str, np.ndarray]:
    """(1 + gamma_K)(1 + u_out) |P|(|xhat| + Xi, r (1 + eps_r)) - |P|(|xhat|, r) per output."""
    r = np.sqrt(q.inv_s2)
    absolute = (np.abs(upstream), np.abs(w), np.abs(up), np.abs(a_), np.abs(c_))
    exact = closed_form(np.abs(q.normalized), r, *absolute, centred, sign=1)
    moved = closed_form(np.abs(q.normalized) + xi, r * (1 + eps_r), *absolute, centred, sign=1)
    return {name: (1 + slack[name]) * (1 + u_out[name]) * m - e
            for name, m, e in zip(NAMES, moved, exact, strict=True)}


def second_order_bound(x, weight, eps, dy, u, a, c, u_acc: float, u_out: dict[str, float], kind: str,
                       model: str = DEFAULT_BOUND, *, u_storage: float = 0.0,
                       declared: reduction.Reduction | None = None,
                       flush_to_zero: bool = False) -> dict[str, np.ndarray]:
    """Bounds on |kernel - oracle| of the three second-order outputs (the module docstring), each stored with its
    ``u_out[name]`` ("dy", "x", "weight"); ``model`` and ``declared`` as in proofs.error_model.backward_bound (they
    shape Xi and eps_r); ``u_storage``: the unit roundoff of :data:`STORAGE_ROUNDINGS` more roundings on a path (16-bit
    x: intermediate gradients written in x's dtype), 0 for none. inf where the model does not apply, NaN on undefined
    rows."""
    key = oracles.norm_key(kind)
    row, upstream, up, w, a_, c_ = _leaves(x, weight, dy, u, a, c)
    width, rows = row.shape[-1], int(np.prod(row.shape[:-1]))
    q = RowQuantities.of(row, eps, key)
    lam_value = _lam(model, rows * 4 + 2 * width)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ours_q = _declared(q, declared, width, flush_to_zero)
        kernel = _backward_pieces(key, row, ours_q, weight, upstream, u_acc, u_acc, lam_value)
        oracle = _backward_pieces(key, row, q, weight, upstream, ORACLE_U, ORACLE_U, None)
        k = depths(width, rows)
        ours = _perturbed(q, kernel.xi, kernel.eps_r, upstream, w, up, a_, c_, key == "ln",
                          {name: (1 + probabilistic.gamma(k[name], u_acc)) * (1 + u_storage) ** STORAGE_ROUNDINGS - 1
                           for name in NAMES}, u_out)
        theirs = _perturbed(q, oracle.xi, oracle.eps_r, upstream, w, up, a_, c_, key == "ln",
                            {name: probabilistic.gamma(k[name], ORACLE_U) for name in NAMES},
                            dict.fromkeys(NAMES, ORACLE_U))
    valid = (kernel.rho_t < 1) & np.isfinite(kernel.xi).all(axis=-1, keepdims=True) & ((width + 9) * u_acc < 1)
    undefined = np.isinf(q.inv_s2)
    bounds = {}
    for name in NAMES:
        bound = ours[name] + theirs[name] + ours_q.eta(u_out[name])
        if name == "weight":
            per_row_ok = valid.reshape(-1).all() and not undefined.any()
            bounds[name] = np.where(per_row_ok, bound, np.nan if undefined.any() else np.inf)
        else:
            bounds[name] = np.where(undefined, np.nan, np.where(valid, bound, np.inf))
    return bounds

