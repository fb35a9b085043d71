"""ln/rms.second_order and add_ln/add_rms.second_order: the gradient of the gradient is the second derivative of
the norm (of the fused add + norm: the norm's at h = x + residual).

A kernel's backward that autograd can differentiate (create_graph=True: Hessian-vector products, gradient penalties,
the spectral-norm probe's JVP by double VJP) must give the derivatives of its first-order outputs (dx, dweight,
dbias), not of a backward with the statistics held constant. The closed form (proofs.second_order, with its
oracle and rounding-error bound), derived from the two derivatives of the statistics and checked against SymPy's
differentiation of the written-out rows:

>>> import numpy as np
>>> from proofs.second_order import second_order
>>> x, dy, u = np.array([[1.0, 2.0, 4.0]]), np.array([[1.0, 0.0, -1.0]]), np.array([[0.0, 1.0, 0.0]])
>>> got = second_order(x, None, 0.0, dy, u, None, None, "ln")
>>> bool(np.allclose(got["x"].sum(), 0.0)), bool(np.allclose(got["dy"].sum(), 0.0))  # LN: both sums vanish
(True, True)
"""

from __future__ import annotations

from functools import cache

import numpy as np
import sympy as sp

from proofs.algebra import MS_DEF, RMS_AGGREGATES, VAR_DEF, d, eps, j, ms, mu, var, x
from proofs.claims import symbolic_checks
from proofs.claims.base import Claim
from proofs.claims.symbolic_checks import zero_with_root
from proofs.derivation import Derivation, Equal, Fact
from proofs.second_order import closed_form

D = sp.Derivative
WRITTEN_OUT_WIDTHS = {"ln": (1, 2, 3), "rms": (1, 2, 3, 4)}  # LN at d = 4 takes SymPy a minute


def _row(kind: str, width: int) -> tuple:
    """(x_1..x_d, the radicand sigma^2 + eps or q + eps, xhat_1..xhat_d) of the written-out row."""
    xs = sp.symbols(f"x1:{width + 1}", real=True)
    return (xs, *_normalized(kind, xs))


def _normalized(kind: str, values) -> tuple:
    """(the radicand, xhat_1..xhat_d) of the row ``values`` (symbols or expressions of them)."""
    width = len(values)
    centre = sum(values) / width if kind == "ln" else 0
    centred = [value - centre for value in values]
    radicand = sum(t**2 for t in centred) / width + eps
    return radicand, [t / sp.sqrt(radicand) for t in centred]


@cache
def second_derivatives_match(kind: str, width: int) -> bool:
    """SymPy's derivatives of S = <u, dx> + <a, dweight> + <c, dbias> (dx = d<y, dy>/dx of the written-out row, every
    upstream gradient and parameter symbolic) with respect to dy, x and w equal :func:`proofs.second_order.closed_form`
    evaluated on the same symbols, exactly (numerators reduced modulo S^2 - radicand)."""
    xs, radicand, xhat = _row(kind, width)
    dys, ws, us, a_, cs = (sp.symbols(f"{name}1:{width + 1}", real=True) for name in ("g", "w", "u", "a", "c"))
    cs = cs if kind == "ln" else (sp.S.Zero,) * width
    loss = sum(g * w * xh for g, w, xh in zip(dys, ws, xhat, strict=True))
    dx = [sp.diff(loss, value) for value in xs]
    total = (sum(u * g for u, g in zip(us, dx, strict=True))
             + sum(a * g * xh for a, g, xh in zip(a_, dys, xhat, strict=True))
             + sum(c * g for c, g in zip(cs, dys, strict=True)))

    def row(values):
        return np.array([list(values)], dtype=object)

    closed = closed_form(row(xhat), np.array([[1 / sp.sqrt(radicand)]], dtype=object), row(dys),
                         np.array(ws, dtype=object), row(us), np.array(a_, dtype=object), np.array(cs, dtype=object),
                         kind == "ln")
    return all(zero_with_root(sp.diff(total, variable) - entry, radicand)
               for variables, derived in zip((dys, xs, ws), closed, strict=True)
               for variable, entry in zip(variables, np.asarray(derived).reshape(-1), strict=True))


@cache
def fused_second_derivatives_match(kind: str, width: int) -> bool:
    """The fused add + norm's written-out row: h = x + r, y = N(h), residual_out = h, upstream gradients g of y and
    e of residual_out, so dx = dr = J^T (w g) + e. SymPy's derivatives of S = <u, dx> + <v, dr> + <a, dweight> +
    <c, dbias> with respect to g, x, r and w equal the plain closed form at h with upstream u + v (x and r alike),
    and with respect to e, u + v; exactly (numerators reduced modulo S^2 - radicand)."""
    xs, rs = (sp.symbols(f"{name}1:{width + 1}", real=True) for name in ("x", "r"))
    hs = [xi + ri for xi, ri in zip(xs, rs, strict=True)]
    radicand, xhat = _normalized(kind, hs)
    dys, es, ws, us, vs, a_, cs = (sp.symbols(f"{name}1:{width + 1}", real=True)
                                   for name in ("g", "e", "w", "u", "v", "a", "c"))
    cs = cs if kind == "ln" else (sp.S.Zero,) * width
    loss = (sum(g * w * xh for g, w, xh in zip(dys, ws, xhat, strict=True))
            + sum(e * h for e, h in zip(es, hs, strict=True)))
    dx, dr = [sp.diff(loss, value) for value in xs], [sp.diff(loss, value) for value in rs]
    total = (sum(u * g for u, g in zip(us, dx, strict=True)) + sum(v * g for v, g in zip(vs, dr, strict=True))
             + sum(a * g * xh for a, g, xh in zip(a_, dys, xhat, strict=True))
             + sum(c * g for c, g in zip(cs, dys, strict=True)))

    def row(values):
        return np.array([list(values)], dtype=object)

    both = [u + v for u, v in zip(us, vs, strict=True)]
    closed_dy, closed_h, closed_w = closed_form(row(xhat), np.array([[1 / sp.sqrt(radicand)]], dtype=object),
                                                row(dys), np.array(ws, dtype=object), row(both),
                                                np.array(a_, dtype=object), np.array(cs, dtype=object), kind == "ln")
    pairs = [*zip(dys, np.asarray(closed_dy).reshape(-1), strict=True),
             *zip(xs, np.asarray(closed_h).reshape(-1), strict=True),
             *zip(rs, np.asarray(closed_h).reshape(-1), strict=True),
             *zip(ws, np.asarray(closed_w).reshape(-1), strict=True), *zip(es, both, strict=True)]
    return all(zero_with_root(sp.diff(total, variable) - entry, radicand) for variable, entry in pairs)


def _statistics_derivative(kind: str) -> Equal:
    if kind == "ln":
        s = sp.sqrt(VAR_DEF + eps)
        return Equal(D(1 / s, x[j]), -(x[j] - mu) / (d * sp.sqrt(var + eps) ** 3),
                     r"$\partial r/\partial x_j = -r^2\hat{x}_j/d$, $r = 1/\sqrt{\sigma^2+\epsilon}$ "
                     r"($\sum_l (x_l - \mu) = 0$ removes the term through $\mu$)")
    return Equal(D(1 / sp.sqrt(MS_DEF + eps), x[j]), -x[j] / (d * sp.sqrt(ms + eps) ** 3),
                 r"$\partial r/\partial x_j = -r^2\hat{x}_j/d$, $r = 1/\sqrt{q+\epsilon}$", aggregates=RMS_AGGREGATES)


def _second_order(kind: str) -> Derivation:
    widths = WRITTEN_OUT_WIDTHS[kind]
    return Derivation((
        _statistics_derivative(kind),
        Fact(r"\partial\hat{x}/\partial x = J_n = r(I" + (r" - \mathbf{1}\mathbf{1}^T/d" if kind == "ln" else "")
             + r" - \hat{x}\hat{x}^T/d)\text{, symmetric: } dx = J_n(w\odot dy)",
             f"the Jacobian claim {kind}.jacobian with gamma = 1 (checked there, every entry for d <= 4)",
             lambda: all(symbolic_checks.jacobian_matches_for_width(kind, n) for n in range(1, 5))),
        Fact(r"\partial S/\partial\,dy,\ \partial S/\partial w,\ \partial S/\partial x\ \text{ as stated: every "
             r"entry, } d = " + ", ".join(map(str, widths)),
             "SymPy's derivatives of S = <u, dx> + <a, dweight> + <c, dbias> of the written-out row (every upstream "
             "gradient and weight symbolic) against the closed form that the oracle evaluates, compared exactly; "
             "over rows S is a sum of rows' terms (dweight and dbias sum over rows), so one row is every row",
             lambda: all(second_derivatives_match(kind, width) for width in widths)),
    ), notes=(r"The bound of a kernel's second derivatives (\texttt{proofs.second\_order}): every monomial of the "
              r"closed form "
              r"perturbed by at most $(1+\gamma_K)$ and its leaves $\hat{x}$, $r$ by the forward error model's "
              r"$\Xi$ and $\epsilon_r$; $K = 2d + 12$ for $\partial S/\partial x$, $d + 9$ for "
              r"$\partial S/\partial\,dy$, $d + n + 6$ for $\partial S/\partial w$.",))


FUSED_WIDTHS = (1, 2)  # the closed form itself is checked on wider rows by the plain claim


def _fused_second_order(kind: str) -> Derivation:
    widths = FUSED_WIDTHS
    return Derivation((
        Fact(r"h = x + r:\ dx = dr = J_n(w\odot dy) + dh,\ \text{so } \partial S/\partial x = \partial S/\partial r = "
             r"\partial S/\partial h \text{ with upstream } u + v,\ \partial S/\partial\,dh = u + v: d = "
             + ", ".join(map(str, widths)),
             "SymPy's derivatives of S = <u, dx> + <v, dr> + <a, dweight> + <c, dbias> of the written-out fused row "
             "(h = x + r normalized, the residual output h) against the plain closed form at h with upstream u + v, "
             "compared exactly",
             lambda: all(fused_second_derivatives_match(kind, width) for width in widths)),
    ), notes=(r"The closed form and the bound of a kernel's second derivatives are the plain norm's at $h$; the "
              r"closed form is checked for $d \le " + str(max(WRITTEN_OUT_WIDTHS[kind])) + r"$ by claim \texttt{"
              + kind + r".second\_order}.",))


_STATEMENT = (r"For upstream gradients $u$, $a$, $c$ of $(dx, dw, db)$ and $S = \sum_{\text{rows}}\langle u, dx\rangle "
              r"+ \langle a, dw\rangle + \langle c, db\rangle$: $\partial S/\partial\,dy = w J_n u + \hat{x}a + c$, "
              r"$\partial S/\partial w = \sum_{\text{rows}} dy\,J_n u$, $\partial S/\partial x = J_n(dy\,a - "
              r"\frac{r}{d}\langle u,\hat{x}\rangle v) - r m J_n u - \frac{r^2}{d}\hat{x}F$, with $v = w\,dy$, "
              r"$m = \langle\hat{x},v\rangle/d$, $F = \langle u,v\rangle - m\langle u,\hat{x}\rangle$")
_NOTE = (r"Derived exactly; a backward whose graph holds the statistics constant (saved detached, or "
         r"recomputed from detached $\mu$, $r$) gives other values, and so do a dropped term or sign.")

CLAIMS = (
    Claim("ln.second_order", "Second derivatives of LayerNorm", "",
          "A differentiable backward gives the second derivatives: the gradient of the gradient.",
          _STATEMENT + r" $- \bar{v}\sum u$; $J_n = r(I - \mathbf{1}\mathbf{1}^T/d - \hat{x}\hat{x}^T/d)$.",
          (r"$\sigma^2 + \epsilon > 0$", r"a backward that autograd can differentiate (else: skipped with the "
                                         r"reason)"), "holds", _NOTE, lambda: _second_order("ln")),
    Claim("rms.second_order", "Second derivatives of RMSNorm", "",
          "A differentiable backward gives the second derivatives: the gradient of the gradient.",
          _STATEMENT + r"; $J_n = r(I - \hat{x}\hat{x}^T/d)$.",
          (r"$q + \epsilon > 0$", r"a backward that autograd can differentiate (else: skipped with the reason)"),
          "holds", _NOTE, lambda: _second_order("rms")),
    *(Claim(f"{prefix}.second_order", f"Second derivatives of add + {name}", "",
            "A differentiable backward of the fused residual add + norm gives the second derivatives.",
            r"With $h = x + r$, $dx = dr = J_n(w\,dy) + dh$ and $S = \langle u, dx\rangle + \langle v, dr\rangle + "
            r"\langle a, dw\rangle + \langle c, db\rangle$: $\partial S/\partial\,dy$, $\partial S/\partial w$ and "
            r"$\partial S/\partial x = \partial S/\partial r$ are the norm's second derivatives at $h$ "
            r"(claim \texttt{" + plain + r".second\_order}) with upstream $u + v$; $\partial S/\partial\,dh = u + v$.",
            (condition, r"a backward that autograd can differentiate (else: skipped with the reason)"), "holds",
            _NOTE, lambda kind=kind: _fused_second_order(kind))
      for prefix, name, plain, kind, condition in (
          ("add_ln", "LayerNorm", "ln", "ln", r"$\sigma^2 + \epsilon > 0$ at $h$"),
          ("add_rms", "RMSNorm", "rms", "rms", r"$q + \epsilon > 0$ at $h$"))),
)
