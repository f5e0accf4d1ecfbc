"""Base vs candidate, per (configuration, probe): metric comparisons and one verdict.

Exact metrics (bit-exact under deterministic mode, fixed-workload peaks) compare by equality;
noisy ones against a practical floor: paired metrics (the same prompts on both sides) by a
Wilcoxon signed-rank test + paired bootstrap CI of the median difference, unpaired ones by
bootstrap CI + Mann-Whitney. Floors and which metrics
decide the verdict come from the suite's [probe.<name>] table (validated, defaults filled by
the probe's declared parameters), never from code. A probe's JUDGED facts (a gate) are derived
here too, so stored cells are judged under the suite's current values.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Iterable

from harness import __version__, stats
from harness.probes import PROBES
from harness.probes.base import deciding_metrics
from harness.reproducer import reproducer
from harness.results import CellResult, Metric, ProbeComparison, RevisionInfo, Role, RunResult, Status
from harness.stats import Floor, Kind, Verdict


def floor_for(params: dict[str, Any], metric: str) -> Floor:
    """A noisy metric's practical floor: its own `floors` entry, else the suite's `floor_abs` /
    `floor_rel`, which apply to every deciding noisy metric (not the primary alone)."""
    per_metric = params["floors"].get(metric)
    if per_metric is not None:
        return Floor(absolute=per_metric.get("absolute", 0.0), relative=per_metric.get("relative", 0.0))
    return Floor(absolute=params["floor_abs"], relative=params["floor_rel"])


def compare_metrics(pairs: list[tuple[Metric, Metric | None]], params: dict[str, Any],
                    deciding: list[str]) -> dict[str, stats.Comparison]:
    """One comparison per metric both sides measured: exact ones by equality, noisy ones
    against their floor (paired when both sides are paired and equally long). The deciding
    noisy metrics share the suite's alpha (Bonferroni: alpha / their number), so a verdict any
    one of them can turn *different* is still wrong at most alpha of the time."""
    noisy = [m.name for m, _ in pairs if m.name in deciding and m.kind == Kind.NOISY]
    comparisons: dict[str, stats.Comparison] = {}
    for m, other in pairs:
        if other is None or not m.values or not other.values:
            continue
        if m.kind == Kind.EXACT and other.kind == Kind.EXACT:
            comparisons[m.name] = stats.compare_exact(m.values, other.values)
        else:
            paired = m.paired and other.paired and len(m.values) == len(other.values)
            compare = stats.compare_paired if paired else stats.compare_noisy
            comparisons[m.name] = compare(
                m.values, other.values, floor_for(params, m.name),
                alpha=params["alpha"] / (len(noisy) if m.name in noisy else 1),
                boot=stats.Bootstrap(seed=params["bootstrap_seed"]))
    return comparisons


def compare_cells(config: str, probe: str, base: CellResult | None, cand: CellResult | None,
                  params: dict[str, Any]) -> ProbeComparison:
    if base is None or cand is None:
        missing = "base" if base is None else "candidate"
        return ProbeComparison(config, probe, Verdict.ERROR, note=f"no {missing} result")
    sides = {"base": base, "candidate": cand}
    changed = finding_change(sides)
    if changed is not None:
        return ProbeComparison(config, probe, changed[0], note=changed[1])
    for status in (Status.ERROR, Status.NOT_APPLICABLE):
        bad = [name for name, c in sides.items() if c.status == status]
        if bad:
            reasons = "; ".join(f"{n}: {sides[n].reason}" for n in bad)
            return ProbeComparison(config, probe, Verdict(status.value), note=reasons)
    judge = PROBES[probe].judge
    judged = {role: facts for role, facts in
              ((c.role.value, judge(c.facts, params)) for c in (base, cand)) if facts} if judge else {}
    pairs, across_facts = metric_pairs(probe, base, cand, params)
    if across_facts:
        judged["candidate"] = {**judged.get("candidate", {}), **across_facts}
    deciding = deciding_metrics(params, [(m.name, m.kind) for m, _ in pairs])
    comparisons = compare_metrics(pairs, params, deciding)
    deciding = [n for n in deciding if n in comparisons]
    verdict = stats.combine_verdicts(comparisons[n].verdict for n in deciding)
    note = "; ".join(f"{n}: {comparisons[n].note}" for n in deciding)
    decided_by = next((n for n in deciding if comparisons[n].verdict == verdict), None)
    # An exact figure the suite chose not to decide on, that changed: named beside the verdict,
    # so a narrowed verdict is never a bare *same* next to a changed exact metric.
    also_changed = tuple(n for n, c in comparisons.items()
                         if n not in deciding and c.kind == Kind.EXACT and c.verdict == Verdict.DIFFERENT)
    if also_changed:
        note += "; changed, not deciding (verdict_metrics): " + "; ".join(
            f"{n}: {comparisons[n].note}" for n in also_changed)
    vacuous = [f"{n}: {sides[n].facts['vacuous']}" for n in sides if sides[n].facts.get("vacuous")]
    if vacuous and verdict != Verdict.DIFFERENT:
        # Too few samples to vouch for a match; a difference among those there are still counts.
        return ProbeComparison(config, probe, Verdict.ERROR, comparisons, "vacuous: " + "; ".join(vacuous),
                               judged, changed_exact=also_changed)
    return ProbeComparison(config, probe, verdict, comparisons, note, judged, decided_by,
                           changed_exact=also_changed)


def metric_pairs(probe: str, base: CellResult, cand: CellResult, params: dict[str, Any]
                 ) -> tuple[list[tuple[Metric, Metric | None]], dict[str, Any]]:
    """The (base, candidate) metrics to compare: each cell's own, by name; for a cross-revision
    probe (`ProbeKind.across`), those it derives from both sides' samples, with its facts about
    the pair (shown with the candidate's facts)."""
    across = PROBES[probe].across
    if across is None:
        return [(m, cand.metric(m.name)) for m in base.metrics], {}
    derived = across(base, cand, params)
    return list(derived.metrics), derived.facts


def finding_change(sides: dict[str, CellResult]) -> tuple[Verdict, str] | None:
    """A finding on either side decides the pair: the revision went from serving (or failing
    one way) to failing another way, a change between the sides; the same finding on both is
    not a pass, and reads error."""
    base, cand = sides["base"], sides["candidate"]
    if Status.FINDING not in (base.status, cand.status):
        return None
    if base.status == cand.status and base.reason == cand.reason:
        return Verdict.ERROR, f"both: {base.reason}"
    notes = "; ".join(f"{side}: {c.reason or 'serves'}" for side, c in sides.items())
    return Verdict.DIFFERENT, f"changed between the sides: {notes}"


def compare_run(cells: Iterable[CellResult], probe_params: dict[str, dict[str, Any]],
                order: Iterable[tuple[str, str]]) -> tuple[ProbeComparison, ...]:
    """`probe_params`: the suite's validated parameters per probe (Suite.probe_params); a
    probe the suite does not mention is judged with its defaults."""
    by_key = {(c.config, c.probe, c.role): c for c in cells}
    return tuple(compare_pair(config, probe, by_key.get((config, probe, Role.BASE)),
                              by_key.get((config, probe, Role.CANDIDATE)), probe_params)
                 for config, probe in order)


def compare_pair(config: str, probe: str, base: CellResult | None, cand: CellResult | None,
                 probe_params: dict[str, dict[str, Any]]) -> ProbeComparison:
    """compare_cells under the suite's parameters for `probe` (its defaults where the suite
    names none)."""
    if probe not in PROBES:
        return ProbeComparison(config, probe, Verdict.ERROR, note=f"unknown probe {probe!r}")
    params = probe_params.get(probe) or PROBES[probe].defaults()
    comp = compare_cells(config, probe, base, cand, params)
    if comp.verdict != Verdict.DIFFERENT or base is None or cand is None:
        return comp
    # A *different* pair gets its smallest request (harness/reproducer.py), from the samples.
    pairs = metric_pairs(probe, base, cand, params)[0] if comp.metrics else []
    return dataclasses.replace(comp, reproducer=reproducer(comp, base, cand, pairs))


def overall(comparisons: Iterable[ProbeComparison]) -> Verdict:
    """The run's verdict: different beats error beats unknown beats same; n/a is neutral, and
    a run where nothing was compared is never a pass: "nothing measured"."""
    verdicts = {c.verdict for c in comparisons}
    for v in (Verdict.DIFFERENT, Verdict.ERROR, Verdict.UNKNOWN, Verdict.SAME):
        if v in verdicts:
            return v
    return Verdict.NOTHING_MEASURED


def compare_runs(base_run: RunResult, cand_run: RunResult, side: Role,
                 probe_params: dict, command: str = "") -> RunResult:
    """A RunResult whose base cells are `base_run`'s `side` cells, candidate cells `cand_run`'s."""
    base = [c.with_role(Role.BASE) for c in base_run.cells if c.role == side]
    cand = [c.with_role(Role.CANDIDATE) for c in cand_run.cells if c.role == side]
    order = list(dict.fromkeys((c.config, c.probe) for c in (*base, *cand)))
    by_key = {(c.config, c.probe, c.role): c for c in (*base, *cand)}
    comparisons = tuple(_comparable(comp, by_key.get((comp.config, comp.probe, Role.BASE)),
                                    by_key.get((comp.config, comp.probe, Role.CANDIDATE)))
                        for comp in compare_run((*base, *cand), probe_params, order))

    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

    def revision(run: RunResult) -> RevisionInfo:
        return run.base if side == Role.BASE else run.candidate

    return RunResult(
        suite=base_run.suite, target=base_run.target, base=revision(base_run), candidate=revision(cand_run),
        cells=(*base, *cand), comparisons=comparisons, launches=(),
        metadata={"command": command, "harness_version": __version__, "started_at": now, "finished_at": now,
                  "compared_from": [base_run.metadata.get("started_at"), cand_run.metadata.get("started_at")]},
    )


def _comparable(comp: ProbeComparison, base: CellResult | None, cand: CellResult | None) -> ProbeComparison:
    """asv's `x`: a pair measured on different configurations or workloads is not a comparison.
    A noisy metric measured in two runs (other times, other load) is shown but decides nothing:
    a verdict it decided reads *unknown*."""
    if base is None or cand is None:
        return comp
    for what, a, b in (("server configuration", base.config_fingerprint, cand.config_fingerprint),
                       ("workload", base.workload_fingerprint, cand.workload_fingerprint)):
        if a != b:
            return ProbeComparison(comp.config, comp.probe, Verdict.ERROR,
                                   note=f"not comparable: {what} differs ({a} vs {b})")
    decided = comp.metrics.get(comp.decided_by or "")
    if decided is not None and decided.kind == Kind.NOISY and comp.verdict != Verdict.UNKNOWN:
        when = " and ".join(str(c.metadata.get("finished_at") or "?") for c in (base, cand))
        return dataclasses.replace(comp, verdict=Verdict.UNKNOWN, note=(
            f"{comp.decided_by} is noisy and was measured in two runs ({when}): shown, not judged "
            f"(would read {comp.verdict}); measure both in one run; {comp.note}"))
    return comp
