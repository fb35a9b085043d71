"""core.kernel.Kernel.compiles_per_width, end to end: the plugin draws such a kernel's widths from
properties.draws.strategies.WIDTH_PALETTE in a ci run, and the results JSON states the declaration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from properties.draws.strategies import WIDTH_PALETTE

ROOT = Path(__file__).resolve().parent.parent
KERNELS = '''
import torch
from core.kernel import Kernel

def ln(x, weight, bias, eps):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], weight, bias, eps)

PALETTE_LN = Kernel("palette-ln", "layernorm", ln, compiles_per_width=True)
PLAIN_LN = Kernel("plain-ln", "layernorm", ln)
'''


def test_a_ci_run_draws_a_declared_kernels_widths_from_the_palette(tmp_path):
    (tmp_path / "kernels.py").write_text(KERNELS)
    results = tmp_path / "results.json"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "properties/test_forward.py",
               "-k", "matches_the_oracle or recording_a_graph", "--hypothesis-profile", "ci", "--json", str(results),
               *(f"--kernel={tmp_path / 'kernels.py'}:{name}" for name in ("PALETTE_LN", "PLAIN_LN"))]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    data = json.loads(results.read_text())
    widths: dict[str, set[int]] = {"palette-ln": set(), "plain-ln": set()}
    for result in data["results"]:
        widths[result["kernel"]].update(point["d"] for point in result.get("points") or () if "d" in point)
    assert widths["palette-ln"] and widths["palette-ln"] <= set(WIDTH_PALETTE)
    assert widths["plain-ln"] - set(WIDTH_PALETTE), "a kernel without the declaration draws every candidate"
    declared = {kernel["name"]: kernel["compiles_per_width"] for kernel in data["kernels"]}
    assert declared == {"palette-ln": True, "plain-ln": False}
