"""Bitwise claims of every norm kind (issue 29): *.batch_invariance, *.determinism (proofs.claims.invariance).

Each is a contract where the kernel declares it (``batch_invariant=True``, ``deterministic=True``) and a finding
otherwise: measured, reported with its evidence, never a failure. The checks: :mod:`properties.checks.bitwise`;
the draws, batch sizes across the switch points kernels use: :mod:`properties.draws.bitwise_strategies`.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from properties import evidence
from properties.checks.bitwise import check_batch_invariance, check_determinism
from properties.draws.bitwise_strategies import (
    DETERMINISM_ROWS,
    MAX_WIDTH,
    MODEL_WIDTH_BATCHES,
    MODEL_WIDTH_DETERMINISM_ROWS,
    MODEL_WIDTH_WINDOW,
    MODEL_WIDTHS,
    QUANT_CPU_ROWS,
    bitwise_examples,
)
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


def _declared_at_model_widths(kernel, declaration: str) -> None:
    """Skip, saying why, a kernel of a kind over x [N, C, *] (its samples' long reductions: the long-row test's
    8 x 128 samples) or one not declaring ``declaration``: rows of 8192 are spent where a contract is at stake (an
    undeclared kernel's finding is measured at the widths above)."""
    if kernel.record.scope != "row":
        pytest.skip(f"{kernel.name}: its kind normalizes samples of x [N, C, *], not rows of a model's width")
    if not getattr(kernel, declaration):
        pytest.skip(f"{kernel.name} does not declare {declaration}: rows of 2048 to 16384 check that contract only")


@pytest.mark.claim("ln.batch_invariance", "rms.batch_invariance", "add_ln.batch_invariance",
                   "add_rms.batch_invariance", "drop_add_ln.batch_invariance", "gn.batch_invariance",
                   "cln.batch_invariance", "in.batch_invariance", "bn.batch_invariance",
                   "ln_quant.batch_invariance", "rms_quant.batch_invariance", "add_rms_quant.batch_invariance")
@pytest.mark.parametrize("d", MODEL_WIDTHS)
@profiles.share(0.05)
@given(data=st.data())
def test_a_token_of_a_model_width_alone_gives_its_bits_in_a_batch(any_norm_kernel, d, data):
    """Rows of 2048 to 16384 (bitwise_strategies.MODEL_WIDTHS) in a batch of 131 or 257, then one of them alone
    (a decode step of one request) and 32 of them (a decode batch): a kernel that splits a row's reduction over
    several programs when the tokens are fewer than the SMs (132 on an H100) sums those tokens in another order than
    the batch of 257, at model widths only. Kernels declaring batch_invariant, of the row kinds; float32 rows
    (bitwise_strategies.MODEL_WIDTHS: 16-bit rows' partial sums are exact); the forward only (a decode step has no
    backward; the backward's row sums are compared on the long rows above, and a backward through a corpus kernel's
    element-by-element sums of 8192 columns costs seconds)."""
    _declared_at_model_widths(any_norm_kernel, "batch_invariant")
    example = bitwise_examples(any_norm_kernel, window=True, row_widths=(d,), rows=MODEL_WIDTH_BATCHES,
                               dtypes=(torch.float32,))
    example = {name: value for name, value in data.draw(example, label="example").items() if name not in ("dy", "dh")}
    offset = min(example["window"][0], example["x"].shape[0] - MODEL_WIDTH_WINDOW)
    for window in ((offset, 1), (offset, MODEL_WIDTH_WINDOW)):
        evidence.check(check_batch_invariance, any_norm_kernel, {**example, "window": window})


SMALL_WINDOW = 64  # tokens of a decode batch, called on their own beside the window of the batch of thousands


@pytest.mark.claim("ln.batch_invariance", "rms.batch_invariance", "add_ln.batch_invariance",
                   "add_rms.batch_invariance", "drop_add_ln.batch_invariance",
                   "ln_quant.batch_invariance", "rms_quant.batch_invariance", "add_rms_quant.batch_invariance")
@profiles.share(0.05)
@given(data=st.data())
def test_the_same_tokens_give_the_same_bits_in_batches_of_thousands(row_norm_kernel, data):
    """A forward only, in batches of up to 4097 tokens on the CPU as on a GPU (a block size or reduction chosen by
    token count switches past 1024: vllm-project/vllm#48271, #48997): the quantized kinds, and the other row kinds'
    kernels declaring batch_invariant."""
    if not row_norm_kernel.record.quantized:
        _declared_at_model_widths(row_norm_kernel, "batch_invariant")
    example = bitwise_examples(row_norm_kernel, cpu_rows=QUANT_CPU_ROWS, window=True,
                               cpu_elements=QUANT_CPU_ROWS * MAX_WIDTH)
    example = {name: value for name, value in data.draw(example, label="example").items() if name not in ("dy", "dh")}
    offset, k = example["window"]
    for rows in dict.fromkeys((k, min(k, SMALL_WINDOW), 1)):  # the window, then fewer of its rows than a block
        evidence.check(check_batch_invariance, row_norm_kernel, {**example, "window": (offset, rows)})


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


@pytest.mark.claim("ln.determinism", "rms.determinism", "add_ln.determinism", "add_rms.determinism",
                   "gn.determinism", "cln.determinism", "in.determinism", "bn.determinism",
                   "ln_quant.determinism", "rms_quant.determinism", "add_rms_quant.determinism")
@pytest.mark.parametrize("d", MODEL_WIDTHS)
@profiles.share(0.05)
@given(data=st.data())
def test_repeated_calls_on_rows_of_a_model_width_give_the_same_bits(unseeded_norm_kernel, d, data):
    """257 rows of 2048 to 16384 (bitwise_strategies.MODEL_WIDTHS), the call and its backward repeated: a row
    reduced by several programs whose partials are added with atomics, in the order they finish (a multi-CTA row),
    changes bits from call to call at model widths only, and parameter gradients whose per-program partials are added
    with atomics once the rows outnumber the SMs (132 on an H100) past 132 rows only. Kernels declaring
    deterministic, of the row kinds; float32 rows, as above."""
    _declared_at_model_widths(unseeded_norm_kernel, "deterministic")
    example = bitwise_examples(unseeded_norm_kernel, row_widths=(d,), rows=MODEL_WIDTH_DETERMINISM_ROWS,
                               dtypes=(torch.float32,))
    evidence.check(check_determinism, unseeded_norm_kernel, data.draw(example, label="example"))
