"""normverify run's front: every bad request is one line and exit 2, found before pytest starts."""

from __future__ import annotations

import pytest

from verify import cli, runner


@pytest.fixture(autouse=True)
def no_pytest(monkeypatch):
    """These requests must be refused before the suite runs: starting it is a test failure."""

    def refuse(*args, **kwargs):
        raise AssertionError("the suite was started for a request that should have been refused")

    monkeypatch.setattr(runner, "run", refuse)
    monkeypatch.setattr(runner, "known_claims", lambda: ["ln.forward", "ln.jacobian", "rms.forward",
                                                         "dropout.values", "numerics.error_model"])


@pytest.mark.parametrize(("argv", "words"), [
    (["--kernel", "no-such-kernel"], "unknown kernel 'no-such-kernel'"),
    (["--kernel", "/nowhere/k.py:ln"], "no such file /nowhere/k.py"),
    (["--kernel", "torch", "--kernel", "json:no_such_function"], "has no attribute 'no_such_function'"),
    (["--kernel", "torch", "--claims", "ln.forwrd"], "--claims: 'ln.forwrd' matches no claim id"),
    (["--kernel", "torch", "--kind", "dropout", "--claims", "ln.*"], "no claim of the kernels' kinds (dropout)"),
    (["--kernel", "torch", "--timeout", "0"], "--timeout must be positive"),
    (["--kernel", "torch", "--pdf"], "--pdf needs --report DIR"),
])
def test_bad_requests_are_one_line_and_exit_2(capsys, argv, words):
    assert cli.main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and err.startswith("normverify run: ")


@pytest.mark.parametrize("argv", [["--kernel", "torch", "-n", "many"], ["--kernel", "torch", "--profile", "slow"],
                                  ["--kind", "layernorm"]])
def test_malformed_options_are_argparse_errors(capsys, argv):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["run", *argv])
    assert stopped.value.code == 2 and "Traceback" not in capsys.readouterr().err


def test_pytest_command_carries_the_request(tmp_path):
    request = runner.RunRequest(specs=["torch,triton"], json_path=tmp_path / "r.json", kind="rmsnorm",
                                claims=["rms.*"], profile="ci", workers="3", timeout=5)
    command = runner.pytest_command(request)
    text = " ".join(command)
    assert f"{runner.SUITE} -p properties.results --json {tmp_path / 'r.json'}" in text
    for words in ("--kernel torch --kernel triton", "--kind rmsnorm", "--claims rms.*", "--hypothesis-profile ci",
                  "-n 3", "--timeout 50"):
        assert words in text
    one_process = runner.pytest_command(runner.RunRequest(specs=["torch"], json_path=tmp_path / "r.json",
                                                          workers="0"))
    assert "-n" not in one_process and "--hypothesis-profile" not in one_process
