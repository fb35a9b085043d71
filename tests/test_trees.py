"""A declared exact reduction tree is verified on the machine it is used on before the bounds trust it (core.trees):
the built-ins' trees hold bit for bit here, a wrong declaration is refuted and falls back to the order-agnostic bound,
one that cannot be compared keeps only its shape, a CPU declaration is never applied on another device, and the run
says which in its header, its results JSON and its report. The tests that pin a machine-specific emulation or
tightness figure run again under every CPU capability the machine can force (ATEN_CPU_CAPABILITY)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from emulated import sequential_statistics

from core import trees
from core.adapters.torch_native import cpu_reductions, layernorm
from core.kernel import Kernel
from core.registry import resolve
from properties.bounds import tolerance
from properties.run.tightness import suite_rows

ROOT = Path(__file__).resolve().parent.parent
CPU = torch.device("cpu")
# The tests whose figures depend on the tree a CPU kernel computes: rerun under each forced capability (those of our
# Triton kernels left out: the interpreter's tree is numpy's, whatever ATen dispatches).
MACHINE_SPECIFIC = ("tests/test_aten_moments.py", "tests/test_aten_sum.py", "tests/test_tightness.py",
                    "tests/test_probabilistic_split.py", "tests/test_trees.py::test_the_built_ins_trees_hold_here")
CAPABILITIES = ("default", "avx2", "avx512")


def declared_trees(spec: str) -> list[tuple[Kernel, torch.dtype]]:
    """(kernel, dtype) for each exact tree the built-in declares on this machine, in each dtype it is declared for."""
    found = []
    for kernel in resolve(spec):
        if kernel.reduction is not None and kernel.reduction.exact_tree:
            dtypes = kernel.dtypes or (torch.float32, torch.float16, torch.bfloat16)
            found += [(kernel, dtype) for dtype in trees.dtypes_for(kernel.reduction, dtypes)]
    return found


@pytest.mark.parametrize("spec", ["torch", "triton"])
def test_the_built_ins_trees_hold_here(spec):
    """Every tree torch's CPU kernels (x86: DEFAULT, AVX2, AVX512, the last running the AVX2 kernel) and ours under
    the interpreter declare is what they compute on this machine, in every dtype it is declared for."""
    found = declared_trees(spec)
    if not found:
        pytest.skip(f"{spec} declares no exact tree on this machine ({torch.backends.cpu.get_cpu_capability()})")
    for kernel, dtype in found:
        check = trees.check(kernel, CPU, dtype)
        assert check.status == "verified" and check.rows >= len(trees.WIDTHS), check.line()
        x = suite_rows(64, 0.0, dtype, 2, seed=1)
        assert trees.trusted(kernel, x) == kernel.reduction


def wrong_lanes(spec: str, kind: str, lanes: int) -> Kernel:
    (kernel,) = resolve(spec, kind)
    if kernel.reduction is None or not kernel.reduction.exact_tree:
        pytest.skip(f"{kernel.name} declares no exact tree on this machine")
    return dataclasses.replace(kernel, name=f"{kernel.name}-lanes-{lanes}",
                               reduction=dataclasses.replace(kernel.reduction, lanes=lanes))


@pytest.mark.parametrize(("spec", "kind", "lanes"), [("torch", "layernorm", 16), ("torch", "rmsnorm", 64)])
def test_a_wrong_declaration_is_refuted_and_the_bound_is_the_order_agnostic_one(spec, kind, lanes):
    """The AVX512 reading of ATen's trees (16 float32 lanes; ATen runs its AVX2 kernel there): refuted on the first
    rows that tell the trees apart, said in one line, and the bound falls back to the undeclared kernel's."""
    wrong = wrong_lanes(spec, kind, lanes)
    check = trees.check(wrong, CPU, torch.float32)
    assert check.status == "refuted" and "NOT verified" in check.line() and "order-agnostic" in check.line()
    x = suite_rows(4096, 10.0, torch.float32, 4, seed=2)
    assert trees.trusted(wrong, x) is None
    undeclared = dataclasses.replace(wrong, reduction=None)
    bound = tolerance.forward(wrong, x, None, None, 1e-5)
    assert np.array_equal(bound, tolerance.forward(undeclared, x, None, None, 1e-5))


def test_a_wrong_block_of_our_triton_tree_is_refuted():
    (kernel,) = resolve("triton", "layernorm")
    wrong = dataclasses.replace(kernel, name="triton:layernorm-block-256",
                                reduction=dataclasses.replace(kernel.reduction, block=256))
    assert trees.check(wrong, CPU, torch.float32).status == "refuted"


def test_a_sequential_kernel_declaring_torchs_tree_is_refuted():
    declared = Kernel("sequential-declared-aten-moments", "layernorm", layernorm,
                      reduction=cpu_reductions().get("layernorm") or pytest.skip("no ATen tree declared here"),
                      statistics=sequential_statistics)
    assert trees.check(declared, CPU, torch.float32).status == "refuted"


def test_a_tree_that_cannot_be_compared_keeps_only_its_shape():
    """No statistics to compare with (a user's kernel that declares a tree and returns y alone), or a probe that
    raises: the tree is not used, the declared shape is; both said with the reason."""
    shape = dataclasses.replace(cpu_reductions().get("layernorm") or pytest.skip("no ATen tree declared here"))
    silent = Kernel("declares-a-tree-without-statistics", "layernorm", layernorm, reduction=shape)

    def raising(x, eps):
        raise RuntimeError("no statistics here")

    failing = dataclasses.replace(silent, name="declares-a-tree-whose-statistics-raise", statistics=raising)
    x = suite_rows(64, 0.0, torch.float32, 2, seed=3)
    for kernel, reason in ((silent, "no statistics"), (failing, "no statistics here")):
        check = trees.check(kernel, CPU, torch.float32)
        assert check.status == "unverifiable" and reason in check.detail, check.line()
        assert trees.trusted(kernel, x) == dataclasses.replace(shape, exact_tree="")


def test_a_declaration_for_the_cpu_is_not_applied_on_another_device():
    """torch's ATen trees and our interpreter's tree are declared for CPU tensors (Reduction.device): a kernel run on
    another device (CUDA; here the meta device stands in) gets the order-agnostic bound, whatever the host has."""
    (kernel,) = resolve("torch", "layernorm")
    declared = cpu_reductions().get("layernorm") or pytest.skip("no ATen tree declared here")
    assert declared.device == "cpu" and trees.applies(declared, CPU)
    assert not trees.applies(declared, torch.device("cuda")) and not trees.applies(declared, torch.device("meta"))
    assert trees.trusted(dataclasses.replace(kernel, reduction=declared), torch.empty(2, 8, device="meta")) is None
    (ours,) = resolve("triton", "rmsnorm")
    assert ours.reduction.device == "cpu"


WRONG_KERNEL = '''
import dataclasses
from core.adapters.torch_native import cpu_reductions, layernorm, layernorm_statistics
from core.kernel import Kernel

KERNEL = Kernel("avx512-reading", "layernorm", layernorm, statistics=layernorm_statistics,
                reduction=dataclasses.replace(cpu_reductions()["layernorm"], lanes=16))
'''


def test_the_run_says_which_tree_it_used_in_its_header_and_json(tmp_path):
    """A run of a kernel declaring a wrong tree: the header's line and the JSON's environment say it was not verified
    and what bound was used instead; the report prints the same line (verify.report.tables)."""
    if not cpu_reductions():
        pytest.skip("no ATen tree declared here")
    (tmp_path / "wrong_tree.py").write_text(WRONG_KERNEL)
    out = tmp_path / "results.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(tmp_path)])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "properties.plugin", "--kernel", "wrong_tree:KERNEL",
                           "--json", str(out), "properties/test_seed_example.py", "-p", "no:cacheprovider"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert "declared reduction: avx512-reading float32 on cpu" in proc.stdout, proc.stdout[-3000:] + proc.stderr
    assert "NOT verified" in proc.stdout
    results = json.loads(out.read_text())
    (check,) = results["environment"]["reductions"]
    assert check["status"] == "refuted" and check["in_use"] == "the order-agnostic bound", check

    from core.results import Document
    from verify.report.model import arrange
    from verify.report.tables import runs_table

    assert "NOT verified" in runs_table(arrange([Document.model_validate(results)]))


def forced_capability(name: str) -> str:
    """The capability torch reports with ATEN_CPU_CAPABILITY=name (a lower one where the hardware lacks it)."""
    proc = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                          env={**os.environ, "ATEN_CPU_CAPABILITY": name}, capture_output=True, text=True, timeout=120)
    return proc.stdout.strip()


@pytest.mark.parametrize("capability", CAPABILITIES)
def test_the_machine_specific_tests_pass_under_every_capability_the_machine_can_force(capability):
    """The emulations, the tightness floors and the built-ins' tree checks under ATEN_CPU_CAPABILITY=default, avx2,
    avx512 (the ones this CPU has; the process's own capability is what the rest of the run covers)."""
    if not cpu_reductions():
        pytest.skip("torch declares no ATen tree on this CPU (x86 only)")
    reached = forced_capability(capability)
    if reached != capability.upper():
        pytest.skip(f"this CPU cannot run ATen's {capability.upper()} kernels (torch reports {reached})")
    if reached == torch.backends.cpu.get_cpu_capability():
        pytest.skip(f"{reached} is this process's capability: the rest of the run covers it")
    proc = subprocess.run([sys.executable, "-m", "pytest", *MACHINE_SPECIFIC, "-k", "not triton", "-q",
                           "-p", "no:cacheprovider", "-p", "no:xdist"], cwd=ROOT,
                          env={**os.environ, "ATEN_CPU_CAPABILITY": capability}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0 and " passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1], \
        proc.stdout[-4000:] + proc.stderr[-2000:]
