"""Diagnoses of the running-statistics and eval-mode claims of BatchNorm (proofs.mechanisms.running, properties.bounds
.diagnosis.of_running_statistics / of_eval): the fitted momentum and variance factor name each corpus bug with its
fitted value, and a correct kernel gets no diagnosis."""

from __future__ import annotations

import pytest
import torch
from corpus import batchnorm as corpus

from properties.checks.batchnorm import check_eval, check_running_statistics
from properties.outcome import CheckFailure


def example(training: bool = True, momentum: float = 0.1) -> dict:
    generator = torch.Generator().manual_seed(0)
    channels = 4
    return {"x": 2 + torch.randn(3, channels, 5, generator=generator), "training": training, "momentum": momentum,
            "eps": 1e-5, "weight": 1 + torch.rand(channels, generator=generator), "bias": torch.randn(channels),
            "running_mean": torch.randn(channels, generator=generator),
            "running_var": 0.5 + torch.rand(channels, generator=generator)}


@pytest.mark.parametrize(("kernel", "mechanism", "fitted"), [
    (corpus.BN_KERAS_MOMENTUM, "keras_momentum", "momentum ≈ 0.9 applied"),
    (corpus.BN_UPDATED_TWICE, "updated_twice", "momentum ≈ 0.19 applied"),
    (corpus.SEED_002_MANUAL, "not_updated", "momentum ≈ 0 applied"),
    (corpus.BN_BIASED_RUNNING_VARIANCE, "biased_running_variance", "variance factor ≈ 1 "),
], ids=lambda value: getattr(value, "name", value))
def test_a_wrong_update_is_named_with_its_fitted_parameter(kernel, mechanism, fitted):
    with pytest.raises(CheckFailure) as failure:
        check_running_statistics(kernel, **example())
    first = str(failure.value).splitlines()[0]
    assert first.startswith("fails bn.running_statistics") and f"consistent with {mechanism}:" in first, first
    assert fitted in first, first


def test_a_correct_update_passes_and_a_wrong_one_is_not_explained_by_a_correct_model():
    check_running_statistics(corpus.BN_CORRECT, **example())
    with pytest.raises(CheckFailure) as failure:  # a momentum of 0.5 is its own inverse: not called Keras'
        check_running_statistics(corpus.BN_UPDATED_TWICE, **example(momentum=0.5))
    assert "keras_momentum" not in str(failure.value) and "updated_twice" in str(failure.value)


def test_eval_with_batch_statistics_is_named():
    with pytest.raises(CheckFailure) as failure:
        check_eval(corpus.BN_EVAL_BATCH_STATISTICS, **example(training=False))
    assert str(failure.value).startswith("fails bn.eval") and "eval_batch_statistics" in str(failure.value)
    with pytest.raises(CheckFailure) as failure:  # updating the buffers in eval is not that mechanism
        check_eval(corpus.BN_EVAL_UPDATES_RUNNING, **example(training=False))
    assert "eval_batch_statistics" not in str(failure.value)
