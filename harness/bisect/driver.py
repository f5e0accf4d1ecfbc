"""The driver: one bisect of a repository (`bisect`): the endpoint, then `git bisect run` with
one slot or the k-ary rounds (harness.bisect.search) with k, the culprit confirmed by its revert.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from harness.bisect.search import Span, narrow, next_round_points, round_bound, split_points
from harness.bisect.session import (ABORT, DIFFERENT, LOG_FILE, SAME, SKIP, BisectSpec, Evaluation, read_log,
                                    repo_lock_path)
from harness.bisect.predicate import evaluate, first_line, run_request
from harness.capabilities import revision_capabilities
from harness.errors import LaunchError, UsageError
from harness.gitcmd import fixed_identity_env, git, git_argv, git_run
from harness.paths import PROJECT_ROOT, file_lock
from harness.pipeline.plan import plan_request
from harness.pipeline.slots import check_slot_count
from harness.revisions import Revision
from harness.targets import get_target


@dataclass
class BisectResult:
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


def bisect(spec: BisectSpec, bad_ref: str, say: Callable[[str], None] = print, slots: int = 1,
           rounds: RoundEvaluator | None = None) -> BisectResult:
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


def _bisect(spec: BisectSpec, bad_ref: str, say: Callable[[str], None], slots: int,
            rounds: RoundEvaluator | None = None) -> BisectResult:
    good = Revision.resolve(spec.repo, spec.good)
    bad = Revision.resolve(spec.repo, bad_ref)
    good_sha, bad_sha = commit_sha(good), commit_sha(bad)
    if good_sha == bad_sha:
        raise UsageError("--good and --bad are the same commit")
    if git_run(spec.repo, "merge-base", "--is-ancestor", good_sha, bad_sha).returncode:
        raise UsageError(f"--good {good.ref} is not an ancestor of --bad {bad.ref}")
    suite, _ = plan_request(run_request(spec, bad_sha, 1))  # bad input: exit 2 now
    n = int(git(spec.repo, "rev-list", "--count", f"{good_sha}..{bad_sha}"))
    kary = slots > 1 or rounds is not None
    evaluator = rounds or local_round
    out = BisectResult(good, bad, n, math.ceil(math.log2(n)) + 2 if not kary else round_bound(n, slots), slots)
    spec.save()
    (spec.session_dir / LOG_FILE).unlink(missing_ok=True)
    say(f"bisect {spec.repo.name}: {n} commits after good {good.short()} up to bad {bad.short()}; "
        f"probe {', '.join(spec.probes)} of {spec.suite.name}; at most {_bound_text(out)}")

    # Good and bad at once where there are slots; the first round's commits are checked out and
    # their `--help` read meanwhile.
    ahead = ThreadPoolExecutor(1, thread_name_prefix="bisect-prepare")
    history = first_parent_history(spec, good_sha, bad_sha) if kary else []
    for i in split_points(Span(0, len(history) - 1), slots) if kary else ():
        ahead.submit(prepare, spec, history[i], suite.startup_timeout_s)
    out.endpoint = evaluator(spec, [bad_sha], "endpoint", min(2, slots))[0]
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

    with _worktree(spec, bad_sha) as wt:
        if not kary:
            _bisect_run(spec, wt, good_sha, bad_sha, out, say)
        else:
            _kary_run(spec, out, say, history, suite.startup_timeout_s, evaluator)
        if out.first_bad is not None:
            _confirm(spec, wt, bad, out, say, evaluator)
    return out


def commit_sha(revision: Revision) -> str:
    """A bisected revision's sha: each is a commit of the repository (`Revision.resolve`)."""
    assert revision.sha is not None, "Revision.resolve gives every commit of a repository its sha"
    return revision.sha


def _bisect_run(spec: BisectSpec, wt: Path, good: str, bad: str, out: BisectResult,
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


def _found(spec: BisectSpec, out: BisectResult, sha: str, say: Callable[[str], None]) -> None:
    out.first_bad = (sha, git(spec.repo, "log", "-1", "--format=%s", sha))
    say(f"first bad commit: {sha[:12]} {out.first_bad[1]!r}")


def _ambiguous(spec: BisectSpec, out: BisectResult, candidates: tuple[str, ...]) -> None:
    """Skipped commits leave several candidates: listed oldest first, with their subjects."""
    out.candidates = candidates
    out.problem = ("skipped commits hide the first bad commit; it is one of (oldest first):\n" + "\n".join(
        f"  {c[:12]} {git(spec.repo, 'log', '-1', '--format=%s', c, check=False)!r}" for c in candidates))


def _summary(out: BisectResult, say: Callable[[str], None]) -> None:
    steps = out.steps
    skipped = sum(1 for e in steps if e.exit_code == SKIP)
    measured = sum(1 for e in steps if e.launches)
    reused = sum(1 for e in steps if e.source == "reused")
    rounds = f" in {out.rounds} rounds of {out.slots} slots" if out.slots > 1 else " steps"
    say(f"evaluations: {len(steps)}{rounds} ({measured} measured, {reused} from the store, {skipped} skipped), "
        f"bound {_bound_text(out)}")
    if out.problem:
        say(out.problem)


def _bound_text(out: BisectResult) -> str:
    if out.slots == 1:
        return f"⌈log2 {out.commits}⌉ + 2 = {out.bound} steps"
    return f"⌈log{out.slots + 1} {out.commits}⌉ + 1 = {out.bound} rounds"


def first_parent_history(spec: BisectSpec, good: str, bad: str) -> list[str]:
    """good..bad oldest first; a merge counts as one commit of the line it was merged into."""
    return git(spec.repo, "rev-list", "--reverse", "--first-parent", f"{good}..{bad}").split()


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


def _kary_run(spec: BisectSpec, out: BisectResult, say: Callable[[str], None], history: list[str],
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


def _confirm(spec: BisectSpec, wt: Path, bad: Revision, out: BisectResult, say: Callable[[str], None],
             evaluator: RoundEvaluator = local_round) -> None:
    """Revert the culprit on top of bad (a commit only this worktree sees) and compare."""
    assert out.first_bad is not None
    culprit, bad_sha = out.first_bad[0], commit_sha(bad)
    git(wt, "checkout", "-q", "--detach", bad_sha)
    # Fixed identity and date: the same revert gets the same sha, so a re-run reuses its cells.
    date = git(spec.repo, "log", "-1", "--format=%cI", bad_sha)
    proc = git_run(wt, "revert", "--no-edit", culprit, env=fixed_identity_env(date))
    if proc.returncode != 0:
        git(wt, "revert", "--abort", check=False)
        out.confirm_note = (f"could not confirm: reverting {culprit[:12]} on bad does not apply cleanly "
                            f"({first_line(proc.stderr or proc.stdout)})")
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
