"""How tight is the forward tolerance? error/bound of the built-in correct kernels, by width, dtype and |mean|/std.

For each built-in LayerNorm/RMSNorm kernel (torch, our Triton kernel: interpreted on CPU) and each cell
(d, dtype, |mean|/std), rows are drawn from the conformance suite's own row distributions
(properties.draws.strategies.DISTRIBUTIONS: normal, uniform, sparse, integers, spike; structured ones included),
shifted to the cell's |mean|/std and rounded to the dtype; each row's ratio is max_i |y_i - oracle_i| / B_i
with B the forward bound (properties.bounds.tolerance.forward) evaluated on groups of 4 rows as the suite does.
Prints max and median of the per-row ratios for both bounds (``probabilistic``, the default, and
``worst-case``) as a Markdown table; a ratio above 1 for a correct kernel would be a false alarm.

    .venv/bin/python scripts/tightness.py                      # the table of docs/tightness.md (~10 min)
    .venv/bin/python scripts/tightness.py --rows 64 --widths 8 64 --kernels torch
    .venv/bin/python scripts/tightness.py --rows 48 --widths 64 512 1024 8192 --ratios reach   # 16-bit one ulp apart

Not a test: it measures, it does not assert (tests/test_tightness.py pins the floor and the ceiling).
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np
import torch

from core import trees
from core.capabilities import discover
from core.registry import resolve
from kernels import interpret
from proofs import error_model
from properties.draws.strategies import (
    MAX_ELEMENTS,
    ONE_ULP_MAX_OFFSET_RATIO,
    resolved_offset_ratio,
    valid_offset_ratio,
)
from properties.run.tightness import GROUP, row_ratios, suite_rows

WIDTHS = (8, 64, 512, 4096, 8192, 65536)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# Rows per cell at least: the suite's five distributions eight times each (two of five structured, their sums
# nearly exact), so that a cell's median is not that of 4 rows (the 64k-element budget alone gives 4 at d = 65536).
MIN_ROWS = 40
MEAN_OVER_STD = (0.0, 10.0, 1e3)


def measure(kernels, widths, rows: int, eps: float = 1e-5, ratios=MEAN_OVER_STD) -> list[dict]:
    """``ratios``: |mean|/std of the cells, "reach" for the largest the strategies draw at (d, dtype)
    (strategies.valid_offset_ratio; in 16-bit storage, of rows one ulp apart)."""
    found = []
    for kernel, d, (name, dtype), cell in itertools.product(kernels, widths, DTYPES.items(), ratios):
        if dtype not in discover(kernel).dtypes:
            continue
        # "reach" in 16-bit storage: rows one ulp apart up to their range (ln/rms.forward's one-ulp test)
        one_ulp_apart = cell == "reach" and resolved_offset_ratio(dtype) < ONE_ULP_MAX_OFFSET_RATIO
        ratio = valid_offset_ratio(d, dtype, one_ulp_apart=one_ulp_apart) if cell == "reach" else float(cell)
        n = max(GROUP, min(rows, max(MIN_ROWS, 4 * MAX_ELEMENTS // d)))
        x = suite_rows(d, ratio, dtype, n, seed=d, one_ulp_apart=one_ulp_apart)
        row = {"kernel": kernel.name, "d": d, "dtype": name, "ratio": ratio, "rows": n}
        for model in error_model.BOUNDS:
            values = row_ratios(kernel, x, eps, model)
            finite = values[~np.isnan(values)]
            row[model] = ((float(np.max(finite)), float(np.median(finite))) if finite.size else (np.nan, np.nan)) + (
                int(values.size - finite.size),)
        found.append(row)
        print(_line(row), flush=True)
    return found


def _line(row: dict) -> str:
    cells = [f"{row[m][0]:.3g} / {row[m][1]:.3g}" + (f" ({row[m][2]} rows: no finite bound)" if row[m][2] else "")
             for m in ("worst-case", "probabilistic")]
    head = f"| {row['kernel']} | {row['d']} | {row['dtype']} | {row['ratio']:g} | {row['rows']} | "
    return head + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", nargs="+", default=["torch", "triton"], help="registry specs (default: built-ins)")
    parser.add_argument("--widths", nargs="+", type=int, default=list(WIDTHS))
    parser.add_argument("--rows", type=int, default=200,
                        help="rows per cell (fewer at large d: 64k elements, but at least MIN_ROWS)")
    parser.add_argument("--ratios", nargs="+", default=list(MEAN_OVER_STD),
                        help='|mean|/std of the cells; "reach": the largest the suite draws at each (d, dtype)')
    args = parser.parse_args(argv)
    interpret.enable()
    kernels = [k for spec in args.kernels for k in resolve(spec) if k.kind in ("layernorm", "rmsnorm")]
    print(f"CPU capability {torch.backends.cpu.get_cpu_capability()} (ATEN_CPU_CAPABILITY forces another), "
          f"torch {torch.__version__}")
    for kernel in kernels:
        if trees.applies(kernel.reduction, torch.device("cpu")) and kernel.reduction.exact_tree:
            print(f"- {trees.check(kernel, torch.device('cpu'), torch.float32).line()}")
    print()
    print("| kernel | d | dtype | abs(mean)/std | rows | worst case: max / median | probabilistic: max / median |")
    print("|---|---|---|---|---|---|---|")
    start = time.monotonic()
    found = measure(kernels, args.widths, args.rows, ratios=args.ratios)
    worst = max((r["probabilistic"][0] for r in found if not np.isnan(r["probabilistic"][0])), default=0.0)
    print(f"\n{len(found)} cells in {time.monotonic() - start:.0f} s; largest probabilistic ratio {worst:.3g}")
    return 0 if worst <= 1 else 1


if __name__ == "__main__":
    raise SystemExit(main())
