"""normverify: property-based verification and theory checking for normalization kernels."""

__version__ = "0.1.0"
