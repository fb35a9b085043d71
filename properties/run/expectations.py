"""pytest plugin: a kernel's known deviations as data, ``--skips-file FILE`` / ``--xfails-file FILE``.

As in array-api-tests, a text file lists what to skip or to expect to fail, so a kernel's known
deviations are recorded (and reported as skipped / xfailed with their reason) without editing
any test. One entry per line::

    # comments and blank lines are ignored
    CLAIM [KERNEL]  # reason

CLAIM is a claim id or a glob of them (``ln.forward``, ``rms.*``, ``*.inputs_unmodified``);
KERNEL, optional, a glob restricting the entry to kernels whose name or SPEC matches it
(``liger-rmsnorm-*``); the reason after ``#`` is required. At collection every conformance
test (an item with a ``claim`` marker) that an entry matches gets a ``skip`` / ``xfail`` marker
with the reason and the file position. Expected failures are not strict: a test that passes
anyway shows as XPASS, the sign that the entry is stale. Entries that matched no test are
listed in the terminal summary (of a run without pytest-xdist: with workers, collection and hence
this list happen in the workers, whose terminal output pytest does not show).

Known deviations of the built-in kernels are data here too (:data:`BUILTIN_DEVIATIONS`), narrower than a file
entry: a :class:`Deviation` names the kernels, the claims, the kind of failure and the inputs on which it is
a fact about the kernel. Only a failure of exactly that kind, on a minimal example inside that domain, is
reported xfailed with the deviation's reason; any other failure of those claims still fails, and a run that
does not meet the deviation passes as usual. The terminal summary lists the deviations in force and how often
each was met.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hypothesis import Phase, settings

from core.boundary import HOST
from core.guard import KernelFault
from properties import evidence
from properties.run.selection import claim_of, kernel_of

OPTIONS = {"skip": "--skips-file", "xfail": "--xfails-file"}


@dataclass(frozen=True)
class Expectation:
    """One line of a skips/xfails file: tests of claims matching ``claim`` (and kernels matching ``kernel``)."""

    action: str  # "skip" | "xfail"
    claim: str
    kernel: str | None
    reason: str
    where: str  # FILE:LINE

    def matches(self, claim: str, kernel_names: tuple[str, ...]) -> bool:
        if not fnmatch.fnmatchcase(claim, self.claim):
            return False
        return self.kernel is None or any(fnmatch.fnmatchcase(name, self.kernel) for name in kernel_names)

    def marker(self) -> pytest.MarkDecorator:
        reason = f"{self.reason} ({self.where})"
        return pytest.mark.skip(reason=reason) if self.action == "skip" else pytest.mark.xfail(reason=reason,
                                                                                                 strict=False)


def parse(path: str | Path, action: str) -> list[Expectation]:
    """The entries of a skips (``action="skip"``) or xfails (``"xfail"``) file; UsageError on a malformed line."""
    path = Path(path)
    option = OPTIONS[action]
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as error:
        raise pytest.UsageError(f"{option} {path}: {error.strerror or error}") from None
    entries = []
    for number, line in enumerate(lines, start=1):
        entry, _, reason = line.partition("#")
        fields = entry.split()
        if not fields:
            continue
        where = f"{path.name}:{number}"
        if len(fields) > 2:
            raise pytest.UsageError(f"{option} {where}: expected 'CLAIM [KERNEL]  # reason', got {line.strip()!r}")
        if not reason.strip():
            raise pytest.UsageError(f"{option} {where}: {fields[0]!r} needs a reason after '#'")
        entries.append(Expectation(action, fields[0], fields[1] if len(fields) == 2 else None, reason.strip(), where))
    return entries


@dataclass(frozen=True)
class Deviation:
    """A built-in kernel's known departure from a claim, with its reason: a failure of a claim matching ``claims``
    by a KernelFault of kind ``fault`` (core.guard), or by a wrong value (``fault="value"``: the check's
    AssertionError), on an example ``applies`` accepts is expected. ``storage``: only while the kernel declares its
    backward in the storage precision; ``quantities``: a wrong value only of these compared quantities (the start of
    the check's message, e.g. "dweight"), none: any."""

    kernels: tuple[str, ...]  # kernel names
    claims: str  # a glob of claim ids
    fault: str
    applies: Callable[[dict], bool]
    reason: str
    storage: bool = True
    quantities: tuple[str, ...] = ()

    def explains(self, kernel, claim: str, error: BaseException, example: dict | None) -> bool:
        """The test's failure (``error``, Hypothesis' minimal ``example``) is this deviation and nothing else."""
        return (kernel is not None and kernel.name in self.kernels
                and (kernel.backward_precision == "storage" or not self.storage)
                and fnmatch.fnmatchcase(claim, self.claims) and self._is_fault(error)
                and (not self.quantities or str(error).startswith(self.quantities))
                and example is not None and self.applies(example))

    def _is_fault(self, error: BaseException) -> bool:
        if self.fault == "value":
            return isinstance(error, AssertionError) and not isinstance(error, KernelFault)
        return isinstance(error, KernelFault) and error.reason == self.fault

    def describe(self) -> str:
        return f"declared deviation of {', '.join(self.kernels)} on {self.claims}: {self.reason}"


def float16_rstd_overflows(example: dict) -> bool:
    """rstd = 1/sqrt(var + eps), computed in float32 and kept in float16, is inf in a row of the float16 ``x``:
    var + eps < 2.3e-10 (a constant row, or d = 1, with eps = 1e-12)."""
    x = example.get("x")
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float16:
        return False
    rstd = torch.rsqrt(x.float().var(-1, unbiased=False) + example["eps"])
    return bool(torch.isinf(rstd.to(torch.float16)).any())


def float16_rstd_overflows_at_residual_out(example: dict) -> bool:
    """The fused kinds' norm input is residual_out, not x: a float16 example of width 1 (residual_out's rows are
    constant, var = 0, whatever the mask) with 1/sqrt(eps) > 65504 (eps = 1e-12): rstd is inf in float16."""
    x = example.get("x")
    return (isinstance(x, torch.Tensor) and x.dtype == torch.float16 and x.shape[-1] == 1
            and bool(torch.isinf(torch.rsqrt(torch.tensor(example["eps"], device=HOST)).to(torch.float16))))


def any_example(example: dict) -> bool:
    """Every example: the deviation is a property of the kernel's interface, not of its inputs."""
    return True


def bias_without_weight(example: dict) -> bool:
    """An example with a bias and no weight (the case torch's group_norm backward cannot take)."""
    return example.get("weight") is None and isinstance(example.get("bias"), torch.Tensor)


def on_cuda(applies: Callable[[dict], bool]) -> Callable[[dict], bool]:
    """``applies`` restricted to examples whose x is on a CUDA device (a deviation of a kernel's CUDA path)."""
    def applies_on_cuda(example: dict) -> bool:
        x = example.get("x")
        return isinstance(x, torch.Tensor) and x.is_cuda and applies(example)

    return applies_on_cuda


def float16_group_rstd_overflows(example: dict) -> bool:
    """rstd = 1/sqrt(var + eps) of a group of a float16 ``x``, kept in float16 ([R7]), is inf: var + eps < 2.3e-10
    (a constant group, or one element, with eps = 1e-12)."""
    x = example.get("x")
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float16:
        return False
    groups = x.double().reshape(x.shape[0], example["num_groups"], -1)
    rstd = torch.rsqrt(groups.var(-1, unbiased=False) + example["eps"])
    return bool(torch.isinf(rstd.to(torch.float16)).any())


def float32_buffers_beside_16_bit_x_alone(example: dict) -> bool:
    """An example with float16/bfloat16 x, float32 running buffers and neither weight nor bias."""
    x, buffer = example.get("x"), example.get("running_mean")
    return (isinstance(x, torch.Tensor) and x.dtype in (torch.float16, torch.bfloat16)
            and isinstance(buffer, torch.Tensor) and buffer.dtype == torch.float32
            and example.get("weight") is None and example.get("bias") is None)


def channels_last_upstream_of_one_sample(example: dict) -> bool:
    """x of one sample [1, C, *] (4-D or 5-D) with an upstream gradient dy in the channels-last memory format (and x
    not): the call torch's CPU instance_norm gets wrong (docs/findings.md [R14])."""
    x, dy = example.get("x"), example.get("dy")
    formats = {4: torch.channels_last, 5: torch.channels_last_3d}
    return (isinstance(x, torch.Tensor) and isinstance(dy, torch.Tensor) and x.dim() in formats and x.shape[0] == 1
            and not dy.is_contiguous() and dy.is_contiguous(memory_format=formats[x.dim()]))


def sixteen_bit_x_with_strided_buffers_on_cpu(example: dict) -> bool:
    """float16/bfloat16 x on the CPU with a running buffer that is not contiguous (a view into a larger tensor): the
    call torch's CPU batch_norm runs op by op in x's dtype (docs/findings.md [R15])."""
    x = example.get("x")
    buffers = [example.get(name) for name in ("running_mean", "running_var")]
    return (isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16)
            and any(isinstance(b, torch.Tensor) and not b.is_contiguous() for b in buffers))


def affine_residue_shows(example: dict) -> bool:
    """An ``x`` of exact statistics (properties.draws.exact_rows: it has ``centred`` rows): for the gradients (with
    ``dy``) any; for the forward 16-bit with a row whose |mean| / sqrt(var + eps) exceeds 2^8. There torch's CPU
    layer_norm computes x_hat as x * rstd - mean * rstd (the forward y = x * a + b with a = rstd gamma, b = beta -
    mean a, in float16/bfloat16; the backward's x_hat in every dtype, where even a d = 1 row's mean * rstd differs
    from x * rstd) and keeps a residue ~ u_float32 |mean| rstd that the exact value (beta, dgamma = 0 on a constant
    row) does not have."""
    x = example.get("x")
    if "centred" not in example or not isinstance(x, torch.Tensor):
        return False
    if "dy" in example:
        return True
    if x.dtype not in (torch.float16, torch.bfloat16):
        return False
    rows = x.double().reshape(-1, x.shape[-1])
    mean, var = rows.mean(-1), rows.var(-1, unbiased=False)
    return bool((mean.abs() / torch.sqrt(var + example["eps"]) > 2.0**8).any())


def float32_weight_with_16bit_x(example: dict) -> bool:
    """A gradient example (with ``dy``) whose weight is float32 beside 16-bit x (autocast's mix)."""
    x, weight = example.get("x"), example.get("weight")
    return ("dy" in example and isinstance(x, torch.Tensor) and isinstance(weight, torch.Tensor)
            and x.dtype in (torch.float16, torch.bfloat16) and weight.dtype == torch.float32)


def float64_x(example: dict) -> bool:
    """An example with float64 x (properties.draws.strategies.float64_examples)."""
    x = example.get("x")
    return isinstance(x, torch.Tensor) and x.dtype == torch.float64


def sixteen_bit_x_on_cpu(example: dict) -> bool:
    """An example whose x is float16 or bfloat16 on the CPU."""
    x = example.get("x")
    return isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dtype in (torch.float16, torch.bfloat16)


BUILTIN_DEVIATIONS = (
    Deviation(("torch:layernorm", "torch-module:layernorm", "torch-compile:layernorm"), "ln.*", "nonfinite",
              float16_rstd_overflows,
              "torch's CPU layer_norm keeps rstd in float16 (its declared backward_precision 'storage'); where "
              "1/sqrt(var + eps) > 65504 it is inf, and the backward's (x - mean) * rstd = 0 * inf is NaN "
              "(docs/findings.md [H])"),
    Deviation(("torch-fused:add_layernorm", "torch-fused:dropout_add_layernorm"), "*", "nonfinite",
              float16_rstd_overflows_at_residual_out,
              "torch-fused normalizes residual_out with torch's CPU layer_norm, which keeps rstd in float16: at "
              "d = 1 with eps = 1e-12 rstd is inf and the backward's 0 * inf is NaN (docs/findings.md [H])"),
    Deviation(("torch:layernorm", "torch-module:layernorm", "torch-compile:layernorm"), "ln.*", "value",
              affine_residue_shows,
              "torch's CPU layer_norm computes x_hat as x * rstd - mean * rstd (the float16/bfloat16 forward, and "
              "the backward in every dtype): on rows with exact statistics it keeps a residue ~ u_float32 |mean| rstd "
              "(forward: beta + 2^-9 for beta on a constant row of 1000; dgamma 9.2e-18 for 0 at d = 1, x = 1.36e-12) "
              "(docs/findings.md [I])"),
    Deviation(("liger-rmsnorm-llama", "liger-rmsnorm-gemma", "liger-rmsnorm-none"), "rms.inputs_unmodified", "value",
              any_example,
              "LigerRMSNormFunction's default in_place=True stores dX into the upstream gradient's buffer (its "
              "docstring; Liger turns it off where a residual branch still needs dY): kept, as Liger's modules call "
              "it, and declared here so the hazard shows as this reason (docs/findings.md [C])",
              storage=False, quantities=("the kernel wrote into upstream gradient",)),
    Deviation(("torch-groupnorm",), "gn.jacobian", "raised", bias_without_weight,
              "torch's F.group_norm backward raises 'tensor does not have a device' for weight=None with a bias that "
              "needs a gradient (docs/findings.md [R3])", storage=False),
    Deviation(("torch:layernorm", "torch-module:layernorm", "torch-fused:add_layernorm",
               "torch-fused-fp32:add_layernorm"), "*ln.second_order", "raised", bias_without_weight,
              "torch's layer_norm double backward (layer_norm_double_backward) raises 'Expected a proper Tensor but "
              "got None' for weight=None with a bias whose gradient enters the differentiated sum (gradgradcheck "
              "fails for a None weight with a bias: pytorch/pytorch#63276)", storage=False),
    Deviation(("torch-groupnorm",), "gn.*", "nonfinite", float16_group_rstd_overflows,
              "torch's group_norm keeps mean and rstd in float16 for float16 x (CUDA for the forward, [R7]; the CPU "
              "the statistics it saves for the backward); where 1/sqrt(var + eps) > 65504 (a one-element group with "
              "eps = 1e-12) rstd is inf: y = (x - mean) rstd = 0 * inf = NaN on CUDA, dx NaN on both "
              "(docs/findings.md [R7])", storage=False),
    Deviation(("torch-batchnorm", "torch-instancenorm"), "*", "raised", on_cuda(bias_without_weight),
              "torch's CUDA batch_norm backward (instance_norm's too) raises 'tensor does not have a device' for "
              "weight=None with a bias that needs a gradient, on x of 3 dimensions (docs/findings.md [R11])",
              storage=False),
    Deviation(("torch-batchnorm", "torch-instancenorm"), "*", "value", on_cuda(bias_without_weight),
              "torch's CUDA batch_norm backward (instance_norm's too) returns dbias = 0 for weight=None with a bias "
              "that needs a gradient, on x of 4 or more dimensions (docs/findings.md [R11])",
              storage=False, quantities=("dbias",)),
    Deviation(("torch-instancenorm",), "in.layout_invariance", "value", channels_last_upstream_of_one_sample,
              "torch's CPU instance_norm (2.13) returns wrong gradients for x of one sample [1, C, H, W] when the "
              "upstream gradient is channels-last (x contiguous), in both modes; two samples and more, or dy "
              "contiguous, are right (docs/findings.md [R14])", storage=False),
    Deviation(("torch-groupnorm",), "gn.layout_invariance", "value", any_example,
              "torch's CPU F.group_norm on a channels-last input computes a one-pass variance, whose error grows "
              "with (|mean|/std)^2; the contiguous path is accurate (docs/findings.md [R5])",
              storage=False, quantities=("channels-last vs contiguous",)),
    Deviation(("torch-batchnorm", "torch-batchnorm-module"), "bn.eval", "value",
              sixteen_bit_x_with_strided_buffers_on_cpu,
              "torch's CPU batch_norm in eval mode with running buffers that are not contiguous leaves its fused "
              "kernel for a composite computed op by op in x's float16/bfloat16, (x - mean) * rsqrt(var + eps) * "
              "weight + bias, each step rounded: ~10 unit roundoffs off against ~1 with contiguous buffers "
              "(docs/findings.md [R15])", storage=False, quantities=("y",)),
    Deviation(("torch-instancenorm",), "in.running_statistics", "value", float32_buffers_beside_16_bit_x_alone,
              "torch's instance_norm (CPU 2.13, CUDA 2.11) with float16/bfloat16 x, float32 buffers and no weight or "
              "bias (as under autocast) rounds the updated running statistics to x's dtype before storing them: "
              "running_mean 1.3583984375 for the exact 1.35792539 on the CPU; on CUDA each instance's update is "
              "rounded, then their average (docs/findings.md [R10])", storage=False,
              quantities=("running_mean", "running_var")),
    Deviation(("hf-llama-rmsnorm", "hf-gemma-rmsnorm", "hf-t5-layernorm", "liger-layernorm", "liger-rmsnorm-llama",
               "liger-rmsnorm-gemma"), "*.forward", "value", float64_x,
              "Hugging Face's RMSNorm/T5LayerNorm modules cast hidden_states to float32 (.to(torch.float32)) and "
              "Liger-Kernel's LayerNorm and llama/gemma RMSNorm load rows as float32, whatever x's dtype: float64 x "
              "is normalized in float32 and returned in float64, ~1e-8 off (docs/findings.md [F64])",
              storage=False, quantities=("output",)),
    Deviation(("hf-llama-rmsnorm", "hf-gemma-rmsnorm", "hf-t5-layernorm"), "*.second_order", "value", float64_x,
              "Hugging Face's RMSNorm/T5LayerNorm modules normalize float64 x in float32 (docs/findings.md [F64]): "
              "their second derivatives, autograd's of that float32 computation, are float32's too",
              storage=False),
    Deviation(("hf-llama-rmsnorm", "hf-gemma-rmsnorm", "hf-t5-layernorm", "liger-layernorm"), "*.jacobian", "value",
              float64_x,
              "Hugging Face's RMSNorm/T5LayerNorm modules (autograd through their float32 computation) and "
              "Liger-Kernel's LayerNorm backward (float32 rows and sums) give float64 x float32-accurate gradients, "
              "~1e-8 off (docs/findings.md [F64])", storage=False, quantities=("dx", "dweight", "dbias")),
    Deviation(("liger-rmsnorm-llama", "liger-rmsnorm-gemma", "liger-rmsnorm-none"), "rms.jacobian", "raised",
              float64_x,
              "Liger-Kernel's RMSNorm backward raises KeyError: torch.float64 (rms_norm_backward looks x's dtype up in "
              "torch_to_triton_dtype, which has no float64) where its forward takes float64 x (docs/findings.md "
              "[F64])", storage=False),
    Deviation(("liger-fused-add-rmsnorm-llama", "liger-fused-add-rmsnorm-gemma", "liger-fused-add-rmsnorm-none"),
              "add_rms.forward", "value", float64_x,
              "Liger-Kernel's fused add + RMSNorm loads the rows as float32 whatever x's dtype: float64 x and residual "
              "are added and normalized in float32, ~1e-8 off (docs/findings.md [F64])", storage=False,
              quantities=("y", "residual_out")),
    Deviation(("liger-fused-add-rmsnorm-llama", "liger-fused-add-rmsnorm-gemma", "liger-fused-add-rmsnorm-none"),
              "add_rms.jacobian", "raised", float64_x,
              "Liger-Kernel's fused add + RMSNorm backward raises KeyError: torch.float64 (its torch_to_triton_dtype "
              "table has no float64) where its forward takes float64 x (docs/findings.md [F64])", storage=False),
    Deviation(("liger-rmsnorm-none",), "rms.forward", "value", float64_x,
              "Liger-Kernel's RMSNorm in casting mode 'none' computes float64 x in float64 but with eps as Triton "
              "specializes a Python float, a float32 scalar: rstd = 1/sqrt(ms + fl32(eps)), ~1e-13 off for eps = 1e-5 "
              "(docs/findings.md [F64])", storage=False, quantities=("output",)),
    Deviation(("torch:dropout",), "dropout.edge_probabilities", "value", any_example,
              "torch's F.dropout at p = 0 returns its input itself (ATen's _dropout_impl: 'if (p == 0 || !train || "
              "input.numel() == 0) return input;', on every device): an in-place update of the result writes the "
              "caller's x (docs/findings.md [R13])", storage=False, quantities=("p = 0: y shares x's storage",)),
    Deviation(("torch:dropout",), "dropout.values", "value", sixteen_bit_x_on_cpu,
              "torch's CPU F.dropout scales in x's dtype (ATen's _dropout_impl: noise.bernoulli_(1 - p); "
              "noise.div_(1 - p); input * noise): 1/(1-p) is rounded to float16/bfloat16, the same for every kept "
              "element, a bias of E[y] (bfloat16, p = 0.1: 1.109375 for 1.1111, -0.16 %) (docs/findings.md [R13])",
              storage=False, quantities=("kept values not x/(1-p) rounded once",)),
    Deviation(("flaggems-rmsnorm",), "rms.*", "value", float32_weight_with_16bit_x,
              "FlagGems' rms_norm backward sums dW in float32 and then rounds it to x's dtype (dw.to(x.dtype), "
              "flag_gems/ops/rms_norm.py, 5.0.2): a float32 weight beside 16-bit x gets a 16-bit accurate dW "
              "(docs/findings.md [M])", storage=False, quantities=("dweight", "dgamma - sum of dy xhat")),
)


def _kernel_names(item: pytest.Item) -> tuple[str, ...]:
    kernel = kernel_of(item)
    return () if kernel is None else tuple(name for name in (kernel.name, kernel.spec) if name)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("normverify")
    group.addoption(OPTIONS["skip"], default=None, metavar="FILE", dest="normverify_skips_file",
                    help="skip the conformance tests of the claims listed in FILE ('CLAIM [KERNEL]  # reason' lines)")
    group.addoption(OPTIONS["xfail"], default=None, metavar="FILE", dest="normverify_xfails_file",
                    help="expect the conformance tests of the claims listed in FILE to fail "
                         "('CLAIM [KERNEL]  # reason' lines)")


_entries_key = pytest.StashKey[list[Expectation]]()
_unmatched_key = pytest.StashKey[list[Expectation]]()


def pytest_configure(config: pytest.Config) -> None:
    entries = []
    for action, dest in (("skip", "normverify_skips_file"), ("xfail", "normverify_xfails_file")):
        path = config.getoption(dest, None)
        if path:
            entries += parse(path, action)
    config.stash[_entries_key] = entries


@pytest.hookimpl(trylast=True)  # after properties/plugin.py has narrowed each item's claim marker to one id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    entries = config.stash.get(_entries_key, [])
    if not entries:
        return
    used: set[Expectation] = set()
    for item in items:
        claim = claim_of(item)
        if claim is None:
            continue
        names = _kernel_names(item)
        # skips before xfails, each in file order: the first matching line of each file gives the reason
        for action in OPTIONS:
            entry = next((e for e in entries if e.action == action and e.matches(claim, names)), None)
            if entry is not None:
                item.add_marker(entry.marker())
                used.add(entry)
    config.stash[_unmatched_key] = [e for e in entries if e not in used]


def _deviation_in_force(item: pytest.Item) -> bool:
    """Whether a built-in deviation names this conformance test's kernel and claim."""
    kernel, claim = kernel_of(item), claim_of(item)
    return kernel is not None and claim is not None and any(
        kernel.name in deviation.kernels and fnmatch.fnmatchcase(claim, deviation.claims)
        for deviation in BUILTIN_DEVIATIONS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """Where a built-in deviation names the test's kernel and claim, Hypothesis does not shrink a failure: whether the
    deviation explains it is decided on the example that failed (a deviation's domain is a property of the example,
    and any failure it does not explain still fails, with that example and its replay), and shrinking one took 9 s of
    torch's 25 s run (issue 27). Every other test shrinks as usual."""
    test = getattr(item, "obj", None)
    original = getattr(test, "_hypothesis_internal_use_settings", None)
    if original is None or not _deviation_in_force(item):
        return (yield)
    test._hypothesis_internal_use_settings = settings(original, phases=[p for p in original.phases
                                                                         if p is not Phase.shrink])
    try:
        return (yield)
    finally:
        test._hypothesis_internal_use_settings = original


@pytest.hookimpl(wrapper=True, trylast=True)  # innermost: properties.run.results records the report as changed here
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    claim = claim_of(item)
    if not (report.when == "call" and report.failed and call.excinfo is not None and claim is not None):
        return report
    last = evidence.last_example()
    for deviation in BUILTIN_DEVIATIONS:
        if deviation.explains(kernel_of(item), claim, call.excinfo.value, last[2] if last else None):
            report.outcome = "skipped"
            report.wasxfail = deviation.describe()
            break
    return report


# In this process (xdist's controller, too): tests that met each deviation, by its description; and the
# deviations whose kernels ran a test (the kernel's name is the test's parameter id).
_met: dict[str, int] = {}
_in_force: set[Deviation] = set()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    _in_force.update(d for d in BUILTIN_DEVIATIONS if any(f"[{name}" in report.nodeid for name in d.kernels))
    wasxfail = getattr(report, "wasxfail", "")
    if wasxfail.startswith("declared deviation"):
        _met[wasxfail] = _met.get(wasxfail, 0) + 1


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if _in_force:
        terminalreporter.write_sep("-", "normverify: declared deviations of the kernels under test")
        for deviation in sorted(_in_force, key=BUILTIN_DEVIATIONS.index):
            times = _met.get(deviation.describe(), 0)
            terminalreporter.write_line(f"{deviation.describe()} -- met by {times} test(s)")
    unmatched = config.stash.get(_unmatched_key, [])
    if unmatched:
        terminalreporter.write_sep("-", "normverify: expectations that matched no collected test")
        for entry in unmatched:
            kernel = f" {entry.kernel}" if entry.kernel else ""
            terminalreporter.write_line(f"{entry.where}: {entry.action} {entry.claim}{kernel}  # {entry.reason}")
