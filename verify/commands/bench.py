"""`normverify bench`: our Triton LayerNorm/RMSNorm (and fused add+norm) vs torch and Liger-Kernel, device time
apart from host time, GB/s and the fraction of the device's copy bandwidth (kernels/bench.py)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console

from core.errors import UsageError

NAME = "bench"
HELP = ("benchmark: device time (CUDA graphs) and host+device time of ours vs torch (and Liger), GB/s, copy-roofline "
        "fraction, max error; table + CSV")
KIND_CHOICES = ["layernorm", "rmsnorm", "add+layernorm", "add+rmsnorm"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kind", choices=KIND_CHOICES, action="append", default=None,
                        help="kernel kind (repeatable; default all four)")
    parser.add_argument("--dtype", choices=["float16", "bfloat16", "float32"], action="append", default=None,
                        help="storage dtype (repeatable; default all three)")
    parser.add_argument("--width", type=int, action="append", default=None, metavar="D",
                        help="row width d (repeatable; default 1024 4096 16384 65536)")
    parser.add_argument("--rows", type=int, action="append", default=None, metavar="N",
                        help="rows (repeatable; default 4096 and 16384)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: through Triton's interpreter, tiny sizes only (--rows and --width required): "
                             "checks the benchmark itself, its times say nothing about a GPU")
    parser.add_argument("--compile-workers", type=int, default=12, metavar="K",
                        help="on CUDA, first compile every kernel in K processes at once (default 12; 1: no warm-up)")
    parser.add_argument("--progress", action="store_true", help="print each measurement as it is made")
    parser.add_argument("--csv", type=Path, default=Path("reports/bench.csv"), metavar="PATH",
                        help="where to save the measurements (default reports/bench.csv)")


def _cell(value: float, spec: str) -> str:
    return "-" if value != value else format(value, spec)  # NaN: not measured


PROVIDERS = ("ours", "torch", "liger")
HEADER = (f"{'kind':<13} {'mode':<8} {'dtype':<8} {'rows':>5} {'d':>5} | "
          + " | ".join(f"{p + ' dev':>10} {'wall':>8}" for p in PROVIDERS)
          + f" | {'ours GB/s':>9} {'roofline':>8} {'ours/best':>9} {'ours err':>9}")


def table_lines(results, ratios, limits) -> list[str]:
    """One line per case: each provider's device and wall us; our GB/s, copy-roofline fraction, ours/best, error."""
    cases: dict[tuple, dict] = {}
    for r in results:
        cases.setdefault((r.kind, r.mode, r.dtype, r.rows, r.d), {})[r.provider] = r
    lines = [HEADER]
    for case, by_provider in cases.items():
        kind, mode, dtype, n, d = case
        cells = []
        for provider in PROVIDERS:
            r = by_provider.get(provider)
            if r is None or r.error:
                cells.append(f"{'-' if r is None else 'error':>10} {'':>8}")
            else:
                cells.append(f"{_cell(r.device_us, '.1f'):>10} {_cell(r.wall_us, '.1f'):>8}")
        ours = by_provider.get("ours")
        ratio = ratios.get(case)
        if ours is None or ours.error:
            tail = f"{'-':>9} {'-':>8} {'-':>9} {'-':>9}"
        else:
            flag = "!" if ours.max_rel_err > limits[dtype] else " "
            tail = (f"{_cell(ours.gb_per_s, '.0f'):>9} {_cell(ours.roofline, '.0%'):>8} "
                    f"{'-' if ratio is None else format(ratio, '.0%'):>9} {_cell(ours.max_rel_err, '.1e'):>8}{flag}")
        lines.append(f"{kind:<13} {'fwd' if mode == 'forward' else 'fwd+bwd':<8} {dtype:<8} {n:>5} {d:>5} | "
                     + " | ".join(cells) + " | " + tail)
    return lines


def summary_lines(results, ratios) -> list[str]:
    """Per (kind, mode, dtype): the worst ours/best and the worst roofline fraction at d >= 4096 (issue 30's targets:
    >= 90% and >= 80%), with where they are: the table's verdict in a few lines."""
    lines = ["summary (worst case of each; targets: ours/best >= 90%, roofline >= 80% at d >= 4096):"]
    groups: dict[tuple, list] = {}
    for r in results:
        if r.provider == "ours" and not r.error:
            groups.setdefault((r.kind, r.mode, r.dtype), []).append(r)
    for (kind, mode, dtype), ours in groups.items():
        rated = [(ratios[key], key) for r in ours if (key := (r.kind, r.mode, r.dtype, r.rows, r.d)) in ratios]
        wide = [r for r in ours if r.d >= 4096]
        parts = []
        if rated:
            ratio, key = min(rated)
            parts.append(f"ours/best {ratio:.0%} (n={key[3]}, d={key[4]})")
        if wide:
            worst = min(wide, key=lambda r: r.roofline)
            parts.append(f"roofline {worst.roofline:.0%} (n={worst.rows}, d={worst.d})")
        lines.append(f"  {kind:<13} {mode:<16} {dtype:<8}: " + ", ".join(parts or ["-"]))
    return lines


LEGEND = ("dev: device us per call (CUDA graph replay, median; host excluded); wall: host + device us per call (plain "
          "loop); GB/s: bytes a norm must move / device time; roofline: GB/s / the device's copy GB/s for the same "
          "bytes; ours/best: our GB/s / the best other's; err: max |ours - torch fp32| / max |torch fp32| over y, dx, "
          "dweight (! = over the dtype's limit: wrong)")


def run(args: argparse.Namespace) -> int:
    console = Console()
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        console.print("normverify bench: no CUDA device here, nothing measured (the benchmark needs a GPU; "
                      "--device cpu with tiny --rows/--width checks the benchmark itself through the interpreter)")
        return 0
    if any(n < 1 for n in args.rows or []) or any(d < 1 for d in args.width or []):
        raise UsageError("--rows and --width must be positive")
    if args.device == "cpu" and not (args.rows and args.width):
        raise UsageError("--device cpu runs Triton's interpreter: give tiny --rows and --width (e.g. --rows 8 "
                         "--width 64)")
    from kernels import bench

    widths = args.width or bench.WIDTHS
    device = torch.device(args.device, torch.cuda.current_device()) if args.device == "cuda" else torch.device("cpu")
    name = torch.cuda.get_device_name(device) if args.device == "cuda" else "CPU (Triton interpreter)"
    kinds, dtypes = args.kind or bench.KINDS, args.dtype or bench.DTYPES
    print(f"device: {name}; our launch configuration per width and dtype (kernels.rows.launch_config):")
    for d, dtype, config in bench.launch_configs(widths, dtypes, device):
        print(f"  d={d} {dtype}: {config}")
    started = time.perf_counter()
    if args.device == "cuda" and args.compile_workers > 1:
        failures = bench.warm_up(kinds, dtypes, widths, args.device, args.compile_workers)
        print(f"kernels compiled in {args.compile_workers} processes: {time.perf_counter() - started:.0f} s"
              + "".join(f"\n  warm-up failed (compiled during the run instead): {f}" for f in failures), flush=True)
    progress = (lambda r: print(f"  {r.kind} {r.mode} {r.dtype} n={r.rows} d={r.d} {r.provider}: "
                                f"{r.error or f'{r.device_us:.1f} us device, {r.wall_us:.1f} us wall'}",
                                flush=True)) if args.progress else None
    results = bench.run(kinds=kinds, dtypes=dtypes, widths=widths,
                        rows=args.rows or bench.ROWS, device=args.device, on_result=progress)
    limits = {name: bench.ERROR_LIMIT[dtype] for name, dtype in bench.DTYPES.items()}
    for line in table_lines(results, bench.ours_vs_best(results), limits):
        print(line)
    errors = [r for r in results if r.error]
    for r in errors:
        print(f"error: {r.kind} {r.mode} {r.dtype} n={r.rows} d={r.d} {r.provider}: {r.error}")
    print(LEGEND)
    for line in summary_lines(results, bench.ours_vs_best(results)):
        print(line)
    bench.write_csv(results, args.csv)
    console.print(f"saved {args.csv} ({time.perf_counter() - started:.0f} s)")
    wrong = [r for r in results if not r.error and r.max_rel_err > limits[r.dtype]]
    if wrong:
        console.print(f"{len(wrong)} case(s) with max_rel_err over the limit: a kernel is wrong there")
        return 1
    return 0
