"""Known bugs as inverse controls (`detcheck selftest`, issue 35): how often the suite reads
*same* where a real, known bug is back.

SGLang (0.5.16 on) reverse-applies one registered past fix at start-up when its server gets
`SGLANG_DEBUG_REVERT_PR=<PR number>` (`srt/debug_utils/pr_fix_toggle.py`, whose
`_PR_FIX_REVERT_YAML` dict maps each registered PR to the patch that reverts it; an unregistered
number fails the launch). `registered_fixes` reads that dict's keys from the revision's own
source (`Target.fix_toggle`), never by importing it. `run_selftest` then runs the suite with
the revision as both sides:

- the **control**: nothing reverted, every cell measured (`fresh`): it must read *same*, or a
  difference under a revert shows nothing about the revert;
- per fix, a run whose candidate servers get `SGLANG_DEBUG_REVERT_PR=<n>` (`RunRequest.role_env`,
  part of the candidate's cell keys; the base's cells come from the control's store).

A fix is **caught** when a row (configuration/probe) of its run reads *different* where the
same row of the control read *same*: row by row, so that one configuration the revision cannot
serve (an *error* on both sides of the control) does not void what the other rows show, while a
row the control itself reads as anything but *same* never counts. A revert whose candidate
never served (every candidate launch failed: on the H200, three of 0.5.16's six registered
patches no longer match 0.5.16's own source, and SGLang stops at start-up) reintroduced no bug:
it is *not applied*, reported with the launch's reason and left out of the rate. Any other
outcome is a miss, and the misses over the applied fixes are the suite's demonstrated
false-*same* rate on real bugs. Each run keeps its own directory
(`control/`, `revert-<n>/`) with results.json and report.md.

A fix the registry does not hold (upstream's stays at six; the unified-radix bit-exact fixes were
proven by reverting them by hand) is named by its commit (`--revert SHA`): `revert_commit` makes
`git revert` of it on top of the revision, in a worktree of its own, with a fixed identity and
date (the same revert is the same sha, so its cells are found again), and that commit is the
candidate (`revert-<sha>/`). One that `git revert` cannot apply cleanly (a conflict, a merge
commit, nothing left to revert) or that is not in the revision's history is *skipped*, with
git's reason, and counts as not applied: nothing was reintroduced.
"""

from __future__ import annotations

import dataclasses
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from harness.bounded import INPUT_FILE, read_file
from harness.compare import overall
from harness.errors import UsageError
from harness.gitcmd import fixed_identity_env, git, git_run
from harness.jobs import RunRequest
from harness.observer import RunObserver
from harness.results import Role, RunResult, Status
from harness.pipeline.outcome import LAUNCH_FAILED
from harness.revisions import Revision
from harness.run import execute
from harness.verdict_stats import Verdict
from harness.targets import Target
from harness.textfmt import md_code, md_table

# What a selftest writes into its --out beside its runs' folders (`run_dirs`).
SELFTEST_FILE, SELFTEST_REPORT = "selftest.json", "selftest.md"

REVERT_ENV = "SGLANG_DEBUG_REVERT_PR"
_REGISTRY = re.compile(r"^_PR_FIX_REVERT_YAML\b[^=\n]*=\s*\{(?P<body>.*?)^\}", re.M | re.S)
_KEY = re.compile(r"^\s*(\d+)\s*:", re.M)


def registry_path(target: Target, worktree: Path) -> Path | None:
    return worktree / target.package_dir / target.package / target.fix_toggle if target.fix_toggle else None


def registered_fixes(target: Target, worktree: Path) -> tuple[int, ...]:
    """The PR numbers whose fix the revision can revert: the keys of its registry dict, in
    order; () where the revision has no toggle module (older than SGLang 0.5.16) or no registry."""
    path = registry_path(target, worktree)
    if path is None or not path.is_file():
        return ()
    found = _REGISTRY.search(read_file(path, INPUT_FILE).decode(errors="replace"))
    return tuple(dict.fromkeys(int(k) for k in _KEY.findall(found["body"]))) if found else ()


@dataclass(frozen=True)
class RevertedCommit:
    """A fix named by its commit, and the commit that reverts it on top of the revision (None:
    skipped, `skipped` says why)."""

    sha: str
    subject: str
    commit: str | None
    skipped: str = ""

    @property
    def short(self) -> str:
        return self.sha[:12]


def revert_commit(repo: Path, rev_sha: str, fix: str) -> RevertedCommit:
    """`git revert` of `fix` on top of `rev_sha`, committed in a worktree of its own (the
    checkout the user works in is never touched). UsageError for a name that is no commit."""
    sha = git(repo, "rev-parse", "--verify", "--quiet", f"{fix}^{{commit}}", check=False)
    if not sha:
        raise UsageError(f"--revert {fix}: no such commit in {repo}")
    subject = git(repo, "log", "-1", "--format=%s", sha)
    if git_run(repo, "merge-base", "--is-ancestor", sha, rev_sha).returncode != 0:
        return RevertedCommit(sha, subject, None, f"not in the history of {rev_sha[:12]}: nothing there to revert")
    if len(git(repo, "rev-list", "--parents", "-n", "1", sha).split()) > 2:
        return RevertedCommit(sha, subject, None, "a merge commit: which parent's side it fixed is not known")
    # The revision's own commit date: the revert is the same commit on every run.
    env = fixed_identity_env(git(repo, "log", "-1", "--format=%cI", rev_sha))
    with tempfile.TemporaryDirectory(prefix="detcheck-revert-") as tmp:
        work = Path(tmp) / "worktree"
        git(repo, "worktree", "add", "--detach", str(work), rev_sha)
        try:
            reverted = git_run(work, "revert", "--no-edit", sha, env=env)
            if reverted.returncode != 0:
                conflicts = git(work, "diff", "--name-only", "--diff-filter=U", check=False).split()
                said = (f"conflicts in {', '.join(conflicts)}" if conflicts else
                        (reverted.stderr.strip() or reverted.stdout.strip()).splitlines()[0])
                git_run(work, "revert", "--abort")
                return RevertedCommit(sha, subject, None, f"git revert does not apply cleanly at {rev_sha[:12]}: {said}")
            return RevertedCommit(sha, subject, git(work, "rev-parse", "HEAD"))
        finally:
            git(repo, "worktree", "remove", "--force", str(work), check=False)


@dataclass(frozen=True)
class SelftestRun:
    """One run of the selftest: the control (neither `fix` nor `reverted`), one registered fix
    reverted through SGLang's toggle, or one commit reverted with git."""

    fix: int | None
    verdict: Verdict
    out_dir: Path
    # The rows (configuration/probe) that read *different* and those that read *same*, and the
    # count of all rows.
    different: tuple[str, ...]
    same: tuple[str, ...]
    rows: int
    # Why the candidate never served (the first launch failure), where none of its launches did;
    # for a commit git could not revert, why (nothing was run).
    not_applied: str = ""
    reverted: str | None = None  # the commit reverted with git (its full sha)

    @property
    def is_control(self) -> bool:
        return self.fix is None and self.reverted is None

    def caught_by(self, control: SelftestRun) -> tuple[str, ...]:
        """The rows that show the revert: *different* here, *same* in the control."""
        return tuple(row for row in self.different if row in control.same)

    def caught(self, control: SelftestRun) -> bool:
        return not self.not_applied and bool(self.caught_by(control))

    def to_dict(self, control: SelftestRun | None = None) -> dict[str, Any]:
        out = {"fix": self.fix, "reverted": self.reverted, "verdict": self.verdict.value, "out": str(self.out_dir),
               "different": list(self.different), "same": list(self.same), "rows": self.rows,
               "not_applied": self.not_applied or None}
        return out if control is None else {**out, "caught": self.caught(control),
                                            "caught_by": list(self.caught_by(control))}


def run_dirs(out: Path, fixes: tuple[int, ...], reverts: tuple[RevertedCommit, ...] = ()) -> list[Path]:
    """Where the control's, each fix's and each reverted commit's run go."""
    return [out / "control", *(out / f"revert-{fix}" for fix in fixes), *(out / f"revert-{r.short}" for r in reverts)]


def run_selftest(req: RunRequest, fixes: tuple[int, ...], observer: RunObserver,
                 finished: Callable[[RunResult, Path], None],
                 reverts: tuple[RevertedCommit, ...] = ()) -> tuple[SelftestRun, list[SelftestRun]]:
    """The control, then one run per fix and per reverted commit (a skipped one: none), each in
    its directory of `run_dirs`; `finished` gets each run as it ends (the command writes its
    report.md)."""
    dirs = run_dirs(req.out_dir, fixes, reverts)
    control = _one(dataclasses.replace(req, out_dir=dirs[0], fresh=True), None, observer, finished)
    runs = [_one(dataclasses.replace(req, out_dir=out, role_env={Role.CANDIDATE: {REVERT_ENV: str(fix)}}),
                 fix, observer, finished)
            for fix, out in zip(fixes, dirs[1:])]
    for reverted, out in zip(reverts, dirs[1 + len(fixes):]):
        if reverted.commit is None:
            runs.append(SelftestRun(None, Verdict.NOTHING_MEASURED, out, (), (), 0, reverted.skipped, reverted.sha))
            continue
        assert req.base.repo is not None  # a revision of --repo: reverts were made in it
        candidate = Revision.resolve(req.base.repo, reverted.commit)
        runs.append(_one(dataclasses.replace(req, out_dir=out, candidate=candidate), None, observer, finished,
                         reverted.sha))
    return control, runs


def _one(req: RunRequest, fix: int | None, observer: RunObserver,
         finished: Callable[[RunResult, Path], None], reverted: str | None = None) -> SelftestRun:
    result = execute(req, observer)
    finished(result, req.out_dir)
    def rows(verdict: Verdict) -> tuple[str, ...]:
        return tuple(f"{c.config}/{c.probe}" for c in result.comparisons if c.verdict == verdict)

    control = fix is None and reverted is None
    return SelftestRun(fix, overall(result.comparisons), req.out_dir, rows(Verdict.DIFFERENT), rows(Verdict.SAME),
                       len(result.comparisons), "" if control else _never_served(result), reverted)


def _never_served(result: RunResult) -> str:
    """The candidate's first launch failure where every candidate cell measured is one."""
    measured = [c for c in result.cells if c.role == Role.CANDIDATE]
    failed = [c.reason for c in measured if c.status == Status.ERROR and c.reason.startswith(LAUNCH_FAILED)]
    return failed[0] if measured and len(failed) == len(measured) else ""


def summary(control: SelftestRun, runs: list[SelftestRun]) -> dict[str, Any]:
    caught = [r for r in runs if r.caught(control)]
    applied = [r for r in runs if not r.not_applied]
    return {"control": control.to_dict(), "fixes": [r.to_dict(control) for r in runs],
            "caught": len(caught), "registered": sum(r.reverted is None for r in runs),
            "named_commits": sum(r.reverted is not None for r in runs), "applied": len(applied),
            "false_same_rate": (len(applied) - len(caught)) / len(applied) if applied else None}


def markdown(control: SelftestRun, runs: list[SelftestRun], revision: str) -> str:
    """The selftest's table: a row per fix, with the control above it."""
    def row(r: SelftestRun) -> list[str]:
        what = ("control (nothing reverted)" if r.is_control else
                md_code(f"git revert {r.reverted[:12]}") if r.reverted else md_code(f"{REVERT_ENV}={r.fix}"))
        caught = ("–" if r.is_control else "not applied" if r.not_applied
                  else "caught" if r.caught(control) else "**missed**")
        if r.is_control:
            shown = f"{len(r.same)}/{r.rows} read same"
        elif r.not_applied and r.reverted and not r.rows:
            shown = f"skipped: {md_code(r.not_applied)}"
        elif r.not_applied:
            shown = f"the candidate never served: {md_code(r.not_applied)}"
        else:
            shown = f"{len(r.caught_by(control))}/{r.rows}: " + (", ".join(map(md_code, r.caught_by(control))) or "none")
        return [what, r.verdict.value, caught, shown, md_code(r.out_dir.name)]

    caught = sum(r.caught(control) for r in runs)
    applied = sum(not r.not_applied for r in runs)
    lines = [f"# selftest of {md_code(revision)}: known bugs as inverse controls", ""]
    if len(control.same) < control.rows:
        lines += [f"The control reads same in {len(control.same)} of {control.rows} rows: a difference "
                  "under a revert counts only in those.", ""]
    registered = sum(r.reverted is None for r in runs)
    named = len(runs) - registered
    commits = f" and {named} named commit{'s' if named != 1 else ''}" if named else ""
    lines += [f"Caught {caught} of {applied} applied fixes ({registered} registered{commits}, "
              f"{len(runs) - applied} not applied): a false-*same* rate of {applied - caught}/{applied} "
              "on real bugs." if applied else
              f"No revert applied ({registered} registered{commits})." if runs else
              "The revision registers no fix to revert.", ""]
    lines += md_table(["run", "verdict", "fix", "rows that show it", "directory"], [row(control), *map(row, runs)])
    return "\n".join(lines) + "\n"
