"""The results document, typed and torch-free: statuses (worst first), the pydantic models of a
``normverify.results/1`` document, the plot series the claims declare, and a claim x kernel summary.

This is the one definition of the schema (docs/ARCHITECTURE.md, "Results JSON"): the results plugin
(:mod:`properties.run.results`) builds a :class:`Document`, the runner, the commands and the report read one
(:func:`load`, :func:`parse`), and ``core/results.schema.json`` is generated from it (:func:`json_schema`;
``python -m core.results`` rewrites it, tests/test_results_schema.py fails when it is stale and validates a
real run's output against it). The report imports this module, never the plugin, torch or pytest.
"""

from __future__ import annotations

import fnmatch
import json
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, model_serializer

from core.errors import UsageError
from core.kernel import KINDS

SCHEMA = "normverify.results/1"
SCHEMA_FILE = Path(__file__).with_name("results.schema.json")
NO_KERNEL = "(no kernel)"  # the kernel of a claim test that is not parametrized by one

# Worst first: a test (and a claim x kernel cell) shows the first of these among its parts. "unchecked": the test
# ran but none of its examples could be checked (no finite bound, or none drawn): never a pass.
Status = Literal["error", "failed", "xpassed", "unchecked", "xfailed", "passed", "skipped"]
STATUSES: tuple[str, ...] = get_args(Status)
FAILING = frozenset({"error", "failed"})
# Statuses that make `normverify run` exit 1: a failure, or a claim the run could not check.
NOT_PASSING = FAILING | {"unchecked"}
Kind = Literal[KINDS]  # type: ignore[valid-type]


def worst(statuses: Iterable[str | None]) -> str:
    """The first of :data:`STATUSES` among ``statuses`` ("error" when there is none of them)."""
    present = set(statuses)
    return next((s for s in STATUSES if s in present), "error")


def family(claim: str) -> str:
    """A claim's family, the prefix of its id: ``rms.spectral_norm`` -> ``rms`` (the kernels of one kind)."""
    return claim.partition(".")[0]


def ordered_claims(claims: Iterable[str], known: Sequence[str]) -> list[str]:
    """``claims`` grouped by family, families and claims in the order of ``known`` (proofs' CLAIMS), unknown last."""
    position = {claim: index for index, claim in enumerate(known)}
    families: dict[str, int] = {}
    for claim in known:
        families.setdefault(family(claim), len(families))
    return sorted(set(claims), key=lambda c: (families.get(family(c), len(families)), family(c),
                                              position.get(c, len(position)), c))


# ---------------------------------------------------------------- plot series, declared by the claims


@dataclass(frozen=True)
class PlotSeries:
    """The point keys a figure is drawn from, and the claims (globs of ids) whose checks record them."""

    name: str
    keys: tuple[str, ...]
    claims: tuple[str, ...]

    def point(self, **values: Any) -> dict:
        """``values`` as a point of this series; ValueError unless they are exactly its keys (``ratio`` aside, which
        ``properties.evidence.record`` adds): a check that renames a key fails instead of dropping a figure."""
        declared = set(self.keys) - {"ratio"}
        if set(values) != declared:
            raise ValueError(f"plot series {self.name!r} takes the keys {sorted(declared)}, got {sorted(values)}")
        return values

    def of(self, points: Iterable[dict]) -> list[dict]:
        """The points that carry every key of this series with a value."""
        return [p for p in points if all(p.get(k) is not None for k in self.keys)]


PLOT_SERIES = (
    PlotSeries("spectral", ("sigma2", "eps", "measured", "derived", "bound"), ("*.spectral_norm",)),
    PlotSeries("ratio", ("kappa", "ratio"), ("*.forward", "*.shift_invariance")),
    PlotSeries("dropout", ("p", "d", "measured", "var", "mean"), ("dropout.variance_bias",)),
)
SERIES = {series.name: series for series in PLOT_SERIES}


def series_of(claim: str) -> list[PlotSeries]:
    """The plot series the checks of ``claim`` record."""
    return [series for series in PLOT_SERIES if any(fnmatch.fnmatchcase(claim, glob) for glob in series.claims)]


def replay_command(path: Path) -> str:
    """The shell command that replays the counterexample file at ``path``."""
    return f"normverify replay {shlex.quote(str(path))}"


# ---------------------------------------------------------------- the document


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ReductionCheck(_Model):
    """``core.trees.TreeCheck.as_json()``: a declared exact tree compared bit for bit with the kernel on this build."""

    kernel: str
    tree: str
    device: str
    dtype: str
    build: str
    status: Literal["verified", "refuted", "unverifiable"]
    rows: int = 0
    detail: str = ""
    in_use: str = ""

    def line(self) -> str:
        """``torch:layernorm float32 on cpu (AVX512, torch 2.13.0): declared reduction aten_moments verified (48 rows
        bit for bit): using the exact tree aten_moments``; NOT verified or not verifiable with the reason."""
        what = {"verified": f"verified ({self.rows} rows bit for bit)", "refuted": f"NOT verified ({self.detail})",
                "unverifiable": f"not verifiable ({self.detail})"}[self.status]
        return (f"{self.kernel} {self.dtype} on {self.device} ({self.build}): declared reduction {self.tree} {what}: "
                f"using {self.in_use}")


class Environment(_Model):
    """What ran: versions, device, Hypothesis profile, the tolerances' error bound, the suite's commit, the date."""

    normverify: str | None = None
    python: str | None = None
    torch: str | None = None
    triton: str | None = None
    hypothesis: str | None = None
    device: str | None = None
    profile: str | None = None
    shrink: bool | None = None  # False: failures reported with the examples that failed, unminimized (--no-shrink)
    bound: str | None = None  # properties.bounds.tolerance.bound_in_use(): "probabilistic" or "worst-case"
    commit: str | None = None
    date: str | None = None
    cpu_capability: str | None = None  # the capability ATen dispatches its CPU kernels on (DEFAULT, AVX2, AVX512)
    reductions: list[ReductionCheck] = Field(default_factory=list)  # every declared exact tree, verified or not


class Capabilities(_Model):
    """``core.capabilities.Capabilities.as_json()``, or ``{"error": why}`` when discovery itself failed."""

    device: str | None = None
    dtypes: list[str] = Field(default_factory=list)
    not_tested: dict[str, str] = Field(default_factory=dict)
    faults: dict[str, str] = Field(default_factory=dict)
    backward: bool | None = None
    backward_fault: str | None = None
    double_backward: bool | None = None
    reasons: dict[str, str] = Field(default_factory=dict)
    error: str | None = None


class ReductionEntry(_Model):
    """A kernel's declared reduction shape (``proofs.reduction.Reduction.as_json()``), the statistics' sums its bound
    used; a kernel without one was checked with the order-agnostic bound."""

    run: int
    lanes: int = 1
    fan: int = 2
    level_cost: int = 1
    finish: int = 0
    block: int = 0
    max_width: int = 0
    two_pass: bool = False
    exact_tree: str = ""
    source: str = ""
    device: str = ""
    contract: bool = True



class QuantizationEntry(_Model):
    """A quantized-output kernel's declaration: ``core.kernel.Quantization.as_json()``."""

    formats: list[Literal["float8_e4m3fn", "float8_e5m2", "int8"]]
    scales: list[Literal["static", "dynamic"]]
    scale_convention: Literal["divide", "multiply"] = "divide"
    quantizes: Literal["storage", "float32"] = "storage"
    int8_rounding: Literal["half_even", "half_away"] = "half_even"
    int8_minimum: Literal[-128, -127] = -128
    minimum_scale: float = 0.0


class KernelEntry(_Model):
    """A kernel of the run: ``core.kernel.Kernel.as_json()`` and its capabilities (None until a test probed it)."""

    spec: str | None = None
    name: str
    kind: Kind
    weight_offset: float = 0.0
    backward_precision: Literal["float32", "storage"] = "float32"
    conventions: list[str] = Field(default_factory=list)
    residual_dtype: str | None = None
    in_place: list[str] = Field(default_factory=list)
    no_gradient: list[str] = Field(default_factory=list)
    output_dtype: Literal["input", "promoted", "weight"] = "input"
    parameter_dtypes: Literal["any", "same"] = "any"
    reduction: ReductionEntry | None = None
    flush_to_zero: bool = False
    normalizes: Literal["residual_out", "float32_sum"] = "residual_out"
    momentum_convention: Literal["torch", "keras"] = "torch"
    running_variance: Literal["unbiased", "biased"] = "unbiased"
    affine_precision: Literal["float32", "storage"] = "float32"
    batch_invariant: bool | None = None  # declared (core.kernel.BITWISE_DECLARATIONS); None: undeclared
    deterministic: bool | None = None
    quantization: QuantizationEntry | None = None  # the quantized-output kinds' declaration (core.kernel.Quantization)
    compiles_per_width: bool = False  # ci/dev runs drew its widths from a palette (core.kernel.Kernel)
    second_derivatives: bool = False  # its custom backward declared differentiable again (core.kernel.Kernel)
    description: str = ""
    capabilities: Capabilities | None = None


class Diagnosis(_Model):
    """One mechanism that explains a failed example (``properties.bounds.diagnosis``)."""

    mechanism: str
    ratio: float | None
    text: str
    leading: bool = False


class Point(BaseModel):
    """One example's evidence: its ratio (None for an exact check), how many values had no finite bound, the
    diagnosis of a failure, and its plot data (the keys of :data:`PLOT_SERIES` and descriptions such as d, dtype)."""

    model_config = ConfigDict(extra="allow")

    ratio: float | None = None
    unchecked: int = 0
    diagnosis: list[Diagnosis] | None = None

    @model_serializer(mode="wrap")
    def _lean(self, handler: SerializerFunctionWrapHandler) -> dict:
        """Written as recorded: no ``unchecked`` when 0, no ``diagnosis`` when there is none."""
        data = handler(self)
        if not data.get("unchecked"):
            data.pop("unchecked", None)
        if data.get("diagnosis") is None:
            data.pop("diagnosis", None)
        return data


class Counterexample(_Model):
    """One distinct minimal failing example: its inputs, the failure, its saved file and the commands to re-run it."""

    text: str
    message: str = ""  # this failure in one line (a test with several distinct failures has one per example)
    file: str | None = None  # the torch.save file (properties.run.counterexamples), None when not saved
    replay: str  # `normverify replay FILE` when saved, else the same as rerun
    rerun: str  # the pytest command that reruns the test
    hypothesis: str = ""  # what Hypothesis printed of the example
    reproduce: str | None = None  # the @reproduce_failure(...) blob
    seed: int | None = None
    save_problem: str | None = None  # why the file could not be saved


class View(_Model):
    """The claim's evidence is a view of another claim's (``proofs.claims.base.Claim.view_of``): its check is bounded
    by that claim's bounds on its own inputs and it has no input regime of its own."""

    of: str
    reason: str

    def text(self) -> str:
        return f"a view of the {self.of} evidence: {self.reason}"


BitwiseProperty = Literal["batch invariant", "deterministic"]
MAX_EVIDENCE = 6  # lines of evidence a finding keeps (the differing examples first)


class Finding(_Model):
    """A bitwise property a kernel may declare (``core.kernel.BITWISE_DECLARATIONS``: ``batch_invariant``,
    ``deterministic``) as the suite measured it: whether it held bit for bit in the forward (y, residual_out) and in
    the backward (the gradients compared: dx and d residual for batch invariance; dx, dweight, dbias, d residual for
    determinism) on every example (None: not measured, e.g. no backward), the declaration (True makes the claim a
    contract: a violation fails; None or False: a finding, reported and never a failure), and the evidence: the
    examples that differed (which output, batch size, position, max |difference|, in units in the last place), else
    what was compared."""

    property: BitwiseProperty
    declared: bool | None = None
    forward: bool | None = None
    backward: bool | None = None
    evidence: list[str] = Field(default_factory=list)

    @property
    def holds(self) -> bool | None:
        """False where either part differed, True where every measured part held, None where nothing was measured."""
        parts = [part for part in (self.forward, self.backward) if part is not None]
        return None if not parts else all(parts)

    def merged(self, other: Finding) -> Finding:
        """This finding and ``other`` (more examples of the same property) together: a part holds where it held in
        both; the evidence of a difference comes first."""

        def both(a: bool | None, b: bool | None) -> bool | None:
            return b if a is None else a if b is None else a and b

        forward, backward = both(self.forward, other.forward), both(self.backward, other.backward)
        failing = [f for f in (self, other) if f.holds is False]
        evidence = [line for f in (failing or [self, other]) for line in f.evidence]
        return Finding(property=self.property, declared=self.declared, forward=forward, backward=backward,
                       evidence=list(dict.fromkeys(evidence))[:MAX_EVIDENCE])

    @staticmethod
    def word(holds: bool | None) -> str:
        return {True: "yes", False: "no", None: "not measured"}[holds]

    def line(self) -> str:
        """``batch invariant: no (forward yes, backward no; undeclared): dx differed ...``."""
        declared = {True: "declared: a contract", False: "declared not", None: "undeclared"}[self.declared]
        first = f": {self.evidence[0]}" if self.evidence else ""
        return (f"{self.property}: {self.word(self.holds)} (forward {self.word(self.forward)}, backward "
                f"{self.word(self.backward)}; {declared}){first}")


class Result(_Model):
    """One claim x kernel test."""

    claim: str
    kernel: str = NO_KERNEL
    kind: Kind | None = None
    spec: str | None = None
    test: str = ""
    status: Status
    view: View | None = None  # shown next to the status: the claim is a view of another claim's evidence
    examples: int = 0
    unchecked: int = 0  # examples with a compared value without a finite bound: counted, never evidence
    worst_ratio: float | None = None
    dtypes: list[str] = Field(default_factory=list)
    widths: list[int] = Field(default_factory=list)
    # examples per class of each axis of the draw (properties.evidence.coverage_of): dtypes, layout, width, dims
    coverage: dict[str, dict[str, int]] = Field(default_factory=dict)
    worst_case: Point | None = None
    points: list[Point] = Field(default_factory=list)
    # the diagnosis of the reported failing example (properties.bounds.diagnosis; its point is the last one diagnosed,
    # not necessarily the worst case once Hypothesis has shrunk it)
    diagnosis: list[Diagnosis] | None = None
    counterexamples: list[Counterexample] = Field(default_factory=list)  # one per distinct failure
    # a bitwise property measured (*.batch_invariance, *.determinism): reported whether it holds, declared or not
    finding: Finding | None = None
    message: str = ""
    duration_s: float = 0.0

    @property
    def counterexample(self) -> Counterexample | None:
        """The first distinct failure's counterexample."""
        return self.counterexamples[0] if self.counterexamples else None

    @property
    def passing(self) -> bool:
        return self.status not in NOT_PASSING


class Progress(_Model):
    """Tests finished, tests collected (None until known), and the tests under way when the file was written."""

    done: int = 0
    total: int | None = None
    running: list[str] = Field(default_factory=list)


class RunError(_Model):
    """A failure that belongs to no claim: a test file that does not import, a worker that crashed between tests."""

    test: str
    message: str


class Document(_Model):
    """A ``normverify.results/1`` document; ``complete`` is true only when the session ended normally."""

    schema_: Literal["normverify.results/1"] = Field(SCHEMA, alias="schema")
    complete: bool = False
    environment: Environment = Field(default_factory=Environment)
    progress: Progress = Field(default_factory=Progress)
    kernels: list[KernelEntry] = Field(default_factory=list)
    results: list[Result] = Field(default_factory=list)
    errors: list[RunError] = Field(default_factory=list)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def as_json(self) -> dict:
        """The document as JSON data (the ``schema`` key first)."""
        return self.model_dump(mode="json", by_alias=True)

    def dumps(self) -> str:
        return json.dumps(self.as_json(), allow_nan=False) + "\n"

    def counts(self) -> dict[str, int]:
        """How many tests ended in each status."""
        found: dict[str, int] = {}
        for result in self.results:
            found[result.status] = found.get(result.status, 0) + 1
        return found

    @property
    def passed(self) -> bool:
        """Complete, no error outside the claims, and every result passing (or not applicable)."""
        return self.complete and not self.errors and all(r.passing for r in self.results)


def parse(data: object, source: str = "results") -> Document:
    """``data`` as a :class:`Document`; a UsageError (one line) when it is not a valid results document."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise UsageError(f"{source} is not a normverify results document (schema {found!r}, expected {SCHEMA!r})")
    try:
        return Document.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise UsageError(f"{source}: {where}: {first['msg']} ({error.error_count()} problem(s))") from None


def load(path: Path) -> Document:
    """The results document at ``path``; a UsageError (one line) when it is missing, unreadable or not one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(f"no such results file: {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read {path}: {error}") from None
    except json.JSONDecodeError as error:
        raise UsageError(f"{path} is not valid JSON ({error.msg} at line {error.lineno}); "
                         "was the run that wrote it killed before it finished?") from None
    return parse(data, str(path))


def json_schema() -> str:
    """The JSON Schema of :class:`Document`, as the text of ``core/results.schema.json``."""
    return json.dumps(Document.model_json_schema(by_alias=True, mode="serialization"), indent=2, sort_keys=True) + "\n"


# ---------------------------------------------------------------- the summary, claim x kernel


@dataclass
class SummaryRow:
    """One claim x kernel: the worst status of its tests, and their evidence together."""

    claim: str
    kernel: str
    results: list[Result]

    @property
    def status(self) -> str:
        return worst(r.status for r in self.results)

    @property
    def examples(self) -> int:
        return sum(r.examples for r in self.results)

    @property
    def unchecked(self) -> int:
        """Examples without a finite bound: counted, never evidence."""
        return sum(r.unchecked for r in self.results)

    @property
    def worst_ratio(self) -> float | None:
        ratios = [r.worst_ratio for r in self.results if r.worst_ratio is not None]
        return max(ratios) if ratios else None

    @property
    def seconds(self) -> float:
        return sum(r.duration_s for r in self.results)

    @property
    def view(self) -> View | None:
        """The claim's evidence as a view of another claim's (Result.view), or None."""
        return next((r.view for r in self.results if r.view is not None), None)


def bitwise_findings(results: Iterable[Result]) -> dict[str, dict[str, Finding]]:
    """{kernel: {property: finding}}: the findings of the results (``*.batch_invariance``, ``*.determinism``), each
    kernel's tests of one property merged (:meth:`Finding.merged`), kernels in the order of their first result."""
    found: dict[str, dict[str, Finding]] = {}
    for result in results:
        if result.finding is not None:
            mine = found.setdefault(result.kernel, {})
            known = mine.get(result.finding.property)
            mine[result.finding.property] = result.finding if known is None else known.merged(result.finding)
    return found


if __name__ == "__main__":  # python -m core.results: regenerate core/results.schema.json
    SCHEMA_FILE.write_text(json_schema(), encoding="utf-8")
    print(f"wrote {SCHEMA_FILE}")
