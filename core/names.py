"""Short names of kernels for column heads and file names.

A SPEC can be long (``/home/me/projects/flaggems/wrap.py:layer_norm``,
``transformers.models.llama.modeling_llama:LlamaRMSNorm``): as a report's column head it runs into its
neighbours, and cut to its file name (``wrap.py:layer_norm``) it no longer tells apart two wrappers called
``wrap.py`` in two directories. :func:`short_spec` keeps what tells kernels apart: the file's directory,
its stem and the attribute; a module's last component and the attribute; anything else as it is.
"""

from __future__ import annotations

from pathlib import PurePath


def short_spec(spec: str) -> str:
    """``DIR/.../PARENT/FILE.py:ATTR`` -> ``PARENT/FILE:ATTR``; ``PKG.MODULE:ATTR`` -> ``MODULE:ATTR``; else ``spec``.

    A built-in's kernel name (``torch-module:layernorm``) has no dot before its colon and stays whole.
    """
    target, colon, attr = spec.rpartition(":")
    if not colon or not target:
        return spec
    if target.endswith(".py"):
        path = PurePath(target)
        return f"{path.parent.name}/{path.stem}:{attr}" if path.parent.name else f"{path.stem}:{attr}"
    if "/" not in target and "\\" not in target:
        return f"{target.rpartition('.')[2]}:{attr}"
    return spec


def split_specs(given: list[str]) -> list[str]:
    """The SPECs of repeated, comma-separated ``--kernel`` options: ``["torch,triton", "my.py:ln"]`` ->
    ``["torch", "triton", "my.py:ln"]``."""
    return [spec.strip() for item in given for spec in item.split(",") if spec.strip()]


__all__ = ["short_spec", "split_specs"]
