"""Reproducers: each *different* row's posted to both sides' servers before it is published
(harness/verify.py), on its own servers still up (`verify_row`, from harness.pipeline.interleave)
or on servers of each side started again (`verify_relaunched`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from typing import Iterator, Mapping

from harness.capabilities import NotExpressible
from harness.client import SGLangClient
from harness.errors import LaunchError, UsageError
from harness.jobs import ConfigPlan
from harness.pipeline.open import Run
from harness.pipeline.steps import compiled_capabilities, server_flags, server_log
from harness.redaction import environment_secrets, scrub, scrub_file
from harness.results import Reproducer, Role
from harness.server import ServerProcess, launch
from harness.targets import TRANSIENT_LAUNCH_FAILURES
from harness.verify import ServerLog, not_verified, verify


# The servers verify_relaunched starts for a row's reproducer, as its record names them.
RELAUNCHED = "relaunched"


def unverified(run: Run, config: str, probe: str) -> Reproducer | None:
    """The pair's reproducer if it has requests to post and no verification yet."""
    comp = run.recorder.comparison(config, probe)
    rep = None if comp is None else comp.reproducer
    return rep if rep is not None and rep.form is not None and rep.verification is None else None


def verify_row(run: Run, config: str, probe: str, clients: dict[Role, SGLangClient], servers: str,
               reference: dict[Role, SGLangClient] | None = None, logs: Mapping[Role, ServerLog] | None = None) -> None:
    """The row's reproducer posted to `clients` (harness/verify.py), within the run's budget; one
    against a reference configuration (`Form.reference`) to `reference`'s servers too, and left
    for verify_relaunched where they are not given (the row's own servers still up)."""
    rep = unverified(run, config, probe)
    if rep is None or rep.form is None or run.req.reproducer_budget <= 0 or run.cancelled.is_set():
        return
    if rep.form.reference and reference is None or rep.form.fresh_servers and servers != RELAUNCHED:
        return  # left for verify_relaunched: the reference's servers, or servers started for it
    also = f" and {rep.form.reference}'s" if rep.form.reference else ""
    print(f"detcheck: {config} {probe} reads different: posting its reproducer to both sides' servers{also} "
          f"({servers}), at most {run.req.reproducer_budget} requests", file=sys.stderr)
    with run.recorder.clock("reproducers"):
        run.recorder.verified(config, probe, verify(rep, clients, servers, run.req.reproducer_budget,
                                                    reference=reference, logs=logs))


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
        todo = {probe: rep for probe in cp.probes if (rep := unverified(run, cp.spec.name, probe)) is not None}
        if not todo:
            continue
        with reproducer_servers(run, cp) as (clients, failure, logs):
            for probe, rep in todo.items():
                name = rep.form.reference if rep.form is not None else None
                if failure or not name:
                    verify_on(run, rep, cp.spec.name, probe, clients, failure, logs=logs)
                    continue
                with reference_servers(run, cp, name) as (reference, ref_failure, _):
                    verify_on(run, rep, cp.spec.name, probe, clients, ref_failure, reference)


def verify_on(run: Run, rep: Reproducer, config: str, probe: str, clients: dict[Role, SGLangClient], failure: str,
              reference: dict[Role, SGLangClient] | None = None, logs: Mapping[Role, ServerLog] | None = None) -> None:
    """The row's reproducer `rep` verified on relaunched servers, or said not to be and why."""
    if failure:
        run.recorder.verified(config, probe, not_verified(rep, failure, RELAUNCHED, run.req.reproducer_budget))
    else:
        verify_row(run, config, probe, clients, RELAUNCHED, reference, logs)


# A side's clients, why one did not start (""), and each started server (its log).
Started = tuple[dict[Role, SGLangClient], str, dict[Role, ServerProcess]]


@contextlib.contextmanager
def reference_servers(run: Run, cp: ConfigPlan, name: str) -> Iterator[Started]:
    """A server per side of the reference configuration `name` that `cp`'s row is compared with
    (logged as `<config>-reproducer-reference-<role>-<sha>.log`), on the slots after the row's."""
    ref = next((p for p in run.plans if p.spec.name == name), None)
    if ref is None:
        yield {}, f"the reference configuration {name} is not in this run's plan", {}
        return
    with reproducer_servers(run, ref, label=f"{cp.spec.name}-reproducer-reference", first_slot=2,
                            named=True) as found:
        yield found


@contextlib.contextmanager
def reproducer_servers(run: Run, cp: ConfigPlan, label: str = "", first_slot: int = 0, named: bool = False
                       ) -> Iterator[Started]:
    """A server per side of the configuration, as its jobs started them (the revision's flags,
    the run's slots from `first_slot`, round the run's), logged beside theirs
    (`<label>-<role>-<sha>.log`, by default `<config>-reproducer-…`): their clients, or why one
    did not start (`named`: the configuration named in it), and the servers (their logs)."""
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
                functools.partial(target.launch_argv, cp.server, args),
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
        yield clients, failure, servers
    finally:
        for server in servers.values():
            server.stop()
            scrub_file(server.log_path, tuple(secrets))
