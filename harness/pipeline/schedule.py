"""Scheduling: every job of the runs, as many at once as their server slots allow
(harness.pipeline.slots), started in the start order (harness.pipeline.start_order), each unit
in a worker thread: a job (harness.pipeline.steps) or an interleaved configuration
(harness.pipeline.interleave). How jobs share slots: docs/SCHEDULING.md.
"""

from __future__ import annotations

import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from harness.pipeline.open import Run
from harness.pipeline.interleave import run_interleaved
from harness.pipeline.plan import model_key, plan_units
from harness.pipeline.slots import Countdown, SlotPool, Unit
from harness.pipeline.start_order import ModelGates, StartOrder, longest_first
from harness.pipeline.steps import compiled_capabilities, new_job, reusable, run_job
from harness.results import Role
from harness.server import stop_all


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
             for run in runs for unit in plan_units(run.req, run.suite, run.plans)]
    ordered = longest_first(units, [expected for _, _, expected in units])
    return [QueuedUnit(i, run, unit, model_key(run.plans[unit.config_index]), expected)
            for i, (run, unit, expected) in enumerate(ordered)]


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


def will_launch(run: Run, role: Role) -> bool:
    """Whether some cell of this role is still to measure (reuse_stored will not cover it)."""
    return any(not reusable(run.stored_cell(run.key(cp, probe, role)), run.req.reuse_noisy) for cp in run.plans for probe in cp.probes)


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
        run.save(partial=True)
