"""The counterexamples of a failed test, one per distinct failure: inputs, message, saved file, commands.

Hypothesis reports a failure by the exception its minimal example raised, with its notes (``__notes__``: the
falsifying example, the ``@reproduce_failure`` blob, a ``@seed``), and several distinct failures as an
exception group. ``properties.evidence.failed_example`` gives the inputs that raised each exception;
``properties.run.counterexamples.save`` stores them for ``normverify replay`` in the folder the plugin names.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.errors import one_line
from core.registry import Kernel
from core.results import replay_command
from properties import evidence
from properties.run import counterexamples
from properties.run.rerun import rerun_command
from properties.run.status import MAX_MESSAGE, described, distinct_failures, exception_parts

_REPRODUCE = re.compile(r"@reproduce_failure\([^)]*\)")
_SEED = re.compile(r"@seed\((\d+)\)")


def counterexamples_of(item: pytest.Item, error: BaseException, claim: str, kernel: Kernel | None,
                       folder: Path) -> list[dict]:
    """One counterexample per distinct failure of the test (``error``: its exception, or Hypothesis' group)."""
    members = distinct_failures(error)
    rerun = rerun_command(item)
    found = []
    for member in members:
        example = evidence.failed_example(member) or (evidence.last_example() if len(members) == 1 else None)
        found.append(_counterexample(member, example, claim, kernel, folder, rerun))
    return found


def _counterexample(error: BaseException, example: evidence.Example | None, claim: str, kernel: Kernel | None,
                    folder: Path, rerun: str) -> dict:
    notes = [note.strip() for part in exception_parts(error) for note in getattr(part, "__notes__", ())]
    blob = next((m.group(0) for n in notes if (m := _REPRODUCE.search(n))), None)
    seed = next((int(m.group(1)) for n in notes if (m := _SEED.search(n))), None)
    hypothesis_text = "\n".join(n for n in notes if not _REPRODUCE.search(n) and not _SEED.search(n))
    saved, problem = _save(claim, kernel, example, folder)
    text = counterexamples.describe(example[2]) if example is not None else ""
    return {"text": text or hypothesis_text or described(error)[:MAX_MESSAGE], "message": one_line(error),
            "file": saved, "replay": replay_command(Path(saved)) if saved else rerun, "rerun": rerun,
            "hypothesis": hypothesis_text, "reproduce": blob, "seed": seed, "save_problem": problem}


def _save(claim: str, kernel: Kernel | None, example: evidence.Example | None,
          folder: Path) -> tuple[str | None, str | None]:
    """(file, None) when the example was saved, else (None, why not; None when there was nothing to save)."""
    if example is None or kernel is None:
        return None, None
    check, _, inputs = example
    try:
        saved = counterexamples.save(claim=claim, check=check, kernel=kernel, example=inputs,
                                     directory=folder)
    except Exception as error:
        return None, f"not saved: {one_line(error)}"
    return str(saved), None
