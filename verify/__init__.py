"""normverify: property-based verification and theory checking for normalization kernels."""

from core import __version__

__all__ = ["__version__"]
