"""The predicate: one commit judged against good by one good-vs-commit run of the pipeline
(`evaluate`), an *unknown* measured again with more prompts; `step` is `detcheck bisect-step`,
which `git bisect run` calls.
"""

from __future__ import annotations

import math
from pathlib import Path

from harness.bisect.session import ABORT, DIFFERENT, SAME, SKIP, BisectSpec, Evaluation, append_log, read_log
from harness.completeness import gaps, summary
from harness.errors import UsageError
from harness.gitcmd import git
from harness.jobs import RunRequest
from harness.pipeline.slots import cpu_slots
from harness.results import CellResult, ProbeComparison, Role, RunResult, Status
from harness.revisions import Revision
from harness.run import execute
from harness.verdict_stats import Verdict, combine_verdicts
from harness.textfmt import fmt_pair


def evaluate(spec: BisectSpec, sha: str, phase: str = "step", slots: int = 1) -> Evaluation:
    """Judge one commit against good through the pipeline, with up to `slots` servers at once
    (the endpoint: good and bad measured together); log it in the session."""
    subject = git(spec.repo, "log", "-1", "--format=%s", sha, check=False)
    launches, scale = 0, 1
    while True:
        req = run_request(spec, sha, scale, slots)
        results = str(req.out_dir / "results.json")
        try:
            result = execute(req)
        except UsageError as exc:  # the commit cannot be checked out
            ev = Evaluation(phase, sha, subject, "skip", SKIP, launches, scale, f"cannot check out: {exc}")
            break
        launches += len(result.launches)
        verdict, code, note = judge(result)
        if code is not None:
            ev = Evaluation(phase, sha, subject, verdict, code, launches, scale, note, results)
            break
        following = next_scale(result, scale, spec.max_scale)
        if following is None:
            ev = Evaluation(phase, sha, subject, "unknown", SKIP, launches, scale,
                            f"still unknown with {scale}× prompts ({note}); skipped", results)
            break
        scale = following
    append_log(spec, ev)
    return ev


def run_request(spec: BisectSpec, sha: str, scale: int, slots: int = 1) -> RunRequest:
    return RunRequest(
        suite_path=spec.suite, target=spec.target,
        base=Revision.resolve(spec.repo, spec.good), candidate=Revision.resolve(spec.repo, sha),
        out_dir=spec.session_dir / "runs" / f"{sha[:12]}-x{scale}", store_root=spec.store_root,
        python=spec.python, only_configs=spec.configs, only_probes=spec.probes,
        workload_scale=scale, env_options=spec.env_options, command_line=f"detcheck bisect-step --commit {sha}",
        slots=cpu_slots(slots), reproducer_budget=0,  # a step needs its verdict, not a verified reproducer
    )


def difference_text(comp: ProbeComparison, good: CellResult, bad: CellResult) -> str:
    """Where an exact comparison first differs, its values as the report writes them (the
    fewest digits that tell them apart: `0 vs 0.00659`, not the 17 digits of their repr); any
    other comparison's own note."""
    name = comp.decided_by
    decided = comp.metrics.get(name) if name else None
    first = decided.first_difference if decided else None
    if name is None or first is None:
        return comp.note
    at_good, at_bad = good.metric(name), bad.metric(name)
    if at_good is None or at_bad is None or first >= min(len(at_good.values), len(at_bad.values)):
        return comp.note
    shown = fmt_pair(at_good.values[first], at_bad.values[first])
    return f"{name} differs at value {first}: {shown[0]} vs {shown[1]}"


def judge(result: RunResult) -> tuple[str, int | None, str]:
    """(verdict, exit code, note); the code is None when more samples would decide. A record
    short of its plan (`completeness.gaps`) is never *same*: the step is skipped, saying what
    is missing."""
    missing = gaps(result)
    if missing:
        return "skip", SKIP, f"the step's record is incomplete: {summary(missing)}"[:300]
    verdicts: list[Verdict] = []
    notes: list[str] = []
    for comp in result.comparisons:
        good = result.cell(comp.config, comp.probe, Role.BASE)
        cell = result.cell(comp.config, comp.probe, Role.CANDIDATE)
        where = f"{comp.config}/{comp.probe}"
        if good is None or good.status != Status.OK:
            reason = good.reason if good else "no result"
            return "abort", ABORT, f"good endpoint cannot be measured: {where}: {reason}"
        if cell is None or cell.status == Status.NOT_APPLICABLE:
            return "skip", SKIP, f"{where}: {cell.reason if cell else 'no result'}"
        if cell.status == Status.ERROR:
            served = any(l.ok and l.role == Role.CANDIDATE and l.config == comp.config
                         for l in result.launches)
            if not served:  # never ran: cannot be tested, which is not a verdict on the code
                return "skip", SKIP, f"{where}: {first_line(cell.reason)}"
            # The good endpoint served this probe: failing it is a change in behaviour.
            verdicts.append(Verdict.DIFFERENT)
            notes.append(f"{where}: failed on a running server: {first_line(cell.reason)}")
            continue
        verdicts.append(Verdict(comp.verdict))
        if comp.verdict != Verdict.SAME.value:
            notes.append(f"{where}: {difference_text(comp, good, cell)}")
    verdict = combine_verdicts(verdicts)
    note = "; ".join(notes)[:300]
    if verdict == Verdict.UNKNOWN:
        return verdict.value, None, note
    return verdict.value, DIFFERENT if verdict == Verdict.DIFFERENT else SAME, note


def next_scale(result: RunResult, scale: int, max_scale: int) -> int | None:
    """The prompts multiple an *unknown* run is measured again with: what its unknown
    comparisons say would resolve them (the largest; twice the current one where none gives an
    estimate), capped at `max_scale`; None when already there."""
    if scale >= max_scale:
        return None
    wanted = [math.ceil(scale * c.needed / c.base.n)
              for comp in result.comparisons if comp.verdict == Verdict.UNKNOWN.value
              for c in comp.metrics.values() if c.verdict == Verdict.UNKNOWN and c.needed and c.base.n]
    return min(max_scale, max([scale + 1, *wanted]) if wanted else scale * 2)


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:200]


def step(session_dir: Path, commit: str | None) -> int:
    """The predicate: judge BISECT_HEAD (or `commit`), print one line, return git's exit code."""
    spec = BisectSpec.load(session_dir)
    sha = commit or git(Path.cwd(), "rev-parse", "BISECT_HEAD")
    sha = git(spec.repo, "rev-parse", "--verify", f"{sha}^{{commit}}")
    n = sum(1 for e in read_log(session_dir) if e.phase == "step") + 1
    ev = evaluate(spec, sha, phase="step")
    print(ev.line(f"step {n}"), flush=True)
    return ev.exit_code
