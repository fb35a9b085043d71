"""`normverify replay FILE [--kernel SPEC]`: re-run a saved counterexample and show expected vs got."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from properties.run.counterexamples import ReplayResult

NAME = "replay"
HELP = "re-run a saved counterexample (exit 1 if it still fails, 0 if it passes)"
STYLES = {"passed": "bold green", "failed": "bold red", "error": "bold yellow"}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, metavar="FILE", help="a counterexample file (.pt) a failing run saved")
    parser.add_argument("--kernel", metavar="SPEC", default=None,
                        help="replay against this kernel instead of the one that failed")


def show(result: ReplayResult, console: Console) -> None:
    """One status line, the claim and kernel, expected vs got side by side, the message and the inputs."""
    from properties.run.counterexamples import describe

    head = Text.assemble((result.outcome.upper(), STYLES[result.outcome]), f"  {result.claim} on {result.kernel}")
    console.print(head)
    facts = Table.grid(padding=(0, 2))
    facts.add_row("file", str(result.path))
    facts.add_row("kernel", result.kernel if result.kernel == result.spec else f"{result.kernel} (SPEC {result.spec})")
    facts.add_row("check", result.check)
    console.print(facts)
    if result.expected is not None:
        table = Table(show_header=True, header_style="bold", box=None, padding=(0, 2))
        table.add_column("expected", overflow="fold")
        table.add_column("got", overflow="fold", style="red")
        table.add_row(result.expected, result.got)
        console.print(table)
    if result.message:
        console.print(Text(result.message))
    console.print(Text("inputs", style="bold"))
    console.print(Text(describe(result.inputs)))


def run(args: argparse.Namespace) -> int:
    from properties.run.counterexamples import replay  # torch: only when replaying

    result = replay(args.file, args.kernel)
    show(result, Console(highlight=False))
    return 0 if result.passed else 1
