"""core.registry: SPEC strings to kernels, with one-line errors for what cannot be loaded."""

from __future__ import annotations

import textwrap

import pytest

from core.errors import UsageError
from core.registry import Kernel, builtins, infer_kind, resolve


def test_torch_builtin_gives_one_kernel_per_kind():
    kernels = resolve("torch")
    assert sorted(k.kind for k in kernels) == ["dropout", "layernorm", "rmsnorm"]
    assert [k.kind for k in resolve("torch", "rmsnorm")] == ["rmsnorm"]


def test_builtins_come_from_the_listed_adapters():
    assert "torch" in builtins()


@pytest.mark.parametrize(
    ("fn", "kind"),
    [
        (lambda x, weight, bias, eps: x, "layernorm"),
        (lambda x, weight, eps: x, "rmsnorm"),
        (lambda x, p, seed: x, "dropout"),
        (lambda x: x, None),
    ],
)
def test_kind_is_inferred_from_parameter_names(fn, kind):
    assert infer_kind(fn) == kind


def test_a_file_attribute_loads(tmp_path):
    path = tmp_path / "mine.py"
    path.write_text(textwrap.dedent("""
        def my_rms(x, weight, eps):
            return x
    """))
    (kernel,) = resolve(f"{path}:my_rms")
    assert kernel.kind == "rmsnorm" and kernel.spec == f"{path}:my_rms"


def test_a_kernel_object_keeps_its_declarations(tmp_path):
    path = tmp_path / "declared.py"
    path.write_text(textwrap.dedent("""
        from core.registry import Kernel
        GEMMA = Kernel("gemma", "rmsnorm", lambda x, w, e: x, weight_offset=1.0)
    """))
    (kernel,) = resolve(f"{path}:GEMMA")
    assert isinstance(kernel, Kernel) and kernel.weight_offset == 1.0


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("no-such-builtin", "unknown kernel"),
        ("/nonexistent/file.py:fn", "no such file"),
        ("no_such_module_xyz:fn", "cannot import"),
        ("math:no_such_attribute", "has no attribute"),
        ("math:pi", "not a function"),
    ],
)
def test_bad_specs_are_one_line_usage_errors(spec, message):
    with pytest.raises(UsageError, match=message) as info:
        resolve(spec)
    assert "\n" not in str(info.value)


def test_a_file_that_fails_to_import_is_a_usage_error(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('boom')\n")
    with pytest.raises(UsageError, match=r"importing .* failed: RuntimeError: boom"):
        resolve(f"{path}:fn")


def test_kind_filter_that_leaves_nothing_is_an_error(tmp_path):
    path = tmp_path / "ln.py"
    path.write_text("from core.registry import Kernel\nLN = [Kernel('ln', 'layernorm', lambda x, w, b, e: x)]\n")
    with pytest.raises(UsageError, match="provides no dropout"):
        resolve(f"{path}:LN", "dropout")
