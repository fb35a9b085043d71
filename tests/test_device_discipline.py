"""Device discipline (docs/ARCHITECTURE.md): every tensor the suite makes lives on the kernel's device, or is a
host-side float64 draw that crosses to it at core.boundary. CUDA rejects a host tensor in arithmetic with a device
tensor ("Expected all tensors to be on the same device"), the CPU does not, and CI has no GPU: this scan keeps the
rule where CI can see it. In core/, properties/ and verify/, every tensor factory names its device (``device=HOST``
for a host draw, ``device=x.device`` on the kernel's side) or derives from a tensor (``*_like``, ``t.new_*``), and
numpy arrays become tensors only in core/boundary.py."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("core", "properties", "verify")
BOUNDARY = Path("core/boundary.py")
# torch functions that make a tensor (or a generator) on the default device unless told otherwise
FACTORIES = frozenset({"tensor", "as_tensor", "zeros", "ones", "empty", "full", "rand", "randn", "randint", "randperm",
                       "arange", "linspace", "logspace", "eye", "empty_strided", "scalar_tensor", "Generator"})
FROM_HOST = frozenset({"from_numpy", "frombuffer"})


def unplaced_factories(source: str, path: Path) -> list[str]:
    """'path:line torch.f' for each factory call in ``source`` that names no device, and each numpy-to-tensor
    conversion outside core/boundary.py."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"):
            continue
        name = node.func.attr
        names_device = any(keyword.arg == "device" for keyword in node.keywords)
        if (name in FACTORIES and not names_device) or (name in FROM_HOST and path != BOUNDARY):
            found.append(f"{path}:{node.lineno} torch.{name}")
    return found


def suite_sources() -> list[Path]:
    return sorted(p.relative_to(ROOT) for package in SCANNED for p in (ROOT / package).rglob("*.py"))


def test_every_tensor_factory_of_the_suite_names_its_device():
    unplaced = [hit for path in suite_sources() for hit in unplaced_factories((ROOT / path).read_text(), path)]
    assert not unplaced, "tensor factories without device= (core/boundary.py states the rule):\n" + "\n".join(unplaced)


def test_the_scan_sees_the_rule():
    path = Path("properties/example.py")
    assert unplaced_factories("torch.zeros(3)\ntorch.eye(2, dtype=torch.float64)", path) == [
        "properties/example.py:1 torch.zeros", "properties/example.py:2 torch.eye"]
    assert unplaced_factories("torch.zeros(3, device=x.device)\ntorch.zeros_like(x)\nx.new_zeros(3)", path) == []
    assert unplaced_factories("torch.from_numpy(a)", path) == ["properties/example.py:1 torch.from_numpy"]
    assert unplaced_factories("torch.from_numpy(a)", BOUNDARY) == []


def test_the_scan_catches_the_spectral_norm_device_mix_put_back():
    """The mix a CUDA run found (issue 25): the derived direction, a numpy vector, made a host tensor by
    torch.as_tensor and added to the drawn start on the kernel's device."""
    path = Path("properties/checks/spectral_norm.py")
    source = (ROOT / path).read_text()
    fixed = "boundary.to_kernel(direction.reshape(start.shape), torch.float64, start.device)"
    assert fixed in source
    assert unplaced_factories(source, path) == []
    broken = source.replace(fixed, "torch.as_tensor(direction).reshape(start.shape)")
    assert [hit.split(" ")[1] for hit in unplaced_factories(broken, path)] == ["torch.as_tensor"]
