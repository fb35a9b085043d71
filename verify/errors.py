"""Errors that reach the user as one clear line instead of a traceback."""


class UsageError(Exception):
    """Bad usage or an input that cannot be loaded (exit code 2)."""
