"""Finishing a run: base vs candidate compared (harness.recorder), results.json written."""

from __future__ import annotations

from harness.pipeline.open import Run
from harness.results import Role, RunResult


def finish(run: Run) -> RunResult:
    return run.save(partial=len(run.req.sides) < len(Role))  # one side: no pair to compare
