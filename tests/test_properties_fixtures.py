"""properties/plugin.py: --kernel SPEC parametrizes the kernel fixtures; kinds without a kernel are not
collected; a norm test carries its kernel's claim id; a SPEC that cannot load is one line; a missing
capability is a skip with its reason. Runs pytest in a subprocess, as a user would."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from core.kinds import KINDS

ROOT = Path(__file__).resolve().parents[1]

CLAIM_PRINTER = '''
def pytest_collection_finish(session):
    for item in session.items:
        marker = item.get_closest_marker("claim")
        print("CLAIM", item.nodeid, *(marker.args if marker else ()))
'''

KERNELS = '''
import numpy as np
import torch


def dropout(x, p, seed):
    return x


def numpy_layernorm(x, weight, bias, eps):
    row = x.detach().numpy()
    centred = row - row.mean(-1, keepdims=True)
    return torch.from_numpy(centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + eps)).to(x.dtype)
'''


def _pytest(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin", "NORMVERIFY_PROFILE": "ci"}
    return subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider", "-q"],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)


def test_unloadable_spec_is_one_clear_line(tmp_path):
    run = _pytest("properties", "--kernel", "no/such/file.py:layernorm", "--collect-only", tmp_path=tmp_path)
    assert run.returncode == 4
    assert "no such file no/such/file.py" in run.stderr
    assert "Traceback" not in run.stderr + run.stdout


def test_kernels_parametrize_by_name_kinds_without_kernels_vanish_and_claims_follow_the_kind(tmp_path):
    (tmp_path / "claim_printer.py").write_text(CLAIM_PRINTER)
    (tmp_path / "user_kernels.py").write_text(textwrap.dedent(KERNELS))
    run = _pytest("properties", "--collect-only", "-p", "claim_printer", "--kernel", "torch",
                  "--kernel", f"{tmp_path}/user_kernels.py:dropout", tmp_path=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    claims = {line.split()[1]: line.split()[2:] for line in run.stdout.splitlines() if line.startswith("CLAIM ")}
    assert any(node.endswith("[torch:rmsnorm]") for node in claims)
    assert any(node.endswith(f"[{tmp_path}/user_kernels.py:dropout]") for node in claims)
    for node, ids in claims.items():
        assert len(ids) == 1, (node, ids)
        if "[torch:rmsnorm]" in node:
            assert ids[0].startswith("rms."), (node, ids)
        if "[torch:layernorm]" in node:  # LayerNorm's own claims, or the block claims built on a LayerNorm
            assert ids[0].partition(".")[0] in KINDS["layernorm"].families, (node, ids)
        if "user_kernels.py:dropout]" in node:
            assert ids[0].startswith("dropout."), (node, ids)

    only_dropout = _pytest("properties", "--collect-only", "--kernel", f"{tmp_path}/user_kernels.py:dropout",
                           tmp_path=tmp_path)
    assert only_dropout.returncode == 0
    collected = [line for line in only_dropout.stdout.splitlines() if "::" in line]
    assert collected and all("test_dropout.py" in line for line in collected)
    assert "skipped" not in only_dropout.stdout


def test_a_kernel_without_backward_skips_gradient_claims_with_the_reason(tmp_path):
    """Every gradient test collected for a forward-only kernel is skipped (none passes unchecked), with the reason."""
    (tmp_path / "user_kernels.py").write_text(textwrap.dedent(KERNELS))
    spec = f"{tmp_path}/user_kernels.py:numpy_layernorm"
    collected = _pytest("properties/test_gradients.py", "--collect-only", "--kernel", spec, tmp_path=tmp_path)
    tests = [line for line in collected.stdout.splitlines() if "::" in line]
    assert collected.returncode == 0 and len(tests) >= 2, collected.stdout
    run = _pytest("properties/test_gradients.py", "-rs", "--kernel", spec, tmp_path=tmp_path)
    assert run.returncode == 0, run.stdout
    assert f"\n{len(tests)} skipped in" in run.stdout, run.stdout
    assert f"no backward: the output of {spec} has no grad_fn (a forward-only kernel)" in run.stdout, run.stdout


def test_every_claim_id_of_the_conformance_tests_is_a_claim_of_proofs():
    import re

    from proofs.claims import CLAIMS

    used = set()
    for path in (ROOT / "properties").glob("test_*.py"):
        for marker in re.finditer(r"mark\.claim\(([^)]*)\)", path.read_text()):
            used |= set(re.findall(r'"([^"]+)"', marker.group(1)))
    assert used and used <= set(CLAIMS), used - set(CLAIMS)
    theory = {c for c, claim in CLAIMS.items() if claim.evidence == "theory"}
    assert not theory & used, f"claims marked theory-only that a conformance test checks: {sorted(theory & used)}"
    properties = {c for c, claim in CLAIMS.items()
                  if claim.verdict != "fails" and c not in theory and not c.startswith("numerics.")}
    assert properties <= used, f"claims without a conformance test: {sorted(properties - used)}"
