"""Rounding-error bounds of LayerNorm and RMSNorm kernels (claim numerics.error_model).

Model (Higham, Accuracy and Stability of Numerical Algorithms, ch. 2-4): every operation in the
accumulation dtype returns fl(a op b) = (a op b)(1 + delta), |delta| <= u (u = u_acc), plus an absolute
error of at most eta (half the smallest subnormal) where the result underflows; storing rounds with
u_out (eta_out). The inputs x, weight, bias, dy are the already-rounded values the kernel received,
exactly representable in the accumulation dtype. Mixed storage (weight/bias in another dtype than x): the
parameters enter exactly as received (float32 parameters with 16-bit x: the accumulation dtype is float32
whenever any operand is 16-bit, so they are exact in it; a kernel that rounds them first is wrong by that
rounding), and each output is rounded once to its own dtype: y with u_out of the output's dtype, dx with u_out
of x's, dweight with u_weight of the weight's, dbias with u_bias of the bias' (backward_bound).
A sum of n terms in ANY order (sequential, blocked, tree) has |error| <= gamma_{n-1} sum |terms|,
gamma_m = m u / (1 - m u) (Higham Lemma 3.1/3.3).

LN forward, two-pass (or Welford) in any order, with s = sqrt(sigma^2 + eps):
    mean:       |mu_hat - mu| <= gamma_{d+1} mean|x| =: E s                  (d-1 additions, 1/d, product)
    variance:   sum_k (x_k - mu_hat)^2 = d sigma^2 + d (mu_hat - mu)^2        (the cross term is 0)
    t = fl(var + eps): |t/s^2 - 1| <= rho_t = (1 + E^2)(1 + gamma_{d+5}) - 1 + 2 gamma_{d+1} kappa + (d+5) eta/s^2
    rsqrt:      r = t^(-1/2)(1 + delta_r), |delta_r| <= C_RSQRT u
                |r s - 1| <= eps_r = (1 + gamma_C)/sqrt(1 - rho_t) - 1
    y_i = fl(fl(fl(fl(x_i - mu_hat) r) gamma_i) + beta_i), stored:
    |y_hat_i - y_i| <= Dp_i + (|y_i| + Dp_i) ((1 + u)(1 + u_out) - 1) + ETA terms,
    Dp_i = |gamma_i| (|xhat_i| eps_1 + E (1 + eps_1)),  eps_1 = (1 + eps_r)(1 + gamma_3) - 1.

The term 2 gamma_{d+1} kappa covers Welford/Chan updates, whose variance error is O(d kappa u)
relative (Chan, Golub, LeVeque 1983): first order, tested numerically (tests/test_proofs_error_model.py),
not proved here; for a two-pass reduction the bound is rigorous whenever rho_t < 1 and (d + 9) u < 1
(|(1 + t)^(-1/2) - 1| <= (1 - rho)^(-1/2) - 1 for |t| <= rho < 1); outside that the bound is inf. The
returned bound adds the same model at float64 (the oracle's own error), so it bounds |kernel - oracle|.

Safety constants, each stated and justified:
    C_RSQRT = 4: sqrt then divide is 2 roundings; PTX rsqrt.approx.f32 is accurate to 2^-22.9 = 2.1 u;
                 4 covers both and a libm 1/sqrt.
    C_WEIGHT = 1: the effective weight weight_offset + weight is one more rounding (Gemma).
    C_COMBINE = 4: the backward combination r (g' - c1 - xhat c2) in any association: 2 additions, the
                 product xhat c2 and the final product with r.

One-pass variance E[x^2] - mu^2 has |error| ~ gamma_{d+2} (mu^2 + sigma^2) = gamma_{d+2} kappa^2 s^2: the
relative error of t is kappa^2 d u instead of (2 kappa + 1) d u, so its output error exceeds this bound by a
factor ~ kappa/2 (derived in claim numerics.error_model).
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp

from proofs import oracles, probabilistic, reduction

C_RSQRT = 4
C_WEIGHT = 1
C_COMBINE = 4

_UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
# Half the smallest positive subnormal: the absolute error of a rounding that underflows (gradual underflow, IEEE).
_UNDERFLOW = {2.0**-53: 2.0**-1075, 2.0**-24: 2.0**-150, 2.0**-11: 2.0**-25, 2.0**-8: 2.0**-134}
# The smallest positive normal number: the absolute error of a result flushed to zero (FTZ, underflow()).
_SMALLEST_NORMAL = {2.0**-53: 2.0**-1022, 2.0**-24: 2.0**-126, 2.0**-11: 2.0**-14, 2.0**-8: 2.0**-126}

# --- the symbols of the bound ----------------------------------------------------------------
n, u, w = sp.symbols("d u u_out", positive=True)  # row width, accumulation and storage unit roundoffs
eta, eta_out = sp.symbols("eta eta_out", nonnegative=True)  # underflow
mean_abs, kappa, inv_s2 = sp.symbols("E_x kappa s^{-2}", nonnegative=True)  # mean|x|/s, kappa, 1/s^2
# relative error factors of the statistics: |mu_hat - mu| <= phi_mu mean|x|, the variance (or mean square) sum
# and what follows it off by phi_v relative (worst case: gamma_{d+1}, gamma_{d+5}; see FACTORS)
phi_mu, phi_v = sp.symbols(r"\phi_\mu \phi_v", nonnegative=True)
xhat, g, y = sp.symbols(r"|\hat{x}_i| |\gamma_i| |y_i|", nonnegative=True)


def gamma_n(m: sp.Expr) -> sp.Expr:
    """gamma_m = m u / (1 - m u): the bound on |prod (1 + delta)^(+-1) - 1| over m roundings."""
    return m * u / (1 - m * u)


def composed(*relative: sp.Expr) -> sp.Expr:
    """The relative error of a product of factors with the given relative errors: prod(1 + e) - 1."""
    return sp.Mul(*[1 + e for e in relative]) - 1


@cache
def forward_terms(kind: str) -> dict[str, sp.Expr]:
    """The named pieces of the forward bound, in the order they are derived."""
    if kind == "ln":
        mean_error = phi_mu * mean_abs  # |mu_hat - mu| / s
        rho_t = composed(mean_error**2, phi_v) + 2 * phi_mu * kappa
        rho_t += (n + 5) * eta * inv_s2
    else:
        mean_error = sp.S.Zero
        rho_t = phi_v + (n + 3) * eta * inv_s2
    eps_r = (1 + gamma_n(C_RSQRT)) / sp.sqrt(1 - rho_t) - 1
    eps_1 = composed(eps_r, gamma_n(2 + C_WEIGHT + (1 if kind == "ln" else 0)))
    product = g * (xhat * eps_1 + mean_error * (1 + eps_1))
    stored = product + (y + product) * composed(u, w) + (4 * eta) * (1 + g) + eta_out
    return {"mean_error": mean_error, "rho_t": rho_t, "eps_r": eps_r, "eps_1": eps_1, "product": product,
            "bound": stored}


BOUNDS = ("probabilistic", "worst-case")
DEFAULT_BOUND = "probabilistic"
# the statistic factors of the worst-case analysis: mean (d - 1 additions, 1/d, product), variance (subtract,
# square, d - 1 additions, 1/d, product, + eps) or mean square (square, d - 1 additions, 1/d, product, + eps)
_WORST_ROUNDINGS = {"ln": (1, 5), "rms": (None, 3)}  # gamma_{d + k} of phi_mu, phi_v (None: no mean)
WORST_CASE_FACTORS = {kind: {phi_mu: sp.S.Zero if mean_k is None else gamma_n(n + mean_k), phi_v: gamma_n(n + var_k)}
                      for kind, (mean_k, var_k) in _WORST_ROUNDINGS.items()}


@cache
def _forward_function(kind: str):
    return sp.lambdify((n, u, w, eta, eta_out, phi_mu, phi_v, mean_abs, kappa, inv_s2, xhat, g, y),
                       forward_terms(kind)["bound"], modules="numpy")


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


def _row_quantities(row: np.ndarray, eps: float | np.ndarray, kind: str) -> dict[str, np.ndarray]:
    """Per-row s (or r), mean|x|/s, kappa, 1/s^2 (trailing axis kept) and the normalized row, in float64."""
    eps = np.asarray(eps, dtype=np.float64)
    eps = eps[..., None] if eps.ndim else eps
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # inf/NaN rows give NaN bounds
        centred = row - row.mean(axis=-1, keepdims=True) if kind == "ln" else row
        s2 = np.mean(centred**2, axis=-1, keepdims=True) + eps
        s = np.sqrt(s2)
        return {"normalized": centred / s, "mean_abs": np.mean(np.abs(row), axis=-1, keepdims=True) / s,
                "kappa": np.sqrt(np.mean(row**2, axis=-1, keepdims=True)) / s, "inv_s2": 1.0 / s2, "s": s}


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


def statistic_factors(kind: str, q: dict, u_acc: float, lam_value: float | None, row: np.ndarray) -> tuple:
    """(phi_mu, phi_v) per row, axis kept: the worst case WORST_CASE_FACTORS, or with the probabilistic sum factor
    (proofs.probabilistic.sum_factor) in place of gamma_{d-1} where the model applies. With a declared reduction
    (q["reduction"], proofs.reduction) the sums' d - 1 additions become its depth D (both models), and a declared
    exact tree gives the probabilistic factor its own sum_v A_v^2 (ATen's row moments: :func:`moments_factors`)."""
    factors = _shape_factors(kind, q, u_acc, lam_value, row)
    if _moments_tree(kind, q.get("reduction"), row.shape[-1]):
        return moments_factors(q, u_acc, lam_value, row, factors)
    return factors


def _shape_factors(kind: str, q: dict, u_acc: float, lam_value: float | None, row: np.ndarray) -> tuple:
    width, g = row.shape[-1], probabilistic.gamma
    declared = q.get("reduction")
    depth = reduction.depth(declared, width)
    mean_k, var_k = _WORST_ROUNDINGS[kind]
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
    squares = np.square(q["normalized"] * q["s"])  # the kernel's own terms, (x - mu)^2 or x^2: their binades count
    phi_var = _at_most(phi_var, square_error, factor(squares), g(3, u_acc))
    return phi_mean, phi_var


def _moments_tree(kind: str, declared: reduction.Reduction | None, width: int) -> bool:
    """Whether the statistics follow ATen's row moments node by node (proofs.aten_moments) for this row width."""
    return kind == "ln" and declared is not None and declared.exact_tree == "aten_moments" and \
        declared.declared_for(width)


def moments_factors(q: dict, u_acc: float, lam_value: float | None, row: np.ndarray, factors: tuple) -> tuple:
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
    kappa = np.sqrt(np.mean(row**2, axis=-1, keepdims=True)) / q["s"]
    folded = _at_most(np.inf, phi_var, 2 * phi_mean * kappa)
    depth, lanes = reduction.depth(q["reduction"], width), q["reduction"].lanes
    state = aten_moments.row_moments(row, lanes, u_acc)
    tree = {}
    for lam in {None, lam_value}:
        e_mean, e_m2 = aten_moments.error_bounds(row, lanes, u_acc, lam, depth, state)
        with np.errstate(divide="ignore", invalid="ignore"):
            tree[lam] = (np.nan_to_num((e_mean / np.mean(np.abs(row), axis=-1))[..., None], nan=np.inf),
                         _at_most(np.inf, (e_m2 / width)[..., None] * q["inv_s2"], g(2, u_acc)))
    modelled = aten_moments.modelled(row, u_acc) if lam_value is not None else (False, False)
    chosen = [np.where(model, np.minimum(chance, worst), worst)
              for model, chance, worst in zip(modelled, tree[lam_value], tree[None], strict=True)]
    return np.minimum(phi_mean, chosen[0]), np.minimum(folded, chosen[1])


def _forward_bound_at(kind: str, row: np.ndarray, q: dict, weight, bias, u_acc: float, u_out: float,
                      factors: tuple) -> np.ndarray:
    scale = np.ones(row.shape[-1]) if weight is None else np.abs(np.asarray(weight, dtype=np.float64))
    exact = oracles.layernorm(row, weight, bias, q["eps"]) if kind == "ln" else oracles.rmsnorm(row, weight, q["eps"])
    function = _forward_function(kind)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return function(row.shape[-1], u_acc, u_out, _eta(u_acc, q), _eta(u_out, q), *factors, q["mean_abs"],
                        q["kappa"], q["inv_s2"], np.abs(q["normalized"]), scale, np.abs(exact))


@cache
def _rho_function(kind: str):
    return sp.lambdify((n, u, eta, phi_mu, phi_v, mean_abs, kappa, inv_s2), forward_terms(kind)["rho_t"],
                       modules="numpy")


def forward_bound(x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, eps: float,
                  u_acc: float, u_out: float, kind: str, model: str = DEFAULT_BOUND, *,
                  declared: reduction.Reduction | None = None, flush_to_zero: bool = False) -> np.ndarray:
    """Per-element bound B with |y_kernel - y_oracle| <= B (module docstring), shape of x.

    ``model``: "probabilistic" (default: the sums' factors of proofs.probabilistic, exceeded by a correct kernel
    with probability at most probabilistic.FALSE_ALARM per call) or "worst-case" (always holds).
    ``declared``: the kernel's declared reduction shape (proofs.reduction), None for a sum in any order.
    Includes the float64 oracle's own error. inf where the model does not apply (d u_acc too large,
    rho_t >= 1) and NaN where the function is undefined (sigma^2 + eps = 0).
    """
    kind = oracles.norm_key(kind)
    row = np.asarray(x, dtype=np.float64)
    q = {**_row_quantities(row, eps, kind), "eps": eps}
    kernel_q = _declared(q, declared, row.shape[-1], flush_to_zero)
    factors, rho_t = _forward_rho(kind, row, kernel_q, u_acc, model)
    kernel = _forward_bound_at(kind, row, kernel_q, weight, bias, u_acc, u_out, factors)
    oracle = _forward_bound_at(kind, row, q, weight, bias, 2.0**-53, 2.0**-53,
                               statistic_factors(kind, q, 2.0**-53, None, row))
    return _where_valid(kernel + oracle, row.shape[-1], u_acc, rho_t, q["inv_s2"])


def _forward_rho(kind: str, row: np.ndarray, q: dict, u_acc: float, model: str) -> tuple:
    """The statistic factors of the model and rho_t, per row."""
    rows = int(np.prod(row.shape[:-1]))
    factors = statistic_factors(kind, q, u_acc, _lam(model, rows * (2 if kind == "ln" else 1)), row)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rho_t = _rho_function(kind)(row.shape[-1], u_acc, _eta(u_acc, q), *factors, q["mean_abs"], q["kappa"],
                                    q["inv_s2"])
    return factors, rho_t


def forward_bound_finite(x: np.ndarray, eps: float, u_acc: float, kind: str, model: str = DEFAULT_BOUND, *,
                         declared: reduction.Reduction | None = None, flush_to_zero: bool = False) -> bool:
    """Whether :func:`forward_bound` is finite on every row of x (rho_t < 1, (d + 9) u_acc < 1, sigma^2 + eps > 0),
    without evaluating it."""
    kind = oracles.norm_key(kind)
    row = np.asarray(x, dtype=np.float64)
    q = _row_quantities(row, eps, kind)
    rho_t = _forward_rho(kind, row, _declared(q, declared, row.shape[-1], flush_to_zero), u_acc, model)[1]
    return bool(np.all(np.isfinite(_where_valid(np.zeros_like(rho_t), row.shape[-1], u_acc, rho_t, q["inv_s2"]))))


def _declared(q: dict, declared: reduction.Reduction | None, width: int, flush_to_zero: bool = False) -> dict:
    """The row quantities of the kernel (the oracle's are q itself): q["flush_to_zero"] (its underflow, read by
    :func:`_eta`), and with a declared reduction q["reduction"] (read by :func:`statistic_factors`) and kappa 0 where
    it declares a two-pass variance (kappa enters the bound only through the first-order Welford term 2 phi_mu kappa
    of rho_t; a two-pass variance has the mean's error only squared, d e^2)."""
    if declared is None:
        return {**q, "flush_to_zero": flush_to_zero}
    welford = declared.welford(width) and not _moments_tree("ln", declared, width)  # moments: in phi_v
    return {**q, "reduction": declared, "kappa": q["kappa"] if welford else np.zeros_like(q["kappa"]),
            "flush_to_zero": flush_to_zero}


def _eta(u_value: float, q: dict) -> float:
    """:func:`underflow` of the kernel (q from :func:`_declared`) or of the float64 oracle (IEEE)."""
    return underflow(u_value, q.get("flush_to_zero", False))


def _where_valid(bound: np.ndarray, width: int, u_acc: float, rho_t: np.ndarray, inv_s2: np.ndarray) -> np.ndarray:
    """NaN on undefined rows (sigma^2 + eps = 0), inf where the model does not apply (rho_t >= 1 or
    (d + 9) u >= 1), the bound elsewhere."""
    valid = ((width + 9) * u_acc < 1) & (rho_t < 1)
    return np.where(np.isinf(inv_s2), np.nan, np.where(valid, bound, np.inf))


# --- backward --------------------------------------------------------------------------------
# Per element j of a row: gp = |gamma_j dy_j|, the normalized element xhat_j and its computed error Xi_j;
# per row: A1 = mean|g'|, A2 = mean(|g'| (|xhat| + Xi)), A3 = mean(|g'| Xi), c1 = |mean g'|,
# c2 = |mean(g' xhat)|, the exact |dx_j| and eps_r; phi_1, phi_2 the relative error factors of c1 and c2
# (worst case gamma_{d+2+C_WEIGHT}, gamma_{d+3+C_WEIGHT}: the product g', d - 1 additions, 1/d, product).
gp, xi, a1, a2, a3, c1, c2, dx_abs, er = sp.symbols("g'_j Xi_j A_1 A_2 A_3 c_1 c_2 |dx_j| epsilon_r", nonnegative=True)
phi_1, phi_2 = sp.symbols(r"\phi_1 \phi_2", nonnegative=True)
_WORST_GRADIENT_ROUNDINGS = (2 + C_WEIGHT, 3 + C_WEIGHT)
WORST_CASE_BACKWARD_FACTORS = {phi: gamma_n(n + k) for phi, k in zip((phi_1, phi_2), _WORST_GRADIENT_ROUNDINGS,
                                                                      strict=True)}


@cache
def backward_terms(kind: str) -> dict[str, sp.Expr]:
    """The pieces of the dx bound: r (g'_j - c1 - xhat_j c2) (LN) or r (g'_j - xhat_j c2) (RMSNorm)."""
    terms = forward_terms(kind)
    # the normalized element as the backward recomputes it: subtract (LN) and product with r, no weight; or
    # x r - mu r (torch's CPU backward, docs/findings.md [I]): fl(x r) errs u |x| r <= u (|xhat| + |mu|/s) and
    # fl(mu r) u |mu| r, 2 u |mu|/s <= 2 u E_x beyond the same two roundings of xhat
    eps_xhat = composed(terms["eps_r"], gamma_n(2 if kind == "ln" else 1))
    association = 2 * u * mean_abs if kind == "ln" else sp.S.Zero
    xi_expr = xhat * eps_xhat + (terms["mean_error"] + association) * (1 + eps_xhat)
    g_error = gamma_n(1 + C_WEIGHT)  # g' = (offset + gamma) dy
    dc1 = phi_1 * a1 if kind == "ln" else sp.S.Zero
    c1_term = c1 if kind == "ln" else sp.S.Zero
    dc2 = phi_2 * a2 + a3
    magnitude = gp * (1 + g_error) + c1_term + dc1 + (xhat + xi) * (c2 + dc2)
    dt = g_error * gp + dc1 + xhat * dc2 + xi * (c2 + dc2) + gamma_n(C_COMBINE) * magnitude
    scale = (1 + er) * (1 + u) * (1 + w)
    dx = (dt * scale + dx_abs * inv_s2 ** sp.Rational(-1, 2) * (scale - 1)) * sp.sqrt(inv_s2)
    return {"Xi": xi_expr, "eps_xhat": eps_xhat, "dc1": dc1, "dc2": dc2, "dT": dt, "bound": dx + eta_out}


@cache
def _backward_functions(kind: str):
    forward = forward_terms(kind)
    row_args = (n, u, eta, phi_mu, phi_v, mean_abs, kappa, inv_s2)
    return (
        sp.lambdify((*row_args, xhat), backward_terms(kind)["Xi"], modules="numpy"),
        sp.lambdify(row_args, forward["eps_r"], modules="numpy"),
        sp.lambdify((n, u, w, eta_out, inv_s2, gp, xhat, xi, a1, a2, a3, c1, c2, dx_abs, er, phi_1, phi_2),
                    backward_terms(kind)["bound"], modules="numpy"),
    )


def _gradient_factors(width: int, u_acc: float, lam_value: float | None, g_prime: np.ndarray,
                      c2_terms: np.ndarray) -> tuple:
    """(phi_1, phi_2) per row: WORST_CASE_BACKWARD_FACTORS, refined by the probabilistic sum factor."""
    g = probabilistic.gamma
    shape = (*g_prime.shape[:-1], 1)
    first, second = (np.full(shape, g(width + k, u_acc)) for k in _WORST_GRADIENT_ROUNDINGS)
    if lam_value is None:
        return first, second
    first = _at_most(first, g(1 + C_WEIGHT, u_acc), probabilistic.sum_factor(g_prime, u_acc, lam_value),
                     g(2, u_acc))
    second = _at_most(second, g(2 + C_WEIGHT, u_acc), probabilistic.sum_factor(c2_terms, u_acc, lam_value),
                      g(2, u_acc))
    return first, second


def _backward_at(kind: str, row, q, weight, dy, u_acc, u_out, lam_value, u_weight=None, u_bias=None):
    pieces = _backward_pieces(kind, row, q, weight, dy, u_acc, u_out, lam_value, u_weight, u_bias)
    return pieces["dx"], pieces["dweight"], pieces["dbias"], pieces["rho_t"]


def _backward_pieces(kind: str, row, q, weight, dy, u_acc, u_out, lam_value, u_weight=None, u_bias=None) -> dict:
    """The per-row and per-element pieces of the backward bound (names as in :func:`backward_terms`); dweight and
    dbias stored with u_weight and u_bias (default u_out, dx's)."""
    u_weight = u_out if u_weight is None else u_weight
    u_bias = u_out if u_bias is None else u_bias
    xi_of, eps_r_of, dx_of = _backward_functions(kind)
    width = row.shape[-1]
    scale = np.ones(width) if weight is None else np.asarray(weight, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        factors = statistic_factors(kind, q, u_acc, lam_value, row)
        row_args = (width, u_acc, _eta(u_acc, q), *factors, q["mean_abs"], q["kappa"], q["inv_s2"])
        normalized = np.abs(q["normalized"])
        xi_j = xi_of(*row_args, normalized)
        g_prime = scale * dy
        first, second = mean(g_prime), mean(g_prime * q["normalized"])
        exact_dx = (g_prime - (first if kind == "ln" else 0) - q["normalized"] * second) * np.sqrt(q["inv_s2"])
        magnitudes = np.abs(g_prime) * (normalized + xi_j)
        phi_first, phi_second = _gradient_factors(width, u_acc, lam_value, g_prime, magnitudes)
        eps_r = eps_r_of(*row_args)
        dx = dx_of(width, u_acc, u_out, _eta(u_out, q), q["inv_s2"], np.abs(g_prime), normalized, xi_j,
                   mean(np.abs(g_prime)), mean(magnitudes), mean(np.abs(g_prime) * xi_j),
                   np.abs(first), np.abs(second), np.abs(exact_dx), eps_r, phi_first, phi_second)
        flat = (-1, width)
        lead = tuple(range(row.ndim - 1))
        dweight = None
        if weight is not None:
            terms = (np.abs(dy) * (normalized + xi_j)).reshape(flat)
            exact = np.abs((dy * q["normalized"]).sum(axis=lead))
            factor = probabilistic.sum_factor(terms, u_acc, lam_value, 0, (dy * q["normalized"]).reshape(flat))[0]
            dweight = (np.abs(dy) * xi_j).sum(axis=lead) + _composed_with_product(factor, u_acc) * terms.sum(axis=0)
            dweight = dweight + (exact + dweight) * u_weight + _eta(u_weight, q)
        upstream = dy.reshape(flat)
        dbias = probabilistic.sum_factor(upstream, u_acc, lam_value, 0)[0] * np.abs(dy).sum(axis=lead)
        dbias = dbias + (np.abs(dy.sum(axis=lead)) + dbias) * u_bias + _eta(u_bias, q)
        rho_t = _rho_function(kind)(*row_args)
        dc1 = phi_first * mean(np.abs(g_prime)) if kind == "ln" else np.zeros_like(first)
        dc2 = phi_second * mean(magnitudes) + mean(np.abs(g_prime) * xi_j)
        # |g'^_j| + |c1^| + |x^_j c2^| at most: the magnitude of the combination's terms (backward_terms)
        magnitude = (np.abs(g_prime) * (1 + probabilistic.gamma(1 + C_WEIGHT, u_acc)) + np.abs(first) + dc1
                     + (normalized + xi_j) * (np.abs(second) + dc2))
    return {"dx": dx, "dweight": dweight, "dbias": dbias, "rho_t": rho_t, "g_prime": g_prime, "xi": xi_j,
            "eps_r": eps_r, "mean_error": factors[0] * q["mean_abs"], "c1": first, "c2": second, "dc1": dc1,
            "dc2": dc2, "exact_dx": exact_dx, "magnitude": magnitude}


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
    :func:`backward_terms`). Since sum_i c_i = 0 and sum_i xhat_i = 0 (LayerNorm), to first order
        sum_i dx_i = r [sum_i alpha_i g'_i - d e1 - (c2 + e2) sum_i (xhat_i theta_i - e r)] + combination roundings:
    neither eps_r nor the per-element values survive (they did in sum_i B_i);
        c . dx - value = r (1 + eps_r)[sum c_i alpha_i g'_i - e2 c . x^ - c2 sum c_i xhat_i theta_i + ...]
                         - (2 eps_r + eps_r^2) r (c . g') sigma^2 r^2 + eps_r value:
    the mean error e and e1 cancel (they multiply sum_i c_i = 0). Each sum of per-element roundings is bounded by
    :func:`_rounding_sum` (worst case, or the probabilistic model).
    """
    kind = oracles.norm_key(kind)
    row, upstream = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(dy, dtype=np.float64))
    q = _row_quantities(row, eps, kind)
    rows, width = int(np.prod(row.shape[:-1])), row.shape[-1]
    lam_value = _lam(model, rows * 12 + 2 * width)
    q = _declared(q, declared, width, flush_to_zero)  # the kernel's: its underflow below (the oracle's is float64)
    p = _backward_pieces(kind, row, q, weight, upstream, u_acc, u_out, lam_value)
    g = probabilistic.gamma
    g_round, x_round, combine = g(1 + C_WEIGHT, u_acc), g(2 if kind == "ln" else 1, u_acc), g(C_COMBINE, u_acc)
    outer, float64 = (1 + u_acc) * (1 + u_out) - 1, g(width, 2.0**-53)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r, eps_r, xhat, g_prime = np.sqrt(q["inv_s2"]), p["eps_r"], q["normalized"], p["g_prime"]
        centred = xhat / r
        magnitude = p["magnitude"]
        computed = np.abs(p["exact_dx"]) + p["dx"]  # |dx^_i| at most
        # the values rounded: g'_i = gamma_i dy_i (a product), xhat_i (x_i r), the combination g' - c1 - xhat c2
        # (a grid value shifted by row constants: tested for concentrated residues) and dx_i as stored
        combination = p["exact_dx"] / r
        rounding = {  # sum_i delta_i v_i of the roundings, per row
            "g": _rounding_sum(g_prime, g_round, lam_value, g_prime),
            "cg": _rounding_sum(centred * g_prime, g_round, lam_value, g_prime),
            "x": _rounding_sum(xhat, x_round, lam_value, xhat),
            "cx": _rounding_sum(centred * xhat, x_round, lam_value, xhat),
            "combine": _rounding_sum(magnitude, combine, lam_value, combination, u_acc),
            "c_combine": _rounding_sum(centred * magnitude, combine, lam_value, combination, u_acc),
            "outer": _rounding_sum(computed, outer, lam_value, p["exact_dx"], u_out),
            "c_outer": _rounding_sum(centred * computed, outer, lam_value, p["exact_dx"], u_out)}
        c2_hat = np.abs(p["c2"]) + p["dc2"]
        shared = r * (1 + eps_r)
        cg = np.abs(np.sum(centred * g_prime, axis=-1, keepdims=True))
        spread = 1 - eps * q["inv_s2"]  # sigma^2 / s^2 (mean(x^2) / s^2 for RMSNorm)
        # xhat as x r - mu r (torch's CPU backward, docs/findings.md [I]; as Xi): fl(x_i r) errs u |x_i| r, which
        # c weights element by element; fl(mu r) errs alike in every element, which c . 1 = 0 cancels and the sum
        # of dx meets d times (2 u E_x, E_x = mean|x| / s, covers both)
        association = u_acc * np.abs(row) * r if kind == "ln" else np.zeros_like(row)
        c_dot = (shared * (rounding["cg"] + p["dc2"] * np.sum(np.abs(centred) * (np.abs(xhat) + p["xi"]), axis=-1,
                                                                 keepdims=True)
                           + c2_hat * (1 + eps_r) * (rounding["cx"] + np.sum(np.abs(centred) * association, axis=-1,
                                                                             keepdims=True) * (1 + x_round))
                           + rounding["c_combine"])
                 + rounding["c_outer"] + eps_r * (2 + eps_r) * r * cg * spread * (1 + eps_r)
                 + eps_r * r * cg * eps * q["inv_s2"]
                 + np.sum(np.abs(centred), axis=-1, keepdims=True) * _eta(u_out, q)  # dx stored subnormal
                 + float64 * (np.sum(np.abs(centred) * computed, axis=-1, keepdims=True) + r * cg))
        found = {"c_dot": c_dot[..., 0]}
        if kind == "ln":
            mean_part = (1 + eps_r) * (rounding["x"] + width * (p["mean_error"] + 2 * u_acc * q["mean_abs"])
                                       * (1 + x_round))
            total = (shared * (rounding["g"] + width * p["dc1"] + c2_hat * mean_part + rounding["combine"])
                     + rounding["outer"] + float64 * np.sum(computed, axis=-1, keepdims=True)
                     + width * _eta(u_out, q))
            found["sum"] = total[..., 0]
    valid = np.isfinite(p["dx"]).all(axis=-1)
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
    kind = oracles.norm_key(kind)
    row, upstream = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(dy, dtype=np.float64))
    q = _row_quantities(row, eps, kind)
    rows = int(np.prod(row.shape[:-1]))
    lam_value = _lam(model, rows * 4 + 2 * row.shape[-1])
    kernel = _backward_at(kind, row, _declared(q, declared, row.shape[-1], flush_to_zero), weight, upstream, u_acc,
                          u_out, lam_value, u_weight, u_bias)
    oracle = _backward_at(kind, row, q, weight, upstream, 2.0**-53, 2.0**-53, None)
    dx = _where_valid(kernel[0] + oracle[0], row.shape[-1], u_acc, kernel[3], q["inv_s2"])
    lead = tuple(range(row.ndim - 1))
    any_invalid = ~np.isfinite(dx).all(axis=lead)
    dweight = None if weight is None else np.where(any_invalid, np.inf, kernel[1] + oracle[1])
    dbias = kernel[2] + oracle[2]
    return (dx, dweight, dbias) if kind == "ln" else (dx, dweight)


def backward_terms_magnitude(x: np.ndarray, weight: np.ndarray | None, eps: float, dy: np.ndarray, u_acc: float,
                             kind: str, model: str = DEFAULT_BOUND) -> np.ndarray:
    """Per element j, a bound on the magnitude of the terms the backward adds into dx_j, as a kernel computes them:
    r^ (|g'^_j| + |c1^| + |x^_j| |c2^|) <= r (1 + eps_r)(1 + gamma_{C_COMBINE}) (|g'_j| (1 + gamma_{1+C_WEIGHT})
    + |c1| + dc1 + (|xhat_j| + Xi_j)(|c2| + dc2)) (the pieces of :func:`backward_terms`; |c1| counted for RMSNorm
    too, an overestimate). Every partial sum of those terms, in any order, is at most this: the scale at which a
    composition that adds them one by one (autograd over the uses of x) rounds. inf where the model does not apply."""
    kind = oracles.norm_key(kind)
    row, upstream = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(dy, dtype=np.float64))
    q = _row_quantities(row, eps, kind)
    lam_value = _lam(model, int(np.prod(row.shape[:-1])) * 4 + 2 * row.shape[-1])
    p = _backward_pieces(kind, row, q, weight, upstream, u_acc, u_acc, lam_value)
    with np.errstate(invalid="ignore", over="ignore"):
        scale = np.sqrt(q["inv_s2"]) * (1 + p["eps_r"]) * (1 + probabilistic.gamma(C_COMBINE, u_acc))
        magnitude = scale * p["magnitude"]
    return np.where(np.isfinite(p["dx"]), magnitude, np.inf)
