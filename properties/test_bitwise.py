"""Bitwise claims of every norm kind (issue 29): *.batch_invariance, *.determinism (proofs.claims.invariance).

Each is a contract where the kernel declares it (``batch_invariant=True``, ``deterministic=True``) and a finding
otherwise: measured, reported with its evidence, never a failure. The checks: :mod:`properties.checks.bitwise`;
the draws, batch sizes across the switch points kernels use: :mod:`properties.draws.bitwise_strategies`.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from properties import evidence
from properties.checks.bitwise import check_batch_invariance, check_determinism
from properties.draws.bitwise_strategies import DETERMINISM_ROWS, MAX_WIDTH, QUANT_CPU_ROWS, bitwise_examples
from properties.run import profiles


@pytest.mark.claim("ln.batch_invariance", "rms.batch_invariance", "add_ln.batch_invariance",
                   "add_rms.batch_invariance", "drop_add_ln.batch_invariance", "gn.batch_invariance",
                   "cln.batch_invariance", "in.batch_invariance", "bn.batch_invariance",
                   "ln_quant.batch_invariance", "rms_quant.batch_invariance", "add_rms_quant.batch_invariance")
@profiles.share(0.1)
@given(data=st.data())
def test_the_same_row_gives_the_same_bits_in_any_batch(any_norm_kernel, data):
    example = data.draw(bitwise_examples(any_norm_kernel, window=True), label="example")
    evidence.check(check_batch_invariance, any_norm_kernel, example)


@pytest.mark.claim("ln.batch_invariance", "rms.batch_invariance", "add_ln.batch_invariance",
                   "add_rms.batch_invariance", "drop_add_ln.batch_invariance", "gn.batch_invariance",
                   "cln.batch_invariance", "in.batch_invariance", "bn.batch_invariance",
                   "ln_quant.batch_invariance", "rms_quant.batch_invariance", "add_rms_quant.batch_invariance")
@profiles.share(0.05)
@given(data=st.data())
def test_the_same_long_row_gives_the_same_bits_in_any_batch(any_norm_kernel, data):
    """Rows of 320 and 1024 (samples of 8 x 128) in batches of 255 to 257 rows on the CPU (up to 4097 on a GPU) and
    again on their own, then the window's first row alone (one request, where a kernel that splits a row's reduction
    when the batch is small differs): a kernel whose block of threads per row follows the batch size sums a row in
    another order only in rows longer than its smaller block (bitwise_strategies.WIDE_ROWS)."""
    example = data.draw(bitwise_examples(any_norm_kernel, window=True, wide=True), label="example")
    evidence.check(check_batch_invariance, any_norm_kernel, example)
    evidence.check(check_batch_invariance, any_norm_kernel, {**example, "window": (example["window"][0], 1)})


SMALL_WINDOW = 64  # tokens of a decode batch, called on their own beside the window of the batch of thousands


@pytest.mark.claim("ln_quant.batch_invariance", "rms_quant.batch_invariance", "add_rms_quant.batch_invariance")
@profiles.share(0.05)
@given(data=st.data())
def test_the_same_tokens_give_the_same_bits_in_batches_of_thousands(quant_norm_kernel, data):
    """The quantized kinds, a forward only, in batches of up to 4097 tokens on the CPU as on a GPU (a block size or
    reduction chosen by token count switches past 1024: vllm-project/vllm#48997's per-token quant kernels)."""
    example = data.draw(bitwise_examples(quant_norm_kernel, cpu_rows=QUANT_CPU_ROWS, window=True,
                                         cpu_elements=QUANT_CPU_ROWS * MAX_WIDTH), label="example")
    offset, k = example["window"]
    for rows in dict.fromkeys((k, min(k, SMALL_WINDOW), 1)):  # the window, then fewer of its rows than a block
        evidence.check(check_batch_invariance, quant_norm_kernel, {**example, "window": (offset, rows)})


@pytest.mark.claim("ln.determinism", "rms.determinism", "add_ln.determinism", "add_rms.determinism",
                   "gn.determinism", "cln.determinism", "in.determinism", "bn.determinism",
                   "ln_quant.determinism", "rms_quant.determinism", "add_rms_quant.determinism")
@pytest.mark.parametrize("layout", ("contiguous", "channels-last"))
@profiles.share(0.1)
@given(data=st.data())
def test_repeated_calls_give_the_same_bits(unseeded_norm_kernel, layout, data):
    """x contiguous, and channels-last for the kinds with per-channel parameters over x [N, C, *] (an NHWC path
    whose parameter gradients are summed over the samples with atomics)."""
    channels_last = layout == "channels-last"
    if channels_last and not unseeded_norm_kernel.record.per_channel:
        pytest.skip(f"{unseeded_norm_kernel.name}: its kind has no parameters per channel of x [N, C, *]")
    example = bitwise_examples(unseeded_norm_kernel, cpu_rows=DETERMINISM_ROWS, channels_last=channels_last)
    evidence.check(check_determinism, unseeded_norm_kernel, data.draw(example, label="example"))
