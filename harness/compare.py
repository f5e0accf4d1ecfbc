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
import functools
import math
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from harness import __version__, path_proof, runner
from harness import verdict_stats as stats
from harness.errors import CorruptResult
from harness.probes import PROBES
from harness.probes.base import Across, Reference, deciding_metrics
from harness.reproduce import reproducer
from harness.sequential import LookState
from harness.results import (CellResult, Metric, ProbeComparison, ProbeOutput, RevisionInfo, Role, RunPlan,
                             RunResult, Status)
from harness.verdict_stats import Floor, Kind, Verdict

# Where a comparison's note names the metrics that changed without deciding (recorded in
# `ProbeComparison.changed_not_deciding`): a report that words them itself cuts the note here.
CHANGED_NOT_DECIDING = "; changed, not deciding: "


def floor_for(params: dict[str, Any], metric: str) -> Floor:
    """A noisy metric's practical floor: its own `floors` entry, else the suite's `floor_abs` /
    `floor_rel`, which apply to every deciding noisy metric (not the primary alone)."""
    per_metric = params["floors"].get(metric)
    if per_metric is not None:
        return Floor(absolute=per_metric.get("absolute", 0.0), relative=per_metric.get("relative", 0.0))
    return Floor(absolute=params["floor_abs"], relative=params["floor_rel"])


def compare_metrics(pairs: Sequence[tuple[Metric, Metric | None]], params: dict[str, Any],
                    deciding: list[str], look: LookState | None = None) -> dict[str, stats.Comparison]:
    """One comparison per metric both sides measured: exact ones by equality, noisy ones
    against their floor (paired when both sides are paired and equally long). The deciding
    noisy metrics share the suite's alpha (Bonferroni: alpha / their number), so a verdict any
    one of them can turn *different* is still wrong at most alpha of the time; samples measured
    at a look of a sequential comparison (harness/sequential.py) get that look's share of it,
    and intervals of that confidence."""
    alpha = look.alpha(params["alpha"]) if look else params["alpha"]
    boot = stats.Bootstrap(confidence=1 - alpha if look else stats.Bootstrap.confidence,
                           seed=params["bootstrap_seed"])
    noisy = [m.name for m, _ in pairs if m.name in deciding and m.kind == Kind.NOISY]
    comparisons: dict[str, stats.Comparison] = {}
    for m, other in pairs:
        if other is None or not m.values or not other.values:
            continue
        if m.kind == Kind.EXACT and other.kind == Kind.EXACT:
            comparisons[m.name] = stats.compare_exact(m.values, other.values)
        else:
            paired = m.paired and other.paired and len(m.values) == len(other.values)
            floor, share = floor_for(params, m.name), alpha / (len(noisy) if m.name in noisy else 1)
            if paired:
                # A metric read by its mean (KL, k3: a change can sit in a few prompts) is judged
                # by the mean of its differences, the number its row shows.
                center = "mean" if m.headline == other.headline == "mean" else "median"
                comparisons[m.name] = stats.compare_paired(m.values, other.values, floor, share, boot, center=center)
            else:
                comparisons[m.name] = stats.compare_noisy(m.values, other.values, floor, share, boot)
    return comparisons


def compare_cells(config: str, probe: str, base: CellResult | None, cand: CellResult | None,
                  params: dict[str, Any], reference: Reference | None = None) -> ProbeComparison:
    """`reference`: for a probe that compares a configuration with another of the same revision
    (`ProbeKind.versus`), that configuration's cells."""
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
            if status == Status.NOT_APPLICABLE and len(bad) == 1:
                return ProbeComparison(config, probe, Verdict.DIFFERENT, note=capability_change(bad[0], reasons))
            return ProbeComparison(config, probe, Verdict(status.value), note=reasons)
    judge = PROBES[probe].judge
    judged = {role: facts for role, facts in
              ((c.role.value, judge(c.facts, params)) for c in (base, cand)) if facts} if judge else {}
    derived = derive(probe, base, cand, params, reference)
    pairs, across_facts = list(derived.metrics), derived.facts
    for role, facts in (("base", derived.base_facts), ("candidate", across_facts)):
        if facts:
            judged[role] = {**judged.get(role, {}), **facts}
    unknown = PROBES[probe].undeclared(ProbeOutput((), tuple(m for m, _ in pairs),
                                                    {k: v for facts in judged.values() for k, v in facts.items()}),
                                       derived=True)
    if unknown:
        return ProbeComparison(config, probe, Verdict.ERROR,
                               note=f"undeclared figures of {probe}: {', '.join(unknown)}")
    own_metrics = PROBES[probe].across is None and PROBES[probe].versus is None
    reported = [(m.name, m.kind) for m, _ in pairs]
    if own_metrics:  # a metric only the candidate reports can decide too (and is one-sided)
        reported += [(m.name, m.kind) for m in cand.metrics if m.name not in dict(reported)]
    named = deciding_metrics(params, reported)
    looks = [LookState.from_facts(c.facts) for c in (base, cand)]
    if looks[0] != looks[1]:
        return ProbeComparison(config, probe, Verdict.ERROR, note=(
            f"not comparable: the sides' samples are of different looks ({', '.join(_look_text(l) for l in looks)})"))
    comparisons = compare_metrics(pairs, params, named, looks[0])
    comparisons = in_prompts(comparisons, base, cand)
    deciding = tuple(n for n in named if n in comparisons)
    # A figure that does not decide and changed: an exact one the suite's verdict_metrics left
    # out, or a noisy one beside the primary (another concurrency level, per-request tok/s). It
    # is named beside the verdict, so no verdict stands bare next to a changed figure.
    also_changed = tuple(n for n, c in comparisons.items() if n not in deciding and c.verdict == Verdict.DIFFERENT)
    changed_note = (CHANGED_NOT_DECIDING + "; ".join(
        f"{n}: {comparisons[n].note}" for n in also_changed)) if also_changed else ""
    # Every comparison from here on records what was compared, whatever its verdict.
    recorded = functools.partial(ProbeComparison, config, probe, metrics=comparisons, judged=judged,
                                 changed_not_deciding=also_changed, deciding=deciding)
    if not deciding:
        # Nothing that decides was compared (a cross-revision probe's sides that cannot be, a
        # verdict_metrics naming none of the metrics both cells hold): no verdict, and never
        # one that exits 0 (combine_verdicts of nothing reads *unknown*).
        why = across_facts.get("not_comparable") or (
            f"no deciding metric was measured on both sides (deciding: {', '.join(named) or 'none'}; "
            f"compared: {', '.join(comparisons) or 'none'})")
        return recorded(Verdict.ERROR, note=why + changed_note)
    verdict = stats.combine_verdicts(comparisons[n].verdict for n in deciding)
    note = "; ".join(f"{n}: {comparisons[n].note}" for n in deciding) + changed_note
    if looks[0] is not None:
        note = f"{_look_text(looks[0])}: {note}{_ruled_out(looks[0], comparisons, deciding, verdict)}"
    decided_by = next((n for n in deciding if comparisons[n].verdict == verdict), None)
    lopsided = one_sided(pairs, cand, named, own_metrics)
    if lopsided and verdict != Verdict.DIFFERENT:
        # A deciding metric one side reports and the other does not: not a match, whatever the rest say.
        return recorded(Verdict.ERROR, note="; ".join(lopsided) + "; " + note, decided_by=decided_by)
    if derived.not_same and verdict == Verdict.SAME:
        # Equal metrics that show the same defect on both sides are no match (as the same finding
        # on both sides is not): the row says what both do.
        return recorded(Verdict.ERROR, note=f"{derived.not_same}; {note}")
    # Another program's work on a side's GPUs during a noisy measurement (harness/runner.py): a
    # finding on the row. Its noisy figures measured the runner too, so they decide nothing; a
    # deciding exact metric that differs still does (load does not move an exact figure).
    foreign = [f"{n}: {why}" for n in sides if (why := runner.foreign_text(sides[n].facts))]
    if foreign and any(comparisons[n].kind == Kind.NOISY for n in deciding):
        exact = [n for n in deciding if comparisons[n].kind == Kind.EXACT and comparisons[n].verdict == Verdict.DIFFERENT]
        said = "finding: " + "; ".join(foreign)
        if not exact:
            return recorded(Verdict.ERROR, note=f"{said}; not judged: {note}")
        note = f"{said}; {note}"
        decided_by = exact[0]
    # A probe's own vacuity (too few cache hits) and the pipeline's (a demanded path not shown
    # to have run, harness/path_proof.py): never a *same*.
    vacuous = [f"{n}: {why}" for n in sides
               for why in (sides[n].facts.get("vacuous"), path_proof.unproven(sides[n].facts)) if why]
    if vacuous and verdict != Verdict.DIFFERENT:
        # Too few samples to vouch for a match; a difference among those there are still counts.
        return recorded(Verdict.ERROR, note="vacuous: " + "; ".join(vacuous) + changed_note)
    if (policy := policy_change(base, cand)):
        note = f"{policy}; {note}"
    proofs = [f"{n} {why}" for n in sides if (why := path_proof.shown(sides[n].facts))]
    if proofs:  # what showed the path the configuration names ran, beside the verdict
        note += "; path shown: " + "; ".join(proofs)
    return recorded(verdict, note=note, decided_by=decided_by)


def policy_change(base: CellResult, cand: CellResult) -> str:
    """The sides' prefix-cache policies as their servers reported them (a cache probe's
    `cache_policy` fact), where they differ: a release's new default moves exact cached_tokens
    by design, so the row names it rather than reading as a regression by itself."""
    policies = [c.facts.get("cache_policy") for c in (base, cand)]
    if not any(policies) or policies[0] == policies[1]:
        return ""
    base_policy, cand_policy = (p or "not reported" for p in policies)
    return (f"the prefix-cache policy changed between the sides (base {base_policy}; candidate {cand_policy}): "
            f"a difference in what hits reuse may be that default, not a regression")


def in_prompts(comparisons: dict[str, stats.Comparison], base: CellResult, cand: CellResult
               ) -> dict[str, stats.Comparison]:
    """A cache probe's k3 has a value per hit, not per prompt: an *unknown*'s sample count is
    said in prompts too, at the lower of the two sides' observed hit fractions, since prompts are
    what a suite sets."""
    fractions = [c.facts["hit_fraction"] for c in (base, cand) if c.facts.get("hit_fraction")]
    fraction = min(fractions) if fractions else None
    k3 = comparisons.get("k3")
    if not fraction or k3 is None or k3.needed is None or "hit_lengths" not in base.facts:
        return comparisons
    prompts = math.ceil(k3.needed / fraction)
    note = f"{k3.note} (k3 counts hits: ≈ {prompts} prompts at a hit fraction of {fraction:.0%})"
    return {**comparisons, "k3": dataclasses.replace(k3, note=note)}


def _look_text(look: LookState | None) -> str:
    if look is None:
        return "one look"
    earlier = "".join(f", look {l.look} ({l.samples} per side) {l.verdict}" for l in look.earlier)
    return f"look {look.look} of at most {look.max_looks}{earlier}"


def _ruled_out(look: LookState, comparisons: dict[str, stats.Comparison], deciding: tuple[str, ...],
               verdict: Verdict) -> str:
    """What an *unknown* that no further look will resolve still says: per undecided noisy
    metric, the effects its interval rules out."""
    if verdict != Verdict.UNKNOWN or not look.last:
        return ""
    spans = [f"{n} beyond [{c.ci[0]:+.3g}, {c.ci[1]:+.3g}] (floor ±{c.floor:.3g})"
             for n in deciding if (c := comparisons[n]).verdict == Verdict.UNKNOWN and c.ci]
    why = look.stopped or "the last look"
    return f"; undecided after {why}: the samples rule out effects {'; '.join(spans)}" if spans else ""


def metric_pairs(probe: str, base: CellResult, cand: CellResult, params: dict[str, Any],
                 reference: Reference | None = None) -> tuple[list[tuple[Metric, Metric | None]], dict[str, Any]]:
    """The (base, candidate) metrics to compare: each cell's own, by name; for a cross-revision
    probe (`ProbeKind.across`), those it derives from both sides' samples, with its facts about
    the pair (shown with the candidate's facts); for a probe against a reference configuration
    (`ProbeKind.versus`), those it derives from these cells and the reference's."""
    derived = derive(probe, base, cand, params, reference)
    return list(derived.metrics), derived.facts


def derive(probe: str, base: CellResult, cand: CellResult, params: dict[str, Any],
           reference: Reference | None = None) -> Across:
    """What metric_pairs returns, with what a derived comparison adds (the base's facts, why it
    may not read *same*)."""
    kind = PROBES[probe]
    if kind.versus is not None or kind.across is not None:
        derived = (kind.versus(base, cand, reference, params) if kind.versus is not None
                   else kind.across(base, cand, params) if kind.across is not None else Across(()))
        return dataclasses.replace(derived, metrics=(*derived.metrics, *_counter_pairs(base, cand)))
    # The candidate may lack a base metric (None: one_sided names it).
    return Across(tuple((m, cand.metric(m.name)) for m in base.metrics))


def _counter_pairs(base: CellResult, cand: CellResult) -> tuple[tuple[Metric, Metric | None], ...]:
    """A derived comparison's own cells' exact path counters (harness/path_proof.exact_metrics),
    which no probe derives: paired by name, a side without one None (one_sided names it)."""
    names = [m.name for c in (base, cand) for m in c.metrics if m.name.startswith(path_proof.METRIC_PREFIX)]
    pairs: list[tuple[Metric, Metric | None]] = []
    for name in dict.fromkeys(names):
        b, c = base.metric(name), cand.metric(name)
        if b is None and c is not None:
            b = dataclasses.replace(c, values=())
        if b is not None:
            pairs.append((b, c))
    return tuple(pairs)


def reference_of(config: str, probe: str, cells: Mapping[tuple[str, str, Role], CellResult],
                 params: dict[str, Any]) -> Reference | None:
    """The reference configuration's cells for (`config`, `probe`), from a run's `cells` by
    (configuration, probe, role): None where the probe compares no configuration with another,
    or `config` has no reference."""
    kind = PROBES.get(probe)
    if kind is None or kind.reference is None:
        return None
    configs = list(dict.fromkeys(c for c, p, _ in cells if p == probe))
    name = kind.reference(config, params, configs)
    if name is None:
        return None
    return Reference(name, cells.get((name, probe, Role.BASE)), cells.get((name, probe, Role.CANDIDATE)))


def one_sided(pairs: Sequence[tuple[Metric, Metric | None]], cand: CellResult, deciding: list[str],
              cand_metrics_count: bool) -> list[str]:
    """The deciding metrics one side measured (with values) and the other did not, in words;
    `cand_metrics_count`: the candidate cell's own metrics are compared (not a cross-revision
    probe's derived ones), so one only it has counts too."""
    out = [f"{m.name} measured on the {'base' if m.values else 'candidate'} only" for m, other in pairs
           if m.name in deciding and bool(m.values) != bool(other is not None and other.values)]
    if cand_metrics_count:
        known = {m.name for m, _ in pairs}
        out += [f"{m.name} measured on the candidate only" for m in cand.metrics
                if m.name in deciding and m.name not in known and m.values]
    return out


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


def capability_change(refusing: str, reasons: str) -> str:
    """A configuration one side serves and the other refuses (a `not supported` at launch, a flag
    its `--help` lacks, a probe it cannot answer): a change between the revisions, never the
    neutral *n/a* both sides refusing reads, in words naming what was lost or gained."""
    if refusing == "candidate":
        return f"capability lost: the base serves this, the candidate refuses it ({reasons})"
    return f"capability gained: the candidate serves this, the base refused it ({reasons})"


def compare_run(cells: Iterable[CellResult], probe_params: dict[str, dict[str, Any]],
                order: Iterable[tuple[str, str]]) -> tuple[ProbeComparison, ...]:
    """`probe_params`: the suite's validated parameters per probe (Suite.probe_params); a
    probe the suite does not mention is judged with its defaults."""
    by_key = {(c.config, c.probe, c.role): c for c in cells}
    return tuple(compare_pair(config, probe, by_key.get((config, probe, Role.BASE)),
                              by_key.get((config, probe, Role.CANDIDATE)), probe_params, by_key)
                 for config, probe in order)


def compare_pair(config: str, probe: str, base: CellResult | None, cand: CellResult | None,
                 probe_params: dict[str, dict[str, Any]],
                 cells: Mapping[tuple[str, str, Role], CellResult] | None = None) -> ProbeComparison:
    """compare_cells under the suite's parameters for `probe` (its defaults where the suite
    names none); `cells`: the run's cells by (configuration, probe, role), where a probe's
    comparison reads a reference configuration's too (`reference_of`)."""
    if probe not in PROBES:
        return ProbeComparison(config, probe, Verdict.ERROR, note=f"unknown probe {probe!r}")
    params = probe_params.get(probe) or PROBES[probe].defaults()
    reference = reference_of(config, probe, cells or {}, params)
    comp = compare_cells(config, probe, base, cand, params, reference)
    if comp.verdict != Verdict.DIFFERENT or base is None or cand is None:
        return comp
    # A *different* pair gets its smallest request (harness/reproducer.py), from the samples.
    pairs = metric_pairs(probe, base, cand, params, reference)[0] if comp.metrics else []
    return dataclasses.replace(comp, reproducer=reproducer(comp, base, cand, pairs))


def check_verdicts(result: RunResult, where: Path, strict: bool) -> None:
    """CorruptResult (exit 2) naming every row whose stored verdict its samples do not give:
    no stored verdict is trusted. A file that cannot be judged again fails too where `strict`
    (a verdict is asked of it), else a line on stderr says its verdicts are as stored."""
    missing = sorted({c.probe for c in result.comparisons if c.probe not in PROBES})
    if missing:  # a plug-in's run read where the plug-in is not installed: its rows as stored
        said = (f"probe{'s' if len(missing) > 1 else ''} {', '.join(missing)} {'are' if len(missing) > 1 else 'is'} "
                f"not installed (a plug-in: install the package whose `detcheck.probes` entry point provides it)")
        if strict:
            raise CorruptResult(f"{where}: {said}: its rows cannot be judged again")
        print(f"detcheck: {where}: {said}: its rows are shown as stored, not judged again", file=sys.stderr)
    rows = rejudged_rows(result)
    if not rows:
        return
    if rows[0].startswith("the file records no judging"):
        if strict:
            raise CorruptResult(f"{where}: {rows[0]}; measure it again with this version")
        print(f"detcheck: {where}: {rows[0]}: shown as stored", file=sys.stderr)
        return
    raise CorruptResult(f"{where}: results file altered, or written by another version: "
                        f"{'; '.join(rows)}")


def rejudged_rows(result: RunResult) -> list[str]:
    """Every row whose stored verdict, or the changed figures it names as not deciding, the stored
    samples, judged again under the stored parameters (the plan's, `RunResult.judging_params`),
    do not give, in words; a file that cannot be judged again (written before its parameters
    were recorded) is one line that says why. Empty: every stored row is what its samples give.
    A record whose cells were removed (`metadata.trimmed`) has nothing to judge; one that says
    so and still holds cells is judged like any other."""
    params = result.judging_params()
    if "trimmed" in result.metadata and not result.cells:
        return []  # a kept record without cells: nothing to judge, and report.md says so
    if params is None:
        return [f"the file records no judging parameters (written by harness "
                f"{result.metadata.get('harness_version', '?')}): its verdicts cannot be judged again"]
    # A parameter that was not set is stored as null: validated again as not given.
    validated = {probe: PROBES[probe].validate({k: v for k, v in raw.items() if v is not None},
                                               f"plan.probe_params.{probe}")
                 for probe, raw in params.items() if probe in PROBES and isinstance(raw, dict)}
    fresh = compare_run(result.cells, validated, [(c.config, c.probe) for c in result.comparisons])
    return [f"{stored.config} / {stored.probe}: stored {_judgement(stored, again)}, its samples give "
            f"{_judgement(again, stored)}"
            for stored, again in zip(result.comparisons, fresh)
            if stored.probe in PROBES and _judged(stored) != _judged(again)]  # a probe not installed: check_verdicts


def _judged(comp: ProbeComparison) -> tuple[Verdict, tuple[str, ...]]:
    """What a row says and a stored file could misstate: its verdict and which changed figures
    did not decide it (a row that hides them is a bare pass beside a change)."""
    return comp.verdict, tuple(comp.changed_not_deciding)


def _judgement(comp: ProbeComparison, other: ProbeComparison) -> str:
    """A row's verdict in words, with its changed-not-deciding figures where they differ from
    `other`'s."""
    if tuple(comp.changed_not_deciding) == tuple(other.changed_not_deciding):
        return comp.verdict.value
    return f"{comp.verdict.value} (changed, not deciding: {', '.join(comp.changed_not_deciding) or 'none'})"


def overall(comparisons: Iterable[ProbeComparison]) -> Verdict:
    """The run's verdict: different beats error beats unknown beats same; n/a is neutral, and
    a run where nothing was compared is never a pass: "nothing measured"."""
    verdicts = {c.verdict for c in comparisons}
    for v in (Verdict.DIFFERENT, Verdict.ERROR, Verdict.UNKNOWN, Verdict.SAME):
        if v in verdicts:
            return v
    return Verdict.NOTHING_MEASURED


# The significance an *unknown* row must reach to lean to *different* (`leaning`).
LEANING_ALPHA = 0.05


def leaning(result: RunResult) -> list[str]:
    """The *unknown* rows whose data already lean to *different*: a deciding noisy metric whose
    change is significant (p below LEANING_ALPHA, or the probe's alpha where that is stricter)
    and whose estimate lies beyond the floor, undecided only because its interval still reaches
    inside the floor. Such a row is no pass (a large effect must never exit 0 as "unknown"); an
    A/A row leans so at most 5% of the time, whatever alpha a suite chose to decide quickly."""
    probe_params: Mapping[str, Any] = result.judging_params() or {}
    out = []
    for comp in result.comparisons:
        if comp.verdict != Verdict.UNKNOWN:
            continue
        params = probe_params.get(comp.probe) or (PROBES[comp.probe].defaults() if comp.probe in PROBES else {})
        alpha = min(float(params.get("alpha") or LEANING_ALPHA), LEANING_ALPHA)
        for name in comp.deciding or ((comp.decided_by,) if comp.decided_by else ()):
            m = comp.metrics.get(name)
            if (m is not None and m.verdict == Verdict.UNKNOWN and m.p is not None and m.p < alpha
                    and abs(m.effect) > m.floor):
                out.append(f"{comp.config} / {comp.probe}: {name} moved {m.effect:+.3g} (p={m.p:.3g}), "
                           f"beyond its floor ±{m.floor:.3g}")
                break
    return out


def compare_runs(base_run: RunResult, cand_run: RunResult, side: Role,
                 probe_params: dict, command: str = "") -> RunResult:
    """A RunResult whose base cells are `base_run`'s `side` cells, candidate cells `cand_run`'s.
    Its plan is both runs' `side` cells as they planned them, complete where both are (no plan
    where either has none: what it set out to compare is unknown, never a pass)."""
    base = [c.with_role(Role.BASE) for c in base_run.cells if c.role == side]
    cand = [c.with_role(Role.CANDIDATE) for c in cand_run.cells if c.role == side]
    planned = [(config, probe, role) for run, role in ((base_run, Role.BASE), (cand_run, Role.CANDIDATE))
               for config, probe, planned_side in (run.plan.cells if run.plan is not None else ()) if planned_side == side]
    plan = None if base_run.plan is None or cand_run.plan is None else RunPlan(
        uuid.uuid4().hex, tuple(planned), probe_params, complete=base_run.plan.complete and cand_run.plan.complete)
    order = list(dict.fromkeys([*((config, probe) for config, probe, _ in planned),
                                *((c.config, c.probe) for c in (*base, *cand))]))
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
        plan=plan,
    )


def _comparable(comp: ProbeComparison, base: CellResult | None, cand: CellResult | None) -> ProbeComparison:
    """asv's `x`: a pair measured on different configurations or workloads is not a comparison.
    A noisy metric measured in two runs (other times, other load) is shown but decides nothing:
    where a deciding one is noisy, the verdict is what the deciding exact metrics say if one of
    them differs (a changed exact figure is never hidden behind a noisy one), else *unknown*."""
    if base is None or cand is None:
        return comp
    for what, a, b in (("server configuration", base.config_fingerprint, cand.config_fingerprint),
                       ("workload", base.workload_fingerprint, cand.workload_fingerprint)):
        if a != b:
            return ProbeComparison(comp.config, comp.probe, Verdict.ERROR,
                                   note=f"not comparable: {what} differs ({a} vs {b})")
    if comp.verdict not in (Verdict.SAME, Verdict.DIFFERENT):
        return comp
    deciding = comp.deciding  # as compare_cells judged them: the probe's declaration, applied once
    noisy = [n for n in deciding if comp.metrics[n].kind == Kind.NOISY]
    if not noisy:
        return comp
    exact_change = next((n for n in deciding if n not in noisy and comp.metrics[n].verdict == Verdict.DIFFERENT),
                        None)
    when = " and ".join(str(c.metadata.get("finished_at") or "?") for c in (base, cand))
    unjudged = (f"{', '.join(noisy)} {'is' if len(noisy) == 1 else 'are'} noisy and "
                f"{'was' if len(noisy) == 1 else 'were'} measured in two runs ({when}): shown, not judged")
    if exact_change is not None:
        return dataclasses.replace(comp, verdict=Verdict.DIFFERENT, decided_by=exact_change,
                                   note=f"{exact_change} (exact) differs; {unjudged}; {comp.note}")
    return dataclasses.replace(comp, verdict=Verdict.UNKNOWN, decided_by=noisy[0], note=(
        f"{unjudged} (would read {comp.verdict}); measure both in one run; {comp.note}"))
