"""Bitwise claims serving stacks depend on (issue 29): batch invariance and run-to-run determinism of every norm kind.

``{prefix}.batch_invariance``: the same row (the same bits of x, and of the residual, the upstream gradients) gives
the same bits of y (and residual_out) and of dx (and d residual) whatever the number of rows in the call, 1 to a few
thousand, and wherever it sits among them. The function is the same (each row's output depends on that row alone:
the Jacobian of a batch is block-diagonal, ``*.row_independence``); what may change is the floating-point order of
its reductions, when a kernel picks a block size, a split or a launch grid from the row count (vLLM's RMSNorm at 256
tokens, vLLM #48271). dweight and dbias are sums over the rows: a different set of rows is a different sum, so they
are not part of it. For the dropout + add kind it is stated at p = 0: with a seed the mask is drawn by position
(the element's index), so the same row at another position gets another mask by design. The kinds over x [N, C, *]
(GroupNorm, LayerNorm over (C, *), InstanceNorm, BatchNorm) state it of their samples; BatchNorm in eval mode only
(in training its statistics couple the samples, claim bn.coupling: another batch is another function), and the
running buffers a training call updates are averages over the samples (like dweight: not part of it). The quantized
kinds state it of q, the per-row dynamic scales (a static scale is returned as given) and residual_out; they have no
backward.

``{prefix}.determinism``: repeated identical calls give identical bits of every output and gradient (y,
residual_out; dx, dweight, dbias, d residual; the updated running buffers; q and the scales). A parameter gradient
reduced with atomics (Liger's GroupNorm) adds the rows' contributions in the order they arrive and breaks it. The
dropout + add kind's determinism is its own contract (``drop_add_ln.determinism``: same seed, same outputs,
proofs.claims.fused).

Both are contracts only for a kernel that declares them (``Kernel.batch_invariant`` / ``deterministic`` True);
otherwise the suite measures them and reports the verdict with its evidence, never a failure.
"""

from __future__ import annotations

from dataclasses import dataclass

from proofs.claims.base import Claim
from proofs.derivation import Derivation


@dataclass(frozen=True)
class _Family:
    """What the bitwise claims of one kind compare: its per-row ``outputs`` and row ``gradients`` (LaTeX; no gradients:
    forward only), the further outputs of a repeated call (``parameters``: dweight, dbias, the running buffers), what
    a row is (``unit``), the conditions of batch invariance beyond the batch sizes, its notes, and whether it has a
    ``.determinism`` claim here."""

    name: str
    outputs: str = r"$y$"
    gradients: str = r"$\partial L/\partial x$"
    parameters: str = r"$\partial L/\partial\gamma$, $\partial L/\partial\beta$"
    unit: str = "row"
    conditions: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    determinism: bool = True


_RESIDUAL = {"outputs": r"$y$ and residual\_out",
             "gradients": r"$\partial L/\partial x$ and $\partial L/\partial$residual"}
_DGAMMA = r"$\partial L/\partial\gamma$"
_RUNNING = r"$\partial L/\partial\gamma$, $\partial L/\partial\beta$ and the updated running mean and variance"
_SAMPLES = r"The rows are the samples $x[n]$ of shape $[C, *]$ of x $[N, C, *]$."
_RUNNING_NOTE = (r"In training mode the running buffers are updated with statistics averaged over the samples: like "
                 r"$\partial L/\partial\gamma$, another batch gives another average, not part of the claim "
                 r"(part of \texttt{{{0}.determinism}}).")
_QUANT = {"outputs": r"$q$ and the dynamic per-row scales (a static scale is returned as given)", "gradients": "",
          "parameters": ""}
_QUANT_RESIDUAL = r"$q$, the dynamic per-row scales (a static scale is returned as given) and residual\_out"
_QUANT_NOTE = (r"Forward only: a quantized output has no gradient. A dynamic scale is $\max(\mathrm{amax}_r/f_{max}, "
               r"s_{min})$ of row $r$'s own $y$, so it is part of the row's output; a static scale is the caller's.")

FAMILIES = {
    "ln": _Family("LayerNorm"),
    "rms": _Family("RMSNorm", parameters=_DGAMMA),
    "add_ln": _Family("Fused add + LayerNorm", **_RESIDUAL),
    "add_rms": _Family("Fused add + RMSNorm", **_RESIDUAL, parameters=_DGAMMA),
    "drop_add_ln": _Family(
        "Fused dropout + add + LayerNorm", **_RESIDUAL, conditions=(r"$p = 0$",), determinism=False,
        notes=(r"Stated at $p = 0$: with a seed, the mask of an element is drawn from its position, so the same row at "
               r"another position gets another mask by design (claims \texttt{drop\_add\_ln.seeds}, "
               r"\texttt{drop\_add\_ln.independence}).",)),
    "gn": _Family("GroupNorm", unit="sample", notes=(_SAMPLES,)),
    "cln": _Family("Channel-wise LayerNorm", unit="sample",
                   notes=(_SAMPLES + r" Each sample's statistics are over its own $C \cdot S$ elements; $\gamma$, "
                          r"$\beta$ are element-wise $[C, *]$.",)),
    "in": _Family("InstanceNorm", parameters=_RUNNING, unit="sample",
                  conditions=(r"either mode: training (each (sample, channel)'s own statistics) or eval (the running "
                              r"statistics, a per-channel affine map)",),
                  notes=(_SAMPLES + r" In both modes sample $n$'s output is a function of sample $n$ alone "
                         r"(\texttt{in.independence}).", _RUNNING_NOTE.format("in"))),
    "bn": _Family("BatchNorm", parameters=_RUNNING, unit="sample",
                  conditions=(r"eval mode ($\mathrm{training} = \mathrm{False}$): $y = \gamma_c (x - "
                              r"\hat\mu_c)/\sqrt{\hat\sigma^2_c + \epsilon} + \beta_c$ with the running statistics",),
                  notes=(_SAMPLES,
                         r"Why eval mode only: in training mode channel $c$'s statistics are over all $N$ samples, so "
                         r"the batch's Jacobian is dense across samples (\texttt{bn.coupling}: the cross-sample entry "
                         r"$-\gamma_c(1 + \hat x_a \hat x_b)/(n s)$). A sample's output then depends on the other "
                         r"samples: another batch is another function, not another order of the same sums, and batch "
                         r"invariance does not hold for any kernel. It is neither claimed nor measured there.",
                         r"In eval mode the map is per-channel affine (\texttt{bn.eval}): sample $n$'s output is a "
                         r"function of sample $n$ alone, and batch invariance is about the order of operations only.",
                         r"\texttt{bn.determinism} is claimed in both modes, the running buffers a training call "
                         r"updates compared bit for bit with $y$ and the gradients.")),
    "ln_quant": _Family("LayerNorm quantized to FP8/INT8", **_QUANT, notes=(_QUANT_NOTE,)),
    "rms_quant": _Family("RMSNorm quantized to FP8/INT8", **_QUANT, notes=(_QUANT_NOTE,)),
    "add_rms_quant": _Family("Fused add + RMSNorm quantized to FP8/INT8", **{**_QUANT, "outputs": _QUANT_RESIDUAL},
                             notes=(_QUANT_NOTE,)),
}
# the claim-id prefixes of the norm kinds, and their names
NORM_KINDS = {prefix: family.name for prefix, family in FAMILIES.items()}
# the prefixes with a ``.determinism`` claim here: the dropout + add kind has its own (proofs.claims.fused)
DETERMINISM_KINDS = tuple(prefix for prefix, family in FAMILIES.items() if family.determinism)

DECLARED = (r"A contract where the kernel declares it (\texttt{{{0}=True}}); undeclared or declared False, measured "
            r"and reported (yes or no, with the outputs, sizes and differences found), never a failure.")
SWITCH_POINTS = (r"the batch sizes straddle the switch points of kernels: powers of two and their neighbours, 256, the "
                 r"SM counts 114 and 132 (at most a few hundred rows where the kernel runs on the CPU)")


def _batch_invariance_notes(family: _Family) -> Derivation:
    notes = [r"Nothing to derive: row $r$'s output is a function of row $r$ alone (the batch's Jacobian is "
             r"block-diagonal, the \texttt{row\_independence} claims), so any difference between calls is the "
             r"floating-point order of a reduction the kernel chose from the batch size or the row's position."]
    if family.gradients:
        notes.append(r"$\partial L/\partial\gamma$ and $\partial L/\partial\beta$ are sums over the rows: another "
                     r"batch is another sum, not expected to give the same bits, and not part of the claim.")
    notes.extend(family.notes)
    if family.conditions:
        notes.append("Conditions: " + "; ".join(family.conditions) + ".")
    return Derivation((), notes=tuple(notes))


def _determinism_notes() -> Derivation:
    return Derivation((), notes=(r"Nothing to derive: the same inputs through the same code give the same bits, "
                                 r"unless the kernel's order of operations varies from call to call (atomic adds "
                                 r"into a parameter gradient, a split chosen by timing, an unseeded random choice).",))


def _claims(prefix: str, family: _Family) -> tuple[Claim, ...]:
    unit = family.unit
    backward = rf" and, in the backward, bit-identical {family.gradients}" if family.gradients else ""
    invariance = Claim(
        f"{prefix}.batch_invariance", f"{family.name} is batch invariant", "", "(contract)",
        rf"The same {unit} (the same bits) in calls of 1 to a few thousand {unit}s, at any position, gives "
        rf"bit-identical {family.outputs}{backward}.",
        (SWITCH_POINTS, *family.conditions),
        "contract", DECLARED.format("batch\\_invariant"), lambda: _batch_invariance_notes(family))
    if not family.determinism:
        return (invariance,)
    everything = ", ".join(part for part in (family.outputs, family.gradients, family.parameters) if part)
    determinism = Claim(
        f"{prefix}.determinism", f"{family.name} is deterministic", "", "(contract)",
        rf"Repeated identical calls give bit-identical {everything}.", (),
        "contract", DECLARED.format("deterministic"), _determinism_notes)
    return invariance, determinism


CLAIMS = tuple(claim for prefix, family in FAMILIES.items() for claim in _claims(prefix, family))
