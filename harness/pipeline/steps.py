"""One job, a configuration on a revision: a chain of JOB_STEPS over one `Job`.

    reuse_stored       exact cells already in the store need no server (noisy ones are
                       measured again: only the same run's measurements are comparable)
    environment_ready  a revision whose environment failed to build: its cells are errors
    resolve_flags      the revision's `--help` maps the configuration's features to flags
    launch_server      one server for every probe of the configuration
    run_probes         each probe on that server; each cell stored as soon as it exists

Every step takes `(Run, Job)` and returns False when it has finished the job.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, TypeGuard

from harness import path_proof
from harness.capabilities import Capabilities, NotExpressible, revision_capabilities
from harness.client import SGLangClient
from harness.errors import LaunchError, ServerError, UsageError
from harness.jobs import ConfigPlan, Job, Outcome
from harness.metadata import interpreter_id, revision_interpreter_metadata
from harness.paths import safe_name, sha_cache_file
from harness.pipeline.open import Run
from harness.pipeline.outcome import finish_job, launch_outcome, probe_outcome, record_cell
from harness.pipeline.plan import model_key, probe_server_args
from harness.pipeline.slots import Slot
from harness.probes import PROBES
from harness.redaction import environment_secrets, redact_argv, redact_env, scrub_file
from harness.results import CellResult, Launch, Role, Status
from harness.runner import runner_fingerprint
from harness.server import launch
from harness.suite import ServerConfig
from harness.targets import TRANSIENT_LAUNCH_FAILURES


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
        assert job.launch is not None, "launch_server records the launch of every server it starts"
        run.recorder.ended(job.launch, time.time())


def new_job(run: Run, cp: ConfigPlan, role: Role, slot: Slot) -> Job:
    env = {**cp.server.env, **slot.env, **run.req.role_env.get(role, {})}
    target = run.targets[role]
    return Job(cp, role, run.req.revision(role), target, run.worktrees[role],
               {p: run.key(cp, p, role) for p in cp.probes}, env=env,
               meta={**run.recorder.host, "target": target.name, "python": target.python,
                     **({"environment": run.envs[role].to_dict()} if role in run.envs else {})},
               secrets=environment_secrets({**os.environ, **env}, cp.server.args))


def reusable(stored: CellResult | None, noisy_too: bool = False) -> TypeGuard[CellResult]:
    """A stored cell stands for this run's: an exact one; a noisy one is measured again, unless
    the run measures points of a series (`RunRequest.reuse_noisy`: `detcheck history`)."""
    return stored is not None and (noisy_too or not stored.noisy)


def reuse_stored(run: Run, job: Job) -> bool:
    """Exact cells come from the store. A noisy cell (one with a noisy metric) is measured
    again whatever is stored: noisy values measured at another time, under another load, are
    not comparable with this run's, so both sides of a noisy comparison are measured in the
    same run (the stored one is kept in the cell's metadata, for reference only). A history's
    run (`reuse_noisy`) takes noisy cells too: each is one point of a series."""
    for probe in job.cp.probes:
        stored = run.stored_cell(job.keys[probe])
        if reusable(stored, run.req.reuse_noisy):
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
    a feature, or lacks one the configuration or a probe passes."""
    feature_args = caps.feature_args(server.features, server.draft_model)
    caps.check_args((*server.args, *probe_args))
    # The counters that show which path each probe took (harness/path_proof.py).
    return feature_args + probe_args + path_proof.metrics_args(caps.knows, (*server.args, *feature_args, *probe_args))


def revision_server_flags(caps: Capabilities, server: ServerConfig, probes: tuple[str, ...]) -> tuple[str, ...]:
    """The flags a server of the configuration gets at a revision (its `--help`, `caps`) to
    serve `probes`, as a run's job gets them: for programs that start a server outside a run
    (the GPU-session tools' tools/gpu/suite_server.py)."""
    return server_flags(caps, server, probe_server_args(probes))


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
        if PROBES[probe].interleaved and outcome.status == Status.OK and outcome.output is not None:
            # its sides were not up together
            outcome = dataclasses.replace(outcome, output=dataclasses.replace(
                outcome.output, facts={**outcome.output.facts, **IN_TURN}))
        record_cell(run, job, probe, outcome)
    return False


# An interleaved probe measured on one side's server alone, the other side's before or after it
# (one slot that holds one server: a server spanning every GPU of the entry): no rounds alternate.
IN_TURN = {"placement": "in turn"}


def open_client(run: Run, job: Job) -> SGLangClient:
    """A client of the job's server; what the server says about itself goes in the metadata."""
    assert job.server is not None, "a client is opened once launch_server has started the job's server"
    client = SGLangClient(job.server.url, timeout_s=run.suite.request_timeout_s)
    try:
        job.server_info = client.server_info()
    except ServerError:
        job.server_info = {}
    job.meta.update(server_version=job.server_info.get("version"),
                    max_total_num_tokens=job.server_info.get("max_total_num_tokens"))
    return client


JOB_STEPS: tuple[JobStep, ...] = (reuse_stored, environment_ready, resolve_flags, launch_server, run_probes)
