"""From measured revisions to a `History`: each (configuration, probe)'s exact figures compared
between neighbours (the previous revision measured ok, so an unbuildable commit is stepped
over), its noisy metrics as series judged by change-point detection, each change point
confirmed by a paired run of its two neighbours.

The pairs' results and reports are written by the caller's `write_pair` (the report lives
above this layer): `pairs/<older>-<newer>/` holds results.json, report.md and, where the pair
differs, reproducer.json.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

from harness.bisect.predicate import difference_text
from harness.history.changepoints import detector_description, shifts
from harness.history.measure import HistorySpec, confirm, confirm_dir, pair_dir, pair_result
from harness.history.model import ChangePoint, Cost, History, Mark, Point, Series, Timeline
from harness.pipeline.plan import plan_request
from harness.result_files import atomic_write_json
from harness.results import CellResult, Metric, ProbeComparison, Role, RunResult, Status
from harness.revisions import Revision
from harness.verdict_stats import Kind, Verdict, combine_verdicts

REPRODUCER_FILE = "reproducer.json"

WritePair = Callable[[RunResult, Path], None]

Row = tuple[str, str]  # (configuration, probe)


def exact_verdict(comp: ProbeComparison) -> str:
    """The comparison's verdict over its exact metrics only (noisy ones measured at different
    times are not compared: their series is); "" where it has none."""
    if comp.verdict in (Verdict.NOT_APPLICABLE, Verdict.ERROR):
        return comp.verdict.value
    deciding = set(comp.deciding) or set(comp.metrics)
    exact = [c.verdict for name, c in comp.metrics.items() if c.kind == Kind.EXACT and name in deciding]
    return combine_verdicts(exact).value if exact else ""


def exact_part(cell: CellResult) -> CellResult:
    """The cell with its exact metrics alone: what neighbours measured at different times can
    be compared on (their noisy values are points of a series)."""
    return dataclasses.replace(cell, metrics=tuple(m for m in cell.metrics if m.kind == Kind.EXACT))


def relative_link(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


class Builder:
    def __init__(self, spec: HistorySpec, revisions: list[Revision], measured: list[RunResult],
                 write_pair: WritePair):
        self.spec, self.revisions, self.write_pair = spec, revisions, write_pair
        self.cells: list[dict[Row, CellResult]] = [
            {(c.config, c.probe): c for c in result.cells if c.role == Role.CANDIDATE} for result in measured]
        self.rows: list[Row] = list(dict.fromkeys(row for cells in self.cells for row in cells))
        self.suite, _ = plan_request(spec.request(revisions[0], revisions[0], spec.out_dir))
        self.confirmation_servers = 0
        self._confirmations: dict[tuple[Row, int, int], RunResult] = {}
        self.measured_servers = sum(len(r.launches) for r in measured)
        self.reused_revisions = sum(1 for r in measured if r.cells and all(c.metadata.get("reused") for c in r.cells))

    def status(self, i: int, row: Row) -> str:
        cell = self.cells[i].get(row)
        return cell.status.value if cell else "missing"

    def build(self) -> History:
        marks = self.exact_marks()
        timelines = tuple(Timeline(config, probe, tuple(marks[(config, probe)]), self.series((config, probe)))
                          for config, probe in self.rows)
        return History(repo=str(self.spec.repo), suite=str(self.spec.suite), target=self.spec.target,
                       points=tuple(Point.of(r) for r in self.revisions), timelines=timelines,
                       cost=Cost(self.measured_servers, self.reused_revisions, self.confirmation_servers),
                       detector=detector_description())

    def exact_marks(self) -> dict[Row, list[Mark]]:
        """Every row's marks: each ok cell with an exact metric compared with the previous such
        one on its exact metrics alone, one pair result per (older, newer) holding every row that
        compares those two. A noisy-only row's revisions are points of its series, not pairs."""
        pairs: dict[tuple[int, int], list[Row]] = {}
        for row in self.rows:
            previous = None
            for i in range(len(self.revisions)):
                if self.status(i, row) != Status.OK.value or not exact_part(self.cells[i][row]).metrics:
                    continue
                if previous is not None:
                    pairs.setdefault((previous, i), []).append(row)
                previous = i
        marks: dict[Row, list[Mark]] = {row: [Mark(self.status(i, row)) for i in range(len(self.revisions))]
                                        for row in self.rows}
        for row in self.rows:
            first = next((i for i in range(len(self.revisions)) if self.status(i, row) == Status.OK.value), None)
            if first is not None:
                marks[row][first] = Mark(Status.OK.value, "first")
        for (older, newer), rows in pairs.items():
            result = pair_result(self.spec, self.revisions[older], self.revisions[newer],
                                 [(exact_part(self.cells[older][row]), exact_part(self.cells[newer][row]))
                                  for row in rows])
            out = pair_dir(self.spec, self.revisions[older].sha or "", self.revisions[newer].sha or "")
            self.write_pair(result, out)
            for comp in result.comparisons:
                marks[(comp.config, comp.probe)][newer] = self.mark(result, comp, out, older, newer)
        return marks

    def mark(self, result: RunResult, comp: ProbeComparison, out: Path, older: int, newer: int) -> Mark:
        verdict = exact_verdict(comp)
        base = result.cell(comp.config, comp.probe, Role.BASE)
        cand = result.cell(comp.config, comp.probe, Role.CANDIDATE)
        mark = Mark(Status.OK.value, verdict, "", result.base.sha or "",
                    relative_link(out / "report.md", self.spec.out_dir), self.reproducer(comp, out))
        if verdict != "different" or base is None or cand is None:
            return mark
        row = (comp.config, comp.probe)
        confirmation, note = confirmation_of(self.confirmed_comparison(row, older, newer))
        return dataclasses.replace(mark, note=difference_text(comp, base, cand), confirmation=confirmation,
                                   confirmation_note=note, confirmation_report=self.confirm_report(row, older, newer))

    def confirm_report(self, row: Row, older: int, newer: int) -> str:
        out = confirm_dir(self.spec, self.revisions[older], self.revisions[newer], *row)
        return relative_link(out / "report.md", self.spec.out_dir)

    def reproducer(self, comp: ProbeComparison, out: Path) -> str:
        """reproducer.json of a *different* comparison (its smallest request, or the command
        that measures it again), as a link; "" where it has none."""
        if comp.reproducer is None:
            return ""
        path = out / f"{comp.config}-{comp.probe}-{REPRODUCER_FILE}"
        atomic_write_json(path, {"config": comp.config, "probe": comp.probe, **comp.reproducer.to_dict()})
        return relative_link(path, self.spec.out_dir)

    def series(self, row: Row) -> tuple[Series, ...]:
        """The row's noisy metrics, each with its change points, confirmed."""
        measured = [i for i in range(len(self.revisions)) if self.status(i, row) == Status.OK.value]
        noisy: dict[str, Metric] = {}  # each noisy metric as first measured: its unit and direction
        for i in measured:
            for m in self.cells[i][row].metrics:
                if m.kind == Kind.NOISY:
                    noisy.setdefault(m.name, m)
        floor_rel = float(self.suite.probe_spec(row[1]).params.get("floor_rel") or 0.0)
        out = []
        for name, metric in noisy.items():
            values = []
            for i in range(len(self.revisions)):
                at_i = self.cells[i][row].metric(name) if i in measured else None
                values.append(tuple(at_i.values) if at_i else ())
            at = [i for i in measured if values[i]]
            medians = Series(name, metric.unit, metric.better, tuple(values)).medians
            found = shifts([float(medians[i] or 0.0) for i in at], floor_rel)
            points = tuple(self.change_point(row, at[s.index - 1], at[s.index], s.before, s.after, metric.better)
                           for s in found)
            out.append(Series(name, metric.unit, metric.better, tuple(values), points))
        return tuple(out)

    def change_point(self, row: Row, older: int, newer: int, before: float, after: float,
                     better: str | None) -> ChangePoint:
        relative = after / before - 1 if before else float("inf")
        worse = None if better is None else (after < before) == (better == "higher")
        comp = self.confirmed_comparison(row, older, newer)
        confirmation, note = confirmation_of(comp)
        out = confirm_dir(self.spec, self.revisions[older], self.revisions[newer], *row)
        return ChangePoint(newer, self.revisions[newer].sha or "", before, after, relative, worse,
                           confirmation=confirmation, confirmation_note=note,
                           report=self.confirm_report(row, older, newer),
                           reproducer=self.reproducer(comp, out) if comp else "")

    def confirmed_comparison(self, row: Row, older: int, newer: int) -> ProbeComparison | None:
        """The paired run of a change's neighbours (once per row and pair, whichever of its
        metrics shifted there): its comparison of the row, None where it has none."""
        key = (row, older, newer)
        if key not in self._confirmations:
            result = confirm(self.spec, self.revisions[older], self.revisions[newer], *row)
            self.confirmation_servers += servers_started(result)
            self.write_pair(result, confirm_dir(self.spec, self.revisions[older], self.revisions[newer], *row))
            self._confirmations[key] = result
        return next((c for c in self._confirmations[key].comparisons if (c.config, c.probe) == row), None)


def servers_started(result: RunResult) -> int:
    """A run's servers: its launches, and the pair a reproducer was verified on where the
    run's own were down (`verify_relaunched`: one server per side, not in `launches`)."""
    relaunched = sum(1 for c in result.comparisons
                     if c.reproducer and c.reproducer.verification and c.reproducer.verification.servers == "relaunched")
    return len(result.launches) + 2 * relaunched


def confirmation_of(comp: ProbeComparison | None) -> tuple[str, str]:
    """What a paired run says of a change: its verdict, where a reproducer was posted to both
    sides' servers only if that showed the difference again (else unknown)."""
    if comp is None:
        return "error", "the paired run has no comparison of this row"
    check = comp.reproducer.verification if comp.reproducer else None
    if check is None:
        return comp.verdict.value, comp.note
    seen = f"reproducer posted to both revisions' servers: {check.reproduced} of {check.attempts} attempts showed it"
    if comp.verdict == Verdict.DIFFERENT and not check.reproduced:
        return Verdict.UNKNOWN.value, seen
    return comp.verdict.value, seen


def build_history(spec: HistorySpec, revisions: list[Revision], measured: list[RunResult],
                  write_pair: WritePair) -> History:
    return Builder(spec, revisions, measured, write_pair).build()
