"""The SymPy terms of the rounding-error bounds of LayerNorm and RMSNorm kernels (claim numerics.error_model).

The pieces below are what the claims cite and check (proofs/claims/numerics.py); :mod:`proofs.error_model` compiles
them (:func:`forward_function`, :func:`rho_function`, :func:`backward_functions`) and evaluates them on rows.

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
bound of proofs.error_model adds the same model at float64 (the oracle's own error), so it bounds |kernel - oracle|.

Safety constants, each stated and justified:
    C_RSQRT = 4: sqrt then divide is 2 roundings; PTX rsqrt.approx.f32 is accurate to 2^-22.9 = 2.1 u;
                 4 covers both and a libm 1/sqrt.
    C_WEIGHT = 1: the effective weight weight_offset + weight is one more rounding (Gemma).
    C_COMBINE = 4: the backward combination r (g' - c1 - xhat c2) in any association: 2 additions, the
                 product xhat c2 and the final product with r.

One-pass variance E[x^2] - mu^2 has |error| ~ gamma_{d+2} (mu^2 + sigma^2) = gamma_{d+2} kappa^2 s^2: the
relative error of t is kappa^2 d u instead of (2 kappa + 1) d u, so its output error exceeds this bound by a
factor ~ kappa/2 (derived in claim numerics.error_model).

With exact arithmetic (u = 0, no underflow) only the rounding of the stored output remains:

>>> bound = forward_terms("ln")["bound"].subs(WORST_CASE_FACTORS["ln"])
>>> bound.subs({u: 0, eta: 0})
eta_out + u_out*|y_i|
"""

from __future__ import annotations

from functools import cache

import sympy as sp

C_RSQRT = 4
C_WEIGHT = 1
C_COMBINE = 4


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


# the statistic factors of the worst-case analysis: mean (d - 1 additions, 1/d, product), variance (subtract,
# square, d - 1 additions, 1/d, product, + eps) or mean square (square, d - 1 additions, 1/d, product, + eps)
WORST_ROUNDINGS = {"ln": (1, 5), "rms": (None, 3)}  # gamma_{d + k} of phi_mu, phi_v (None: no mean)
WORST_CASE_FACTORS = {kind: {phi_mu: sp.S.Zero if mean_k is None else gamma_n(n + mean_k), phi_v: gamma_n(n + var_k)}
                      for kind, (mean_k, var_k) in WORST_ROUNDINGS.items()}


@cache
def forward_function(kind: str):
    """forward_terms(kind)["bound"] as a numpy function of (d, u, u_out, eta, eta_out, phi_mu, phi_v, E_x, kappa,
    s^-2, |xhat_i|, |gamma_i|, |y_i|)."""
    return sp.lambdify((n, u, w, eta, eta_out, phi_mu, phi_v, mean_abs, kappa, inv_s2, xhat, g, y),
                       forward_terms(kind)["bound"], modules="numpy")


@cache
def rho_function(kind: str):
    """forward_terms(kind)["rho_t"] as a numpy function of the row arguments (d, u, eta, phi_mu, phi_v, E_x, kappa,
    s^-2)."""
    return sp.lambdify((n, u, eta, phi_mu, phi_v, mean_abs, kappa, inv_s2), forward_terms(kind)["rho_t"],
                       modules="numpy")


# --- backward --------------------------------------------------------------------------------
# Per element j of a row: gp = |gamma_j dy_j|, the normalized element xhat_j and its computed error Xi_j;
# per row: A1 = mean|g'|, A2 = mean(|g'| (|xhat| + Xi)), A3 = mean(|g'| Xi), c1 = |mean g'|,
# c2 = |mean(g' xhat)|, the exact |dx_j| and eps_r; phi_1, phi_2 the relative error factors of c1 and c2
# (worst case gamma_{d+2+C_WEIGHT}, gamma_{d+3+C_WEIGHT}: the product g', d - 1 additions, 1/d, product).
gp, xi, a1, a2, a3, c1, c2, dx_abs, er = sp.symbols("g'_j Xi_j A_1 A_2 A_3 c_1 c_2 |dx_j| epsilon_r", nonnegative=True)
phi_1, phi_2 = sp.symbols(r"\phi_1 \phi_2", nonnegative=True)
WORST_GRADIENT_ROUNDINGS = (2 + C_WEIGHT, 3 + C_WEIGHT)
WORST_CASE_BACKWARD_FACTORS = {phi: gamma_n(n + k) for phi, k in zip((phi_1, phi_2), WORST_GRADIENT_ROUNDINGS,
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
def backward_functions(kind: str):
    """(Xi of the row arguments and |xhat_j|, eps_r of the row arguments, the dx bound of backward_terms) as numpy
    functions (row arguments as in :func:`rho_function`)."""
    forward = forward_terms(kind)
    row_args = (n, u, eta, phi_mu, phi_v, mean_abs, kappa, inv_s2)
    return (
        sp.lambdify((*row_args, xhat), backward_terms(kind)["Xi"], modules="numpy"),
        sp.lambdify(row_args, forward["eps_r"], modules="numpy"),
        sp.lambdify((n, u, w, eta_out, inv_s2, gp, xhat, xi, a1, a2, a3, c1, c2, dx_abs, er, phi_1, phi_2),
                    backward_terms(kind)["bound"], modules="numpy"),
    )
