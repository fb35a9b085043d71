"""The library of mechanisms: derived alternative models of how a norm kernel deviates (issue 16).

``MECHANISMS[id]`` is a :class:`proofs.mechanisms.base.Mechanism`: a stable id, a one-line title, a checked
derivation of how its model differs from the correct one, and float64 evaluators (forward and, where
meaningful, backward) returning :class:`Prediction` s (center and bound per element) on a :class:`Case`.
``CONVENTIONS`` are the ids a kernel may declare (``Kernel(..., conventions=...)``): mechanisms that real
libraries follow on purpose. The modules, by what the mechanism changes:

    formulas.py   another function (eps outside the root, unbiased variance, fixed eps, weight offset, ...)
    precision.py  the right function computed or rounded elsewhere (one-pass variance, storage accumulation,
                  double rounding, backward in storage precision): interval models
    backward.py   a term of the derived VJP dropped or replaced
    fitting.py    rules that fit a mechanism's free parameter (fixed_eps's constant, a momentum) from the evidence

Like :mod:`proofs.oracles`, nothing here imports torch; inputs are float64 numpy arrays of the rounded values.
"""

from __future__ import annotations

from proofs.mechanisms import backward, formulas, precision
from proofs.mechanisms.base import Case, Mechanism, Prediction, correct_backward, correct_forward, round_to

MECHANISMS: dict[str, Mechanism] = {m.id: m for family in (formulas, precision, backward) for m in family.MECHANISMS}
CONVENTIONS: tuple[str, ...] = tuple(m.id for m in MECHANISMS.values() if m.convention)

__all__ = ["CONVENTIONS", "MECHANISMS", "Case", "Mechanism", "Prediction", "correct_backward", "correct_forward",
           "round_to"]
