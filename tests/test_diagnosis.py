"""The diagnosis of failures (properties.bounds.diagnosis over proofs.mechanisms) and declared conventions.

Measured power on the corpus (the same run as tests/test_corpus.py): for the broken kernels whose bug is in the
library (``Entry.mechanism``), the diagnosis of their failed checks names the planted mechanism for at least
POWER of them and a wrong one for none (a diagnosis names a mechanism when it is among the leading ones: the
best fit and those predicting the same on that example); correct kernels never get a diagnosis. Then unit
tests on chosen examples: the sentence, the hint, a declared convention passing where the undeclared kernel fails.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from corpus import BROKEN, CORRECT, Entry
from corpus.conventions import RMS_LLAMA_CASTING, RMS_LLAMA_CASTING_DECLARED
from test_corpus import CorpusRun, corpus  # noqa: F401  (the session's corpus run, shared)

from core.errors import UsageError
from core.kernel import Kernel
from core.registry import resolve
from properties import evidence, norms
from properties.bounds import diagnosis, models
from properties.checks.forward import check_forward
from properties.checks.gradients import check_gradient_identities, check_vjp

POWER = 0.9
IN_LIBRARY = tuple(entry for entry in BROKEN if entry.mechanism)


def diagnoses(run: CorpusRun, entry: Entry) -> list[tuple[str, list[dict]]]:
    """(claim, diagnosis) of every failed result of the entry's kernels that carries one."""
    found = []
    for name in run.kernel_names(entry):
        for result in run.results(name):
            diagnosed = result.get("diagnosis") or (result.get("worst_case") or {}).get("diagnosis")
            if result["status"] == "failed" and diagnosed is not None:
                found.append((result["claim"], diagnosed))
    return found


def named(diagnosis_json: list[dict]) -> set[str]:
    return {m["mechanism"] for m in diagnosis_json if m["leading"]}


def acceptable(entry: Entry) -> set[str]:
    """The mechanisms a diagnosis of the entry may name: the planted one, or one its failures cannot be told from."""
    return {entry.mechanism, *entry.indistinct_from}


def verdict(run: CorpusRun, entry: Entry) -> str:
    """'named' (every diagnosed failure names the planted mechanism), 'wrong' (one names others, not it), or
    'silent' (no failure named any mechanism)."""
    found = [named(d) for _, d in diagnoses(run, entry)]
    if any(names and not names & acceptable(entry) for names in found):
        return "wrong"
    return "named" if any(entry.mechanism in names for names in found) else "silent"


def test_the_diagnosis_names_the_planted_mechanism_and_never_a_wrong_one(corpus: CorpusRun, record_property):  # noqa: F811
    verdicts = {entry.spec: verdict(corpus, entry) for entry in IN_LIBRARY}
    share = sum(v == "named" for v in verdicts.values()) / len(verdicts)
    checks = [(entry.mechanism, named(d)) for entry in IN_LIBRARY for _, d in diagnoses(corpus, entry)]
    record_property("diagnosis_power", round(share, 3))
    summary = "; ".join(f"{spec.split(':')[-1]}: {v}" for spec, v in verdicts.items())
    print(f"diagnosis on the corpus: {share:.0%} of {len(verdicts)} kernels named the planted mechanism; of their "
          f"{len(checks)} failed checks {sum(m in n for m, n in checks)} named it, "
          f"{sum(not n for _, n in checks)} named nothing ({summary})")
    assert not [spec for spec, v in verdicts.items() if v == "wrong"], summary
    assert share >= POWER, summary


@pytest.mark.parametrize("entry", IN_LIBRARY, ids=lambda entry: entry.spec.removeprefix("tests/corpus/"))
def test_no_diagnosis_of_a_broken_kernel_names_another_mechanism_alone(corpus: CorpusRun, entry: Entry):  # noqa: F811
    wrong = [(claim, sorted(named(d))) for claim, d in diagnoses(corpus, entry)
             if named(d) and not named(d) & acceptable(entry)]
    assert not wrong, f"planted {entry.mechanism}, named {wrong}"


@pytest.mark.parametrize("entry", CORRECT, ids=lambda entry: entry.spec.removeprefix("tests/corpus/"))
def test_correct_kernels_never_get_a_diagnosis(corpus: CorpusRun, entry: Entry):  # noqa: F811
    for name in corpus.kernel_names(entry):
        diagnosed = [r["claim"] for r in corpus.results(name) if r.get("diagnosis")
                     or any("diagnosis" in p for p in [r.get("worst_case") or {}, *r.get("points", [])])]
        assert not diagnosed, f"{name}: {diagnosed}"


# --- on chosen examples ------------------------------------------------------------------------------------------

# docs/findings.md [A]: the Llama casting's fp16 output two ulps from the exact value
LLAMA_WITNESS = {"x": torch.tensor([[1.541016, -0.293457]], dtype=torch.float16),
                 "weight": torch.tensor([1.770508, 0.853516], dtype=torch.float16), "eps": 1e-5}


def _message(kernel: Kernel, example: dict) -> tuple[str, list[dict]]:
    evidence.start()
    with pytest.raises(AssertionError) as failure:
        check_forward(kernel, **example)
    (point,) = evidence.take()
    return str(failure.value), point.get("diagnosis")


def test_an_undeclared_llama_casting_fails_with_the_diagnosis_and_the_hint():
    message, found = _message(RMS_LLAMA_CASTING, LLAMA_WITNESS)
    first = message.splitlines()[0]
    assert first.startswith("fails rms.forward (ratio ")
    assert "consistent with double_rounding: x_hat rounded to float16 before the weight multiply" in first
    assert "conventions=('double_rounding',)" in first
    assert [m["mechanism"] for m in found if m["leading"]] == ["double_rounding"]
    assert found[0]["ratio"] <= 1


def test_the_declared_convention_passes_the_same_example_and_says_so():
    evidence.start()
    check_forward(RMS_LLAMA_CASTING_DECLARED, **LLAMA_WITNESS)
    (point,) = evidence.take()
    assert point["ratio"] <= 1 and point["conventions"] == ["double_rounding"]


def test_the_probes_rule_out_a_wrong_eps_that_matched_one_row_by_coincidence():
    """A one-pass variance scales this fp16 row (|mean|/std = 200) as eps = 1e-6 or eps outside the root would: on
    the row alone those tight models fit; shifted by 30 std, or with another eps, they do not."""
    values = [10.0625, 10.023438, 9.921875, 9.953125, 10.007812, 9.96875, 10.023438, 10.070312, 10.023438,
              10.070312, 9.976562, 10.0, 9.921875, 9.960938, 9.929688, 10.03125, 9.992188, 9.9375, 10.023438,
              9.960938, 9.953125, 10.0625, 9.921875, 10.070312, 9.953125, 9.953125, 9.992188, 9.96875, 9.929688,
              10.023438, 10.078125, 9.976562, 10.0625]
    weight = torch.tensor([(0.0, -0.75, 1.5)[i % 3] for i in range(33)], dtype=torch.float16)
    x = torch.tensor([values], dtype=torch.float16)
    (kernel,) = resolve("tests/corpus/statistics.py:LN_ONE_PASS_VARIANCE")
    got = {"y": norms.as_float64(norms.forward(kernel, x, weight, None, 1e-5))}
    case = models.case_of(kernel, x, weight, None, 1e-5)
    on_the_row = {m.mechanism for m in diagnosis.explaining(kernel, case, got, "forward")}
    probed = diagnosis.explaining(kernel, case, got, "forward", diagnosis.probes(kernel, x, weight, None, 1e-5))
    assert {"eps_outside_root", "one_pass_variance"} <= on_the_row
    assert diagnosis.leading(probed)[0].mechanism == "one_pass_variance"
    assert not {"eps_outside_root", "fixed_eps"} & {m.mechanism for m in probed}


def test_a_failure_no_mechanism_explains_says_so():
    doubled = Kernel("doubled", "rmsnorm", lambda x, weight, eps: 2 * RMS_LLAMA_CASTING.fn(x, weight, eps))
    message, found = _message(doubled, {**LLAMA_WITNESS, "x": LLAMA_WITNESS["x"].float(),
                                        "weight": LLAMA_WITNESS["weight"].float()})
    assert "no mechanism of the library (proofs.mechanisms) explains it" in message.splitlines()[0]
    assert found == []


def test_an_example_beyond_the_diagnosed_size_says_it_is_not_diagnosed():
    """A failure on more than DIAGNOSED_ELEMENTS elements gets no mechanism, and its message says so and why; the
    same bug on a row of the example is diagnosed."""
    row = torch.tensor([[10.0 + 0.01 * (i % 7) for i in range(64)]], dtype=torch.float16)
    (kernel,) = resolve("tests/corpus/statistics.py:LN_ONE_PASS_VARIANCE")
    large = row.repeat(diagnosis.DIAGNOSED_ELEMENTS // 64 + 1, 1)
    message, found = _message(kernel, {"x": large, "weight": None, "eps": 1e-5})
    assert message.splitlines()[0].startswith(f"not diagnosed: the example has {large.numel()} elements, more than "
                                              f"the {diagnosis.DIAGNOSED_ELEMENTS}")
    assert found == []
    message, found = _message(kernel, {"x": row, "weight": None, "eps": 1e-5})
    assert "one_pass_variance" in {m["mechanism"] for m in found if m["leading"]}


def test_the_diagnosis_runs_only_on_the_reported_example():
    """Inside Hypothesis only its final (reported) run of an example is diagnosed; outside (replay) always."""
    assert diagnosis.final_example()


def test_conventions_are_validated_and_storage_backward_is_backward_precision():
    with pytest.raises(UsageError, match="unknown convention 'llama'"):
        Kernel("k", "rmsnorm", RMS_LLAMA_CASTING.fn, conventions=("llama",))
    declared = Kernel("k", "layernorm", RMS_LLAMA_CASTING.fn, conventions=("storage_statistics_backward",))
    assert declared.backward_precision == "storage"
    assert Kernel("k", "layernorm", RMS_LLAMA_CASTING.fn, backward_precision="storage").conventions == (
        "storage_statistics_backward",)
    assert declared.as_json()["conventions"] == ["storage_statistics_backward"]


def test_a_declared_convention_never_passes_an_element_its_model_does_not_cover():
    """Where the convention's bound is infinite the correct model's applies (nothing passes unchecked)."""
    x = torch.full((1, 64), 1000.0, dtype=torch.float16)
    x[0, 0] = 1001.0
    kernel = Kernel("k", "layernorm", RMS_LLAMA_CASTING.fn, conventions=("storage_accumulation",))
    _, bound, declared = models.expected_forward(kernel, x, None, None, 1e-5)
    assert declared == ("storage_accumulation",) and np.isfinite(bound).all()


# docs/findings.md [B], [E], [F]: dgamma from a rounded x_hat (Llama), fp16 sums of two autograd paths (T5), torch's
# fp16 mean/rstd on the CPU: the gradient examples where each shows
BACKWARD_B = {"x": torch.tensor([[1.541016, -0.293457, -2.179688]], dtype=torch.float16),
              "weight": torch.ones(3, dtype=torch.float16), "eps": 1e-5,
              "dy": torch.tensor([[1.541016, -0.293457, -2.179688]], dtype=torch.float16)}
BACKWARD_F = {"x": torch.tensor([[1.541016, -0.293457]], dtype=torch.float16), "weight": None, "bias": None,
              "eps": 1e-5, "dy": torch.tensor([[1.541016, -0.293457]], dtype=torch.float16)}
BUILTINS = [  # (built-in, check, example, the convention that explains it undeclared)
    ("hf-llama-rmsnorm", check_forward, LLAMA_WITNESS, "double_rounding"),
    ("hf-llama-rmsnorm", check_gradient_identities, BACKWARD_B, "double_rounding"),
    ("hf-t5-layernorm", check_forward, LLAMA_WITNESS, "double_rounding"),
    ("hf-t5-layernorm", check_vjp, BACKWARD_B, "storage_statistics_backward"),
    ("liger-rmsnorm-llama", check_forward, LLAMA_WITNESS, "double_rounding"),
    ("torch", check_vjp, BACKWARD_F, "storage_statistics_backward"),
]


@pytest.mark.parametrize(("spec", "check", "example", "convention"), BUILTINS,
                         ids=[f"{spec}-{check.__name__}" for spec, check, _, _ in BUILTINS])
def test_a_builtin_passes_as_declared_and_fails_undeclared_with_its_convention(spec, check, example, convention):
    try:
        kernels = resolve(spec, "layernorm" if "bias" in example else "rmsnorm")
    except UsageError as error:
        pytest.skip(str(error))
    (declared,) = kernels
    assert convention in declared.conventions
    evidence.start()
    check(declared, **example)
    undeclared = dataclasses.replace(declared, conventions=(), backward_precision="float32")
    with pytest.raises(AssertionError) as failure:
        check(undeclared, **example)
    first = str(failure.value).splitlines()[0]
    assert f"consistent with {convention}:" in first and f"conventions=({convention!r},)" in first, first
