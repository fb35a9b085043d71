"""Our Triton LayerNorm/RMSNorm (kernels/) on the CPU through the interpreter, against float64 torch.

The reference is computed in float64 on the exact (already rounded) inputs the kernel received; the
tolerances are the suite's own (properties.bounds.tolerance: the error model's per-element bounds for the storage
and accumulation dtypes, the width and each row's condition number), compared by properties.outcome.compare:
an element without a finite bound is a failure here, never a silent pass.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import kernels
from core.kernel import Kernel
from kernels import functional, fused_norm, interpret, norm, rows
from properties import outcome
from properties.bounds import tolerance

WIDTHS = (1, 2, 3, 7, 1000, 4097)


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch.manual_seed(0)  # every example is the same on every run


def reference(kind: str, x, weight, bias, eps, dy):
    """(y, dx, dweight, dbias) in float64 by autograd through torch's own norms."""
    x64 = x.detach().double().requires_grad_()
    w64 = None if weight is None else weight.detach().double().requires_grad_()
    b64 = None if bias is None else bias.detach().double().requires_grad_()
    d = x.shape[-1]
    y = F.layer_norm(x64, (d,), w64, b64, eps) if kind == "layernorm" else F.rms_norm(x64, (d,), w64, eps)
    wanted = [t for t in (x64, w64, b64) if t is not None]
    grads = iter(torch.autograd.grad(y, wanted, dy.double()))
    return (y.detach(), next(grads), *(next(grads) if t is not None else None for t in (w64, b64)))


def record(kind: str) -> Kernel:
    """Our kernel as the suite's tolerances see it (kind, float32 statistics)."""
    return Kernel(f"triton:{kind}", kind, kernels.layer_norm if kind == "layernorm" else kernels.rms_norm)


def assert_close(got: torch.Tensor, ref: torch.Tensor, bound, what: str) -> None:
    """|got - ref| <= bound elementwise (properties.bounds.tolerance), every element with a finite bound."""
    comparison = outcome.compare(got, ref, bound, what)
    assert comparison.unchecked == 0, f"{what}: {comparison.unchecked} elements without a finite bound"
    assert comparison.ratio <= 1.0, comparison.message


def run(kind: str, x, weight, bias, eps, dy, block=None):
    if kind == "layernorm":
        y, mean, rstd = norm.forward(x, weight, bias, eps, rms=False, block=block)
    else:
        y, mean, rstd = norm.forward(x, weight, None, eps, rms=True, block=block)
    dx, dw, db = norm.backward(dy, x, weight, mean, rstd, rms=kind == "rmsnorm", need_dw=weight is not None,
                               need_db=bias is not None, block=block)
    return y, dx, dw, db


def check(kind, x, weight, bias, eps, dy, block=None):
    dtype = x.dtype
    bias = bias if kind == "layernorm" else None
    y, dx, dw, db = run(kind, x, weight, bias, eps, dy, block)
    ry, rdx, rdw, rdb = reference(kind, x, weight, bias, eps, dy)
    kernel = record(kind)
    bounds = tolerance.backward(kernel, x, weight, eps, dy)
    assert y.shape == x.shape and y.dtype == dtype and dx.shape == x.shape and dx.dtype == dtype
    assert_close(y, ry, tolerance.forward(kernel, x, weight, bias, eps), "y")
    assert_close(dx, rdx, bounds["x"], "dx")
    if weight is not None:
        assert dw.dtype == weight.dtype
        assert_close(dw, rdw, bounds["weight"], "dweight")
    if bias is not None:
        assert_close(db, rdb, bounds["bias"], "dbias")


def make(shape, dtype, seed=0, affine=True):
    g = torch.Generator().manual_seed(seed)
    d = shape[-1]
    x = torch.randn(shape, generator=g).to(dtype)
    weight = (1 + 0.5 * torch.randn(d, generator=g)).to(dtype) if affine else None
    bias = torch.randn(d, generator=g).to(dtype) if affine else None
    dy = torch.randn(shape, generator=g).to(dtype)
    return x, weight, bias, dy


KINDS = pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
DTYPES = pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])


@KINDS
@DTYPES
@pytest.mark.parametrize("d", WIDTHS)
def test_forward_and_backward_2d(kind, dtype, d):
    x, weight, bias, dy = make((5, d), dtype, seed=d)
    check(kind, x, weight, bias, 1e-5, dy)


@KINDS
@DTYPES
@pytest.mark.parametrize("d", (3, 1000))
def test_forward_and_backward_3d(kind, dtype, d):
    x, weight, bias, dy = make((2, 3, d), dtype, seed=d + 1)
    check(kind, x, weight, bias, 1e-5, dy)


@KINDS
@pytest.mark.parametrize(("d", "block"), [(7, 4), (1000, 128), (4097, 1024)])
def test_rows_wider_than_one_block_merge_blocks(kind, d, block):
    """Multi-block path (two-pass statistics over the blocks; column-parallel dgamma/dbeta) at small cost."""
    x, weight, bias, dy = make((6, d), torch.float32, seed=d)
    check(kind, x + 3.0, weight, bias, 1e-5, dy, block=block)


@pytest.mark.parametrize("block", [None, 16], ids=["one-block", "multi-block"])
@pytest.mark.parametrize("which", ["weight-only", "bias-only"])
def test_one_parameter_gradient_alone(which, block):
    """dbeta without dgamma (and the reverse): its rows of the partial buffer, or the column sums, on their own."""
    x, weight, bias, dy = make((9, 40), torch.float32, seed=5)
    check("layernorm", x, weight if which == "weight-only" else None, bias if which == "bias-only" else None, 1e-5,
          dy, block=block)


class _TorchCompute(TorchDispatchMode):
    """Names the torch operators run that would launch a device kernel (not views, not empty allocations)."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not func.is_view and not name.startswith(("empty", "new_empty")):
            self.names.append(name)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize(("d", "block"), [(40, None), (40, 16)], ids=["one-block", "multi-block"])
@pytest.mark.parametrize("affine", [True, False])
def test_launches_per_call(monkeypatch, d, block, affine):
    """Forward: 1 launch; backward: 1, and 1 more for dgamma/dbeta; no torch operator that computes (the dgamma/dbeta
    partial sums were reduced by .sum(0).to(): two launches each)."""
    launched = []
    monkeypatch.setattr(rows, "launch", lambda kernel, grid, *args, **meta: launched.append(kernel.fn.__name__))
    x, weight, bias, dy = make((9, d), torch.float16, affine=affine)
    with _TorchCompute() as forward_ops:
        _, mean, rstd = norm.forward(x, weight, bias, 1e-5, rms=False, block=block)
    assert launched == ["_norm_forward"] and forward_ops.names == []
    launched.clear()
    with _TorchCompute() as backward_ops:
        norm.backward(dy, x, weight, mean, rstd, rms=False, need_dw=affine, need_db=affine, block=block)
    assert backward_ops.names == []
    column_sums = "_sum_partials" if block is None else "_norm_backward_columns"
    assert launched == (["_norm_backward_input", column_sums] if affine else ["_norm_backward_input"])


def _raise_if_applied(*args, **kwargs):
    raise AssertionError("the autograd Function was applied")


@pytest.mark.parametrize("call", ["layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"])
def test_calls_without_a_graph_to_record_run_the_kernel_alone(monkeypatch, call):
    """Under no_grad, or with no input requiring grad, the forward kernel runs without the autograd Function (its
    ~3.5 us), with the same outputs; where a graph is recorded the Function is applied (here: patched to raise)."""
    x, weight, bias, _ = make((5, 24), torch.float32, seed=2)
    residual = torch.randn(5, 24, generator=torch.Generator().manual_seed(3))
    fn = getattr(kernels, call)
    args = (x, residual, weight) if call.startswith("add_") else (x, weight)
    args += (bias,) if "layer" in call else ()
    recorded = fn(*(a.clone().requires_grad_() for a in args))
    function = fused_norm._AddNormFunction if call.startswith("add_") else functional._NormFunction
    monkeypatch.setattr(function, "forward", staticmethod(_raise_if_applied))
    with torch.no_grad():
        under_no_grad = fn(*(a.clone().requires_grad_() for a in args))
    without_grad_inputs = fn(*args)
    for got in (under_no_grad, without_grad_inputs):
        for a, b in zip(recorded if isinstance(recorded, tuple) else (recorded,),
                        got if isinstance(got, tuple) else (got,), strict=True):
            assert torch.equal(a.detach(), b) and not b.requires_grad
    with pytest.raises(AssertionError, match="Function was applied"):
        fn(*(a.clone().requires_grad_() for a in args))


@pytest.mark.parametrize("rms", [False, True], ids=["layernorm", "rmsnorm"])
def test_rows_wider_than_a_block_give_the_same_dx_with_and_without_dgamma(rms):
    """Rows wider than a block: with dgamma/dbeta, dx is written by _norm_backward_columns in the same second read
    that sums them; without, by the row kernel's second pass. The same float32 operations on the same coefficients:
    bit for bit equal, dres added once before the rounding in both (20 rows: a partial 16-row tile)."""
    x, weight, bias, dy = make((20, 40), torch.float32, seed=4)
    dres = torch.randn(20, 40, generator=torch.Generator().manual_seed(5))
    bias = None if rms else bias
    _, mean, rstd = norm.forward(x, weight, bias, 1e-5, rms=rms, block=16)
    by_rows, _, _ = norm.backward(dy, x, weight, mean, rstd, rms=rms, need_dw=False, need_db=False, block=16,
                                  dresidual=dres)
    by_columns, dw, _ = norm.backward(dy, x, weight, mean, rstd, rms=rms, need_dw=True, need_db=not rms, block=16,
                                      dresidual=dres)
    without_dres, _, _ = norm.backward(dy, x, weight, mean, rstd, rms=rms, need_dw=True, need_db=False, block=16)
    assert torch.equal(by_rows, by_columns)
    assert torch.equal(by_columns, without_dres + dres)  # float32 throughout: one rounding of the same sum
    assert not torch.equal(by_columns, without_dres) and dw.abs().sum() > 0


@KINDS
def test_without_weight_and_bias(kind):
    x, _, _, dy = make((4, 33), torch.float32, affine=False)
    check(kind, x, None, None, 1e-5, dy)


@KINDS
@pytest.mark.parametrize("layout", ["column-stride", "transposed", "permuted-3d"])
def test_strided_inputs_and_upstream_gradients(kind, layout):
    base, weight, bias, _ = make((8, 66), torch.float32, seed=3)
    if layout == "column-stride":
        x, dy = base[:, ::2], torch.randn(8, 66)[:, 1::2]
        weight, bias = weight[:33], bias[:33]
    elif layout == "transposed":
        x, dy = base.t().contiguous().t(), torch.randn(66, 8).t()
    else:
        x, dy = torch.randn(6, 4, 2, 66).permute(2, 1, 0, 3)[:, ::2], torch.randn(66, 2, 2, 6).permute(1, 2, 3, 0)
    assert not x.is_contiguous() and not dy.is_contiguous()
    before = (x.clone(), dy.clone())
    check(kind, x, weight, bias, 1e-5, dy)
    assert torch.equal(x, before[0]) and torch.equal(dy, before[1]), "inputs were written"


def test_large_mean_over_std_in_float32():
    """Rows with |mean|/std = 1e4: a one-pass E[x^2] - E[x]^2 loses all digits; two-pass + Chan does not."""
    g = torch.Generator().manual_seed(5)
    x = (1e4 + torch.randn(4, 3000, generator=g)).float()
    for block in (None, 256):
        y, _, _ = norm.forward(x, None, None, 1e-5, rms=False, block=block)
        ref = F.layer_norm(x.double(), (3000,), eps=1e-5)
        assert_close(y, ref, tolerance.forward(record("layernorm"), x, None, None, 1e-5), "y")


def test_constant_rows_give_the_bias():
    x = torch.full((3, 10), 7.25)
    bias = torch.arange(10.0)
    y, _, _ = norm.forward(x, torch.ones(10), bias, 1e-5, rms=False)
    assert torch.equal(y, bias.expand(3, 10))


def test_zero_size_inputs():
    for shape in [(0, 8), (3, 0), (2, 0, 5)]:
        x = torch.randn(shape, requires_grad=True)
        w = torch.ones(shape[-1], requires_grad=True)
        b = torch.zeros(shape[-1], requires_grad=True)
        y = kernels.layer_norm(x, w, b, 1e-5)
        assert y.shape == x.shape
        y.sum().backward()
        assert x.grad.shape == x.shape and torch.equal(w.grad, torch.zeros_like(w))


def test_nan_stays_in_its_row():
    x = torch.randn(3, 16)
    x[1, 4] = float("nan")
    y, _, _ = norm.forward(x, None, None, 1e-5, rms=False)
    assert torch.isnan(y[1]).all() and torch.isfinite(y[[0, 2]]).all()


def test_forward_does_not_write_its_inputs():
    x, weight, bias, dy = make((4, 100), torch.float16)
    saved = [t.clone() for t in (x, weight, bias, dy)]
    x.requires_grad_(), weight.requires_grad_(), bias.requires_grad_()
    kernels.layer_norm(x, weight, bias, 1e-5).backward(dy)
    assert all(torch.equal(a, b) for a, b in zip(saved, (x.detach(), weight.detach(), bias.detach(), dy), strict=True))


@KINDS
def test_float16_input_with_float32_parameters(kind):
    """Mixed precision (AMP): the output and dx in x's dtype, dweight/dbias in the parameters' dtype."""
    x, weight, bias, dy = make((4, 50), torch.float16, seed=11)
    check(kind, x, weight.float(), bias.float(), 1e-5, dy)


def test_these_tolerances_reject_a_one_pass_variance():
    """The check used above fails a float32 E[x^2] - E[x]^2 LayerNorm on rows with |mean|/std = 1e3 (so it can fail)."""
    g = torch.Generator().manual_seed(9)
    x = (1e3 + torch.randn(4, 512, generator=g)).float()
    mean = x.mean(-1, keepdim=True)
    one_pass = (x - mean) * ((x * x).mean(-1, keepdim=True) - mean * mean + 1e-5).clamp_min(1e-5).rsqrt()
    ref, _, _, _ = reference("layernorm", x, None, None, 1e-5, torch.zeros_like(x))
    bound = tolerance.forward(record("layernorm"), x, None, None, 1e-5)
    with pytest.raises(AssertionError, match="error/bound"):
        assert_close(one_pass, ref, bound, "y")
    ours, _, _ = norm.forward(x, None, None, 1e-5, rms=False)
    assert_close(ours, ref, bound, "y")


@pytest.mark.parametrize(("d", "element_size", "block", "wide_block", "warps", "sum_cols"), [
    (100, 4, 128, 128, 1, 32), (1024, 4, 1024, 1024, 4, 32), (1024, 2, 1024, 1024, 2, 32),
    (4096, 4, 4096, 4096, 16, 32), (4096, 2, 4096, 4096, 8, 32), (8192, 2, 8192, 8192, 16, 32),
    (12288, 2, 8192, 16384, 16, 64), (16384, 4, 8192, 16384, 16, 64), (65536, 2, 8192, 16384, 16, 256)])
def test_launch_configuration_on_an_h100_follows_the_stated_rule(d, element_size, block, wide_block, warps,
                                                                 sum_cols):
    """block = min(next_pow2(d), 8192), the plain forward's and RMSNorm's backward's min(next_pow2(d), 16384),
    LayerNorm's backward's 8192; warps = clamp(block * s / 1024, 1, 16): 32 bytes of a block per thread."""
    config = rows.launch_config(d, element_size, "cuda", 132)
    assert (config.block, config.forward_block, config.rms_backward_block, config.layernorm_backward_block,
            config.num_warps, config.single_block, config.sum_rows, config.sum_cols) == (
        block, wide_block, wide_block, block, warps, d <= 8192, 16, sum_cols)


def test_our_first_cpu_launch_enables_the_interpreter():
    """With CUDA present, importing kernels leaves the interpreter's hooks out; our first CPU launch enables them."""
    was_enabled = interpret.is_enabled()
    interpret.disable()
    try:
        y = kernels.layer_norm(torch.tensor([[1.0, 3.0]]), None, None, 0.0)
        assert interpret.is_enabled()
        assert torch.equal(y, torch.tensor([[-1.0, 1.0]]))
    finally:
        if not was_enabled:
            interpret.disable()
