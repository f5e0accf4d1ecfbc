"""The table model both renderers print: one Row per (configuration, probe)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.compare import overall
from harness.logparse import last_exception
from harness.probes import PROBES
from harness.report.format import describe_default, fmt
from harness.results import CellResult, ProbeComparison, Role, RunResult, Status
from harness.stats import Comparison, Kind

VERDICT_MARK = {"same": "✅ same", "different": "❌ different", "unknown": "❔ unknown",
                "n/a": "➖ n/a", "error": "⚠️ error"}


@dataclass(frozen=True)
class Row:
    config: str
    probe: str
    base: str
    candidate: str
    verdict: str
    note: str


def cell_text(cell: CellResult | None, comp: ProbeComparison) -> str:
    if cell is None:
        return "–"
    if cell.status == Status.NOT_APPLICABLE:
        return "n/a"
    if cell.status in (Status.ERROR, Status.FINDING):
        return cell.status.value
    kind = PROBES.get(cell.probe)
    describe = (kind.describe if kind and kind.describe else None) or describe_default
    return describe(comp.facts(cell), cell.primary)


def comparison_text(c: Comparison) -> str:
    if c.kind == Kind.EXACT:
        return c.note
    ci = f"[{fmt(c.ci[0])}, {fmt(c.ci[1])}]" if c.ci else "–"
    p = fmt(c.p) if c.p is not None else "–"
    return f"Δ median {fmt(c.effect)} (95% CI {ci}), p={p}, floor ±{fmt(c.floor)}"


def rows(result: RunResult) -> list[Row]:
    out = []
    for comp in result.comparisons:
        base = result.cell(comp.config, comp.probe, Role.BASE)
        cand = result.cell(comp.config, comp.probe, Role.CANDIDATE)
        out.append(Row(comp.config, comp.probe, cell_text(base, comp), cell_text(cand, comp),
                       comp.verdict, _row_note(comp, base, cand)))
    return out


def failure_text(cell: CellResult) -> str:
    """A failed cell's reason, with the exception its server's log ends on, if any."""
    cause = last_exception(cell.log_tail) if cell.status in (Status.ERROR, Status.FINDING) else None
    return f"{cell.reason} ({cause})" if cause and cause not in cell.reason else cell.reason


def _row_note(comp: ProbeComparison, base: CellResult | None, cand: CellResult | None) -> str:
    if comp.metrics:
        primary = next(iter(comp.metrics))
        return comparison_text(comp.metrics[primary])
    failed = [(side, c) for side, c in (("base", base), ("candidate", cand))
              if c is not None and c.status != Status.OK]
    if not failed:
        return comp.note
    texts = {failure_text(c) for _, c in failed}
    if len(texts) == 1 and len(failed) == 2:
        return f"both: {texts.pop()}"
    return "; ".join(f"{side}: {failure_text(c)}" for side, c in failed)


def headline(result: RunResult) -> str:
    verdict = overall(result.comparisons)
    counts: dict[str, int] = {}
    for c in result.comparisons:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    parts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    cells = {status: sum(1 for c in result.cells if c.status == status) for status in Status}
    return (f"{verdict} ({parts or 'no comparisons'}); cells: {cells[Status.OK]} measured, "
            f"{cells[Status.NOT_APPLICABLE]} n/a, {cells[Status.ERROR]} error"
            + (f", {cells[Status.FINDING]} finding" if cells[Status.FINDING] else ""))


def launches_text(result: RunResult) -> str:
    ok = sum(1 for l in result.launches if l.ok)
    configs = {c.config for c in result.cells}
    return (f"{len(result.launches)} server launches ({ok} healthy) for {len(configs)} "
            f"configurations × 2 revisions")
