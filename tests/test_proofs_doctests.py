"""The >>> witnesses in proofs' docstrings run and hold (SymPy's style: a trap a claim finds is shown, runnable, where
it is stated): every module of the proofs package, and at least one witness in each module that states a trap."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import proofs

MODULES = sorted(module.name for module in pkgutil.walk_packages(proofs.__path__, "proofs."))
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
# the modules that state a trap a claim finds (eps outside the root, one-pass cancellation, the seeds' statements that
# fail), each with its witness
WITNESSED = ("proofs.claims.numerics", "proofs.claims.layernorm", "proofs.claims.rmsnorm", "proofs.claims.dropout",
             "proofs.claims.groupnorm", "proofs.claims.blocks", "proofs.oracles", "proofs.error_terms",
             "proofs.error_model")


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_hold(name):
    found = doctest.testmod(importlib.import_module(name), optionflags=FLAGS, report=False)
    assert found.failed == 0, f"{found.failed} of {found.attempted} examples in {name} fail (printed above)"
    if name in WITNESSED:
        assert found.attempted > 0, f"{name} states a trap but shows no >>> witness"


def test_every_witnessed_module_exists():
    assert set(WITNESSED) <= set(MODULES)
