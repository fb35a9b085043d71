"""Text that goes into the LaTeX report: escaped, ASCII-safe, and breakable where it is long.

Everything the report prints that did not come from proofs/ (kernel names, specs, paths, error
messages, counterexample dumps) passes through :func:`escape` or :func:`verbatim_block`, so no
character of it can change the document's structure.
"""

from __future__ import annotations

import math
import re
import textwrap

_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
}
LONG_RUN = 12
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# Non-ASCII symbols that show up in messages, with an ASCII spelling for verbatim text and a
# LaTeX one for running text; anything else non-ASCII becomes "?".
_SYMBOLS = {
    "σ": ("sigma", r"$\sigma$"), "ε": ("eps", r"$\varepsilon$"), "μ": ("mu", r"$\mu$"),
    "κ": ("kappa", r"$\kappa$"), "γ": ("gamma", r"$\gamma$"), "β": ("beta", r"$\beta$"),
    "≤": ("<=", r"$\le$"), "≥": (">=", r"$\ge$"), "≈": ("~=", r"$\approx$"), "×": ("x", r"$\times$"),
    "√": ("sqrt", r"$\surd$"), "∞": ("inf", r"$\infty$"), "±": ("+/-", r"$\pm$"), "²": ("^2", r"$^2$"),
    "−": ("-", "-"), "–": ("-", "--"), "—": ("-", "---"), "…": ("...", r"\dots{}"),
    "‖": ("||", r"$\|$"), "’": ("'", "'"), "“": ('"', "``"), "”": ('"', "''"),
}


def escape(text: object, breakable: bool = True) -> str:
    """``text`` as LaTeX that typesets it literally.

    When ``breakable``, a line may break after any punctuation and inside a run of more than
    ``LONG_RUN`` letters or digits (every ``LONG_RUN // 2``), so names and paths fit narrow columns.
    """
    out = []
    run = 0
    for char in str(text):
        if char in _SPECIALS:
            piece = _SPECIALS[char]
        elif char.isascii():
            piece = char if char.isprintable() or char == "\n" else "?"
        else:
            piece = _SYMBOLS.get(char, ("?", "?"))[1]
        run = run + 1 if char.isalnum() else 0
        punctuation = not char.isalnum() and not char.isspace()
        if breakable and (punctuation or (run > LONG_RUN // 2 and run % (LONG_RUN // 2) == 0)):
            piece += r"\allowbreak{}"
        out.append(piece)
    return "".join(out)


def ascii_text(text: object) -> str:
    """``text`` for verbatim blocks: terminal color codes dropped, control characters as "?", every
    non-ASCII character spelled in ASCII."""
    text = _ANSI_ESCAPE.sub("", str(text))
    return "".join((c if c.isprintable() or c in "\n\t" else "?") if c.isascii() else _SYMBOLS.get(c, ("?", "?"))[0]
                   for c in text)


def verbatim_block(text: str, width: int = 92, max_lines: int = 40) -> str:
    """A small-print verbatim block of ``text``, hard-wrapped at ``width`` and cut at ``max_lines``."""
    lines: list[str] = []
    for line in ascii_text(text).expandtabs(4).splitlines() or [""]:
        lines.extend(textwrap.wrap(line, width, subsequent_indent="  ", drop_whitespace=False,
                                   break_on_hyphens=False) or [""])
    if len(lines) > max_lines:
        lines = [*lines[: max_lines - 1], f"... ({len(lines) - max_lines + 1} more lines)"]
    return _verbatim(lines)


def command_block(command: str, width: int = 100) -> str:
    """A shell command as a verbatim block that still runs when copied: lines continue with a backslash
    between words, and a word too long for a line (a path) continues on the next line's first column
    (a backslash-newline inside an unquoted word is removed by the shell)."""
    lines = [""]
    for word in ascii_text(command).split(" "):
        if lines[-1].strip() and len(lines[-1]) + 1 + len(word) > width - 2:
            lines[-1] += " \\"
            lines.append("  ")
        separator = " " if lines[-1].strip() else ""
        while len(lines[-1]) + len(separator) + len(word) > width - 1 and not set("'\"") & set(word):
            room = width - 1 - len(lines[-1]) - len(separator)
            lines[-1] += separator + word[:room] + "\\"
            lines.append("")
            word, separator = word[room:], ""
        lines[-1] += separator + word
    return _verbatim(lines)


def _verbatim(lines: list[str]) -> str:
    body = "\n".join(line.replace(r"\end{Verbatim}", r"\end {Verbatim}") for line in lines)
    return "\\begin{Verbatim}[fontsize=\\footnotesize,frame=single]\n" + body + "\n\\end{Verbatim}\n"


def number(value: float | None, digits: int = 3) -> str:
    """A compact number for tables: 3 significant digits, scientific when far from 1, '--' for None."""
    if value is None:
        return "--"
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return r"$\infty$" if value > 0 else r"$-\infty$"
    if value == 0 or 1e-3 <= abs(value) < 1:
        return f"{value:.{digits}g}"
    if 1 <= abs(value) < 1e4:
        return f"{value:.{max(digits - len(str(int(abs(value)))), 0)}f}"
    mantissa, exponent = f"{value:.{digits - 1}e}".split("e")
    return f"${mantissa}\\cdot 10^{{{int(exponent)}}}$"
