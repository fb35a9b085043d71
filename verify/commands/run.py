"""`normverify run --kernel SPEC ...`: the conformance run, with progress, a summary table and the results JSON.

Exit codes: 0 every applicable claim passed; 1 a claim failed or errored (or the run did not
complete); 2 bad usage or a kernel that cannot be loaded (found before the run starts); 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from core import device_option
from core.errors import UsageError, one_line
from core.registry import KINDS

if TYPE_CHECKING:
    from core.results import Document
from verify import grouping, runner

NAME = "run"
HELP = "run the conformance suite on kernels: every claim checked, a summary, the results JSON (and a report)"

DEFAULT_JSON = Path("reports") / "results.json"
STYLE = {"passed": "green", "failed": "bold red", "error": "bold magenta", "skipped": "dim", "xfailed": "yellow",
         "xpassed": "yellow", "unchecked": "bold yellow"}


def workers(text: str) -> str:
    """``-n``: a number of worker processes or ``auto`` (0 or 1: no workers, the run stays in one process)."""
    if text == "auto" or (text.isdigit() and int(text) >= 0):
        return text
    raise argparse.ArgumentTypeError(f"expected a number of workers or 'auto', not {text!r}")


def one_of(module: str, names: str) -> Callable[[str], str]:
    """An argparse ``type`` accepting the names ``module.names`` lists, imported only when the option is given
    (properties.run.profiles loads Hypothesis, proofs.error_model SymPy: not for --help or a usage error)."""

    def check(text: str) -> str:
        allowed = getattr(importlib.import_module(module), names)
        if text not in allowed:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(allowed)}, not {text!r}")
        return text

    return check


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", metavar="cuda:N|cpu",
                        help="probe and run the kernels on this device only (default: CUDA where a kernel runs there)")
    parser.add_argument("--kernel", action="append", required=True, metavar="SPEC",
                        help="kernel under test: a built-in (normverify list), MODULE:ATTR or PATH.py:ATTR; "
                             "repeatable, comma-separated lists allowed")
    parser.add_argument("--kind", choices=KINDS, help="the kernel's kind where it cannot be inferred; "
                                                      "also restricts the run to it")
    parser.add_argument("--claims", metavar="IDS", help="only these claims: comma-separated ids or globs, e.g. 'ln.*'")
    parser.add_argument("--profile", type=one_of("properties.run.profiles", "PROFILES"), metavar="NAME",
                        help="Hypothesis profile: ci (derandomized), dev (random, quick) or thorough "
                             "(default: NORMVERIFY_PROFILE, else ci)")
    parser.add_argument("--bound", type=one_of("proofs.error_model", "BOUNDS"), metavar="NAME",
                        help="rounding-error bound of the tolerances: probabilistic (default; false-alarm probability "
                             "1e-13 per bound evaluation, docs/tightness.md) or worst-case (always holds, looser)")
    parser.add_argument("--no-shrink", action="store_true",
                        help="report each failure with the example that failed, not a minimized one (Hypothesis's "
                             "shrinking off): the same verdicts in a fraction of the time of a failing run, for triage")
    parser.add_argument("-n", dest="workers", type=workers, default="auto", metavar="N|auto",
                        help="worker processes (pytest-xdist; default auto, 0 for one process)")
    parser.add_argument("--json", type=Path, metavar="PATH",
                        help=f"results file (default: DIR/results.json with --report, else {DEFAULT_JSON})")
    parser.add_argument("--report", type=Path, metavar="DIR", help="write the conformance report (LaTeX) to DIR")
    parser.add_argument("--pdf", action="store_true", help="with --report: compile the report to PDF (pdflatex)")
    parser.add_argument("--skips-file", type=Path, metavar="FILE",
                        help="claims to skip: one 'CLAIM [KERNEL]  # reason' per line, globs allowed")
    parser.add_argument("--xfails-file", type=Path, metavar="FILE",
                        help="known deviations, run as expected failures: one 'CLAIM [KERNEL]  # reason' per line")
    parser.add_argument("--quiet", action="store_true", help="no progress and no table: failures and totals only")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="every skip, dtype not tested and view in full, one line each (default: one line per "
                             "reason; the JSON and the report keep every line either way)")
    parser.add_argument("--timeout", type=float, default=120.0, metavar="S",
                        help="time limit of one kernel call in seconds (default 120); a test gets "
                             f"{runner.TEST_TIMEOUT_FACTOR}x that")


def run(args: argparse.Namespace) -> int:
    from proofs.error_model import DEFAULT_BOUND
    from properties.run.profiles import chosen as chosen_profile  # the suite (hypothesis, pytest, torch): only to run
    from properties.run.selection import claim_patterns

    device_option.select(args.device)  # before anything initializes CUDA; the pytest child inherits it
    bound = args.bound or DEFAULT_BOUND
    report_writer = _report_writer(args)
    json_path = (args.json or (args.report / "results.json" if args.report else DEFAULT_JSON)).resolve()
    request = runner.RunRequest(specs=args.kernel, json_path=json_path, kind=args.kind,
                                claims=claim_patterns(args.claims), profile=args.profile, bound=bound,
                                workers=args.workers, timeout=args.timeout, skips_file=args.skips_file,
                                xfails_file=args.xfails_file, shrink=not args.no_shrink)
    kernels = runner.check_request(request)
    console = make_console()
    if not args.quiet:
        console.print(f"normverify run: {', '.join(k.name for k in kernels)}"
                      f" | profile {chosen_profile(args.profile)}{' (no shrinking)' if args.no_shrink else ''}"
                      f" | bound {bound} | workers {args.workers}"
                      f" | log {request.log_path}",
                      soft_wrap=True)
    outcome = _run_with_progress(request, console, quiet=args.quiet)
    code = runner.exit_code(outcome)
    document = outcome.results
    if document is None:
        return _no_results(console, outcome)
    if not args.quiet:
        console.print(summary_table(document))
        print_reductions(console, document)
        print_views(console, document, args.verbose)
        print_bitwise(console, document)
        print_skips(console, document, args.verbose)
    print_untested(console, document, args.verbose)
    print_failures(console, document)
    print_totals(console, document, outcome, json_path)
    if code == 0 and not document.results:
        raise UsageError(f"no conformance test matched (claims {args.claims or 'all'}, "
                         f"kinds {', '.join(sorted({k.kind for k in kernels}))})")
    if report_writer is not None:
        code = max(code, _write_report(console, report_writer, document, args.report, args.pdf))
    return code


def make_console() -> Console:
    """The terminal's width on a terminal (or $COLUMNS); 160 columns in a CI log, where lines need not wrap at 80."""
    console = Console(highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(highlight=False, width=160)
    return console


def _report_writer(args: argparse.Namespace):
    """``verify.report.write_report`` when --report asks for it (checked before the run, not after)."""
    if args.pdf and not args.report:
        raise UsageError("--pdf needs --report DIR")
    if not args.report:
        return None
    if args.pdf:
        from verify.latex import missing

        if reason := missing("pdflatex"):
            raise UsageError(f"--pdf: {reason}; or leave out --pdf")
    try:
        from verify.report import write_report
    except ImportError as error:
        raise UsageError(f"--report: the conformance report is not available in this installation ({error})") from None
    return write_report


def _run_with_progress(request: runner.RunRequest, console: Console, quiet: bool) -> runner.RunOutcome:
    if quiet:
        return runner.run(request)
    if not console.is_terminal:
        return runner.run(request, on_progress=ProgressLines(console))
    from core.results import FAILING

    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("{task.fields[failing]}"))
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("starting pytest", total=None, failing="")

        def update(document: Document) -> None:
            bad = sum(1 for r in document.results if r.status in FAILING)
            progress.update(task, description="checking claims", completed=document.progress.done,
                            total=document.progress.total,
                            failing=Text(f"{bad} failing", style="bold red") if bad else "")

        return runner.run(request, on_progress=update)


class ProgressLines:
    """Progress without a terminal (a CI log): one line per finished test, and one every ``runner.REFRESH_S``
    seconds naming the tests under way while none finishes."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.shown = 0
        self.last = time.monotonic()

    def __call__(self, document: Document) -> None:
        total = document.progress.total or "?"
        for result in document.results[self.shown:]:
            self.shown += 1
            ratio = f", worst ratio {_fmt_ratio(result.worst_ratio)}" if result.worst_ratio is not None else ""
            self.console.print(Text.assemble(f"[{self.shown}/{total}] ", (result.status, STYLE[result.status]),
                                             f" {result.claim} {result.kernel} {_test_name(result.test)} "
                                             f"({result.examples} examples{ratio}, {result.duration_s:.1f}s)"),
                               soft_wrap=True)
            self.last = time.monotonic()
        if time.monotonic() - self.last >= runner.REFRESH_S and document.progress.running:
            self.console.print(f"[{self.shown}/{total}] running {', '.join(document.progress.running)}",
                               markup=False, soft_wrap=True)
            self.last = time.monotonic()


def _test_name(nodeid: str) -> str:
    """``properties/test_forward.py::test_forward_wide[torch:layernorm]`` -> ``test_forward_wide``."""
    return nodeid.rpartition("::")[2].partition("[")[0]


def _fmt_ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.3g}"


def summary_table(document: Document) -> Table:
    """Claim x kernel, grouped by claim family: verdict, tests, examples run, those unchecked (no finite bound),
    worst error/bound ratio (> 1 fails), time."""
    table = Table(title="conformance", title_justify="left")
    for header, justify in (("claim", "left"), ("kernel", "left"), ("verdict", "left"), ("tests", "right"),
                            ("examples", "right"), ("unchecked", "right"), ("worst ratio", "right"),
                            ("time", "right")):
        table.add_column(header, justify=justify)
    from core.results import family

    shown = None
    for row in runner.summary_rows(document):
        if shown is not None and family(row.claim) != shown:
            table.add_section()
        shown = family(row.claim)
        verdict = Text(row.status, style=STYLE.get(row.status, ""))
        if row.view is not None:
            verdict.append(f" (view of {row.view.of})")
        table.add_row(row.claim, row.kernel, verdict, str(len(row.results)),
                      str(row.examples), Text(str(row.unchecked), style=STYLE["unchecked"] if row.unchecked else ""),
                      _fmt_ratio(row.worst_ratio), f"{row.seconds:.1f}s")
    return table


def bitwise_table(document: Document) -> Table | None:
    """Per kernel, the bitwise properties measured (core.results.Finding): batch invariant, deterministic in the
    forward and the backward, yes or no, each with its declaration and its first evidence; None without any."""
    from core.results import Finding, bitwise_findings

    found = bitwise_findings(document.results)
    if not found:
        return None
    table = Table(title="bitwise (issue 29: a contract where declared, else measured)", title_justify="left")
    for header in ("kernel", "batch invariant", "deterministic forward", "deterministic backward", "evidence"):
        table.add_column(header, overflow="fold")
    for kernel, findings in found.items():
        invariant, deterministic = findings.get("batch invariant"), findings.get("deterministic")
        words = [Finding.word(None if f is None else getattr(f, part))
                 for f, part in ((invariant, "holds"), (deterministic, "forward"), (deterministic, "backward"))]
        evidence = "; ".join(f.evidence[0] for f in (invariant, deterministic) if f is not None and f.holds is False
                             and f.evidence) or "bit-identical wherever compared (JSON, report)"
        table.add_row(kernel, *[Text(word, style=STYLE["unchecked"] if word == "no" else "") for word in words],
                      evidence)
    return table


def print_bitwise(console: Console, document: Document) -> None:
    table = bitwise_table(document)
    if table is not None:
        console.print(table)


def print_reductions(console: Console, document: Document) -> None:
    """The declared exact reduction trees as the run found them (core.trees): the verified ones in one line, each
    other with what was used instead."""
    checks = document.environment.reductions
    verified = [check for check in checks if check.status == "verified"]
    if verified:
        names = ", ".join(f"{check.kernel} {check.dtype}" for check in verified)
        console.print(Text.assemble(("REDUCTION ", "bold"), f"declared trees verified bit for bit on "
                                    f"{verified[0].device} ({verified[0].build}) and used: {names}"), soft_wrap=True)
    for check in checks:
        if check.status != "verified":
            console.print(Text.assemble(("REDUCTION ", STYLE["skipped"]), check.line()), soft_wrap=True)


def print_views(console: Console, document: Document, verbose: bool = False) -> None:
    """One line per claim whose evidence is a view of another claim's (core.results.View): what its pass means, in
    full with ``verbose``, else in short (the reason is in the JSON and the report)."""
    views = {result.claim: result.view for result in document.results if result.view is not None}
    for claim, view in views.items():
        text = view.text() if verbose else f"passes with the {view.of} evidence (a view of it; why: JSON, report)"
        console.print(Text.assemble(("VIEW ", "bold"), f"{claim}: {text}"), soft_wrap=True)


def print_untested(console: Console, document: Document, verbose: bool = False) -> None:
    """The dtypes kernels were not checked in and why (one line per reason, or per kernel and dtype with
    ``verbose``), the faults their probes found, a backward they lack."""
    lines = []
    for kernel in document.kernels:
        caps = kernel.capabilities
        if caps is None:
            continue
        if verbose:
            lines += [("NOT TESTED ", STYLE["skipped"], f"{kernel.name} in {dtype}: {reason}")
                      for dtype, reason in caps.not_tested.items()]
        lines += [("PROBE FAULT ", STYLE["error"], f"{kernel.name} in {dtype}: {fault}")
                  for dtype, fault in caps.faults.items()]
        if caps.backward_fault:
            lines.append(("PROBE FAULT ", STYLE["error"], f"{kernel.name} backward: {caps.backward_fault}"))
    if not verbose:
        lines += [("NOT TESTED ", STYLE["skipped"], group.line()) for group in grouping.untested(document)]
    for label, style, text in lines:
        console.print(Text.assemble((label, style), text), soft_wrap=True)


def print_skips(console: Console, document: Document, verbose: bool = False) -> None:
    """Why claims did not apply (a skip is never a pass): one line per reason with the claims and kernels it covers,
    or with ``verbose`` one line per claim x kernel x reason."""
    if not verbose:
        for group in grouping.skipped(document):
            console.print(Text.assemble(("SKIPPED ", STYLE["skipped"]), group.line()), soft_wrap=True)
        return
    seen = set()
    for result in document.results:
        if result.status != "skipped":
            continue
        key = (result.claim, result.kernel, grouping.reason(result))
        if key not in seen:
            seen.add(key)
            console.print(Text.assemble(("SKIPPED ", STYLE["skipped"]), f"{key[0]} {key[1]}: {key[2]}"),
                          soft_wrap=True)


def print_failures(console: Console, document: Document) -> None:
    """Per failing, erroring or unchecked test one line, then each distinct failure in its own line with its whole
    counterexample (every input: eps, weight, bias, dtype, shape) and its replay command; errors outside tests."""
    for result in document.results:
        if result.passing:
            continue
        message = result.message.strip().splitlines()
        console.print(Text.assemble((f"{result.status.upper()} ", STYLE[result.status]),
                                    f"{result.claim} {result.kernel}: ", message[0] if message else ""),
                      soft_wrap=True)
        several = len(result.counterexamples) > 1
        for number, example in enumerate(result.counterexamples, 1):
            if several:
                console.print(f"  failure {number}: {example.message}", markup=False, soft_wrap=True)
            for line in example.text.splitlines():
                console.print(f"    {line}", markup=False, soft_wrap=True)
            console.print(f"    replay: {example.replay}", markup=False, soft_wrap=True)
    for error in document.errors:
        lines = error.message.strip().splitlines()
        console.print(Text.assemble(("ERROR ", STYLE["error"]), f"{error.test}: ", lines[-1] if lines else ""),
                      soft_wrap=True)


def print_totals(console: Console, document: Document, outcome: runner.RunOutcome, json_path: Path) -> None:
    parts = [Text(f"{n} {status}", style=STYLE.get(status, "")) for status, n in sorted(document.counts().items())]
    if document.errors:
        parts.append(Text(f"{len(document.errors)} errors outside the tests", style=STYLE["error"]))
    line = Text(", ").join(parts) if parts else Text("no tests ran")
    state = "interrupted" if outcome.interrupted else ("" if document.complete else "INCOMPLETE")
    line.append(f" in {outcome.seconds:.0f}s" + (f" ({state})" if state else ""))
    console.print(line)
    if document.results:
        totals = grouping.claim_totals(document)
        console.print(Text.assemble("claim x kernel: ", (f"{totals['checked']} checked", STYLE["passed"]), ", ",
                                    (f"{totals['skipped']} skipped for a stated reason", STYLE["skipped"]), ", ",
                                    (f"{totals['failed']} failed", STYLE["failed"] if totals["failed"] else "")))
    console.print(f"results: {json_path}", soft_wrap=True)
    if not document.complete and not outcome.interrupted:
        console.print(f"the run did not finish (pytest exit {outcome.returncode}); see {outcome.log_path}",
                      soft_wrap=True)


def _no_results(console: Console, outcome: runner.RunOutcome) -> int:
    if outcome.interrupted:
        console.print("interrupted before any result was written")
        return 130
    tail = outcome.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-15:]
    console.print(f"pytest wrote no results (exit {outcome.returncode}); the end of {outcome.log_path}:",
                  soft_wrap=True)
    console.print("\n".join(tail), markup=False, soft_wrap=True)
    return 2 if outcome.returncode == 4 else 1


def _write_report(console: Console, write_report, document: Document, out_dir: Path, pdf: bool) -> int:
    """The report of the run; a report that fails is one line and exit 1, the results JSON stays."""
    try:
        written = write_report(document, out_dir, pdf=pdf)
    except Exception as error:  # whatever breaks in the report, the run's results are already safe
        console.print(f"report not written: {one_line(error)} "
                      f"(`normverify report RESULTS.json --out DIR` retries from the saved results)",
                      markup=False, soft_wrap=True)
        return 1
    console.print(f"report: {written}", soft_wrap=True)
    return 0
