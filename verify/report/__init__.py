"""The conformance report: a LaTeX document (and PDF) from one or more results documents.

    write_report(results, out_dir, pdf) -> Path      # normverify run --report DIR [--pdf]
                                                     # normverify report RESULTS.json... --out DIR [--pdf]

The document: a header (kernels, versions, device, dtypes, profile, suite commit, date); a summary
table claim x kernel with the worst error/bound ratio; for each claim the derivation's statement
and conditions (``proofs.render.claim_latex``, never retyped), the evidence, each failure's minimal
counterexample and replay command, and the figures its points support.
"""

from verify.report.document import write_report

__all__ = ["write_report"]
