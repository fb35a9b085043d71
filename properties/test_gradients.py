"""ln.jacobian / rms.jacobian: the kernel's VJPs for x, gamma (and beta) against the derived Jacobian;
ln.gradient_identities / rms.gradient_identities: the identities every correct backward satisfies.

The checks, and the derivation each rests on: :mod:`properties.checks.gradients`.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from core.capabilities import PROBED_DTYPES, dtype_name
from properties import evidence, norms
from properties.bounds import tolerance
from properties.checks.forward import AUTOCAST_DTYPES
from properties.checks.gradients import (
    check_backward_of_the_recorded_graph,
    check_gradient_identities,
    check_vjp,
    check_vjp_after_a_call_in_inference_mode,
    check_vjp_in_float64,
    check_vjp_under_autocast,
)
from properties.draws.strategies import (
    NDIMS,
    PARAMETER_GRADIENT_ROWS,
    WIDE_ROWS,
    backward_width_limit,
    float64_examples,
    mixed_parameter_examples,
    norm_examples,
    over_parameter_mixes,
    rounded,
    seeds,
    standard_values,
)
from properties.run import profiles

# Gradient claims see 2-D, 3-D and 4-D x (strategies.NDIMS): dgamma and dbeta sum over every leading dimension.
# Every gradient claim checks a width above 1024 in every run (tiled backwards split rows into blocks there),
# in the dtypes whose backward bound is finite at that width (strategies.backward_width_limit).
WIDE = st.sampled_from([1025, 2048, 4096])


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@profiles.share(0.75)
@given(data=st.data())
def test_vjp_matches_the_derived_jacobian(norm_kernel, data):
    norms.require_backward(norm_kernel)
    example = data.draw(norm_examples(norm_kernel, upstream=True, ndims=NDIMS), label="example")
    evidence.check(check_vjp, norm_kernel, example)


# eps of the zero-row test: a zero row's dx is g / sqrt(eps), within float16's range (1e-12 gives 1e6 g)
ZERO_ROW_EPS = st.sampled_from([1e-5, 1e-6, 1e-2])


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@profiles.share(0.1)
@given(data=st.data())
def test_vjp_with_all_zero_rows_among_others(norm_kernel, data):
    """Rows of zeros among ordinary rows (padding tokens): RMSNorm's rstd there is 1/sqrt(eps) and dx = rstd g, not 0
    (a backward that zeroes the gradient of rows whose mean square is 0, taking them for padding, fails); LayerNorm's
    is rstd (g - mean(g))."""
    norms.require_backward(norm_kernel)
    example = data.draw(norm_examples(norm_kernel, upstream=True, n=st.integers(2, 6), eps=ZERO_ROW_EPS),
                        label="example")
    rows = example["x"].shape[0]
    zeroed = data.draw(st.lists(st.integers(0, rows - 1), min_size=1, max_size=rows - 1, unique=True), label="zeroed")
    x = example["x"].clone()
    x[zeroed] = 0
    # a zero row's rstd is 1/sqrt(eps): in a declared 16-bit backward it may overflow (no finite bound: unchecked)
    assume(all(np.isfinite(bound).all() for bound in tolerance.backward(
        norm_kernel, x, example["weight"], example["eps"], example["dy"], bias=example.get("bias")).values()))
    evidence.check(check_vjp, norm_kernel, {**example, "x": x})


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@profiles.share(0.1)
@given(data=st.data())
def test_vjp_at_widths_above_1024(norm_kernel, data):
    norms.require_backward(norm_kernel)
    example = norm_examples(norm_kernel, d=WIDE, dtypes=wide_dtypes(norm_kernel), upstream=True, ndims=NDIMS)
    evidence.check(check_vjp, norm_kernel, data.draw(example, label="example"))


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@pytest.mark.parametrize("frozen", norms.FROZEN_SUBSETS, ids="+".join)
@profiles.share(0.05)
@given(data=st.data())
def test_vjp_when_only_some_inputs_require_grad(norm_kernel, frozen, data):
    """``frozen`` not requiring grad: the parameters (frozen norm weights, as in LoRA fine-tuning), x (a norm over
    frozen embeddings), or one of weight and bias: each input that requires grad gets its gradient, as the oracle's
    (a backward reading ctx.needs_input_grad at the wrong index drops one, or leaves gamma out of dx when the weight
    is frozen, unsloth#45). Rows of at least 4 (at d = 1 LayerNorm's dx is 0 and RMSNorm's eps-sized, whatever
    gamma)."""
    norms.require_backward(norm_kernel)
    norms.skip_unless_a_strict_subset(norm_kernel, frozen, ("x", "weight", "bias"))
    example = data.draw(norm_examples(norm_kernel, min_width=4, upstream=True, every_input=True,
                                      ndims=NDIMS), label="example")
    evidence.check(check_vjp, norm_kernel, {**example, "frozen": frozen})


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@pytest.mark.parametrize("d", WIDE_ROWS)
@profiles.share(0.05)
@given(data=st.data())
def test_vjp_beyond_8192_columns(norm_kernel, d, data):
    """Two rows of d = 8193 to 65536 (strategies.WIDE_ROWS), in the dtypes of :func:`wide_dtypes`."""
    norms.require_backward(norm_kernel)
    example = norm_examples(norm_kernel, d=d, n=st.just(2), dtypes=wide_dtypes(norm_kernel), upstream=True)
    evidence.check(check_vjp, norm_kernel, data.draw(example, label="example"))


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@profiles.share(0.25)
@given(data=st.data())
def test_vjp_in_float64(norm_kernel, data):
    """float64 x, weight, bias and dy (torch.autograd.gradcheck, scientific code): dx, dweight and dbias in float64
    (strategies.float64_examples); a kernel refusing float64 with an error skips, saying so."""
    norms.require_backward(norm_kernel)
    example = data.draw(float64_examples(norm_kernel), label="example")
    norms.require_float64(norm_kernel, example)
    x = example["x"]
    dy = standard_values(tuple(x.shape), "normal", data.draw(seeds(), label="dy seed"))
    evidence.check(check_vjp_in_float64, norm_kernel, {**example, "dy": rounded(dy, torch.float64, str(x.device))})


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@pytest.mark.parametrize("default_dtype", (torch.bfloat16, torch.float64), ids=dtype_name)
@profiles.share(0.1)
@given(data=st.data())
def test_vjp_under_another_default_dtype(norm_kernel, default_dtype, data):
    """Every kernel call with torch's default dtype set to bfloat16 or float64 (a program's
    torch.set_default_dtype; the inputs as drawn): a kernel allocating its accumulators, scalars or output with the
    default dtype (transformers#29496) is off there (checks.modes)."""
    norms.require_backward(norm_kernel)
    example = data.draw(norm_examples(norm_kernel, upstream=True, every_input=True), label="example")
    evidence.check(check_vjp, norm_kernel, {**example, "default_dtype": default_dtype})


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@profiles.share(0.1)
@given(data=st.data())
def test_vjp_after_a_call_in_inference_mode(norm_kernel, data):
    """The same inputs called under torch.inference_mode() first (gradients.check_vjp_after_a_call_in_inference_mode:
    a tensor cached there cannot be saved for the backward)."""
    norms.require_backward(norm_kernel)
    example = data.draw(norm_examples(norm_kernel, upstream=True), label="example")
    evidence.check(check_vjp_after_a_call_in_inference_mode, norm_kernel, example)


DEFAULT_MODES_ROWS = (8, 67, 131)  # rows enough for a parameter gradient summed by programs' partials


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@profiles.share(0.25)
@given(data=st.data())
def test_vjp_in_torch_default_modes(norm_kernel, data):
    """The calls in torch's default modes (checks.modes: the other tests call kernels in torch's
    deterministic-algorithms mode, which fills uninitialized memory with NaN): a path a kernel takes only outside
    that mode (atomic adds unless deterministic algorithms are asked for) is checked too."""
    norms.require_backward(norm_kernel)
    example = norm_examples(norm_kernel, d=st.sampled_from([8, 17, 32, 256]), upstream=True, every_input=True,
                            n=st.sampled_from(DEFAULT_MODES_ROWS))
    evidence.check(check_vjp, norm_kernel, {**data.draw(example, label="example"), "default_modes": True})


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@pytest.mark.parametrize("autocast", AUTOCAST_DTYPES, ids=dtype_name)
@profiles.share(0.1)
@given(data=st.data())
def test_vjp_under_autocast(norm_kernel, autocast, data):
    """float32 x, weight, bias and dy, forward and backward under torch.autocast to bfloat16 and to float16 (a
    mixed-precision training step): the gradients in float32, or those of the inputs cast to autocast's dtype where
    the kernel casts them (gradients.check_vjp_under_autocast)."""
    norms.require_backward(norm_kernel)
    example = norm_examples(norm_kernel, dtypes=(torch.float32,), parameter_dtype=torch.float32, every_input=True,
                            upstream=True)
    evidence.check(check_vjp_under_autocast, norm_kernel,
                   {**data.draw(example, label="example"), "autocast": autocast})


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@pytest.mark.parametrize("n", PARAMETER_GRADIENT_ROWS)
@profiles.share(0.05)
@given(data=st.data())
def test_parameter_gradients_over_many_rows(norm_kernel, n, data):
    """dgamma and dbeta sum over every row: 67 to 1031 rows (strategies.PARAMETER_GRADIENT_ROWS) of a small width
    (one example each: under Triton's interpreter each row is a program)."""
    norms.require_backward(norm_kernel)
    example = norm_examples(norm_kernel, d=st.sampled_from([8, 17, 32]), upstream=True, every_input=True,
                            n=st.just(n))
    evidence.check(check_vjp, norm_kernel, data.draw(example, label="example"))


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@profiles.share(0.2)
@given(data=st.data())
def test_backward_of_the_recorded_graph(norm_kernel, data):
    """x, weight, bias or y written in place between the forward and the backward (a residual stream updated in
    place, an in-place activation, an optimizer step), and a second backward of one graph (retain_graph=True): the
    backward raises autograd's error for a saved tensor written since, or gives the gradients of the forward it
    recorded (properties.checks.graph). Every other draw has 5 to 65 rows (a multi-row path reusing a saved buffer
    as scratch)."""
    norms.require_backward(norm_kernel)
    example = data.draw(norm_examples(norm_kernel, upstream=True, every_input=True, ndims=NDIMS, more_rows_every=2),
                        label="example")
    evidence.check(check_backward_of_the_recorded_graph, norm_kernel, example)


@pytest.mark.claim("ln.gradient_identities", "rms.gradient_identities")
@profiles.share(0.5)
@given(data=st.data())
def test_gradient_identities(norm_kernel, data):
    norms.require_backward(norm_kernel)
    example = data.draw(norm_examples(norm_kernel, upstream=True, ndims=NDIMS), label="example")
    evidence.check(check_gradient_identities, norm_kernel, example)


@pytest.mark.claim("ln.gradient_identities", "rms.gradient_identities")
@profiles.share(0.1)
@given(data=st.data())
def test_gradient_identities_at_widths_above_1024(norm_kernel, data):
    norms.require_backward(norm_kernel)
    example = norm_examples(norm_kernel, d=WIDE, dtypes=wide_dtypes(norm_kernel), upstream=True, ndims=NDIMS)
    evidence.check(check_gradient_identities, norm_kernel, data.draw(example, label="example"))


@pytest.mark.claim("ln.jacobian", "rms.jacobian")
@over_parameter_mixes
@profiles.share(0.25)
@given(data=st.data())
def test_vjp_with_parameters_in_another_dtype(norm_kernel, mix, data):
    """dx in x's dtype, dweight and dbias in the parameters' own dtype, each within its bound (float32 weight and
    bias with 16-bit x, 16-bit ones with float32 x)."""
    norms.require_backward(norm_kernel)
    example = mixed_parameter_examples(norm_kernel, mix, upstream=True, ndims=NDIMS)
    evidence.check(check_vjp, norm_kernel, data.draw(example, label="example"))


@pytest.mark.claim("ln.gradient_identities", "rms.gradient_identities")
@over_parameter_mixes
@profiles.share(0.25)
@given(data=st.data())
def test_gradient_identities_with_parameters_in_another_dtype(norm_kernel, mix, data):
    norms.require_backward(norm_kernel)
    example = mixed_parameter_examples(norm_kernel, mix, upstream=True, ndims=NDIMS)
    evidence.check(check_gradient_identities, norm_kernel, data.draw(example, label="example"))


def wide_dtypes(kernel) -> tuple:
    """The kernel's storage dtypes in which its backward bound is finite at every width of WIDE (and beyond: all but
    a 16-bit storage-precision backward's, whose limit is below 4096)."""
    return tuple(d for d in PROBED_DTYPES if backward_width_limit(kernel, d, tolerance.bound_in_use()) >= 4096)
