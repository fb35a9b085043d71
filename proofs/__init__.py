"""SymPy derivations of the claims, with their conditions, verdicts and float64 oracles."""
