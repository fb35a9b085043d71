"""`normverify list`: the built-in SPECs and whether they can run here; with --probe, their kernels.

Without ``--probe`` nothing is loaded or probed (no torch): one row per SPEC, its availability (a
package lookup) and description. With ``--probe`` every available built-in is loaded and each kernel
probed (:func:`core.capabilities.discover`): one row per kernel with its kind, weight convention,
declared backward precision, device, dtypes and backward, printed as soon as its built-in is probed (plain
columns of widths known in advance). ``--device cuda:N|cpu`` probes on that device only (core.device_option).

On a terminal the rows are a table; otherwise (a pipe, a CI log) plain columns aligned with spaces,
one row per line and never wrapped, so ``normverify list | grep liger`` works; ``--json`` prints the
rows as a JSON list.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator

from core import device_option
from core.errors import UsageError, one_line
from core.kernel import KINDS, Builtin, Kernel
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
    parser.add_argument("--device", metavar="cuda:N|cpu",
                        help="probe on this device only (default: CUDA where a kernel runs there)")


def _kernel_row(spec: str, builtin: Builtin, kernel: Kernel) -> dict:
    from core.capabilities import discover

    caps = discover(kernel).as_json()
    norm = kernel.record.is_norm
    return {"spec": spec, "available": True, "reason": None, "kernel": kernel.name, "kind": kernel.kind,
            "weight": ("w" if kernel.weight_offset == 0 else f"{kernel.weight_offset:g} + w") if norm else "-",
            "backward_in": ("storage dtype" if kernel.backward_precision == "storage" else "fp32") if norm else "-",
            "conventions": ",".join(kernel.conventions) or "-",
            "device": caps["device"], "dtypes": ",".join(caps["dtypes"]),
            "backward": "yes" if caps["backward"] else "no", "capabilities": caps,
            "description": kernel.description or builtin.description}


def rows(table: dict[str, Builtin], probe: bool = False, only_available: bool = False) -> list[dict]:
    """One row per built-in SPEC (``probe``: per kernel of each available one), sorted by SPEC."""
    return [row for rows_of_one in each_builtin(table, probe, only_available) for row in rows_of_one]


def each_builtin(table: dict[str, Builtin], probe: bool = False, only_available: bool = False) -> Iterator[list[dict]]:
    """The rows of each built-in SPEC in turn (sorted by SPEC), each as soon as it is loaded and probed."""
    for name, builtin in sorted(table.items()):
        reason = builtin.unavailable()
        if reason is None and probe:
            try:
                kernels = builtin.load()
            except (UsageError, ImportError, RuntimeError) as error:
                reason = f"loading failed: {one_line(error)}"
            else:
                yield [_kernel_row(name, builtin, kernel) for kernel in kernels]
                continue
        if reason is None or not only_available:
            yield [{"spec": name, "available": reason is None, "reason": reason,
                    "here": "yes" if reason is None else f"no: {reason}", "description": builtin.description}]


def plain(found: list[dict], columns: tuple[tuple[str, str], ...], widths: list[int] | None = None,
          header: bool = True) -> str:
    """Rows as lines of space-aligned columns (the last one unpadded), headers first; '-' where a row has no value.
    ``widths``: the columns' widths (default: the widest cell of each; a longer cell pushes the rest of its line)."""
    lines = [[title for _, title in columns]] if header else []
    lines += [[str(row.get(key, "-")) for key, _ in columns[:-1]] + [_last(row, columns)] for row in found]
    widths = widths or [max(len(line[i]) for line in lines) for i in range(len(columns) - 1)]
    return "\n".join("  ".join([*(cell.ljust(w) for cell, w in zip(line[:-1], widths, strict=True)), line[-1]]).rstrip()
                     for line in lines)


def probed_widths(table: dict[str, Builtin]) -> list[int]:
    """Widths of the probed columns known before any built-in is loaded (rows are printed as they are probed): SPECs,
    kernel names SPEC:kind, kinds, declarations, devices and dtypes as they are written."""
    spec, kind = max(map(len, table), default=4), max(map(len, KINDS))
    known = {"spec": spec, "kernel": spec + 1 + kind, "kind": kind, "weight": 7, "backward_in": len("storage dtype"),
             "conventions": len("storage_statistics_backward"), "device": len("cuda:0"),
             "dtypes": len("float32,float16,bfloat16"), "backward": 3}
    return [max(len(title), known[key]) for key, title in PROBED_COLUMNS[:-1]]


def _last(row: dict, columns: tuple[tuple[str, str], ...]) -> str:
    """The description, or why the built-in cannot run here when the columns have no HERE."""
    if row.get("reason") and "here" not in dict(columns):
        return f"unavailable: {row['reason']}"
    return str(row.get("description", ""))


def run(args: argparse.Namespace) -> int:
    device_option.select(args.device)
    table = builtins()
    if args.probe and not args.json:
        _print_as_probed(table, args.available)
        return 0
    found = rows(table, probe=args.probe, only_available=args.available)
    columns = PROBED_COLUMNS if args.probe else COLUMNS
    if args.json:
        print(json.dumps(found, indent=1))
    elif sys.stdout.isatty():
        _print_table(found, columns)
    else:
        print(plain(found, columns))
    return 0


def _print_as_probed(table: dict[str, Builtin], only_available: bool) -> None:
    """The probed rows in plain aligned columns, each built-in's printed as soon as it is probed (loading and probing
    every built-in takes a while on a GPU: JIT compiles, autotuning)."""
    widths = probed_widths(table)
    print(plain([], PROBED_COLUMNS, widths), flush=True)
    for found in each_builtin(table, probe=True, only_available=only_available):
        if found:
            print(plain(found, PROBED_COLUMNS, widths, header=False), flush=True)


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
