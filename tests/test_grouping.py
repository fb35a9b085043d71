"""The terminal summary a person reads (verify.grouping): skips and dtypes not tested grouped by reason, whatever
kernel, claim or measured figure the reason names, one line each with the claims, kernels and a count; the claims
counted as checked, skipped for a stated reason, failed."""

from __future__ import annotations

from core.results import Document
from verify import grouping


def result(claim: str, kernel: str, status: str, message: str = "") -> dict:
    return {"claim": claim, "kernel": kernel, "test": f"t::{claim}[{kernel}]", "status": status, "message": message}


def document(*results: dict, kernels: tuple = ()) -> Document:
    return Document.model_validate({"environment": {}, "kernels": list(kernels), "results": list(results)})


SLOW = "{k}: 8 rows took 0.0{n} s, 32 rows 0.1{n} s, so 65537 rows would take ~3{n}1 s (> 60 s; an interpreted kernel?)"


def test_one_reason_is_one_line_whatever_kernel_claim_or_figure_it_names():
    runs = document(*(result(claim, kernel, "skipped", SLOW.format(k=kernel, n=n))
                      for n, (claim, kernel) in enumerate([("ln.forward", "triton:layernorm"),
                                                           ("ln.jacobian", "triton:layernorm"),
                                                           ("rms.forward", "triton:rmsnorm")])),
                    result("ln.forward", "torch:layernorm", "skipped", "torch:layernorm does not compute in bfloat16"),
                    result("ln.forward", "torch:layernorm", "passed"))
    slow, bf16 = grouping.skipped(runs)
    assert slow.count == 3 and slow.claims == ["ln.forward", "ln.jacobian", "rms.forward"]
    assert slow.kernels == ["triton:layernorm", "triton:rmsnorm"] and "triton:" not in slow.reason
    assert slow.line().startswith("(3) 8 rows took 0.00 s") and slow.line().endswith(
        "[claims ln.forward, ln.jacobian, rms.forward; kernels triton:layernorm, triton:rmsnorm]")
    assert bf16.line() == "(1) does not compute in bfloat16 [claims ln.forward; kernel torch:layernorm]"


def test_different_reasons_stay_apart():
    runs = document(result("ln.forward", "k", "skipped", "not checked with float32 x, float16 weight/bias"),
                    result("ln.forward", "k", "skipped", "not checked with float32 x, bfloat16 weight/bias"))
    assert len(grouping.skipped(runs)) == 2


def test_dtypes_not_tested_are_grouped_by_reason():
    kernels = [{"name": name, "kind": "layernorm", "capabilities": {"not_tested": {"bfloat16": "not declared"}}}
               for name in ("a:layernorm", "b:layernorm")]
    (group,) = grouping.untested(document(kernels=tuple(kernels)))
    assert group.line() == "(2) in bfloat16: not declared [kernels a:layernorm, b:layernorm]"


def test_claims_are_counted_checked_skipped_or_failed():
    runs = document(result("ln.forward", "k", "passed"), result("ln.forward", "k", "skipped", "why"),
                    result("ln.affine", "k", "skipped", "why"), result("ln.jacobian", "k", "failed"),
                    result("ln.jacobian", "k", "passed"), result("rms.forward", "r", "unchecked"))
    assert grouping.claim_totals(runs) == {"checked": 1, "skipped": 1, "failed": 2}
