"""A fused add + norm kernel's declared conventions are checked at residual_out
(properties.checks.fused.norm_view): Llama's casting (double_rounding) after the residual add fails add_rms.forward
undeclared and passes declared, as the unfused RMSNorm does (tests/corpus/conventions.py); on the witness of
proofs.mechanisms' derivation."""

from __future__ import annotations

import pytest
import torch
from corpus.conventions import rmsnorm_llama_casting

from core.kernel import Kernel
from properties.checks.fused import check_forward
from properties.outcome import CheckFailure


def add_rms_llama(x, residual, weight, eps):
    h = x + residual
    return rmsnorm_llama_casting(h, weight, eps), h


WITNESS = {"x": torch.tensor([[1.541016, -0.293457]]).half(), "residual": torch.zeros(1, 2).half(),
           "weight": torch.tensor([1.770508, 0.853516]).half(), "eps": 1e-5}


def test_llama_casting_after_the_add_fails_undeclared():
    with pytest.raises(CheckFailure, match="not the normalization"):
        check_forward(Kernel("add_rms_llama", "add_rmsnorm", add_rms_llama), **WITNESS)


def test_llama_casting_after_the_add_passes_declared():
    check_forward(Kernel("add_rms_llama", "add_rmsnorm", add_rms_llama, conventions=("double_rounding",)), **WITNESS)
