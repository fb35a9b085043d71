"""Hypothesis conformance tests: `pytest properties/ --kernel SPEC` (one file per claim family).

The folder follows one example's data flow:

    draws/           what a test draws: each kind's examples (strategies, fused_strategies, dropout_strategies,
                     regime_strategies, exact_rows), rounded to the kernel's dtypes on its device
    norms.py         every norm kind behind one interface (core.kinds): the guarded call and gradients, the float64
                     references at the norm's input h
    bounds/          how far the result may be: tolerance (every bound, from proofs.error_model), models (the
                     model a kernel is checked against: the oracle, or its declared conventions'), diagnosis (why a
                     check failed), dropout_statistics (the statistical tests and their risks)
    checks/          the check_* functions, one module per claim family: call, compare, conclude
    outcome.py       a comparison and a failure as data (error/bound ratios, target(), the failure message)
    evidence.py      each example's record, as the results keep it
    run/             the run around the checks: the plugins plugin.py loads (results, expectations), profiles,
                     selection, environment, failures and counterexamples, the writer and the terminal summary
    plugin.py        --kernel/--kind, the kernel fixtures (from the kind records), one claim id per item
    test_*.py        the claims: a marker, a draw, one replayable check

Each test draws an example, then runs it through ``evidence.check(check_fn, kernel, example)``; the
module-level ``check_*`` functions take concrete tensors, so a saved counterexample replays them.
"""
