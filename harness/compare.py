"""Base vs candidate, per (configuration, probe): metric comparisons and one verdict.

Exact metrics (bit-exact under deterministic mode, fixed-workload peaks) compare by equality;
noisy ones by bootstrap CI + Mann-Whitney against a practical floor. Floors and which metrics
decide the verdict come from the suite's [probe.<name>] table (validated, defaults filled by
the probe's declared parameters), never from code. A probe's JUDGED facts (a gate) are derived
here too, so stored cells are judged under the suite's current values.
"""

from __future__ import annotations

from typing import Any, Iterable

from harness import stats
from harness.probes import PROBES
from harness.results import CellResult, ProbeComparison, Role, Status
from harness.stats import Floor, Kind, Verdict


def floor_for(params: dict[str, Any], metric: str, primary: bool) -> Floor:
    per_metric = params["floors"].get(metric)
    if per_metric is not None:
        return Floor(absolute=per_metric.get("absolute", 0.0), relative=per_metric.get("relative", 0.0))
    if primary:
        return Floor(absolute=params["floor_abs"], relative=params["floor_rel"])
    return Floor()


def compare_cells(config: str, probe: str, base: CellResult | None, cand: CellResult | None,
                  params: dict[str, Any]) -> ProbeComparison:
    if base is None or cand is None:
        missing = "base" if base is None else "candidate"
        return ProbeComparison(config, probe, "error", note=f"no {missing} result")
    sides = {"base": base, "candidate": cand}
    for status in (Status.ERROR, Status.NOT_APPLICABLE):
        bad = [name for name, c in sides.items() if c.status == status]
        if bad:
            reasons = "; ".join(f"{n}: {sides[n].reason}" for n in bad)
            return ProbeComparison(config, probe, status.value, note=reasons)
    judge = PROBES[probe].judge
    judged = {c.role.value: judge(c.facts, params) for c in (base, cand)} if judge else {}
    decisive = params["verdict_metrics"] or ([base.primary.name] if base.primary else [])
    comparisons: dict[str, stats.Comparison] = {}
    for i, m in enumerate(base.metrics):
        other = cand.metric(m.name)
        if other is None or not m.values or not other.values:
            continue
        if m.kind == Kind.EXACT and other.kind == Kind.EXACT:
            comparisons[m.name] = stats.compare_exact(m.values, other.values)
        else:
            comparisons[m.name] = stats.compare_noisy(
                m.values, other.values, floor_for(params, m.name, primary=(i == 0)),
                alpha=params["alpha"], seed=params["bootstrap_seed"])
    decided = [comparisons[n].verdict for n in decisive if n in comparisons]
    verdict = stats.combine_verdicts(decided)
    note = "; ".join(f"{n}: {comparisons[n].note}" for n in decisive if n in comparisons)
    return ProbeComparison(config, probe, verdict.value, comparisons, note,
                           {role: facts for role, facts in judged.items() if facts})


def compare_run(cells: Iterable[CellResult], probe_params: dict[str, dict[str, Any]],
                order: Iterable[tuple[str, str]]) -> tuple[ProbeComparison, ...]:
    """`probe_params`: the suite's validated parameters per probe (Suite.probe_params); a
    probe the suite does not mention is judged with its defaults."""
    by_key = {(c.config, c.probe, c.role): c for c in cells}
    out = []
    for config, probe in order:
        if probe not in PROBES:
            out.append(ProbeComparison(config, probe, "error", note=f"unknown probe {probe!r}"))
            continue
        params = probe_params.get(probe) or PROBES[probe].defaults()
        out.append(compare_cells(config, probe, by_key.get((config, probe, Role.BASE)),
                                 by_key.get((config, probe, Role.CANDIDATE)), params))
    return tuple(out)


def overall(comparisons: Iterable[ProbeComparison]) -> str:
    """The run's verdict: different beats error beats unknown beats same; n/a is neutral."""
    verdicts = {c.verdict for c in comparisons}
    for v in (Verdict.DIFFERENT.value, "error", Verdict.UNKNOWN.value, Verdict.SAME.value):
        if v in verdicts:
            return v
    return "n/a"
