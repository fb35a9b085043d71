"""Contract claims of LayerNorm and RMSNorm kernels: row independence, layout, inputs, special inputs."""

from __future__ import annotations

import sympy as sp

from proofs import expressions
from proofs.algebra import RMS_AGGREGATES, beta, concrete, eps, gamma, i, j, x
from proofs.claims.base import Claim, no_derivation
from proofs.derivation import Derivation, Equal

other_row = sp.IndexedBase("x'", real=True)
constant = sp.Symbol("c", real=True)
NAMES = {"ln": "LayerNorm", "rms": "RMSNorm"}


def _definition(kind: str) -> sp.Expr:
    return expressions.LN_DEFINITION if kind == "ln" else expressions.RMS_DEFINITION


def _row_independence(kind: str) -> Derivation:
    return Derivation((
        Equal(sp.Derivative(_definition(kind), other_row[j]), 0,
              r"$y$ of one row does not depend on any element $x'_j$ of another row: the Jacobian of a batch is "
              r"block-diagonal, so [B,S,H] and [B*S,H] give the same rows"),
    ))


def _replace_row(expr: sp.Expr, value: sp.Expr) -> sp.Expr:
    return expr.replace(lambda e: isinstance(e, sp.Indexed) and e.base == x, lambda e: value)


def _special_inputs(kind: str) -> Derivation:
    if kind == "ln":
        return Derivation((
            Equal(concrete(expressions.LN_DEFINITION, 1).subs(i, 1), beta[1],
                  r"$d = 1$: $x_1 - \mu = 0$, the output is $\beta$ (for $\epsilon > 0$; 0/0 at $\epsilon = 0$)"),
            Equal(_replace_row(expressions.LN_DEFINITION, constant), beta[i],
                  r"a constant row (also the zero row) maps to $\beta$ for $\epsilon > 0$"),
        ), notes=(r"$\epsilon = 10^{-12}$ is below float16's smallest subnormal ($6\times10^{-8}$): a kernel that "
                  r"stores $\epsilon$ in float16 uses 0 and returns NaN on constant rows.",))
    return Derivation((
        Equal(_replace_row(expressions.RMS_DEFINITION, sp.S.Zero), 0, r"the zero row maps to 0 for $\epsilon > 0$",
              aggregates=RMS_AGGREGATES),
        Equal(concrete(expressions.RMS_DEFINITION, 1).subs(i, 1).subs(eps, 0) ** 2, gamma[1] ** 2,
              r"$d = 1$, $\epsilon = 0$: the output is $\pm\gamma_1$ (the sign of $x_1$)"),
    ))



def _claims(kind: str) -> tuple[Claim, ...]:
    name = NAMES[kind]
    return (
        Claim(f"{kind}.row_independence", f"{name} rows are independent", "001",
              "LayerNorm normalizes each sample on its own, independently of the batch (unlike BatchNorm).",
              r"Changing one row changes no other output row; a [B,S,H] input gives the rows of the [B*S,H] one.",
              (r"any shape, the normalized axis last",), "holds", r"The Jacobian of a batch is block-diagonal.",
              lambda: _row_independence(kind)),
        Claim(f"{kind}.layout_invariance", f"{name} does not depend on memory layout", "", "(contract)",
              r"Non-contiguous inputs and upstream gradients (strided, transposed, offset views; an upstream "
              r"gradient also expanded with stride 0, as autograd's gradient of a summed loss) give the same result "
              r"as contiguous copies.",
              (), "contract", "", no_derivation),
        Claim(f"{kind}.inputs_unmodified", f"{name} leaves its inputs alone", "", "(contract)",
              r"$x$, the weight, the bias and the upstream gradient are never written.", (), "contract", "",
              no_derivation),
        Claim(f"{kind}.special_inputs", f"{name} on special inputs", "000",
              "eps is a small positive constant added to prevent division by zero, ensuring numerical stability.",
              r"$d = 1, 2, 3$, constant rows (LN: output $\beta$), zero rows, $\epsilon = 10^{-12}$ with float16, "
              r"$|\mu|/\sigma$ up to $10^4$, huge and tiny magnitudes give finite outputs within the error model; NaN "
              r"and inf stay in their row and show there (a non-finite output at the element; a NaN makes the row "
              r"NaN); an empty batch (no rows) gives empty outputs and $d\gamma = d\beta = 0$, "
              r"no error.", (r"$\epsilon > 0$",), "contract",
              r"The exact values at the special points are derived below.", lambda: _special_inputs(kind)),
    )


CLAIMS = _claims("ln") + _claims("rms")
