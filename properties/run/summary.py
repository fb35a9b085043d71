"""A test's examples summed up for its result: count, unchecked, worst ratio, dtypes, widths, coverage, worst case,
points.

The examples are what the test's checks recorded (``properties.evidence.record``), turned into plain JSON data
here, in the process that ran the test (they may cross from a pytest-xdist worker).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from core.results import Finding

MAX_POINTS = 200


def plain(value):
    """JSON-ready data: dtypes by name, tensors and arrays as numbers (small) or a shape, NaN/inf as None."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in value]
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, str, int)):
        return value
    if isinstance(value, (torch.dtype, np.dtype)):
        return str(value).removeprefix("torch.")
    if isinstance(value, (torch.Tensor, np.ndarray, np.generic)):
        size = value.numel() if isinstance(value, torch.Tensor) else value.size
        if size == 1 and value.ndim == 0:
            return plain(value.item())
        return plain(value.tolist()) if size <= 16 else f"{type(value).__name__} of shape {tuple(value.shape)}"
    return str(value)


def summarize(examples: list[dict]) -> dict:
    """Examples run, how many of them were unchecked (a value without a finite bound), worst ratio (None when no
    example has a finite ratio), dtypes, widths, worst case, points: the call phase's part of a result."""
    points = [plain(e) for e in examples]
    ratios = [(e["ratio"], i) for i, e in enumerate(examples) if e.get("ratio") is not None]
    worst_ratio, worst_index = max(ratios) if ratios else (None, None)
    return {
        "examples": len(examples),
        "unchecked": sum(1 for e in examples if e.get("unchecked")),
        "coverage": coverage(examples),
        "worst_ratio": worst_ratio if worst_ratio is not None and math.isfinite(worst_ratio) else None,
        "dtypes": sorted({str(p["dtype"]) for p in points if p.get("dtype") is not None}),
        "widths": sorted({int(p["d"]) for p in points if isinstance(p.get("d"), (int, float))}),
        "worst_case": points[worst_index] if worst_index is not None else None,
        "points": bounded(points, worst_index),
        "diagnosis": next((p["diagnosis"] for p in reversed(points) if p.get("diagnosis") is not None), None),
        "finding": finding(examples),
    }


def finding(examples: list[dict]) -> dict | None:
    """The examples' findings of a bitwise property (properties.outcome.measured) merged into one
    (core.results.Finding.merged), as JSON data; None for a test that records none."""
    found = [Finding.model_validate(e["finding"]) for e in examples if e.get("finding") is not None]
    if not found:
        return None
    return functools.reduce(Finding.merged, found).model_dump(mode="json")


def coverage(examples: list[dict]) -> dict[str, dict[str, int]]:
    """How many examples fell in each class of each axis of their draw (properties.evidence.coverage_of): dtypes,
    layout, width, dims."""
    found: dict[str, dict[str, int]] = {}
    for example in examples:
        for axis, label in (example.get("draw") or {}).items():
            found.setdefault(axis, {})
            found[axis][label] = found[axis].get(label, 0) + 1
    return found


def bounded(points: list[dict], keep: int | None) -> list[dict]:
    """At most MAX_POINTS of ``points``, evenly spread, always including index ``keep``."""
    if len(points) <= MAX_POINTS:
        return points
    step = len(points) / MAX_POINTS
    chosen = {int(i * step) for i in range(MAX_POINTS - 1)} | ({keep} if keep is not None else set())
    return [points[i] for i in sorted(chosen)]
