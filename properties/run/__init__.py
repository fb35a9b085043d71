"""The conformance run around the checks: the pytest plugins properties.plugin loads (results, expectations), the
Hypothesis profiles, evidence of each example, failures and counterexamples, the results writer and the terminal
summary.
"""
