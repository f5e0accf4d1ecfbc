"""A history measured through the normal pipeline.

`measure`: each revision is a one-side run (`RunRequest.sides`, as a Slurm job's) that takes
stored noisy cells too (`reuse_noisy`): a revision is measured once, by whichever history or
run stored it first, and appending a revision measures only that one. `pair_result`: two
revisions' stored cells compared as a run compares them (`RunRecorder`, `compare.compare_pair`),
no server started. `confirm`: a change point's two neighbours measured again together, the
normal paired comparison (interleaved rounds on two servers).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.envs import EnvOptions
from harness.jobs import RunRequest
from harness.paths import safe_name
from harness.observer import QuietObserver, RunObserver
from harness.pipeline.plan import cell_order, plan_request
from harness.pipeline.slots import cpu_slots
from harness.recorder import RunRecorder
from harness.results import CellResult, Role, RunResult
from harness.revisions import Revision
from harness.run import execute, execute_together


@dataclass(frozen=True)
class HistorySpec:
    """What every run of one history shares."""

    repo: Path
    suite: Path
    target: str
    store_root: Path
    out_dir: Path  # the dashboard's folder; runs/ and pairs/ under it
    configs: tuple[str, ...] = ()
    probes: tuple[str, ...] = ()
    overrides: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    overrides_text: tuple[str, ...] = ()  # as typed (`--set`): what a pair's reproducer repeats
    python: str | None = None
    env_options: EnvOptions = EnvOptions()
    slots: int = 1  # servers up at once while measuring (revisions share one pool)

    def request(self, base: Revision, candidate: Revision, out: Path, **kw: Any) -> RunRequest:
        options = {"repo": str(self.repo), "suite": str(self.suite), "target": self.target,
                   "overrides": list(self.overrides_text)}
        return RunRequest(suite_path=self.suite, target=self.target, base=base, candidate=candidate,
                          out_dir=out, store_root=self.store_root, python=self.python,
                          only_configs=self.configs, only_probes=self.probes, overrides=self.overrides,
                          env_options=self.env_options, options=options,
                          command_line=f"detcheck history ({base.short()} vs {candidate.short()})", **kw)


def run_dir(spec: HistorySpec, revision: Revision) -> Path:
    return spec.out_dir / "runs" / revision.short()


def pair_dir(spec: HistorySpec, older: str, newer: str) -> Path:
    return spec.out_dir / "pairs" / f"{older[:12]}-{newer[:12]}"


def confirm_dir(spec: HistorySpec, older: Revision, newer: Revision, config: str, probe: str) -> Path:
    return pair_dir(spec, older.sha or "", newer.sha or "") / safe_name(f"confirm-{config}-{probe}")


def measure(spec: HistorySpec, revisions: list[Revision], observer: RunObserver | None = None) -> list[RunResult]:
    """Every revision's cells, each a one-side run in one slot pool: what the store holds
    (exact and noisy) is taken, the rest measured. One slot holds one server, so a configuration
    whose probes interleave both sides runs its one side alone."""
    reqs = tuple(spec.request(r, r, run_dir(spec, r), sides=(Role.CANDIDATE,), reuse_noisy=True,
                              slots=cpu_slots(spec.slots), reproducer_budget=0) for r in revisions)
    if spec.slots == 1:  # one at a time: a failing revision's error is reported in its order
        return [execute(req, observer or QuietObserver()) for req in reqs]
    return execute_together(reqs, observer)


def pair_result(spec: HistorySpec, older: Revision, newer: Revision,
                cells: list[tuple[CellResult, CellResult]]) -> RunResult:
    """Two revisions' cells compared as a run of older vs newer compares them: each pair is
    (older's cell, newer's cell) of one (configuration, probe)."""
    req = spec.request(older, newer, pair_dir(spec, older.sha or "", newer.sha or ""))
    suite, plans = plan_request(req)
    recorder = RunRecorder(suite, req, cell_order(plans))
    quiet = QuietObserver()
    for base, cand in cells:
        recorder.add(base.with_role(Role.BASE), reused=True, observer=quiet)
        recorder.add(cand.with_role(Role.CANDIDATE), reused=True, observer=quiet)
    return recorder.result(partial=True)


def confirm(spec: HistorySpec, older: Revision, newer: Revision, config: str, probe: str) -> RunResult:
    """The change point's neighbours measured again together on two servers (noisy cells are
    never reused by a paired run): the comparison that confirms or rejects it."""
    req = dataclasses.replace(spec.request(older, newer, confirm_dir(spec, older, newer, config, probe), slots=cpu_slots(2)),
                              only_configs=(config,), only_probes=(probe,))
    return execute(req)
