"""What a conformance test tells the results plugin about each example it ran.

Every property test runs its concrete example through :func:`check`::

    @pytest.mark.claim("ln.forward")
    @given(example=forward_examples())
    def test_forward(layernorm_kernel, example):
        evidence.check(check_forward, layernorm_kernel, example)

where ``check_forward(kernel, **example)``, a module-level function of :mod:`properties.checks.forward`,
raises AssertionError (expected vs got) on a violation and calls :func:`record` once per example: ``ratio`` is the
worst error/bound ratio of the example (> 1 is a failure) or None where the check is exact; the
other keyword arguments are plot data and description (docs/ARCHITECTURE.md, "points").

Hypothesis runs the minimal failing example last, so after a failure :func:`last_example` is the
counterexample that the results plugin saves for ``normverify replay``; with several distinct failures it
runs each one's minimal example last and reports the exceptions they raised, and :func:`failed_example` gives
the example of each. The plugin calls :func:`start` before each test and :func:`take` after it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

Example = tuple[Callable, Any, dict]  # (check, kernel, the example's inputs)
MAX_FAILURES = 32

_examples: list[dict] = []
_last: Example | None = None
_draw: dict[str, str] = {}  # the classes of the example being checked (coverage_of), added to its records
# The latest examples that raised: Hypothesis replays each distinct failure's minimal example last.
_failures: deque[tuple[BaseException, Example]] = deque(maxlen=MAX_FAILURES)


def check(fn: Callable[..., None], kernel: Any, example: dict) -> None:
    """Run ``fn(kernel, **example)``, remembering a copy of the example, taken before the call, as the latest one:
    a kernel that writes into its inputs must not change the counterexample that replays it. An example that
    raises is remembered with its exception (:func:`failures`)."""
    global _last, _draw
    _last = (fn, kernel, {name: _copy(value) for name, value in example.items()})
    _draw = coverage_of(example)
    try:
        fn(kernel, **example)
    except BaseException as error:
        _failures.append((error, _last))
        raise
    finally:
        _draw = {}


WIDTH_CLASSES = ((3, "d <= 3"), (1024, "4 <= d <= 1024"), (None, "d > 1024"))


def coverage_of(example: dict) -> dict[str, str]:
    """The classes of an example's draw, for the coverage the report shows per claim: ``dtypes`` (x's dtype and, where
    they differ, the weight's and bias'), ``parameter dtypes`` (the dtype mix: none, x's, float32 with 16-bit x,
    16-bit with float32 x; core.capabilities.PARAMETER_MIXES), ``layout`` (contiguous, strided, or a view into a
    larger buffer: a non-zero storage offset of any tensor input), ``width`` (WIDTH_CLASSES) and ``dims`` (x's
    dimensions)."""
    tensors = {name: t for name, t in example.items() if hasattr(t, "stride") and hasattr(t, "dtype")}
    x = tensors.get("x")
    if x is None:
        return {}
    dtypes = str(x.dtype).removeprefix("torch.")
    parameters = sorted({str(t.dtype).removeprefix("torch.") for name, t in tensors.items()
                         if name in ("weight", "bias") and t.dtype != x.dtype})
    if parameters:
        dtypes += " x, " + "/".join(parameters) + " weight"
    mix = _parameter_mix(x, [t for name, t in tensors.items() if name in ("weight", "bias")])
    if any(t.storage_offset() for t in tensors.values()):
        layout = "view into a larger buffer"
    elif all(t.is_contiguous() for t in tensors.values()):
        layout = "contiguous"
    else:
        layout = "strided"
    d = x.shape[-1]
    width = next(label for top, label in WIDTH_CLASSES if top is None or d <= top)
    return {"dtypes": dtypes, "parameter dtypes": mix, "layout": layout, "width": width, "dims": f"{x.dim()}-D"}


def _parameter_mix(x: Any, parameters: list) -> str:
    """The class of the example's parameter dtypes against x's (coverage_of)."""
    if not parameters:
        return "no weight or bias"
    if all(t.dtype == x.dtype for t in parameters):
        return "x's dtype"
    wider = all(t.dtype.itemsize > x.dtype.itemsize for t in parameters)
    return "wider than x (float32 with 16-bit x)" if wider else "narrower than x (16-bit with float32 x)"


def _copy(value: Any) -> Any:
    """A tensor's copy with its strides (properties.norms.copy_with_strides); anything else as it is."""
    if hasattr(value, "stride") and hasattr(value, "detach"):
        from properties.norms import copy_with_strides

        return copy_with_strides(value.detach())
    return value


def record(ratio: float | None = None, unchecked: int = 0, **point) -> None:
    """One example's evidence: its worst error/bound ratio (None for an exact check) and plot data.

    ``unchecked``: how many of its compared values had no finite bound. Such an example is counted and shown as
    *unchecked*, never as evidence that the claim holds (a ratio error/inf = 0 would read as exact)."""
    _examples.append({"ratio": None if ratio is None else float(ratio), **point,
                      **({"unchecked": int(unchecked)} if unchecked else {}),
                      **({"draw": dict(_draw)} if _draw else {})})


def last_example() -> Example | None:
    return _last


def failed_example(error: BaseException) -> Example | None:
    """The example that raised ``error`` (Hypothesis reports each distinct failure by the exception its minimal
    example raised when it was run last), None when no example of this test raised it."""
    return next((example for raised, example in reversed(_failures) if raised is error), None)


def start() -> None:
    global _last
    _examples.clear()
    _failures.clear()
    _last = None


def take() -> list[dict]:
    taken = list(_examples)
    _examples.clear()
    return taken
