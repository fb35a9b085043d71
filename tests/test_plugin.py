"""The conformance plugin (properties.plugin) comes with the installed package, through the pytest11 entry point:
`pytest --pyargs properties --kernel SPEC` works from any directory, and naming the plugin again registers nothing
twice."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def pytest_in(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider"], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_the_entry_point_names_the_plugin_module():
    (point,) = [p for p in entry_points(group="pytest11") if p.value == "properties.plugin"]
    assert point.name == "properties.plugin", "named after the module, so -p properties.plugin is the same plugin"


def test_the_options_exist_outside_the_checkout(tmp_path):
    result = pytest_in(tmp_path, "--help")
    assert result.returncode == 0, result.stderr
    assert "--kernel=SPEC" in result.stdout and "--claims=IDS" in result.stdout


def test_the_suite_collects_by_package_name_from_another_directory(tmp_path):
    result = pytest_in(tmp_path, "--pyargs", "properties", "--kernel", "torch", "--collect-only", "-q")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "test_forward.py::test_forward_matches_the_oracle[torch:layernorm]" in result.stdout


def test_naming_the_plugin_again_in_the_checkout_registers_it_once():
    result = pytest_in(ROOT, "properties/test_forward.py", "-p", "properties.plugin", "--kernel", "torch",
                       "--collect-only", "-q")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "already registered" not in result.stdout + result.stderr
