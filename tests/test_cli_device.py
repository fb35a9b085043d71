"""--device cuda:N|cpu for normverify run and list (core.device_option), and list --probe printing each built-in's
rows as soon as it is probed (issue 25, item 5)."""

from __future__ import annotations

import os

import pytest

from core import device_option
from core.errors import UsageError
from core.registry import Builtin, Kernel
from verify import cli
from verify.commands import list as list_command


@pytest.mark.parametrize(("device", "visible", "chosen"), [
    ("cpu", None, ""), ("cpu", "0,1", ""), ("cuda", None, "0"), ("cuda:1", None, "1"), ("cuda:1", "2,3", "3"),
    ("cuda:0", "GPU-abc", "GPU-abc")])
def test_the_device_is_the_only_one_the_process_sees(device, visible, chosen):
    assert device_option.visible_devices(device, visible) == chosen


@pytest.mark.parametrize(("device", "visible"), [("gpu", None), ("cuda:x", None), ("cuda:2", "0,1"), ("cpu:0", None)])
def test_a_device_that_is_not_there_is_a_usage_error(device, visible):
    with pytest.raises(UsageError, match="--device"):
        device_option.visible_devices(device, visible)


def test_run_on_a_cuda_device_of_a_cpu_host_is_refused_in_one_line(monkeypatch, capsys):
    monkeypatch.setenv(device_option.VARIABLE, "")
    assert cli.main(["run", "--kernel", "torch", "--device", "cuda:0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--device cuda:0" in err and len(err.splitlines()) == 1


def test_list_on_the_cpu_hides_every_gpu_from_the_process_and_its_children(monkeypatch, capsys):
    monkeypatch.setenv(device_option.VARIABLE, "0")  # restored after the test
    monkeypatch.setattr(list_command, "builtins", lambda: {})
    assert cli.main(["list", "--device", "cpu"]) == 0
    assert os.environ[device_option.VARIABLE] == ""


def test_probed_rows_are_printed_as_each_built_in_is_probed(monkeypatch, capsys):
    printed_before_the_second = []

    def second():
        printed_before_the_second.append(capsys.readouterr().out)
        return [Kernel("b-second:rmsnorm", "rmsnorm", lambda x, w, eps: x, spec="b-second", device="cpu")]

    table = {"a-first": Builtin("a-first", "first", lambda: [
                 Kernel("a-first:layernorm", "layernorm", lambda x, w, b, eps: x, spec="a-first", device="cpu")]),
             "b-second": Builtin("b-second", "second", second)}
    monkeypatch.setattr(list_command, "builtins", lambda: table)
    assert cli.main(["list", "--probe"]) == 0
    (before,) = printed_before_the_second
    assert before.splitlines()[0].split()[:2] == ["SPEC", "KERNEL"] and "a-first:layernorm" in before
    rest = capsys.readouterr().out.splitlines()
    assert len(rest) == 1 and rest[0].index(" rmsnorm ") + 1 == before.splitlines()[0].index("KIND")
