"""Opening a run: everything that can fail on bad input, done before any launch (exit 2).

`Run` is what every job of one `execute` shares (request, suite, plans, target, store,
observer, worktrees, the stored cells read once, the recorder).
"""

from __future__ import annotations

import sys
import tempfile
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

from harness import path_proof
from harness.capabilities import Capabilities
from harness.envs import DEFAULT_ENV_FILE, RevisionEnv, revision_env
from harness.errors import UsageError
from harness.interpreters import ServerInterpreter, check_imports
from harness.jobs import ConfigPlan, RunRequest
from harness.lifeline import reap_orphans
from harness.metadata import interpreter_id
from harness.observer import RunObserver
from harness.pipeline.plan import cell_order, plan_request
from harness.pipeline.start_order import ModelGates
from harness.probes import PROBES
from harness.recorder import RunRecorder
from harness.result_files import write_run
from harness.results import CellResult, Role, RunResult
from harness.store import CellKey, ResultStore, params_fingerprint
from harness.suite import Suite
from harness.targets import Target, get_target


@dataclass
class Run:
    """What every job of one `execute` shares."""

    req: RunRequest
    suite: Suite
    plans: tuple[ConfigPlan, ...]
    targets: dict[Role, Target]  # the same target, each role with its interpreter
    store: ResultStore
    observer: RunObserver
    worktrees: dict[Role, Path | None]
    # Every cell the plan could reuse, read once before any launch (None: not stored).
    stored: dict[CellKey, CellResult | None]
    recorder: RunRecorder
    # The environments built from the revisions' env files (a role without one is absent).
    envs: dict[Role, RevisionEnv] = field(default_factory=dict)
    # Set on an interrupt: jobs in other threads stop at their next step, and what they measure
    # after it (cut short by the servers being stopped) is no result.
    cancelled: threading.Event = field(default_factory=threading.Event)
    # One results.json write at a time, each from the recorder's latest state.
    saving: threading.Lock = field(default_factory=threading.Lock)
    # Each role's `--help`, read in the background from the run's start (run_scheduled).
    capabilities: dict[Role, Future[Capabilities]] = field(default_factory=dict)
    # first_per_model: which models' first server is up (shared by the runs of one pool).
    gates: ModelGates | None = None

    def key(self, cp: ConfigPlan, probe: str, role: Role) -> CellKey | None:
        sha = self.req.revision(role).sha
        if sha is None:
            return None  # an installed package has no identity to cache by
        return CellKey(self.req.target, sha, cp.spec.name, cp.server.fingerprint, cp.workloads[probe].fingerprint,
                       probe, params_fingerprint(PROBES[probe].measured(self.suite.probe_spec(probe).params)),
                       server_args_fingerprint=params_fingerprint([
                           *cp.probe_args, *path_proof.key_part(cp.server.features),
                           *(f"{k}={v}" for k, v in sorted(self.req.role_env.get(role, {}).items()))]),
                       interpreter=interpreter_id(self.targets[role].python))

    def stored_cell(self, key: CellKey | None) -> CellResult | None:
        """The cell the store held for `key` when the run opened (None: none, or no key)."""
        return self.stored.get(key) if key is not None else None

    def save(self, partial: bool, complete: bool = False) -> RunResult:
        """results.json as it stands; `partial`: pairs still missing a side are left out;
        `complete`: the run's last step (`finish`) marks the record complete."""
        with self.saving, self.recorder.clock("writing"):
            result = self.recorder.result(partial, complete)
            write_run(self.req.out_dir, result)
        return result


def open_run(req: RunRequest, observer: RunObserver) -> Run:
    """Everything that can fail on bad input, done before any launch (exit 2)."""
    suite, plans = plan_request(req)
    recorder = RunRecorder(suite, req, cell_order(plans))
    # A bad ref or an unwritable worktree directory is bad input, not a failure found half way.
    with recorder.clock("checkout"):
        worktrees = {role: req.revision(role).checkout() for role in Role}
    with recorder.clock("interpreter check"):
        for interpreter in server_interpreters(req, worktrees):
            check_imports(interpreter, suite.startup_timeout_s)
    check_writable(req)
    with recorder.clock("environments"):
        envs = revision_envs(req, worktrees)
    recorder.environments = {role.value: env.to_dict() for role, env in envs.items()}
    targets = {role: get_target(req.target, role_python(req, envs, role)) for role in Role}
    run = Run(req, suite, plans, targets, ResultStore(req.store_root), observer, worktrees, {}, recorder, envs)
    for pid in reap_orphans():
        print(f"detcheck: stopped server pid {pid} left running by an earlier run that died",
              file=sys.stderr)
    if not req.fresh:
        # Read once: a damaged stored cell is reported with its path now, not half way.
        with recorder.clock("store read"):
            run.stored = {key: run.store.get(key) for cp in plans for p in cp.probes for role in Role
                          if (key := run.key(cp, p, role)) is not None}
        for mismatch in run.store.mismatched:
            print(f"detcheck: warning: {mismatch}; measuring it again", file=sys.stderr)
    return run


def server_interpreters(req: RunRequest, worktrees: dict[Role, Path | None]) -> list[ServerInterpreter]:
    """For SGLang, each interpreter that will run servers as it is (not a revision's env-file
    environment, which is built to hold what the revision needs), once per revision it runs (an
    interpreter may load one side's compiled libraries and not the other's): what `check_imports`
    checks before anything is launched or built."""
    if req.target != "sglang":
        return []
    found: dict[tuple[str, str | None], ServerInterpreter] = {}
    for role in Role:
        revision, worktree = req.revision(role), worktrees[role]
        if role in req.role_python:
            python, option, chosen = req.role_python[role], f"--{role.value}-python", True
        elif worktree is not None and (worktree / req.env_options.file).is_file():
            continue
        else:
            python, option, chosen = req.python or sys.executable, "--python", req.python is not None
        found.setdefault((python, revision.sha), ServerInterpreter(
            get_target(req.target, python), option, chosen, worktree, revision.sha,
            f"{role.value} ({revision.ref} at {revision.short()})", role.value))
    return list(found.values())


def revision_envs(req: RunRequest, worktrees: dict[Role, Path | None]) -> dict[Role, RevisionEnv]:
    """Each role's environment from its revision's env file, built (once, cached) from the
    interpreter that would otherwise run it; none for a role given its own interpreter."""
    envs = {role: revision_env(req.revision(role).sha, worktrees[role], req.env_options, req.python or sys.executable)
            for role in Role if role not in req.role_python}
    found = {role: env for role, env in envs.items() if env is not None}
    if envs and not found and req.env_options.file != DEFAULT_ENV_FILE:
        # A name the user chose that no revision has is more likely a typo than a choice.
        print(f"detcheck: warning: --env-file {req.env_options.file}: no revision has it; "
              f"{' and '.join(role.value for role in envs)} run on {req.python or sys.executable}", file=sys.stderr)
    return found


def role_python(req: RunRequest, envs: dict[Role, RevisionEnv], role: Role) -> str | None:
    """An explicit --base-python/--candidate-python, else the revision's environment, else --python."""
    if role in req.role_python:
        return req.role_python[role]
    return envs[role].python if role in envs else req.python


def check_writable(req: RunRequest) -> None:
    for what, path in (("--out", req.out_dir), ("--store", req.store_root)):
        try:
            path.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=path).close()
        except OSError as exc:
            raise UsageError(f"{what} {path} is not writable: {exc.strerror or exc}") from None
