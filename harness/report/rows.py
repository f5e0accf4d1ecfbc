"""The table model both renderers print: one Row per (configuration, probe)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence, TypeGuard

from harness import completeness, path_proof
from harness.compare import CHANGED_NOT_DECIDING, leaning, metric_pairs, overall, reference_of
from harness.logparse import last_exception
from harness.probes import PROBES
from harness.probes.base import Reference, ValueIndex
from harness.report.format import describe_default, portable
from harness.results import CellResult, Metric, ProbeComparison, Role, RunResult, Status
from harness.verdict_stats import Comparison, Kind, Verdict
from harness.textfmt import fmt, fmt_pair, plural

# A planned pair this run's evidence does not judge (a side's cell absent or another run's, its
# row absent): its row reads so in the verdict column, never left out nor shown as recorded.
MISSING = "missing"
VERDICT_MARK = {"same": "✅ same", "different": "❌ different", "unknown": "❔ unknown",
                "n/a": "➖ n/a", "error": "⚠️ error", MISSING: "⛔ missing"}


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
        text = f"paired Δ {c.center} {fmt(c.effect)} (95% CI {ci}), Wilcoxon p={p}, floor ±{fmt(c.floor)}"
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
    n = len(base.values)
    if c.verdict == Verdict.SAME and n == len(cand.values):
        return "identical" if n == 1 and item == "value" else f"identical ({plural(n, item)})"
    if c.verdict != Verdict.DIFFERENT or c.first_difference is None:
        return c.note
    i = c.first_difference
    if i >= min(n, len(cand.values)):
        return f"{plural(n, item)} vs {len(cand.values):,}, equal as far as both go"
    unit = f" {base.unit}" if base.unit else ""
    shown = fmt_pair(base.values[i], cand.values[i])
    shown = shown[0], shown[1] + unit
    if n == 1 and len(cand.values) == 1:
        return f"{shown[0]} → {shown[1]}" if item == "value" else f"{where(i)}: {shown[0]} → {shown[1]}"
    text = f"first at {where(i)}: {shown[0]} → {shown[1]}"
    if n == len(cand.values):
        differing = sum(1 for x, y in zip(base.values, cand.values) if x != y)
        text += f" ({differing:,} of {plural(n, item)} {'differs' if differing == 1 else 'differ'})"
    else:
        text += f" ({plural(n, item)} vs {len(cand.values):,})"
    stat = base.headline_value(), cand.headline_value()
    if n < 2 or stat[0] is None or stat[1] is None:
        return text
    return f"{base.headline} {fmt(stat[0])} → {fmt(stat[1])}; {text}"


MAX_RATIO = 100.0


def ratio_text(c: Comparison, base: Metric | None) -> str:
    """"1.27× faster (95% CI 1.1–1.4×)" for a rate, from the medians and the CI of their
    difference over the base median; "" where a ratio would mislead (a median at or below 0)."""
    if base is None or c.base.median <= 0 or c.candidate.median <= 0:
        return ""
    ratio = c.candidate.median / c.base.median
    # "1.00× higher" says nothing the Δ does not; a ratio to a median near 0 (a KL of 1e-17)
    # is a number of no meaning: beyond 100× the Δ alone is shown.
    if f"{max(ratio, 1 / ratio):.2f}" == "1.00" or max(ratio, 1 / ratio) > MAX_RATIO:
        return ""
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


Sides = dict[str, tuple[Metric | None, Metric | None]]


def rows(result: RunResult, sides: dict[tuple[str, str], Sides] | None = None) -> list[Row]:
    """The table's rows; `sides`: each comparison's metric_sides where the caller has them
    already (all_metric_sides), so a render derives a cross-revision probe's metrics once."""
    sides = sides if sides is not None else all_metric_sides(result)
    lacking = completeness.pair_lacks(result)
    out = []
    for comp in result.comparisons:
        base = result.cell(comp.config, comp.probe, Role.BASE)
        cand = result.cell(comp.config, comp.probe, Role.CANDIDATE)
        base_text, cand_text = without_shared_side_notes(cell_text(base, comp), cell_text(cand, comp))
        note = _row_note(comp, base, cand, sides[(comp.config, comp.probe)])
        lacks = lacking.get((comp.config, comp.probe))
        if lacks:  # judged from a cell that is not this run's: what it recorded is no verdict of this run
            out.append(Row(comp.config, comp.probe, base_text, cand_text, MISSING,
                           portable(f"{missing_text(lacks)}; as recorded: {comp.verdict}" + (f": {note}" if note else ""))))
        else:
            out.append(Row(comp.config, comp.probe, base_text, cand_text, comp.verdict, portable(note)))
    judged = {(c.config, c.probe) for c in result.comparisons}
    out += [Row(config, probe, side_text(result.cell(config, probe, Role.BASE)),
                side_text(result.cell(config, probe, Role.CANDIDATE)), MISSING, missing_text(lacks))
            for (config, probe), lacks in lacking.items() if (config, probe) not in judged]
    return out


def missing_text(lacks: list[str]) -> str:
    """A missing row's reason: what this run's evidence lacks for its pair."""
    return f"not judged by this run: {', '.join(lacks)}"


def side_text(cell: CellResult | None) -> str:
    """A side of a pair that has no comparison row: whether its cell is there, and how it ended."""
    if cell is None:
        return "–"
    return "measured" if cell.status == Status.OK else cell.status.value


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
        formats = cell.server_flags() if cell is not None else {}
        target = formats.get("--load-format") == "dummy"
        # SGLang loads the draft in the target's format unless told otherwise.
        draft = ("--speculative-draft-model-path" in formats
                 and formats.get("--speculative-draft-load-format", formats.get("--load-format")) == "dummy")
        for model, dummy in (("target", target), ("draft", draft)):
            if dummy and model not in found:
                found.append(model)
    return f"dummy weights: {' and '.join(found)}" if found else ""


def _row_note(comp: ProbeComparison, base: CellResult | None, cand: CellResult | None, sides: Sides) -> str:
    notes = [_verdict_note(comp, base, cand, sides), changed_not_deciding_text(comp, base, cand, sides),
             dummy_weights_text(base, cand), in_turn_text(base, cand), provenance_text(base, cand)]
    return "; ".join(n for n in notes if n)


def in_turn_text(base: CellResult | None, cand: CellResult | None) -> str:
    """An interleaved probe whose sides could not be up together (one slot holding one server:
    harness/pipeline/schedule.py): each side's rounds ran on its own server, one side after the other."""
    if any(c is not None and c.facts.get("placement") == "in turn" for c in (base, cand)):
        return "sides measured in turn, not in alternating rounds (one server fits at a time)"
    return ""


def all_metric_sides(result: RunResult) -> dict[tuple[str, str], Sides]:
    """metric_sides of every comparison of `result`, by (configuration, probe): what one render
    (its rows and its details) reads, derived once."""
    cells = {(c.config, c.probe, c.role): c for c in result.cells}
    return {(comp.config, comp.probe): metric_sides(comp, result.cell(comp.config, comp.probe, Role.BASE),
                                                    result.cell(comp.config, comp.probe, Role.CANDIDATE),
                                                    _reference(comp, result, cells))
            for comp in result.comparisons}


def _reference(comp: ProbeComparison, result: RunResult, cells: dict) -> Reference | None:
    """The reference configuration's cells of a probe that reads them (`ProbeKind.versus`),
    under the parameters the run judged with (the probe's defaults where it recorded none)."""
    kind = PROBES.get(comp.probe)
    if kind is None or kind.versus is None:
        return None
    params = (result.judging_params() or {}).get(comp.probe)
    params = kind.validate({k: v for k, v in params.items() if v is not None}, comp.probe) \
        if isinstance(params, dict) else kind.defaults()
    return reference_of(comp.config, comp.probe, cells, params)


def metric_sides(comp: ProbeComparison, base: CellResult | None, cand: CellResult | None,
                 reference: Reference | None = None) -> Sides:
    """Each compared metric's (base, candidate) values: each cell's own, or for a cross-revision
    probe those its `across` hook derives from both cells' samples (stored on neither cell:
    compare.metric_pairs, under the probe's defaults, which shape its facts only); for a probe
    against a reference configuration, those `versus` derives with `reference`'s cells."""
    kind = PROBES.get(comp.probe)
    if (kind is not None and (kind.across is not None or kind.versus is not None) and base is not None
            and cand is not None and base.status == cand.status == Status.OK):
        return {b.name: (b, c) for b, c in metric_pairs(comp.probe, base, cand, kind.defaults(), reference)[0]}
    return {name: (base.metric(name) if base else None, cand.metric(name) if cand else None)
            for name in comp.metrics}


def metric_text(comp: ProbeComparison, name: str, base: CellResult | None, cand: CellResult | None,
                sides: Sides) -> str:
    """Metric `name`'s comparison in words, its values placed by the cells' samples."""
    metrics = sides.get(name, (None, None))
    item = index_item(comp, base, metrics[0])
    return comparison_text(comp.metrics[name], *metrics, item=item, where=value_place(item, (base, cand), metrics))


def changed_not_deciding_text(comp: ProbeComparison, base: CellResult | None, cand: CellResult | None,
                       sides: Sides) -> str:
    """Metrics that did not decide and changed (exact ones verdict_metrics left out, noisy ones
    beside the primary): never silent."""
    if not comp.changed_not_deciding:
        return ""
    return "⚠ changed, not deciding: " + "; ".join(
        f"{name}: {metric_text(comp, name, base, cand, sides)}" for name in comp.changed_not_deciding if name in comp.metrics)


def _verdict_note(comp: ProbeComparison, base: CellResult | None, cand: CellResult | None, sides: Sides) -> str:
    if comp.metrics and comp.verdict in (Verdict.SAME, Verdict.DIFFERENT, Verdict.UNKNOWN):
        name = comp.decided_by or next(iter(comp.metrics))
        if comp.metrics[name].verdict != comp.verdict:  # overruled (e.g. noisy across two runs)
            return own_note(comp)
        text = metric_text(comp, name, base, cand, sides)
        label = metric_label(comp.probe, name)
        shown = f"{label}: {text}{_alike_text(comp, name)}" if len(comp.metrics) > 1 or label != name else text
        return shown + path_text(base, cand)
    failed = [(side, c) for side, c in (("base", base), ("candidate", cand))
              if c is not None and c.status != Status.OK]
    if not failed:
        return own_note(comp)
    texts = {failure_text(c) for _, c in failed}
    if len(texts) == 1 and len(failed) == 2:
        return f"both: {texts.pop()}"
    return "; ".join(f"{side}: {failure_text(c)}" for side, c in failed)


def path_text(base: CellResult | None, cand: CellResult | None) -> str:
    """What showed each side's demanded path ran (harness/path_proof.py), after the verdict's words."""
    proofs = [f"{side} {why}" for side, c in (("base", base), ("candidate", cand))
              if c is not None and (why := path_proof.shown(c.facts))]
    return f" · path shown: {'; '.join(proofs)}" if proofs else ""


def own_note(comp: ProbeComparison) -> str:
    """The comparison's note up to the metrics it names as changed, not deciding: the row words
    those itself (changed_not_deciding_text), once."""
    return comp.note.split(CHANGED_NOT_DECIDING)[0]


def metric_label(probe: str, name: str) -> str:
    """A metric's name, with what its two sides are where they are not simply each side's own
    measurement ("kl (the base's rerun vs the base → the candidate vs the base)")."""
    declared = _declared(probe, name)
    return f"{name} ({declared.sides})" if declared is not None and declared.sides else name


def _alike_text(comp: ProbeComparison, shown: str) -> str:
    """The other deciding exact metrics that read as the shown one did ("; topk_kl identical
    too"): a row names one metric, and a reviewer should not wonder about the rest."""
    verdict = comp.metrics[shown].verdict
    if verdict not in (Verdict.SAME, Verdict.DIFFERENT):
        return ""
    alike = [n for n, c in comp.metrics.items() if n != shown and n not in comp.changed_not_deciding
             and c.kind == Kind.EXACT and c.verdict == verdict]
    if not alike:
        return ""
    word = "identical" if verdict == Verdict.SAME else ("differs" if len(alike) == 1 else "differ")
    return f"; {', '.join(alike)} {word} too"


def index_item(comp: ProbeComparison, cell: CellResult | None, metric: Metric | None) -> str:
    """What value i of a metric is: what its probe declares (`ProbeKind.values`: a scored token,
    a cache hit), else a prompt where the cell measured one value per prompt."""
    if metric is None:
        return "value"
    declared = _declared(comp.probe, metric.name)
    if declared is not None:
        return declared.noun
    if cell is None:
        return "value"
    return "prompt" if comp.facts(cell).get("prompts") == len(metric.values) else "value"


def _declared(probe: str, metric: str) -> ValueIndex | None:
    kind = PROBES.get(probe)
    return kind.values(metric) if kind is not None and kind.values is not None else None


# The sample key in which a per-prompt sample locates the first output position where that
# side's answer departed from its reference (the kl probes: decode or cache hit vs cold replay).
FIRST_POSITION = "first_divergent"


def value_place(item: str, cells: tuple[CellResult | None, CellResult | None],
                metrics: tuple[Metric | None, Metric | None]) -> Callable[[int], str]:
    """Value i's place in words: where the probe declares it (`ProbeKind.values`, from each
    side's samples: "prompt 3, scored token 12"; a cache hit's workload prompt), else "prompt 0";
    and where each side's samples are its metric's values one for one (values of prompts or hits)
    and locate where the
    answer departed, that output position too ("prompt 0, output position 3"; "output position
    3 → 5" where the sides departed at different ones)."""
    probe = next((c.probe for c in cells if c is not None), "")
    name = next((m.name for m in metrics if m is not None), "")
    declared = _declared(probe, name)

    def one_for_one(cell: CellResult | None, metric: Metric | None, i: int) -> TypeGuard[CellResult]:
        return cell is not None and metric is not None and len(cell.samples) == len(metric.values) > i

    def named(cell: CellResult | None, i: int) -> str:
        if declared is not None and cell is not None:
            return declared.place(cell.samples, i)
        return f"{item} {i}"

    def place(i: int) -> str:
        names = dict.fromkeys(named(cell, i) for cell in cells if cell is not None)
        found = [p for p in (cell.samples[i].get(FIRST_POSITION) for cell, metric in zip(cells, metrics)
                             if one_for_one(cell, metric, i)) if p is not None]
        text = " → ".join(names) or f"{item} {i}"
        if not found or item == "value":  # a value of no known prompt: its position says nothing
            return text
        return f"{text}, output position {' → '.join(str(p) for p in dict.fromkeys(found))}"
    return place


def figure_cells(result: RunResult, comp: ProbeComparison) -> dict[Role, CellResult]:
    """The sides a figure of the pair draws: measured cells with samples (none: no figure)."""
    return {role: cell for role in (Role.BASE, Role.CANDIDATE)
            for cell in [result.cell(comp.config, comp.probe, role)]
            if cell is not None and cell.status == Status.OK and cell.samples}


def headline(result: RunResult, also: Sequence[str] = (), listed: bool = False) -> str:
    """The run's verdict in a line: first, where the record is no pass (`no_pass_text`), that and
    why; then the rows' verdicts as recorded and the cells. `also`: what the caller found beside
    the record's own gaps (the suite's parameters); `listed`: the gaps are listed below the line
    (`gap_items`), so the line only counts them."""
    recorded = recorded_headline(result)
    found = [*completeness.gaps(result), *also]
    if not found:
        return recorded
    return f"{no_pass_text(result, found, listed)}; as recorded: {recorded}"


def no_pass_text(result: RunResult, found: Sequence[str], listed: bool) -> str:
    """"not a pass: the record is incomplete (3 gaps: …)": the record's gaps (`completeness.gaps`)
    and those of its judging (`found` beyond them), named before any verdict a reader reads."""
    own = len(completeness.gaps(result))
    why = " and ".join(w for w, n in (("the record is incomplete", own),
                                      ("it is not judged as its suite judges", len(found) - own)) if n)
    return (f"not a pass: {why} ({plural(len(found), 'gap')}"
            f"{', listed below' if listed else ': ' + completeness.summary(list(found))})")


def gap_items(found: Sequence[str]) -> list[str]:
    """The gaps as list items: the first `completeness.SHOWN`, then how many more."""
    shown = list(found[:completeness.SHOWN])
    return shown + ([f"and {len(found) - completeness.SHOWN} more"] if len(found) > completeness.SHOWN else [])


def recorded_headline(result: RunResult) -> str:
    """The rows' verdicts and the cells as the record holds them."""
    verdict = overall(result.comparisons)
    counts: dict[str, int] = {}
    for c in result.comparisons:
        counts[c.verdict] = counts.get(c.verdict, 0) + 1
    parts = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
    cells = {status: sum(1 for c in result.cells if c.status == status) for status in Status}
    leans = leaning(result)
    return (f"{verdict} ({parts or 'no comparisons'}); cells: {cells[Status.OK]} measured, "
            f"{cells[Status.NOT_APPLICABLE]} n/a, {cells[Status.ERROR]} error"
            + (f", {cells[Status.FINDING]} finding" if cells[Status.FINDING] else "")
            + (f"; leaning to different, so no pass (exit 1): {'; '.join(leans)}" if leans else ""))


def revision_label(info) -> str:
    """A ref with its short sha ("HEAD (1a2b3c4d5e6f)"); a bare sha shortened."""
    if not info.sha:
        return info.ref
    return info.short if info.ref == info.sha else f"{info.ref} ({info.short})"


def launches_text(result: RunResult) -> str:
    ok = sum(1 for l in result.launches if l.ok)
    configs = {c.config for c in result.cells}
    sessions = run_sessions(result)
    if len(sessions) > 1:  # resumed: every session's launches, the last one's as recorded
        total = sum(int(s.get("launches") or 0) for s in sessions)
        return (f"{plural(total, 'server launch', 'server launches')} over {len(sessions)} sessions "
                f"({len(result.launches)} in the last, {ok} healthy) "
                f"for {plural(len(configs), 'configuration')} × 2 revisions")
    return (f"{plural(len(result.launches), 'server launch', 'server launches')} ({ok} healthy) "
            f"for {plural(len(configs), 'configuration')} × 2 revisions")


def torch_change_text(result: RunResult) -> str | None:
    """The sentence a report carries when the sides' servers ran on different torch releases
    (cell metadata, read from each interpreter): every difference, revision_kl's above all,
    then measures torch as well as the revision. None when they agree or a side's is unknown."""
    seen = {role: sorted({str(c.metadata["torch"]) for c in result.cells
                          if c.role == role and c.metadata.get("torch")}) for role in Role}
    if not all(seen.values()) or seen[Role.BASE] == seen[Role.CANDIDATE]:
        return None
    return (f"The pair spans a torch change (base torch {', '.join(seen[Role.BASE])}, candidate torch "
            f"{', '.join(seen[Role.CANDIDATE])}): a difference, revision_kl's above all, measures torch as "
            f"well as the revision.")


def run_sessions(result: RunResult) -> list[dict]:
    """The sessions a resumed run was made in, oldest first ({"command", "launches"} each); []
    for a run made in one."""
    sessions = result.metadata.get("sessions")
    return [s for s in sessions if isinstance(s, dict)] if isinstance(sessions, list) else []


def relaunch_texts(result: RunResult) -> list[str]:
    """Each launch whose server was started more than once, and why ("det @ base: started
    2 times: the warm-up could not connect to the server's own port"): the host's doing,
    said so that a row it delayed is not read as the revision's."""
    return [f"{l.config} @ {l.role.value}: started {plural(len(l.relaunched) + 1, 'time')}: "
            f"{'; '.join(l.relaunched)}" for l in result.launches if l.relaunched]
