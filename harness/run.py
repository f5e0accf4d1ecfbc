"""The pipeline: suite + revisions → one server per (configuration, revision) → verdicts.

    execute(req)
      open_run           harness.pipeline.open: load the suite and plan it (harness.pipeline.plan),
                         check both revisions out, the servers' interpreter, the outputs writable,
                         each revision's environment, the store read once: bad input fails here
      run_scheduled      harness.pipeline.schedule: every unit on its slots, in the start order,
                         a job (harness.pipeline.steps) or an interleaved configuration
                         (harness.pipeline.interleave)
      verify_relaunched  harness.pipeline.verify_relaunched: every other *different* row's
                         reproducer on servers of each side started again
      finish             harness.pipeline.finish: compare base vs candidate, write results.json

A crash loses at most the cell in flight: cells are stored as they finish, and results.json
is rewritten after each configuration.
"""

from __future__ import annotations

from harness.errors import UsageError
from harness.jobs import RunRequest
from harness.observer import QuietObserver, RunObserver, SuiteObserver
from harness.pipeline.finish import finish
from harness.pipeline.open import open_run
from harness.pipeline.schedule import run_scheduled
from harness.pipeline.verify_relaunched import verify_relaunched
from harness.results import RunResult


def execute(req: RunRequest, observer: RunObserver | None = None) -> RunResult:
    return execute_together((req,), observer)[0]


def execute_together(reqs: tuple[RunRequest, ...], observer: RunObserver | None = None) -> list[RunResult]:
    """Several suites' runs (a matrix entry's) in one slot pool: every job of every suite waits
    for a free slot in one queue, suite after suite in plan order, so the suites overlap instead
    of each waiting for the slowest server of the one before. Each run keeps its own outputs
    (results.json, logs) and verdicts, as if it had run alone. The requests must share their
    slots (one pool)."""
    if any(req.slots != reqs[0].slots or req.start_order != reqs[0].start_order for req in reqs):
        raise ValueError("runs in one pool must have the same slots and start order")
    folders = [req.out_dir.resolve() for req in reqs]
    if len(set(folders)) < len(folders):  # one run's results.json would overwrite the other's
        shared = next(f for f in folders if folders.count(f) > 1)
        raise UsageError(f"{shared}: two runs of one pool would write it "
                         f"({', '.join(str(r.suite_path) for r, f in zip(reqs, folders) if f == shared)})")
    observer = observer or QuietObserver()
    runs = [open_run(req, observer if len(reqs) == 1 else SuiteObserver(observer, req.suite_path.stem))
            for req in reqs]
    for run in runs:  # on disk from the start, so that `--resume` works after any death, even in the first cell
        run.save(partial=True)
    observer.begin(sum(2 * len(cp.probes) for run in runs for cp in run.plans))
    try:
        run_scheduled(runs)
        for run in runs:
            verify_relaunched(run)
    except KeyboardInterrupt as exc:  # Ctrl-C / SIGTERM: what finished is on disk for `--resume`
        for run in runs:
            run.save(partial=True)
        # The `run` command's own run (it records its options) continues with `run --resume`.
        exc.resume_out = reqs[0].out_dir if len(reqs) == 1 and reqs[0].options else None  # type: ignore[attr-defined]
        exc.resume_options = reqs[0].options  # type: ignore[attr-defined]
        raise
    finally:
        observer.end()
    return [finish(run) for run in runs]
