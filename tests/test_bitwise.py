"""The bitwise claims (issue 29: *.batch_invariance, *.determinism) and their declarations:

* declared True (``Kernel.batch_invariant`` / ``deterministic``), a difference fails the claim; undeclared or declared
  False, it is a finding: recorded with its evidence (which output, sizes, max |difference|, ulps), never a failure;
* the findings of a test's examples merge into the result's ``finding`` (core.results.Finding), and the terminal and
  the LaTeX report show them per kernel;
* bit differences are measured on the bits (signed zeros, ulps across zero).

The corpus (tests/corpus/bitwise.py) holds the kernels each claim must catch (tests/test_corpus.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from corpus.bitwise import LN_ATOMIC_DWEIGHT, LN_BATCH_SIZE_SWITCH, LN_TEXTBOOK_DECLARED_BITWISE
from rich.console import Console

from core.errors import UsageError
from core.kernel import Kernel
from core.results import Finding, bitwise_findings, parse
from properties import evidence
from properties.checks.bitwise import bit_difference, check_batch_invariance, check_determinism
from properties.outcome import CheckFailure
from properties.run.summary import summarize


def _example(rows: int, d: int = 64, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    x, dy = torch.randn(rows, d, generator=generator), torch.randn(rows, d, generator=generator)
    return {"x": x, "weight": torch.randn(d, generator=generator), "bias": torch.randn(d, generator=generator),
            "eps": 1e-5, "dy": dy}


def _recorded(check, kernel: Kernel, example: dict) -> list[dict]:
    evidence.start()
    try:
        check(kernel, **example)
    finally:
        taken = evidence.take()
    return taken


def test_bit_difference_counts_bits_not_values():
    a = torch.tensor([0.0, 1.0, -1.0])
    assert bit_difference(a, a.clone()) == (0, 0.0, 0)
    count, gap, ulps = bit_difference(a, torch.tensor([-0.0, torch.nextafter(torch.tensor(1.0), torch.tensor(2.0)),
                                                       -1.0]))
    assert count == 2 and gap == pytest.approx(2.0**-23) and ulps == 1, "-0 differs from +0 in its bits"
    tiny = torch.tensor([1e-45])
    assert bit_difference(tiny, -tiny)[2] == 2, "ulps are counted across zero"


def test_a_batch_size_switch_declared_invariant_fails_with_its_evidence():
    example = {**_example(257), "window": (129, 128)}
    with pytest.raises(CheckFailure, match=r"declared batch invariant, but y rows 129\.\.256 of a call of 257 rows"):
        _recorded(check_batch_invariance, LN_BATCH_SIZE_SWITCH, example)


def test_undeclared_the_same_switch_is_a_finding_not_a_failure():
    example = {**_example(257), "window": (129, 128)}
    for declared in (None, False):
        kernel = dataclasses.replace(LN_BATCH_SIZE_SWITCH, batch_invariant=declared)
        [point] = _recorded(check_batch_invariance, kernel, example)
        finding = Finding.model_validate(point["finding"])
        assert finding.holds is False and finding.forward is False and finding.declared is declared
        assert "ulp" in finding.evidence[0] and "257 rows" in finding.evidence[0]


def test_below_the_switch_and_for_a_correct_kernel_the_rows_keep_their_bits():
    [point] = _recorded(check_batch_invariance, LN_BATCH_SIZE_SWITCH, {**_example(255), "window": (127, 128)})
    assert Finding.model_validate(point["finding"]).holds is True
    [point] = _recorded(check_batch_invariance, LN_TEXTBOOK_DECLARED_BITWISE, {**_example(257), "window": (0, 128)})
    assert Finding.model_validate(point["finding"]).holds is True


def test_a_random_order_dweight_fails_determinism_where_declared_and_is_reported_where_not():
    with pytest.raises(CheckFailure, match="declared deterministic, but dweight of call 2 vs call 1"):
        _recorded(check_determinism, LN_ATOMIC_DWEIGHT, _example(17))
    [point] = _recorded(check_determinism, dataclasses.replace(LN_ATOMIC_DWEIGHT, deterministic=None), _example(17))
    finding = Finding.model_validate(point["finding"])
    assert (finding.forward, finding.backward, finding.holds) == (True, False, False)


def test_a_tests_findings_merge_into_one_with_the_differences_first():
    same = Finding(property="deterministic", forward=True, backward=True, evidence=["y, dx bit-identical"])
    other = Finding(property="deterministic", forward=True, backward=False, evidence=["dweight differs"])
    merged = summarize([{"ratio": None, "finding": same.model_dump()}, {"ratio": None, "finding": other.model_dump()}])
    assert merged["finding"] == {**other.model_dump(mode="json"), "forward": True}
    assert summarize([{"ratio": 0.5}])["finding"] is None
    assert other.line().startswith("deterministic: no (forward yes, backward no; undeclared): dweight differs")


def _document(finding: Finding) -> dict:
    result = {"claim": "ln.determinism", "kernel": "k", "kind": "layernorm", "status": "passed",
              "finding": finding.model_dump(mode="json")}
    return {"schema": "normverify.results/1", "complete": True, "kernels": [{"name": "k", "kind": "layernorm"}],
            "results": [result]}


def test_the_terminal_and_the_report_show_each_kernels_verdicts():
    from verify.commands.run import bitwise_table
    from verify.report.claims import claim_section
    from verify.report.model import arrange
    from verify.report.tables import bitwise_table as report_table
    from verify.report.texify import escape

    finding = Finding(property="deterministic", forward=True, backward=False, evidence=["dweight differs"])
    document = parse(_document(finding))
    assert bitwise_findings(document.results) == {"k": {"deterministic": finding}}
    console = Console(width=200, record=True)
    console.print(bitwise_table(document))
    text = console.export_text()
    assert "k " in text and "dweight differs" in text and " no " in text and "not measured" in text
    report = arrange([document])
    tex = report_table(report)
    assert "dweight differs" in tex and escape("deterministic: not declared") in tex
    section = claim_section(report, "ln.determinism", Path("out"), Path("out/figures"))
    assert escape(finding.line()) in section, "the claim's section says what was measured"


def test_declarations_are_true_false_or_undeclared():
    with pytest.raises(UsageError, match="batch_invariant must be True, False or None"):
        Kernel("k", "layernorm", lambda x, weight, bias, eps: x, batch_invariant="yes")
    entry = Kernel("k", "layernorm", lambda x, weight, bias, eps: x, deterministic=True).as_json()
    assert entry["deterministic"] is True and entry["batch_invariant"] is None


def test_a_kernel_updating_its_residual_in_place_gets_the_same_inputs_each_call():
    """Forward only (no grad_fn: the inputs go to the kernel as they are, not as autograd leaves' copies)."""
    from corpus.residual import RMS_IN_PLACE_DECLARED

    def forward_only(x, residual, weight, eps):
        return tuple(t.detach() for t in RMS_IN_PLACE_DECLARED.fn(x, residual, weight, eps))

    example = _example(17)
    del example["bias"]
    example.update(residual=torch.randn(17, 64), dh=torch.randn(17, 64))
    kernel = dataclasses.replace(RMS_IN_PLACE_DECLARED, name="in_place_forward_only", fn=forward_only,
                                 deterministic=True, batch_invariant=True)
    for check, extra in ((check_determinism, {}), (check_batch_invariance, {"window": (13, 4)})):
        [point] = _recorded(check, kernel, {**example, **extra})
        finding = Finding.model_validate(point["finding"])
        assert finding.holds is True and finding.backward is None, "forward only: the backward is not measured"


def test_int8_values_are_compared_as_integers():
    a, b = torch.tensor([-128, 5, 0], dtype=torch.int8), torch.tensor([-127, 5, 0], dtype=torch.int8)
    assert bit_difference(a, b) == (1, 1.0, 1), "INT8 q: one step apart, not a sign-magnitude distance"


def _running_example(samples: int, training: bool, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    shape = (samples, 4, 4)
    return {"x": torch.randn(shape, generator=generator), "dy": torch.randn(shape, generator=generator),
            "weight": torch.randn(4, generator=generator), "bias": torch.randn(4, generator=generator),
            "running_mean": torch.randn(4, generator=generator),
            "running_var": torch.rand(4, generator=generator) + 0.5,
            "training": training, "momentum": 0.1, "eps": 1e-5}


def test_batchnorm_eval_switch_fails_and_training_mode_is_never_drawn_for_batch_invariance():
    from corpus.bitwise import BN_BATCH_SIZE_SWITCH
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from properties.draws.bitwise_strategies import bitwise_examples

    with pytest.raises(CheckFailure, match=r"declared batch invariant, but y rows 129\.\.256 of a call of 257 samples "
                                           r"of shape \(4, 4\), float32, eval"):
        _recorded(check_batch_invariance, BN_BATCH_SIZE_SWITCH, {**_running_example(257, False), "window": (129, 128)})

    @settings(max_examples=8, deadline=None, database=None)
    @given(data=st.data())
    def drawn(data):
        example = data.draw(bitwise_examples(BN_BATCH_SIZE_SWITCH, window=True))
        assert example["training"] is False and example["running_mean"] is not None, "BatchNorm: eval mode only"

    drawn()


def test_determinism_compares_the_running_buffers_a_training_call_updates():
    from corpus.batchnorm import BN_CORRECT, batchnorm

    coin = torch.Generator().manual_seed(0)

    def jittered(x, running_mean, running_var, weight, bias, training, momentum, eps):
        y = batchnorm(x, running_mean, running_var, weight, bias, training, momentum, eps)
        if training:  # the buffer's update lands one ulp up or not, call to call
            with torch.no_grad():
                running_mean.copy_(torch.where(torch.rand((), generator=coin) < 0.5, running_mean,
                                               torch.nextafter(running_mean, running_mean + 1)))
        return y

    declared = dataclasses.replace(BN_CORRECT, name="bn_declared", deterministic=True)
    [point] = _recorded(check_determinism, declared, _running_example(17, True))
    finding = Finding.model_validate(point["finding"])
    assert finding.holds and "running_mean, running_var bit-identical" in finding.evidence[0]
    jitter = dataclasses.replace(declared, name="bn_jitter", fn=jittered)
    with pytest.raises(CheckFailure, match="declared deterministic, but running_mean of call 2 vs call 1"):
        for _ in range(20):  # the jitter lands alike in both calls half the time
            _recorded(check_determinism, jitter, _running_example(17, True))


def test_a_static_scale_is_compared_whole_and_a_dynamic_one_per_row():
    from corpus.bitwise import RMS_QUANT_BATCH_SIZE_SWITCH

    example = _example(257)
    del example["bias"], example["dy"]
    dynamic = {**example, "scale": None, "quant_dtype": torch.float8_e4m3fn, "window": (129, 128)}
    with pytest.raises(CheckFailure, match=r"declared batch invariant, but scale rows 129\.\.256"):
        _recorded(check_batch_invariance, RMS_QUANT_BATCH_SIZE_SWITCH, dynamic)
    static = {**dynamic, "scale": torch.tensor([0.01])}
    kernel = dataclasses.replace(RMS_QUANT_BATCH_SIZE_SWITCH, batch_invariant=None)
    [point] = _recorded(check_batch_invariance, kernel, static)
    finding = Finding.model_validate(point["finding"])
    assert finding.backward is None, "forward only"
    assert all("scale" not in line for line in finding.evidence if "differ" in line), "the given scale comes back"
