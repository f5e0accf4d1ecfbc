"""A history: which revisions (`select_revisions`), and what was found along them per
(configuration, probe): a mark per revision (its exact verdict against the previous measured
one), noisy series (one point per revision) and their change points. `History.to_dict` is the
JSON feed (history.json) other tools read; the dashboard renders the same object.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.errors import UsageError
from harness.gitcmd import git
from harness.revisions import Revision

FEED_SCHEMA = 1


@dataclass(frozen=True)
class RevisionSelection:
    """How the command line named the revisions: exactly one of these is set."""

    revs: str = ""  # "A..B" (A itself included, as the history's first point) or "r1,r2,…"
    last: int = 0  # the last N first-parent commits up to `until`
    until: str = "HEAD"
    tags: str = ""  # "A..B": every tagged commit of that range, A included where tagged


def select_revisions(repo: Path, sel: RevisionSelection) -> list[Revision]:
    """The history's revisions, oldest first (first-parent order: a nightly's view of a branch).
    A ref that does not resolve, or a selection of fewer than two, is exit 2."""
    if sum(bool(x) for x in (sel.revs, sel.last, sel.tags)) != 1:
        raise UsageError("name the revisions once: --revs A..B, --revs r1,r2,…, --last N or --tags A..B")
    if sel.last:
        if sel.last < 2:
            raise UsageError(f"--last {sel.last}: a history needs at least 2 revisions")
        tip = Revision.resolve(repo, sel.until)
        shas = git(tip.repo or repo, "rev-list", "--first-parent", f"--max-count={sel.last}", tip.sha or "").split()
        revisions = [Revision.resolve(repo, sha) for sha in reversed(shas)]
    elif sel.tags:
        revisions = tagged(repo, *range_ends(sel.tags, "--tags"))
    elif ".." in sel.revs:
        revisions = first_parent_range(repo, *range_ends(sel.revs, "--revs"))
    else:
        revisions = [Revision.resolve(repo, ref.strip()) for ref in sel.revs.split(",") if ref.strip()]
    if len({r.sha for r in revisions}) != len(revisions):
        raise UsageError("a revision is named twice in the history")
    if len(revisions) < 2:
        raise UsageError(f"the history names {len(revisions)} revision(s); at least 2 are needed")
    return revisions


def range_ends(text: str, option: str) -> tuple[str, str]:
    start, _, end = text.partition("..")
    if not start or not end or end.startswith("."):
        raise UsageError(f"{option} {text!r}: write A..B (two refs)")
    return start, end


def first_parent_range(repo: Path, start: str, end: str) -> list[Revision]:
    """start, then every first-parent commit after it up to end."""
    a, b = Revision.resolve(repo, start), Revision.resolve(repo, end)
    shas = git(a.repo or repo, "rev-list", "--first-parent", "--reverse", f"{a.sha}..{b.sha}").split()
    return [a, *(Revision.resolve(repo, sha) for sha in shas)]


def tagged(repo: Path, start: str, end: str) -> list[Revision]:
    """Every commit of start..end (start included) that a tag names, labelled by its tag."""
    commits = first_parent_range(repo, start, end)
    by_sha: dict[str, str] = {}
    for line in git(commits[0].repo or repo, "for-each-ref", "--sort=creatordate",
                    "--format=%(objectname) %(*objectname) %(refname:short)", "refs/tags").splitlines():
        obj, peeled, name = line.split(" ", 2)  # peeled: an annotated tag's commit, empty for a light one
        by_sha.setdefault(peeled or obj, name)
    return [Revision(ref=by_sha[r.sha], sha=r.sha, repo=r.repo, subject=r.subject)
            for r in commits if r.sha in by_sha]


@dataclass(frozen=True)
class Point:
    """One revision of the history."""

    sha: str
    label: str  # the ref it was named by (a tag, a branch) or its short sha
    subject: str

    @classmethod
    def of(cls, revision: Revision) -> Point:
        sha = revision.sha or ""
        return cls(sha, revision.ref if revision.ref != sha else sha[:12], revision.subject)


@dataclass(frozen=True)
class Mark:
    """One revision on one (configuration, probe) timeline."""

    status: str  # the cell's: ok / n/a / error / missing
    # Its exact figures against the previous revision measured ok: same / different / unknown;
    # "first" for the first measured one; "" where the cell is not ok or the probe is noisy only.
    verdict: str = ""
    note: str = ""
    against: str = ""  # the sha it was compared with
    report: str = ""  # the pair's report.md, relative to the dashboard's folder
    reproducer: str = ""  # the pair's reproducer.json, where the pair differs
    # A *different* pair's paired run: its reproducer posted to both revisions' servers started
    # again (different: it showed the difference; unknown: it did not), as for a change point.
    confirmation: str = ""
    confirmation_note: str = ""
    confirmation_report: str = ""


@dataclass(frozen=True)
class ChangePoint:
    """Where a noisy series shifts: the first revision of the new level."""

    index: int
    sha: str
    before: float  # the median of the segment before, of the revisions' medians
    after: float
    relative: float  # after / before - 1
    worse: bool | None  # by the metric's `better`; None where it has none
    # The paired run of the two neighbours (the existing noisy comparison, interleaved):
    # different confirms it, same rejects it, unknown leaves it open; "" not run.
    confirmation: str = ""
    confirmation_note: str = ""
    report: str = ""
    reproducer: str = ""


@dataclass(frozen=True)
class Series:
    """One noisy metric of one (configuration, probe) over the history: each revision's values
    (its repeats), empty where it was not measured."""

    metric: str
    unit: str
    better: str | None
    values: tuple[tuple[float, ...], ...]
    change_points: tuple[ChangePoint, ...] = ()

    @property
    def medians(self) -> list[float | None]:
        return [statistics.median(v) if v else None for v in self.values]


@dataclass(frozen=True)
class Timeline:
    config: str
    probe: str
    marks: tuple[Mark, ...]
    series: tuple[Series, ...] = ()

    @property
    def changes(self) -> list[tuple[int, str]]:
        """(revision index, what changed there): exact differences and confirmed or unconfirmed
        change points (rejected ones are kept in the feed, not listed as changes)."""
        found = [(i, f"exact figures differ from {m.against[:12]}: {m.note} ({confirmed(m.confirmation)})")
                 for i, m in enumerate(self.marks) if m.verdict == "different"]
        for s in self.series:
            found += [(cp.index, f"{s.metric} {cp.relative:+.1%} ({confirmed(cp.confirmation)})")
                      for cp in s.change_points if cp.confirmation != "same"]
        return sorted(found)


def confirmed(confirmation: str) -> str:
    return {"different": "confirmed by a paired run", "": "not confirmed"}.get(
        confirmation, f"paired run: {confirmation}")


@dataclass(frozen=True)
class Cost:
    """What the history cost: servers started to measure the revisions (N revisions × the
    configurations, once; 0 for what the store held) and to confirm change points."""

    measured_servers: int
    reused_revisions: int  # revisions whose every cell came from the store (none measured)
    confirmation_servers: int


@dataclass(frozen=True)
class History:
    repo: str
    suite: str
    target: str
    points: tuple[Point, ...]
    timelines: tuple[Timeline, ...]
    cost: Cost
    detector: dict[str, Any] = field(default_factory=dict)  # the change-point method, as run

    def gaps(self) -> list[str]:
        """Where the history holds no evidence, each as `<revision>: <config>/<probe>: <why>`: a
        revision whose cell is an error or missing, or whose exact figures could not be judged
        against its neighbour (unknown). A history with gaps is never a pass, however quiet the
        rest: what was not measured cannot have stayed the same."""
        return [f"{self.points[i].label}: {t.config}/{t.probe}: "
                f"{m.status if m.status in ('error', 'missing') else 'unknown against ' + m.against[:12]}"
                + (f" ({m.note})" if m.note else "")
                for t in self.timelines for i, m in enumerate(t.marks)
                if m.status in ("error", "missing") or m.verdict == "unknown"]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for timeline, raw in zip(self.timelines, data["timelines"]):
            for series, rs in zip(timeline.series, raw["series"]):
                rs["medians"] = series.medians
        return {"schema": FEED_SCHEMA, **data}
