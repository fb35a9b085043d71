"""How far a kernel may be from the float64 reference, derived: the error-model bounds (tolerance), the model a
kernel is checked against (models), why a check failed (diagnosis), the bounds' tightness, dropout's statistical
tests.
"""
