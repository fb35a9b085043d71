"""The report's two tables: the runs (one column per kernel SPEC) and the claim x kernel summary.

Both are longtables in small print whose column widths are shares of the line width, so many
kernels still fit across the page and many claims continue over pages.
"""

from __future__ import annotations

import re

from core.results import Capabilities, Finding, SummaryRow, bitwise_findings, family
from verify.report.model import Column, Report
from verify.report.texify import escape, number

STATUS_COLORS = {"passed": "ForestGreen", "failed": "BrickRed", "error": "BurntOrange", "xfailed": "NavyBlue",
                 "xpassed": "Plum", "skipped": "Gray", "unchecked": "Dandelion"}
ENVIRONMENT_FIELDS = (  # (label, key of the results' "environment")
    ("device", "device"), ("CPU capability", "cpu_capability"), ("profile", "profile"), ("error bound", "bound"),
    ("suite commit", "commit"),
    ("date", "date"),
    ("normverify", "normverify"), ("python", "python"), ("torch", "torch"), ("triton", "triton"),
    ("hypothesis", "hypothesis"),
)


def _kernels(column: Column) -> str:
    """The kinds a SPEC provides, with the kernel's name where it is not SPEC:KIND and its weight convention."""
    described = []
    for kernel in column.kernels:
        text = kernel.kind
        if kernel.name != f"{column.spec}:{text}":
            text += f" ({kernel.name})"
        if kernel.weight_offset:
            text += f", weight offset {kernel.weight_offset:g}"
        if kernel.conventions:
            text += f", declared conventions: {', '.join(kernel.conventions)}"
        elif kernel.backward_precision == "storage":  # results written before conventions existed
            text += ", backward declared in the storage precision"
        if kernel.reduction is not None:
            text += f", declared reduction: {kernel.reduction.source or kernel.reduction.model_dump()}"
        if kernel.output_dtype != "input" or kernel.parameter_dtypes != "any":
            text += f", declared output dtype {kernel.output_dtype!r}, parameter dtypes {kernel.parameter_dtypes!r}"
        if kernel.compiles_per_width:
            text += (", compiles per width: ci and dev runs draw its widths from the palette of 20 "
                     "(properties.draws.strategies.WIDTH_PALETTE)")
        caps = kernel.capabilities or Capabilities()
        if caps.backward is False:
            text += ", no backward"
        text += "".join(f", not tested in {dtype}: {why}" for dtype, why in caps.not_tested.items())
        text += "".join(f", probe fault in {dtype}: {why}" for dtype, why in caps.faults.items())
        if caps.backward_fault:
            text += f", backward fault: {caps.backward_fault}"
        described.append(text)
    return "; ".join(described) or "--"


RUN_FIELDS = (
    ("SPEC", lambda c: c.spec),
    ("kernels", _kernels),
    ("dtypes", lambda c: ", ".join(_dtypes(c)) or "--"),
    *((label, lambda c, key=key: str(getattr(c.environment, key) or "--")) for label, key in ENVIRONMENT_FIELDS),
    ("counterexamples", lambda c: "as they failed, not minimized (--no-shrink)" if c.environment.shrink is False
     else "minimized"),
    ("run complete", lambda c: "yes" if c.complete else "NO: interrupted, partial results"),
)


def _dtypes(column: Column) -> list[str]:
    found: list[str] = []
    for kernel in column.kernels:
        for dtype in kernel.capabilities.dtypes if kernel.capabilities else []:
            name = str(dtype).removeprefix("torch.")
            if name not in found:
                found.append(name)
    return found


def column(share: float) -> str:
    """A ragged-right paragraph column taking ``share`` of the line width (padding included)."""
    return rf">{{\raggedright\arraybackslash}}p{{\dimexpr {share:.3f}\linewidth-2\tabcolsep\relax}}"


def longtable(shares: list[float], head: list[str], rows: list[list[str]]) -> str:
    """A small-print longtable with these column shares, its head repeated on every page, rows of LaTeX cells."""
    head_line = " & ".join(head) + r" \\"
    lines = [r"{\footnotesize\setlength{\tabcolsep}{3pt}",
             rf"\begin{{longtable}}{{{''.join(column(share) for share in shares)}}}",
             r"\toprule", head_line, r"\midrule", r"\endfirsthead",
             r"\toprule", head_line, r"\midrule", r"\endhead", r"\bottomrule", r"\endfoot"]
    lines += [" & ".join(cells) + r" \\" for cells in rows]
    lines += [r"\end{longtable}}", ""]
    return "\n".join(lines)


def _shares(label_share: float, columns: int) -> list[float]:
    """A label column taking ``label_share`` of the line, the rest shared equally by ``columns``."""
    return [label_share] + [(0.98 - label_share) / max(columns, 1)] * columns


def label_of(claim: str) -> str:
    """The LaTeX label of a claim's section (claim ids come from results files: keep only safe characters)."""
    return "claim:" + re.sub(r"[^A-Za-z0-9._-]", "-", claim)


def runs_table(report: Report) -> str:
    """Header: what every run shared (versions, device, profile, commit, date) once, then what differs per kernel."""
    values = {label: [read(c) for c in report.columns] for label, read in RUN_FIELDS}
    shared = [label for label, found in values.items() if label != "kernels" and len(set(found)) == 1]
    lines = [r"{\small", r"\begin{tabular}{@{}ll@{}}"]
    lines += [rf"{escape(label)} & {escape(values[label][0], breakable=False)} \\" for label in shared]
    lines += [r"\end{tabular}}", ""]
    head = ["kernel"] + [rf"\textbf{{{escape(c.label)}}}" for c in report.columns]
    rows = [[escape(name)] + [escape(value) for value in found] for name, found in values.items() if name not in shared]
    return "\n".join(lines) + longtable(_shares(0.16, len(report.columns)), head, rows) + _declared_trees(report)


def _declared_trees(report: Report) -> str:
    """Every declared exact reduction tree as each run found it on its machine (core.trees): verified and used, or
    not, with what was used instead; nothing when no kernel declares one."""
    found = dict.fromkeys(check.line() for column in report.columns for check in column.environment.reductions)
    if not found:
        return ""
    items = "\n".join(rf"\item {escape(line)}" for line in found)
    return f"\n\\noindent Declared reduction trees, checked bit for bit on the machine of the run:\n" \
           f"\\begin{{itemize}}\n{items}\n\\end{{itemize}}\n"


def verdict_word(status: str) -> str:
    return rf"\textcolor{{{STATUS_COLORS.get(status, 'black')}}}{{\textbf{{{escape(status)}}}}}"


def verdict(cell: SummaryRow | None) -> str:
    """A colored status word with the worst error/bound ratio under it; '--' when the kernel never ran the claim."""
    if cell is None:
        return r"\textcolor{Gray}{--}"
    text = verdict_word(cell.status)
    if cell.worst_ratio is not None:
        text += rf"\newline ratio {number(cell.worst_ratio)}"
    if cell.unchecked:
        text += rf"\newline {cell.unchecked} unchecked"
    if cell.view is not None:
        text += rf"\newline view of {escape(cell.view.of)}"
    return text


def summary_table(report: Report, theory: dict[str, str]) -> str:
    """Claim x kernel: the derivation's verdict, then each kernel's status and worst error/bound ratio."""
    head = ["claim", "theory"] + [rf"\textbf{{{escape(c.label)}}}" for c in report.columns]
    rows, shown = [], None
    for claim in report.claims:  # grouped by family (core.results.ordered_claims), a heading row for each
        if family(claim) != shown:
            shown = family(claim)
            rows.append([rf"\multicolumn{{{len(head)}}}{{@{{}}l}}{{\textbf{{{escape(shown)}.*}}}}"])
        rows.append([rf"\hyperref[{label_of(claim)}]{{{escape(claim)}}}", escape(theory.get(claim, "unknown claim"))]
                    + [verdict(report.cell(claim, i)) for i in range(len(report.columns))])
    return longtable(_shares(0.30, len(report.columns) + 1), head, rows)


def bitwise_table(report: Report) -> str:
    """Per kernel (of each column), the bitwise properties measured (core.results.Finding; issue 29): batch invariant,
    deterministic forward and backward, yes or no, the declarations and the evidence; "" when none was measured."""
    rows = []
    for index, column_ in enumerate(report.columns):
        results = [result for (_, at), cell in report.cells.items() if at == index for result in cell.results]
        for kernel, findings in bitwise_findings(results).items():
            invariant, deterministic = findings.get("batch invariant"), findings.get("deterministic")
            cells = [Finding.word(None if f is None else getattr(f, part))
                     for f, part in ((invariant, "holds"), (deterministic, "forward"), (deterministic, "backward"))]
            declared = ", ".join(f"{f.property}: {'declared' if f.declared else 'not declared'}"
                                 for f in (invariant, deterministic) if f is not None)
            evidence = "; ".join(line for f in (invariant, deterministic) if f is not None for line in f.evidence[:2])
            rows.append([escape(f"{kernel} ({column_.label})" if len(report.columns) > 1 else kernel), *cells,
                         escape(f"{declared}. {evidence}")])
    if not rows:
        return ""
    head = ["kernel", "batch invariant", "deterministic forward", "deterministic backward", "declarations, evidence"]
    return longtable([0.16, 0.1, 0.13, 0.13, 0.46], head, rows)
