"""Where the time of one conformance run goes: start-up, collection, each claim, and inside the tests the kernel
calls, the oracles, the bounds and the declared trees' checks.

    .venv/bin/python scripts/profile_run.py                      # torch and triton, ci profile, one process each
    .venv/bin/python scripts/profile_run.py --kernel torch --claims 'ln.*'

Each SPEC runs in a child process (``--child``): pytest in-process with the suite's plugin, one worker (so the figures
add up), under cProfile; a small plugin stamps the start of the session, the end of collection and each test's
duration by claim. cProfile's cumulative time of the functions named in :data:`PARTS` splits the tests' time (a part
nested in another is counted in both: the bounds call the oracles). cProfile slows pure-Python code by up to ~2x, so
compare the shares, and the wall times printed beside them, not the absolute seconds of a part with a plain run.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (part, module prefix of the file, function names): their cumulative times split the tests' time.
PARTS = (
    ("kernel calls", "core/guard.py", ("call", "grad")),
    ("bounds", "properties/bounds/tolerance.py", ("forward", "backward", "identities", "covered", "backward_covered")),
    ("oracles", "proofs/oracles.py", ("layernorm", "rmsnorm", "layernorm_vjp", "rmsnorm_vjp", "layernorm_jacobian",
                                      "rmsnorm_jacobian", "weighted_spectral_norm", "weighted_top_singular")),
    ("declared-tree checks", "core/trees.py", ("check",)),
    ("capability probes", "core/capabilities.py", ("discover",)),
)


class Stamps:
    """pytest hooks: when the session started and when collection finished."""

    def __init__(self) -> None:
        self.session = self.collected = None

    def pytest_sessionstart(self, session) -> None:
        self.session = time.perf_counter()

    def pytest_collection_finish(self, session) -> None:
        self.collected = time.perf_counter()


def child(spec: str, claims: str | None) -> dict:
    """One profiled run of ``spec``: the figures as JSON on stdout's last line (each test's claim and duration from
    the run's own results JSON)."""
    start = time.perf_counter()
    import tempfile

    import pytest

    stamps = Stamps()
    results = Path(tempfile.mkdtemp()) / "results.json"
    args = [str(ROOT / "properties"), "-p", "properties.run.results", "--json", str(results), "--kernel", spec,
            "--hypothesis-profile", "ci", "-p", "no:cacheprovider", "-p", "no:xdist", "-q", "--no-header"]
    if claims:
        args += ["--claims", claims]
    profiler = cProfile.Profile()
    profiler.enable()
    code = pytest.main(args, plugins=[stamps])
    profiler.disable()
    end = time.perf_counter()
    stats = pstats.Stats(profiler)
    parts = {}
    for label, path, names in PARTS:
        parts[label] = sum(row[3] for (file, _, name), row in stats.stats.items()
                           if file.endswith(path) and name in names)
    by_claim: dict[str, float] = {}
    for result in json.loads(results.read_text())["results"] if results.exists() else []:
        by_claim[result["claim"]] = by_claim.get(result["claim"], 0.0) + result["duration_s"]
    return {"spec": spec, "exit": int(code), "total": end - start, "startup": (stamps.session or end) - start,
            "collection": (stamps.collected or end) - (stamps.session or end),
            "tests": sum(by_claim.values()), "claims": by_claim, "parts": parts}


def table(found: dict) -> str:
    lines = [f"## {found['spec']} (pytest exit {found['exit']})", "", "| stage | seconds | share of the run |",
             "|---|---|---|"]
    total = found["total"]
    for label, key in (("start-up (imports, plugin, configure)", "startup"), ("collection", "collection"),
                       ("tests", "tests"), ("whole run", "total")):
        lines.append(f"| {label} | {found[key]:.1f} | {found[key] / total:.0%} |")
    lines += ["", "| inside the tests (cumulative, cProfile) | seconds | share of the tests |", "|---|---|---|"]
    for label, seconds in sorted(found["parts"].items(), key=lambda item: -item[1]):
        lines.append(f"| {label} | {seconds:.1f} | {seconds / max(found['tests'], 1e-9):.0%} |")
    lines += ["", "| claim | seconds |", "|---|---|"]
    lines += [f"| {claim} | {seconds:.1f} |" for claim, seconds in
              sorted(found["claims"].items(), key=lambda item: -item[1])[:15]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", action="append", help="SPEC to profile (default: torch and triton)")
    parser.add_argument("--claims", help="only these claims (ids or globs, comma-separated)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.claims)))
        return 0
    for spec in args.kernel or ["torch", "triton"]:
        command = [sys.executable, __file__, "--child", spec] + (["--claims", args.claims] if args.claims else [])
        started = time.perf_counter()
        # The child imports this checkout (not an installed copy): `python scripts/...` puts scripts/ first on sys.path.
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, env=env)
        lines = proc.stdout.strip().splitlines()
        if proc.returncode != 0 or not lines:
            print(f"{spec}: the profiled run failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
            return 1
        found = json.loads(lines[-1])
        print(table(found))
        print(f"\n(profiled run: {time.perf_counter() - started:.0f} s wall with the interpreter start)\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
