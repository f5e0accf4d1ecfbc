"""The pipeline: suite + revisions → one server per (configuration, revision) → verdicts.

    execute(req)
      open_run         load the suite, plan configurations × probes, check both revisions out,
                       for SGLang the servers' interpreter (harness.interpreters), the outputs
                       writable, build or find each revision's environment
                       (harness.envs), read the store once: bad input fails here, before any
                       launch
      run_job          one job per (configuration, revision), a chain of steps:
        reuse_stored     exact cells already in the store need no server (noisy ones are
                         measured again: only the same run's measurements are comparable)
        environment_ready  a revision whose environment failed to build: its cells are errors
        resolve_flags    the revision's `--help` maps the configuration's features to flags
        launch_server    one server for every probe of the configuration
        run_probes       each probe on that server; each cell stored as soon as it exists
      run_interleaved  instead of two run_jobs when a probe is interleaved (noisy): both
                       servers up, that probe's rounds alternating sides (A B B A …)
      finish           compare base vs candidate, write results.json

A crash loses at most the cell in flight: cells are stored as they finish, and results.json
is rewritten after each configuration.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from harness.capabilities import Capabilities, NotExpressible, revision_capabilities
from harness.client import ConnectionLost, SGLangClient
from harness.envs import DEFAULT_ENV_FILE, RevisionEnv, revision_env
from harness.errors import LaunchError, ProbeNotApplicable, ServerError, ServerFinding, UsageError, VacuousResult
from harness.interpreters import ServerInterpreter, check_imports
from harness.lifeline import reap_orphans
from harness.logparse import last_exception
from harness.metadata import interpreter_id, revision_interpreter_metadata
from harness.observer import QuietObserver, RunObserver, SuiteObserver
from harness.paths import safe_name, sha_cache_file
from harness import path_proof
from harness.jobs import ConfigPlan, Job, Outcome, RunRequest
from harness.plan import ServerConfig, Suite, WorkloadSpec, check_reserved, load_suite
from harness.probes import PROBES, ProbeContext, known_probes
from harness.recorder import RunRecorder
from harness.runner import FOREIGN_FACT, Watch, merged_foreign, runner_fingerprint, visible_devices
from harness.redaction import environment_secrets, redact_argv, redact_env, scrub, scrub_file
from harness.result_files import write_run
from harness.compare import compare_pair
from harness.results import CellResult, Launch, ProbeComparison, ProbeOutput, Reproducer, Role, RunResult, Status
from harness.verdict_stats import Kind, Verdict
from harness.schedule import Countdown, Slot, SlotPool, Unit, side_by_side
from harness.sequential import WORKLOAD_GROWTH, Look, LookBudget, LookState
from harness.start_order import ModelGates, StartOrder, longest_first
from harness.server import ServerProcess, exit_text, launch, stop_all
from harness.store import CellKey, ResultStore, params_fingerprint
from harness.targets import REJECTION, TRANSIENT_LAUNCH_FAILURES, Target, get_target
from harness.verify import not_verified, verify
from harness.workloads import build as build_workload


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
    capabilities: dict[Role, Future] = field(default_factory=dict)
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


# -- the pipeline ----------------------------------------------------------------------

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
    observer = observer or QuietObserver()
    runs = [open_run(req, observer if len(reqs) == 1 else SuiteObserver(observer, req.suite_path.stem))
            for req in reqs]
    for run in runs:  # on disk from the start, so that `--resume` works after any death, even in the first cell
        save(run, partial=True)
    observer.begin(sum(2 * len(cp.probes) for run in runs for cp in run.plans))
    try:
        run_scheduled(runs)
        for run in runs:
            verify_relaunched(run)
    except KeyboardInterrupt as exc:  # Ctrl-C / SIGTERM: what finished is on disk for `--resume`
        for run in runs:
            save(run, partial=True)
        # The `run` command's own run (it records its options) continues with `run --resume`.
        exc.resume_out = reqs[0].out_dir if len(reqs) == 1 and reqs[0].options else None
        raise
    finally:
        observer.end()
    return [finish(run) for run in runs]


def open_run(req: RunRequest, observer: RunObserver) -> Run:
    """Everything that can fail on bad input, done before any launch (exit 2)."""
    suite = load_suite(req.suite_path, known_probes(), req.overrides)
    plans = plan(suite, req)
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
    environment, which is built to hold what the revision needs), once, with the first revision
    it runs: what `check_imports` checks before anything is launched or built."""
    if req.target != "sglang":
        return []
    found: dict[str, ServerInterpreter] = {}
    for role in Role:
        revision, worktree = req.revision(role), worktrees[role]
        if role in req.role_python:
            python, option, chosen = req.role_python[role], f"--{role.value}-python", True
        elif worktree is not None and (worktree / req.env_options.file).is_file():
            continue
        else:
            python, option, chosen = req.python or sys.executable, "--python", req.python is not None
        found.setdefault(python, ServerInterpreter(get_target(req.target, python), option, chosen, worktree,
                                                   revision.sha, f"{role.value} ({revision.ref} at {revision.short()})"))
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


@dataclass(frozen=True)
class QueuedUnit:
    """A unit waiting in the pool: its run, and what the start order reads."""

    position: int  # in the start order
    run: Run
    unit: Unit
    model: str  # the configuration's model path (first_per_model's groups)
    expected_s: float | None  # how long earlier runs took for it; None: untimed

    @property
    def roles(self) -> tuple[Role, ...]:
        return self.unit.roles


def start_queue(runs: list[Run], order: StartOrder) -> list[QueuedUnit]:
    """Every unit of the runs in the order they start: plan order (run after run), or longest
    first where earlier runs timed them."""
    units = [(run, unit, order.times.expected(run.suite.name, run.plans[unit.config_index].spec.name, unit.roles))
             for run in runs for unit in plan_units(run)]
    ordered = longest_first(units, [expected for _, _, expected in units])
    return [QueuedUnit(i, run, unit, model_key(run.plans[unit.config_index]), expected)
            for i, (run, unit, expected) in enumerate(ordered)]


def model_key(cp: ConfigPlan) -> str:
    """Which model a configuration's servers load: first_per_model's groups."""
    return str(cp.server.model)


def run_scheduled(runs: list[Run]) -> None:
    """Every job of the runs, as many at once as their server slots allow, started in the
    requests' start order; each run's results.json is saved as each of its configurations
    completes. An interrupt (or a job that raised) stops every server in flight and lets the
    other jobs end at their next step."""
    order = runs[0].req.start_order
    pool = SlotPool(runs[0].req.slots)
    waiting = start_queue(runs, order)
    countdowns = {id(run): Countdown([q.unit for q in waiting if q.run is run]) for run in runs}
    gates = ModelGates([q.model for q in waiting]) if order.first_per_model else None
    for run in runs:
        run.gates = gates
    say_start_order(order, waiting, gates)
    workers = ThreadPoolExecutor(len(pool.slots), thread_name_prefix="job")
    helps = [read_capabilities_ahead(run) for run in runs]
    futures: list[Future] = []
    try:
        while waiting:
            queued, slots = pool.acquire_next(
                waiting, lambda q: gates is None or gates.may_start(q.position, q.model))
            raise_failure(futures)
            futures.append(workers.submit(run_unit, queued, slots, pool, countdowns[id(queued.run)]))
        for future in futures:
            future.result()
    except BaseException:
        for run in runs:
            run.cancelled.set()
        # Not waiting for the workers: a second Ctrl-C must reach the CLI at once, whose
        # stop_all(grace_s=0) then ends servers that sit out their SIGTERM grace.
        workers.shutdown(wait=False, cancel_futures=True)
        for reader in helps:
            reader.shutdown(wait=False, cancel_futures=True)
        stop_all()
        raise
    workers.shutdown()
    for reader in helps:
        reader.shutdown()


def say_start_order(order: StartOrder, queue: list[QueuedUnit], gates: ModelGates | None) -> None:
    """One line on stderr when the order is not the plan's."""
    parts = []
    if order.times.sources:
        timed = sum(q.expected_s is not None for q in queue)
        parts.append(f"longest first ({timed} of {len(queue)} units timed by "
                     f"{len(order.times.sources)} earlier run{'s' if len(order.times.sources) != 1 else ''})")
    if gates is not None:
        parts.append(f"one server per model first ({gates.models} model{'s' if gates.models != 1 else ''}), "
                     f"its others once it is up")
    if parts:
        print(f"detcheck: start order: {'; '.join(parts)}", file=sys.stderr)


def read_capabilities_ahead(run: Run) -> ThreadPoolExecutor:
    """Both roles' checkouts byte-compiled and their `--help` (the flags each revision spells)
    read, at once from the run's start:
    the other revision's read then overlaps the first jobs instead of waiting for its own (on
    SGLang, an import of seconds). Only for a role with a job to launch (one whose cells all
    come from the store needs no flags) and a usable environment; a read that fails is the
    error of each job that needed it."""
    helps = ThreadPoolExecutor(len(Role), thread_name_prefix="help")
    for role in Role:
        env = run.envs.get(role)
        if (env is None or not env.error) and role in run.req.sides and will_launch(run, role):
            run.capabilities[role] = helps.submit(compiled_capabilities, run, role)
    return helps


def compiled_capabilities(run: Run, role: Role) -> Capabilities:
    """The role's checkout byte-compiled (before any of its servers imports it), then its
    `--help`. Compiled once per revision and interpreter: a marker in the cache says so, so that
    a later run spends no process pool on a tree whose .pyc files are already there."""
    target, sha, worktree = run.targets[role], run.req.revision(role).sha, run.worktrees[role]
    marker = sha_cache_file("compiled", f"{target.name}-{interpreter_id(target.python)}", sha, ".done")
    if marker is None or not marker.is_file():
        target.compile_sources(worktree)
        if marker is not None:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
    return revision_capabilities(target, sha, worktree, run.suite.startup_timeout_s)


def will_launch(run: Run, role: Role) -> bool:
    """Whether some cell of this role is still to measure (reuse_stored will not cover it)."""
    return any(not reusable(run.stored.get(run.key(cp, probe, role))) for cp in run.plans for probe in cp.probes)


def reusable(stored: CellResult | None) -> bool:
    """A stored cell stands for this run's: an exact one; a noisy one is measured again."""
    return stored is not None and not stored.noisy


def raise_failure(futures: list[Future]) -> None:
    """A job that raised (a harness bug, a full disk) ends the run as it would sequentially."""
    for future in futures:
        if future.done() and future.exception() is not None:
            future.result()


def run_unit(queued: QueuedUnit, slots: tuple[int, ...], pool: SlotPool, countdown: Countdown) -> None:
    """One unit on its slots (in a worker thread): a job, or an interleaved configuration."""
    run, unit = queued.run, queued.unit
    cp = run.plans[unit.config_index]
    try:
        jobs = [new_job(run, cp, role, pool.slots[i]) for role, i in zip(unit.roles, slots)]
        if len(jobs) == 1:
            run_job(run, jobs[0])
        else:
            run_interleaved(run, jobs)
    finally:
        if run.gates is not None:  # a leader that never launched (all stored, or failed before) opens too
            run.gates.opened(queued.model)
        pool.release(slots)
    # The last configuration's results are written once, by `finish`.
    if countdown.finished(unit.config_index) and not run.cancelled.is_set() and not countdown.all_finished():
        save(run, partial=True)


def finish(run: Run) -> RunResult:
    return save(run, partial=len(run.req.sides) < len(Role))  # one side: no pair to compare


def save(run: Run, partial: bool) -> RunResult:
    """results.json as it stands; `partial`: pairs still missing a side are left out."""
    with run.saving, run.recorder.clock("writing"):
        result = run.recorder.result(partial)
        write_run(run.req.out_dir, result)
    return result


# -- one job: a configuration on a revision -----------------------------------------------

JobStep = Callable[[Run, Job], bool]  # False: the job is finished (every cell recorded)


def run_job(run: Run, job: Job) -> None:
    try:
        for step in JOB_STEPS:
            if not run_step(run, job, step):
                return
    finally:
        stop_job(run, job)


def run_step(run: Run, job: Job, step: JobStep) -> bool:
    """One step of a job, its time on the run's step clock; none once the run is interrupted."""
    if run.cancelled.is_set():
        return False
    with run.recorder.clock(step.__name__):
        return step(run, job)


def stop_job(run: Run, job: Job) -> None:
    run.observer.job_done(job.cp.spec.name, job.role.value)
    if job.server is not None:
        with run.recorder.clock("teardown"):
            job.server.stop()
            scrub_file(job.server.log_path, job.secrets)
        run.recorder.ended(job.launch, time.time())


# -- interleaving: the noisy probes of both sides, round by round -------------------------

def run_interleaved(run: Run, jobs: list[Job]) -> None:
    """Both jobs of a configuration with their servers up at once: each side's other probes,
    then the interleaved probes one round at a time, alternating which side goes first
    (A B B A …, as Pinpoint and pyperf do), so that load and drift over the run fall on both
    sides alike and round i of the two sides are neighbours in time. A sequential probe's
    comparison that reads *unknown* is measured again on both servers (`looks`)."""
    # Both servers start at once (on a GPU a launch takes a minute or more), each from a thread
    # of this pool, which must outlive the servers: their PR_SET_PDEATHSIG lifeline fires when
    # the *thread* that started them ends, not the process.
    with ThreadPoolExecutor(len(jobs), thread_name_prefix="launch") as launching:
        try:
            started = list(launching.map(lambda job: all(run_step(run, job, step) for step in JOB_STEPS[:-1]),
                                         jobs))
            live = [job for job, ok in zip(jobs, started) if ok]
            clients = {job.role: open_client(run, job) for job in live}
            sequential = sequential_probes(run, jobs[0].cp)
            held: dict[str, dict[Role, Outcome]] = {}
            noisy: dict[str, list[Job]] = {}
            for job in live:
                for probe in job.todo:
                    if PROBES[probe].interleaved:
                        noisy.setdefault(probe, []).append(job)
                    elif probe in sequential:
                        held.setdefault(probe, {})[job.role] = probe_outcome(run, job, clients[job.role], probe)
                    else:
                        record_cell(run, job, probe, probe_outcome(run, job, clients[job.role], probe))
            for probe, sides in noisy.items():
                held[probe] = alternate_rounds(run, sides, clients, probe, range(run.suite.probe_spec(probe).params["repeats"]))
            for probe, outcomes in held.items():
                sides = [job for job in live if job.role in outcomes]
                if probe in sequential and len(sides) == 2:
                    outcomes = looks(run, sides, clients, probe, outcomes)
                for job in sides:
                    outcome = outcomes[job.role]
                    state = LookState.from_facts(outcome.output.facts) if outcome.output else None
                    record_cell(run, job_at_scale(job, probe, state.scale if state else 1), probe, outcome)
            if len(clients) == 2:
                for probe in jobs[0].cp.probes:
                    verify_row(run, jobs[0].cp.spec.name, probe, clients, "still up")
        finally:
            # Both at once too: SGLang takes seconds to shut down (5.7 s a server on the H200).
            list(launching.map(lambda job: stop_job(run, job), jobs))


# -- reproducers: each *different* row's posted to both sides' servers before it is published ---

def unverified(run: Run, config: str, probe: str) -> Reproducer | None:
    """The pair's reproducer if it has requests to post and no verification yet."""
    comp = run.recorder.comparison(config, probe)
    rep = None if comp is None else comp.reproducer
    return rep if rep is not None and rep.form is not None and rep.verification is None else None


def verify_row(run: Run, config: str, probe: str, clients: dict[Role, SGLangClient], servers: str,
               reference: dict[Role, SGLangClient] | None = None) -> None:
    """The row's reproducer posted to `clients` (harness/verify.py), within the run's budget; one
    against a reference configuration (`Form.reference`) to `reference`'s servers too, and left
    for verify_relaunched where they are not given (the row's own servers still up)."""
    rep = unverified(run, config, probe)
    if rep is None or run.req.reproducer_budget <= 0 or run.cancelled.is_set():
        return
    if rep.form.reference and reference is None:
        return
    also = f" and {rep.form.reference}'s" if rep.form.reference else ""
    print(f"detcheck: {config} {probe} reads different: posting its reproducer to both sides' servers{also} "
          f"({servers}), at most {run.req.reproducer_budget} requests", file=sys.stderr)
    with run.recorder.clock("reproducers"):
        run.recorder.verified(config, probe, verify(rep, clients, servers, run.req.reproducer_budget,
                                                    reference=reference))


def verify_relaunched(run: Run) -> None:
    """Every *different* row whose servers were not both up when its comparison was made (its
    sides ran as separate jobs, or came from the store): its configuration's servers started
    again, one per side, each row's reproducer posted, the servers stopped. A row whose cells
    both came from the store (a re-run, a `--resume`) is verified so too: its verdict is judged
    again from the stored samples, its reproducer again on servers, never carried over from the
    run that stored them (the store holds cells, not verifications)."""
    if run.req.reproducer_budget <= 0 or run.cancelled.is_set():
        return
    for cp in run.plans:
        todo = [probe for probe in cp.probes if unverified(run, cp.spec.name, probe) is not None]
        if not todo:
            continue
        with reproducer_servers(run, cp) as (clients, failure):
            for probe in todo:
                rep = unverified(run, cp.spec.name, probe)
                if failure or not rep.form.reference:
                    verify_on(run, cp.spec.name, probe, clients, failure)
                    continue
                with reference_servers(run, cp, rep.form.reference) as (reference, ref_failure):
                    verify_on(run, cp.spec.name, probe, clients, ref_failure, reference)


def verify_on(run: Run, config: str, probe: str, clients: dict[Role, SGLangClient], failure: str,
              reference: dict[Role, SGLangClient] | None = None) -> None:
    """The row's reproducer verified on relaunched servers, or said not to be and why."""
    if failure:
        run.recorder.verified(config, probe, not_verified(unverified(run, config, probe), failure, "relaunched",
                                                          run.req.reproducer_budget))
    else:
        verify_row(run, config, probe, clients, "relaunched", reference)


@contextlib.contextmanager
def reference_servers(run: Run, cp: ConfigPlan, name: str) -> Iterator[tuple[dict[Role, SGLangClient], str]]:
    """A server per side of the reference configuration `name` that `cp`'s row is compared with
    (logged as `<config>-reproducer-reference-<role>-<sha>.log`), on the slots after the row's."""
    ref = next((p for p in run.plans if p.spec.name == name), None)
    if ref is None:
        yield {}, f"the reference configuration {name} is not in this run's plan"
        return
    with reproducer_servers(run, ref, label=f"{cp.spec.name}-reproducer-reference", first_slot=2,
                            named=True) as found:
        yield found


@contextlib.contextmanager
def reproducer_servers(run: Run, cp: ConfigPlan, label: str = "", first_slot: int = 0, named: bool = False
                       ) -> Iterator[tuple[dict[Role, SGLangClient], str]]:
    """A server per side of the configuration, as its jobs started them (the revision's flags,
    the run's slots from `first_slot`, round the run's), logged beside theirs
    (`<label>-<role>-<sha>.log`, by default `<config>-reproducer-…`): their clients, or why one
    did not start (`named`: the configuration named in it)."""
    servers: dict[Role, ServerProcess] = {}
    secrets: set[str] = set()
    failure = ""
    label = label or f"{cp.spec.name}-reproducer"
    of = f" of {cp.spec.name}" if named else ""
    try:
        for k, role in enumerate((Role.BASE, Role.CANDIDATE), first_slot):
            target, worktree, slot = run.targets[role], run.worktrees[role], run.req.slots[k % len(run.req.slots)]
            env = {**cp.server.env, **slot.env}
            env_error = run.envs[role].error if role in run.envs else ""
            if env_error:
                failure = f"the {role.value}'s environment{of} did not build: {env_error}"
                break
            try:
                # a role whose cells all came from the store had no --help read
                caps = (run.capabilities[role].result() if role in run.capabilities
                        else compiled_capabilities(run, role))
                args = server_flags(caps, cp.server, cp.probe_args)
            except (NotExpressible, LaunchError, UsageError) as exc:
                failure = f"the {role.value}'s server{of} could not be started again: {exc}"
                break
            secrets |= set(environment_secrets({**os.environ, **env}, cp.server.args, caps.secret_flags))
            launched = launch(
                lambda port, target=target, args=args: target.launch_argv(cp.server, args, port),
                target.env(worktree, env),
                server_log(run.req.out_dir, label, role, run.req.revision(role).short()),
                worktree, run.suite.startup_timeout_s, TRANSIENT_LAUNCH_FAILURES,
                run.observer.launching(cp.spec.name, role.value, run.req.revision(role).ref),
                cancelled=run.cancelled.is_set)
            servers[role] = launched.server
            if launched.failure is not None:
                failure = scrub(f"the {role.value}'s server{of} did not start again: {launched.failure}",
                                sorted(secrets, key=len, reverse=True))
                break
        clients = {} if failure else {role: SGLangClient(server.url, timeout_s=run.suite.request_timeout_s)
                                      for role, server in servers.items()}
        yield clients, failure
    finally:
        for server in servers.values():
            server.stop()
            scrub_file(server.log_path, secrets)


def sequential_probes(run: Run | Suite, cp: ConfigPlan) -> set[str]:
    """The configuration's probes whose comparison may be looked at again: those with a noisy
    metric on it (by their plan), under a suite that allows more than one look."""
    suite = run.suite if isinstance(run, Run) else run
    return {probe for probe in cp.probes
            if suite.probe_spec(probe).params["max_looks"] >= 2 and noisy_on(suite, cp, probe)}


def looks(run: Run, jobs: list[Job], clients: dict[Role, SGLangClient], probe: str,
          first: dict[Role, Outcome]) -> dict[Role, Outcome]:
    """A sequential comparison (harness/sequential.py): the first look's outcomes, then, while the
    comparison reads *unknown* and the budget allows, another look on both servers: `repeats`
    more rounds of an interleaved probe, merged with the earlier ones, or the probe over
    twice the prompts. Every outcome returned carries its look (`sequential` in its facts)."""
    params = run.suite.probe_spec(probe).params
    budget = LookBudget(params["max_looks"], params["look_budget_s"])
    outcomes, look, scale = first, 1, 1
    while True:
        state = LookState(look, budget.max_looks, tuple(budget.history), scale)
        outcomes = {role: with_look(o, state) for role, o in outcomes.items()}
        if any(o.status != Status.OK for o in outcomes.values()):
            return outcomes
        cells = {job.role: run.recorder.cell(job_at_scale(job, probe, scale), probe, outcomes[job.role])
                 for job in jobs}
        comp = compare_pair(jobs[0].cp.spec.name, probe, cells[Role.BASE], cells[Role.CANDIDATE],
                            run.suite.probe_params)
        stopped = budget.why_not(look + 1) if comp.verdict == Verdict.UNKNOWN else ""
        if comp.verdict != Verdict.UNKNOWN or stopped or run.cancelled.is_set():
            if stopped:
                outcomes = {role: with_look(o, dataclasses.replace(state, stopped=stopped))
                            for role, o in outcomes.items()}
            return outcomes
        budget.history.append(Look(look, look_samples(comp), comp.verdict.value, state.alpha(params["alpha"])))
        look += 1
        t0 = time.monotonic()
        print(f"detcheck: {jobs[0].cp.spec.name} {probe} reads unknown at look {look - 1}: measuring look {look} "
              f"of at most {budget.max_looks}", file=sys.stderr)
        if PROBES[probe].interleaved:
            repeats = params["repeats"]
            more = alternate_rounds(run, jobs, clients, probe, range(repeats * (look - 1), repeats * look))
            outcomes = {role: joined(probe, outcomes[role], more[role]) for role in outcomes}
        else:
            scale *= WORKLOAD_GROWTH
            order = jobs if look % 2 else jobs[::-1]  # alternate which side measures first
            outcomes = {job.role: probe_outcome(run, job_at_scale(job, probe, scale), clients[job.role], probe)
                        for job in order}
        budget.spent_s += time.monotonic() - t0


def look_samples(comp: ProbeComparison) -> int:
    """The samples per side of a look's first deciding noisy metric."""
    noisy = [comp.metrics[n] for n in comp.deciding if comp.metrics[n].kind == Kind.NOISY]
    return noisy[0].base.n if noisy else 0


def with_look(outcome: Outcome, state: LookState) -> Outcome:
    if outcome.output is None or outcome.status != Status.OK:
        return outcome
    facts = {**outcome.output.facts, "sequential": state.to_dict()}
    return dataclasses.replace(outcome, output=dataclasses.replace(outcome.output, facts=facts))


def job_at_scale(job: Job, probe: str, scale: int) -> Job:
    """The job as it measures `probe` over `scale` times its planned prompts (itself at 1): the
    cell's workload and key are the grown workload's."""
    if scale == 1:
        return job
    spec = job.cp.workloads[probe].spec
    cp = dataclasses.replace(job.cp, workloads={**job.cp.workloads, probe: build_workload(scaled(spec, scale))})
    return dataclasses.replace(job, cp=cp, keys={**job.keys, probe: None})


def joined(probe: str, earlier: Outcome, later: Outcome) -> Outcome:
    """An interleaved probe's rounds of two looks as one side's outcome (a failed later look ends it)."""
    if later.status != Status.OK:
        return later
    placed = {**later.output.facts}
    placed["first_side"] = [*earlier.output.facts.get("first_side", []), *later.output.facts.get("first_side", [])]
    output = with_path(PROBES[probe].merge([earlier.output, later.output]), [earlier.output, later.output])
    output = dataclasses.replace(output, facts={**output.facts, **{k: placed[k] for k in PLACEMENT_FACTS if k in placed}})
    return Outcome(Status.OK, "", later.log_tail, output, wall_s=round((earlier.wall_s or 0.0) + (later.wall_s or 0.0), 3))


PLACEMENT_FACTS = ("placement", "first_side", "placement_seed")


def with_path(output: ProbeOutput, parts: list[ProbeOutput]) -> ProbeOutput:
    """A merged output with its parts' path proofs as one (harness/path_proof.py), and every
    foreign GPU process any part saw (harness/runner.py)."""
    path = path_proof.merged([p.facts for p in parts])
    foreign = merged_foreign([p.facts.get(FOREIGN_FACT) or [] for p in parts])
    facts = {**output.facts, **({path_proof.FACT: path} if path is not None else {}),
             **({FOREIGN_FACT: foreign} if foreign else {})}
    return dataclasses.replace(output, facts=facts)


def noisy_on(run: Run | Suite, cp: ConfigPlan, probe: str) -> bool:
    """Whether the probe measures a noisy metric on this configuration (by its plan)."""
    kind = PROBES[probe]
    if kind.planned is None:
        return False
    suite = run.suite if isinstance(run, Run) else run
    planned = kind.planned(suite.probe_spec(probe).params, cp.workloads[probe].spec,
                           cp.server.features.deterministic)
    return any(m.kind == Kind.NOISY for m in planned)


def alternate_rounds(run: Run, jobs: list[Job], clients: dict[Role, SGLangClient],
                     probe: str, rounds: range) -> dict[Role, Outcome]:
    """One probe's `rounds` on each job in turn (or, with `sides_at_once`, on both at the same
    time), merged per side; a side that fails a round ends with that failure while the other
    goes on."""
    params = run.suite.probe_spec(probe).params
    done: dict[Role, list[Outcome]] = {job.role: [] for job in jobs}
    failed: dict[Role, Outcome] = {}
    at_once = bool(params.get("sides_at_once"))
    firsts = first_sides(rounds, at_once, params.get("placement_seed", 0))
    for rep, first in zip(rounds, firsts):
        sides = [job for job in (jobs if first == 0 else jobs[::-1]) if job.role not in failed]

        def measure(job: Job, rep: int = rep) -> Outcome:
            return probe_outcome(run, job, clients[job.role], probe, (rep,))

        if at_once:
            with ThreadPoolExecutor(len(sides) or 1, thread_name_prefix="round") as pool:
                outcomes = list(pool.map(measure, sides))
        else:
            outcomes = [measure(job) for job in sides]
        for job, outcome in zip(sides, outcomes):
            if outcome.status == Status.OK:
                done[job.role].append(outcome)
            else:
                failed[job.role] = outcome
    placement = {"placement": "at once" if at_once else "alternating",
                 "first_side": [(jobs if f == 0 else jobs[::-1])[0].role.value for f in firsts],
                 **({"placement_seed": params.get("placement_seed", 0)} if at_once else {})}
    return {role: failed.get(role) or merged(probe, outcomes, placement) for role, outcomes in done.items()}


def first_sides(rounds: range, at_once: bool, seed: int) -> list[int]:
    """Per round, which of the two jobs starts first (0: the configuration's first role). One
    after the other: A B B A …, so drift falls on both alike. At once: each side starts first in
    half the rounds, in an order shuffled by `seed` (and the rounds' start, so a later look's
    rounds are shuffled anew; recorded in the cells), so a head start that favours whichever
    side's requests reach the card first cannot line up with anything periodic in the rounds."""
    order = [rep % 2 for rep in rounds]
    if at_once:
        random.Random(seed if rounds.start == 0 else f"{seed}:{rounds.start}").shuffle(order)
    return order


def merged(probe: str, outcomes: list[Outcome], placement: dict) -> Outcome:
    """One side's rounds as one output, with how the rounds were placed among its facts."""
    try:
        output = with_path(PROBES[probe].merge([o.output for o in outcomes]), [o.output for o in outcomes])
    except VacuousResult as exc:
        return Outcome(Status.ERROR, f"vacuous: {exc}")
    output = dataclasses.replace(output, facts={**output.facts, **placement})
    return Outcome(Status.OK, "", outcomes[-1].log_tail, output,
                   wall_s=round(sum(o.wall_s or 0.0 for o in outcomes), 3))


def new_job(run: Run, cp: ConfigPlan, role: Role, slot: Slot) -> Job:
    env = {**cp.server.env, **slot.env, **run.req.role_env.get(role, {})}
    target = run.targets[role]
    return Job(cp, role, run.req.revision(role), target, run.worktrees[role],
               {p: run.key(cp, p, role) for p in cp.probes}, env=env,
               meta={**run.recorder.host, "target": target.name, "python": target.python,
                     **({"environment": run.envs[role].to_dict()} if role in run.envs else {})},
               secrets=environment_secrets({**os.environ, **env}, cp.server.args))


def reuse_stored(run: Run, job: Job) -> bool:
    """Exact cells come from the store. A noisy cell (one with a noisy metric) is measured
    again whatever is stored: noisy values measured at another time, under another load, are
    not comparable with this run's, so both sides of a noisy comparison are measured in the
    same run (the stored one is kept in the cell's metadata, for reference only)."""
    for probe in job.cp.probes:
        stored = run.stored.get(job.keys[probe]) if job.keys[probe] is not None else None
        if reusable(stored):
            run.recorder.add(stored.with_role(job.role).as_reused(), reused=True, observer=run.observer)
            continue
        if stored is not None:
            job.earlier[probe] = stored.reference()
        job.todo.append(probe)
    return bool(job.todo)


def environment_ready(run: Run, job: Job) -> bool:
    """A revision whose environment could not be built: each cell still to measure is an
    error with pip's reason (stored cells measured under that environment were reused)."""
    env = run.envs.get(job.role)
    if env is None or not env.error:
        return True
    return finish_job(run, job, Outcome(Status.ERROR, f"building the environment of {env.file} failed: {env.error}"))


def resolve_flags(run: Run, job: Job) -> bool:
    try:
        caps = run.capabilities[job.role].result()
        # Flags the revision's help calls secrets: their values are masked too, from here on.
        job.secret_flags = caps.secret_flags
        job.secrets = environment_secrets({**os.environ, **job.env}, job.cp.server.args, caps.secret_flags)
        job.args = server_flags(caps, job.cp.server, job.cp.probe_args)
    except NotExpressible as exc:
        return finish_job(run, job, Outcome(Status.NOT_APPLICABLE, f"n/a at this revision: {exc}"))
    except (LaunchError, UsageError) as exc:
        return finish_job(run, job, Outcome(Status.ERROR, str(exc), getattr(exc, "log_tail", "")))
    return True


def server_flags(caps: Capabilities, server: ServerConfig, probe_args: tuple[str, ...]) -> tuple[str, ...]:
    """The flags a configuration's server gets at a revision (its `--help`, `caps`): the
    features' flags, then the probes'. Raises NotExpressible when the revision has no flag for
    a feature, or lacks one the configuration or a probe passes. The GPU-session tools start a
    server with it too (results/h200/suite_server.py)."""
    feature_args = caps.feature_args(server.features, server.draft_model)
    caps.check_args((*server.args, *probe_args))
    # The counters that show which path each probe took (harness/path_proof.py).
    return feature_args + probe_args + path_proof.metrics_args(caps.knows, (*server.args, *feature_args, *probe_args))


LOG_DIR = "logs"


def server_log(out_dir: Path, config: str, role: Role, revision: str) -> Path:
    """Where a job's server writes its log."""
    return out_dir / LOG_DIR / f"{safe_name(config)}-{role.value}-{revision}.log"


def server_logs(out_dir: Path) -> list[Path]:
    """The server logs a run directory holds: files named as `server_log` names them, none else."""
    return [path for role in Role for path in (out_dir / LOG_DIR).glob(f"*-{role.value}-*.log") if path.is_file()]


def launch_server(run: Run, job: Job) -> bool:
    log_path = server_log(run.req.out_dir, job.cp.spec.name, job.role, job.revision.short())
    job.meta["runner"] = runner_fingerprint()  # the GPUs as this server finds them
    started_at = time.time()
    # The interpreter's metadata (a subprocess, once per interpreter and sha) is read while the
    # server starts, not after it.
    with ThreadPoolExecutor(1) as pool:
        interpreter = pool.submit(revision_interpreter_metadata, job.target, job.revision.sha, job.worktree)
        launched = launch(
            lambda port: job.target.launch_argv(job.cp.server, job.args, port),
            job.target.env(job.worktree, job.env), log_path, job.worktree,
            run.suite.startup_timeout_s, TRANSIENT_LAUNCH_FAILURES,
            run.observer.launching(job.cp.spec.name, job.role.value, job.revision.ref),
            lambda why: print(f"detcheck: launching {job.cp.spec.name} @ {job.role.value} ({job.revision.ref}) "
                              f"again on a fresh port: {why}", file=sys.stderr),
            cancelled=run.cancelled.is_set)
        job.meta.update(interpreter.result())
    job.server = server = launched.server
    if run.gates is not None:  # up or failed: the model's other servers may start
        run.gates.opened(model_key(job.cp))
    job.launch = Launch(job.cp.spec.name, job.role, job.revision.sha, server.port, server.startup_s,
                        launched.failure is None, tuple(redact_argv(list(server.argv[1:]), job.secret_flags)),
                        started_at=round(started_at, 3), relaunched=launched.relaunched)
    run.recorder.launched(job.launch, run.observer)
    job.meta.update(server_argv=list(job.launch.args), server_env=redact_env(job.env),
                    startup_s=round(server.startup_s, 3), port=server.port,
                    started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if launched.failure is not None:
        return finish_job(run, job, launch_outcome(launched.failure))
    return True


def run_probes(run: Run, job: Job) -> bool:
    client = open_client(run, job)
    for probe in job.todo:
        outcome = probe_outcome(run, job, client, probe)
        if PROBES[probe].interleaved and outcome.status == Status.OK:  # its sides were not up together
            outcome = dataclasses.replace(outcome, output=dataclasses.replace(
                outcome.output, facts={**outcome.output.facts, **IN_TURN}))
        record_cell(run, job, probe, outcome)
    return False


# An interleaved probe measured on one side's server alone, the other side's before or after it
# (one slot that holds one server: a server spanning every GPU of the entry): no rounds alternate.
IN_TURN = {"placement": "in turn"}


def open_client(run: Run, job: Job) -> SGLangClient:
    """A client of the job's server; what the server says about itself goes in the metadata."""
    client = SGLangClient(job.server.url, timeout_s=run.suite.request_timeout_s)
    try:
        job.server_info = client.server_info()
    except ServerError:
        job.server_info = {}
    job.meta.update(server_version=job.server_info.get("version"),
                    max_total_num_tokens=job.server_info.get("max_total_num_tokens"))
    return client


JOB_STEPS: tuple[JobStep, ...] = (reuse_stored, environment_ready, resolve_flags, launch_server, run_probes)


def probe_outcome(run: Run, job: Job, client: SGLangClient, probe: str,
                  rounds: tuple[int, ...] | None = None) -> Outcome:
    """One probe on the job's server (of an interleaved probe, only `rounds`); whatever goes
    wrong fails this cell, not the suite."""
    server = job.server
    if not server.alive():
        return Outcome(Status.ERROR, f"server {exit_text(server.proc.poll())} before this probe",
                       server.log_tail())
    ctx = ProbeContext(client=client, server=server, config=job.cp.server, workload=job.cp.workloads[probe],
                       params=run.suite.probe_spec(probe).params, server_info=job.server_info,
                       advance=run.observer.probing(job.cp.spec.name, job.role.value, probe), rounds=rounds)
    scrape = path_proof.Scrape(client.metrics_text, job.cp.server.features,
                               path_proof.METRICS_FLAG in (*job.args, *job.cp.server.args),
                               server.log_size, server.log_since)
    # A noisy measurement is watched for another program's work on the server's GPUs.
    watch = Watch(visible_devices(job.env)) if noisy_on(run, job.cp, probe) else None
    t0 = time.time()
    try:
        scrape.before()
        if watch is not None:
            watch.start()
        output = PROBES[probe].run(ctx)
    except ProbeNotApplicable as exc:
        return Outcome(Status.NOT_APPLICABLE, f"n/a: {exc}")
    except ServerFinding as exc:
        return Outcome(Status.FINDING, str(exc), server.log_tail(), ProbeOutput(exc.samples, ()))
    except VacuousResult as exc:
        return Outcome(Status.ERROR, f"vacuous: {exc}")
    except (ServerError, ValueError) as exc:
        dying_s = 0.5 if isinstance(exc, ConnectionLost) else 0.0
        exit_note = died(server, dying_s)
        if exit_note and not server.stopped_by_harness:  # it died by itself: a finding about the revision
            cause = last_exception(server.log_tail(200))
            return Outcome(Status.FINDING, f"server died during this probe{exit_note}"
                                           f"{f': {cause}' if cause else ''} (request: {exc})",
                           server.log_tail())
        return Outcome(Status.ERROR, str(exc), server.log_tail())
    except Exception as exc:
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        return Outcome(Status.ERROR, f"probe failed: {type(exc).__name__}: {exc} "
                                     f"(at {Path(frame.filename).name}:{frame.lineno}){died(server)}",
                       server.log_tail())
    wall_s = round(time.time() - t0, 3)
    output = dataclasses.replace(output, facts={**output.facts, path_proof.FACT: scrape.after()})
    foreign = watch.foreign() if watch is not None else []
    if foreign:
        output = dataclasses.replace(output, facts={**output.facts, FOREIGN_FACT: foreign})
    broken = output.non_finite()
    if broken:  # the server answered, but a figure it gave is NaN or inf: no statistic may use it
        return Outcome(Status.FINDING, broken, server.log_tail(), ProbeOutput(output.samples, ()), wall_s=wall_s)
    unknown = PROBES[probe].undeclared(output)
    if unknown:  # a figure no declaration says decides or why not: never a silent pass
        return Outcome(Status.ERROR, f"probe {probe} recorded undeclared figures: {', '.join(unknown)} "
                                     f"(each goes in its ProbeKind.figures)", server.log_tail())
    return Outcome(Status.OK, "", server.log_tail(12), output, wall_s=wall_s)


def finish_job(run: Run, job: Job, outcome: Outcome) -> bool:
    """Every pending probe of the job ends with the same outcome (n/a, launch failure)."""
    for probe in job.todo:
        record_cell(run, job, probe, outcome)
    return False


def record_cell(run: Run, job: Job, probe: str, outcome: Outcome) -> None:
    if run.cancelled.is_set():  # cut short by the interrupt's stopping the server: measured again on --resume
        return
    cell = run.recorder.cell(job, probe, outcome)
    # An error (the harness could not measure) is in results.json, never in the store: it is
    # no result about the revision, and the next run measures the cell again.
    if job.keys[probe] is not None and cell.status != Status.ERROR:
        run.store.put(job.keys[probe], cell)
    run.recorder.add(cell, reused=False, observer=run.observer)


# -- planning ------------------------------------------------------------------------

def with_references(suite: Suite, chosen: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """The configurations (and their probes) a `--config`/`--probe` choice leaves out that a
    chosen one is compared with (`ProbeKind.reference`): each runs the probe that reads it, so
    that the comparison has its cells."""
    added: dict[str, tuple[str, ...]] = {}
    for name, probes in chosen.items():
        for probe in probes:
            kind = known_probes()[probe]
            if kind.reference is None:
                continue
            running = [c.name for c in suite.configs if probe in c.probes]
            ref = kind.reference(name, suite.probe_spec(probe).params, running)
            if ref is not None and probe not in chosen.get(ref, ()) and probe not in added.get(ref, ()):
                added[ref] = (*chosen.get(ref, ()), *added.get(ref, ()), probe)
    return added


def plan(suite: Suite, req: RunRequest) -> tuple[ConfigPlan, ...]:
    specs = [suite.config(n) for n in dict.fromkeys(req.only_configs)] if req.only_configs \
        else list(suite.configs)
    check_reserved(req.extra_args, "--server-arg")
    for p in req.only_probes:
        if p not in known_probes():
            raise UsageError(f"unknown probe {p!r} (known: {', '.join(sorted(known_probes()))})")
    chosen = {spec.name: tuple(p for p in spec.probes if not req.only_probes or p in req.only_probes)
              for spec in specs}
    while added := with_references(suite, chosen):  # a reference may have its own
        for name, probes in added.items():
            if name not in chosen:
                specs.append(suite.config(name))
            chosen[name] = probes
    plans = []
    for spec in specs:
        probes = chosen[spec.name]
        if not probes:
            continue
        server = suite.server_config(spec, req.target)
        server = dataclasses.replace(server, args=(*server.args, *req.extra_args),
                                     env={**server.env, **req.extra_env})
        workloads = {p: build_workload(scaled(suite.workload.with_overrides(suite.probe_spec(p).params),
                                              req.workload_scale))
                     for p in probes}
        plans.append(ConfigPlan(spec, server, probes, workloads, probe_server_args(probes)))
    if not plans:
        raise UsageError(f"{suite.path}: nothing to run after --config/--probe filters")
    return tuple(plans)


def plan_units(run: Run) -> list[Unit]:
    """The jobs in plan order, sides alternating per configuration; a configuration with an
    interleaved or a sequential probe is one unit of both jobs (its servers are up together),
    unless the run's slots hold only one server at a time (`schedule.side_by_side`): then its
    sides run in turn, and its interleaved probes' cells say so (`IN_TURN`)."""
    units = []
    together = side_by_side(run.req.slots)
    for i, cp in enumerate(run.plans):
        if together and both_sides_together(run.suite, cp):
            units.append(Unit(i, role_order(i)))
        else:
            units += [Unit(i, (role,)) for role in role_order(i)]
    if len(run.req.sides) < len(Role):  # one side's jobs only (a Slurm job, harness/slurm.py)
        if pair := next((u for u in units if len(u.roles) > 1), None):
            raise UsageError(f"config {run.plans[pair.config_index].spec.name!r}: its probes measure both sides "
                             f"together; it cannot run one side alone")
        units = [u for u in units if u.roles[0] in run.req.sides]
    return units


def both_sides_together(suite: Suite, cp: ConfigPlan) -> bool:
    """Whether a configuration's two servers are up together: an interleaved probe (its rounds
    alternate sides) or a sequential one (its looks measure both again)."""
    return any(PROBES[p].interleaved for p in cp.probes) or bool(sequential_probes(suite, cp))


def cell_order(plans: tuple[ConfigPlan, ...]) -> tuple[tuple[str, Role, str], ...]:
    """Where each cell goes in results.json: plan order, as a one-slot run measures them,
    whatever order concurrent jobs finish in."""
    return tuple((cp.spec.name, role, p) for i, cp in enumerate(plans) for role in role_order(i) for p in cp.probes)


def role_order(index: int) -> tuple[Role, Role]:
    """Alternate which side goes first, so drift over a run does not favour one side."""
    return (Role.BASE, Role.CANDIDATE) if index % 2 == 0 else (Role.CANDIDATE, Role.BASE)


def scaled(spec: WorkloadSpec, factor: int) -> WorkloadSpec:
    return spec if factor == 1 else dataclasses.replace(spec, prompts=spec.prompts * factor)


def check_writable(req: RunRequest) -> None:
    for what, path in (("--out", req.out_dir), ("--store", req.store_root)):
        try:
            path.mkdir(parents=True, exist_ok=True)
            tempfile.TemporaryFile(dir=path).close()
        except OSError as exc:
            raise UsageError(f"{what} {path} is not writable: {exc.strerror or exc}") from None


def probe_server_args(probes: tuple[str, ...]) -> tuple[str, ...]:
    """The server flags the probes need, one server serving them all."""
    return dedupe_flags(tuple(a for p in probes for a in PROBES[p].server_args))


def dedupe_flags(args: tuple[str, ...]) -> tuple[str, ...]:
    """Probe flags are a union; keep the first occurrence of each flag and its value."""
    out: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(args):
        flag = args[i]
        has_value = i + 1 < len(args) and not args[i + 1].startswith("--")
        if flag not in seen:
            seen.add(flag)
            out += [flag, args[i + 1]] if has_value else [flag]
        i += 2 if has_value else 1
    return tuple(out)


# -- outcomes ------------------------------------------------------------------------

# How a cell whose server never became healthy begins its reason (selftest reads it).
LAUNCH_FAILED = "launch failed"


def launch_outcome(failure: LaunchError) -> Outcome:
    """A revision refusing a combination is n/a (a result); anything else, a crash above all, is
    an error with the crash's own last lines."""
    refusal = rejection_cause(failure.log_tail)
    if refusal and failure.exit_code is not None:
        return Outcome(Status.NOT_APPLICABLE,
                       f"n/a at this revision: rejected at launch: {refusal.strip()[-240:]}", failure.log_tail)
    cause = last_exception(failure.log_tail)
    return Outcome(Status.ERROR, f"{LAUNCH_FAILED}: {failure}{f' ({cause})' if cause else ''}", failure.log_tail)


def rejection_cause(log_tail: str) -> str | None:
    """The revision's refusal of the configuration, where that refusal is why the server exited:
    its last exception (an argument check raising "X is not supported"); where it raised none,
    the last line it wrote (argparse's "invalid choice"). A rejection
    phrase anywhere else (a warning that something "is not supported" above a crash of another
    kind) says nothing about why it died."""
    cause = last_exception(log_tail)
    if cause is not None:
        return cause if REJECTION.search(cause) else None
    lines = [line for line in log_tail.splitlines() if line.strip()]
    return lines[-1] if lines and REJECTION.search(lines[-1]) else None


def died(server: ServerProcess, dying_s: float = 0.0) -> str:
    """` (server was killed by SIGKILL)` once it is gone; one that dropped the connection gets
    `dying_s` to finish exiting, so its exit is reported rather than raced."""
    try:
        code = server.proc.wait(timeout=dying_s)
    except subprocess.TimeoutExpired:
        return ""
    return f" (server {exit_text(code)})"
