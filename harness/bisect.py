"""Bisect: the first commit between a good and a bad revision whose probe verdict flips.

`git bisect run` drives the search in a worktree of its own under the cache directory, so
the user's checkout (and any bisect of theirs: bisect state is per worktree) is untouched.
It runs with `--no-checkout`: git only moves BISECT_HEAD, and the pipeline checks each commit
out once, in the per-sha worktree `detcheck run` uses too.

The predicate (`detcheck bisect-step`) is one good-vs-commit run of the normal pipeline, so
the good endpoint is measured once and every commit's cells land in the store: a re-run, or
a bisect after `detcheck run`, reuses them. Its exit code is git's protocol: 0 same as good,
1 different, 125 cannot be tested (checkout, `--help` or launch failed, n/a at that
revision, or still *unknown* with the most prompts allowed), 128 the good endpoint itself
failed (aborts the bisect). An *unknown* verdict is measured again with the prompts its
comparison says would resolve it (twice as many where it gives no estimate), up to
`max_scale` times the suite's. Each step prints where its results are.

With k slots (k > 1) the driver is this module instead of `git bisect run`: the first-parent
history `git rev-list --reverse --first-parent good..bad` is split into k + 1 parts, the k split
points are evaluated at once (k threads, each its own run directory, one shared store), and the
range narrows to the part between the last good and the first bad of them: at most
⌈log_(k+1) N⌉ + 1 rounds. A skipped split point (exit 125) is left out of later picks, as
`git bisect skip` does; when only skipped commits remain, the range is reported in history order.

The culprit is confirmed as in Pinpoint and SGLang #25647: the bad endpoint with that commit
reverted must compare *same* to good.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from harness.bounded import RESULT_DOCUMENT, read_file_text
from harness.capabilities import revision_capabilities
from harness.envs import DEFAULT_BUILD_TIMEOUT_S, DEFAULT_ENV_FILE, EnvOptions
from harness.errors import LaunchError, UsageError
from harness.results import CellResult, ProbeComparison, Role, RunResult, Status
from harness.gitcmd import fixed_identity_env, git, git_argv, git_run
from harness.paths import PROJECT_ROOT, cache_dir, file_lock, safe_name
from harness.revisions import Revision
from harness.jobs import RunRequest
from harness.pipeline.plan import plan_request
from harness.run import execute
from harness.pipeline.slots import check_slot_count, cpu_slots
from harness.stats import Verdict, combine_verdicts
from harness.targets import get_target
from harness.textfmt import fmt_pair

SAME, DIFFERENT, SKIP, ABORT = 0, 1, 125, 128
SESSION_FILE = "session.json"
LOG_FILE = "evaluations.jsonl"
_LOG_LOCK = threading.Lock()  # k-ary bisect evaluates k commits in threads of one process


@dataclass(frozen=True)
class BisectSpec:
    """What every evaluation of one bisect shares; saved so the predicate can load it."""

    repo: Path
    good: str  # full sha
    suite: Path
    probes: tuple[str, ...]
    configs: tuple[str, ...] = ()
    target: str = "refserver"
    store_root: Path = Path()
    session_dir: Path = Path()
    max_scale: int = 8  # an unknown verdict is measured with more prompts, up to this multiple
    python: str | None = None
    env_options: EnvOptions = EnvOptions()  # every evaluated revision's environment (harness.envs)

    def save(self) -> Path:
        self.session_dir.mkdir(parents=True, exist_ok=True)
        path = self.session_dir / SESSION_FILE
        data = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}
        path.write_text(json.dumps(data, indent=1))
        return path

    @classmethod
    def load(cls, session_dir: Path) -> BisectSpec:
        path = session_dir / SESSION_FILE
        if not path.is_file():
            raise UsageError(f"{session_dir}: no bisect session here ({SESSION_FILE} missing)")
        try:
            d = json.loads(read_file_text(path, RESULT_DOCUMENT))
            # A session saved before environments were threaded through has none: the defaults.
            env = d.pop("env_options", {})
            return cls(**{**d, "repo": Path(d["repo"]), "suite": Path(d["suite"]),
                          "store_root": Path(d["store_root"]), "session_dir": Path(d["session_dir"]),
                          "probes": tuple(d["probes"]), "configs": tuple(d["configs"]),
                          "env_options": EnvOptions(env.get("file", DEFAULT_ENV_FILE),
                                                    tuple(env.get("pip_args", ())),
                                                    env.get("build_timeout_s", DEFAULT_BUILD_TIMEOUT_S))})
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSONDecodeError is a ValueError
            raise UsageError(f"{path}: corrupt bisect session file ({type(exc).__name__}: {exc}); "
                             f"run `detcheck bisect` again to start a new session") from None


@dataclass(frozen=True)
class Evaluation:
    """One commit judged against good: what git was told, and whether anything launched."""

    phase: str  # endpoint / step / confirm
    sha: str
    subject: str
    verdict: str  # same / different / unknown / skip / abort
    exit_code: int
    launches: int  # servers started for this commit (0: every cell came from the store)
    scale: int  # prompts multiple of the run that decided
    note: str = ""
    results: str = ""  # the results.json of the run that decided (absent in older logs)

    @property
    def source(self) -> str:
        if self.launches:
            return f"measured ({self.launches} launch{'es' if self.launches > 1 else ''})"
        return "not launched" if self.exit_code in (SKIP, ABORT) else "reused"

    def line(self, label: str) -> str:
        scale = f" ×{self.scale} prompts" if self.scale > 1 else ""
        note = f"  {self.note}" if self.note else ""
        where = f"\n{'':<9} results: {self.results}" if self.results else ""
        return (f"{label:<9} {self.sha[:12]}  {self.verdict:<9} exit {self.exit_code:<3} "
                f"{self.source}{scale}  {self.subject[:60]!r}{note}{where}")


def evaluate(spec: BisectSpec, sha: str, phase: str = "step", slots: int = 1) -> Evaluation:
    """Judge one commit against good through the pipeline, with up to `slots` servers at once
    (the endpoint: good and bad measured together); log it in the session."""
    subject = git(spec.repo, "log", "-1", "--format=%s", sha, check=False)
    launches, scale = 0, 1
    while True:
        req = _request(spec, sha, scale, slots)
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
    with _LOG_LOCK, open(spec.session_dir / LOG_FILE, "a") as f:
        f.write(json.dumps(asdict(ev)) + "\n")
    return ev


def _request(spec: BisectSpec, sha: str, scale: int, slots: int = 1) -> RunRequest:
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
    decided = comp.metrics.get(comp.decided_by) if comp.decided_by else None
    first = decided.first_difference if decided else None
    values = [cell.metric(comp.decided_by) for cell in (good, bad)]
    if first is None or None in values or first >= min(len(m.values) for m in values):
        return comp.note
    shown = fmt_pair(values[0].values[first], values[1].values[first])
    return f"{comp.decided_by} differs at value {first}: {shown[0]} vs {shown[1]}"


def judge(result: RunResult) -> tuple[str, int | None, str]:
    """(verdict, exit code, note); the code is None when more samples would decide."""
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
                return "skip", SKIP, f"{where}: {_first_line(cell.reason)}"
            # The good endpoint served this probe: failing it is a change in behaviour.
            verdicts.append(Verdict.DIFFERENT)
            notes.append(f"{where}: failed on a running server: {_first_line(cell.reason)}")
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


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:200]


# --------------------------------------------------------------------------- the driver


@dataclass
class Outcome:
    good: Revision
    bad: Revision
    commits: int  # in good..bad, the candidates for the first bad commit
    bound: int  # ⌈log2 N⌉ + 2 evaluations; with k > 1 slots, ⌈log_(k+1) N⌉ + 1 rounds
    slots: int = 1
    rounds: int = 0  # k-ary rounds run (each evaluates up to k commits at once)
    endpoint: Evaluation | None = None
    steps: list[Evaluation] = field(default_factory=list)
    first_bad: tuple[str, str] | None = None  # (sha, subject)
    candidates: tuple[str, ...] = ()  # when skipped commits leave several possibilities
    confirm: Evaluation | None = None
    confirm_note: str = ""
    problem: str = ""

    @property
    def launches(self) -> int:
        evs = [e for e in (self.endpoint, *self.steps, self.confirm) if e is not None]
        return sum(e.launches for e in evs)

    @property
    def confirmed(self) -> bool | None:
        """True same-after-revert, False still differs, None not checked."""
        if self.confirm is None or self.confirm.exit_code not in (SAME, DIFFERENT):
            return None
        return self.confirm.exit_code == SAME

    @property
    def ok(self) -> bool:
        return self.first_bad is not None and self.confirmed is not False


# (spec, commits, phase, slots of each) → their evaluations, in order: one round of the k-ary
# driver, the endpoint, or the confirmation. Local (`local_round`): threads of this process;
# harness.slurm.BisectRounds: one Slurm job of one task per commit.
RoundEvaluator = Callable[[BisectSpec, list[str], str, int], list[Evaluation]]


def local_round(spec: BisectSpec, shas: list[str], phase: str, slots: int = 1) -> list[Evaluation]:
    if len(shas) == 1:
        return [evaluate(spec, shas[0], phase, slots)]
    with ThreadPoolExecutor(len(shas), thread_name_prefix="bisect-slot") as pool:
        return list(pool.map(lambda sha: evaluate(spec, sha, phase, slots), shas))


def session_dir_for(repo: Path, good: str, bad: str) -> Path:
    return cache_dir() / "bisect" / f"{safe_name(repo.name)}-{good[:8]}-{bad[:8]}"


def bisect(spec: BisectSpec, bad_ref: str, say: Callable[[str], None] = print, slots: int = 1,
           rounds: RoundEvaluator | None = None) -> Outcome:
    """One bisect of a repository at a time: two would share the session directory and the
    worktree of a range (and git's worktree list), and end in each other's git errors.
    `rounds` evaluates each round elsewhere (harness.slurm); given, the k-ary driver runs at
    any slot count (k = 1: a binary search), never `git bisect run`."""
    check_slot_count(slots)
    lock = repo_lock_path(spec.repo)
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(file_lock(lock, wait=False))
        except BlockingIOError:
            raise UsageError(f"another bisect of {spec.repo} is running (it holds {lock}); "
                             f"wait for it to end") from None
        return _bisect(spec, bad_ref, say, slots, rounds)


def repo_lock_path(repo: Path) -> Path:
    """The lock a bisect of `repo` holds, named by the repository's real path."""
    real = repo.resolve()
    digest = hashlib.sha256(str(real).encode()).hexdigest()[:12]
    return cache_dir() / "locks" / f"bisect-{safe_name(real.name)}-{digest}.lock"


def _bisect(spec: BisectSpec, bad_ref: str, say: Callable[[str], None], slots: int,
            rounds: RoundEvaluator | None = None) -> Outcome:
    good = Revision.resolve(spec.repo, spec.good)
    bad = Revision.resolve(spec.repo, bad_ref)
    if good.sha == bad.sha:
        raise UsageError("--good and --bad are the same commit")
    if git_run(spec.repo, "merge-base", "--is-ancestor", good.sha, bad.sha).returncode:
        raise UsageError(f"--good {good.ref} is not an ancestor of --bad {bad.ref}")
    suite, _ = plan_request(_request(spec, bad.sha, 1))  # bad input: exit 2 now
    n = int(git(spec.repo, "rev-list", "--count", f"{good.sha}..{bad.sha}"))
    kary = slots > 1 or rounds is not None
    evaluator = rounds or local_round
    out = Outcome(good, bad, n, math.ceil(math.log2(n)) + 2 if not kary else round_bound(n, slots), slots)
    spec.save()
    (spec.session_dir / LOG_FILE).unlink(missing_ok=True)
    say(f"bisect {spec.repo.name}: {n} commits after good {good.short()} up to bad {bad.short()}; "
        f"probe {', '.join(spec.probes)} of {spec.suite.name}; at most {_bound_text(out)}")

    # Good and bad at once where there are slots; the first round's commits are checked out and
    # their `--help` read meanwhile.
    ahead = ThreadPoolExecutor(1, thread_name_prefix="bisect-prepare")
    history = first_parent_history(spec, good.sha, bad.sha) if kary else []
    for i in split_points(Span(0, len(history) - 1), slots) if kary else ():
        ahead.submit(prepare, spec, history[i], suite.startup_timeout_s)
    out.endpoint = evaluator(spec, [bad.sha], "endpoint", min(2, slots))[0]
    # Never waited for: the first round checks out what is still being prepared itself (one
    # checkout per sha at a time, under its lock); with nothing to bisect, what was not prepared
    # yet never will be needed.
    ahead.shutdown(wait=False, cancel_futures=out.endpoint.exit_code != DIFFERENT)
    say(out.endpoint.line("endpoint"))
    if out.endpoint.exit_code != DIFFERENT:
        out.problem = {SAME: "the bad endpoint compares same to good: nothing to bisect"}.get(
            out.endpoint.exit_code, f"the bad endpoint cannot be judged ({out.endpoint.note})")
        say(out.problem)
        return out

    with _worktree(spec, bad.sha) as wt:
        if not kary:
            _bisect_run(spec, wt, good.sha, bad.sha, out, say)
        else:
            _kary_run(spec, out, say, history, suite.startup_timeout_s, evaluator)
        if out.first_bad is not None:
            _confirm(spec, wt, bad, out, say, evaluator)
    return out


def _bisect_run(spec: BisectSpec, wt: Path, good: str, bad: str, out: Outcome,
                say: Callable[[str], None]) -> None:
    predicate = [sys.executable, "-m", "harness.cli", "bisect-step", "--session", str(spec.session_dir)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    try:
        git(wt, "bisect", "start", "--no-checkout", bad, good)
        proc = subprocess.Popen(git_argv(wt, "bisect", "run", *predicate), env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("step "):
                say(line.rstrip("\n"))
        proc.wait()
    finally:
        git(wt, "bisect", "reset", check=False)
    out.steps = [e for e in read_log(spec.session_dir) if e.phase == "step"]
    text = "\n".join(lines)
    found = re.search(r"^([0-9a-f]{40}) is the first bad commit", text, re.M)
    if found:
        _found(spec, out, found.group(1), say)
    elif "could be any of" in text:
        listed = set(re.findall(r"^([0-9a-f]{40})$", text.split("could be any of:")[1], re.M))
        # git lists them in sha order; history order (oldest first) with subjects reads better
        history = git(spec.repo, "rev-list", "--reverse", f"{good}..{bad}").split()
        _ambiguous(spec, out, tuple(c for c in history if c in listed) + tuple(sorted(listed - set(history))))
    else:
        tail = "\n".join(lines[-8:])
        out.problem = f"git bisect run stopped (exit {proc.returncode}):\n{tail}"
    _summary(out, say)


def _found(spec: BisectSpec, out: Outcome, sha: str, say: Callable[[str], None]) -> None:
    out.first_bad = (sha, git(spec.repo, "log", "-1", "--format=%s", sha))
    say(f"first bad commit: {sha[:12]} {out.first_bad[1]!r}")


def _ambiguous(spec: BisectSpec, out: Outcome, candidates: tuple[str, ...]) -> None:
    """Skipped commits leave several candidates: listed oldest first, with their subjects."""
    out.candidates = candidates
    out.problem = ("skipped commits hide the first bad commit; it is one of (oldest first):\n" + "\n".join(
        f"  {c[:12]} {git(spec.repo, 'log', '-1', '--format=%s', c, check=False)!r}" for c in candidates))


def _summary(out: Outcome, say: Callable[[str], None]) -> None:
    steps = out.steps
    skipped = sum(1 for e in steps if e.exit_code == SKIP)
    measured = sum(1 for e in steps if e.launches)
    reused = sum(1 for e in steps if e.source == "reused")
    rounds = f" in {out.rounds} rounds of {out.slots} slots" if out.slots > 1 else " steps"
    say(f"evaluations: {len(steps)}{rounds} ({measured} measured, {reused} from the store, {skipped} skipped), "
        f"bound {_bound_text(out)}")
    if out.problem:
        say(out.problem)


def _bound_text(out: Outcome) -> str:
    if out.slots == 1:
        return f"⌈log2 {out.commits}⌉ + 2 = {out.bound} steps"
    return f"⌈log{out.slots + 1} {out.commits}⌉ + 1 = {out.bound} rounds"


# --------------------------------------------------------------------------- k-ary bisect


def round_bound(commits: int, slots: int) -> int:
    """⌈log_(k+1) N⌉ + 1, in integers (no float log at exact powers)."""
    rounds, reach = 0, 1
    while reach < commits:
        rounds, reach = rounds + 1, reach * (slots + 1)
    return rounds + 1


@dataclass(frozen=True)
class Span:
    """Where the first bad commit is, as indices into the history (oldest first): one of
    lo..hi, where hi is known bad and everything before lo known good; `skipped` commits
    cannot be tested and are never picked again."""

    lo: int
    hi: int
    skipped: frozenset[int] = frozenset()

    def testable(self) -> list[int]:
        return [i for i in range(self.lo, self.hi) if i not in self.skipped]

    def candidates(self) -> range:
        return range(self.lo, self.hi + 1)


def split_points(span: Span, slots: int) -> list[int]:
    """The up to `slots` commits to evaluate next: the testable ones, plus the known bad end,
    cut into slots + 1 parts of about equal size. Skipped commits are left out, so a split point
    that fell on one moves to its testable neighbour. Empty: nothing left to test."""
    testable = span.testable()
    parts = len(testable) + 1
    return sorted({testable[i * parts // (slots + 1) - 1] for i in range(1, slots + 1)
                   if i * parts // (slots + 1) >= 1})


def narrow(span: Span, codes: dict[int, int]) -> Span:
    """The span after one round of exit codes per index: up to the first bad, from just after
    the last good before it; 125s join the skipped. (A good after the first bad is outside.)"""
    hi = min([span.hi, *(i for i, c in codes.items() if c == DIFFERENT)])
    lo = max([span.lo, *(i + 1 for i, c in codes.items() if c == SAME and i < hi)])
    return Span(lo, hi, span.skipped | {i for i, c in codes.items() if c == SKIP})


def first_parent_history(spec: BisectSpec, good: str, bad: str) -> list[str]:
    """good..bad oldest first; a merge counts as one commit of the line it was merged into."""
    return git(spec.repo, "rev-list", "--reverse", "--first-parent", f"{good}..{bad}").split()


def next_round_points(span: Span, points: list[int], slots: int) -> set[int]:
    """Every commit the next round may evaluate, whichever of `points` turns out to be the first
    bad (or none): what to check out while this round runs."""
    ahead: set[int] = set()
    for first_bad in range(len(points) + 1):
        codes = {i: SAME for i in points[:first_bad]}
        if first_bad < len(points):
            codes[points[first_bad]] = DIFFERENT
        ahead.update(split_points(narrow(span, codes), slots))
    return ahead - set(points)


def prepare(spec: BisectSpec, sha: str, help_timeout_s: float) -> None:
    """Check one commit out and read its `--help` into the per-sha cache, ahead of its
    evaluation (which then finds both). A revision with an env file of its own is only checked
    out: its `--help` must come from its own interpreter, which its run builds. A failure here
    is left for the evaluation to meet and report."""
    try:
        worktree = Revision.resolve(spec.repo, sha).checkout()
        if worktree is None or (worktree / spec.env_options.file).exists():
            return
        revision_capabilities(get_target(spec.target, spec.python), sha, worktree, help_timeout_s)
    except (UsageError, LaunchError, OSError):  # the evaluation meets it and reports it
        return


def _kary_run(spec: BisectSpec, out: Outcome, say: Callable[[str], None], history: list[str],
              help_timeout_s: float, evaluator: RoundEvaluator = local_round) -> None:
    """`history`: the first-parent commits from good to bad (`first_parent_history`), read once
    by the caller, whose endpoint run prepared this run's first round from it. The checkouts of
    what the next round may pick run beside each round and never hold up what follows: once the
    culprit is known, those still queued are dropped and the confirmation starts at once."""
    span = Span(0, len(history) - 1)
    prepared: set[int] = set()
    ahead = ThreadPoolExecutor(1, thread_name_prefix="bisect-prepare")
    try:
        while points := split_points(span, out.slots):
            out.rounds += 1
            say(f"round {out.rounds}: {len(span.candidates())} candidates, evaluating {len(points)} at once")
            # While this round runs: the checkouts and `--help` of whatever the next one may pick.
            following = sorted(next_round_points(span, points, out.slots) - prepared)
            prepared.update(following)
            with ThreadPoolExecutor(1, thread_name_prefix="bisect-round") as round_pool:
                running = round_pool.submit(evaluator, spec, [history[i] for i in points], "step", 1)
                for i in following:
                    ahead.submit(prepare, spec, history[i], help_timeout_s)
                if following:
                    say(f"round {out.rounds}: checking out the {len(following)} commits the next round may pick, "
                        f"meanwhile")
                evs = running.result()
            out.steps.extend(evs)
            for ev in evs:
                say(ev.line(f"round {out.rounds}"))
            if aborted := next((e for e in evs if e.exit_code == ABORT), None):
                out.problem = f"bisect stopped: {aborted.note}"
                _summary(out, say)
                return
            span = narrow(span, {i: e.exit_code for i, e in zip(points, evs)})
            say(f"round {out.rounds}: first bad is one of {len(span.candidates())} "
                f"({history[span.lo][:12]}..{history[span.hi][:12]}); bound {_bound_text(out)}")
    finally:
        # Not waited for: the last round's guesses at a next round are never needed.
        ahead.shutdown(wait=False, cancel_futures=True)
    if span.lo == span.hi:
        _found(spec, out, history[span.hi], say)
    else:
        _ambiguous(spec, out, tuple(history[i] for i in span.candidates()))
    _summary(out, say)


def _confirm(spec: BisectSpec, wt: Path, bad: Revision, out: Outcome, say: Callable[[str], None],
             evaluator: RoundEvaluator = local_round) -> None:
    """Revert the culprit on top of bad (a commit only this worktree sees) and compare."""
    assert out.first_bad is not None
    culprit = out.first_bad[0]
    git(wt, "checkout", "-q", "--detach", bad.sha)
    # Fixed identity and date: the same revert gets the same sha, so a re-run reuses its cells.
    date = git(spec.repo, "log", "-1", "--format=%cI", bad.sha)
    proc = git_run(wt, "revert", "--no-edit", culprit, env=fixed_identity_env(date))
    if proc.returncode != 0:
        git(wt, "revert", "--abort", check=False)
        out.confirm_note = (f"could not confirm: reverting {culprit[:12]} on bad does not apply cleanly "
                            f"({_first_line(proc.stderr or proc.stdout)})")
        say(out.confirm_note)
        return
    revert = git(wt, "rev-parse", "HEAD")
    out.confirm = evaluator(spec, [revert], "confirm", 1)[0]
    say(out.confirm.line("confirm"))
    if out.confirmed:
        out.confirm_note = f"confirmed: bad with {culprit[:12]} reverted compares same to good"
    elif out.confirmed is False:
        out.confirm_note = (f"not confirmed: bad with {culprit[:12]} reverted still differs from good "
                            "(another commit in the range changes it too)")
    else:
        out.confirm_note = f"could not confirm: the revert cannot be judged ({out.confirm.note})"
    say(out.confirm_note)


class _worktree:
    """The bisect's own worktree, made at bad and removed afterwards (with its bisect state)."""

    def __init__(self, spec: BisectSpec, bad: str):
        self.repo, self.path, self.bad = spec.repo, spec.session_dir / "worktree", bad

    def __enter__(self) -> Path:
        self._remove()
        git(self.repo, "worktree", "add", "-q", "--detach", str(self.path), self.bad)
        return self.path

    def __exit__(self, *exc) -> None:
        self._remove()

    def _remove(self) -> None:
        if self.path.exists():
            git(self.path, "bisect", "reset", check=False)
            git(self.repo, "worktree", "remove", "--force", str(self.path), check=False)
        git(self.repo, "worktree", "prune", check=False)


def read_log(session_dir: Path) -> list[Evaluation]:
    path = session_dir / LOG_FILE
    if not path.is_file():
        return []
    try:
        lines = read_file_text(path, RESULT_DOCUMENT).splitlines()
    except ValueError as exc:  # past the cap, or not UTF-8
        raise UsageError(f"{path}: corrupt bisect log ({exc})") from None
    evaluations = []
    for number, line in enumerate(lines, 1):
        try:
            evaluations += [Evaluation(**json.loads(line))] if line.strip() else []
        except (ValueError, TypeError) as exc:
            raise UsageError(f"{path}:{number}: corrupt bisect log line ({type(exc).__name__}: {exc})") from None
    return evaluations


def step(session_dir: Path, commit: str | None) -> int:
    """The predicate: judge BISECT_HEAD (or `commit`), print one line, return git's exit code."""
    spec = BisectSpec.load(session_dir)
    sha = commit or git(Path.cwd(), "rev-parse", "BISECT_HEAD")
    sha = git(spec.repo, "rev-parse", "--verify", f"{sha}^{{commit}}")
    n = sum(1 for e in read_log(session_dir) if e.phase == "step") + 1
    ev = evaluate(spec, sha, phase="step")
    print(ev.line(f"step {n}"), flush=True)
    return ev.exit_code


# --------------------------------------------------------------------------- the demo
