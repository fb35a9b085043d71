"""Bitwise claims serving stacks depend on (issue 29): batch invariance and run-to-run determinism of every norm kind.

``{prefix}.batch_invariance``: the same row (the same bits of x, and of the residual, the upstream gradients) gives
the same bits of y (and residual_out) and of dx (and d residual) whatever the number of rows in the call, 1 to a few
thousand, and wherever it sits among them. The function is the same (each row's output depends on that row alone:
the Jacobian of a batch is block-diagonal, ``*.row_independence``); what may change is the floating-point order of
its reductions, when a kernel picks a block size, a split or a launch grid from the row count (vLLM's RMSNorm at 256
tokens, vLLM #48271). dweight and dbias are sums over the rows: a different set of rows is a different sum, so they
are not part of it. For the dropout + add kind it is stated at p = 0: with a seed the mask is drawn by position
(the element's index), so the same row at another position gets another mask by design.

``{prefix}.determinism``: repeated identical calls give identical bits of every output and gradient (y,
residual_out; dx, dweight, dbias, d residual). A parameter gradient reduced with atomics (Liger's GroupNorm) adds
the rows' contributions in the order they arrive and breaks it. The dropout + add kind's determinism is its own
contract (``drop_add_ln.determinism``: same seed, same outputs, proofs.claims.fused).

Both are contracts only for a kernel that declares them (``Kernel.batch_invariant`` / ``deterministic`` True);
otherwise the suite measures them and reports the verdict with its evidence, never a failure.
"""

from __future__ import annotations

from proofs.claims.base import Claim
from proofs.derivation import Derivation

# the claim-id prefixes of the norm kinds, and their names
NORM_KINDS = {"ln": "LayerNorm", "rms": "RMSNorm", "add_ln": "Fused add + LayerNorm", "add_rms": "Fused add + RMSNorm",
              "drop_add_ln": "Fused dropout + add + LayerNorm", "gn": "GroupNorm"}
# the prefixes with a ``.determinism`` claim here: the dropout + add kind has its own (proofs.claims.fused)
DETERMINISM_KINDS = tuple(prefix for prefix in NORM_KINDS if prefix != "drop_add_ln")

DECLARED = (r"A contract where the kernel declares it (\texttt{{{0}=True}}); undeclared or declared False, measured "
            r"and reported (yes or no, with the outputs, sizes and differences found), never a failure.")


def _batch_invariance_notes(prefix: str) -> Derivation:
    notes = [r"Nothing to derive: row $r$'s output is a function of row $r$ alone (the batch's Jacobian is "
             r"block-diagonal, the \texttt{row\_independence} claims), so any difference between calls is the "
             r"floating-point order of a reduction the kernel chose from the batch size or the row's position.",
             r"$\partial L/\partial\gamma$ and $\partial L/\partial\beta$ are sums over the rows: another batch is "
             r"another sum, not expected to give the same bits, and not part of the claim."]
    if prefix == "gn":
        notes.append(r"The rows are GroupNorm's samples $x[n]$ of shape $[C, *]$.")
    if prefix == "drop_add_ln":
        notes.append(r"Stated at $p = 0$: with a seed, the mask of an element is drawn from its position, so the "
                     r"same row at another position gets another mask by design (claims \texttt{drop\_add\_ln.seeds}, "
                     r"\texttt{drop\_add\_ln.independence}).")
    return Derivation((), notes=tuple(notes))


def _determinism_notes() -> Derivation:
    return Derivation((), notes=(r"Nothing to derive: the same inputs through the same code give the same bits, "
                                 r"unless the kernel's order of operations varies from call to call (atomic adds "
                                 r"into a parameter gradient, a split chosen by timing, an unseeded random choice).",))


def _claims(prefix: str, name: str) -> tuple[Claim, ...]:
    outputs = r"$y$ and residual\_out" if prefix.startswith(("add", "drop")) else r"$y$"
    gradients = r"$\partial L/\partial x$ and $\partial L/\partial$residual" if prefix.startswith(("add", "drop")) \
        else r"$\partial L/\partial x$"
    rows = "sample" if prefix == "gn" else "row"
    invariance = Claim(
        f"{prefix}.batch_invariance", f"{name} is batch invariant", "", "(contract)",
        rf"The same {rows} (the same bits) in calls of 1 to a few thousand {rows}s, at any position, gives "
        rf"bit-identical {outputs} and, in the backward, bit-identical {gradients}.",
        (r"the batch sizes straddle the switch points of kernels: powers of two and their neighbours, 256, the SM "
         r"counts 114 and 132 (at most a few hundred rows where the kernel runs on the CPU)",
         *((r"$p = 0$",) if prefix == "drop_add_ln" else ())),
        "contract", DECLARED.format("batch\\_invariant"), lambda: _batch_invariance_notes(prefix))
    if prefix not in DETERMINISM_KINDS:
        return (invariance,)
    parameters = r"$\partial L/\partial\gamma$" + (r", $\partial L/\partial\beta$" if prefix != "rms" and
                                                    prefix != "add_rms" else "")
    determinism = Claim(
        f"{prefix}.determinism", f"{name} is deterministic", "", "(contract)",
        rf"Repeated identical calls give bit-identical {outputs}, {gradients} and {parameters}.", (),
        "contract", DECLARED.format("deterministic"), _determinism_notes)
    return invariance, determinism


CLAIMS = tuple(claim for prefix, name in NORM_KINDS.items() for claim in _claims(prefix, name))
