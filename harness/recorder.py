"""RunRecorder: the cells and launches of one run as they arrive, and the RunResult they make.

Cell metadata is assembled here and nowhere else; comparisons are computed once per
(configuration, probe), when both sides exist, and reused by every later save.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

from harness import __version__, path_proof
from harness.compare import compare_pair, reference_of
from harness.jobs import Job, Outcome, RunRequest
from harness.metadata import host_metadata
from harness.observer import RunObserver
from harness.redaction import scrub, scrub_all
from harness.results import CellResult, Launch, ProbeComparison, Reproducer, Role, RunPlan, RunResult
from harness.pipeline.start_order import StartOrder

if TYPE_CHECKING:
    from harness.suite import Suite


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class StepClock:
    """Seconds spent per pipeline step (checkout, help, startup, probes, teardown, writing…),
    summed over jobs: what `nox -s bench` splits a run's wall time into."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def __call__(self, step: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self.seconds[step] = self.seconds.get(step, 0.0) + time.perf_counter() - t0


class RunRecorder:
    """Thread-safe: jobs running at once add cells and launches; a result lists them in plan
    order, whichever finished first."""

    def __init__(self, suite: Suite, req: RunRequest, cell_order: tuple[tuple[str, Role, str], ...]):
        """`cell_order`: the plan's (configuration, role, probe) triples, the order of the cells;
        the comparisons follow its (configuration, probe) pairs."""
        self.suite, self.req = suite, req
        self.cell_position = {cell: i for i, cell in enumerate(cell_order)}
        self.job_position: dict[tuple[str, Role], int] = {}
        for i, (config, role, _) in enumerate(cell_order):
            self.job_position.setdefault((config, role), i)
        self.order = tuple(dict.fromkeys((config, probe) for config, _, probe in cell_order))
        # What this run sets out to measure, recorded from its first save: the sides it measures.
        self.run_id = req.run_id or uuid.uuid4().hex
        self.planned = tuple((config, probe, role) for config, role, probe in cell_order if role in req.sides)
        self.host = host_metadata()
        self.started = utc_now()
        self.cells: list[CellResult] = []
        self.launches: list[Launch] = []
        self._comparisons: dict[tuple[str, str], ProbeComparison] = {}
        self.clock = StepClock()
        # Per role, the environment its revision's env file gave it (harness.envs), as recorded.
        self.environments: dict[str, dict] = {}
        # Every job's secrets: the recorded command line was masked by flag names alone, before
        # any revision's --help said which other flags are secrets.
        self._secrets: set[str] = set()
        self._lock = threading.Lock()  # jobs run in threads (server slots)

    def cell(self, job: Job, probe: str, outcome: Outcome) -> CellResult:
        """The cell a job's probe ended with: where it was measured (the job's metadata), under
        which key, with the job's secrets masked in what the server said."""
        cp, key, secrets = job.cp, job.keys[probe], job.secrets
        with self._lock:
            self._secrets.update(secrets)
        workload = cp.workloads[probe]
        meta = {**job.meta, "finished_at": utc_now(), "workload": workload.spec.to_dict(),
                "workload_name": workload.name}
        if outcome.wall_s is not None:
            meta["probe_wall_s"] = outcome.wall_s
        if probe in job.earlier:
            meta["earlier"] = job.earlier[probe]
        output = outcome.output
        metrics = output.metrics if output else ()
        if output is not None and path_proof.counters_decide(cp.server.features, metrics):
            metrics = (*metrics, *path_proof.exact_metrics(output.facts))
        return CellResult(
            config=cp.spec.name, probe=probe, role=job.role, revision=job.revision.info,
            status=outcome.status,
            config_fingerprint=cp.server.fingerprint, workload_fingerprint=workload.fingerprint,
            samples=output.samples if output else (), metrics=metrics,
            facts=output.facts if output else {},
            reason=scrub(outcome.reason, secrets), log_tail=scrub(outcome.log_tail, secrets),
            metadata=meta, key=key.to_dict() if key else None)

    def add(self, cell: CellResult, reused: bool, observer: RunObserver) -> None:
        with self._lock:
            self.cells.append(cell)
        observer.cell_done(cell, reused)

    def launched(self, launch: Launch, observer: RunObserver) -> None:
        with self._lock:
            self.launches.append(launch)
        observer.launched(launch)

    def ended(self, launch: Launch, when: float) -> None:
        """The launch's server is stopped: its record gets the time."""
        with self._lock:
            index = next(i for i, known in enumerate(self.launches) if known is launch)
            self.launches[index] = dataclasses.replace(launch, ended_at=round(when, 3))

    def result(self, partial: bool, complete: bool = False) -> RunResult:
        """The run as it stands; `complete`: this is its last step's record (`pipeline.finish`,
        a Slurm merge of every job), the only one a pass may be read from."""
        with self._lock:
            cells = tuple(sorted(self.cells, key=lambda c: self.cell_position[(c.config, c.role, c.probe)]))
            # Stable: a configuration's relaunches (a port taken) keep their order.
            launches = tuple(sorted(self.launches, key=lambda l: self.job_position[(l.config, l.role)]))
            secrets = sorted(self._secrets, key=len, reverse=True)  # a secret holding another: masked whole
        return RunResult(
            suite=self.suite.name, target=self.req.target,
            base=self.req.base.info, candidate=self.req.candidate.info,
            cells=cells, comparisons=self._compare(cells, partial), launches=launches,
            metadata={**self.host, "suite_path": str(self.suite.path), "command": scrub(self.req.command_line, secrets),
                      **({"overrides": self.req.overrides} if self.req.overrides else {}),
                      **({"sessions": [*self.req.earlier_sessions,
                                       {"command": scrub(self.req.command_line, secrets), "launches": len(launches)}]}
                         if self.req.earlier_sessions else {}),
                      # masked as the command is: a flag secret only by its --help is known now
                      **({"options": scrub_all(self.req.options, secrets)} if self.req.options else {}),
                      "started_at": self.started, "harness_version": __version__,
                      "finished_at": utc_now(), "slots": len(self.req.slots),
                      **({"start_order": self.req.start_order.to_dict()}
                         if self.req.start_order != StartOrder() else {}),
                      **({"environments": self.environments} if self.environments else {}),
                      "step_seconds": {k: round(v, 3) for k, v in sorted(self.clock.seconds.items())}},
            # every probe's parameters as judged: what `report` judges the cells again with
            plan=RunPlan(self.run_id, self.planned, {probe: self.suite.probe_spec(probe).params
                                                     for probe in dict.fromkeys(p for _, p in self.order)},
                         complete=complete),
        )

    def comparison(self, config: str, probe: str) -> ProbeComparison | None:
        """The (configuration, probe) pair's comparison, once both its cells (and its reference
        configuration's) are recorded."""
        with self._lock:
            known = self._comparisons.get((config, probe))
            by_key = {(c.config, c.probe, c.role): c for c in self.cells}
        base, cand = by_key.get((config, probe, Role.BASE)), by_key.get((config, probe, Role.CANDIDATE))
        if known is not None or base is None or cand is None or not self._reference_done(config, probe, by_key):
            return known
        comparison = compare_pair(config, probe, base, cand, self.suite.probe_params, by_key)
        with self._lock:
            return self._comparisons.setdefault((config, probe), comparison)

    def adopt(self, launches: list[Launch], comparisons: list[ProbeComparison]) -> None:
        """Launches and comparisons another run made (a Slurm job of harness/slurm.py): its
        comparisons are kept as made (with their reproducers' verification), not made again."""
        with self._lock:
            self.launches += launches
            self._comparisons.update({(c.config, c.probe): c for c in comparisons})

    def verified(self, config: str, probe: str, reproducer: Reproducer) -> None:
        """The pair's reproducer as its verification on the servers left it (harness/verify.py)."""
        with self._lock:
            secrets = sorted(self._secrets, key=len, reverse=True)
            v = reproducer.verification
            # what a server answered (an error's text) is masked as a cell's reason is
            reproducer = dataclasses.replace(
                reproducer, expect=scrub(reproducer.expect, secrets), shrink=scrub(reproducer.shrink, secrets),
                verification=v and dataclasses.replace(v, observed=scrub(v.observed, secrets),
                                                       error=scrub(v.error, secrets)))
            comp = self._comparisons[(config, probe)]
            self._comparisons[(config, probe)] = dataclasses.replace(comp, reproducer=reproducer)

    def _reference_done(self, config: str, probe: str, by_key: dict) -> bool:
        """Both cells of the configuration `config` is compared with exist (or it has none)."""
        ref = reference_of(config, probe, by_key, self.suite.probe_spec(probe).params)
        return ref is None or (ref.base is not None and ref.candidate is not None)

    def _compare(self, cells: tuple[CellResult, ...], partial: bool) -> tuple[ProbeComparison, ...]:
        """In plan order; a pair with a side still missing (or its reference configuration's cells)
        is compared only at the end (where it reads "no … result"), and is not cached."""
        by_key = {(c.config, c.probe, c.role): c for c in cells}
        out = []
        for config, probe in self.order:
            base = by_key.get((config, probe, Role.BASE))
            cand = by_key.get((config, probe, Role.CANDIDATE))
            if (config, probe) in self._comparisons:
                out.append(self._comparisons[(config, probe)])
            elif base is not None and cand is not None and self._reference_done(config, probe, by_key):
                comparison = compare_pair(config, probe, base, cand, self.suite.probe_params, by_key)
                self._comparisons[(config, probe)] = comparison
                out.append(comparison)
            elif not partial:
                out.append(compare_pair(config, probe, base, cand, self.suite.probe_params, by_key))
        return tuple(out)
