"""`normverify list`: the built-in SPECs and whether they can run here; with --probe, their kernels.

Without ``--probe`` nothing is loaded or probed (no torch): one row per SPEC, its availability (a
package lookup) and description. With ``--probe`` every available built-in is loaded and each kernel
probed (:func:`core.capabilities.discover`): one row per kernel with its kind, weight convention,
declared backward precision, device, dtypes and backward.

On a terminal the rows are a table; otherwise (a pipe, a CI log) plain columns aligned with spaces,
one row per line and never wrapped, so ``normverify list | grep liger`` works; ``--json`` prints the
rows as a JSON list.
"""

from __future__ import annotations

import argparse
import json
import sys

from core.errors import UsageError, one_line
from core.kernel import Builtin, Kernel
from core.registry import builtins

NAME = "list"
HELP = "list the built-in kernel SPECs and whether they run here (--probe: load them and probe each kernel)"

# (key, header) of the columns, in order; the description (free text) last, so the others stay aligned
COLUMNS = (("spec", "SPEC"), ("here", "HERE"), ("description", "DESCRIPTION"))
PROBED_COLUMNS = (("spec", "SPEC"), ("kernel", "KERNEL"), ("kind", "KIND"), ("weight", "WEIGHT"),
                  ("backward_in", "BACKWARD IN"), ("conventions", "CONVENTIONS"), ("device", "DEVICE"),
                  ("dtypes", "DTYPES"), ("backward", "BACKWARD"), ("description", "DESCRIPTION"))


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--available", action="store_true", help="only the SPECs that can run on this machine")
    parser.add_argument("--probe", action="store_true",
                        help="load every available built-in and probe its kernels (device, dtypes, backward); slow")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")


def _kernel_row(spec: str, builtin: Builtin, kernel: Kernel) -> dict:
    from core.capabilities import discover

    caps = discover(kernel).as_json()
    norm = kernel.kind != "dropout"
    return {"spec": spec, "available": True, "reason": None, "kernel": kernel.name, "kind": kernel.kind,
            "weight": ("w" if kernel.weight_offset == 0 else f"{kernel.weight_offset:g} + w") if norm else "-",
            "backward_in": ("storage dtype" if kernel.backward_precision == "storage" else "fp32") if norm else "-",
            "conventions": ",".join(kernel.conventions) or "-",
            "device": caps["device"], "dtypes": ",".join(caps["dtypes"]),
            "backward": "yes" if caps["backward"] else "no", "capabilities": caps,
            "description": kernel.description or builtin.description}


def rows(table: dict[str, Builtin], probe: bool = False, only_available: bool = False) -> list[dict]:
    """One row per built-in SPEC (``probe``: per kernel of each available one), sorted by SPEC."""
    found = []
    for name, builtin in sorted(table.items()):
        reason = builtin.unavailable()
        if reason is None and probe:
            try:
                kernels = builtin.load()
            except (UsageError, ImportError, RuntimeError) as error:
                reason = f"loading failed: {one_line(error)}"
            else:
                found += [_kernel_row(name, builtin, kernel) for kernel in kernels]
                continue
        if reason is None or not only_available:
            found.append({"spec": name, "available": reason is None, "reason": reason,
                          "here": "yes" if reason is None else f"no: {reason}", "description": builtin.description})
    return found


def plain(found: list[dict], columns: tuple[tuple[str, str], ...]) -> str:
    """Rows as lines of space-aligned columns (the last one unpadded), headers first; '-' where a row has no value."""
    lines = [[header for _, header in columns]]
    lines += [[str(row.get(key, "-")) for key, _ in columns[:-1]] + [_last(row, columns)] for row in found]
    widths = [max(len(line[i]) for line in lines) for i in range(len(columns) - 1)]
    return "\n".join("  ".join([*(cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=True)), line[-1]]).rstrip()
                     for line in lines)


def _last(row: dict, columns: tuple[tuple[str, str], ...]) -> str:
    """The description, or why the built-in cannot run here when the columns have no HERE."""
    if row.get("reason") and "here" not in dict(columns):
        return f"unavailable: {row['reason']}"
    return str(row.get("description", ""))


def run(args: argparse.Namespace) -> int:
    found = rows(builtins(), probe=args.probe, only_available=args.available)
    columns = PROBED_COLUMNS if args.probe else COLUMNS
    if args.json:
        print(json.dumps(found, indent=1))
    elif sys.stdout.isatty():
        _print_table(found, columns)
    else:
        print(plain(found, columns))
    return 0


def _print_table(found: list[dict], columns: tuple[tuple[str, str], ...]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(title="built-in kernels (use as --kernel SPEC)", title_justify="left")
    for _, header in columns:
        table.add_column(header, overflow="fold")
    for row in found:
        cells = [str(row.get(key, "-")) for key, _ in columns[:-1]] + [_last(row, columns)]
        table.add_row(*(Text(cell, style="red") if cell.startswith(("no: ", "unavailable: ")) else cell
                        for cell in cells))
    Console(highlight=False).print(table)
