"""A declared exact reduction tree is verified on the machine, build and device it is used on before it is trusted.

``Reduction.exact_tree`` (proofs.reduction) declares a kernel's summation tree addition by addition, read from its
source; the bound built from it node by node is sound only where the kernel computes exactly that tree. Which code a
kernel runs depends on where it runs: ATen picks a kernel per CPU capability (its AVX512 capability runs the AVX2
kernel of every stub registered with plain REGISTER_DISPATCH, moments and sums among them; the DEFAULT kernel has no
FMA), the Triton interpreter's tree is not the compiled one. So the first time a run uses such a declaration on a
device and dtype, :func:`check` emulates a few rows of each width class in float32 (proofs.aten_moments,
proofs.aten_sum, proofs.simulate.lanes_sum) and compares them bit for bit with the statistics the kernel itself
returns (``Kernel.statistics``):

- all equal ("verified"): the tree is used;
- any differs ("refuted"): the source reading does not describe this build, so neither its tree nor the shape read
  with it is trusted: the order-agnostic bound;
- nothing to compare ("unverifiable": no ``Kernel.statistics``, or a tree with no float32 emulation for this kind):
  the declared shape is kept without its tree (a shape is a claim the conformance checks test, as before).

:func:`trusted` is what the bounds use; every outcome is one line (:meth:`TreeCheck.line`) in the run's environment
block, the results JSON and the report, so a declaration is never silently used or silently dropped.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np
    import torch

    from core.kernel import Kernel
    from proofs.reduction import Reduction

Status = Literal["verified", "refuted", "unverifiable"]
WIDTHS = (3, 8, 9, 17, 129, 1000, 4097)  # below, at and past the lanes, a chunk, cascade levels
SPLIT_WIDTH = 40000  # ATen splits a one-row call of d > 32768 terms over its threads
ROWS_PER_WIDTH = 2
EMULATED = {"aten_moments": ("ln",), "aten_cascade_sum": ("rms",),  # the norms :func:`predicted` knows
            "numpy_pow2": ("ln", "rms")}
EPS = 1e-5
_CHECKS: dict[tuple, TreeCheck] = {}


@dataclass(frozen=True)
class TreeCheck:
    """The outcome of verifying one declared exact tree for one (kernel, device, dtype)."""

    kernel: str
    tree: str
    device: str
    dtype: str
    build: str  # the CPU capability and torch version, or the CUDA device
    status: Status
    rows: int  # rows compared
    detail: str  # the first mismatch, or why nothing could be compared

    @property
    def in_use(self) -> str:
        return {"verified": f"the exact tree {self.tree}", "refuted": "the order-agnostic bound",
                "unverifiable": "the declared shape without its exact tree"}[self.status]

    def line(self) -> str:
        """One line for the environment block (``core.results.ReductionCheck.line``)."""
        from core.results import ReductionCheck

        return ReductionCheck.model_validate(self.as_json()).line()

    def as_json(self) -> dict:
        return {**dataclasses.asdict(self), "in_use": self.in_use}


def build_of(device: torch.device) -> str:
    """What decides the code a kernel runs on ``device``: the CPU capability ATen dispatches on and torch's version,
    or the CUDA device's name."""
    import torch

    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return f"{torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}"


def applies(declared: Reduction | None, device: torch.device) -> bool:
    """Whether a declaration is made for tensors on ``device`` (``Reduction.device``: "" any, else its type)."""
    return declared is not None and declared.device in ("", device.type)


def dtypes_for(declared: Reduction, dtypes) -> list:
    """The dtypes among ``dtypes`` a declared exact tree is made for: ATen's row moments float32 only."""
    from proofs import aten_moments

    if declared.exact_tree == "aten_moments":
        return [d for d in dtypes if str(d).removeprefix("torch.") in aten_moments.INPUT_DTYPES]
    return list(dtypes)


def trusted(kernel: Kernel, x: torch.Tensor) -> Reduction | None:
    """The part of the kernel's declared reduction that holds for x's device and dtype: None where it is not
    declared for x's device or its exact tree was refuted; the shape without its tree where the tree is not verified
    (or is not declared for x's dtype: ATen's row moments are for float32 rows only); the declaration as is where its
    tree is verified (:func:`check`)."""
    declared = kernel.reduction
    if not applies(declared, x.device):
        return None
    if not declared.exact_tree:
        return declared
    outcome = check(kernel, x.device, x.dtype)
    if outcome.status == "refuted":
        return None
    return declared if outcome.status == "verified" else dataclasses.replace(declared, exact_tree="")


def check(kernel: Kernel, device: torch.device, dtype: torch.dtype) -> TreeCheck:
    """Verify the kernel's declared exact tree for rows of ``dtype`` on ``device``, once per process (module
    docstring); the rows are seeded, so every worker of a run reaches the same outcome."""
    import torch

    device = torch.device(device)
    key = (kernel.name, kernel.reduction, device, dtype, build_of(device))
    if key not in _CHECKS:
        _CHECKS[key] = _check(kernel, device, dtype)
    return _CHECKS[key]


def _check(kernel: Kernel, device: torch.device, dtype: torch.dtype) -> TreeCheck:
    import numpy as np
    import torch

    from core import boundary
    from proofs import aten_moments

    declared = kernel.reduction
    found = TreeCheck(kernel.name, declared.exact_tree, str(device), str(dtype).removeprefix("torch."),
                      build_of(device), "unverifiable", 0, "")
    if declared.exact_tree == "aten_moments" and found.dtype not in aten_moments.INPUT_DTYPES:
        return dataclasses.replace(found, detail="ATen's row moments are declared for float32 rows only (16-bit rows "
                                                 "take another path: two float vectors per chunk)")
    if kernel.statistics is None:
        return dataclasses.replace(found, detail="the kernel declares no statistics to compare with")
    if kernel.record.norm not in EMULATED.get(declared.exact_tree, ()):
        return dataclasses.replace(found, detail=f"no float32 emulation of {declared.exact_tree} for {kernel.kind}")
    rng = np.random.default_rng(0)
    compared = 0
    aten = declared.exact_tree.startswith("aten")
    widths = (*WIDTHS, SPLIT_WIDTH) if aten else (*WIDTHS, declared.block + 1) if declared.block else WIDTHS
    for width in widths:
        if not declared.declared_for(width):
            continue
        for offset in (0.0, 10.0):
            values = rng.standard_normal((ROWS_PER_WIDTH, width)) + offset
            x = boundary.to_kernel(values, dtype, device)
            for rows in (x, x[:1]) if aten else (x,):  # and a one-row call: ATen splits a wide one over threads
                try:
                    with torch.no_grad():
                        mean, rstd = kernel.statistics(rows, EPS)
                except Exception as error:  # any failure of the kernel's probe is reported as such
                    from core.errors import one_line

                    return dataclasses.replace(found, status="unverifiable",
                                               detail=f"its statistics raised {one_line(error)}")
                observed = {"mean": mean, "rstd": rstd}
                expected = predicted(declared, boundary.to_oracle(rows).astype(np.float32), EPS,
                                     not kernel.record.centred)
                for name, value in expected.items():
                    got = boundary.to_oracle(observed[name]).astype(np.float32).reshape(-1)
                    equal = np.asarray(value, dtype=np.float32).reshape(-1) == got
                    if not equal.all():
                        row = int(np.argmin(equal))
                        return dataclasses.replace(
                            found, status="refuted", rows=compared,
                            detail=f"d = {width}: the kernel's {name} {got[row]:.9g} against the emulated "
                                   f"{np.float32(value.reshape(-1)[row]):.9g}")
                compared += len(rows)
    return dataclasses.replace(found, status="verified", rows=compared, detail="")


def predicted(declared: Reduction, x: np.ndarray, eps: float, rms: bool) -> dict[str, np.ndarray]:
    """The statistics a kernel computing the declared tree returns for float32 rows ``x``: {"mean"} for ATen's row
    moments (its M2 is not emulated bit for bit), {"rstd"} for ATen's sum under torch's composite rms_norm
    (1 / sqrt(sum / d + eps)), {"mean", "rstd"} or {"rstd"} for numpy_pow2 (kernels/norm.py: two-pass)."""
    import numpy as np

    f32 = np.float32
    width = x.shape[-1]

    def rstd_of(total):
        return (f32(1) / np.sqrt((total / f32(width)).astype(f32) + f32(eps))).astype(f32)

    if declared.exact_tree == "aten_moments":
        from proofs import aten_moments

        return {"mean": aten_moments.row_moments(x, declared.lanes, contract=declared.contract).m}
    if declared.exact_tree == "aten_cascade_sum":
        import torch

        from proofs import aten_sum

        total = aten_sum.float32_sum(x * x, lanes=declared.lanes // aten_sum.ILP, threads=torch.get_num_threads())
        return {"rstd": rstd_of(total)}
    from proofs.simulate import lanes_sum

    block = declared.block or 1 << max(width - 1, 0).bit_length()
    if rms:
        return {"rstd": rstd_of(lanes_sum(x * x, block))}
    mean = (lanes_sum(x, block) / f32(width)).astype(f32)
    deviations = x - mean[..., None]
    return {"mean": mean, "rstd": rstd_of(lanes_sum(deviations * deviations, block))}
