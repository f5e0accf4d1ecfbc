"""The table model both renderers print: one Row per (configuration, probe)."""

from __future__ import annotations

from dataclasses import dataclass

from harness.compare import overall
from harness.logparse import last_exception
from harness.probes import PROBES
from harness.report.format import describe_default, fmt
from harness.results import CellResult, Metric, ProbeComparison, Role, RunResult, Status
from harness.stats import Comparison, Kind, Verdict

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
    return describe(comp.facts(cell), deciding_metric(cell, comp))


def deciding_metric(cell: CellResult, comp: ProbeComparison) -> Metric | None:
    """The metric the row's verdict came from (the primary one when none decided)."""
    return (cell.metric(comp.decided_by) if comp.decided_by else None) or cell.primary


def comparison_text(c: Comparison, base: Metric | None = None, cand: Metric | None = None) -> str:
    """One comparison; for an exact metric, the headline statistic the cells show (`base`,
    `cand`: the two sides' metric) before where the values first differ."""
    if c.kind == Kind.EXACT:
        if base is None or cand is None or len(base.values) < 2 or c.verdict != Verdict.DIFFERENT:
            return c.note
        return f"{base.headline} {fmt(base.headline_value())} → {fmt(cand.headline_value())}; {c.note}"
    ci = f"[{fmt(c.ci[0])}, {fmt(c.ci[1])}]" if c.ci else "–"
    p = fmt(c.p) if c.p is not None else "–"
    if c.paired:
        text = f"paired Δ median {fmt(c.effect)} (95% CI {ci}), Wilcoxon p={p}, floor ±{fmt(c.floor)}"
    else:
        text = f"Δ median {fmt(c.effect)} (95% CI {ci}), p={p}, floor ±{fmt(c.floor)}"
    if c.needed is not None and c.needed > c.base.n:
        text += f"; needs n≈{c.needed} per side ({c.needed - c.base.n} more)"
    elif c.needed is not None:
        text += f"; n≈{c.needed} per side would usually resolve it: borderline, measure again"
    return text


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


def provenance_text(base: CellResult | None, cand: CellResult | None) -> str:
    """Which side came from the store (and when it was measured), and earlier noisy
    measurements shown for reference only."""
    parts = []
    for side, cell in (("base", base), ("candidate", cand)):
        if cell is None:
            continue
        when = cell.metadata.get("finished_at") or "?"
        if cell.metadata.get("reused"):
            parts.append(f"{side} reused from the store (measured {when})")
        earlier = cell.metadata.get("earlier")
        if earlier:
            parts.append(f"{side} stored {earlier.get('metric')} {fmt(earlier.get('headline'))} "
                         f"(measured {earlier.get('finished_at') or '?'}) not judged: noisy, another run")
    return "; ".join(parts)


def dummy_weights_text(base: CellResult | None, cand: CellResult | None) -> str:
    """Which models of the row's servers ran on `--load-format dummy` weights (uniform ±1e-3:
    flat logits, so a KL or accept-length match there says little); "" when none did."""
    found: list[str] = []
    for cell in (base, cand):
        argv = list(cell.metadata.get("server_argv") or []) if cell is not None else []
        formats = {flag: value for flag, value in zip(argv, argv[1:])}
        target = formats.get("--load-format") == "dummy"
        # SGLang loads the draft in the target's format unless told otherwise.
        draft = ("--speculative-draft-model-path" in formats
                 and formats.get("--speculative-draft-load-format", formats.get("--load-format")) == "dummy")
        for model, dummy in (("target", target), ("draft", draft)):
            if dummy and model not in found:
                found.append(model)
    return f"dummy weights: {' and '.join(found)}" if found else ""


def _row_note(comp: ProbeComparison, base: CellResult | None, cand: CellResult | None) -> str:
    notes = [_verdict_note(comp, base, cand), changed_exact_text(comp), dummy_weights_text(base, cand),
             provenance_text(base, cand)]
    return "; ".join(n for n in notes if n)


def changed_exact_text(comp: ProbeComparison) -> str:
    """Exact metrics the suite's verdict_metrics left out, that changed: never silent."""
    if not comp.changed_exact:
        return ""
    return "⚠ changed, not deciding: " + "; ".join(
        f"{name} {comp.metrics[name].note}" for name in comp.changed_exact if name in comp.metrics)


def _verdict_note(comp: ProbeComparison, base: CellResult | None, cand: CellResult | None) -> str:
    if comp.metrics and comp.verdict in (Verdict.SAME, Verdict.DIFFERENT, Verdict.UNKNOWN):
        name = comp.decided_by or next(iter(comp.metrics))
        if comp.metrics[name].verdict != comp.verdict:  # overruled (e.g. noisy across two runs)
            return comp.note
        metrics = [c.metric(name) if c is not None else None for c in (base, cand)]
        text = comparison_text(comp.metrics[name], *metrics)
        return f"{name}: {text}" if len(comp.metrics) > 1 else text
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


def revision_label(info) -> str:
    """A ref with its short sha ("HEAD (1a2b3c4d5e6f)"); a bare sha shortened."""
    if not info.sha:
        return info.ref
    return info.short if info.ref == info.sha else f"{info.ref} ({info.short})"


def launches_text(result: RunResult) -> str:
    ok = sum(1 for l in result.launches if l.ok)
    configs = {c.config for c in result.cells}
    return (f"{len(result.launches)} server launches ({ok} healthy) for {len(configs)} "
            f"configurations × 2 revisions")
