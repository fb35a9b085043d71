"""The rounding-error bounds of LayerNorm and RMSNorm kernels on rows (claim numerics.error_model): the public API the
properties call.

The model and its derivation are the SymPy terms of :mod:`proofs.error_terms` (the pieces the claims cite and check);
this module evaluates them on float64 rows, the inputs a kernel received (already rounded), with each sum's factor
refined by the probabilistic model (proofs.probabilistic) and a declared reduction (proofs.reduction):

    forward_bound(x, weight, bias, eps, u_acc, u_out, kind, model)          |y_kernel - y_oracle| per element
    backward_bound(x, weight, eps, dy, u_acc, u_out, kind, model)           (B_dx, B_dweight[, B_dbias])
    identity_bounds(x, weight, eps, dy, u_acc, u_out, kind, model)          the gradient identities' errors per row
    forward_bound_finite, backward_terms_magnitude, residual_backward_bounds, condition_number, unit_roundoff,
    underflow, flush_to_zero_floor

``kind`` is "layernorm"/"ln" or "rmsnorm"/"rms" (proofs.oracles.norm_key); every bound includes the float64 oracle's
own error (the same model at u = 2^-53), is inf where the model does not apply and NaN on undefined rows. The per-row
quantities every bound reads (s, mean|x|/s, kappa, 1/s^2, the normalized row, the kernel's declarations) are one
:class:`RowQuantities`.

>>> import numpy as np
>>> u32 = unit_roundoff("float32")
>>> bound = forward_bound(np.array([[1.0, 2.0, 4.0]]), None, None, 1e-5, u32, u32, "layernorm", "worst-case")
>>> bool((bound < 40 * u32).all())  # a well-conditioned row of width 3: a few dozen u
True
>>> float(condition_number(np.array([1000.0, 1001.0, 999.0]), 0.0))  # |mean|/std: what a kernel must resolve
1224.7...
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from proofs import oracles, probabilistic, reduction
from proofs.error_terms import (
    C_COMBINE,
    C_WEIGHT,
    WORST_GRADIENT_ROUNDINGS,
    WORST_ROUNDINGS,
    backward_functions,
    forward_function,
    rho_function,
)

_UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
# Half the smallest positive subnormal: the absolute error of a rounding that underflows (gradual underflow, IEEE).
_UNDERFLOW = {2.0**-53: 2.0**-1075, 2.0**-24: 2.0**-150, 2.0**-11: 2.0**-25, 2.0**-8: 2.0**-134}
# The smallest positive normal number: the absolute error of a result flushed to zero (FTZ, underflow()).
_SMALLEST_NORMAL = {2.0**-53: 2.0**-1022, 2.0**-24: 2.0**-126, 2.0**-11: 2.0**-14, 2.0**-8: 2.0**-126}

BOUNDS = ("probabilistic", "worst-case")
DEFAULT_BOUND = "probabilistic"


def unit_roundoff(name: str) -> float:
    """u of a dtype name ('float64', 'float32', 'float16', 'bfloat16'; a 'torch.' prefix is accepted)."""
    key = str(name).removeprefix("torch.")
    if key not in _UNIT_ROUNDOFF:
        raise ValueError(f"unknown dtype {name!r}: expected one of {', '.join(_UNIT_ROUNDOFF)}")
    return _UNIT_ROUNDOFF[key]


def condition_number(x: np.ndarray, eps: float | np.ndarray) -> np.ndarray:
    """kappa = sqrt((mu^2 + sigma^2)/(sigma^2 + eps)) per row (last axis); inf where sigma^2 + eps = 0."""
    row = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        mu = row.mean(axis=-1)
        var = np.mean((row - mu[..., None]) ** 2, axis=-1)
        out = np.sqrt((mu**2 + var) / (var + np.asarray(eps, dtype=np.float64)))
    return np.where(var + np.asarray(eps) == 0, np.inf, out)


@dataclass(frozen=True)
class RowQuantities:
    """What the bounds read of a row, in float64 (the row axis kept, length 1), and the kernel's declarations.

    s = sqrt(sigma^2 + eps) (LN) or sqrt(mean(x^2) + eps) (RMS); ``normalized`` is (x - mu)/s or x/s (the row's
    shape). The oracle's quantities declare nothing (IEEE underflow, any summation order); a kernel's come from
    :func:`_declared`: its ``declared`` reduction shape (read by :func:`statistic_factors`), its ``flush_to_zero``
    (read by :meth:`eta`), and kappa 0 where it declares a two-pass variance.
    """

    normalized: np.ndarray
    mean_abs: np.ndarray  # mean|x| / s
    kappa: np.ndarray  # sqrt(mean(x^2)) / s: the condition number of the row
    inv_s2: np.ndarray  # 1 / s^2: inf on undefined rows
    s: np.ndarray
    eps: float | np.ndarray  # as the caller gave it (the oracle is evaluated with it)
    declared: reduction.Reduction | None = None  # the kernel's declared reduction shape (None: any order)
    flush_to_zero: bool = False

    @classmethod
    def of(cls, row: np.ndarray, eps: float | np.ndarray, kind: str) -> RowQuantities:
        """The quantities of the float64 rows ``row`` (last axis) for the norm ``kind`` ("ln" or "rms")."""
        eps_row = np.asarray(eps, dtype=np.float64)
        eps_row = eps_row[..., None] if eps_row.ndim else eps_row
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # inf/NaN rows give NaN bounds
            centred = row - row.mean(axis=-1, keepdims=True) if kind == "ln" else row
            s2 = np.mean(centred**2, axis=-1, keepdims=True) + eps_row
            s = np.sqrt(s2)
            return cls(normalized=centred / s, mean_abs=np.mean(np.abs(row), axis=-1, keepdims=True) / s,
                       kappa=np.sqrt(np.mean(row**2, axis=-1, keepdims=True)) / s, inv_s2=1.0 / s2, s=s, eps=eps)

    def eta(self, u_value: float) -> float:
        """:func:`underflow` in the format of ``u_value`` as this kernel (or the IEEE float64 oracle) underflows."""
        return underflow(u_value, self.flush_to_zero)


def underflow(u_value: float, flush_to_zero: bool = False) -> float:
    """eta, the absolute error of one operation whose result underflows, in the format of unit roundoff u_value.

    Gradual underflow (IEEE): a result below the smallest normal N is rounded on the subnormal grid of spacing
    2 eta, so |fl(v) - v| <= eta = half the smallest subnormal. Flush-to-zero (a kernel's ``flush_to_zero``): a
    result |v| < N becomes 0 (and a subnormal operand is read as 0, the same error one operation earlier), so
    |fl(v) - v| < N: eta = N. In t = fl(var + eps) the model's term (d + 5) eta / s^2 then exceeds 1 wherever
    s^2 = var + eps < (d + 5) N: the bound is inf (not covered) wherever FTZ can make rstd = 1/sqrt(0) = inf
    (t < N: flushed to 0), and it is at most u above :func:`flush_to_zero_floor`.
    """
    return (_SMALLEST_NORMAL if flush_to_zero else _UNDERFLOW).get(float(u_value), 0.0)


def flush_to_zero_floor(width: int, u_acc: float) -> float:
    """The smallest s^2 = var + eps at which flushing to zero costs a kernel at most u_acc relative in t = var + eps:
    rho_t's underflow term (d + 5) eta / s^2 with eta = N, the smallest normal (:func:`underflow`), is at most u_acc
    for s^2 >= (d + 5) N / u_acc. Above it every subnormal that a flush can remove (a square, a partial sum, eps
    itself) is below u_acc s^2 / (d + 5); below N itself t is flushed to 0 and rstd = 1/sqrt(0) = inf."""
    return (width + 5) * underflow(u_acc, flush_to_zero=True) / u_acc


def _check_model(model: str) -> str:
    if model not in BOUNDS:
        raise ValueError(f"unknown bound {model!r}: expected one of {', '.join(BOUNDS)}")
    return model


def _lam(model: str, events: int) -> float | None:
    """lambda of the probabilistic model for ``events`` sums in one evaluation; None for the worst case."""
    return probabilistic.lam(events) if _check_model(model) == "probabilistic" else None


def _at_most(worst: np.ndarray, *relative: np.ndarray) -> np.ndarray:
    """min(worst, prod(1 + e) - 1): a composed probabilistic factor never exceeds the worst case it refines."""
    product = 1.0
    for e in relative:
        product = product * (1 + np.asarray(e))
    return np.minimum(worst, product - 1)


def statistic_factors(kind: str, q: RowQuantities, u_acc: float, lam_value: float | None, row: np.ndarray) -> tuple:
    """(phi_mu, phi_v) per row, axis kept: the worst case error_terms.WORST_CASE_FACTORS, or with the probabilistic
    sum factor (proofs.probabilistic.sum_factor) in place of gamma_{d-1} where the model applies. With a declared
    reduction (q.declared, proofs.reduction) the sums' d - 1 additions become its depth D (both models), and a declared
    exact tree gives the probabilistic factor its own sum_v A_v^2 (ATen's row moments: :func:`moments_factors`)."""
    factors = _shape_factors(kind, q, u_acc, lam_value, row)
    if _moments_tree(kind, q.declared, row.shape[-1]):
        return moments_factors(q, u_acc, lam_value, row, factors)
    return factors


def _shape_factors(kind: str, q: RowQuantities, u_acc: float, lam_value: float | None, row: np.ndarray) -> tuple:
    width, g = row.shape[-1], probabilistic.gamma
    declared = q.declared
    depth = reduction.depth(declared, width)
    mean_k, var_k = WORST_ROUNDINGS[kind]
    shape = (*row.shape[:-1], 1)
    phi_mean = np.zeros(shape) if mean_k is None else np.full(shape, g(depth + 1 + mean_k, u_acc))
    phi_var = np.full(shape, g(depth + 1 + var_k, u_acc))
    inflation = 1 + g(min(depth, width - 1), u_acc)

    def factor(terms: np.ndarray) -> np.ndarray:
        tree = None if declared is None else declared.tree_sums(terms, inflation)
        exact, linear = (None, None) if tree is None else tree
        split = None if declared is None or lam_value is None else \
            declared.tree_split(terms, inflation, u_acc, lam_value)
        return probabilistic.sum_factor(terms, u_acc, lam_value, depth=depth, exact=exact, linear=linear,
                                        split=split)

    if kind == "ln":
        phi_mean = _at_most(phi_mean, factor(row), g(2, u_acc))
        square_error = g(3, u_acc)
    else:
        square_error = g(1, u_acc)
    squares = np.square(q.normalized * q.s)  # the kernel's own terms, (x - mu)^2 or x^2: their binades count
    phi_var = _at_most(phi_var, square_error, factor(squares), g(3, u_acc))
    return phi_mean, phi_var


def _moments_tree(kind: str, declared: reduction.Reduction | None, width: int) -> bool:
    """Whether the statistics follow ATen's row moments node by node (proofs.aten_moments) for this row width."""
    return kind == "ln" and declared is not None and declared.exact_tree == "aten_moments" and \
        declared.declared_for(width)


def moments_factors(q: RowQuantities, u_acc: float, lam_value: float | None, row: np.ndarray, factors: tuple) -> tuple:
    """(phi_mu, phi_v) of a LayerNorm whose statistics are ATen's row moments (exact_tree="aten_moments"), node by
    node (proofs.aten_moments.error_bounds): |mu_hat - mu| <= e_m and |M2_hat - M2| <= e_2, probabilistic (the Gram
    matrix of the first-order rounding coefficients) where the model applies and that is smaller, else the
    first-order worst case over the same nodes; t = fl(fl(M2/d) + eps) adds two roundings. The Welford coupling of
    the mean's error into M2 is inside e_2, so kappa leaves rho_t (:func:`_declared`); where the declared shape's own
    factors (``factors``, with the first-order Welford term 2 phi_mu kappa folded into phi_v) are smaller, they are
    used."""
    from proofs import aten_moments

    phi_mean, phi_var = factors
    g, width = probabilistic.gamma, row.shape[-1]
    kappa = np.sqrt(np.mean(row**2, axis=-1, keepdims=True)) / q.s
    folded = _at_most(np.inf, phi_var, 2 * phi_mean * kappa)
    depth, lanes = reduction.depth(q.declared, width), q.declared.lanes
    state = aten_moments.row_moments(row, lanes, u_acc)
    tree = {}
    for lam in {None, lam_value}:
        e_mean, e_m2 = aten_moments.error_bounds(row, lanes, u_acc, lam, depth, state)
        with np.errstate(divide="ignore", invalid="ignore"):
            tree[lam] = (np.nan_to_num((e_mean / np.mean(np.abs(row), axis=-1))[..., None], nan=np.inf),
                         _at_most(np.inf, (e_m2 / width)[..., None] * q.inv_s2, g(2, u_acc)))
    modelled = aten_moments.modelled(row, u_acc) if lam_value is not None else (False, False)
    chosen = [np.where(model, np.minimum(chance, worst), worst)
              for model, chance, worst in zip(modelled, tree[lam_value], tree[None], strict=True)]
    return np.minimum(phi_mean, chosen[0]), np.minimum(folded, chosen[1])


def _forward_bound_at(kind: str, row: np.ndarray, q: RowQuantities, weight, bias, u_acc: float, u_out: float,
                      factors: tuple) -> np.ndarray:
    scale = np.ones(row.shape[-1]) if weight is None else np.abs(np.asarray(weight, dtype=np.float64))
    exact = oracles.layernorm(row, weight, bias, q.eps) if kind == "ln" else oracles.rmsnorm(row, weight, q.eps)
    function = forward_function(kind)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return function(row.shape[-1], u_acc, u_out, q.eta(u_acc), q.eta(u_out), *factors, q.mean_abs,
                        q.kappa, q.inv_s2, np.abs(q.normalized), scale, np.abs(exact))


def forward_bound(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, eps: float,
                  u_acc: float, u_out: float, kind: str, model: str = DEFAULT_BOUND, *,
                  declared: reduction.Reduction | None = None, flush_to_zero: bool = False) -> np.ndarray:
    """Per-element bound B with |y_kernel - y_oracle| <= B (the model of proofs.error_terms), shape of x.

    ``model``: "probabilistic" (default: the sums' factors of proofs.probabilistic, exceeded by a correct kernel
    with probability at most probabilistic.FALSE_ALARM per call) or "worst-case" (always holds).
    ``declared``: the kernel's declared reduction shape (proofs.reduction), None for a sum in any order.
    Includes the float64 oracle's own error. inf where the model does not apply (d u_acc too large,
    rho_t >= 1) and NaN where the function is undefined (sigma^2 + eps = 0).
    """
    kind = oracles.norm_key(kind)
    row = np.asarray(x, dtype=np.float64)
    q = RowQuantities.of(row, eps, kind)
    kernel_q = _declared(q, declared, row.shape[-1], flush_to_zero)
    factors, rho_t = _forward_rho(kind, row, kernel_q, u_acc, model)
    kernel = _forward_bound_at(kind, row, kernel_q, weight, bias, u_acc, u_out, factors)
    oracle = _forward_bound_at(kind, row, q, weight, bias, 2.0**-53, 2.0**-53,
                               statistic_factors(kind, q, 2.0**-53, None, row))
    return _where_valid(kernel + oracle, row.shape[-1], u_acc, rho_t, q.inv_s2)


def _forward_rho(kind: str, row: np.ndarray, q: RowQuantities, u_acc: float, model: str) -> tuple:
    """The statistic factors of the model and rho_t, per row."""
    rows = int(np.prod(row.shape[:-1]))
    factors = statistic_factors(kind, q, u_acc, _lam(model, rows * (2 if kind == "ln" else 1)), row)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rho_t = rho_function(kind)(row.shape[-1], u_acc, q.eta(u_acc), *factors, q.mean_abs, q.kappa,
                                    q.inv_s2)
    return factors, rho_t


def statistics_bounds(x: np.ndarray, eps: float, u_acc: float, model: str = "worst-case", *,
                      declared: reduction.Reduction | None = None, flush_to_zero: bool = False
                      ) -> tuple[np.ndarray, np.ndarray]:
    """(e_mu, e_v) per row (last axis dropped): the computed LayerNorm statistics of the rows x, accumulated with unit
    roundoff u_acc, satisfy |mu_hat - mu| <= e_mu and |sigma_hat^2 - sigma^2| <= e_v, the model of
    :func:`forward_bound` read at the statistics instead of y:

        e_mu = phi_mu mean|x|,    e_v = (rho_t + u_acc (1 + rho_t)) s^2,   s^2 = sigma^2 + eps,

    since t = fl(sigma_hat^2 + eps) = (sigma_hat^2 + eps)(1 + delta), |delta| <= u_acc, lies within rho_t s^2 of s^2,
    so |sigma_hat^2 - sigma^2| = |t/(1 + delta) - s^2| <= rho_t s^2 + u_acc |t| (the eps the kernel adds only
    widens the bound of a variance taken without it). inf where the model does not apply (rho_t >= 1 or the row
    too wide for u_acc). Condition: the statistics are the forward's (two-pass, Welford or Chan merges in any order;
    a one-pass E[x^2] - E[x]^2 is outside the model, as for y).

    >>> e_mu, e_v = statistics_bounds(np.array([[1.0, 2.0, 3.0, 4.0]]), 1e-5, 2.0**-24)
    >>> bool(e_mu[0] < 1e-6 and e_v[0] < 1e-5)
    True
    """
    row = np.asarray(x, dtype=np.float64)
    q = _declared(RowQuantities.of(row, eps, "ln"), declared, row.shape[-1], flush_to_zero)
    factors, rho_t = _forward_rho("ln", row, q, u_acc, model)
    with np.errstate(invalid="ignore", over="ignore"):
        e_mu = (factors[0] * np.mean(np.abs(row), axis=-1, keepdims=True))[..., 0]
        e_v = ((rho_t + u_acc * (1 + rho_t)) * q.s**2)[..., 0]
    valid = (rho_t[..., 0] < 1) & ((row.shape[-1] + 9) * u_acc < 1)
    return np.where(valid, e_mu, np.inf), np.where(valid, e_v, np.inf)


def forward_bound_finite(x: np.ndarray, eps: float, u_acc: float, kind: str, model: str = DEFAULT_BOUND, *,
                         declared: reduction.Reduction | None = None, flush_to_zero: bool = False) -> bool:
    """Whether :func:`forward_bound` is finite on every row of x (rho_t < 1, (d + 9) u_acc < 1, sigma^2 + eps > 0),
    without evaluating it."""
    kind = oracles.norm_key(kind)
    row = np.asarray(x, dtype=np.float64)
    q = RowQuantities.of(row, eps, kind)
    rho_t = _forward_rho(kind, row, _declared(q, declared, row.shape[-1], flush_to_zero), u_acc, model)[1]
    return bool(np.all(np.isfinite(_where_valid(np.zeros_like(rho_t), row.shape[-1], u_acc, rho_t, q.inv_s2))))


def _declared(q: RowQuantities, declared: reduction.Reduction | None, width: int,
              flush_to_zero: bool = False) -> RowQuantities:
    """The row quantities of the kernel (the oracle's are q itself): its ``flush_to_zero`` (its underflow, read by
    :meth:`RowQuantities.eta`), and with a declared reduction that shape (read by :func:`statistic_factors`) and
    kappa 0 where it declares a two-pass variance (kappa enters the bound only through the first-order Welford term
    2 phi_mu kappa of rho_t; a two-pass variance has the mean's error only squared, d e^2)."""
    if declared is None:
        return replace(q, flush_to_zero=flush_to_zero)
    welford = declared.welford(width) and not _moments_tree("ln", declared, width)  # moments: in phi_v
    return replace(q, declared=declared, kappa=q.kappa if welford else np.zeros_like(q.kappa),
                   flush_to_zero=flush_to_zero)


def _where_valid(bound: np.ndarray, width: int, u_acc: float, rho_t: np.ndarray, inv_s2: np.ndarray) -> np.ndarray:
    """NaN on undefined rows (sigma^2 + eps = 0), inf where the model does not apply (rho_t >= 1 or
    (d + 9) u >= 1), the bound elsewhere."""
    valid = ((width + 9) * u_acc < 1) & (rho_t < 1)
    return np.where(np.isinf(inv_s2), np.nan, np.where(valid, bound, np.inf))


def _gradient_factors(width: int, u_acc: float, lam_value: float | None, g_prime: np.ndarray,
                      c2_terms: np.ndarray) -> tuple:
    """(phi_1, phi_2) per row: error_terms.WORST_CASE_BACKWARD_FACTORS, refined by the probabilistic sum factor."""
    g = probabilistic.gamma
    shape = (*g_prime.shape[:-1], 1)
    first, second = (np.full(shape, g(width + k, u_acc)) for k in WORST_GRADIENT_ROUNDINGS)
    if lam_value is None:
        return first, second
    first = _at_most(first, g(1 + C_WEIGHT, u_acc), probabilistic.sum_factor(g_prime, u_acc, lam_value),
                     g(2, u_acc))
    second = _at_most(second, g(2 + C_WEIGHT, u_acc), probabilistic.sum_factor(c2_terms, u_acc, lam_value),
                      g(2, u_acc))
    return first, second


@dataclass(frozen=True)
class BackwardPieces:
    """The pieces of one evaluation of the backward bound (names as in proofs.error_terms.backward_terms): the bounds
    themselves (per element dx; dweight, dbias per feature) and what the identities' bounds reuse, per row (axis kept)
    or per element."""

    dx: np.ndarray  # the bound on |dx^_j - dx_j| of this evaluation (the kernel's, or the oracle's)
    dweight: np.ndarray | None  # None without a weight
    dbias: np.ndarray
    rho_t: np.ndarray  # the relative error of t = fl(var + eps), per row
    g_prime: np.ndarray  # g' = gamma dy
    xi: np.ndarray  # Xi_j: the error of the recomputed normalized element
    eps_r: np.ndarray  # the relative error of r^ = 1/sqrt(t)
    mean_error: np.ndarray  # |mu^ - mu| / s
    c1: np.ndarray  # mean(g')
    c2: np.ndarray  # mean(g' xhat)
    dc1: np.ndarray  # the errors of c1^ and c2^
    dc2: np.ndarray
    exact_dx: np.ndarray  # r (g' - c1 - xhat c2), exactly
    magnitude: np.ndarray  # |g'^_j| + |c1^| + |x^_j c2^| at most: the magnitude of the combination's terms


def _backward_pieces(kind: str, row: np.ndarray, q: RowQuantities, weight: np.ndarray | None, dy: np.ndarray,
                     u_acc: float, u_out: float, lam_value: float | None, u_weight: float | None = None,
                     u_bias: float | None = None) -> BackwardPieces:
    """The per-row and per-element pieces of the backward bound (names as in proofs.error_terms.backward_terms);
    dweight and dbias stored with u_weight and u_bias (default u_out, dx's)."""
    u_weight = u_out if u_weight is None else u_weight
    u_bias = u_out if u_bias is None else u_bias
    xi_of, eps_r_of, dx_of = backward_functions(kind)
    width = row.shape[-1]
    scale = np.ones(width) if weight is None else np.asarray(weight, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        factors = statistic_factors(kind, q, u_acc, lam_value, row)
        row_args = (width, u_acc, q.eta(u_acc), *factors, q.mean_abs, q.kappa, q.inv_s2)
        normalized = np.abs(q.normalized)
        xi_j = xi_of(*row_args, normalized)
        g_prime = scale * dy
        first, second = mean(g_prime), mean(g_prime * q.normalized)
        exact_dx = (g_prime - (first if kind == "ln" else 0) - q.normalized * second) * np.sqrt(q.inv_s2)
        magnitudes = np.abs(g_prime) * (normalized + xi_j)
        phi_first, phi_second = _gradient_factors(width, u_acc, lam_value, g_prime, magnitudes)
        eps_r = eps_r_of(*row_args)
        dx = dx_of(width, u_acc, u_out, q.eta(u_out), q.inv_s2, np.abs(g_prime), normalized, xi_j,
                   mean(np.abs(g_prime)), mean(magnitudes), mean(np.abs(g_prime) * xi_j),
                   np.abs(first), np.abs(second), np.abs(exact_dx), eps_r, phi_first, phi_second)
        flat = (-1, width)
        lead = tuple(range(row.ndim - 1))
        dweight = None
        if weight is not None:
            terms = (np.abs(dy) * (normalized + xi_j)).reshape(flat)
            exact = np.abs((dy * q.normalized).sum(axis=lead))
            factor = probabilistic.sum_factor(terms, u_acc, lam_value, 0, (dy * q.normalized).reshape(flat))[0]
            dweight = (np.abs(dy) * xi_j).sum(axis=lead) + _composed_with_product(factor, u_acc) * terms.sum(axis=0)
            dweight = dweight + (exact + dweight) * u_weight + q.eta(u_weight)
        upstream = dy.reshape(flat)
        dbias = probabilistic.sum_factor(upstream, u_acc, lam_value, 0)[0] * np.abs(dy).sum(axis=lead)
        dbias = dbias + (np.abs(dy.sum(axis=lead)) + dbias) * u_bias + q.eta(u_bias)
        rho_t = rho_function(kind)(*row_args)
        dc1 = phi_first * mean(np.abs(g_prime)) if kind == "ln" else np.zeros_like(first)
        dc2 = phi_second * mean(magnitudes) + mean(np.abs(g_prime) * xi_j)
        # |g'^_j| + |c1^| + |x^_j c2^| at most: the magnitude of the combination's terms (backward_terms)
        magnitude = (np.abs(g_prime) * (1 + probabilistic.gamma(1 + C_WEIGHT, u_acc)) + np.abs(first) + dc1
                     + (normalized + xi_j) * (np.abs(second) + dc2))
    return BackwardPieces(dx=dx, dweight=dweight, dbias=dbias, rho_t=rho_t, g_prime=g_prime, xi=xi_j, eps_r=eps_r,
                          mean_error=factors[0] * q.mean_abs, c1=first, c2=second, dc1=dc1, dc2=dc2, exact_dx=exact_dx,
                          magnitude=magnitude)


def _rounding_sum(values: np.ndarray, bound: float, lam_value: float | None, rounded: np.ndarray,
                  u_round: float | None = None) -> np.ndarray:
    """Bound on |sum_i delta_i v_i| (row axis kept) for one rounding-size error |delta_i| <= ``bound`` per element:
    bound sum|v| (worst case), or bound lambda sqrt(sum_g (sum_{i in g} |v_i|)^2) (Azuma over the groups g of equal
    ``rounded`` values, the values whose roundings these are: equal ones round alike, probabilistic.grouped) where
    the model applies: the values are independent (probabilistic.independent) and, with ``u_round``, the rounded
    values' residues modulo their ulps at that unit roundoff are not concentrated (probabilistic.concentrated: a
    16-bit grid shifted by a row constant and stored keeps the constant's residue, its roundings share a sign)."""
    worst = bound * np.sum(np.abs(values), axis=-1, keepdims=True)
    if lam_value is None:
        return worst
    chance = lam_value * bound * np.sqrt(np.sum(np.square(probabilistic.grouped(values, rounded)), axis=-1,
                                                keepdims=True))
    modelled = probabilistic.independent(values)
    if u_round is not None:
        modelled = modelled & ~probabilistic.concentrated(rounded, u_round)
    return np.where(modelled, np.minimum(worst, chance), worst)


def identity_bounds(x: np.ndarray, weight: np.ndarray | None, eps: float, dy: np.ndarray, u_acc: float,
                    u_out: float, kind: str, model: str = DEFAULT_BOUND, *,
                    declared: reduction.Reduction | None = None, flush_to_zero: bool = False) -> dict[str, np.ndarray]:
    """Bounds on the errors of the gradient identities of a kernel's dx, per row, from their cancellation
    (claim ln.gradient_identities), not from summed element bounds: {"sum": |sum_i dx_i - 0| (LayerNorm),
    "c_dot": |c . dx - (eps/s^2) c . g'/s|}, c = x - mu (LN) or x (RMS), g' = gamma dy, r = 1/s.

    The computed dx_i = r^ (g^_i - c1^ - x^_i c2^)(1 + rho_i)(1 + eta_i) with g^_i = g'_i (1 + alpha_i),
    x^_i = (c_i - e) r^ (1 + theta_i), r^ = r (1 + eps_r), c1^ = c1 + e1, c2^ = c2 + e2 (the pieces of
    :func:`proofs.error_terms.backward_terms`). Since sum_i c_i = 0 and sum_i xhat_i = 0 (LayerNorm), to first order
        sum_i dx_i = r [sum_i alpha_i g'_i - d e1 - (c2 + e2) sum_i (xhat_i theta_i - e r)] + combination roundings:
    neither eps_r nor the per-element values survive (they did in sum_i B_i);
        c . dx - value = r (1 + eps_r)[sum c_i alpha_i g'_i - e2 c . x^ - c2 sum c_i xhat_i theta_i + ...]
                         - (2 eps_r + eps_r^2) r (c . g') sigma^2 r^2 + eps_r value:
    the mean error e and e1 cancel (they multiply sum_i c_i = 0). Each sum of per-element roundings is bounded by
    :func:`_rounding_sum` (worst case, or the probabilistic model).
    """
    kind = oracles.norm_key(kind)
    row, upstream = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(dy, dtype=np.float64))
    q = RowQuantities.of(row, eps, kind)
    rows, width = int(np.prod(row.shape[:-1])), row.shape[-1]
    lam_value = _lam(model, rows * 12 + 2 * width)
    q = _declared(q, declared, width, flush_to_zero)  # the kernel's: its underflow below (the oracle's is float64)
    p = _backward_pieces(kind, row, q, weight, upstream, u_acc, u_out, lam_value)
    g = probabilistic.gamma
    g_round, x_round, combine = g(1 + C_WEIGHT, u_acc), g(2 if kind == "ln" else 1, u_acc), g(C_COMBINE, u_acc)
    outer, float64 = (1 + u_acc) * (1 + u_out) - 1, g(width, 2.0**-53)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r, eps_r, xhat, g_prime = np.sqrt(q.inv_s2), p.eps_r, q.normalized, p.g_prime
        centred = xhat / r
        magnitude = p.magnitude
        computed = np.abs(p.exact_dx) + p.dx  # |dx^_i| at most
        # the values rounded: g'_i = gamma_i dy_i (a product), xhat_i (x_i r), the combination g' - c1 - xhat c2
        # (a grid value shifted by row constants: tested for concentrated residues) and dx_i as stored
        combination = p.exact_dx / r
        rounding = {  # sum_i delta_i v_i of the roundings, per row
            "g": _rounding_sum(g_prime, g_round, lam_value, g_prime),
            "cg": _rounding_sum(centred * g_prime, g_round, lam_value, g_prime),
            "x": _rounding_sum(xhat, x_round, lam_value, xhat),
            "cx": _rounding_sum(centred * xhat, x_round, lam_value, xhat),
            "combine": _rounding_sum(magnitude, combine, lam_value, combination, u_acc),
            "c_combine": _rounding_sum(centred * magnitude, combine, lam_value, combination, u_acc),
            "outer": _rounding_sum(computed, outer, lam_value, p.exact_dx, u_out),
            "c_outer": _rounding_sum(centred * computed, outer, lam_value, p.exact_dx, u_out)}
        c2_hat = np.abs(p.c2) + p.dc2
        shared = r * (1 + eps_r)
        cg = np.abs(np.sum(centred * g_prime, axis=-1, keepdims=True))
        spread = 1 - eps * q.inv_s2  # sigma^2 / s^2 (mean(x^2) / s^2 for RMSNorm)
        # xhat as x r - mu r (torch's CPU backward, docs/findings.md [I]; as Xi): fl(x_i r) errs u |x_i| r, which
        # c weights element by element; fl(mu r) errs alike in every element, which c . 1 = 0 cancels and the sum
        # of dx meets d times (2 u E_x, E_x = mean|x| / s, covers both)
        association = u_acc * np.abs(row) * r if kind == "ln" else np.zeros_like(row)
        c_dot = (shared * (rounding["cg"] + p.dc2 * np.sum(np.abs(centred) * (np.abs(xhat) + p.xi), axis=-1,
                                                                 keepdims=True)
                           + c2_hat * (1 + eps_r) * (rounding["cx"] + np.sum(np.abs(centred) * association, axis=-1,
                                                                             keepdims=True) * (1 + x_round))
                           + rounding["c_combine"])
                 + rounding["c_outer"] + eps_r * (2 + eps_r) * r * cg * spread * (1 + eps_r)
                 + eps_r * r * cg * eps * q.inv_s2
                 + np.sum(np.abs(centred), axis=-1, keepdims=True) * q.eta(u_out)  # dx stored subnormal
                 + float64 * (np.sum(np.abs(centred) * computed, axis=-1, keepdims=True) + r * cg))
        found = {"c_dot": c_dot[..., 0]}
        if kind == "ln":
            mean_part = (1 + eps_r) * (rounding["x"] + width * (p.mean_error + 2 * u_acc * q.mean_abs)
                                       * (1 + x_round))
            total = (shared * (rounding["g"] + width * p.dc1 + c2_hat * mean_part + rounding["combine"])
                     + rounding["outer"] + float64 * np.sum(computed, axis=-1, keepdims=True)
                     + width * q.eta(u_out))
            found["sum"] = total[..., 0]
    valid = np.isfinite(p.dx).all(axis=-1)
    return {name: np.where(valid, value, np.inf) for name, value in found.items()}


def _composed_with_product(factor: np.ndarray, u_acc: float) -> np.ndarray:
    """A sum's factor composed with the rounding of its terms' product dy xhat: (1 + f)(1 + u) - 1."""
    return (1 + factor) * (1 + u_acc) - 1


def mean(values: np.ndarray) -> np.ndarray:
    """Row mean, the row axis kept."""
    return np.mean(values, axis=-1, keepdims=True)


def backward_bound(x: np.ndarray, weight: np.ndarray | None, eps: float, dy: np.ndarray,
                   u_acc: float, u_out: float, kind: str, model: str = DEFAULT_BOUND, *,
                   u_weight: float | None = None, u_bias: float | None = None,
                   declared: reduction.Reduction | None = None, flush_to_zero: bool = False) -> tuple:
    """Per-element bounds of the backward: (B_dx, B_dweight, B_dbias) for LN, (B_dx, B_dweight) for RMSNorm.

    Each gradient is stored in its own dtype: dx with ``u_out``, dweight with ``u_weight`` and dbias with ``u_bias``
    (both default ``u_out``: parameters in x's dtype).
    B_dx has the shape of x; B_dweight and B_dbias the shape [d] (the gradients summed over the
    leading axes, in any order: gamma_{rows} for the cross-row sums, or the probabilistic factor);
    B_dweight is None without weight. ``model`` and ``declared`` as in :func:`forward_bound` (the declared shape is
    that of the statistics the backward's xhat comes from; the gradient's own sums stay order-agnostic).
    Includes the float64 oracle's own error; inf where the model does not apply, NaN on undefined rows.
    """
    kind, row, upstream, q, lam_value = _backward_rows(x, eps, dy, kind, model)
    kernel = _backward_pieces(kind, row, _declared(q, declared, row.shape[-1], flush_to_zero), weight, upstream,
                              u_acc, u_out, lam_value, u_weight, u_bias)
    return _bounds_of_pieces(kind, row, q, weight, upstream, kernel, u_acc)


def _backward_rows(x: np.ndarray, eps: float, dy: np.ndarray, kind: str, model: str) -> tuple:
    """(the kind's key, the rows, dy broadcast to them, their RowQuantities, ``model``'s lambda) of a backward
    bound."""
    kind = oracles.norm_key(kind)
    row, upstream = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(dy, dtype=np.float64))
    lam_value = _lam(model, int(np.prod(row.shape[:-1])) * 4 + 2 * row.shape[-1])
    return kind, row, upstream, RowQuantities.of(row, eps, kind), lam_value


def _bounds_of_pieces(kind: str, row: np.ndarray, q: RowQuantities, weight: np.ndarray | None,
                      upstream: np.ndarray, kernel: BackwardPieces, u_acc: float) -> tuple:
    """:func:`backward_bound` from the kernel's pieces: the float64 oracle's own error added, inf where the model
    does not apply, NaN on undefined rows."""
    oracle = _backward_pieces(kind, row, q, weight, upstream, 2.0**-53, 2.0**-53, None)
    dx = _where_valid(kernel.dx + oracle.dx, row.shape[-1], u_acc, kernel.rho_t, q.inv_s2)
    lead = tuple(range(row.ndim - 1))
    any_invalid = ~np.isfinite(dx).all(axis=lead)
    dweight = None if weight is None else np.where(any_invalid, np.inf, kernel.dweight + oracle.dweight)
    dbias = kernel.dbias + oracle.dbias
    return (dx, dweight, dbias) if kind == "ln" else (dx, dweight)


def backward_terms_magnitude(x: np.ndarray, weight: np.ndarray | None, eps: float, dy: np.ndarray, u_acc: float,
                             kind: str, model: str = DEFAULT_BOUND) -> np.ndarray:
    """Per element j, a bound on the magnitude of the terms the backward adds into dx_j, as a kernel computes them:
    r^ (|g'^_j| + |c1^| + |x^_j| |c2^|) <= r (1 + eps_r)(1 + gamma_{C_COMBINE}) (|g'_j| (1 + gamma_{1+C_WEIGHT})
    + |c1| + dc1 + (|xhat_j| + Xi_j)(|c2| + dc2)) (the pieces of proofs.error_terms.backward_terms; |c1| counted for
    RMSNorm too, an overestimate). Every partial sum of those terms, in any order, is at most this: the scale at which a
    composition that adds them one by one (autograd over the uses of x) rounds. inf where the model does not apply."""
    kind, row, upstream, q, lam_value = _backward_rows(x, eps, dy, kind, model)
    return _terms_of_pieces(q, _backward_pieces(kind, row, q, weight, upstream, u_acc, u_acc, lam_value), u_acc)


def _terms_of_pieces(q: RowQuantities, p: BackwardPieces, u_acc: float) -> np.ndarray:
    """:func:`backward_terms_magnitude` from the pieces of an evaluation with u_out = u_acc."""
    with np.errstate(invalid="ignore", over="ignore"):
        scale = np.sqrt(q.inv_s2) * (1 + p.eps_r) * (1 + probabilistic.gamma(C_COMBINE, u_acc))
        magnitude = scale * p.magnitude
    return np.where(np.isfinite(p.dx), magnitude, np.inf)


def residual_backward_bounds(x: np.ndarray, weight: np.ndarray | None, eps: float, dy: np.ndarray, u_acc: float,
                             kind: str, model: str = DEFAULT_BOUND, *, u_weight: float | None = None,
                             u_bias: float | None = None, declared: reduction.Reduction | None = None,
                             flush_to_zero: bool = False) -> tuple[tuple, np.ndarray]:
    """What the backward of a kind with a residual needs of its norm's (properties.bounds.tolerance, fused bounds):
    ``(backward_bound(x, weight, eps, dy, u_acc, u_acc, kind, model, u_weight=u_weight, u_bias=u_bias,
    declared=declared, flush_to_zero=flush_to_zero), backward_terms_magnitude(x, weight, eps, dy, u_acc, kind,
    model))``, equal to those two calls, with one evaluation of the kernel's pieces for both where its row
    quantities are the oracle's (no declared reduction, no flush-to-zero: the terms' magnitude is order-agnostic)."""
    kind, row, upstream, q, lam_value = _backward_rows(x, eps, dy, kind, model)
    kernel = _backward_pieces(kind, row, _declared(q, declared, row.shape[-1], flush_to_zero), weight, upstream,
                              u_acc, u_acc, lam_value, u_weight, u_bias)
    plain = kernel if declared is None and not flush_to_zero else _backward_pieces(
        kind, row, q, weight, upstream, u_acc, u_acc, lam_value)
    return _bounds_of_pieces(kind, row, q, weight, upstream, kernel, u_acc), _terms_of_pieces(q, plain, u_acc)
