"""The one-call GPU check (issue 25, item 6; docs/../shared notes: one command, one deadline, one archive).

On a machine with a CUDA GPU, in one command well inside 10 minutes:
  1. set-up: wheels from a git-ignored .whl/ folder and, when normverify is not importable with its pytest plugin's
     entry point, the project itself, into /tmp/site (--no-index --no-deps; PYTHONPATH for every step);
  2. the conformance suite (--profile ci) on every built-in that can run here, in two runs of WORKERS
     pytest-xdist workers one after the other: first every built-in but those that compile per width (--last:
     flash-attention, FlagGems, torch.compile; 13-132 s a test on an H100, where the others take 0.1-8 s: in one
     run they held the workers while ours waited), beside the tests in tests/ marked ``cuda``; then the --last
     built-ins with the time left. Every step has its own timeout and all share one deadline; a run cut off keeps
     the results it wrote (the Results JSON is written after every test) and the summary names the built-ins it
     did not reach; the first run also takes the corpus's correct plain-torch kernels (tests/corpus: float64
     statistics, Chan-merged chunks, float32 residuals, seeded dropout ...), which must pass on CUDA too;
  3. ``normverify bench`` alone, after them;
  4. one summary (per kernel and claim: verdict, worst ratio, time; harness errors counted) written to OUT/summary.txt,
     the results JSON and the logs packed into OUT/gpu-check.tar.gz: two files come back.

Without CUDA it says so in one line and exits 2; ``--dry-run`` runs the same plumbing on the CPU with tiny runs.

    python3 scripts/gpu_check.py [OUT] [--dry-run] [--deadline SECONDS] [--only GLOBS] [--skip GLOBS] [--last GLOBS]
                                                                             (OUT defaults to $OUT, else gpu-check)
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE = Path("/tmp/site")
#: this interpreter by an absolute path: the steps run with cwd="/" or ROOT, where a relative sys.executable (python
#: found through a relative PATH entry) would name nothing
PYTHON = os.path.abspath(sys.executable)
WORKERS = 13  # pytest-xdist workers of the conformance run: 13 + the cuda tests' 2 on 16 cores
POLL_S = 0.5
BENCH_S = 90  # kept for the benchmark after the conformance runs (default of --bench-seconds)
PACK_S = 20  # kept for the summary and the archive
DRY_RUN_KERNELS = ("torch", "triton")
#: built-ins whose tests compile per drawn width (autotuning, Inductor): their own run, after the others'
LAST = "flash-attn-*,flaggems-*,torch-compile"
DRY_RUN_CLAIMS = "ln.forward,rms.forward,dropout.keep_rate"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default=os.environ.get("OUT") or "gpu-check", type=Path)
    parser.add_argument("--dry-run", "--allow-cpu", dest="dry_run", action="store_true",
                        help="run the plumbing on the CPU: two built-ins, three claims, one worker, no CUDA needed")
    parser.add_argument("--deadline", type=float, default=500.0, help="seconds for everything (default 500)")
    parser.add_argument("--bench-seconds", type=float, default=BENCH_S,
                        help=f"seconds kept for the benchmark after the conformance runs (default {BENCH_S}; 0: no "
                             "benchmark)")
    parser.add_argument("--only", default="", metavar="GLOBS",
                        help="only the built-ins (and corpus kernels, by path) matching these comma-separated "
                             "globs (e.g. 'flash-attn-*,flaggems-*' for a call of their own)")
    parser.add_argument("--skip", default="", metavar="GLOBS",
                        help="leave out the built-ins matching these comma-separated globs (e.g. 'flash-attn-*')")
    parser.add_argument("--last", default=LAST, metavar="GLOBS",
                        help=f"built-ins run in a second conformance run after the others' (default {LAST!r}; '' "
                             "for one run of all)")
    parser.add_argument("--no-shrink", dest="shrink", action="store_false",
                        help="failures reported with the examples that failed, not minimized (normverify run "
                             "--no-shrink): no device time spent shrinking, nor compiling the widths a shrink draws")
    parser.add_argument("--no-corpus", dest="corpus", action="store_false",
                        help="leave out the corpus's correct kernels (run in the first conformance run by default)")
    parser.add_argument("--bench-args", default="",
                        help="arguments of `normverify bench` (default: its full table), e.g. '--rows 16384' to fit "
                             "what is left of a machine's time")
    return parser.parse_args(argv)


def has_cuda() -> bool:
    probe = subprocess.run([PYTHON, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True, timeout=120, env=environment())
    return probe.stdout.strip() == "True"


def environment() -> dict[str, str]:
    """The steps' environment: the wheels' site and tests/ (the corpus's kernels import ``corpus``) on PYTHONPATH."""
    paths = [*([str(SITE)] if SITE.is_dir() else []), str(ROOT / "tests")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]).strip(os.pathsep),
            # autotuning results on disk, shared by the workers and runs (Triton's knobs.autotuning.cache)
            "TRITON_CACHE_AUTOTUNING": "1"}


def plugin_importable() -> bool:
    code = ("import importlib.metadata as m, verify, properties; "
            "raise SystemExit(0 if any(e.value.startswith('properties') for e in m.entry_points(group='pytest11')) "
            "else 1)")
    return subprocess.run([PYTHON, "-c", code], capture_output=True, env=environment(), cwd="/").returncode == 0


def set_up(log: Path) -> None:
    """Wheels from .whl/ and, where needed, the project itself into /tmp/site (no network: --no-index)."""
    pip = [PYTHON, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(SITE)]
    with log.open("a") as out:
        wheels = sorted(str(w) for w in (ROOT / ".whl").glob("*.whl"))
        if wheels:
            subprocess.run([*pip, *wheels], stdout=out, stderr=subprocess.STDOUT, timeout=180)
        if not plugin_importable():
            subprocess.run([*pip, "--no-build-isolation", str(ROOT)], stdout=out, stderr=subprocess.STDOUT,
                           timeout=180, cwd=ROOT)


def available_builtins() -> list[str]:
    code = ("from core.registry import builtins; "
            "print('\\n'.join(n for n, b in builtins().items() if not b.unavailable()))")
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=environment())
    return proc.stdout.split()


def matches(kernel: str, globs: str) -> bool:
    """``kernel`` matches one of the comma-separated globs (none when ``globs`` is empty)."""
    return any(fnmatch.fnmatchcase(kernel, glob.strip()) for glob in globs.split(",") if glob.strip())


def correct_corpus() -> list[str]:
    """The specs of the corpus's correct kernels that are not built-ins (tests/corpus/__init__.py)."""
    code = "from corpus import CORPUS; print('\\n'.join(e.spec for e in CORPUS if not e.expect and ':' in e.spec))"
    proc = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=environment())
    return proc.stdout.split()


def selected(kernels: list[str], only: str, skip: str) -> list[str]:
    """The built-ins matching a glob of ``only`` (all when empty) and none of ``skip``."""
    return [k for k in kernels if (not only or matches(k, only)) and not matches(k, skip)]


def conformance_runs(kernels: list[str], last: str) -> list[tuple[str, list[str]]]:
    """(step name, built-ins) of the conformance runs, in order: the built-ins not matching ``last``, then those
    that do; a run without built-ins is left out."""
    runs = [("conformance", [k for k in kernels if not matches(k, last)]),
            ("conformance, per-width compiling", [k for k in kernels if matches(k, last)])]
    return [(name, chosen) for name, chosen in runs if chosen]


def start(command: list[str], log: Path, timeout_s: float) -> subprocess.Popen:
    """``command`` under coreutils timeout (TERM, then KILL 10 s later), its output in ``log``."""
    limited = ["timeout", "-k", "10", str(max(1, int(timeout_s))), *command]
    with log.open("w") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        return subprocess.Popen(limited, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=environment())


def run_steps(steps: dict[str, tuple[list[str], Path]], until: float) -> dict[str, dict]:
    """Run the steps (name -> (command, log)) side by side, each limited to the deadline ``until``
    (time.monotonic()); each step's exit, seconds and whether it timed out."""
    running = {name: (start(command, log, until - time.monotonic()), time.monotonic())
               for name, (command, log) in steps.items()}
    done: dict[str, dict] = {}
    while running:
        for name, (process, started) in list(running.items()):
            if process.poll() is not None:
                done[name] = {"exit": process.returncode, "seconds": round(time.monotonic() - started, 1),
                              "timed_out": process.returncode in (124, 137)}
                del running[name]
        time.sleep(POLL_S)
    return done


def conformance_command(kernels: list[str], results: Path, dry_run: bool, shrink: bool = True) -> list[str]:
    command = [PYTHON, "-m", "verify", "run", "--profile", "ci", "--quiet", "--json", str(results),
               "-n", "1" if dry_run else str(WORKERS), *([] if shrink else ["--no-shrink"])]
    command += [argument for kernel in kernels for argument in ("--kernel", kernel)]
    return command + (["--claims", DRY_RUN_CLAIMS] if dry_run else [])


# worst first, as core.results.STATUSES (not imported: the summary reads the JSON without the suite)
STATUSES = ("error", "failed", "xpassed", "unchecked", "xfailed", "passed", "skipped")


def per_claim(results: list[dict]) -> dict[tuple[str, str], dict]:
    """The tests of each (kernel, claim) merged: the worst verdict, the largest ratio, the total time, the count and
    the first message of the worst verdict."""
    merged: dict[tuple[str, str], dict] = {}
    for result in results:
        entry = merged.setdefault((result.get("kernel", ""), result["claim"]),
                                  {"status": "skipped", "ratio": None, "seconds": 0.0, "tests": 0, "message": ""})
        entry["tests"] += 1
        entry["seconds"] += result.get("duration_s", 0.0)
        ratio = result.get("worst_ratio")
        if ratio is not None and (entry["ratio"] is None or ratio > entry["ratio"]):
            entry["ratio"] = ratio
        if STATUSES.index(result["status"]) < STATUSES.index(entry["status"]):
            entry["status"], entry["message"] = result["status"], result.get("message", "")
    return merged


def summary_lines(paths: list[Path], steps: dict[str, dict], mode: str, kernels: list[str]) -> list[str]:
    """Per results file: one line per kernel and claim (verdict, worst ratio, seconds, tests); then the built-ins
    no run reached, the steps and the totals."""
    lines = [f"normverify gpu-check ({mode}), {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}", ""]
    counts: dict[str, int] = {}
    run_errors = 0
    reached: set[str] = set()
    for path in paths:
        run_errors += _results_lines(path, lines, counts, reached)
    missing = [kernel for kernel in kernels if kernel not in reached]
    lines.append("kernels with no test reached: " + (", ".join(missing) or "none"))
    lines.append("")
    lines.append("steps: " + "; ".join(f"{name} exit {s['exit']} in {s['seconds']} s"
                                       + (" (timed out)" if s["timed_out"] else "") for name, s in steps.items()))
    harness = run_errors + counts.get("error", 0)
    lines.append("kernel x claim: " + (", ".join(f"{counts[s]} {s}" for s in STATUSES if s in counts) or "none")
                 + f"; harness errors: {harness} ({run_errors} run errors, {counts.get('error', 0)} claims in error)")
    return lines


def _results_lines(path: Path, lines: list[str], counts: dict[str, int], reached: set[str]) -> int:
    """The lines of one results file appended to ``lines``, its verdicts to ``counts``, its built-ins to
    ``reached``; returns its run errors (a file not written is one)."""
    run_errors = 0
    document = json.loads(path.read_text()) if path.exists() else None
    if document is None:
        lines += [f"{path.name}: no results written (see its log)", ""]
        run_errors += 1
    else:
        env = document.get("environment", {})
        lines.append(f"{path.name}: device {env.get('device')}, torch {env.get('torch')}, triton {env.get('triton')}, "
                     f"commit {env.get('commit')}, complete {document.get('complete')}")
        lines.append(f"  {'kernel':<32} {'claim':<30} {'verdict':<9} {'worst ratio':>11} {'seconds':>8} {'tests':>5}")
        for (kernel, claim), entry in sorted(per_claim(document.get("results", [])).items()):
            counts[entry["status"]] = counts.get(entry["status"], 0) + 1
            ratio = "-" if entry["ratio"] is None else f"{entry['ratio']:.3g}"
            lines.append(f"  {kernel:<32} {claim:<30} {entry['status']:<9} {ratio:>11} {entry['seconds']:>8.1f} "
                         f"{entry['tests']:>5}")
            if entry["status"] in ("error", "failed", "xpassed", "unchecked") and entry["message"]:
                lines.append(f"      {' '.join(entry['message'].split())[:300]}")
        for error in document.get("errors", []):
            run_errors += 1
            lines.append(f"  run error: {json.dumps(error)[:300]}")
        reached.update(result.get("spec") for result in document.get("results", []))
        lines.append("")
    return run_errors


def pack(out: Path, work: Path) -> Path:
    archive = out / "gpu-check.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(work, arcname="gpu-check")
    shutil.rmtree(work)
    return archive


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    began = time.monotonic()
    end = began + args.deadline

    out = args.out.resolve()
    work = out / "work"
    work.mkdir(parents=True, exist_ok=True)
    steps: dict[str, dict] = {}
    set_up(work / "setup.log")
    if not args.dry_run and not has_cuda():
        print("gpu-check: no CUDA GPU here (torch.cuda.is_available() is False); --dry-run checks the plumbing on "
              "the CPU")
        shutil.rmtree(work)
        return 2
    mode = "dry run on the CPU" if args.dry_run else "CUDA"
    candidates = list(DRY_RUN_KERNELS) if args.dry_run else available_builtins()
    if args.corpus and not args.dry_run:
        candidates += correct_corpus()
    kernels = selected(candidates, args.only, args.skip)
    tests = [PYTHON, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda", "tests",
             "-n", "1" if args.dry_run else "2", "--junitxml", str(work / "cuda-tests.xml")]
    until = end - args.bench_seconds - PACK_S
    runs = conformance_runs(kernels, args.last)
    suffixes = ["", *(f"-{number}" for number in range(2, len(runs) + 1))]
    results = [work / f"results{suffix}.json" for suffix in suffixes]
    beside_first = {"cuda tests": (tests, work / "cuda-tests.log")}
    for (name, chosen), path, suffix in zip(runs, results, suffixes, strict=True):
        step = {name: (conformance_command(chosen, path, args.dry_run, args.shrink), work / f"run{suffix}.log")}
        steps.update(run_steps({**step, **beside_first}, until))
        beside_first = {}
    if beside_first:  # no built-in selected: the cuda tests alone
        steps.update(run_steps(beside_first, until))
    bench = [PYTHON, "-m", "verify", "bench", "--csv", str(work / "bench.csv")]
    if args.dry_run:
        bench += ["--kind", "layernorm", "--dtype", "float16", "--width", "64", "--rows", "64"]
    bench += args.bench_args.split()
    if args.bench_seconds > 0:
        steps.update(run_steps({"bench": (bench, work / "bench.log")}, end - PACK_S))
    lines = summary_lines(results, steps, mode, kernels)
    bench_csv = work / "bench.csv"
    if bench_csv.exists():
        lines[-2:-2] = ["bench (bench.csv):", *("  " + row for row in bench_csv.read_text().splitlines()), ""]
    (work / "summary.txt").write_text("\n".join(lines) + "\n")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    with contextlib.suppress(OSError):
        archive = pack(out, work)
        lines.append(f"archive: {archive}")
    print("\n".join(lines[-3:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
