"""Warps per row program of our LayerNorm/RMSNorm kernels, measured (issue 30, item 3): the data behind the launch
rule of kernels.rows.launch_config, on one CUDA GPU.

    python3 scripts/launch_sweep.py OUT.csv [--widths 1024,2048,4096,8192] [--warps 1,2,4,8,16] [--rows 4096,16384]
                                            [--kinds layernorm,rmsnorm,add+layernorm,add+rmsnorm]
                                            [--modes forward,forward+backward] [--blocks 8192,16384]
                                            [--backward-blocks 8192,16384]

For every kind (default layernorm, rmsnorm), mode (default forward), dtype, row count n and width d: our device time
with each number of warps for every row program (the forward's; with the backward, its row kernel's too)
(kernels.bench.measure, a CUDA graph of the call replayed; its error against torch in float32 checked), beside
torch's and Liger-Kernel's (when installed). One CSV row per measurement (kernels.bench.Measurement's fields, the
provider ``ours-wN`` for N warps; ``ours-bB-wN`` with the forward's column block B, ``ours-bwdB-wN`` with the
backward's cap B, kernels.rows.RMS_/LAYERNORM_BACKWARD_MAX_BLOCK), and a summary per case: the rule's warps, the
fastest warps, and ours over the best other at both. The kernels are compiled first in parallel processes (Triton
compiles one at a time per process). Without CUDA, ``--dry-run`` runs it on the CPU through the interpreter
(numbers meaningless).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch

from kernels import bench, fused_norm, norm, rows

KINDS = ("layernorm", "rmsnorm")


def _ours(kind: str, warps: int, block: int | None = None, backward_block: int | None = None):
    """Our kernels with every row program launched with ``warps`` warps (kernels.rows.num_warps replaced); with
    ``block``, the forward's column block too: the forward kernel called directly (kernels.norm.forward,
    kernels.fused_norm.forward; no autograd), so forward only; with ``backward_block``, the backward's cap
    (kernels.rows.RMS_BACKWARD_MAX_BLOCK and LAYERNORM_BACKWARD_MAX_BLOCK replaced, the launch configurations
    recomputed)."""
    if block is None:
        ours = bench.providers(kind)["ours"]
    else:
        rms = kind.endswith("rmsnorm")
        eps = 1e-6 if rms else 1e-5  # the benchmark's (kernels.bench.providers)
        if kind.startswith("add+"):
            def ours(x, r, w, b):
                return fused_norm.forward(x, r, w, None if rms else b, eps, rms=rms, residual_dtype=r.dtype,
                                          block=block)[:2]
        else:
            def ours(x, r, w, b):
                return norm.forward(x, w, None if rms else b, eps, rms=rms, block=block)[0]

    def call(x, r, w, b):
        rules, caps = (rows.num_warps, rows.backward_num_warps), (rows.RMS_BACKWARD_MAX_BLOCK,
                                                                  rows.LAYERNORM_BACKWARD_MAX_BLOCK)
        rows.num_warps = rows.backward_num_warps = lambda block, element_size: warps
        if backward_block is not None:
            _set_backward_caps(backward_block, backward_block)
        try:
            return ours(x, r, w, b)
        finally:
            rows.num_warps, rows.backward_num_warps = rules
            if backward_block is not None:
                _set_backward_caps(*caps)
    return call


def _set_backward_caps(rms: int, layernorm: int) -> None:
    rows.RMS_BACKWARD_MAX_BLOCK, rows.LAYERNORM_BACKWARD_MAX_BLOCK = rms, layernorm
    rows.launch_config.cache_clear()
    rows._configs.clear()


def _variants(warps: tuple[int, ...], blocks: tuple[int, ...], backward_blocks: tuple[int, ...] = ()
              ) -> list[tuple[str, int, int | None, int | None]]:
    """(provider name, warps, block, backward cap) of each of our launch configurations measured: ``ours-wW`` with
    the rule's blocks, ``ours-bB-wW`` for each given forward block, ``ours-bwdB-wW`` for each given backward cap."""
    if blocks:
        return [(f"ours-b{b}-w{w}", w, b, None) for b in blocks for w in warps]
    if backward_blocks:
        return [(f"ours-bwd{b}-w{w}", w, None, b) for b in backward_blocks for w in warps]
    return [(f"ours-w{w}", w, None, None) for w in warps]


def _compile(kind: str, dtype_name: str, widths: tuple[int, ...], warps: tuple[int, ...], blocks: tuple[int, ...],
             backward_blocks: tuple[int, ...], modes: tuple[str, ...], device: str) -> int:
    variants = _variants(warps, blocks, backward_blocks)
    for d in widths:
        for _, w, b, bb in variants:
            for mode in modes:
                bench._Case.drawn(_ours(kind, w, b, bb), mode, 64, d, bench.DTYPES[dtype_name], device).step()
    return len(widths) * len(variants) * len(modes)


def _case(kind: str, mode: str, dtype_name: str, n: int, d: int, others: dict, warps: tuple[int, ...],
          blocks: tuple[int, ...], backward_blocks: tuple[int, ...], device: str, results: list) -> str:
    """Measure one case, every provider and launch configuration (appended to ``results``); its summary line."""
    moved = bench.bytes_moved(kind, mode, n, d, bench.DTYPES[dtype_name])
    copy_bw = bench.copy_gb_per_s(moved, device)
    case = {name: bench.measure(kind, mode, dtype_name, n, d, name, fn, device, copy_bw, 20)
            for name, fn in others.items()}
    mine = {}
    for name, w, b, bb in _variants(warps, blocks, backward_blocks):
        case[name] = bench.measure(kind, mode, dtype_name, n, d, name, _ours(kind, w, b, bb), device, copy_bw, 20)
        mine[name] = case[name].device_us
    results.extend(case.values())
    best_other = min(case[name].device_us for name in others)
    fastest = min(mine, key=mine.get)
    element_size = bench.DTYPES[dtype_name].itemsize
    if blocks:
        block = rows.block_size(d, rows.FORWARD_MAX_BLOCK)
        rule = f"ours-b{block}-w{rows.num_warps(block, element_size)}"
    elif backward_blocks:
        cap = rows.RMS_BACKWARD_MAX_BLOCK if kind.endswith("rmsnorm") else rows.LAYERNORM_BACKWARD_MAX_BLOCK
        block = rows.block_size(d, cap)
        rule = f"ours-bwd{cap}-w{rows.backward_num_warps(block, element_size)}"
    else:
        rule = f"ours-w{rows.num_warps(rows.block_size(d), element_size)}"
    return (f"{kind:<13} {mode:<16} {dtype_name:<8} n={n:<5} d={d:<5} the rule ({rule}): "
            f"{best_other / mine.get(rule, float('nan')):5.0%} of best; fastest {fastest}: "
            f"{best_other / mine[fastest]:5.0%} ({mine[fastest]:.1f} us, best other {best_other:.1f} us)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("csv", type=Path)
    parser.add_argument("--widths", default="1024,2048,4096,8192")
    parser.add_argument("--warps", default="1,2,4,8,16")
    parser.add_argument("--rows", default="4096,16384")
    parser.add_argument("--dtypes", default="float16,bfloat16,float32")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--modes", default="forward")
    parser.add_argument("--blocks", default="",
                        help="column blocks of the forward to measure beside the warps (forward only; default: the "
                             "rule's, e.g. 8192,16384 to see one read of a 16384-wide row against two)")
    parser.add_argument("--backward-blocks", default="",
                        help="caps of the backward's column block to measure beside the warps (forward+backward "
                             "only), e.g. 8192,16384 to see one read of a 16384-wide row against two")
    parser.add_argument("--dry-run", action="store_true", help="on the CPU, through the interpreter")
    args = parser.parse_args()
    kinds, modes = tuple(args.kinds.split(",")), tuple(args.modes.split(","))
    blocks = tuple(int(b) for b in args.blocks.split(",") if b)
    backward_blocks = tuple(int(b) for b in args.backward_blocks.split(",") if b)
    if blocks and modes != ("forward",):
        parser.error("--blocks measures the forward only: --modes forward")
    if backward_blocks and (blocks or modes != ("forward+backward",)):
        parser.error("--backward-blocks measures the backward: --modes forward+backward, without --blocks")
    for given, known, what in ((kinds, bench.KINDS, "--kinds"), (modes, bench.MODES, "--modes")):
        if set(given) - set(known):
            parser.error(f"{what}: unknown {', '.join(sorted(set(given) - set(known)))}; known: {', '.join(known)}")
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("launch_sweep: no CUDA GPU here; --dry-run runs it on the CPU")
        return 2
    widths = tuple(int(w) for w in args.widths.split(","))
    warps = tuple(int(w) for w in args.warps.split(","))
    row_counts = tuple(int(n) for n in args.rows.split(","))
    dtypes = tuple(args.dtypes.split(","))
    if device == "cuda":
        with ProcessPoolExecutor(max_workers=min(len(kinds) * len(dtypes), 12),
                                 mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = [pool.submit(_compile, k, t, widths, warps, blocks, backward_blocks, modes, device)
                       for k in kinds for t in dtypes]
            for future in futures:
                future.result()
    results, summary = [], []
    for kind in kinds:
        others = {name: fn for name, fn in bench.providers(kind).items() if name != "ours"}
        for mode in modes:
            for dtype_name in dtypes:
                for n in row_counts:
                    for d in widths:
                        summary.append(_case(kind, mode, dtype_name, n, d, others, warps, blocks, backward_blocks,
                                             device, results))
                        print(summary[-1], flush=True)
    with args.csv.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([field.name for field in dataclasses.fields(bench.Measurement)])
        writer.writerows(dataclasses.astuple(r) for r in results)
    args.csv.with_suffix(".txt").write_text("\n".join(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
