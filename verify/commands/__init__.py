"""Subcommands of `normverify`, one module each (see :mod:`verify.cli` for the contract)."""
