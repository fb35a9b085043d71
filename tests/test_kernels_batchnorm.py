"""Our Triton BatchNorm (kernels/batchnorm.py) on the CPU through the interpreter, against torch's F.batch_norm in
float64 on the exact (already rounded) inputs the kernel received: y, dx, dweight, dbias and the running buffers,
ranks 2 to 5, contiguous, channels_last and strided, training and eval.

The tolerances are derived, per element, from the unit roundoffs (u of float32, the accumulation; of the storage
dtypes) and n, the elements of a channel (the helpers below say how); every element has a finite bound, and the
comparison is properties.outcome.compare's. Training mode is LayerNorm over each channel's n elements (claim
bn.forward), so y and dx take the worst-case LayerNorm bounds of proofs.error_model on the channels as rows; the
per-channel sums (dweight, dbias, the running statistics) and eval mode have their own bounds here. Each bound adds
the float64 reference's own error (the same bound at u = 2^-53). The last tests show that the kernels' usual bugs
(biased running variance, Keras' momentum, two updates, batch statistics in eval, a backward that treats the batch
statistics as constants) exceed these bounds many times over.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kernels
from kernels import batchnorm
from kernels.batchnorm import batch_norm
from proofs import error_model
from properties import outcome

EPS = 1e-5
U64 = 2.0**-53
U32 = error_model.unit_roundoff("float32")
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
# (shape, memory format): ranks 2 to 5, channels_last for 4-D and channels_last_3d for 5-D
LAYOUTS = [((7, 3), None), ((4, 3, 5), None), ((3, 4, 3, 5), None), ((3, 4, 3, 5), torch.channels_last),
           ((2, 3, 2, 3, 4), None), ((2, 3, 2, 3, 4), torch.channels_last_3d)]
LAYOUT_IDS = ["2d", "3d", "4d", "4d-channels-last", "5d", "5d-channels-last"]


def test_the_package_exports_it():
    assert kernels.batch_norm is batch_norm


# --- the bounds -------------------------------------------------------------------------------------------------------
def gamma(k: int | np.ndarray, u: float) -> np.ndarray:
    """Higham's gamma_k = k u / (1 - k u): the relative error of k roundings compounded (k u < 1)."""
    return k * u / (1 - k * u)


def unit(dtype: torch.dtype) -> float:
    return error_model.unit_roundoff(str(dtype))


def underflow(u: float) -> float:
    """eta: the absolute error of one rounding whose result is subnormal in the format of unit roundoff u."""
    return error_model.underflow(u)


def channel_rows(t: torch.Tensor) -> np.ndarray:
    """t [N, C, *] as float64 [C, n]: each channel's n = N x S elements as one row."""
    return t.detach().double().movedim(1, 0).reshape(t.shape[1], -1).numpy()


def from_rows(rows: np.ndarray, like: torch.Tensor) -> np.ndarray:
    """The inverse of :func:`channel_rows`, with like's shape."""
    shape = (like.shape[1], like.shape[0], *like.shape[2:])
    return np.moveaxis(rows.reshape(shape), 0, 1)


def spread(parameter: torch.Tensor | None, n: int) -> np.ndarray | None:
    """A per-channel parameter [C] as float64 [C, n] (one value per element of the channel's row)."""
    return None if parameter is None else np.repeat(parameter.detach().double().numpy()[:, None], n, axis=1)


def per_channel(values: np.ndarray) -> np.ndarray:
    return values.sum(axis=1)


def training_forward_bound(x, weight, bias) -> np.ndarray:
    """|y - y_ref| per element in training mode: proofs.error_model's worst-case LayerNorm bound on the channel rows
    (per-element weight and bias), u_acc = float32's u and y stored in x's dtype. The kernel's roundings are those the
    model counts: the mean (n - 1 additions, 1 division), the variance (deviation, square, n - 1 additions, division),
    rstd = 1/sqrt(var + eps) (3), y = (x - mean) * rstd * w + b (4) and y's rounding; sums in any order."""
    rows = channel_rows(x)
    bound = error_model.forward_bound(rows, spread(weight, rows.shape[1]), spread(bias, rows.shape[1]), EPS, U32,
                                      unit(x.dtype), "ln", "worst-case")
    return from_rows(bound, x)


def normalized_bound(x) -> np.ndarray:
    """Xi [C, n]: |xhat^ - xhat| of the normalized element as the kernels compute it in float32, (x - mean) * rstd
    from the float32 statistics (the forward bound without weight and bias, xhat kept in float32)."""
    return error_model.forward_bound(channel_rows(x), None, None, EPS, U32, U32, "ln", "worst-case")


def training_dx_bound(x, weight, dy) -> np.ndarray:
    """|dx - dx_ref| per element in training mode: error_model's worst-case LayerNorm backward bound on the channel
    rows. The kernel computes dx = fl(w rstd) (dy - (xhat c2 + c1)) with c1 = sum(dy)/n, c2 = sum(dy xhat)/n: its
    combination takes 3 roundings and the scale w rstd 1 more on the whole, within the model's 4 for the combination
    (C_COMBINE) plus the rounding of g' = w dy (gamma_2) that it does not have."""
    rows = channel_rows(x)
    bound = error_model.backward_bound(rows, spread(weight, rows.shape[1]), EPS, channel_rows(dy), U32,
                                       unit(x.dtype), "ln", "worst-case")[0]
    return from_rows(bound, x)


def channel_sum_bound(magnitudes: np.ndarray, exact: np.ndarray, roundings: int, u_acc: float,
                      u_store: float) -> np.ndarray:
    """|fl(sum_i t_i) - sum_i t_i| per channel for a float32 sum of a channel's n terms, each term carrying
    ``roundings`` roundings before it is added (e.g. 1 for the product dy * xhat), in any order (Higham (3.5)):
    gamma_{n - 1 + roundings} sum |t_i|, then one rounding to the stored dtype, u_store (|exact| + that); each
    rounding may also underflow, eta (gradual underflow, IEEE: the interpreter's numpy) in its format."""
    n = magnitudes.shape[1]
    error = gamma(n - 1 + roundings, u_acc) * per_channel(np.abs(magnitudes)) + (n + roundings) * underflow(u_acc)
    return error + u_store * (np.abs(exact) + error) + underflow(u_store)


def parameter_gradient_bounds(x, weight, bias, dy, ref, running=None) -> tuple[np.ndarray, np.ndarray]:
    """(B_dweight, B_dbias) per channel, the kernel's error plus the float64 reference's; ``running``: None in
    training, (running_mean, running_var) in eval. dbias = sum(dy): n - 1 additions of the exact dy. dweight =
    sum(dy xhat^): training, xhat^ within Xi of xhat (normalized_bound), so sum |dy| Xi + gamma_n sum |dy| (|xhat| + Xi)
    (the product, the additions); eval, xhat^ = (x - running_mean) rstd^ with rstd^ = 1/sqrt(running_var + eps) (3
    roundings), 2 more for xhat and 1 for the product: gamma_{n + 5} sum |dy xhat|."""
    rows, upstream = channel_rows(x), np.abs(channel_rows(dy))
    if running is None:
        xhat, xi = np.abs(error_model.RowQuantities.of(rows, EPS, "ln").normalized), normalized_bound(x)
        extra, roundings = per_channel(upstream * xi), 1
    else:
        mean, var = (t.double().numpy()[:, None] for t in running)
        xhat, xi, extra, roundings = np.abs(rows - mean) / np.sqrt(var + EPS), 0.0, 0.0, 6
    dweight_ref = ref["dweight"] if weight is not None else 0.0
    dbias_ref = ref["dbias"] if bias is not None else 0.0
    u_weight = unit(weight.dtype) if weight is not None else U32
    u_bias = unit(bias.dtype) if bias is not None else U32
    b_dweight = (extra + channel_sum_bound(upstream * (xhat + xi), dweight_ref, roundings, U32, u_weight)
                 + channel_sum_bound(upstream * xhat, dweight_ref, roundings, U64, U64))
    b_dbias = channel_sum_bound(upstream, dbias_ref, 0, U32, u_bias) + channel_sum_bound(upstream, dbias_ref, 0, U64,
                                                                                         U64)
    return b_dweight, b_dbias


def eval_bounds(x, running_mean, running_var, weight, dy, y_ref, dx_ref, bias):
    """(B_y, B_dx) per element in eval mode, the kernel's error plus the reference's. rstd^ = 1/sqrt(running_var +
    eps): 3 roundings; y = (x - running_mean) * rstd^ * w + b: 4 more, gamma_7 (|w xhat| + |b|), then y's rounding
    u_out (|y| + that); dx = dy * fl(w rstd^): 5 roundings, gamma_5 |w rstd dy|, then dx's rounding; each rounding
    may underflow (eta in its format)."""
    channel = (1, x.shape[1]) + (1,) * (x.dim() - 2)
    rstd = 1 / np.sqrt(running_var.double().numpy() + EPS).reshape(channel)
    w = np.ones(channel) if weight is None else np.abs(weight.detach().double().numpy()).reshape(channel)
    b = np.zeros(channel) if bias is None else np.abs(bias.detach().double().numpy()).reshape(channel)
    xhat = np.abs(x.detach().double().numpy() - running_mean.double().numpy().reshape(channel)) * rstd
    u_out = unit(x.dtype)
    b_y, b_dx = 0.0, 0.0
    for u_acc, u_store in ((U32, u_out), (U64, U64)):
        error_y = gamma(7, u_acc) * (w * xhat + b) + 7 * underflow(u_acc)
        b_y = b_y + error_y + u_store * (np.abs(y_ref) + error_y) + underflow(u_store)
        error_dx = gamma(5, u_acc) * w * rstd * np.abs(dy.double().numpy()) + 5 * underflow(u_acc)
        b_dx = b_dx + error_dx + u_store * (np.abs(dx_ref) + error_dx) + underflow(u_store)
    return b_y, b_dx


def update_bound(old, new, new_error, ref, momentum: float, u_acc: float, u_store: float) -> np.ndarray:
    """|fl(fl(1 - m) old + m new^) - ((1 - m) old + m new)| with |new^ - new| <= new_error: m rounded to float32, then
    4 roundings (1 - m, two products, the sum): gamma_4 ((m + |1 - m|) |old| + m |new|) + m (1 + gamma_4) new_error,
    then stored in the buffer's dtype: u_store (|ref| + that)."""
    update = (gamma(4, u_acc) * ((momentum + abs(1 - momentum)) * np.abs(old) + momentum * np.abs(new))
              + momentum * (1 + gamma(4, u_acc)) * new_error)
    return update + u_store * (np.abs(ref) + update) + underflow(u_store)


def running_bounds(x, running_mean, running_var, momentum, mean_ref, var_ref) -> tuple[np.ndarray, np.ndarray]:
    """(B_running_mean, B_running_var) of one training update (update_bound), per channel, the kernel's error plus
    the reference's. The batch mean, fl(fl(sum x) / n), errs e <= gamma_n mean|x|; the unbiased variance
    fl(m2^ / (n - 1)) with m2^ = sum fl(x - mean^)^2 (deviation, square, n - 1 additions) = (n var_b + n e^2)
    (1 + theta_{n + 2}), so |v^ - v| <= gamma_{n + 3} (v + n e^2 / (n - 1)) + n e^2 / (n - 1) (n - 1 exact in
    float32: n <= 2^24)."""
    rows = channel_rows(x)
    n = rows.shape[1]
    assert n <= 2**24
    mean = rows.mean(axis=1)
    unbiased = ((rows - mean[:, None]) ** 2).sum(axis=1) / (n - 1)
    old_mean, old_var = running_mean.double().numpy(), running_var.double().numpy()
    b_mean, b_var = 0.0, 0.0
    for u_acc, u_store in ((U32, unit(running_mean.dtype)), (U64, U64)):
        e = gamma(n, u_acc) * np.abs(rows).mean(axis=1)
        e_var = gamma(n + 3, u_acc) * (unbiased + n * e**2 / (n - 1)) + n * e**2 / (n - 1)
        b_mean = b_mean + update_bound(old_mean, mean, e, mean_ref, momentum, u_acc, u_store)
        b_var = b_var + update_bound(old_var, unbiased, e_var, var_ref, momentum, u_acc, u_store)
    return b_mean, b_var


def assert_close(got: torch.Tensor, ref, bound, what: str) -> None:
    """|got - ref| <= bound elementwise (properties.outcome.compare), every element with a finite bound."""
    comparison = outcome.compare(got.detach().double().numpy(), np.asarray(ref), np.asarray(bound), what)
    assert comparison.unchecked == 0, f"{what}: {comparison.unchecked} elements without a finite bound"
    assert comparison.ratio <= 1.0, comparison.message


def worst_ratio(got, ref, bound) -> float:
    return outcome.compare(np.asarray(got), np.asarray(ref), np.asarray(bound), "").ratio


# --- the cases --------------------------------------------------------------------------------------------------------
def make(shape, dtype, memory_format=None, seed=0, param_dtype=None, offset=0.5):
    """(x, weight, bias, running_mean, running_var, dy): x ~ N(offset, 2^2) in ``memory_format``, parameters in
    ``param_dtype`` (default x's), float32 running buffers with running_var in [0.5, 1.5)."""
    g = torch.Generator().manual_seed(seed)
    channels = shape[1]
    x = (torch.randn(shape, generator=g) * 2 + offset).to(dtype)
    if memory_format is not None:
        x = x.to(memory_format=memory_format)
    param_dtype = param_dtype or dtype
    weight = (1 + 0.5 * torch.randn(channels, generator=g)).to(param_dtype)
    bias = torch.randn(channels, generator=g).to(param_dtype)
    running_mean = torch.randn(channels, generator=g)
    running_var = torch.rand(channels, generator=g) + 0.5
    dy = torch.randn(shape, generator=g).to(dtype)
    return x, weight, bias, running_mean, running_var, dy


def reference(x, running_mean, running_var, weight, bias, training, momentum, dy):
    """torch's F.batch_norm in float64 on the same values: (y, dx, dweight, dbias, running_mean, running_var) as float64
    numpy (the buffers after the call; None where absent), the statistics it normalized with."""
    x64 = x.detach().double().requires_grad_()
    w64 = None if weight is None else weight.detach().double().requires_grad_()
    b64 = None if bias is None else bias.detach().double().requires_grad_()
    rm64 = None if running_mean is None else running_mean.double().clone()  # torch updates them in place
    rv64 = None if running_var is None else running_var.double().clone()
    y = F.batch_norm(x64, rm64, rv64, w64, b64, training, momentum, EPS)
    wanted = [t for t in (x64, w64, b64) if t is not None]
    grads = iter(torch.autograd.grad(y, wanted, dy.double()))
    dx, dw, db = (next(grads).numpy() if t is not None else None for t in (x64, w64, b64))
    return {"y": y.detach().numpy(), "dx": dx, "dweight": dw, "dbias": db,
            "running_mean": None if rm64 is None else rm64.numpy(),
            "running_var": None if rv64 is None else rv64.numpy()}


def run(x, running_mean, running_var, weight, bias, training, momentum, dy):
    """Ours, by autograd: (y, dx, dweight, dbias); the buffers are updated in place."""
    xg = x.detach().clone().requires_grad_()
    wg = None if weight is None else weight.detach().clone().requires_grad_()
    bg = None if bias is None else bias.detach().clone().requires_grad_()
    y = batch_norm(xg, running_mean, running_var, wg, bg, training, momentum, EPS)
    wanted = [t for t in (xg, wg, bg) if t is not None]
    grads = iter(torch.autograd.grad(y, wanted, dy))
    dx, dw, db = (next(grads) if t is not None else None for t in (xg, wg, bg))
    return y, dx, dw, db


def check(x, weight, bias, running_mean, running_var, dy, training, momentum=0.1):
    """Run ours and the reference from the same buffers; compare everything within its bound; return both."""
    old_mean = None if running_mean is None else running_mean.clone()
    old_var = None if running_var is None else running_var.clone()
    x_before = x.clone()
    ref = reference(x, old_mean, old_var, weight, bias, training, momentum, dy)
    y, dx, dweight, dbias = run(x, running_mean, running_var, weight, bias, training, momentum, dy)

    assert torch.equal(x, x_before), "x was written"
    assert y.shape == x.shape and y.dtype == x.dtype and dx.shape == x.shape and dx.dtype == x.dtype
    expected_layout = torch.empty_like(x)
    assert y.stride() == expected_layout.stride() and dx.stride() == expected_layout.stride(), "layout not x's"
    if training:
        assert_close(y, ref["y"], training_forward_bound(x, weight, bias), "y")
        assert_close(dx, ref["dx"], training_dx_bound(x, weight, dy), "dx")
    else:
        b_y, b_dx = eval_bounds(x, old_mean, old_var, weight, dy, ref["y"], ref["dx"], bias)
        assert_close(y, ref["y"], b_y, "y")
        assert_close(dx, ref["dx"], b_dx, "dx")
    b_dweight, b_dbias = parameter_gradient_bounds(x, weight, bias, dy, ref, None if training else (old_mean, old_var))
    if weight is not None:
        assert dweight.dtype == weight.dtype
        assert_close(dweight, ref["dweight"], b_dweight, "dweight")
    if bias is not None:
        assert dbias.dtype == bias.dtype
        assert_close(dbias, ref["dbias"], b_dbias, "dbias")
    if running_mean is not None:
        if training:
            b_mean, b_var = running_bounds(x, old_mean, old_var, momentum, ref["running_mean"], ref["running_var"])
            assert_close(running_mean, ref["running_mean"], b_mean, "running_mean")
            assert_close(running_var, ref["running_var"], b_var, "running_var")
        else:
            assert torch.equal(running_mean, old_mean) and torch.equal(running_var, old_var), "eval wrote the buffers"
    return {"y": y, "dx": dx, "dweight": dweight, "dbias": dbias}, ref


@DTYPES
@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
@pytest.mark.parametrize(("shape", "memory_format"), LAYOUTS, ids=LAYOUT_IDS)
def test_matches_torch_in_float64(shape, memory_format, training, dtype):
    x, weight, bias, running_mean, running_var, dy = make(shape, dtype, memory_format, seed=len(shape))
    check(x, weight, bias, running_mean, running_var, dy, training)


@pytest.mark.parametrize(("affine", "running", "training"), [(False, True, True), (False, True, False),
                                                          (False, False, True), (True, False, True)],
                         ids=["no-affine-training", "no-affine-eval", "nothing-training", "no-running-training"])
def test_without_weight_bias_or_running_statistics(affine, running, training):
    """(Eval without running statistics is refused: test_bad_inputs_raise_one_line.)"""
    x, weight, bias, running_mean, running_var, dy = make((5, 4, 6), torch.float32, seed=3)
    check(x, weight if affine else None, bias if affine else None, running_mean if running else None,
          running_var if running else None, dy, training)


@pytest.mark.parametrize("which", ["weight-only", "bias-only"])
def test_weight_or_bias_alone(which):
    x, weight, bias, running_mean, running_var, dy = make((6, 3, 4), torch.float32, seed=4)
    check(x, weight if which == "weight-only" else None, bias if which == "bias-only" else None, running_mean,
          running_var, dy, True)


@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
def test_each_gradient_alone_equals_it_among_all(training):
    """Asking for one gradient (the others' kernels' switches off) gives the same bits as asking for all three,
    which test_matches_torch_in_float64 checks against float64."""
    x, weight, bias, running_mean, running_var, dy = make((3, 4, 3, 5), torch.float32, torch.channels_last, seed=16)
    _, *all_three = run(x, running_mean.clone(), running_var.clone(), weight, bias, training, 0.1, dy)
    for index in range(3):
        inputs = [x.clone(), weight.clone(), bias.clone()]
        inputs[index].requires_grad_()
        y = batch_norm(inputs[0], running_mean.clone(), running_var.clone(), inputs[1], inputs[2], training, 0.1, EPS)
        (alone,) = torch.autograd.grad(y, inputs[index], dy)
        assert torch.equal(alone, all_three[index]), ("x", "weight", "bias")[index]


@pytest.mark.parametrize("momentum", [0.0, 0.1, 0.5, 1.0])
def test_momentum_values(momentum):
    x, weight, bias, running_mean, running_var, dy = make((4, 3, 5), torch.float32, seed=5)
    check(x, weight, bias, running_mean, running_var, dy, True, momentum)


def test_float16_input_with_float32_parameters():
    x, weight, bias, running_mean, running_var, dy = make((3, 4, 3, 5), torch.float16, torch.channels_last, seed=6,
                                                          param_dtype=torch.float32)
    for training in (True, False):
        check(x, weight, bias, running_mean, running_var, dy, training)


@pytest.mark.parametrize(("view", "dims"), [("sliced-last", 3), ("sliced-batch", 2), ("transposed-spatial", 3),
                                            ("permuted", 3), ("5d-permuted", 4)])
def test_strided_views(view, dims):
    """x a view that is neither contiguous nor channels_last: addressed through its strides (``dims`` coalesced
    dimensions), nothing copied."""
    base, weight, bias, running_mean, running_var, _ = make((6, 3, 4, 10), torch.float32, seed=7)
    x = {"sliced-last": lambda: base[..., ::3], "sliced-batch": lambda: base[::2],
         "transposed-spatial": lambda: base.transpose(2, 3), "permuted": lambda: base.permute(3, 1, 0, 2),
         "5d-permuted": lambda: base.reshape(6, 3, 4, 5, 2).permute(4, 1, 3, 0, 2)}[view]()
    assert len(batchnorm.element_dims(tuple(x.shape), x.stride())[0]) == dims
    dy = torch.randn(x.shape, generator=torch.Generator().manual_seed(8)).transpose(0, -1).contiguous().transpose(0, -1)
    for training in (True, False):
        check(x, weight, bias, running_mean, running_var, dy, training)


def test_running_buffers_that_are_views_are_updated_where_they_live():
    x, weight, bias, _, _, dy = make((4, 3, 5), torch.float32, seed=9)
    storage_mean, storage_var = torch.zeros(6), torch.ones(6)
    running_mean, running_var = storage_mean[::2], storage_var[::2]
    check(x, weight, bias, running_mean, running_var, dy, True)
    assert torch.equal(storage_mean[1::2], torch.zeros(3)) and torch.equal(storage_var[1::2], torch.ones(3))


def test_broadcast_upstream_gradient():
    """dy of stride 0 everywhere (y.sum().backward()): training dx is then 0 up to rounding, dbias = n."""
    x, weight, bias, running_mean, running_var, _ = make((4, 3, 5), torch.float32, seed=10)
    dy = torch.ones(()).expand(x.shape)
    for training in (True, False):
        check(x, weight, bias, running_mean, running_var, dy, training)


def test_many_elements_per_channel_loop_over_tiles():
    """n = 66 000 > TILE elements per channel (17 tiles of 4096), |mean|/std = 4: two-pass statistics over the tiles,
    the running update and both gradients; and n = 2 x 4097, a partial last tile in channels_last layout."""
    x, weight, bias, running_mean, running_var, dy = make((2, 2, 33_000), torch.float32, seed=11, offset=8.0)
    assert x.shape[0] * x.shape[2] > batchnorm.TILE
    check(x, weight, bias, running_mean, running_var, dy, True)
    x, weight, bias, running_mean, running_var, dy = make((2, 3, 1, 4097), torch.float32, torch.channels_last,
                                                          seed=12)
    check(x, weight, bias, running_mean, running_var, dy, True)


def test_running_buffers_change_exactly_once_per_training_call():
    """In place (the same tensors), once per call (their versions bumped once: autograd sees the in-place write,
    torch's F.batch_norm does not bump them), not at all in eval."""
    x, weight, bias, running_mean, running_var, _ = make((4, 3, 5), torch.float32, seed=13)
    mean_ptr, versions = running_mean.data_ptr(), (running_mean._version, running_var._version)
    batch_norm(x, running_mean, running_var, weight, bias, True, 0.1, EPS)
    assert running_mean.data_ptr() == mean_ptr
    assert (running_mean._version, running_var._version) == (versions[0] + 1, versions[1] + 1)
    before = (running_mean.clone(), running_var.clone())
    batch_norm(x, running_mean, running_var, weight, bias, False, 0.1, EPS)
    assert torch.equal(running_mean, before[0]) and torch.equal(running_var, before[1])
    assert (running_mean._version, running_var._version) == (versions[0] + 1, versions[1] + 1)


def test_one_value_per_channel_in_training_raises_as_torch_does():
    for shape in ((1, 3), (1, 3, 1, 1)):
        x = torch.randn(shape)
        with pytest.raises(ValueError, match="Expected more than 1 value per channel when training") as ours:
            batch_norm(x, None, None, None, None, True, 0.1, EPS)
        with pytest.raises(ValueError) as torchs:
            F.batch_norm(x, None, None, None, None, True, 0.1, EPS)
        assert str(ours.value) == str(torchs.value)
    x, weight, bias, running_mean, running_var, dy = make((1, 3), torch.float32, seed=14)
    check(x, weight, bias, running_mean, running_var, dy, False)  # eval is defined at n = 1


def test_zero_elements():
    """An empty batch: an empty y, the buffers untouched (as torch), zero parameter gradients."""
    x = torch.randn(0, 3, 4)
    running_mean, running_var = torch.zeros(3), torch.ones(3)
    weight, bias = torch.ones(3, requires_grad=True), torch.zeros(3, requires_grad=True)
    y = batch_norm(x, running_mean, running_var, weight, bias, True, 0.1, EPS)
    assert y.shape == x.shape
    assert torch.equal(running_mean, torch.zeros(3)) and torch.equal(running_var, torch.ones(3))
    y.sum().backward()
    assert torch.equal(weight.grad, torch.zeros(3)) and torch.equal(bias.grad, torch.zeros(3))


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda x, c: batch_norm(x, c, None, None, None, True, 0.1, EPS), ValueError, "both be None or neither"),
    (lambda x, c: batch_norm(x, None, None, None, None, False, 0.1, EPS), ValueError, "defined in evaluation mode"),
    (lambda x, c: batch_norm(x[0, 0], None, None, None, None, True, 0.1, EPS), ValueError, "rank 2 to 5"),
    (lambda x, c: batch_norm(x, None, None, torch.ones(4), None, True, 0.1, EPS), ValueError, r"expected \(3,\)"),
    (lambda x, c: batch_norm(x.double(), None, None, None, None, True, 0.1, EPS), TypeError, "float64"),
    (lambda x, c: batch_norm(x.bfloat16(), None, None, None, None, True, 0.1, EPS), TypeError, "bfloat16 on the CPU"),
    (lambda x, c: batch_norm(x, c, c, None, None, True, None, EPS), TypeError, "momentum must be a float"),
], ids=["one-buffer", "eval-without-buffers", "rank-1", "weight-shape", "float64", "bfloat16-cpu", "momentum-none"])
def test_bad_inputs_raise_one_line(call, error, match):
    with pytest.raises(error, match=match):
        call(torch.randn(4, 3, 5), torch.zeros(3))


def gradients_of_gradients(norm, x, weight, bias, dy, upstream):
    """d/d(dy, x, weight) of <(dx, dweight, dbias), upstream>: what a Jacobian-vector product as a VJP of a VJP (the
    spectral-norm property) and Hessian-vector products use."""
    x, dy = x.clone().requires_grad_(), dy.clone().requires_grad_()
    weight = None if weight is None else weight.clone().requires_grad_()
    bias = bias.clone().requires_grad_()
    params = [t for t in (x, weight, bias) if t is not None]
    first = torch.autograd.grad(norm(x, weight, bias), params, dy, create_graph=True)
    total = sum((g * up.to(g.dtype)).sum() for g, up in zip(first, [t for t in upstream if t is not None],
                                                            strict=True))
    return torch.autograd.grad(total, [t for t in (dy, x, weight) if t is not None])


@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
@pytest.mark.parametrize("affine", [True, False], ids=["weight", "no-weight"])
def test_gradients_of_gradients_match_float64(training, affine):
    """Against torch's double backward in float64. Second derivatives have no derived bound in the error model, so
    the check is relative, 64 u n (as tests/test_kernels_second_order.py's for LayerNorm), far below the O(1) error
    of a dropped term."""
    x, weight, bias, running_mean, running_var, dy = make((3, 4, 3, 5), torch.float32, torch.channels_last, seed=17)
    weight = weight if affine else None
    g = torch.Generator().manual_seed(18)
    upstream = [torch.randn(x.shape, generator=g), None if weight is None else torch.randn(4, generator=g),
                torch.randn(4, generator=g)]
    n = x.numel() // x.shape[1]

    def ours(x, w, b):
        return batch_norm(x, running_mean.clone(), running_var.clone(), w, b, training, 0.1, EPS)

    def theirs(x, w, b):
        return F.batch_norm(x, running_mean.double(), running_var.double(), w, b, training, 0.1, EPS)

    got = gradients_of_gradients(ours, x, weight, bias, dy, upstream)
    # torch's double backward needs a weight: ones, with a zero upstream for its gradient, is the same function
    reference_weight, reference_upstream = (weight, upstream) if affine else (torch.ones(4), [
        upstream[0], torch.zeros(4), upstream[2]])
    want = gradients_of_gradients(theirs, *(t.double() for t in (x, reference_weight, bias, dy)),
                                  [t.double() for t in reference_upstream])
    assert len(got) == (3 if affine else 2)
    for name, a, b in zip(("d/d dy", "d/d x", "d/d weight"), got, want, strict=False):
        error, scale = (a.double() - b).abs().max().item(), b.abs().max().item()
        assert error <= 64 * U32 * n * scale, f"{name}: error {error:.3g}, largest |value| {scale:.3g}"


def test_third_derivatives_are_refused():
    x = torch.randn(4, 3, requires_grad=True)
    (dx,) = torch.autograd.grad(batch_norm(x, None, None, None, None, True, 0.1, EPS).pow(3).sum(), x,
                                create_graph=True)
    (second,) = torch.autograd.grad(dx.pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        second.sum().backward()


# --- the bounds catch the bugs --------------------------------------------------------------------------------------
def test_the_bounds_are_far_below_what_each_bug_changes():
    """A kernel with one of the usual bugs returns, within its own rounding, the bug's float64 value; |bug - ref| /
    bound is then about the ratio it fails our comparisons by. Each must exceed 10 (ours is within 1: check)."""
    momentum = 0.1
    x, weight, bias, running_mean, running_var, dy = make((4, 3, 5), torch.float32, seed=15)
    old_mean, old_var = running_mean.clone(), running_var.clone()
    _, ref = check(x, weight, bias, running_mean, running_var, dy, True, momentum)
    rows, old_m, old_v = channel_rows(x), old_mean.double().numpy(), old_var.double().numpy()
    batch_mean, biased_var = rows.mean(axis=1), rows.var(axis=1)
    b_mean, b_var = running_bounds(x, old_mean, old_var, momentum, ref["running_mean"], ref["running_var"])
    twice = reference(x, torch.from_numpy(ref["running_mean"]), torch.from_numpy(ref["running_var"]), weight, bias,
                      True, momentum, dy)
    # the backward that treats the batch mean and variance as constants is eval's backward at the batch statistics
    constants = reference(x, torch.from_numpy(batch_mean), torch.from_numpy(biased_var), weight, bias, False,
                          momentum, dy)
    _, eval_ref = check(x, weight, bias, old_mean.clone(), old_var.clone(), dy, False)
    b_eval_y, _ = eval_bounds(x, old_mean, old_var, weight, dy, eval_ref["y"], eval_ref["dx"], bias)
    ratios = {
        "biased running variance": worst_ratio((1 - momentum) * old_v + momentum * biased_var, ref["running_var"],
                                               b_var),
        "Keras momentum (m old + (1 - m) batch)": worst_ratio(momentum * old_m + (1 - momentum) * batch_mean,
                                                              ref["running_mean"], b_mean),
        "running statistics updated twice": worst_ratio(twice["running_mean"], ref["running_mean"], b_mean),
        "backward without the batch statistics' terms": worst_ratio(constants["dx"], ref["dx"],
                                                                    training_dx_bound(x, weight, dy)),
        "eval with the batch statistics": worst_ratio(ref["y"], eval_ref["y"], b_eval_y),
    }
    weak = {bug: ratio for bug, ratio in ratios.items() if ratio <= 10}
    assert not weak, f"bounds too loose to catch: {weak}"


# --- compiled for a GPU ---------------------------------------------------------------------------------------------
def test_the_kernels_compile_for_sm90():
    """Every launch of a training and an eval call, forward and backward, contiguous float16 and channels_last
    bfloat16, compiles for an H100 (kernels.offline_compile's recorder: loop-carried types, constexpr branches, what
    the interpreter cannot see)."""
    from kernels.offline_compile import compile_for_cuda, recorded_launches

    with recorded_launches() as launches:
        for dtype, memory_format in ((torch.float16, None), (torch.bfloat16, torch.channels_last)):
            x = torch.empty(8, 3, 5, 6, dtype=dtype)
            x = x if memory_format is None else x.to(memory_format=memory_format)
            weight, bias, buffers = torch.empty(3, dtype=dtype), torch.empty(3, dtype=dtype), torch.empty(2, 3)
            for training in (True, False):
                _, mean, rstd = batchnorm.forward(x, buffers[0], buffers[1], weight, bias, training, 0.1, EPS)
                batchnorm.backward(torch.empty_like(x), x, weight, mean, rstd, training, True, dtype, dtype)
    assert len(launches) == 8
    for launch in launches:
        compile_for_cuda(launch)


def test_launch_rule():
    """One channel a program unless channels are adjacent in memory; a tile of at most TILE elements."""
    assert batchnorm.launch_shape(64, 10_000, channel_stride=100) == (1, 4096, 16)
    assert batchnorm.launch_shape(64, 10_000, channel_stride=1) == (32, 128, 16)
    assert batchnorm.launch_shape(3, 6, channel_stride=1) == (4, 8, 1)
    assert batchnorm.element_dims((2, 3, 4, 5), (60, 20, 5, 1)) == ([2, 20], [[60, 1]])  # contiguous: N, then S
    assert batchnorm.element_dims((2, 3, 4, 5), (60, 1, 15, 3)) == ([40], [[3]])  # channels_last: one dimension
    assert batchnorm.element_dims((1, 3, 1), (3, 1, 1)) == ([1], [[0]])  # one element a channel
    assert math.prod(batchnorm.element_dims((6, 3, 4, 4), (96, 32, 8, 2))[0]) == 96  # a [..., ::2] view: N, H, W
