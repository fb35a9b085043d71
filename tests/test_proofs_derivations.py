"""Every claim of docs/ARCHITECTURE.md exists, every step of every derivation re-verifies, and the checker
rejects altered steps (a flipped sign, a dropped term, a wrong eigenvalue, a bad certificate)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import sympy as sp

from proofs import expressions
from proofs.algebra import K, d, delta, eps, gamma, i, j, mu, p, row_sum, v, var, x
from proofs.claims import CLAIMS, VERDICTS
from proofs.claims.dropout import enumerated_bias
from proofs.derivation import AtMost, DerivationError, Equal, Fact

ARCHITECTURE = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"


def architecture_claim_ids() -> set[str]:
    """The ids in the claim table of docs/ARCHITECTURE.md, with {a,b}.name expanded."""
    ids = set()
    for line in ARCHITECTURE.read_text().splitlines():
        cell = line.split("|")[1].strip() if line.startswith("| ") else ""
        for part in re.findall(r"\{[^}]*\}\.\w+|[\w]+\.\w+", cell):
            if part.startswith("{"):
                prefixes, name = part[1:].split("}.")
                ids.update(f"{prefix}.{name}" for prefix in prefixes.split(","))
            else:
                ids.add(part)
    return ids


def test_every_architecture_claim_id_is_a_claim():
    expected = architecture_claim_ids()
    assert len(expected) > 25
    assert expected <= set(CLAIMS), sorted(expected - set(CLAIMS))


@pytest.mark.parametrize("claim_id", sorted(CLAIMS))
def test_claim_is_complete_and_its_derivation_verifies(claim_id):
    claim = CLAIMS[claim_id]
    assert claim.id == claim_id and claim.title and claim.statement
    assert claim.verdict in VERDICTS
    if claim.verdict != "contract":
        assert claim.seed_statement and claim.verdict_note and claim.conditions
    derivation = claim.derive()
    if claim.verdict != "contract":
        assert derivation.steps, "a theory claim needs a derivation"
    derivation.check()  # raises DerivationError naming the step


def _step(claim_id: str, why_contains: str):
    for step in CLAIMS[claim_id].derive().steps:
        if why_contains in step.why:
            return step
    raise LookupError(why_contains)


s = sp.sqrt(var + eps)


def test_the_checker_rejects_a_flipped_sign_in_the_jacobian():
    step = _step("ln.jacobian", "seed 000's formula")
    assert step.verify()
    flipped = gamma[i] * ((delta(i, j) - 1 / d) / s + (x[i] - mu) * (x[j] - mu) / (d * s**3))
    assert not dataclasses.replace(step, rhs=flipped).verify()


def test_the_checker_rejects_a_dropped_term():
    step = _step("ln.jacobian", "seed 000's formula")
    dropped = gamma[i] * (delta(i, j) / s - (x[i] - mu) * (x[j] - mu) / (d * s**3))  # the -1/d term is gone
    assert not dataclasses.replace(step, rhs=dropped).verify()
    bias = _step("dropout.variance_bias", "the seed's formula")
    assert bias.verify()
    assert not dataclasses.replace(bias, rhs=p * (d - 1) / (d * (1 - p)) * var).verify()  # mu^2 dropped


def test_the_checker_rejects_the_seed_eigenvalue_on_the_normalized_row():
    step = _step("ln.spectral_norm", "eigenvalue $\\epsilon/s^3$ on")
    assert not dataclasses.replace(step, rhs=(x[i] - mu) / s**2).verify()  # eigenvalue 1/s: wrong


def test_the_checker_rejects_a_wrong_aggregate():
    unit = expressions.unit_weight(expressions.jacobian("ln"))
    honest = Equal(row_sum(unit * v[j], j), v[i] / s, "perp", aggregates={v[K]: 0, x[K] * v[K]: 0})
    assert honest.verify()
    # without v perpendicular to x the eigen-relation is false
    assert not Equal(row_sum(unit * v[j], j), v[i] / s, "perp", aggregates={v[K]: 0}).verify()


def test_the_checker_rejects_a_false_inequality_or_certificate():
    epsp = sp.Symbol("epsilon", positive=True)
    scale = sp.sqrt(var + epsp)
    assert AtMost(epsp / scale**3, 1 / scale, "ok", certificate=var / scale**3).verify()
    assert not AtMost(1 / scale, epsp / scale**3, "reversed", certificate=-var / scale**3).verify()
    assert not AtMost(epsp / scale**3, 1 / scale, "wrong certificate", certificate=var / scale**2).verify()


def test_a_failing_fact_or_step_is_reported_by_check():
    derivation = CLAIMS["ln.seed_example"].derive()
    altered = dataclasses.replace(derivation, steps=(*derivation.steps[:1],
                                                     dataclasses.replace(derivation.steps[1], rhs=sp.Rational(75, 17)),
                                                     Fact("false", "a false fact", lambda: False)))
    assert [n for n, _ in altered.failures()] == [2, 3]
    with pytest.raises(DerivationError, match="step 2"):
        altered.check()


def test_dropout_enumeration_distinguishes_the_variances():
    formula = expressions.dropout_variance_bias().subs(d, 3)
    row = [x[1], x[2], x[3]]
    mean = sum(row) / 3
    population = sum((a - mean) ** 2 for a in row) / 3
    assert sp.simplify(enumerated_bias(3) - formula.subs({mu: mean, var: population})) == 0
    unbiased = sum((a - mean) ** 2 for a in row) / 2
    assert sp.simplify(enumerated_bias(3, unbiased=True) - formula.subs({mu: mean, var: unbiased})) != 0


def test_derived_expressions_are_the_known_closed_forms():
    assert sp.simplify(expressions.eigenvalues("ln")["row"] - eps / s**3) == 0
    assert sp.simplify(expressions.normalized_variance() - var / (var + eps)) == 0
    assert sp.simplify(expressions.dropout_variance_bias() - p * (d - 1) * (var + mu**2) / (d * (1 - p))) == 0
