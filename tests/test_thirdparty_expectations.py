"""properties.run.expectations: --skips-file / --xfails-file turn listed claims into skip / xfail markers with
reasons."""

from __future__ import annotations

import textwrap

import pytest

from properties.run.expectations import Expectation, parse

pytest_plugins = ["pytester"]

# Two claims, two kernels; each test fails, so an xfail entry shows as xfailed and a missing one as failed.
CONFORMANCE_TESTS = """
    import pytest
    from core.registry import Kernel

    KERNELS = [Kernel("liger-rmsnorm-llama", "rmsnorm", lambda x, w, e: x, spec="liger-rmsnorm-llama"),
               Kernel("hf-llama-rmsnorm", "rmsnorm", lambda x, w, e: x, spec="hf-llama-rmsnorm")]

    @pytest.fixture(params=KERNELS, ids=lambda k: k.name)
    def rmsnorm_kernel(request):
        return request.param

    @pytest.mark.claim("rms.inputs_unmodified")
    def test_inputs(rmsnorm_kernel):
        assert False, "wrote into dy"

    @pytest.mark.claim("rms.forward")
    def test_forward(rmsnorm_kernel):
        assert False, "wrong output"

    def test_not_a_conformance_test():
        pass
"""


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nmarkers =\n    claim(id): the claim id\n")
    pytester.makepyfile(test_conformance=textwrap.dedent(CONFORMANCE_TESTS))
    return pytester


def run(suite: pytest.Pytester, *args: str) -> pytest.RunResult:
    # pytester restores sys.modules after each run; without these plugins the inner run takes 0.2 s, not 4 s
    unused_plugins = ("-p", "no:xdist", "-p", "no:anyio", "-p", "no:hypothesispytest")
    return suite.runpytest_inprocess("-p", "properties.run.expectations", "-rsxX", *unused_plugins, *args)


def test_xfails_file_marks_the_listed_claim_for_the_listed_kernel_only(suite):
    suite.path.joinpath("xfails.txt").write_text(
        "# Liger's default in_place=True backward\n"
        "rms.inputs_unmodified  liger-*   # backward writes dX into dy\n")
    result = run(suite, "--xfails-file", "xfails.txt")
    result.assert_outcomes(passed=1, failed=3, xfailed=1)
    result.stdout.fnmatch_lines(["XFAIL *test_inputs[[]liger-rmsnorm-llama[]]* - backward writes dX into dy "
                                 "(xfails.txt:2)"])


def test_skips_file_with_a_claim_glob_and_no_kernel_applies_to_every_kernel(suite):
    suite.path.joinpath("skips.txt").write_text("rms.*   # not this run\n")
    result = run(suite, "--skips-file", "skips.txt")
    result.assert_outcomes(passed=1, skipped=4)
    result.stdout.fnmatch_lines(["SKIPPED * not this run (skips.txt:1)"])


def test_an_xfail_that_passes_is_reported_as_xpass(suite):
    suite.path.joinpath("xfails.txt").write_text("* *  # everything, stale for the plain test\n")
    result = run(suite, "--xfails-file", "xfails.txt")
    result.assert_outcomes(passed=1, xfailed=4)


def test_entries_that_match_nothing_are_listed(suite):
    suite.path.joinpath("xfails.txt").write_text("ln.forward  # no LayerNorm in this run\n"
                                                 "rms.forward hf-*  # known\n")
    result = run(suite, "--xfails-file", "xfails.txt")
    result.assert_outcomes(passed=1, failed=3, xfailed=1)
    result.stdout.fnmatch_lines(["*expectations that matched no collected test*",
                                 "xfails.txt:1: xfail ln.forward  # no LayerNorm in this run"])


@pytest.mark.parametrize(("text", "message"), [
    ("rms.forward\n", "'rms.forward' needs a reason after '#'"),
    ("rms.forward liger extra  # why\n", "expected 'CLAIM \\[KERNEL\\]  # reason'"),
])
def test_malformed_lines_are_usage_errors_naming_file_and_line(tmp_path, text, message):
    path = tmp_path / "x.txt"
    path.write_text("# header\n\n" + text)
    with pytest.raises(pytest.UsageError, match=f"--xfails-file x.txt:3: {message}"):
        parse(path, "xfail")


def test_a_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(pytest.UsageError, match=r"--skips-file .*missing\.txt: No such file"):
        parse(tmp_path / "missing.txt", "skip")


def test_entries_match_claim_and_kernel_globs():
    entry = Expectation("xfail", "*.inputs_unmodified", "liger-*", "in place", "f:1")
    assert entry.matches("rms.inputs_unmodified", ("liger-rmsnorm-llama",))
    assert not entry.matches("rms.forward", ("liger-rmsnorm-llama",))
    assert not entry.matches("rms.inputs_unmodified", ("torch:rmsnorm", "torch"))
    assert Expectation("skip", "ln.forward", None, "r", "f:1").matches("ln.forward", ())
