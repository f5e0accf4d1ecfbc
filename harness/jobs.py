"""The units the pipeline passes around: what was asked (`RunRequest`), a configuration's
plan (`ConfigPlan`), one configuration on one revision (`Job`) and how one probe ended on it
(`Outcome`). Below both the pipeline (harness/pipeline/, which drives jobs) and `recorder`
(which turns outcomes into cells), so neither needs the other's types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.envs import EnvOptions
from harness.suite import ConfigSpec, ServerConfig
from harness.results import Launch, ProbeOutput, Role, Status
from harness.revisions import Revision
from harness.pipeline.slots import Slot
from harness.pipeline.start_order import StartOrder
from harness.server import ServerProcess
from harness.store import CellKey
from harness.targets import Target
from harness.workloads import Workload


# Requests a *different* row's verification may post (harness/verify.py), both sides together: a
# kl row's attempt is four requests per side, so its bisection over 32 tokens (the samples' cut,
# the whole, five halvings, one confirmation) takes 64.
REPRODUCER_BUDGET = 96


@dataclass(frozen=True)
class RunRequest:
    suite_path: Path
    target: str
    base: Revision
    candidate: Revision
    out_dir: Path
    store_root: Path
    fresh: bool = False
    python: str | None = None
    only_configs: tuple[str, ...] = ()
    only_probes: tuple[str, ...] = ()
    extra_args: tuple[str, ...] = ()
    # Extra server environment for every configuration (part of its fingerprint, unlike a slot's).
    extra_env: dict[str, str] = field(default_factory=dict)
    # Extra server environment of one role's servers only (`detcheck selftest`: the candidate's
    # SGLANG_DEBUG_REVERT_PR): part of that role's cell keys, so a side of the same sha with
    # another environment is never served from the other's stored cells.
    role_env: dict[Role, dict[str, str]] = field(default_factory=dict)
    command_line: str = ""
    # A resumed run's earlier sessions, oldest first, each {"command": …, "launches": n}: the
    # results record every session (metadata.sessions), so the report keeps the first command
    # and counts the launches of them all.
    earlier_sessions: tuple[dict[str, Any], ...] = ()
    # `--set probe.param=value`: probe parameters over the suite's tables (recorded in results).
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    # How many servers may be up at once, and what pins each (a GPU, a role's GPUs): with more
    # than one, jobs run in threads and the observer must be thread-safe. One slot: sequential.
    slots: tuple[Slot, ...] = (Slot(),)
    # Which waiting job starts next (longest first, one server per model first): one per pool.
    start_order: StartOrder = StartOrder()
    # Prompts per workload × this: bisect re-measures an *unknown* verdict with more samples.
    workload_scale: int = 1
    # The interpreter of one role's servers where it is not `python`: a revision that needs
    # other packages (another torch, another kernel wheel) runs from its own environment.
    # Given, it wins over the environment the revision's env file would build.
    role_python: dict[Role, str] = field(default_factory=dict)
    # Where a revision declares its own environment and how that is built (harness.envs).
    env_options: EnvOptions = EnvOptions()
    # The `run` command's options, recorded in results.json (metadata.options): what
    # `detcheck run --resume --out D` continues D with. Empty for runs no command line can resume.
    options: dict[str, Any] = field(default_factory=dict)
    # Requests a *different* row's reproducer may post to verify and shrink it (harness/verify.py,
    # both sides together); 0: published from the samples alone, unverified (bisect's steps).
    reproducer_budget: int = REPRODUCER_BUDGET
    # The sides this run measures: both, or one (a Slurm job of one (revision, configuration),
    # harness/slurm.py): a one-side run records its cells, and the run that collects them compares.
    sides: tuple[Role, ...] = (Role.BASE, Role.CANDIDATE)
    # This run's id in its plan (results.json's `plan.run_id`); None: a fresh one. A Slurm job
    # is given its collector's, which merges only job results that carry it (harness/slurm.py).
    run_id: str | None = None
    # Stored noisy cells stand for this run's too (`detcheck history`: each revision measured
    # once, its noisy values one point of a series that change-point detection judges; a change
    # point is then confirmed by a paired run, which measures both sides again).
    reuse_noisy: bool = False

    def revision(self, role: Role) -> Revision:
        return self.base if role == Role.BASE else self.candidate


@dataclass(frozen=True)
class ConfigPlan:
    spec: ConfigSpec
    server: ServerConfig
    probes: tuple[str, ...]
    workloads: dict[str, Workload]
    # The flags the configuration's probes add (their union, first occurrence kept): every
    # server of the configuration gets all of them, whichever probes are still to measure, so
    # that a cell's key names every argument that reached its server.
    probe_args: tuple[str, ...] = ()


@dataclass
class Job:
    """One configuration on one revision: the context the job steps read and extend."""

    cp: ConfigPlan
    role: Role
    revision: Revision
    target: Target  # how this role's server starts, from which interpreter
    worktree: Path | None
    keys: dict[str, CellKey | None]
    todo: list[str] = field(default_factory=list)  # probes still to measure
    args: tuple[str, ...] = ()  # feature flags + probe flags, as this revision spells them
    env: dict[str, str] = field(default_factory=dict)  # the configuration's and its slot's (a GPU)
    server: ServerProcess | None = None
    launch: Launch | None = None  # its record, given an end time at teardown
    server_info: dict = field(default_factory=dict)
    # What every cell of this job records about where it was measured.
    meta: dict = field(default_factory=dict)
    # Noisy probes stored by an earlier run: when and what they measured, for reference only.
    earlier: dict[str, dict] = field(default_factory=dict)
    # Values masked in everything kept: what the server saw (the caller's environment, the
    # configuration's, which holds a matrix entry's, and its arguments) must not come back
    # through its own output.
    secrets: tuple[str, ...] = ()
    # The flags the revision's `--help` calls secrets, once read (resolve_flags).
    secret_flags: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Outcome:
    """How one probe ended on one job, before it becomes a CellResult."""

    status: Status
    reason: str = ""
    log_tail: str = ""
    output: ProbeOutput | None = None
    wall_s: float | None = None
