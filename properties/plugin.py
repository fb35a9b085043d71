"""The conformance run's pytest plugin: --kernel SPEC (repeatable), --kind, the Hypothesis profile, the kernel
fixtures, one claim id per item, and (through ``pytest_plugins``) the results and expectations plugins.

Registered through the ``pytest11`` entry point ``properties.plugin`` (pyproject.toml), so its options
exist wherever pytest runs: ``pytest --pyargs properties --kernel SPEC`` from any directory. The entry
point's name is the module's, so ``-p properties.plugin`` on top of it registers nothing twice; there is
no properties/conftest.py for the same reason.
"""

from __future__ import annotations

import pytest

from core import kinds
from core.errors import UsageError
from core.names import split_specs
from core.registry import KINDS, Kernel, resolve
from core.results import ReductionCheck
from proofs import error_model
from proofs.claims import CLAIMS
from properties.bounds import tolerance
from properties.draws import strategies
from properties.run import profiles
from properties.run.selection import kernel_of

# Plugins of the conformance run (e.g. the results plugin); other parts append their module name here.
pytest_plugins: list[str] = ["properties.run.results", "properties.run.expectations"]

DEFAULT_KERNEL = "torch"
CLAIM_MARKER = "claim(id): the claim id (proofs.claims) this conformance test checks"

# Registered at import, before Hypothesis' own plugin loads the profile named by --hypothesis-profile.
profiles.register()

# Fixtures that stand for the kernels under test, and the kinds each one takes (from the kind records, core.kinds):
# each plain norm alone and both together, the fused kinds by prologue, the grouped kinds, dropout, the quantized-output
# kinds, and every norm kind.
KERNEL_FIXTURES = {
    **{f"{name}_kernel": (name,) for name in kinds.kinds_where(lambda record: record.plain)},
    "norm_kernel": kinds.kinds_where(lambda record: record.plain),
    "add_norm_kernel": kinds.kinds_where(lambda record: record.prologue == "add" and not record.quantized),
    "dropout_add_kernel": kinds.kinds_where(lambda record: record.prologue == "dropout_add"),
    "groupnorm_kernel": kinds.kinds_where(lambda record: record.grouped),
    "channel_layernorm_kernel": kinds.kinds_where(lambda record: record.scope == "sample"),
    "running_norm_kernel": kinds.kinds_where(lambda record: record.running_statistics),
    "batchnorm_kernel": kinds.kinds_where(lambda record: record.batch_statistics),
    "instancenorm_kernel": kinds.kinds_where(lambda record: record.running_statistics and not record.batch_statistics),
    "dropout_kernel": kinds.kinds_where(lambda record: not record.is_norm),
    # the quantized-output kinds (properties/test_quantized.py), and those with a residual add
    "quant_norm_kernel": kinds.kinds_where(lambda record: record.quantized),
    "add_quant_norm_kernel": kinds.kinds_where(lambda record: record.quantized and record.has_residual),
    # the bitwise claims (properties/test_bitwise.py): the kinds whose family has them (proofs.claims.invariance:
    # every norm kind batch invariance, all but the dropout + add kind determinism, which has its own contract)
    "any_norm_kernel": kinds.kinds_where(lambda record: f"{record.prefix}.batch_invariance" in CLAIMS),
    "row_norm_kernel": kinds.kinds_where(lambda record: f"{record.prefix}.batch_invariance" in CLAIMS
                                         and record.scope == "row"),
    "unseeded_norm_kernel": kinds.kinds_where(lambda record: f"{record.prefix}.determinism" in CLAIMS
                                              and not record.dropout),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("normverify", "normverify conformance run")
    group.addoption("--kernel", action="append", default=None, metavar="SPEC",
                    help="kernel under test: a built-in (normverify list), MODULE:ATTR or PATH.py:ATTR; "
                         "repeatable, comma-separated lists allowed (default: torch)")
    group.addoption("--kind", default=None, choices=list(KINDS),
                    help="the kernel's kind, where it cannot be inferred; also restricts the run to it")
    group.addoption("--no-shrink", action="store_true", default=False,
                    help="report each failure with the example that failed, not a minimized one (Hypothesis's "
                         "shrinking off: the same verdicts, a failing test stops soon after its first failure)")
    group.addoption("--bound", default=error_model.DEFAULT_BOUND, choices=error_model.BOUNDS,
                    help="rounding-error bound of the tolerances: probabilistic (default; false-alarm probability "
                         "1e-13 per bound evaluation) or worst-case (always holds, far looser at large d)")


def kernel_specs(config: pytest.Config) -> list[str]:
    return split_specs(config.getoption("--kernel") or [DEFAULT_KERNEL])


def kernels_under_test(config: pytest.Config) -> list[Kernel]:
    """The kernels named by --kernel (each SPEC resolved with --kind); a SPEC that cannot load is a UsageError."""
    kernels = []
    for spec in kernel_specs(config):
        try:
            kernels.extend(resolve(spec, config.getoption("--kind")))
        except UsageError as error:
            raise pytest.UsageError(str(error)) from None
    return kernels


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", CLAIM_MARKER)
    config._normverify_profile = profiles.load(config.getoption("hypothesis_profile", None),
                                               shrink=not config.getoption("--no-shrink", False))
    config._normverify_kernels = kernels_under_test(config)
    tolerance.use_bound(config.getoption("--bound", error_model.DEFAULT_BOUND))


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize each kernel fixture over the kernels of its kinds, with the kernel's name as id.

    A fixture with no kernel of its kind in this run is left unparametrized; its tests are then
    deselected (:func:`pytest_collection_modifyitems`) rather than reported as skipped. A fixture of the
    same name defined by the tests themselves is theirs: the plugin (loaded in every pytest run through its
    entry point) leaves it alone.
    """
    for fixture, taken in KERNEL_FIXTURES.items():
        # A test module or conftest that defines a fixture of that name supplies its own kernels.
        if fixture in metafunc.fixturenames and not metafunc.definition._fixtureinfo.name2fixturedefs.get(fixture):
            kernels = [k for k in metafunc.config._normverify_kernels if k.kind in taken]
            if kernels:
                metafunc.parametrize(fixture, kernels, ids=[k.name for k in kernels])


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A kernel that declares ``compiles_per_width`` draws its widths from the palette
    (properties.draws.strategies.WIDTH_PALETTE) under every profile but thorough."""
    kernel = kernel_of(item)
    palette = (kernel is not None and kernel.compiles_per_width
               and getattr(item.config, "_normverify_profile", "ci") != "thorough")
    with strategies.palette_widths_only(palette):
        return (yield)


def _wants_a_kernel(item: pytest.Item) -> bool:
    return any(f in getattr(item, "fixturenames", ()) for f in KERNEL_FIXTURES)


def _claim_for_kind(item: pytest.Item, kernel: Kernel) -> None:
    """A test over LayerNorm and RMSNorm names both claim ids; keep the one of this kernel's kind.

    E.g. ``@pytest.mark.claim("ln.forward", "rms.forward")`` becomes ``claim("rms.forward")`` on
    the RMSNorm item, so ``item.get_closest_marker("claim").args[0]`` is always the item's claim.
    """
    marker = item.get_closest_marker("claim")
    if marker is None or len(marker.args) < 2:
        return
    mine = [c for c in marker.args if c.split(".")[0] == kernel.prefix]
    if len(mine) != 1:
        raise pytest.UsageError(f"{item.nodeid}: claim ids {marker.args} name no single {kernel.prefix}.* claim")
    item.own_markers[:] = [m for m in item.own_markers if m.name != "claim"]
    item.add_marker(pytest.mark.claim(mine[0]))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect tests of kinds without a kernel; give each norm test the claim id of its kernel's kind
    (first, so that the plugins that select or mark by claim see the final id)."""
    kept, deselected = [], []
    for item in items:
        kernel = kernel_of(item)
        if kernel is None and _wants_a_kernel(item):
            deselected.append(item)
            continue
        if kernel is not None:
            _claim_for_kind(item, kernel)
        kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_report_header(config: pytest.Config) -> list[str]:
    # the plugin module, as pytest registered it (importing it here first would defeat its assert rewriting)
    env = config.pluginmanager.get_plugin("properties.run.results").environment(config)  # what the JSON records
    return [
        f"normverify kernel: {', '.join(kernel_specs(config))}"
        + (f" (kind {config.getoption('--kind')})" if config.getoption("--kind") else ""),
        f"normverify profile: {env['profile']}, bound: {env['bound']}",
        f"versions: torch {env['torch']}, triton {env['triton'] or 'not installed'}, "
        f"hypothesis {env['hypothesis']}",
        f"device: {env['device']}, CPU capability: {env['cpu_capability']}",
        *(f"declared reduction: {ReductionCheck.model_validate(check).line()}" for check in env["reductions"]),
    ]
