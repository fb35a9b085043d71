"""The mechanisms library (proofs.mechanisms): every derivation verifies, every model contains a float32/float16
implementation of its bug and excludes the correct kernel's result where the bug shows, and R is the dtypes'
rounding."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from proofs import oracles
from proofs.mechanisms import CONVENTIONS, MECHANISMS, Case, correct_backward, correct_forward, round_to

IDS = {"eps_outside_root", "unbiased_variance", "fixed_eps", "max_variance_eps", "weight_offset",
       "offset_in_weight_dtype", "sum_not_mean",
       "extra_centering", "no_centering", "padded_lanes", "one_pass_variance", "storage_accumulation",
       "double_rounding", "storage_statistics_backward", "backward_no_weight", "backward_weight_offset",
       "backward_no_mean_term",
       "backward_no_variance_term", "dgamma_from_output", "dgamma_missing"}


def test_the_ids_are_stable_and_the_conventions_declarable():
    assert set(MECHANISMS) == IDS
    assert set(CONVENTIONS) == {"storage_accumulation", "double_rounding", "storage_statistics_backward"}
    for mechanism in MECHANISMS.values():
        assert "\n" not in mechanism.title and mechanism.kinds <= {"ln", "rms"}
        assert mechanism.applies("forward") or mechanism.applies("backward")


@pytest.mark.parametrize("mechanism_id", sorted(IDS))
def test_every_step_of_every_mechanism_verifies(mechanism_id):
    derivation = MECHANISMS[mechanism_id].derive()
    assert derivation.steps and not derivation.failures()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_round_to_is_the_dtypes_rounding(dtype):
    """Against torch's rounding of float32 values (torch rounds float64 to float16 through float32: twice)."""
    magnitudes = 10.0 ** np.random.default_rng(1).integers(-9, 5, 2000)
    values = (np.random.default_rng(0).standard_normal(2000) * magnitudes).astype(np.float32).astype(np.float64)
    expected = torch.tensor(values, dtype=torch.float32).to(getattr(torch, dtype)).double().numpy()
    assert np.array_equal(round_to(values, dtype), expected)
    # halfway between two neighbours of the dtype (ties to even), as the mask derivation of drop_add_ln meets them
    significand = {"float16": 11, "bfloat16": 8, "float32": 24}[dtype]
    ties = (expected + np.ldexp(0.5, np.frexp(expected)[1] - significand)).astype(np.float32).astype(np.float64)
    tied = torch.tensor(ties, dtype=torch.float32).to(getattr(torch, dtype)).double().numpy()
    assert np.array_equal(round_to(ties, dtype), tied)


def _rows(seed: int, n: int, d: int, mean: float = 0.0, dtype=np.float32) -> np.ndarray:
    return (mean + np.random.default_rng(seed).standard_normal((n, d))).astype(dtype).astype(np.float64)


def _layernorm32(x, gamma, beta, eps, statistics) -> np.ndarray:
    """A float32 LayerNorm whose (mean, rstd) come from ``statistics(x32, eps)``, stored in float32."""
    x32 = x.astype(np.float32)
    mean, rstd = statistics(x32, np.float32(eps))
    return ((x32 - mean) * rstd * gamma.astype(np.float32) + beta.astype(np.float32)).astype(np.float64)


def _mean(x):
    return x.mean(-1, keepdims=True, dtype=np.float32)


BUGS = {  # mechanism -> (float32 statistics, eps); each must explain its bug and exclude the correct kernel
    "eps_outside_root": (lambda x, e: (_mean(x), 1 / (np.sqrt(((x - _mean(x)) ** 2).mean(-1, keepdims=True)) + e)),
                         1e-2),
    "unbiased_variance": (lambda x, e: (_mean(x), 1 / np.sqrt(((x - _mean(x)) ** 2).sum(-1, keepdims=True)
                                                              / np.float32(x.shape[-1] - 1) + e)), 1e-5),
    "fixed_eps": (lambda x, e: (_mean(x), 1 / np.sqrt(((x - _mean(x)) ** 2).mean(-1, keepdims=True)
                                                      + np.float32(1e-5))), 1e-2),
    "max_variance_eps": (lambda x, e: (_mean(x), 1 / np.sqrt(np.maximum(((x - _mean(x)) ** 2).mean(-1, keepdims=True),
                                                                         e))), 1.0),
    "no_centering": (lambda x, e: (np.float32(0), 1 / np.sqrt(((x - _mean(x)) ** 2).mean(-1, keepdims=True) * 0
                                                             + (x**2).mean(-1, keepdims=True) + e)), 1e-5),
}


@pytest.mark.parametrize("mechanism_id", sorted(BUGS))
def test_a_float32_implementation_of_the_bug_lies_within_its_model_and_the_correct_kernel_does_not(mechanism_id):
    statistics, eps = BUGS[mechanism_id]
    x = _rows(0, 4, 24, mean=0.5)
    gamma, beta = _rows(1, 1, 24)[0], _rows(2, 1, 24)[0]
    case = Case("ln", x, gamma, beta, eps, "float32", "float32")
    got = _layernorm32(x, gamma, beta, eps, statistics)
    predictions = MECHANISMS[mechanism_id].predictions(case, "forward", {"y": got})
    assert any(np.all(np.abs(got - p.values["y"]) <= p.bounds["y"]) for p in predictions)
    correct = oracles.layernorm(x, gamma, beta, eps).astype(np.float32).astype(np.float64)
    fitted_to_correct = MECHANISMS[mechanism_id].predictions(case, "forward", {"y": correct})
    assert not any(np.all(np.abs(correct - p.values["y"]) <= p.bounds["y"]) for p in predictions + fitted_to_correct)
    reference = correct_forward(case)
    assert np.any(np.abs(got - reference.values["y"]) > reference.bounds["y"])


def test_gemmas_offset_added_in_a_bfloat16_weights_dtype_lies_within_its_model_and_the_correct_one_does_not():
    """RMSNorm declared with 1 + w, float32 x, a bfloat16 weight: y = x_hat fl_bf16(1 + w) (vllm-project/vllm#29810) is
    inside offset_in_weight_dtype's model and outside the correct bound; the correct float32 y is outside the model."""
    x = _rows(0, 4, 24, mean=0.5)
    w = round_to(_rows(1, 1, 24)[0] * 8, "bfloat16")
    case = Case("rms", x, w + 1, None, 1e-5, "float32", "float32", weight_dtype="bfloat16")
    bug, correct = (oracles.rmsnorm(x, scale, 1e-5).astype(np.float32).astype(np.float64)
                    for scale in (round_to(w + 1, "bfloat16"), w + 1))
    (model,) = MECHANISMS["offset_in_weight_dtype"].forward(case)
    assert np.all(np.abs(bug - model.values["y"]) <= model.bounds["y"])
    assert not np.all(np.abs(correct - model.values["y"]) <= model.bounds["y"])
    reference = correct_forward(case)
    assert np.any(np.abs(bug - reference.values["y"]) > reference.bounds["y"])
    assert MECHANISMS["offset_in_weight_dtype"].forward(replace(case, gamma=w)) == []  # no offset: nothing rounds


def test_a_backward_that_leaves_gemmas_offset_out_lies_within_its_model_and_the_correct_one_does_not():
    """RMSNorm declared with 1 + w: a float32 backward scaling dy by w (NVIDIA/TransformerEngine#67) is inside the
    offset's -1 variant; the correct float32 dx is inside none of the variants, and the bug is outside the correct
    backward's bound."""
    x, dy, w = _rows(0, 4, 24, mean=0.5), _rows(3, 4, 24), _rows(1, 1, 24)[0]
    case = Case("rms", x, w + 1, None, 1e-5, "float32", "float32", dy=dy)

    def dx32(scale: np.ndarray) -> np.ndarray:
        x32, g = x.astype(np.float32), (dy * scale).astype(np.float32)
        rstd = 1 / np.sqrt((x32 * x32).mean(-1, keepdims=True) + np.float32(1e-5))
        xhat = x32 * rstd
        return (rstd * (g - xhat * (g * xhat).mean(-1, keepdims=True))).astype(np.float64)

    mechanism = MECHANISMS["backward_weight_offset"]
    bug, correct = dx32(w), dx32(w + 1)
    assert any(np.all(np.abs(bug - p.values["x"]) <= p.bounds["x"]) for p in mechanism.backward(case))
    assert not any(np.all(np.abs(correct - p.values["x"]) <= p.bounds["x"]) for p in mechanism.backward(case))
    reference = correct_backward(case)
    assert np.any(np.abs(bug - reference.values["x"]) > reference.bounds["x"])


def test_double_rounding_explains_the_llama_witness_and_the_correct_bound_does_not():
    x = np.array([[1.541016, -0.293457]], dtype=np.float16).astype(np.float64)
    w = np.array([1.770508, 0.853516], dtype=np.float16).astype(np.float64)
    case = Case("rms", x, w, None, 1e-5, "float16", "float32")
    llama = round_to(w * round_to(oracles.rmsnorm(x, None, 1e-5), "float16"), "float16")
    (model,) = MECHANISMS["double_rounding"].forward(case)
    assert np.all(np.abs(llama - model.values["y"]) <= model.bounds["y"])
    correct = correct_forward(case)
    assert np.any(np.abs(llama - correct.values["y"]) > correct.bounds["y"])


def test_an_interval_model_with_no_finite_bound_explains_nothing():
    x = np.full((1, 64), 1000.0)
    x[0, 0] = 1001.0  # fp16 sums of squares overflow
    (model,) = MECHANISMS["storage_accumulation"].forward(Case("ln", x, None, None, 1e-5, "float16", "float32"))
    assert np.isinf(model.bounds["y"]).all()
    assert MECHANISMS["storage_accumulation"].forward(Case("ln", x, None, None, 1e-5, "float32", "float32")) == []
