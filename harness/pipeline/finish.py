"""Finishing a run: base vs candidate compared (harness.recorder), results.json written and
marked complete: the only record of the run a pass may be read from (harness/completeness.py)."""

from __future__ import annotations

from harness.pipeline.open import Run
from harness.results import Role, RunResult


def finish(run: Run) -> RunResult:
    # one side (a Slurm job's): no pair to compare
    return run.save(partial=len(run.req.sides) < len(Role), complete=True)
