"""How one probe ends on one job (`Outcome`: a result, n/a, an error or a finding), and each
cell recorded the moment it exists.
"""

from __future__ import annotations

import dataclasses
import subprocess
import time
import traceback
from pathlib import Path

from harness import path_proof
from harness.client import ConnectionLost, SGLangClient
from harness.errors import LaunchError, ProbeNotApplicable, ServerError, ServerFinding, VacuousResult
from harness.jobs import Job, Outcome
from harness.logparse import canary_violations, last_exception
from harness.pipeline.open import Run
from harness.pipeline.plan import noisy_on
from harness.probes import PROBES, ProbeContext
from harness.results import ProbeOutput, Status
from harness.runner import FOREIGN_FACT, Watch, visible_devices
from harness.server import ServerProcess, exit_text
from harness.targets import REJECTION


def probe_outcome(run: Run, job: Job, client: SGLangClient, probe: str,
                  rounds: tuple[int, ...] | None = None) -> Outcome:
    """One probe on the job's server (of an interleaved probe, only `rounds`); whatever goes
    wrong fails this cell, not the suite."""
    server = job.server
    assert server is not None and server.proc is not None, "a probe runs once launch_server has started its server"
    if (code := server.proc.poll()) is not None:  # not alive: it has exited
        return Outcome(Status.ERROR, f"server {exit_text(code)} before this probe", server.log_tail())
    ctx = ProbeContext(client=client, server=server, config=job.cp.server, workload=job.cp.workloads[probe],
                       params=run.suite.probe_spec(probe).params, server_info=job.server_info,
                       advance=run.observer.probing(job.cp.spec.name, job.role.value, probe), rounds=rounds)
    scrape = path_proof.Scrape(client.metrics_text, job.cp.server.features,
                               path_proof.METRICS_FLAG in (*job.args, *job.cp.server.args),
                               server.log_size, server.log_since)
    # A noisy measurement is watched for another program's work on the server's GPUs.
    watch = Watch(visible_devices(job.env)) if noisy_on(run.suite, job.cp, probe) else None
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
    canary = unread_canary_violations(server)
    if canary:  # the KV canary's report is a finding of the row, whatever the probe measured
        return Outcome(Status.FINDING, canary_text(canary), server.log_tail(), ProbeOutput(output.samples, ()),
                       wall_s=wall_s)
    broken = output.non_finite()
    if broken:  # the server answered, but a figure it gave is NaN or inf: no statistic may use it
        return Outcome(Status.FINDING, broken, server.log_tail(), ProbeOutput(output.samples, ()), wall_s=wall_s)
    unknown = PROBES[probe].undeclared(output)
    if unknown:  # a figure no declaration says decides or why not: never a silent pass
        return Outcome(Status.ERROR, f"probe {probe} recorded undeclared figures: {', '.join(unknown)} "
                                     f"(each goes in its ProbeKind.figures)", server.log_tail())
    return Outcome(Status.OK, "", server.log_tail(12), output, wall_s=wall_s)


def unread_canary_violations(server: ServerProcess) -> list[str]:
    """The KV canary's violations the server logged since the last cell that read them (the
    first: since it started), so none is lost: one logged at warm-up, between two probes, or by
    a probe that ended in n/a or an error falls to the next cell that completes."""
    start = server.log_start if server.canary_read is None else server.canary_read
    end = server.log_size()
    server.canary_read = end
    return canary_violations(server.log_since(start, end))


def canary_text(violations: list[str]) -> str:
    """A cell's reason for the KV canary's violations: how many, and the first as logged."""
    first = violations[0] if len(violations[0]) <= 300 else violations[0][:300] + "…"
    return (f"KV canary: {len(violations)} violation{'s' if len(violations) != 1 else ''} logged during this "
            f"probe; first: {first}")


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
    key = job.keys[probe]
    if key is not None and cell.status != Status.ERROR:
        run.store.put(key, cell)
    run.recorder.add(cell, reused=False, observer=run.observer)


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
    assert server.proc is not None, "a server that ran a probe was started"
    try:
        code = server.proc.wait(timeout=dying_s)
    except subprocess.TimeoutExpired:
        return ""
    return f" (server {exit_text(code)})"
