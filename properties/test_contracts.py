"""Contracts of LayerNorm/RMSNorm kernels: {ln,rms}.row_independence, {ln,rms}.layout_invariance,
{ln,rms}.inputs_unmodified.

The checks, and the derivation each rests on: :mod:`properties.checks.contracts`.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from core.capabilities import discover
from properties import evidence, norms
from properties.checks.contracts import (
    LAYOUTS,
    SEQUENCE_LAYOUTS,
    UPSTREAM_LAYOUTS,
    check_changing_one_row,
    check_inputs_unmodified,
    check_noncontiguous_upstream,
    check_noncontiguous_x,
    check_outputs_fresh,
    check_three_dimensional,
    check_views_into_larger_buffers,
    inside_a_larger_buffer,
    strided,
)
from properties.draws.strategies import (
    LARGE_INPUT_SHAPE,
    PREFILL_ROWS,
    norm_examples,
    rounded,
    standard_values,
    widths,
)
from properties.run import profiles


def layouts() -> st.SearchStrategy[str]:
    return st.sampled_from(LAYOUTS)


def widths_from_two() -> st.SearchStrategy[int]:
    return widths().filter(lambda d: d >= 2)


@pytest.mark.claim("ln.row_independence", "rms.row_independence")
@profiles.share(0.5)
@given(data=st.data())
def test_changing_one_row_changes_no_other(norm_kernel, data):
    example = data.draw(norm_examples(norm_kernel), label="example")
    x = example["x"]
    if x.shape[0] < 2:
        x = torch.cat([x, x.flip(0) * 0.5])
    new_row = rounded(standard_values(x.shape[-1:], "normal", data.draw(st.integers(0, 2**31 - 1), "seed")) * 7,
                      x.dtype, x.device)
    changed = x.clone()
    changed[0] = new_row
    evidence.check(check_changing_one_row, norm_kernel, {**example, "x": x, "changed": changed})


@pytest.mark.claim("ln.row_independence", "rms.row_independence")
@profiles.share(0.5)
@given(data=st.data())
def test_three_dimensional_input(norm_kernel, data):
    example = data.draw(norm_examples(norm_kernel, d=st.sampled_from([1, 3, 8, 33, 128])), label="example")
    b, s = data.draw(st.sampled_from([(2, 3), (3, 1), (1, 4)]), label="B, S")
    d = example["x"].shape[-1]
    values = standard_values((b, s, d), "normal", data.draw(st.integers(0, 2**31 - 1), "seed"))
    evidence.check(check_three_dimensional, norm_kernel, {**example, "x": rounded(values, example["x"].dtype,
                                                                                   example["x"].device)})


@pytest.mark.claim("ln.layout_invariance", "rms.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_noncontiguous_x(norm_kernel, data):
    example = data.draw(norm_examples(norm_kernel, d=widths_from_two()), label="example")
    x = strided(example["x"], data.draw(layouts(), "layout"))
    evidence.check(check_noncontiguous_x, norm_kernel, {**example, "x": x})


@pytest.mark.claim("ln.layout_invariance", "rms.layout_invariance")
@profiles.share(0.25)
@given(data=st.data())
def test_gradients_through_noncontiguous_x(norm_kernel, data):
    """x strided (its gradient too: torch.empty_like of a transposed x keeps its strides), dy contiguous."""
    norms.require_backward(norm_kernel)
    example = data.draw(norm_examples(norm_kernel, d=widths_from_two(), upstream=True), label="example")
    x = strided(example["x"], data.draw(layouts(), "layout"))
    evidence.check(check_noncontiguous_x, norm_kernel, {**example, "x": x})


@pytest.mark.claim("ln.layout_invariance", "rms.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_noncontiguous_upstream_gradient(norm_kernel, data):
    norms.require_backward(norm_kernel)
    example = data.draw(norm_examples(norm_kernel, d=widths_from_two(), upstream=True), label="example")
    dy = strided(example["dy"], data.draw(st.sampled_from(UPSTREAM_LAYOUTS), "layout"))
    evidence.check(check_noncontiguous_upstream, norm_kernel, {**example, "dy": dy})


@pytest.mark.claim("ln.layout_invariance", "rms.layout_invariance")
@profiles.share(0.25)
@given(data=st.data())
def test_batch_and_sequence_axes_swapped(norm_kernel, data):
    """x (forward and gradients), then dy, [2, 3, d] views of [3, 2, d] tensors (sequence-first activations seen
    batch-first): their rows are not evenly spaced, so a kernel stepping rows by stride(-2) reads the wrong ones."""
    example = data.draw(norm_examples(norm_kernel, d=widths_from_two(), n=st.just(6), upstream=True), "example")
    layout = data.draw(st.sampled_from(SEQUENCE_LAYOUTS), "layout")
    x, dy = (strided(example[name].reshape(2, 3, -1), layout) for name in ("x", "dy"))
    evidence.check(check_noncontiguous_x, norm_kernel, {**example, "x": x, "dy": dy.contiguous()})
    if discover(norm_kernel).backward:
        evidence.check(check_noncontiguous_upstream, norm_kernel, {**example, "x": x.contiguous(), "dy": dy})


@pytest.mark.claim("ln.inputs_unmodified", "rms.inputs_unmodified")
@profiles.share(0.5)
@given(data=st.data())
def test_inputs_unmodified(norm_kernel, data):
    """Every other draw has 5 to 65 rows, and half are a forward in inference mode (a serving path of its own)."""
    example = data.draw(norm_examples(norm_kernel, upstream=True, every_input=True, mixed=True, more_rows_every=2),
                        "example")
    evidence.check(check_inputs_unmodified, norm_kernel, {**example, "inference": data.draw(st.booleans())})


@pytest.mark.claim("ln.inputs_unmodified", "rms.inputs_unmodified")
@profiles.share(0.1)
@given(data=st.data())
def test_inputs_unmodified_by_a_prefill_in_inference_mode(norm_kernel, data):
    """65 or 257 rows of a width up to 64, the forward in inference mode: a path of its own that may use an input as
    scratch."""
    example = norm_examples(norm_kernel, d=widths(max_width=64), n=st.sampled_from(PREFILL_ROWS), upstream=True,
                            every_input=True)
    evidence.check(check_inputs_unmodified, norm_kernel, {**data.draw(example, "example"), "inference": True})


@pytest.mark.claim("ln.inputs_unmodified", "rms.inputs_unmodified")
@profiles.share(1 / 20)
@given(data=st.data())
def test_inputs_unmodified_above_65536_elements(norm_kernel, data):
    """32 float32 rows of 4096 (a large-input path of its own, e.g. one writing y over x)."""
    rows, d = LARGE_INPUT_SHAPE
    example = norm_examples(norm_kernel, d=d, n=st.just(rows), dtypes=(torch.float32,), upstream=True,
                            every_input=True, mixed=True)
    evidence.check(check_inputs_unmodified, norm_kernel, data.draw(example, "example"))


@pytest.mark.claim("ln.layout_invariance", "rms.layout_invariance")
@profiles.share(0.5)
@given(data=st.data())
def test_views_into_larger_buffers(norm_kernel, data):
    """x and dy with a storage offset and row stride d + 3, or contiguous from an odd storage offset (a pointer not
    aligned for vector loads); weight and bias offset, sometimes every other element, in x's dtype or another the
    kernel takes (float32 with 16-bit x, 16-bit with float32 x)."""
    example = data.draw(norm_examples(norm_kernel, upstream=True, every_input=True, mixed=True,
                                      ndims=st.sampled_from([2, 3])), label="example")
    rows = data.draw(st.sampled_from(["offset", "odd offset"]), label="x and dy layout")
    parameters = data.draw(st.sampled_from(["offset", "every other element"]), label="weight and bias layout")
    views = {name: inside_a_larger_buffer(t, parameters if name in ("weight", "bias") else rows)
             for name, t in example.items() if isinstance(t, torch.Tensor)}
    evidence.check(check_views_into_larger_buffers, norm_kernel, {**example, **views})


@pytest.mark.claim("ln.inputs_unmodified", "rms.inputs_unmodified")
@profiles.share(0.25)
@given(data=st.data())
def test_outputs_are_fresh_tensors(norm_kernel, data):
    """Every input present and rows of at least 2 (at d = 1 dweight is the same for x and -x: a reused workspace
    would go unseen)."""
    example = data.draw(norm_examples(norm_kernel, d=widths_from_two(), upstream=True, every_input=True),
                        label="example")
    other = -example["x"]
    evidence.check(check_outputs_fresh, norm_kernel, {**example, "other": other})
