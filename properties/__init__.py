"""Hypothesis conformance tests: `pytest properties/ --kernel SPEC` (one file per claim family)."""
