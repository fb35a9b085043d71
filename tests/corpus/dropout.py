"""Dropout kernels: a correct inverted dropout with its own generator, and broken ones.

Correct (``DROPOUT_BERNOULLI``): keep each element independently with probability 1 - p, drawn from a
``torch.Generator`` seeded with ``seed`` (so the same seed gives the same mask), and scale the kept ones
by 1/(1 - p):

    y = x * m / (1 - p),   m_i ~ Bernoulli(1 - p) i.i.d.        (p = 1: y = 0)

Each broken kernel is :func:`_dropout` with one rule replaced; the rule's docstring says the bug and the
claim ids that must catch it (the manifest lists the same ids).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from core.registry import Kernel

SPEC = "tests/corpus/dropout.py:"


def _seeded_generator(x: torch.Tensor, seed: int) -> torch.Generator:
    """A generator of its own on x's device, seeded with ``seed``."""
    return torch.Generator(device=x.device).manual_seed(seed)


def _keep_mask(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """m_i = [u_i >= p], u_i ~ U[0, 1) i.i.d.: kept with probability 1 - p."""
    return torch.rand(x.shape, generator=generator, device=x.device) >= p


def _inverted_scale(p: float) -> float:
    """1 / (1 - p), and 0 for p = 1 (everything dropped)."""
    return 0.0 if p >= 1.0 else 1.0 / (1.0 - p)


def _leave_input(x: torch.Tensor, y: torch.Tensor) -> None:
    """Leaves the input's buffer alone."""


def _dropout(x: torch.Tensor, p: float, seed: int, *,
             generator: Callable[[torch.Tensor, int], torch.Generator] = _seeded_generator,
             keep_mask: Callable[[torch.Tensor, float, torch.Generator], torch.Tensor] = _keep_mask,
             scale: Callable[[float], float] = _inverted_scale,
             after: Callable[[torch.Tensor, torch.Tensor], None] = _leave_input) -> torch.Tensor:
    mask = keep_mask(x, p, generator(x, seed))
    y = x * mask.to(x.dtype) * scale(p)
    after(x, y)
    return y


# --- bug rules --------------------------------------------------------------------------------------------------


def _no_rescale(p: float) -> float:
    """Dropout without rescaling: kept elements are x, not x/(1 - p), so E[y] = (1 - p) x. Must fail
    dropout.values."""
    return 1.0


def _keep_probability_p(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """Keep and drop probability swapped: keeps with probability p (u < p) but still scales by 1/(1 - p)
    (indistinguishable only at p = 1/2). Must fail dropout.keep_rate."""
    return torch.rand(x.shape, generator=generator, device=x.device) < p


def _unseeded_generator(x: torch.Tensor, seed: int) -> torch.Generator:
    """The seed is ignored: the generator is seeded from the OS, so the same seed gives another mask every
    call. Must fail dropout.determinism."""
    generator = torch.Generator(device=x.device)
    generator.seed()
    return generator


def _mask_per_row(x: torch.Tensor, p: float, generator: torch.Generator) -> torch.Tensor:
    """One mask value per row broadcast over the row (mask shape [..., 1] instead of x.shape): whole rows
    are kept or dropped, so E[Var(z)] - Var(x) = p/(1 - p) Var(x) instead of p(d-1)/(d(1-p)) (v + mu^2).
    Every value is 0 or x/(1 - p) and the expected keep rate is right. Must fail dropout.variance_bias."""
    return torch.rand((*x.shape[:-1], 1), generator=generator, device=x.device) >= p


def _result_written_into_input(x: torch.Tensor, y: torch.Tensor) -> None:
    """The result is also written into the input's buffer (an in-place variant's ``out=x`` left in):
    the caller's x is overwritten. Must fail dropout.inputs_unmodified."""
    x.detach().copy_(y.detach())


# --- kernels ----------------------------------------------------------------------------------------------------


def _kernel(name: str, description: str, **rule: Callable) -> Kernel:
    def dropout(x: torch.Tensor, p: float, seed: int) -> torch.Tensor:
        return _dropout(x, p, seed, **rule)

    return Kernel(name, "dropout", dropout, spec=SPEC + name.upper(), description=" ".join(description.split()))


DROPOUT_BERNOULLI = _kernel("dropout_bernoulli", "Correct inverted dropout, seeded generator of its own (control).")
DROPOUT_NO_RESCALE = _kernel("dropout_no_rescale", _no_rescale.__doc__, scale=_no_rescale)
DROPOUT_KEEP_DROP_SWAPPED = _kernel("dropout_keep_drop_swapped", _keep_probability_p.__doc__,
                                    keep_mask=_keep_probability_p)
DROPOUT_SEED_IGNORED = _kernel("dropout_seed_ignored", _unseeded_generator.__doc__, generator=_unseeded_generator)
DROPOUT_MASK_PER_ROW = _kernel("dropout_mask_per_row", _mask_per_row.__doc__, keep_mask=_mask_per_row)
DROPOUT_INPUT_OVERWRITTEN = _kernel("dropout_input_overwritten", _result_written_into_input.__doc__,
                                    after=_result_written_into_input)
