"""proofs.disk_cache: a derived expression is derived once per version of the derivations, read back equal, and
never stale or fatal (a changed source, a corrupt file, an unwritable directory); the oracles compiled from a stored
expression are the freshly derived ones, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from proofs import disk_cache, oracles


@pytest.fixture
def directory(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMVERIFY_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


class Counted:
    """A derivation that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> sp.Expr:
        self.calls += 1
        x = sp.IndexedBase("x")
        return sp.Sum(x[sp.Symbol("k", integer=True)] ** 2, (sp.Symbol("k", integer=True), 1, sp.Symbol("d")))


def test_an_expression_is_derived_once_and_read_back_equal(directory):
    derive = Counted()
    first = disk_cache.expression("square", derive)
    second = disk_cache.expression("square", derive)
    assert derive.calls == 1 and second == first == derive()
    assert [path.name for path in directory.iterdir()] == [f"square-{disk_cache.key()}.pickle"]


def test_a_corrupt_file_is_derived_again_and_replaced(directory):
    directory.mkdir()
    (directory / f"square-{disk_cache.key()}.pickle").write_bytes(b"not a pickle")
    derive = Counted()
    assert disk_cache.expression("square", derive) == derive() and derive.calls == 2
    assert disk_cache.expression("square", derive) == derive() and derive.calls == 3  # read back: no new derivation


def test_an_unwritable_directory_costs_only_the_derivation(tmp_path, monkeypatch):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv("NORMVERIFY_CACHE_DIR", str(blocker / "cache"))
    derive = Counted()
    assert disk_cache.expression("square", derive) == derive()


def test_without_a_home_directory_nothing_is_stored(monkeypatch):
    def no_home() -> None:
        raise RuntimeError("Could not determine home directory.")

    for variable in ("NORMVERIFY_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setattr(disk_cache.Path, "home", staticmethod(no_home))
    derive = Counted()
    assert disk_cache.directory() is None
    assert disk_cache.expression("square", derive) == disk_cache.expression("square", derive)
    assert derive.calls == 2


def test_a_changed_source_changes_the_key(tmp_path, monkeypatch):
    for name in ("algebra.py", "expressions.py"):
        (tmp_path / name).write_bytes((disk_cache.PACKAGE / name).read_bytes())
    monkeypatch.setattr(disk_cache, "PACKAGE", tmp_path)
    disk_cache.key.cache_clear()
    try:
        before = disk_cache.key()
        disk_cache.key.cache_clear()
        (tmp_path / "algebra.py").write_text((tmp_path / "algebra.py").read_text() + "\n# changed\n")
        assert disk_cache.key() != before
    finally:
        disk_cache.key.cache_clear()


def test_the_oracles_compiled_from_stored_expressions_are_the_derived_ones_bit_for_bit(directory):
    rng = np.random.default_rng(27)
    x, dy, weight = rng.standard_normal((3, 9)), rng.standard_normal((3, 9)), rng.uniform(0.5, 2, 9)

    def evaluated() -> list[np.ndarray]:
        oracles._compiled.cache_clear()
        oracles._eigenvalues.cache_clear()
        return [oracles.layernorm(x, weight, weight, 1e-5), *oracles.layernorm_vjp(x, weight, 1e-5, dy),
                oracles.rmsnorm_jacobian(x, None, 1e-5), oracles.layernorm_spectral_norm(x, 1e-5),
                oracles.rmsnorm_spectral_norm(x[:, :2], 1e-5)]

    try:
        derived = evaluated()
        assert any(directory.iterdir())
        stored = evaluated()
    finally:
        oracles._compiled.cache_clear()
        oracles._eigenvalues.cache_clear()
    assert all(np.array_equal(a, b) for a, b in zip(derived, stored, strict=True))


def test_the_rendered_verdicts_of_a_derivation_are_kept_and_read_back_without_verifying(directory, monkeypatch):
    """proofs.render: the report and `derive` mark each step with its verdict; the verdicts of the same derivation
    code are read back (19 s of SymPy per report before), and match what verifying gives."""
    from proofs import derivation, render

    claim = "rms.spectral_norm"
    render.verified_steps.cache_clear()
    try:
        verified = render.verified_steps(claim)
        assert any(directory.glob(f"verified-{claim}-*.pickle")) and all(ok for _, ok in verified)
        render.verified_steps.cache_clear()

        def refused(step) -> bool:
            raise AssertionError("verified again")

        for step_type in (derivation.Equal, derivation.AtMost, derivation.Fact):
            monkeypatch.setattr(step_type, "verify", refused)
        assert [ok for _, ok in render.verified_steps(claim)] == [ok for _, ok in verified]
    finally:
        render.verified_steps.cache_clear()
