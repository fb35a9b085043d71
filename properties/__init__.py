"""Hypothesis conformance tests: `pytest properties/ --kernel SPEC` (one file per claim family).

    plugin.py        --kernel/--kind, the kernel fixtures (layernorm_kernel, rmsnorm_kernel, dropout_kernel,
                     norm_kernel), one claim id per item
    strategies.py    widths, rows, weights, eps, dtypes, whole examples (rounded to the storage dtype)
    norms.py         LayerNorm/RMSNorm behind one interface: guarded forward and VJP, float64 references
    tolerance.py     every bound (from proofs.error_model), and how sums and norms inherit them
    outcome.py       error/bound ratios, evidence.record, target(), the failure message
    test_*.py        the claims: forward, gradients, spectral_norm, mean_stability, variance, affine,
                     contracts, special_inputs, seed_example, dropout

Each test draws an example, then runs it through ``evidence.check(check_fn, kernel, example)``; the
module-level ``check_*`` functions take concrete tensors, so a saved counterexample replays them.
"""
