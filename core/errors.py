"""Errors that reach the user as one clear line instead of a traceback."""


class UsageError(Exception):
    """Bad usage or an input that cannot be loaded (exit code 2)."""


def one_line(error: BaseException) -> str:
    """``Type: first line of the message`` (just ``Type`` for an empty message): how an error is reported."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__
