"""`normverify bench`: GB/s of our Triton LayerNorm/RMSNorm vs torch (and Liger-Kernel) on a CUDA GPU."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.console import Console
from rich.table import Table

from core.errors import UsageError

NAME = "bench"
HELP = "GPU benchmark: forward and forward+backward GB/s of ours vs torch (and Liger), table + CSV"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", choices=["layernorm", "rmsnorm"], action="append", default=None,
                        help="kernel kind (repeatable; default both)")
    parser.add_argument("--dtype", choices=["float16", "bfloat16", "float32"], action="append", default=None,
                        help="storage dtype (repeatable; default all three)")
    parser.add_argument("--width", type=int, action="append", default=None, metavar="D",
                        help="row width d (repeatable; default 512 ... 65536, powers of two)")
    parser.add_argument("--rows", type=int, default=4096, help="rows (default 4096)")
    parser.add_argument("--csv", type=Path, default=Path("reports/bench.csv"), metavar="PATH",
                        help="where to save the measurements (default reports/bench.csv)")


def _table(results, ratios) -> Table:
    table = Table(title="GB/s (median of triton.testing.do_bench); ours / best of the others")
    for column in ("kind", "mode", "dtype", "d", "ours", "torch", "liger", "ours/best"):
        table.add_column(column, justify="right" if column not in ("kind", "mode", "dtype") else "left")
    cases: dict[tuple, dict] = {}
    for r in results:
        cases.setdefault((r.kind, r.mode, r.dtype, r.d), {})[r.provider] = r
    for case, speeds in cases.items():
        ratio = ratios.get(case)
        cells = ["-" if p not in speeds else "error" if speeds[p].error else f"{speeds[p].gb_per_s:.0f}"
                 for p in ("ours", "torch", "liger")]
        table.add_row(*case[:3], str(case[3]), *cells, "-" if ratio is None else f"{ratio:.0%}")
    return table


def run(args: argparse.Namespace) -> int:
    console = Console()
    import torch

    if not torch.cuda.is_available():
        console.print("normverify bench: no CUDA device here, nothing measured (the benchmark needs a GPU; "
                      "the CPU interpreter's timings say nothing about one)")
        return 0
    if args.rows < 1 or any(d < 1 for d in args.width or []):
        raise UsageError("--rows and --width must be positive")
    from kernels import bench

    results = bench.run(kinds=args.kind or bench.KINDS, dtypes=args.dtype or bench.DTYPES,
                        widths=args.width or bench.WIDTHS, rows=args.rows,
                        on_result=lambda r: console.print(f"  {r.kind} {r.mode} {r.dtype} d={r.d} {r.provider}: "
                                                          f"{r.error or f'{r.gb_per_s:.0f} GB/s'}", highlight=False))
    console.print(_table(results, bench.ours_vs_best(results)))
    bench.write_csv(results, args.csv)
    console.print(f"saved {args.csv}")
    return 0
