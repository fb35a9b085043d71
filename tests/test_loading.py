"""A user's SPEC file: imported under its own name with its siblings importable, CUDA host code at import
answered on a CPU, import failures and wrong attribute names reported in one line that says where and why."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from core.errors import UsageError
from core.registry import resolve

KERNEL = """
from helpers import centred

def layer_norm(x, weight, bias, eps):
    c = centred(x)
    return c / (c.pow(2).mean(-1, keepdim=True) + eps).sqrt()
"""
HELPERS = "def centred(x):\n    return x - x.mean(-1, keepdim=True)\n"


def write(directory, name: str, source: str):
    directory.mkdir(exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(source))
    return path


def test_a_file_imports_its_siblings_under_a_readable_name(tmp_path):
    write(tmp_path / "proj", "helpers.py", HELPERS)
    path = write(tmp_path / "proj", "wrap_siblings.py", KERNEL)
    path_before = list(sys.path)
    kernel = resolve(f"{path}:layer_norm")[0]
    assert kernel.kind == "layernorm" and kernel.fn.__module__ == "wrap_siblings"
    assert sys.modules["wrap_siblings"].__file__ == str(path)
    assert sys.path == path_before, "the file's directory is on sys.path only while it loads"
    x = torch.randn(3, 5)
    torch.testing.assert_close(kernel.fn(x, None, None, 1e-5), torch.nn.functional.layer_norm(x, (5,), eps=1e-5))


def test_a_file_named_like_an_importable_module_gets_another_name(tmp_path):
    path = write(tmp_path / "p", "json.py", "def layer_norm(x, weight, bias, eps):\n    return x\n")
    kernel = resolve(f"{path}:layer_norm")[0]
    assert kernel.fn.__module__ == "json_2" and sys.modules["json"].__name__ == "json"


def test_a_file_named_like_our_package_never_shadows_it(tmp_path):
    """A user's ``kernels.py`` in the working directory, which ``python -c``/``-m`` put first on sys.path, loads as
    ``kernels_2``, and ``kernels`` (with its submodules imported later) is still ours."""
    write(tmp_path, "kernels.py", "def layer_norm(x, weight, bias, eps):\n    return x\n")
    script = ("from core.loading import OUR_ROOT, load_module; module = load_module('kernels.py', 'kernels.py:ln'); "
              "import kernels, kernels.interpret; "
              "print(module.__name__, kernels.interpret.__file__.startswith(str(OUR_ROOT)), module.__file__)")
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["kernels_2", "True", str(tmp_path / "kernels.py")]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU stand-ins exist only without CUDA")
def test_cuda_host_queries_at_import_are_answered_on_a_cpu(tmp_path):
    path = write(tmp_path / "q", "wrap_device.py", """
        import torch, triton
        DEVICE = triton.runtime.driver.active.get_active_torch_device()
        SMS = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count

        def rms_norm(x, weight, eps):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        """)
    kernel = resolve(f"{path}:rms_norm")[0]
    assert sys.modules[kernel.fn.__module__].DEVICE.type == "cpu" and sys.modules[kernel.fn.__module__].SMS == 4


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_only_host_code_fails_in_one_line_naming_file_line_and_remedy(tmp_path):
    path = write(tmp_path / "r", "wrap_cuda.py", "import torch\n\nBUFFER = torch.zeros(4, device='cuda')\n")
    with pytest.raises(UsageError) as failure:
        resolve(f"{path}:rms_norm")
    message = str(failure.value)
    assert "\n" not in message
    assert f"at {path}:3 `BUFFER = torch.zeros(4, device='cuda')`" in message
    assert "Torch not compiled with CUDA enabled" in message and "likely cause: CUDA-only host code" in message


def test_a_wrong_attribute_names_the_close_matches(tmp_path):
    write(tmp_path / "s", "helpers.py", HELPERS)
    path = write(tmp_path / "s", "wrap_typo.py", KERNEL)
    with pytest.raises(UsageError, match=r"has no attribute 'layer_nrom'; did you mean 'layer_norm'\?"):
        resolve(f"{path}:layer_nrom")
