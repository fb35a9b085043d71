"""properties.draws.strategies generate what their names say."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from core.registry import Kernel, resolve
from properties import norms
from properties.bounds import tolerance
from properties.draws import strategies

LN = Kernel("torch-ln", "layernorm", lambda x, weight, bias, eps: torch.nn.functional.layer_norm(
    x, (x.shape[-1],), weight, bias, eps), dtypes=(torch.float32, torch.float16))
BF16_LN = Kernel("bf16-ln", "layernorm", LN.fn, dtypes=(torch.bfloat16,))
GEMMA = Kernel("gemma", "rmsnorm", lambda x, weight, eps: x, weight_offset=1.0, dtypes=(torch.float32,))


def test_widths_cover_small_primes_powers_of_two_with_neighbours_vector_tails_and_model_widths():
    allowed = set(strategies.SMALL_WIDTHS + strategies.SMALL_PRIMES
                  + strategies.powers_of_two_and_neighbours(strategies.CI_MAX_WIDTH)
                  + strategies.vector_tail_widths(strategies.CI_MAX_WIDTH)
                  + strategies.even_tail_widths(strategies.CI_MAX_WIDTH)
                  + strategies.three_times_powers_of_two(strategies.CI_MAX_WIDTH))
    assert {1, 2, 3, 5, 127, 255, 256, 257, 8191, 8192, 24, 264, 1032, 4104, 8184, 96, 768, 3072, 6144} <= allowed
    assert {d % 8 for d in strategies.even_tail_widths(strategies.CI_MAX_WIDTH)} == {2, 4, 6}, "every even tail"
    assert max(allowed) == 8192
    tails = strategies.vector_tail_widths(strategies.CI_MAX_WIDTH)
    assert all(d % 8 == 0 and (d // 8) % 2 == 1 for d in tails), "odd multiples of 8: a partial step of 16 or more"

    @settings(max_examples=300, derandomize=True, database=None)
    @given(strategies.widths())
    def drawn(d):
        assert d in allowed
        seen.append(d)

    seen: list[int] = []
    drawn()
    large = sum(d >= 1024 for d in seen) / len(seen)
    assert 0 < large < 0.3, "large widths must be drawn, and rarely"


def test_a_kernel_that_compiles_per_width_draws_its_widths_from_the_palette():
    """core.kernel.Kernel.compiles_per_width: inside palette_widths_only, widths() draws every palette width and no
    other; outside, the other candidates too; the palette keeps each kind of edge."""
    candidates = strategies.all_width_candidates()
    assert set(strategies.WIDTH_PALETTE) <= set(candidates)
    assert {1, 2, 3, 7, 8, 17, 256, 257, 520, 1032, 3072, 4097, 8191} <= set(strategies.WIDTH_PALETTE)

    def drawn_widths(palette: bool) -> set[int]:
        seen: set[int] = set()

        @settings(max_examples=400, derandomize=True, database=None)
        @given(st.data())
        def draw(data):
            with strategies.palette_widths_only(palette):
                seen.add(data.draw(strategies.widths()))

        draw()
        return seen

    assert drawn_widths(True) == set(strategies.WIDTH_PALETTE)
    assert drawn_widths(False) - set(strategies.WIDTH_PALETTE), "all candidates outside the palette's context"
    assert strategies.width_candidates() == candidates


@settings(max_examples=50, derandomize=True, database=None)
@given(d=st.sampled_from([1, 7, 64]), ratio=st.sampled_from([0.0, 1e2, -1e4]), scale=st.sampled_from([1e-3, 1.0]),
       data=st.data())
def test_rows_have_the_asked_width_offset_and_scale(d, ratio, scale, data):
    x = data.draw(strategies.rows(d, offset=ratio, scale=scale))
    assert x.dtype == torch.float64
    assert x.shape[-1] == d and (1 <= x.shape[0] <= 4 or x.shape[0] in strategies.MORE_ROWS)
    centre = x.mean() / scale
    assert abs(centre - ratio) <= 40  # z is O(1): |mean(z)| is at most its largest entry (a spike is 30 + N(0,1))


# too_slow: the first example compiles the oracles and the error model (SymPy lambdify, ~1.5 s), as the suite's
# profiles allow (properties.run.profiles)
@settings(max_examples=40, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_norm_examples_are_rounded_to_a_probed_dtype_and_follow_the_weight_convention(data):
    example = data.draw(strategies.norm_examples(GEMMA))
    assert set(example) == {"x", "weight", "eps"}
    assert example["x"].dtype == torch.float32 and example["weight"] is not None  # Gemma always gets a weight
    assert example["eps"] in strategies.EPSILONS
    example = data.draw(strategies.norm_examples(LN, upstream=True))
    assert set(example) == {"x", "weight", "bias", "eps", "dy"}
    assert example["x"].dtype in LN.dtypes and example["dy"].shape == example["x"].shape


def test_rounded_values_are_exactly_representable():
    x = torch.tensor([1 / 3, 1e-9, 70000.0], dtype=torch.float64)
    half = strategies.rounded(x, torch.float16, "cpu")
    assert half.dtype == torch.float16
    assert torch.equal(half.double().half(), half)


@settings(max_examples=60, derandomize=True, database=None)
@given(data=st.data())
def test_effective_weights_include_constant_random_zero_and_negative_entries(data):
    gamma = data.draw(strategies.effective_weights(9))
    if gamma is not None:
        assert gamma.shape == (9,)
        seen.add("constant" if bool((gamma == gamma[0]).all()) else "varying")
        if bool((gamma == 0).any()) and bool((gamma < 0).any()):
            seen.add("zeros and negatives")
    else:
        seen.add("none")


seen: set[str] = set()


def test_every_weight_form_was_seen():
    test_effective_weights_include_constant_random_zero_and_negative_entries()
    assert seen == {"none", "constant", "varying", "zeros and negatives"}


@pytest.mark.parametrize(("model", "dtypes"), [("worst-case", (torch.float32, torch.float16)),
                                               ("probabilistic", (torch.float32,))])
def test_valid_offset_ratio_keeps_the_forward_bound_finite(model, dtypes):
    """For rows of spread ~1 (d >= 8); a constant row has kappa = |x|/sqrt(eps) whatever the offset. float16 rows
    at the probabilistic range are quantized to a few values: their sums fall back to the worst case, and
    norm_examples draws them again within its range (next tests)."""
    for d in (8, 64, 1000, 8192):
        for dtype in dtypes:
            ratio = strategies.valid_offset_ratio(d, dtype, model)
            x = (ratio + torch.randn(2, d, generator=torch.Generator().manual_seed(d), dtype=torch.float64)).to(dtype)
            assert np.isfinite(tolerance.forward(LN, x, None, None, 1e-12, model=model)).all()
    assert strategies.valid_offset_ratio(8192, torch.float32, "probabilistic") > 20 * strategies.valid_offset_ratio(
        8192, torch.float32, "worst-case")


@settings(max_examples=24, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(d=st.sampled_from([8, 64, 513, 1023, 8192]), dtype=st.sampled_from([torch.bfloat16, torch.float16]),
       sign=st.sampled_from([1.0, -1.0]), data=st.data())
def test_16_bit_rows_one_ulp_apart_reach_float32s_cap_inside_the_bound(d, dtype, sign, data):
    """16-bit storage sums in float32: rows one ulp apart are drawn up to float32's cap (1e4), lowered to the worst
    case's reach (rho_t ~ 1/2: 7 350 at d = 512, 460 at 8 192), where their bound (worst case in either model:
    they are structured) stays finite."""
    ratio = strategies.valid_offset_ratio(d, dtype, one_ulp_apart=True)
    reach = strategies.STRUCTURED_REACH / ((d + 1) * 2.0**-24)
    assert ratio == pytest.approx(min(strategies.ONE_ULP_MAX_OFFSET_RATIO, reach))
    assume(ratio > strategies.resolved_offset_ratio(dtype))  # float16 at d = 8192: 460, continuous rows (not these)
    rows = data.draw(strategies.stored_rows(d, 2, sign * ratio, dtype, one_ulp_apart=True))
    x = strategies.rounded(rows, dtype, "cpu")
    for model in ("probabilistic", "worst-case"):
        assert np.isfinite(tolerance.forward(LN, x, None, None, 1e-12, model=model)).all()


def test_16_bit_rows_resolve_their_spread_up_to_2_to_the_significand_bits():
    assert strategies.resolved_offset_ratio(torch.bfloat16) == 256
    assert strategies.resolved_offset_ratio(torch.float16) == 2048
    assert strategies.resolved_offset_ratio(torch.float32) > strategies.ONE_ULP_MAX_OFFSET_RATIO


@settings(max_examples=60, derandomize=True, database=None)
@given(d=st.sampled_from([2, 17, 511, 4096]), dtype=st.sampled_from([torch.bfloat16, torch.float16]),
       offset=st.sampled_from([1e3, -3e3, 1e4, -1e4]), scale=st.sampled_from([0.01, 1.0, 30.0]), data=st.data())
def test_rows_one_ulp_apart_are_exact_and_reach_the_asked_ratio_where_the_dtype_allows(d, dtype, offset, scale,
                                                                                       data):
    """Each row: a centre c (sign of the offset) and k >= 1 values one ulp(c) from it (half an ulp below a power of
    two), exact in the dtype; |mean|/std within 2x of |offset| wherever 1 <= k <= d/2 reaches it
    (sqrt(2) |c|/ulp(c) <= |offset| <= sqrt(d) |c|/ulp(c)), and at least (|c|/ulp(c)) sqrt(d/2)/2 where k = 1."""
    x = data.draw(strategies.rows_one_ulp_apart(d, 3, offset, scale, dtype))
    assert torch.equal(x.to(dtype).double(), x)
    for row in x:
        centre = float(row.mode().values)
        ulp = 2.0 ** np.floor(np.log2(abs(centre))) * torch.finfo(dtype).eps
        assert np.sign(centre) == np.sign(offset)
        assert 1 <= int((row != centre).sum()) <= max(1, d // 2)
        assert float((row - centre).abs().max()) <= ulp
        kappa = abs(float(row.mean())) / float(row.std(correction=0))
        reach = abs(centre) / ulp
        if np.sqrt(2) * reach <= abs(offset) <= np.sqrt(d) * reach:
            assert abs(offset) / 2 <= kappa <= 2 * abs(offset)
        if abs(offset) > np.sqrt(d) * reach:
            assert kappa >= reach * np.sqrt(d / 2) / 2


def test_16_bit_rows_beyond_their_resolution_are_drawn_one_ulp_apart():
    """At |mean|/std 1e4 a continuous bfloat16 row collapses to a constant; norm_examples(one_ulp_apart=True) draws it
    one ulp apart instead and keeps such rows where the bound covers them (kappa in the thousands at d = 513)."""
    seen = []

    @settings(max_examples=10, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(strategies.norm_examples(BF16_LN, d=st.just(513), offset_ratio=st.just(1e4), eps=st.just(1e-5),
                                    one_ulp_apart=True))
    def drawn(example):
        x = example["x"]
        assert all(len(torch.unique(row)) <= 3 for row in x)
        seen.append(float(tolerance.condition_number(x, 1e-5).max()))

    drawn()
    assert max(seen) > 3e3


def test_one_ulp_widths_are_where_the_float32_sum_of_16_bit_squares_rounds():
    assert strategies.one_ulp_widths(torch.bfloat16) == (511, 512, 513, 520, 768, 1016, 1023, 1024, 1025)
    assert strategies.one_ulp_widths(torch.float16) == (7, 8, 9, 11, 13, 15, 16, 17)
    assert strategies.one_ulp_widths(torch.float32) == ()


@settings(max_examples=30, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_norm_examples_always_have_a_finite_forward_bound(data):
    example = data.draw(strategies.norm_examples(LN, offset_ratio=st.sampled_from([1e4, -1e3])))
    assert np.isfinite(tolerance.forward(LN, example["x"], example["weight"], example["bias"], example["eps"])).all()


def test_gradients_beyond_the_storage_range_are_not_representable():
    """A zero row with eps = 1e-12 has Jacobian entries ~ 1/sqrt(eps) = 1e6: inf is float16's correct rounding of
    them, so the gradient strategies must leave the example out; float32 holds them."""
    (kernel,) = resolve("torch", "layernorm")
    zero_row = torch.zeros(1, 2, dtype=torch.float16)
    jacobian = norms.reference_jacobian(kernel, zero_row, None, 1e-12)
    assert np.abs(jacobian).max() > torch.finfo(torch.float16).max
    assert not norms.representable(jacobian, torch.float16)
    assert norms.representable(jacobian, torch.float32)
    assert norms.representable(norms.reference_jacobian(kernel, zero_row, None, 1e-5), torch.float16)


STORAGE_LN = Kernel("storage-ln", "layernorm", LN.fn, dtypes=(torch.bfloat16,), backward_precision="storage")


def test_gradient_examples_spread_rows_over_leading_dimensions_inside_the_backward_bound():
    limit = strategies.backward_width_limit(STORAGE_LN, torch.bfloat16, tolerance.bound_in_use())
    assert 8 <= limit < strategies.CI_MAX_WIDTH  # the storage-precision model stops at some dozens of columns
    shapes = set()

    @settings(max_examples=40, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(strategies.norm_examples(STORAGE_LN, upstream=True, ndims=st.sampled_from([3, 4]),
                                    n=st.sampled_from([4, 6])))
    def drawn(example):
        x = example["x"]
        shapes.add(x.dim())
        assert x.shape[-1] <= limit and x.shape == example["dy"].shape
        bounds = tolerance.backward(STORAGE_LN, x, example["weight"], example["eps"], example["dy"])
        assert all(np.isfinite(b).all() for b in bounds.values())

    drawn()
    assert shapes == {3, 4}


def test_leading_shapes_multiply_to_the_row_count():
    @settings(max_examples=30, derandomize=True, database=None)
    @given(st.integers(1, 12).flatmap(lambda n: st.tuples(st.just(n), strategies.leading_shapes(n, 4))))
    def drawn(pair):
        rows, shape = pair
        assert len(shape) == 3 and int(np.prod(shape)) == rows

    drawn()
