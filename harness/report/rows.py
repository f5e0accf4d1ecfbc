"""The table model both renderers print: one Row per (configuration, probe)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from harness.compare import overall
from harness.logparse import last_exception
from harness.probes import PROBES
from harness.report.format import describe_default, fmt, plural
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


def comparison_text(c: Comparison, base: Metric | None = None, cand: Metric | None = None,
                    item: str = "value", where: Callable[[int], str] | None = None) -> str:
    """One comparison in words. Exact: the headline statistic the cells show (`base`, `cand`:
    the two sides' metric) and the first `item` (prompt, round…) whose values differ, placed
    by `where` where it says more than the item (`value_place`). Noisy: the ratio of medians
    where one reads as such (tok/s: faster or slower), then the test."""
    if c.kind == Kind.EXACT:
        return _exact_text(c, base, cand, item, where or (lambda i: f"{item} {i}"))
    ci = f"[{fmt(c.ci[0])}, {fmt(c.ci[1])}]" if c.ci else "–"
    p = fmt(c.p) if c.p is not None else "–"
    if c.paired:
        text = f"paired Δ median {fmt(c.effect)} (95% CI {ci}), Wilcoxon p={p}, floor ±{fmt(c.floor)}"
    else:
        text = f"Δ median {fmt(c.effect)} (95% CI {ci}), p={p}, floor ±{fmt(c.floor)}"
    ratio = ratio_text(c, base)
    if ratio:
        text = f"{ratio}: {text}"
    if c.needed is not None and c.needed > c.base.n:
        text += f"; needs n≈{c.needed} per side ({c.needed - c.base.n} more)"
    elif c.needed is not None:
        text += f"; n≈{c.needed} per side would usually resolve it: borderline, measure again"
    return text


def _exact_text(c: Comparison, base: Metric | None, cand: Metric | None, item: str,
                where: Callable[[int], str]) -> str:
    if base is None or cand is None:
        return c.note
    if c.verdict == Verdict.SAME and len(base.values) == len(cand.values):
        return f"identical ({plural(len(base.values), item)})"
    if c.verdict != Verdict.DIFFERENT or c.first_difference is None:
        return c.note
    i = c.first_difference
    if i >= min(len(base.values), len(cand.values)):
        return f"{plural(len(base.values), item)} vs {len(cand.values):,}, equal as far as both go"
    text = f"first at {where(i)}: {fmt(base.values[i])} → {fmt(cand.values[i])}"
    if len(base.values) == len(cand.values):
        differing = sum(1 for x, y in zip(base.values, cand.values) if x != y)
        text += f" ({differing} of {plural(len(base.values), item)} differ)"
    else:
        text += f" ({plural(len(base.values), item)} vs {len(cand.values):,})"
    if len(base.values) < 2:
        return text
    return f"{base.headline} {fmt(base.headline_value())} → {fmt(cand.headline_value())}; {text}"


def ratio_text(c: Comparison, base: Metric | None) -> str:
    """"1.27× faster (95% CI 1.1–1.4×)" for a rate, from the medians and the CI of their
    difference over the base median; "" where a ratio would mislead (a median at or below 0)."""
    if base is None or c.base.median <= 0 or c.candidate.median <= 0:
        return ""
    ratio = c.candidate.median / c.base.median
    ci = [1 + bound / c.base.median for bound in c.ci] if c.ci else None
    rate = base.unit.endswith("/s")
    if ratio >= 1:
        word, shown = ("faster" if rate else "higher"), ratio
        ci_shown = ci
    else:
        word, shown = ("slower" if rate else "lower"), 1 / ratio
        ci_shown = [1 / b for b in reversed(ci)] if ci and min(ci) > 0 else None
    interval = f" (95% CI {ci_shown[0]:.2f}–{ci_shown[1]:.2f}×)" if ci_shown else ""
    return f"{shown:.2f}× {word}{interval}"


def rows(result: RunResult) -> list[Row]:
    out = []
    for comp in result.comparisons:
        base = result.cell(comp.config, comp.probe, Role.BASE)
        cand = result.cell(comp.config, comp.probe, Role.CANDIDATE)
        base_text, cand_text = without_shared_side_notes(cell_text(base, comp), cell_text(cand, comp))
        out.append(Row(comp.config, comp.probe, base_text, cand_text, comp.verdict, _row_note(comp, base, cand)))
    return out


def without_shared_side_notes(base: str, cand: str) -> tuple[str, str]:
    """The two cells' texts without the side notes ("; gate < 1e-09 ✗") they share word for
    word: what both sides have says nothing about the change. The headline (before the first
    "; ") stays, shared or not."""
    b_head, *b_notes = base.split("; ")
    c_head, *c_notes = cand.split("; ")
    shared = set(b_notes) & set(c_notes)
    return ("; ".join([b_head, *(n for n in b_notes if n not in shared)]),
            "; ".join([c_head, *(n for n in c_notes if n not in shared)]))


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
        item = index_item(comp, base, metrics[0])
        text = comparison_text(comp.metrics[name], *metrics, item=item,
                               where=value_place(item, (base, cand), (metrics[0], metrics[1])))
        return f"{name}: {text}" if len(comp.metrics) > 1 else text
    failed = [(side, c) for side, c in (("base", base), ("candidate", cand))
              if c is not None and c.status != Status.OK]
    if not failed:
        return comp.note
    texts = {failure_text(c) for _, c in failed}
    if len(texts) == 1 and len(failed) == 2:
        return f"both: {texts.pop()}"
    return "; ".join(f"{side}: {failure_text(c)}" for side, c in failed)


def index_item(comp: ProbeComparison, cell: CellResult | None, metric: Metric | None) -> str:
    """What value i of a metric is: a prompt where the cell measured one value per prompt."""
    if cell is None or metric is None:
        return "value"
    return "prompt" if comp.facts(cell).get("prompts") == len(metric.values) else "value"


# The sample key in which a per-prompt sample locates the first output position where that
# side's answer departed from its reference (the kl probes: decode or cache hit vs cold replay).
FIRST_POSITION = "first_divergent"


def value_place(item: str, cells: tuple[CellResult | None, CellResult | None],
                metrics: tuple[Metric | None, Metric | None]) -> Callable[[int], str]:
    """Value i's place in words: "prompt 0", and where each side's samples are its metric's
    values one for one and locate where the answer departed, that output position too ("prompt
    0, output position 3"; "output position 3 → 5" where the sides departed at different ones)."""
    def first(cell: CellResult | None, metric: Metric | None, i: int) -> int | None:
        if cell is None or metric is None or len(cell.samples) != len(metric.values) or i >= len(cell.samples):
            return None
        return cell.samples[i].get(FIRST_POSITION)

    def place(i: int) -> str:
        found = [p for p in (first(cell, metric, i) for cell, metric in zip(cells, metrics)) if p is not None]
        if item != "prompt" or not found:
            return f"{item} {i}"
        return f"{item} {i}, output position {' → '.join(str(p) for p in dict.fromkeys(found))}"
    return place


def figure_cells(result: RunResult, comp: ProbeComparison) -> dict[Role, CellResult]:
    """The sides a figure of the pair draws: measured cells with samples (none: no figure)."""
    return {role: cell for role in (Role.BASE, Role.CANDIDATE)
            for cell in [result.cell(comp.config, comp.probe, role)]
            if cell is not None and cell.status == Status.OK and cell.samples}


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
    return (f"{plural(len(result.launches), 'server launch', 'server launches')} ({ok} healthy) "
            f"for {plural(len(configs), 'configuration')} × 2 revisions")
