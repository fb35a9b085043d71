"""`normverify list`: the built-in SPECs, their kernels' kinds and conventions, and whether they run here."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table
from rich.text import Text

from core.errors import UsageError
from core.registry import Builtin, Kernel, builtins

NAME = "list"
HELP = "list the built-in kernel SPECs: kinds, weight convention, description, availability here"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--available", action="store_true", help="only the SPECs that can run on this machine")


def _device(kernel: Kernel) -> str:
    """The declared device, or where probing will look (core.capabilities: CUDA when present, else CPU)."""
    if kernel.device:
        return kernel.device
    import torch

    return "cuda or cpu (probed)" if torch.cuda.is_available() else "cpu (probed)"


def _kernels(builtin: Builtin) -> tuple[list[Kernel], str | None]:
    """The built-in's kernels and why it cannot run here (None when it can)."""
    reason = builtin.unavailable()
    if reason:
        return [], reason
    try:
        return builtin.load(), None
    except (UsageError, ImportError, RuntimeError) as error:
        return [], f"loading failed: {error}"


def table(only_available: bool = False) -> Table:
    result = Table(title="built-in kernels (use as --kernel SPEC)", title_justify="left")
    for header in ("SPEC", "kernel", "kind", "weight", "backward in", "description", "here"):
        result.add_column(header, overflow="fold")
    for name, builtin in sorted(builtins().items()):
        kernels, reason = _kernels(builtin)
        if reason:
            if not only_available:
                result.add_row(name, "", "", "", "", builtin.description, Text(f"unavailable: {reason}", style="red"))
            continue
        for index, kernel in enumerate(kernels):
            weight = "w" if kernel.weight_offset == 0 else f"{kernel.weight_offset:g} + w"
            norm = kernel.kind != "dropout"
            backward = "storage dtype" if kernel.backward_precision == "storage" else "fp32"
            result.add_row(name if index == 0 else "", kernel.name, kernel.kind, weight if norm else "",
                           backward if norm else "", kernel.description or builtin.description,
                           Text(_device(kernel), style="green"))
        result.add_section()
    return result


def run(args: argparse.Namespace) -> int:
    Console(highlight=False).print(table(args.available))
    return 0
