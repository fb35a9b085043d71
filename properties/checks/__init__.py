"""The conformance checks, one module per claim family: ``check_*(kernel, **example)`` raises AssertionError
(through :mod:`properties.outcome`) when the kernel breaks the claim on that example, and records the
example's error/bound ratio (:mod:`properties.evidence`).

The test modules (``properties/test_*.py``) only draw examples and call these; saved counterexamples
(:mod:`properties.run.counterexamples`) name them as ``properties.checks.<module>:<function>``, and the tests
of the suite (tests/) import them directly.
"""
