"""Interleaving: a configuration whose servers are up together (an interleaved or a
sequential probe), its noisy probes measured round by round, sides alternating (A B B A …),
and an *unknown* sequential comparison measured again (`looks`, harness/sequential.py).
"""

from __future__ import annotations

import dataclasses
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from harness import path_proof
from harness.client import SGLangClient
from harness.compare import compare_pair
from harness.errors import VacuousResult
from harness.jobs import Job, Outcome
from harness.pipeline.open import Run
from harness.pipeline.outcome import probe_outcome, record_cell
from harness.pipeline.plan import scaled, sequential_probes
from harness.pipeline.steps import JOB_STEPS, open_client, run_step, stop_job
from harness.pipeline.verify_relaunched import verify_row
from harness.probes import PROBES
from harness.results import ProbeComparison, ProbeOutput, Role, Status
from harness.runner import FOREIGN_FACT, merged_foreign
from harness.sequential import WORKLOAD_GROWTH, Look, LookBudget, LookState
from harness.verdict_stats import Kind, Verdict
from harness.workloads import build as build_workload


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
            sequential = sequential_probes(run.suite, jobs[0].cp)
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
                    verify_row(run, jobs[0].cp.spec.name, probe, clients, "still up",
                               logs={job.role: job.server for job in live if job.server is not None})
        finally:
            # Both at once too: SGLang takes seconds to shut down (5.7 s a server on the H200).
            list(launching.map(lambda job: stop_job(run, job), jobs))


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
    assert earlier.output is not None and later.output is not None, "OK outcomes carry their output"
    placed = {**later.output.facts}
    placed["first_side"] = [*earlier.output.facts.get("first_side", []), *later.output.facts.get("first_side", [])]
    output = merged_rounds(probe, [earlier, later])
    output = dataclasses.replace(output, facts={**output.facts, **{k: placed[k] for k in PLACEMENT_FACTS if k in placed}})
    return Outcome(Status.OK, "", later.log_tail, output, wall_s=round((earlier.wall_s or 0.0) + (later.wall_s or 0.0), 3))


PLACEMENT_FACTS = ("placement", "first_side", "placement_seed")


def merged_rounds(probe: str, outcomes: list[Outcome]) -> ProbeOutput:
    """An interleaved probe's OK outcomes of one side merged by its `merge` (an interleaved probe
    has one), their path proofs and foreign processes as one."""
    merge = PROBES[probe].merge
    outputs = [o.output for o in outcomes if o.output is not None]
    assert merge is not None and len(outputs) == len(outcomes), "OK rounds of an interleaved probe"
    return with_path(merge(outputs), outputs)


def with_path(output: ProbeOutput, parts: list[ProbeOutput]) -> ProbeOutput:
    """A merged output with its parts' path proofs as one (harness/path_proof.py), and every
    foreign GPU process any part saw (harness/runner.py)."""
    path = path_proof.merged([p.facts for p in parts])
    foreign = merged_foreign([p.facts.get(FOREIGN_FACT) or [] for p in parts])
    facts = {**output.facts, **({path_proof.FACT: path} if path is not None else {}),
             **({FOREIGN_FACT: foreign} if foreign else {})}
    return dataclasses.replace(output, facts=facts)


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
        output = merged_rounds(probe, outcomes)
    except VacuousResult as exc:
        return Outcome(Status.ERROR, f"vacuous: {exc}")
    output = dataclasses.replace(output, facts={**output.facts, **placement})
    return Outcome(Status.OK, "", outcomes[-1].log_tail, output,
                   wall_s=round(sum(o.wall_s or 0.0 for o in outcomes), 3))
