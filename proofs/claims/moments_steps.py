"""Checked steps of claim numerics.error_model for ATen's CPU row moments (proofs.aten_moments): the first-order
error maps of a Welford update and a Chan merge, and the bound they give against torch's own statistics."""

from __future__ import annotations

import numpy as np
import sympy as sp

from proofs import aten_moments, error_model, probabilistic, simulate
from proofs.derivation import Equal, Fact

_x, _m, _m2, _c = sp.symbols("x m M_2 c", real=True)
_ma, _m2a, _n = sp.symbols("m_a M_{2a} n_d", real=True)
_em, _e2, _ea, _e2a = sp.symbols("e_m e_{M2} e_a e_{M2a}", real=True)
_deltas = sp.symbols("delta_1:9", real=True)


def _first_order(expr: sp.Expr, exact: sp.Expr, small: tuple) -> sp.Expr:
    """The part of expr - exact linear in the small quantities (errors and roundings), at 0."""
    at_zero = dict.fromkeys(small, 0)
    return sp.expand(sum(sp.diff(expr, s).subs(at_zero) * s for s in small) + expr.subs(at_zero) - exact)


def _welford() -> tuple[sp.Expr, sp.Expr, sp.Expr, sp.Expr]:
    """(first-order error of m', its stated form, of M2', its stated form) of one Welford update."""
    d1, d2, d3, d4, d5, d6 = _deltas[:6]
    d = (_x - (_m + _em)) * (1 + d1)
    m_new = (_m + _em + d * _c * (1 + d2)) * (1 + d3)
    f = (_x - m_new) * (1 + d4)
    m2_new = (_m2 + _e2 + d * f * (1 + d5)) * (1 + d6)
    small = (_em, _e2, d1, d2, d3, d4, d5, d6)
    dd, mm = _x - _m, _m + (_x - _m) * _c
    ff = _x - mm
    q, pp, ss = dd * _c, dd * ff, _m2 + dd * ff
    stated_m = (1 - _c) * _em + _c * dd * d1 + q * d2 + mm * d3
    stated_2 = (_e2 - (ff + dd * (1 - _c)) * _em + (ff * dd - _c * dd**2) * d1 - dd * q * d2 - dd * mm * d3
                + dd * ff * d4 + pp * d5 + ss * d6)
    return _first_order(m_new, mm, small), stated_m, _first_order(m2_new, ss, small), stated_2


def _chan() -> tuple[sp.Expr, sp.Expr, sp.Expr, sp.Expr]:
    """The same for a Chan merge of (m_a, M2a) into (m, M2) with weight c = n_a / n and n_d terms in (m, M2)."""
    d1, d2, d3, d4, d5, d6, d7, d8 = _deltas
    delta = (_ma + _ea - _m - _em) * (1 + d1)
    m_new = (_m + _em + _c * delta * (1 + d2)) * (1 + d3)
    h = delta * delta * (1 + d4) * _c * (1 + d5) * _n * (1 + d6)
    m2_new = (_m2 + _e2 + (_m2a + _e2a + h) * (1 + d7)) * (1 + d8)
    small = (_em, _e2, _ea, _e2a, *_deltas)
    dl = _ma - _m
    hh, mm = dl**2 * _c * _n, _m + _c * dl
    ss = _m2a + hh
    coupling = 2 * _c * _n * dl
    stated_m = (1 - _c) * _em + _c * _ea + _c * dl * d1 + _c * dl * d2 + mm * d3
    stated_2 = (_e2 + _e2a + coupling * (_ea - _em) + coupling * dl * d1 + hh * (d4 + d5 + d6) + ss * d7
                + (_m2 + ss) * d8)
    return _first_order(m_new, mm, small), stated_m, _first_order(m2_new, _m2 + ss, small), stated_2


def _torch_moments_within_the_bound() -> bool:
    """The mean and M2 of ATen's row moments (emulated in float32: torch's own mean bit for bit,
    tests/test_aten_moments.py) stay within their probabilistic bounds (aten_moments.error_bounds: the lanes' final
    merges rigorously, the rest by Azuma-Hoeffding) on the suite's kinds of rows (normal, uniform, integer; offsets
    0, 10, 1e3 std; d to 65536) wherever aten_moments.modelled admits them; a mean summed one term after another,
    declared as these moments, exceeds the mean's bound on most offset rows at d = 65536."""
    rng = np.random.default_rng(23)
    u = error_model.unit_roundoff("float32")
    lam = probabilistic.lam(1)
    for width in (8, 100, 1000, 8192, 65536):
        for values in (rng.standard_normal((4, width)), rng.uniform(-1, 1, (4, width)),
                       rng.integers(-8, 9, (4, width)) + 0.25):
            for offset in (0.0, 10.0, 1e3):
                rows = (offset * values.std() + values).astype(np.float32)
                exact = rows.astype(np.float64)
                # where a statistic is not modelled its bound falls back to the worst case (moments_factors)
                mean_modelled, m2_modelled = (mask[:, 0] for mask in aten_moments.modelled(exact, u))
                e_mean, e_m2 = aten_moments.error_bounds(exact, 8, u, lam)
                got = aten_moments.row_moments(rows, 8)
                mean = exact.mean(-1)
                m2 = ((exact - mean[:, None]) ** 2).sum(-1)
                if np.any((np.abs(got.m - mean) > e_mean) & mean_modelled) or \
                        np.any((np.abs(got.m2 - m2) > e_m2) & m2_modelled):
                    return False
    rows = (1e3 + rng.standard_normal((16, 65536))).astype(np.float32)
    exact = rows.astype(np.float64)
    sequential = simulate.summed(rows, "sequential").astype(np.float64) / 65536
    e_mean = aten_moments.error_bounds(exact, 8, u, lam)[0]
    return bool(np.median(np.abs(sequential - exact.mean(-1)) / e_mean) > 1)


def aten_moments_steps() -> tuple:
    """The steps of proofs.aten_moments: the two first-order maps (SymPy) and the bound against the kernel."""
    welford_m, stated_wm, welford_2, stated_w2 = _welford()
    chan_m, stated_cm, chan_2, stated_c2 = _chan()
    return (
        Equal(welford_m, sp.expand(stated_wm),
              r"Welford update (ATen's vector loop): to first order $e_{m'} = (1-c)e_m + c\,d\,\delta_1 + q\,\delta_2"
              r" + m'\delta_3$ ($d = x - m$, $q = d c$): the mean's error carries the running mean's magnitude",
              aggregates={}),
        Equal(welford_2, sp.expand(stated_w2),
              r"and $e_{M_2'} = e_{M_2} - (f + d(1-c))\,e_m + \dots$ ($f = x - m'$): the running mean's error enters "
              r"$M_2$ through the deviations $f, d$, not through $|m|$ (the Welford term of the order-agnostic "
              r"model, $2\phi_\mu\kappa$, is inside $G_{22}$)", aggregates={}),
        Equal(chan_m, sp.expand(stated_cm),
              r"Chan merge: $e_{m'} = (1-c)e_m + c\,e_a + c\,\delta\,(\delta_1 + \delta_2) + m'\delta_3$",
              aggregates={}),
        Equal(chan_2, sp.expand(stated_c2),
              r"and $e_{M_2'} = e_{M_2} + e_{M_{2a}} + 2 c\, n_d\, \delta\,(e_a - e_m) + \dots$: the means' errors "
              r"meet the difference of the two means, not $|m|$; proofs.aten\_moments propagates the Gram matrix "
              r"$G' = J G J^T + \sum g g^T$ of these maps node by node", aggregates={}),
        Fact(r"|\hat m - \mu| \le u c_2 \min(\lambda\sqrt{G_{mm}}, R_m + \lambda\sqrt{H_{mm}}) + |m_{64} - \mu|"
             r",\ \text{the same for } M_2",
             r"ATen's row moments in float32 (torch's own mean bit for bit), normal/uniform/integer rows, offsets "
             r"to $10^3$ std, $d$ to 65536, where \texttt{aten\_moments.modelled} admits them; $H$ is the Gram "
             r"matrix without the lanes' final merges, whose roundings (the largest coefficients: the last carries "
             r"the whole mean) are bounded rigorously, $R$ their first-order L1 sum (the split of the probabilistic "
             r"step). A mean summed sequentially at $d = 65536$, $|\mu|/\sigma = 10^3$, exceeds the mean's bound on "
             r"most rows: the declaration is a claim the check can refute",
             _torch_moments_within_the_bound),
    )
