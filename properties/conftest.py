"""pytest options of the conformance run: --kernel SPEC (repeatable), --kind, the Hypothesis profile."""

from __future__ import annotations

import platform

import pytest

from properties import profiles

# Plugins of the conformance run (e.g. the results plugin); other parts append their module name here.
pytest_plugins: list[str] = []

DEFAULT_KERNEL = "torch"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("normverify", "normverify conformance run")
    group.addoption("--kernel", action="append", default=None, metavar="SPEC",
                    help="kernel under test: a built-in (normverify list), MODULE:ATTR or PATH.py:ATTR; "
                         "repeatable, comma-separated lists allowed (default: torch)")
    group.addoption("--kind", default=None, choices=["layernorm", "rmsnorm", "dropout"],
                    help="the kernel's kind, where it cannot be inferred; also restricts the run to it")


def kernel_specs(config: pytest.Config) -> list[str]:
    given = config.getoption("--kernel") or [DEFAULT_KERNEL]
    return [spec for item in given for spec in item.split(",") if spec]


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config._normverify_profile = profiles.load(config.getoption("hypothesis_profile", None))


def pytest_report_header(config: pytest.Config) -> list[str]:
    import hypothesis
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = "not installed"
    cpu = f"cpu ({platform.processor() or platform.machine()})"
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else cpu
    return [
        f"normverify kernel: {', '.join(kernel_specs(config))}"
        + (f" (kind {config.getoption('--kind')})" if config.getoption("--kind") else ""),
        f"normverify profile: {config._normverify_profile}",
        f"versions: torch {torch.__version__}, triton {triton_version}, hypothesis {hypothesis.__version__}",
        f"device: {device}",
    ]
