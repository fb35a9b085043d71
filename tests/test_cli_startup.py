"""`normverify --help`, usage errors and `normverify list` answer at once: under 1 s, measured in a child process.

The measure is the child's CPU time (user + system), which a loaded machine does not inflate much; its wall
time gets slack for a busy CI runner. Behind the numbers: the parser, the listing and every adapter module
import none of torch, triton, sympy, hypothesis or pytest (they are imported where a command needs them).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time

import pytest

from core import adapters
from proofs.error_model import BOUNDS
from properties.run.profiles import PROFILES

LIMIT_S = 1.0
WALL_SLACK_S = 4.0  # a 2-core machine shared by many jobs starts Python slowly
HEAVY = ("torch", "triton", "sympy", "hypothesis", "pytest", "numpy", "properties.run.results")


def normverify(*args: str) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run ``python -m verify ARGS``; the result, its CPU time and its wall time in seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "verify", *args], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "COLUMNS": "80"})
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result, cpu, wall


@pytest.mark.parametrize(("args", "code"), [(("--help",), 0), (("run", "--help"), 0), (("run", "--no-such"), 2),
                                            (("run",), 2), (("run", "--kernel", "torch", "--profile", "nope"), 2),
                                            (("list",), 0), (("list", "--json"), 0)])
def test_answers_within_a_second(args, code):
    result, cpu, wall = normverify(*args)
    assert result.returncode == code, result.stderr
    assert cpu < LIMIT_S and wall < LIMIT_S + WALL_SLACK_S, f"{' '.join(args)}: {cpu:.2f} s CPU, {wall:.2f} s wall"


def heavy_modules_after(code: str) -> list[str]:
    probe = f"import json, sys\n{code}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_building_the_parser_imports_nothing_heavy():
    """Discovery imports every command module (verify.cli): each imports its heavy dependencies in ``run``."""
    assert heavy_modules_after("from verify import cli\ncli.build_parser()") == []


@pytest.mark.parametrize("module", adapters.MODULES)
def test_an_adapter_module_imports_nothing_heavy(module):
    """`normverify list` imports every adapter: torch and the rest belong inside their functions."""
    found = heavy_modules_after(f"import core.adapters.{module}")
    assert found == [], (f"core/adapters/{module}.py imports {found} when imported: move those imports into the "
                         "functions that use them (`normverify list` imports every adapter module)")


def test_list_without_probe_loads_no_kernel_and_reads_as_json():
    assert heavy_modules_after("from verify import cli\ncli.main(['list', '--json'])") == []
    result, _, _ = normverify("list", "--json")
    rows = json.loads(result.stdout)
    assert {"torch", "triton"} <= {row["spec"] for row in rows}


def test_run_help_names_every_profile_and_bound():
    help_text = " ".join(normverify("run", "--help")[0].stdout.split())
    assert all(name in help_text for name in (*PROFILES, *BOUNDS))
