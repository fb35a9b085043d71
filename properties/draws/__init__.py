"""What the conformance tests draw: Hypothesis strategies of each kind's examples, rounded to the kernel's dtypes on
its device.
"""
