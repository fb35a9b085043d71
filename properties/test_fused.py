"""Fused residual add + norm kernels (kinds add_layernorm, add_rmsnorm): {add_ln,add_rms}.forward, .residual_out,
.jacobian, .inputs_unmodified, .row_independence, .layout_invariance.

The checks, and the derivation each rests on: :mod:`properties.checks.fused` (claims in proofs/claims/fused.py).
Special inputs (d = 1, 2, 3 and residual = -x, whose sum is the zero row) are drawn by every test; the claims
whose checks take any batch shape draw [B, S, d] inputs too (fused_strategies.BATCHES).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from core.capabilities import PROBED_DTYPES, discover
from properties import evidence, norms
from properties.checks.contracts import (
    LAYOUTS,
    SEQUENCE_LAYOUTS,
    UPSTREAM_LAYOUTS,
    check_outputs_of_a_call_fresh,
    inside_a_larger_buffer,
    strided,
)
from properties.checks.forward import new_parameter_values
from properties.checks.fused import (
    check_backward_of_the_recorded_graph,
    check_changing_one_row,
    check_empty_batch,
    check_forward,
    check_forward_after_an_in_place_update,
    check_forward_beside_a_float32_residual,
    check_forward_in_float64,
    check_forward_with_parameter_dtypes,
    check_inputs_unmodified,
    check_noncontiguous,
    check_noncontiguous_upstream,
    check_residual_out,
    check_vjp,
    check_vjp_after_a_call_in_inference_mode,
    check_vjp_in_float64,
)
from properties.draws.fused_strategies import (
    BATCHES,
    add_norm_examples,
    over_residual_mixes,
    residual_mix_examples,
    row_zero_changed,
)
from properties.draws.strategies import (
    BEYOND_THE_WIDEST_BLOCK,
    LARGE_INPUT_SHAPE,
    MAX_ELEMENTS,
    MORE_ROWS,
    PARAMETER_GRADIENT_ROWS,
    PREFILL_ROWS,
    WIDE_ROWS,
    WIDEST_BLOCK,
    float64_examples,
    leading_rows,
    mixed_parameter_examples,
    over_parameter_mixes,
    rounded,
    seeds,
    standard_values,
    storage_backward_width,
    widths,
    with_a_larger_tail,
    with_no_rows,
)
from properties.norms import require_backward, require_width, skip_unless_a_strict_subset
from properties.run import profiles


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
@profiles.share(1.0)
@given(data=st.data())
def test_y_is_the_norm_of_residual_out(add_norm_kernel, data):
    example = data.draw(add_norm_examples(add_norm_kernel, ndims=BATCHES), "example")
    evidence.check(check_forward, add_norm_kernel, example)


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
@profiles.share(0.25)
@given(data=st.data())
def test_y_is_the_norm_of_residual_out_for_more_rows(add_norm_kernel, data):
    """The first 5 to 65 rows of one example of 65 (strategies.MORE_ROWS), each count checked: a path by the row
    count."""
    example = data.draw(add_norm_examples(add_norm_kernel, d=widths(MAX_ELEMENTS // max(MORE_ROWS)),
                                          n=max(MORE_ROWS), every_input=True), "example")
    for n in MORE_ROWS:
        evidence.check(check_forward, add_norm_kernel, leading_rows(example, n))


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
@profiles.share(0.05)
@given(data=st.data())
def test_y_is_the_norm_of_residual_out_beyond_65536_columns(add_norm_kernel, data):
    """One row of 98304 whose x columns past 65536 are 8 times larger (strategies.with_a_larger_tail), or the
    kernel's own error refusing it (skipped with that reason: norms.require_width)."""
    example = data.draw(add_norm_examples(add_norm_kernel, d=BEYOND_THE_WIDEST_BLOCK, n=1), "example")
    example = {**example, "x": with_a_larger_tail(example["x"], WIDEST_BLOCK)}
    require_width(add_norm_kernel, example)
    evidence.check(check_forward, add_norm_kernel, example)


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
@over_parameter_mixes
@profiles.share(0.25)
@given(data=st.data())
def test_forward_with_parameters_in_another_dtype(add_norm_kernel, mix, data):
    """float32 weight and bias with 16-bit x (autocast), 16-bit ones with float32 x: y in the output-dtype rule's
    dtype (x's, torch's), the norm of residual_out within the bound of the dtypes received."""
    example = data.draw(mixed_parameter_examples(add_norm_kernel, mix, add_norm_examples, ndims=BATCHES), "example")
    evidence.check(check_forward_with_parameter_dtypes, add_norm_kernel, example)


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
@over_residual_mixes
@profiles.share(0.1)
@given(data=st.data())
def test_forward_beside_a_float32_residual(add_norm_kernel, mix, data):
    """A residual stream kept in float32 beside 16-bit x (Megatron's fp32 residual connection, residual_in_fp32
    callers): y = N(residual_out) within the bound, in x's dtype or residual_out's (torch's promotion); weight and
    bias in x's dtype or, where the kernel takes that mix, float32 (Megatron and TransformerEngine keep both the
    residual and the parameters in float32)."""
    example = data.draw(residual_mix_examples(add_norm_kernel, mix, ndims=BATCHES, mixed=True), "example")
    evidence.check(check_forward_beside_a_float32_residual, add_norm_kernel, example)


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
@profiles.share(0.1)
@given(data=st.data())
def test_forward_after_an_in_place_weight_update(add_norm_kernel, data):
    """A second call after weight and bias were overwritten in place (an optimizer step, a weight reload) reads their
    new values, with grad mode on or both calls in inference mode, the parameters in x's dtype or another the kernel
    takes."""
    example = data.draw(add_norm_examples(add_norm_kernel, every_input=True, mixed=True), "example")
    inference = data.draw(st.booleans(), label="inference")
    evidence.check(check_forward_after_an_in_place_update, add_norm_kernel,
                   {**example, **new_parameter_values(example), "inference": inference})


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
@profiles.share(0.25)
@given(data=st.data())
def test_y_is_the_norm_of_residual_out_in_inference_mode(add_norm_kernel, data):
    """Under torch.inference_mode(), as a serving stack calls it (grad mode off): kernels with a path of their own
    for inference (the other forward tests call them with grad mode on)."""
    example = data.draw(add_norm_examples(add_norm_kernel, ndims=BATCHES), "example")
    evidence.check(check_forward, add_norm_kernel, {**example, "inference": True})


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
@profiles.share(0.5)
@given(data=st.data())
def test_y_is_the_norm_of_residual_out_while_recording_a_graph(add_norm_kernel, data):
    """x, residual, weight and bias requiring grad, as in a training step (the other forward tests call the kernel as
    in inference)."""
    example = data.draw(add_norm_examples(add_norm_kernel, ndims=BATCHES), "example")
    evidence.check(check_forward, add_norm_kernel, {**example, "recording": True})


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
@pytest.mark.parametrize("d", WIDE_ROWS)
@profiles.share(0.05)
@given(data=st.data())
def test_y_is_the_norm_of_residual_out_beyond_8192_columns(add_norm_kernel, d, data):
    """d = 8193 to 65536 (strategies.WIDE_ROWS): kernels loop over blocks of a row there."""
    evidence.check(check_forward, add_norm_kernel, data.draw(add_norm_examples(add_norm_kernel, d=d), "example"))


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
@profiles.share(0.1)
@given(data=st.data())
def test_an_empty_batch(add_norm_kernel, data):
    """x and residual (and dy, dh) [0, d] or [2, 0, d]: empty y and residual_out, dweight = dbias = 0, no error (a
    mixture-of-experts layer routing no token to an expert)."""
    example = add_norm_examples(add_norm_kernel, d=st.sampled_from([1, 7, 64, 1000]), upstream=True, every_input=True,
                                residual="independent")
    example = data.draw(example, "example")
    evidence.check(check_empty_batch, add_norm_kernel, data.draw(with_no_rows(example), "no rows"))


@pytest.mark.claim("add_ln.residual_out", "add_rms.residual_out")
@profiles.share(0.5)
@given(data=st.data())
def test_residual_out_is_the_sum_in_its_declared_dtype(add_norm_kernel, data):
    example = data.draw(add_norm_examples(add_norm_kernel, ndims=BATCHES), "example")
    evidence.check(check_residual_out, add_norm_kernel, example)


@pytest.mark.claim("add_ln.residual_out", "add_rms.residual_out")
@over_residual_mixes
@profiles.share(0.1)
@given(data=st.data())
def test_residual_out_beside_a_float32_residual(add_norm_kernel, mix, data):
    """A float32 residual beside 16-bit x: residual_out float32 (the residual's dtype), x + residual rounded once
    (a kernel that adds in x's dtype, or casts the residual down first, loses the stream's precision)."""
    example = data.draw(residual_mix_examples(add_norm_kernel, mix, ndims=BATCHES), "example")
    evidence.check(check_residual_out, add_norm_kernel, example)


@pytest.mark.claim("add_ln.jacobian", "add_rms.jacobian")
@profiles.share(0.75)
@given(data=st.data())
def test_both_gradients_flow_back(add_norm_kernel, data):
    require_backward(add_norm_kernel)
    example = data.draw(add_norm_examples(add_norm_kernel, upstream=True, ndims=BATCHES), "example")
    evidence.check(check_vjp, add_norm_kernel, example)


@pytest.mark.claim("add_ln.jacobian", "add_rms.jacobian")
@profiles.share(0.2)
@given(data=st.data())
def test_backward_of_the_recorded_graph(add_norm_kernel, data):
    """x, the residual, the parameters, y or residual_out (the residual stream updated in place) written in place
    between the forward and the backward, and a second backward of one graph (retain_graph=True): autograd's error
    for a saved tensor written since, or the recorded forward's gradients (properties.checks.graph). Every other draw
    has 5 to 65 rows (a multi-row path reusing a saved buffer as scratch)."""
    require_backward(add_norm_kernel)
    example = data.draw(add_norm_examples(add_norm_kernel, upstream=True, every_input=True, more_rows_every=2),
                        "example")
    evidence.check(check_backward_of_the_recorded_graph, add_norm_kernel, example)


@pytest.mark.claim("add_ln.jacobian", "add_rms.jacobian")
@pytest.mark.parametrize("n", PARAMETER_GRADIENT_ROWS)
@profiles.share(0.05)
@given(data=st.data())
def test_parameter_gradients_over_many_rows(add_norm_kernel, n, data):
    """dgamma and dbeta sum over every row: 67 to 1031 rows (strategies.PARAMETER_GRADIENT_ROWS) of a small width
    (a prefill's tokens; one example each)."""
    require_backward(add_norm_kernel)
    example = add_norm_examples(add_norm_kernel, d=st.sampled_from([8, 17, 32]), upstream=True, every_input=True,
                                n=n)
    evidence.check(check_vjp, add_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
@profiles.share(0.25)
@given(data=st.data())
def test_forward_in_torch_default_modes(add_norm_kernel, data):
    """The calls in torch's default modes (checks.modes: the other tests call kernels in torch's
    deterministic-algorithms mode, which fills uninitialized memory with NaN): a path a kernel takes only outside
    that mode (atomic adds unless deterministic algorithms are asked for) is checked too."""
    example = data.draw(add_norm_examples(add_norm_kernel, every_input=True, ndims=BATCHES), "example")
    evidence.check(check_forward, add_norm_kernel, {**example, "default_modes": True})


@pytest.mark.claim("add_ln.jacobian", "add_rms.jacobian")
@profiles.share(0.25)
@given(data=st.data())
def test_vjp_in_torch_default_modes(add_norm_kernel, data):
    """The calls in torch's default modes (checks.modes: the other tests call kernels in torch's
    deterministic-algorithms mode, which fills uninitialized memory with NaN): a path a kernel takes only outside
    that mode (atomic adds unless deterministic algorithms are asked for) is checked too."""
    require_backward(add_norm_kernel)
    example = data.draw(add_norm_examples(add_norm_kernel, upstream=True, every_input=True, ndims=BATCHES),
                        "example")
    evidence.check(check_vjp, add_norm_kernel, {**example, "default_modes": True})


@pytest.mark.claim("add_ln.jacobian", "add_rms.jacobian")
@profiles.share(0.1)
@given(data=st.data())
def test_vjp_after_a_call_in_inference_mode(add_norm_kernel, data):
    """The same inputs called under torch.inference_mode() first (fused.check_vjp_after_a_call_in_inference_mode)."""
    require_backward(add_norm_kernel)
    example = data.draw(add_norm_examples(add_norm_kernel, upstream=True), "example")
    evidence.check(check_vjp_after_a_call_in_inference_mode, add_norm_kernel, example)


def float64_residual_examples(draw, kernel, upstream: bool) -> dict:
    """strategies.float64_examples' x, weight and bias with a float64 residual of its own offset (and dy, dh with
    ``upstream``), all 53 bits drawn. A kernel declaring a float32 residual stream skips: its residual_out of float64
    x is float32 by declaration."""
    if kernel.residual_dtype == "float32":
        pytest.skip(f"{kernel.name} declares a float32 residual stream (residual_dtype='float32'): residual_out of "
                    "float64 x is float32 by declaration")
    example = draw(float64_examples(kernel))
    x = example["x"]
    device = str(x.device)
    shape = tuple(x.shape)
    offset = draw(st.sampled_from((0.0, 3.0, -100.0)), "residual offset")
    example["residual"] = rounded(offset + standard_values(shape, "normal", draw(seeds(), "residual seed")),
                                  torch.float64, device)
    if upstream:
        example["dy"] = rounded(standard_values(shape, "normal", draw(seeds(), "dy seed")), torch.float64, device)
        example["dh"] = rounded(standard_values(shape, "normal", draw(seeds(), "dh seed")), torch.float64, device)
    return example


@pytest.mark.claim("add_ln.forward", "add_rms.forward")
@profiles.share(0.25)
@given(data=st.data())
def test_forward_in_float64(add_norm_kernel, data):
    """float64 x, residual, weight and bias: residual_out and y in float64 (vLLM's forward_native normalizes in
    float32 whatever x's dtype); a kernel refusing float64 with an error skips, saying so."""
    example = float64_residual_examples(data.draw, add_norm_kernel, upstream=False)
    norms.require_float64(add_norm_kernel, example)
    evidence.check(check_forward_in_float64, add_norm_kernel, example)


@pytest.mark.claim("add_ln.jacobian", "add_rms.jacobian")
@profiles.share(0.25)
@given(data=st.data())
def test_vjp_in_float64(add_norm_kernel, data):
    """float64 inputs, dy and dh: every gradient in float64."""
    require_backward(add_norm_kernel)
    example = float64_residual_examples(data.draw, add_norm_kernel, upstream=True)
    norms.require_float64(add_norm_kernel, {k: v for k, v in example.items() if k not in ("dy", "dh")})
    evidence.check(check_vjp_in_float64, add_norm_kernel, example)


# The inputs left frozen (not requiring grad) by test_gradients_when_only_some_inputs_require_grad.
FROZEN = (("x",), ("residual",), ("x", "residual"), ("weight",), ("bias",), ("weight", "bias"))


@pytest.mark.claim("add_ln.jacobian", "add_rms.jacobian")
@pytest.mark.parametrize("frozen", FROZEN, ids="+".join)
@profiles.share(0.05)
@given(data=st.data())
def test_gradients_when_only_some_inputs_require_grad(add_norm_kernel, frozen, data):
    """``frozen`` not requiring grad (the branch or the residual stream from a frozen part of a model, frozen norm
    weights): each input that requires grad gets its gradient, as the oracle's (rows of at least 4: at d = 1 a
    gradient that leaves gamma out when the weight is frozen is right)."""
    require_backward(add_norm_kernel)
    skip_unless_a_strict_subset(add_norm_kernel, frozen, ("x", "residual", "weight", "bias"))
    example = data.draw(add_norm_examples(add_norm_kernel, min_width=4, upstream=True, every_input=True,
                                          residual="independent"), "example")
    evidence.check(check_vjp, add_norm_kernel, {**example, "frozen": frozen})


@pytest.mark.claim("add_ln.jacobian", "add_rms.jacobian")
@pytest.mark.parametrize("d", WIDE_ROWS)
@profiles.share(0.05)
@given(data=st.data())
def test_both_gradients_flow_back_beyond_8192_columns(add_norm_kernel, d, data):
    """d = 8193 to 65536 (strategies.WIDE_ROWS), in the dtypes where the backward bound has no width limit (all but a
    declared 16-bit storage-precision backward's)."""
    require_backward(add_norm_kernel)
    dtypes = tuple(t for t in PROBED_DTYPES if storage_backward_width(add_norm_kernel, t) is None)
    example = add_norm_examples(add_norm_kernel, d=d, upstream=True, dtypes=dtypes)
    evidence.check(check_vjp, add_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("add_ln.jacobian", "add_rms.jacobian")
@over_parameter_mixes
@profiles.share(0.25)
@given(data=st.data())
def test_both_gradients_flow_back_with_parameters_in_another_dtype(add_norm_kernel, mix, data):
    """dx and dresidual in their dtypes, dweight and dbias in the parameters' own, each within its bound."""
    require_backward(add_norm_kernel)
    example = mixed_parameter_examples(add_norm_kernel, mix, add_norm_examples, upstream=True, ndims=BATCHES)
    example = data.draw(example, "example")
    evidence.check(check_vjp, add_norm_kernel, example)


@pytest.mark.claim("add_ln.jacobian", "add_rms.jacobian")
@over_residual_mixes
@profiles.share(0.1)
@given(data=st.data())
def test_both_gradients_flow_back_beside_a_float32_residual(add_norm_kernel, mix, data):
    """A float32 residual beside 16-bit x: dx in x's dtype, dresidual in float32, each J^T dy + dh within its
    bound (a dresidual rounded through x's dtype fails); the parameters in x's dtype or float32 (as above)."""
    require_backward(add_norm_kernel)
    example = data.draw(residual_mix_examples(add_norm_kernel, mix, upstream=True, ndims=BATCHES, mixed=True),
                        "example")
    evidence.check(check_vjp, add_norm_kernel, {**example, "any_dtype": True})


@pytest.mark.claim("add_ln.inputs_unmodified", "add_rms.inputs_unmodified")
@profiles.share(0.5)
@given(data=st.data())
def test_inputs_unmodified(add_norm_kernel, data):
    """Every other draw has 5 to 65 rows, and half are a forward in inference mode (a serving path of its own)."""
    example = add_norm_examples(add_norm_kernel, upstream=True, every_input=True, mixed=True, ndims=BATCHES,
                                more_rows_every=2)
    example = data.draw(example, "example")
    evidence.check(check_inputs_unmodified, add_norm_kernel, {**example, "inference": data.draw(st.booleans())})


@pytest.mark.claim("add_ln.inputs_unmodified", "add_rms.inputs_unmodified")
@profiles.share(0.25)
@given(data=st.data())
def test_outputs_are_fresh_tensors(add_norm_kernel, data):
    """A second call (on -x) leaves y and residual_out of the first as they were, half the draws under
    torch.inference_mode() (a serving path that returns a static buffer)."""
    example = data.draw(add_norm_examples(add_norm_kernel), "example")
    evidence.check(check_outputs_of_a_call_fresh, add_norm_kernel,
                   {**example, "other": -example["x"], "inference": data.draw(st.booleans(), "inference")})


@pytest.mark.claim("add_ln.inputs_unmodified", "add_rms.inputs_unmodified")
@profiles.share(0.1)
@given(data=st.data())
def test_inputs_unmodified_by_a_prefill_in_inference_mode(add_norm_kernel, data):
    """65 or 257 rows (past the 64 and 256 tokens at which serving stacks switch to a prefill path) of a width up to
    64, the forward in inference mode: a path of its own that may use an input as scratch."""
    example = add_norm_examples(add_norm_kernel, d=widths(max_width=64), n=data.draw(st.sampled_from(PREFILL_ROWS)),
                                upstream=True, every_input=True)
    evidence.check(check_inputs_unmodified, add_norm_kernel, {**data.draw(example, "example"), "inference": True})


@pytest.mark.claim("add_ln.inputs_unmodified", "add_rms.inputs_unmodified")
@profiles.share(1 / 20)
@given(data=st.data())
def test_inputs_unmodified_above_65536_elements(add_norm_kernel, data):
    """32 float32 rows of 4096 (a large-input path of its own, e.g. one updating the residual in place)."""
    rows, d = LARGE_INPUT_SHAPE
    example = add_norm_examples(add_norm_kernel, d=d, n=rows, dtypes=(torch.float32,), upstream=True,
                                every_input=True, mixed=True)
    evidence.check(check_inputs_unmodified, add_norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("add_ln.row_independence", "add_rms.row_independence")
@profiles.share(0.5)
@given(data=st.data())
def test_changing_one_row_changes_no_other(add_norm_kernel, data):
    example = data.draw(add_norm_examples(add_norm_kernel, residual="independent", mixed=True), "example")
    evidence.check(check_changing_one_row, add_norm_kernel, data.draw(row_zero_changed(example), "changed"))


PARAMETER_LAYOUTS = ("contiguous", "offset", "every other element")
# x's and the residual's: strided, transposed, or contiguous from an odd storage offset (a pointer not aligned for
# vector loads: flashinfer-ai/flashinfer#634, TransformerEngine#886)
INPUT_LAYOUTS = (*LAYOUTS, "odd offset")


@pytest.mark.claim("add_ln.layout_invariance", "add_rms.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_strided_inputs(add_norm_kernel, data):
    """x and the residual strided or at an odd storage offset (INPUT_LAYOUTS); weight and bias as they are, or views
    into a larger buffer (offset, every other element: a fused kernel reading its weight as ptr + column,
    vllm-project/vllm#17735); the gradients through them too (contiguous dy and dh)."""
    example = data.draw(add_norm_examples(add_norm_kernel, d=widths().filter(lambda d: d >= 2), mixed=True,
                                          every_input=True, upstream=True), "example")
    layout = data.draw(st.sampled_from(INPUT_LAYOUTS), "layout")
    parameters = data.draw(st.sampled_from(PARAMETER_LAYOUTS), "weight and bias layout")
    views = {name: inside_a_larger_buffer(example[name], parameters) for name in ("weight", "bias")
             if parameters != "contiguous" and example.get(name) is not None}

    def laid_out(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None:
            return None
        return inside_a_larger_buffer(t, layout) if layout == "odd offset" else strided(t, layout)

    evidence.check(check_noncontiguous, add_norm_kernel, {**example, **views, "x": laid_out(example["x"]),
                                                          "residual": laid_out(example["residual"])})


@pytest.mark.claim("add_ln.layout_invariance", "add_rms.layout_invariance")
@profiles.share(0.25)
@given(data=st.data())
def test_batch_and_sequence_axes_swapped(add_norm_kernel, data):
    """x and residual, then dy and dh, [2, 3, d] views of [3, 2, d] tensors: rows unevenly spaced (a kernel stepping
    rows by stride(-2) reads the wrong ones)."""
    example = data.draw(add_norm_examples(add_norm_kernel, d=widths().filter(lambda d: d >= 2), upstream=True,
                                          residual="independent", n=6), "example")
    layout = data.draw(st.sampled_from(SEQUENCE_LAYOUTS), "layout")
    swapped = {name: strided(example[name].reshape(2, 3, -1), layout)
               for name in ("x", "residual", "dy", "dh")}
    forward = {name: t for name, t in example.items() if name not in ("dy", "dh")}
    evidence.check(check_noncontiguous, add_norm_kernel, {**forward, "x": swapped["x"], "residual": swapped["residual"],
                                                          "dy": example["dy"].reshape(2, 3, -1),
                                                          "dh": example["dh"].reshape(2, 3, -1)})
    if discover(add_norm_kernel).backward:
        contiguous = {name: example[name].reshape(2, 3, -1) for name in ("x", "residual")}
        evidence.check(check_noncontiguous_upstream, add_norm_kernel,
                       {**example, **contiguous, "dy": swapped["dy"], "dh": swapped["dh"]})


@pytest.mark.claim("add_ln.layout_invariance", "add_rms.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_strided_upstream_gradients(add_norm_kernel, data):
    """dy and dh strided, transposed or expanded (autograd's upstream gradient of a sum has stride 0)."""
    require_backward(add_norm_kernel)
    example = data.draw(add_norm_examples(add_norm_kernel, d=widths().filter(lambda d: d >= 2), upstream=True,
                                          ndims=BATCHES), "example")
    layout = data.draw(st.sampled_from(UPSTREAM_LAYOUTS), "layout")
    evidence.check(check_noncontiguous_upstream, add_norm_kernel,
                   {**example, "dy": strided(example["dy"], layout), "dh": strided(example["dh"], layout)})
