"""The command's front door and the Hypothesis profile selection (issue 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import settings

import verify
from properties.run import profiles
from verify.cli import main


def test_version_from_the_console_script_and_python_m():
    script = str(Path(sys.executable).with_name("normverify"))
    for argv in ([script, "--version"], [sys.executable, "-m", "verify", "--version"]):
        out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        assert out.strip() == f"normverify {verify.__version__}"


def test_help_lists_the_discovered_subcommands(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    text = capsys.readouterr().out
    import pkgutil

    import verify.commands

    for module in pkgutil.iter_modules(verify.commands.__path__):
        if not module.name.startswith("_"):
            assert module.name in text


def test_no_subcommand_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: normverify" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("option", "env", "expected"),
    [
        ("thorough", {"CI": "true", "NORMVERIFY_PROFILE": "dev"}, "thorough"),
        (None, {"CI": "true", "NORMVERIFY_PROFILE": "dev"}, "dev"),
        (None, {"CI": "true"}, "ci"),
        (None, {}, "ci"),  # plain `pytest properties/` is derandomized: dev's random examples are opt-in
        (None, {"NORMVERIFY_PROFILE": "dev"}, "dev"),
    ],
)
def test_profile_choice(monkeypatch, option, env, expected):
    for name in ("CI", "NORMVERIFY_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert profiles.chosen(option) == expected


def test_our_ci_profile_replaces_hypothesis_own():
    """Hypothesis registers a `ci` profile of its own when CI is set; ours must be the one loaded."""
    current = settings._current_profile
    try:
        profiles.load("ci")
        assert settings.default.derandomize is True
        assert settings.default.deadline is None
        assert settings.default.database is None
        assert settings.default.print_blob is True
    finally:
        settings.load_profile(current)


def test_unknown_profile_is_refused():
    with pytest.raises(ValueError, match="unknown Hypothesis profile"):
        profiles.chosen("fast")
