"""ln.forward / rms.forward: the kernel's output is the float64 oracle's on the same rounded inputs,
within the error-model bound (properties.bounds.tolerance), for every width, dtype, weight and eps.

The checks, and the derivation each rests on: :mod:`properties.checks.forward`.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from core.capabilities import dtype_name
from properties import evidence, norms
from properties.checks.forward import (
    AUTOCAST_DTYPES,
    check_forward,
    check_forward_after_an_in_place_update,
    check_forward_in_float64,
    check_forward_of_parameter_views_of_one_buffer,
    check_forward_under_autocast,
    check_forward_with_parameter_dtypes,
    new_parameter_values,
)
from properties.draws.strategies import (
    BEYOND_THE_WIDEST_BLOCK,
    MAX_ELEMENTS,
    MORE_ROWS,
    NDIMS,
    WIDE_ROWS,
    WIDEST_BLOCK,
    float64_examples,
    leading_rows,
    mixed_parameter_examples,
    norm_examples,
    one_ulp_apart_widths,
    over_parameter_mixes,
    widths,
    with_a_larger_tail,
)
from properties.norms import require_width
from properties.run import profiles


@pytest.mark.claim("ln.forward", "rms.forward")
@profiles.share(1.0)
@given(data=st.data())
def test_forward_matches_the_oracle(norm_kernel, data):
    evidence.check(check_forward, norm_kernel, data.draw(norm_examples(norm_kernel, ndims=NDIMS), label="example"))


@pytest.mark.claim("ln.forward", "rms.forward")
@profiles.share(0.25)
@given(data=st.data())
def test_forward_of_more_rows(norm_kernel, data):
    """The first 5 to 65 rows of one example of 65 (strategies.MORE_ROWS: a decode batch, multiples of 8 and 32, past
    a block of 64), each count checked, weight and bias given: kernels that pick a path by the row count (in the regime
    that shows that path's error: each count sees every regime drawn)."""
    example = norm_examples(norm_kernel, d=widths(max_width=MAX_ELEMENTS // max(MORE_ROWS)),
                            n=st.just(max(MORE_ROWS)), every_input=True)
    example = data.draw(example, label="example")
    for n in MORE_ROWS:
        evidence.check(check_forward, norm_kernel, leading_rows(example, n))


@pytest.mark.claim("ln.forward", "rms.forward")
@profiles.share(0.25)
@given(data=st.data())
def test_forward_in_torch_default_modes(norm_kernel, data):
    """The calls in torch's default modes (checks.modes: the other tests call kernels in torch's
    deterministic-algorithms mode, which fills uninitialized memory with NaN): a path a kernel takes only outside
    that mode (atomic adds unless deterministic algorithms are asked for) is checked too."""
    ill_conditioned = data.draw(st.booleans(), label="ill-conditioned")  # a one-pass variance of a default path
    example = norm_examples(norm_kernel, d=widths(max_width=512) if ill_conditioned else None, ndims=NDIMS,
                            every_input=True, offset_ratio=LARGE_OFFSETS if ill_conditioned else None)
    evidence.check(check_forward, norm_kernel, {**data.draw(example, label="example"), "default_modes": True})


@pytest.mark.claim("ln.forward", "rms.forward")
@profiles.share(0.1)
@given(data=st.data())
def test_forward_of_parameter_views_of_one_buffer(norm_kernel, data):
    """Two layers' weight and bias as views of one flat buffer, called one after the other in inference mode
    (forward.check_forward_of_parameter_views_of_one_buffer: a cache keyed by the storage)."""
    example = data.draw(norm_examples(norm_kernel, every_input=True), label="example")
    evidence.check(check_forward_of_parameter_views_of_one_buffer, norm_kernel,
                   {**example, **new_parameter_values(example)})


# the default dtypes a program sets (scientific code float64; some training scripts bfloat16)
DEFAULT_DTYPES = (torch.bfloat16, torch.float64)


@pytest.mark.claim("ln.forward", "rms.forward")
@pytest.mark.parametrize("default_dtype", DEFAULT_DTYPES, ids=dtype_name)
@profiles.share(0.1)
@given(data=st.data())
def test_forward_under_another_default_dtype(norm_kernel, default_dtype, data):
    """Every kernel call with torch's default dtype set to bfloat16 or float64 (a program's
    torch.set_default_dtype; the inputs as drawn): a kernel allocating its accumulators, scalars or output with the
    default dtype (transformers#29496) is off there (checks.modes)."""
    example = data.draw(norm_examples(norm_kernel, every_input=True), label="example")
    evidence.check(check_forward, norm_kernel, {**example, "default_dtype": default_dtype})


@pytest.mark.claim("ln.forward", "rms.forward")
@pytest.mark.parametrize("autocast", AUTOCAST_DTYPES, ids=dtype_name)
@profiles.share(0.1)
@given(data=st.data())
def test_forward_under_autocast(norm_kernel, autocast, data):
    """float32 x, weight and bias under torch.autocast to bfloat16 and to float16 (a mixed-precision training step): y
    the norm in float32, or of the inputs cast to autocast's dtype where the kernel casts them
    (forward.check_forward_under_autocast)."""
    example = norm_examples(norm_kernel, dtypes=(torch.float32,), parameter_dtype=torch.float32, every_input=True)
    example = data.draw(example, label="example")
    evidence.check(check_forward_under_autocast, norm_kernel, {**example, "autocast": autocast})


EPS_ZERO_SCALE = 2.0**-10


@pytest.mark.claim("ln.forward", "rms.forward")
@profiles.share(0.15)
@given(data=st.data())
def test_forward_at_eps_zero(norm_kernel, data):
    """eps = 0, which a caller may pass (no stabilizer) and a kernel writing ``eps or default`` reads as unset: rows
    of d >= 2 that are not constant (LayerNorm) or not zero (RMSNorm), where the norm is defined, at scale 2^-10
    (a spread of order 1e-3: a default eps of 1e-5 or 1e-6 put in for 0 moves y by a large fraction)."""
    example = data.draw(norm_examples(norm_kernel, eps=st.just(0.0), scale=EPS_ZERO_SCALE), label="example")
    rows = example["x"].reshape(-1, example["x"].shape[-1])
    spread = rows.amax(-1) - rows.amin(-1) if norm_kernel.record.norm == "ln" else rows.abs().amax(-1)
    assume(rows.shape[-1] >= 2 and bool((spread > 0).all()))
    evidence.check(check_forward, norm_kernel, example)


@pytest.mark.claim("ln.forward", "rms.forward")
@profiles.share(0.5)
@given(data=st.data())
def test_forward_while_recording_a_graph(norm_kernel, data):
    """x, weight and bias requiring grad, as in a training step: kernels whose forward takes another path when it
    saves statistics for the backward (the other forward tests call them as in inference)."""
    example = data.draw(norm_examples(norm_kernel, ndims=NDIMS), label="example")
    evidence.check(check_forward, norm_kernel, {**example, "recording": True})


# Batches past the token counts at which inference stacks switch kernels (128, 256, 1024, 2048 rows), below the large
# batch of properties/test_many_rows.py (4099 rows)
MID_BATCH_ROWS = (131, 257, 1025, 2049)


@pytest.mark.claim("ln.forward", "rms.forward")
@pytest.mark.parametrize("n", MID_BATCH_ROWS)
@profiles.share(0.05)
@given(data=st.data())
def test_forward_of_a_mid_batch(norm_kernel, n, data):
    """131, 257, 1025 and 2049 rows of a width up to 64, weight and bias given, with grad mode on and under
    torch.inference_mode() (a serving stack's batch of that size: a path of its own there)."""
    example = norm_examples(norm_kernel, d=widths(max_width=64), n=st.just(n), every_input=True)
    example = data.draw(example, label="example")
    evidence.check(check_forward, norm_kernel, example)
    evidence.check(check_forward, norm_kernel, {**example, "inference": True})


@pytest.mark.claim("ln.forward", "rms.forward")
@profiles.share(0.5)
@given(data=st.data())
def test_forward_in_inference_mode(norm_kernel, data):
    """Under torch.inference_mode(), as a serving stack calls it (grad mode off): kernels with a path of their own
    for inference (the other forward tests call them with grad mode on)."""
    example = data.draw(norm_examples(norm_kernel, ndims=NDIMS), label="example")
    evidence.check(check_forward, norm_kernel, {**example, "inference": True})


@pytest.mark.claim("ln.forward", "rms.forward")
@profiles.share(0.5)
@given(data=st.data())
def test_forward_after_an_in_place_weight_update(norm_kernel, data):
    """A second call after weight and bias, and x itself, were overwritten in place (an optimizer step, a weight
    reload, a serving stack's reused activation buffer) reads their new values: with grad mode on or both calls in
    inference mode, the parameters in x's dtype or another the kernel takes (a kernel caching their converted
    copies, or its outputs by x's address, keeps the old values)."""
    example = data.draw(norm_examples(norm_kernel, every_input=True, mixed=True), label="example")
    inference = data.draw(st.booleans(), label="inference")
    new = new_parameter_values(example, ("x", "weight", "bias"))
    evidence.check(check_forward_after_an_in_place_update, norm_kernel, {**example, **new, "inference": inference})


@pytest.mark.claim("ln.forward", "rms.forward")
@profiles.share(0.25)
@given(data=st.data())
def test_forward_in_float64(norm_kernel, data):
    """float64 x, weight and bias (scientific code, torch.autograd.gradcheck): the statistics and y in float64 (a
    kernel that casts to float32 and back, as Hugging Face's RMSNorm does, patrick-kidger/equinox#723, is ~1e8 off
    float64's bound); a kernel refusing float64 with an error skips, saying so."""
    example = data.draw(float64_examples(norm_kernel), label="example")
    norms.require_float64(norm_kernel, example)
    evidence.check(check_forward_in_float64, norm_kernel, example)


# Each storage dtype and each width a transformer uses is drawn in every run (derandomized ci: the same examples),
# at |mean|/std up to the model's limit there: a precision bug of that regime (tests/corpus) fails every ci run.
STORAGE_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MODEL_WIDTHS = (1024, 3072, 4096, 5120, 8192)  # 3072 and 5120: a partial last block of 2048, 16-aligned
LARGE_OFFSETS = st.sampled_from([1e4, -1e4])


@pytest.mark.claim("ln.forward", "rms.forward")
@pytest.mark.parametrize("dtype", STORAGE_DTYPES, ids=str)
@profiles.share(0.2)
@given(data=st.data())
def test_forward_when_ill_conditioned(norm_kernel, dtype, data):
    """|mean|/std as large as the error model covers at the drawn width (strategies.valid_offset_ratio)."""
    example = norm_examples(norm_kernel, d=widths(max_width=512), dtypes=(dtype,), offset_ratio=LARGE_OFFSETS)
    evidence.check(check_forward, norm_kernel, data.draw(example, label="example"))


@pytest.mark.claim("ln.forward", "rms.forward")
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=str)
@profiles.share(0.2)
@given(data=st.data())
def test_forward_of_16_bit_rows_one_ulp_apart(norm_kernel, dtype, data):
    """16-bit rows beyond what they resolve (|mean|/std > 2^t: bfloat16 256, float16 2048) are one value but for a
    few one ulp away: drawn up to float32's cap where the worst case covers them (strategies.valid_offset_ratio with
    one_ulp_apart), half of them at the widths where a one-pass variance shows there (strategies.one_ulp_widths)."""
    example = norm_examples(norm_kernel, d=one_ulp_apart_widths(dtype), dtypes=(dtype,), offset_ratio=LARGE_OFFSETS,
                            one_ulp_apart=True)
    evidence.check(check_forward, norm_kernel, data.draw(example, label="example"))


@pytest.mark.claim("ln.forward", "rms.forward")
@pytest.mark.parametrize("d", MODEL_WIDTHS)
@profiles.share(0.1)
@given(data=st.data())
def test_forward_at_model_widths(norm_kernel, d, data):
    """float32 rows of d = 1024, 3072, 4096, 5120, 8192 at the largest |mean|/std the model covers there."""
    example = norm_examples(norm_kernel, d=d, dtypes=(torch.float32,), offset_ratio=LARGE_OFFSETS)
    evidence.check(check_forward, norm_kernel, data.draw(example, label="example"))


@pytest.mark.claim("ln.forward", "rms.forward")
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=str)
@profiles.share(0.05)
@given(data=st.data())
def test_forward_of_16_bit_rows_wider_than_8192_at_scale_30(norm_kernel, dtype, data):
    """Rows of 8193 or 16384 at scale 30 (the largest of strategies.scales for 16-bit rows): a block's sum of squares,
    8192 x 900 = 7.4e6, overflows float16 (bfloat16 keeps 8 bits of it) in a kernel that keeps it in x's dtype."""
    example = norm_examples(norm_kernel, d=st.sampled_from((8193, 16384)), dtypes=(dtype,), scale=30.0)
    evidence.check(check_forward, norm_kernel, data.draw(example, label="example"))


@pytest.mark.claim("ln.forward", "rms.forward")
@pytest.mark.parametrize("d", WIDE_ROWS)
@profiles.share(0.05)
@given(data=st.data())
def test_forward_beyond_8192_columns(norm_kernel, d, data):
    """Two rows (a tail read past the end of a row reads the next one) of d = 8193 to 65536 (strategies.WIDE_ROWS)."""
    example = norm_examples(norm_kernel, d=d, n=st.just(2))
    evidence.check(check_forward, norm_kernel, data.draw(example, label="example"))


@pytest.mark.claim("ln.forward", "rms.forward")
@profiles.share(0.05)
@given(data=st.data())
def test_forward_beyond_65536_columns(norm_kernel, data):
    """One row of 98304 (strategies.BEYOND_THE_WIDEST_BLOCK) whose columns past 65536 are 8 times larger (statistics
    that leave them out are far off), or the kernel's own error refusing it (skipped with that reason:
    norms.require_width)."""
    example = data.draw(norm_examples(norm_kernel, d=BEYOND_THE_WIDEST_BLOCK, n=st.just(1), scale=1.0),
                        label="example")
    example = {**example, "x": with_a_larger_tail(example["x"], WIDEST_BLOCK)}
    require_width(norm_kernel, example)
    evidence.check(check_forward, norm_kernel, example)


@pytest.mark.claim("ln.forward", "rms.forward")
@over_parameter_mixes
@profiles.share(0.25)
@given(data=st.data())
def test_forward_with_parameters_in_another_dtype(norm_kernel, mix, data):
    """float32 weight and bias with 16-bit x (autocast), 16-bit ones with float32 x: the output in the rule's dtype,
    within the bound of the dtypes received (weight and bias exact as given)."""
    example = data.draw(mixed_parameter_examples(norm_kernel, mix), label="example")
    evidence.check(check_forward_with_parameter_dtypes, norm_kernel, example)
