"""`normverify derive`: write the derivations of the claims as a LaTeX document (and its PDF)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from core.errors import UsageError

NAME = "derive"
HELP = "write the machine-checked derivations of the claims to DIR/derivations.tex (--pdf: and a PDF)"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("derivations"), metavar="DIR",
                        help="output folder (default: ./derivations)")
    parser.add_argument("--pdf", action="store_true", help="also compile derivations.pdf with pdflatex")
    parser.add_argument("--claims", default=None, metavar="IDS",
                        help="comma-separated claim ids (default: all); see proofs.claims")


def _selected(text: str | None) -> list[str]:
    from proofs.claims import CLAIMS

    if text is None:
        return list(CLAIMS)
    ids = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [claim_id for claim_id in ids if claim_id not in CLAIMS]
    if unknown or not ids:
        raise UsageError(f"unknown claim id(s): {', '.join(unknown) or '(none given)'}; known: {', '.join(CLAIMS)}")
    return ids


def run(args: argparse.Namespace) -> int:
    from proofs import render
    from verify.latex import LatexError, compile_pdf

    ids = _selected(args.claims)
    start = time.perf_counter()
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create {args.out}: {error.strerror}") from error
    tex = args.out / "derivations.tex"
    tex.write_text(render.document(ids), encoding="utf-8")
    failed = [claim_id for claim_id in ids if not all(ok for _, ok in render.verified_steps(claim_id))]
    print(f"wrote {tex} ({len(ids)} claims)")
    if args.pdf:
        try:
            pdf = compile_pdf(tex)
        except LatexError as error:
            print(f"normverify derive: {error}", file=sys.stderr)
            return 1
        print(f"wrote {pdf}")
    print(f"{time.perf_counter() - start:.1f} s")
    if failed:
        print(f"normverify derive: steps that do not verify in: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0
