"""The `normverify` command.

Subcommands live one per module in :mod:`verify.commands`; each module defines

    NAME: str                                   # the subcommand
    HELP: str                                   # one line for --help
    def configure(parser: argparse.ArgumentParser) -> None
    def run(args: argparse.Namespace) -> int    # the exit code

and is found by discovery, so a subcommand exists exactly when its module does. Discovery imports every
command module to build the parser, so a module imports its heavy dependencies (torch, triton, sympy,
hypothesis, pytest, the suite) inside ``run``: ``normverify --help`` and usage errors answer at once
(tests/test_cli_startup.py).
Exit codes: 0 success, 1 a check failed, 2 bad usage (argparse's convention) or an input that
cannot be loaded; :class:`core.errors.UsageError` raised by a command becomes one line on
stderr and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence

import verify
import verify.commands
from core.errors import UsageError


def _command_modules() -> list:
    names = sorted(m.name for m in pkgutil.iter_modules(verify.commands.__path__) if not m.name.startswith("_"))
    return [importlib.import_module(f"verify.commands.{name}") for name in names]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="normverify",
        description="Verify LayerNorm, RMSNorm and dropout kernels against machine-checked derivations.",
    )
    parser.add_argument("--version", action="version", version=f"normverify {verify.__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in _command_modules():
        command = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        module.configure(command)
        command.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "_run"):
        parser.print_help()
        return 2
    try:
        return int(args._run(args))
    except UsageError as error:
        print(f"normverify {args.command}: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"normverify {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (normverify list | head): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
