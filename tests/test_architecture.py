"""The import contract of pyproject.toml ([tool.importlinter]): layers verify > properties > core > proofs | kernels,
no cycles inside a package, a report that needs no suite and derivations that need no torch.

`make test` runs ``lint-imports`` too; here the suite enforces it, and shows the contract breaks on each kind
of violation (in a throwaway tree of the same five packages, checked with the same contract text).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("verify", "properties", "core", "proofs", "kernels")


def lint_imports(cwd: Path, config: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    script = ("import sys; from importlinter.cli import lint_imports; "
              f"sys.exit(lint_imports(config_filename={str(config)!r}, no_cache=True, no_logo=True))")
    return subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def contract_text() -> str:
    """The [tool.importlinter] tables of pyproject.toml, verbatim."""
    text = (ROOT / "pyproject.toml").read_text()
    tables = re.split(r"(?m)^(?=\[)", text)
    return "".join(t for t in tables if t.startswith(("[tool.importlinter]", "[[tool.importlinter.")))


def test_the_repository_keeps_the_import_contract():
    result = lint_imports(ROOT, ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout and "KEPT" in result.stdout


VIOLATIONS = {
    "core imports properties (a back-edge)": {"core/registry.py": "import properties.strategies\n"},
    "kernels import core (a leaf reaching up)": {"kernels/norm.py": "import core.registry\n"},
    "proofs import kernels (leaves must be independent)": {"proofs/oracles.py": "import kernels.norm\n"},
    "a cycle inside core": {"core/registry.py": "import core.guard\n", "core/guard.py": "import core.registry\n"},
    "the report imports the suite": {"verify/report/tables.py": "import properties.strategies\n"},
    "the report imports torch": {"verify/report/tables.py": "import torch\n"},
    "proofs import torch": {"proofs/oracles.py": "import torch\n"},
}


def check_tree(tmp_path: Path, imports: dict[str, str]) -> subprocess.CompletedProcess:
    """lint-imports with the repository's contract on a tree of the five packages holding only ``imports``."""
    modules = ["core/registry.py", "core/guard.py", "properties/strategies.py", "verify/report/tables.py",
               "kernels/norm.py", "proofs/oracles.py"]
    for package in (*PACKAGES, "verify/report", "torch"):
        (tmp_path / package).mkdir(parents=True, exist_ok=True)
        (tmp_path / package / "__init__.py").write_text("")
    for module in modules:
        (tmp_path / module).write_text(imports.get(module, ""))
    config = tmp_path / "contract.toml"
    config.write_text(contract_text())
    return lint_imports(tmp_path, config, pythonpath=tmp_path)


def test_a_tree_that_imports_only_downward_keeps_the_contract(tmp_path):
    annotations_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\n"
    downward = {"verify/report/tables.py": "import proofs.oracles\n" + annotations_only,
                "properties/strategies.py": "import core.registry\nimport proofs.oracles\n",
                "core/registry.py": "import kernels.norm\nimport core.guard\n", "core/guard.py": "import torch\n"}
    result = check_tree(tmp_path, downward)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("violation", VIOLATIONS)
def test_the_contract_breaks_on(violation, tmp_path):
    result = check_tree(tmp_path, VIOLATIONS[violation])
    assert result.returncode == 1 and "BROKEN" in result.stdout, result.stdout + result.stderr
