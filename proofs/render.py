"""LaTeX of the claims: one section per claim (statement, conditions, the verified steps, the verdict).

``claim_latex(id)`` is the single renderer: ``normverify derive`` and the conformance report both
include its output. Each step is verified and marked with the result, so the document never shows a step
the code did not check. The verdicts are kept per process and on disk (``proofs.disk_cache``, keyed by
the proofs package's sources, SymPy's and Python's versions, and here also numpy's and SciPy's, which the
numeric facts use): the same derivation code gives the same verdict, and re-verifying all of them took
19 s of every report and ``derive``. ``document(ids)`` wraps sections into a complete pdflatex-ready
document.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache

import sympy as sp

from proofs import disk_cache
from proofs.claims import CLAIMS
from proofs.claims.base import THEORY
from proofs.derivation import Equal, Fact

PREAMBLE = r"""\documentclass[10pt]{article}
\usepackage[T1]{fontenc}
\usepackage{lmodern}
\usepackage[margin=2.2cm]{geometry}
\usepackage{amsmath,amssymb}
\usepackage{graphicx}
\usepackage[hidelinks]{hyperref}
\setlength{\parindent}{0pt}
\setlength{\parskip}{4pt}
\makeatletter\renewcommand*\l@section{\@dottedtocline{1}{0em}{2.4em}}\makeatother
\newcommand{\fitline}[1]{\resizebox{\ifdim\width>\linewidth\linewidth\else\width\fi}{!}{$\displaystyle #1$}}
"""

_TEXT_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\^{}"}


def escape_text(text: str) -> str:
    """Plain text (e.g. a seed's wording) made safe for LaTeX text mode."""
    return "".join(_TEXT_ESCAPES.get(char, char) for char in text)


def math(expr: sp.Expr) -> str:
    return sp.latex(expr, mul_symbol=None)


@cache
def verified_steps(claim_id: str) -> tuple[tuple[object, bool], ...]:
    """(step, verified) for every step of the claim's derivation (the verdicts kept as the module docstring says)."""
    steps = CLAIMS[claim_id].derive().steps
    verdicts = disk_cache.expression(f"verified-{claim_id}-{_numeric_versions()}",
                                     lambda: tuple(step.verify() for step in steps))
    if len(verdicts) != len(steps):  # a key collision would be the only way here: verify instead of trusting it
        verdicts = tuple(step.verify() for step in steps)
    return tuple(zip(steps, verdicts, strict=True))


@cache
def _numeric_versions() -> str:
    """numpy's and SciPy's versions (the numeric facts' libraries), read without importing SciPy."""
    from importlib.metadata import version

    return f"numpy{version('numpy')}-scipy{version('scipy')}"


def _step_latex(number: int, step: object, ok: bool) -> str:
    mark = r"\checkmark\ verified" if ok else r"\textbf{NOT VERIFIED}"
    if isinstance(step, Fact):
        body = step.text
    else:
        relation = "=" if isinstance(step, Equal) else r"\le"
        body = f"{math(step.lhs)} {relation} {math(step.rhs)}"
    return (f"\\textbf{{({number})}} {step.why} \\hfill {{\\small {mark}}}\n"
            f"\\[\\fitline{{{body}}}\\]\n")


def claim_latex(claim_id: str) -> str:
    """The LaTeX section of one claim (raises KeyError for an unknown id)."""
    claim = CLAIMS[claim_id]
    parts = [f"\\section{{{escape_text(claim.title)}}}\\label{{claim:{claim.id}}}",
             f"\\textbf{{Claim}} \\texttt{{{escape_text(claim.id)}}}"
             + (f" \\quad \\textbf{{Seed}} {escape_text(claim.seed)}" if claim.seed else "") + "\n"]
    if claim.seed_statement and (claim.seed or claim.verdict != "contract"):
        label = r"\textbf{Seed statement} (translated):" if claim.seed else r"\textbf{Origin}:"
        parts.append(f"{label}\n\\begin{{quote}}\\itshape {escape_text(claim.seed_statement)}\\end{{quote}}\n")
    parts.append(f"\\textbf{{Statement.}} {claim.statement}\n")
    if claim.conditions:
        items = "\n".join(f"  \\item {condition}" for condition in claim.conditions)
        parts.append(f"\\textbf{{Conditions.}}\n\\begin{{itemize}}\n{items}\n\\end{{itemize}}\n")
    steps = verified_steps(claim_id)
    derivation = CLAIMS[claim_id].derive()
    if steps:
        parts.append("\\textbf{Derivation} (each step checked by SymPy or by the stated computation).\n")
        parts.extend(_step_latex(n, step, ok) for n, (step, ok) in enumerate(steps, 1))
    for note in derivation.notes:
        parts.append(f"\\emph{{{note}}}\n")
    verdict = f"\\textbf{{Verdict: {escape_text(claim.verdict)}.}}"
    parts.append(f"{verdict} {claim.verdict_note}\n")
    if claim.evidence == THEORY:
        parts.append(r"\textbf{Evidence:} theory only; no conformance test checks a kernel against this claim "
                     "yet.\n")
    return "\n".join(parts)


def document(claim_ids: Iterable[str], title: str = "normverify: derivations") -> str:
    """A complete LaTeX document with one section per claim."""
    sections = "\n".join(claim_latex(claim_id) for claim_id in claim_ids)
    return (PREAMBLE + f"\\title{{{escape_text(title)}}}\n\\date{{}}\n\\begin{{document}}\n\\maketitle\n"
            "\\tableofcontents\n\\clearpage\n" + sections + "\n\\end{document}\n")
