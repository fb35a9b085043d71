"""{ln,rms}.special_inputs: inputs at the edges of the derivation's conditions.

d = 1, 2, 3; constant rows (LayerNorm: output beta, finite; RMSNorm: gamma c / sqrt(c^2 + eps)); zero
rows; eps = 1e-12 with float16 data; |mean|/std up to 1e4 with float32 data; very large and very small
magnitudes; rows whose statistics are exact at any magnitude (d = 1, pairs m +- delta, constant rows:
properties.draws.exact_rows), checked within the bound of their centred rows; NaN/inf in one row. The numerical
ones are the forward claim's check (kernel vs oracle on the rounded inputs, within the error-model bound) on
these inputs; NaN/inf is a contract: the other
rows' outputs are exactly those of the same call without the non-finite value. So is an empty batch (no rows): y
and dx of x's empty shape, dweight and dbias exactly 0 (sums over no rows), and no error.

"Very large" is bounded by the condition of the error model that the sum of squares of a row is
representable in the accumulation dtype: |x| <= sqrt(max / d) / 4.
"""

from __future__ import annotations

import torch

from core.capabilities import dtype_name
from properties import norms, outcome
from properties.bounds import models
from properties.checks.contracts import check_empty_batch_of, rows_that_differ


def check_nonfinite_stays_in_its_row(kernel, x: torch.Tensor, poisoned: torch.Tensor, weight, eps: float,
                                     bias=None) -> None:
    """``poisoned`` is x with a NaN/inf in row 0: rows 1.. of the output are exactly those of kernel(x), and row 0
    carries it: the output at the non-finite element is non-finite (inf - mean or inf / rms(inf) = inf 0 is NaN), and
    with a NaN every output of the row is NaN (the row's statistics are NaN), as IEEE arithmetic propagates them; a
    kernel that leaves non-finite lanes out of its statistics (masked loads, a NaN-ignoring max) returns the row
    finite."""
    clean = norms.forward(kernel, x, weight, bias, eps, allow_nonfinite=True)
    dirty = norms.forward(kernel, poisoned, weight, bias, eps, allow_nonfinite=True)
    moved = rows_that_differ(clean[1:], dirty[1:]) + 1
    point = {"d": x.shape[-1], "dtype": dtype_name(x.dtype)}
    outcome.exact(moved.numel() == 0, f"a non-finite value in row 0 changed output rows {moved.tolist()[:8]}",
                  "NaN/inf must stay within their row", **point)
    where = ~torch.isfinite(poisoned[0])
    carried = ~torch.isfinite(dirty[0])
    outcome.exact(bool(carried[where].all()), f"row 0 of x holds {poisoned[0][where].tolist()[:1]} but its output "
                  f"there is {dirty[0][where].tolist()[:1]}", "a non-finite input gives a non-finite output", **point)
    if bool(torch.isnan(poisoned[0]).any()):
        finite = int(torch.isfinite(dirty[0]).sum())
        outcome.exact(finite == 0, f"row 0 of x holds a NaN but {finite} of its {dirty.shape[-1]} outputs are finite",
                      "a NaN in a row makes its statistics, hence every output of the row, NaN", **point)


def check_exact_statistics(kernel, x: torch.Tensor, centred: torch.Tensor, weight, eps: float, bias=None) -> None:
    """Rows whose mean every correct kernel computes exactly (properties.draws.exact_rows: d = 1, pairs m +- delta,
    constant rows; any magnitude): the output is the oracle's within the bound of the centred rows."""
    got = norms.forward(kernel, x, weight, bias, eps)
    expected = models.expected_forward(kernel, x, weight, bias, eps)[0]  # a declared convention's model, if any
    bound = models.expected_forward(kernel, centred, weight, bias, eps)[1]
    comparison = outcome.compare(got, expected, bound, "output")
    outcome.conclude(comparison, "on rows with exact statistics the output depends on the offset |mean| (a residue "
                                 "of x * rstd - mean * rstd, or the statistics lose x - mean)",
                     d=x.shape[-1], dtype=dtype_name(x.dtype), magnitude=float(x.abs().max()))


def check_exact_statistics_vjp(kernel, x: torch.Tensor, centred: torch.Tensor, weight, eps: float, dy: torch.Tensor,
                               bias=None) -> None:
    """The gradients on rows with exact statistics: the oracle's within the backward bound of the centred rows."""
    got = norms.vjp(kernel, x, weight, bias, eps, dy)
    expected = models.expected_backward(kernel, x, weight, eps, dy)[0]  # a declared convention's model, if any
    bounds = models.expected_backward(kernel, centred, weight, eps, dy)[1]
    outcome.conclude([outcome.compare(got[name], expected[name], bounds[name], f"d{name}") for name in got],
                     "on rows with exact statistics the gradients depend on the offset |mean|",
                     d=x.shape[-1], dtype=dtype_name(x.dtype), magnitude=float(x.abs().max()))


def check_empty_batch(kernel, x: torch.Tensor, weight, eps: float, dy: torch.Tensor, bias=None) -> None:
    """x and dy with no rows: :func:`properties.checks.contracts.check_empty_batch_of`."""
    check_empty_batch_of(kernel, {"x": x, "weight": weight, "bias": bias, "eps": eps}, {"y": dy})
