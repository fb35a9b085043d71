"""Every code example of README.md and docs/*.md runs, and gives the verdict its text states.

The convention, for whoever writes the docs:

- A code example is a fenced block with a language (```python, ```yaml, ...; not ```text) or an indented
  block whose first line is a command (``normverify``, ``pytest``, ``python``, ``make``, ``pip``), or any
  block with a file header. Other blocks (output, formulas, schemas, diagrams) are text.
- A block whose first line is ``# NAME.EXT`` is a file: it is written, under NAME, to the directory the
  document's commands run in (a Python file is also imported there, and must import). A Python block
  without one is run, and must exit 0.
- A command block carries, on the line before it, what its commands give:
  ``<!-- doc-example: exit N -->`` (each command exits N; ``exit N with ARGS`` appends ARGS to every
  ``normverify run`` and ``pytest`` command, to narrow an expensive run to its point with ``--claims``;
  ``normverify run`` runs with ``-n 0``),
  or ``<!-- doc-example: skip REASON -->`` (not run; the reason is listed in pytest's summary).
  A line with a placeholder (an upper-case word such as SPEC or DIR, ``[...]``, ``...``) is a synopsis
  and is not run.

Commands run in a fresh directory per example (``pytest properties`` from the checkout), with the
default Hypothesis profile: what a reader who copies the line gets; but an example that must fail (exit N > 0) runs
with ``--no-shrink``: the same examples, the same verdicts, without the time spent minimizing counterexamples nobody
reads here (the minimal counterexamples and their replays are tests/test_runner_results.py's and
tests/test_report.py's).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMANDS = ("normverify", "pytest", "python", "make", "pip")
TEXT = ("", "text", "txt")  # fence languages of output and prose
FILE_HEADER = re.compile(r"^#\s+([\w.-]+\.\w+)\s*$")
ANNOTATION = re.compile(r"^<!--\s*doc-example:\s*(.*?)\s*-->$")
PLACEHOLDER = re.compile(r"(^|\s)[A-Z][A-Z_]+\b|\.\.\.|\[")
TIMEOUT_S = 600


@dataclass(frozen=True)
class Block:
    doc: Path
    line: int  # 1-based line of the block's first line
    language: str  # the fence's language; "" for an indented block
    text: str
    note: str  # the doc-example annotation before it, "" when none

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def first_line(self) -> str:
        return next((line for line in self.text.splitlines() if line.strip()), "-")

    @property
    def file_name(self) -> str | None:
        match = FILE_HEADER.match(self.first_line)
        return match[1] if match else None

    @property
    def is_example(self) -> bool:
        if self.file_name is not None or self.language not in TEXT:
            return True
        return not self.language and Path(self.first_line.split(maxsplit=1)[0]).name in COMMANDS


def blocks(doc: Path) -> list[Block]:
    """The fenced and indented code blocks of a Markdown file, each with the annotation on the line before it."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    found, note, n = [], "", 0
    while n < len(lines):
        line = lines[n]
        if line.startswith("```"):
            end = next(k for k in range(n + 1, len(lines)) if lines[k].startswith("```"))
            found.append(Block(doc, n + 2, line[3:].strip(), "\n".join(lines[n + 1:end]), note))
            n, note = end + 1, ""
            continue
        previous = lines[n - 1] if n else ""
        if line.startswith("    ") and line.strip() and (not previous.strip() or previous.startswith("#")):
            end = n
            while end < len(lines) and (lines[end].startswith("    ") or not lines[end].strip()):
                end += 1
            found.append(Block(doc, n + 1, "", "\n".join(x[4:] for x in lines[n:end]).rstrip(), note))
            n, note = end, ""
            continue
        match = ANNOTATION.match(line.strip())
        if match:
            note = match[1]
        elif line.strip():
            note = ""
        n += 1
    return found


EXAMPLES = [block for doc in DOCS for block in blocks(doc) if block.is_example]


def commands(block: Block) -> list[str]:
    """The block's command lines without their comments; a synopsis line (with a placeholder) is left out."""
    found = []
    for line in block.text.splitlines():
        command = line.split("  #")[0].strip()
        if command and not command.startswith("#") and not PLACEHOLDER.search(command):
            found.append(command)
    return found


def write_files(block: Block, where: Path) -> None:
    """Write the file blocks of ``block``'s document up to ``block`` into ``where``."""
    for earlier in blocks(block.doc):
        if earlier.line > block.line:
            break
        if earlier.file_name:
            (where / earlier.file_name).write_text(earlier.text + "\n", encoding="utf-8")


def environment() -> dict[str, str]:
    """The reader's environment: the venv's commands first, no profile chosen, nothing of this pytest run."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith(("PYTEST_", "NORMVERIFY_", "HYPOTHESIS_")) and name != "CI"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run(command: str, where: Path, extra: str, shrink: bool = True) -> subprocess.CompletedProcess:
    words = shlex.split(command)
    cwd = where
    unshrunk = [] if shrink else ["--no-shrink"]
    if words[:2] == ["normverify", "run"]:
        words += ["-n", "0", *unshrunk, *shlex.split(extra)]  # one process: the verdict does not depend on the workers
    elif words[0] == "pytest":
        words += [*unshrunk, *shlex.split(extra)]
    if words[0] == "pytest":  # `pytest properties` runs from the checkout; the example's files are given by path
        cwd = ROOT
        words = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                 *(str(where / w) if (where / w.split(":")[0]).is_file() else w for w in words[1:])]
    line = " ".join(shlex.quote(w) if not any(c in w for c in "*?") else w for w in words)
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=environment(), capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def test_every_example_says_what_it_gives():
    """A command block without a doc-example annotation would run unchecked: each must declare exit N or skip."""
    unannotated = [b.id for b in EXAMPLES if not b.note and not b.file_name and b.language != "python"]
    assert not unannotated, f"code examples without <!-- doc-example: exit N | skip REASON -->: {unannotated}"
    annotations = [b.note for b in EXAMPLES if b.note]
    assert all(re.fullmatch(r"skip \S.*|exit \d+( with .+)?", note) for note in annotations), annotations


@pytest.mark.parametrize("block", EXAMPLES, ids=[b.id for b in EXAMPLES])
def test_example(block: Block, tmp_path: Path):
    if block.note.startswith("skip "):
        pytest.skip(f"{block.id}: {block.note[5:]}")
    write_files(block, tmp_path)
    if block.file_name and not block.file_name.endswith(".py"):
        return
    if block.file_name or block.language == "python":
        code = f"import {block.file_name.removesuffix('.py')}" if block.file_name else block.text
        proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=environment(),
                              capture_output=True, text=True, timeout=TIMEOUT_S)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        return
    match = re.fullmatch(r"exit (\d+)(?: with (.+))?", block.note)
    assert match, f"{block.id}: annotation {block.note!r}"
    expected, extra = int(match[1]), match[2] or ""
    to_run = commands(block)
    assert to_run, f"{block.id}: every line is a synopsis; annotate it 'skip' with the reason"
    for command in to_run:
        proc = run(command, tmp_path, extra, shrink=expected == 0)
        assert proc.returncode == expected, (f"{block.id}: `{command} {extra}` exited {proc.returncode}, the text "
                                             f"says {expected}\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")
