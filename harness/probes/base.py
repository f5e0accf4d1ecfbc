"""The one shape every probe has: run(ctx) -> ProbeOutput, with its parameters declared.

A probe module registers its ProbeKind with `register`; harness.probes imports every module
of the package, so adding a probe is adding one file (and naming it in a suite).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Callable, Sequence

from harness import verdict_stats
from harness.client import SGLangClient
from harness.errors import UsageError
from harness.params import Param, ParamRole, validate_params
from harness.suite import ServerConfig, WorkloadSpec
from harness.reproducer import Form
from harness.results import CellResult, Metric, ProbeComparison, ProbeOutput, Reproducer, Request, Role
from harness.sequential import WORKLOAD_GROWTH, look_alpha
from harness.server import ServerProcess
from harness.verdict_stats import Kind
from harness.workloads import Workload


@dataclass
class ProbeContext:
    client: SGLangClient
    server: ServerProcess
    config: ServerConfig
    workload: Workload
    params: dict[str, Any]  # validated: every declared parameter, defaults filled
    server_info: dict[str, Any]
    # advance(done, total): drives the progress bar; probes call it as requests finish.
    advance: Callable[[int, int], None] = field(default=lambda done, total: None)
    # An interleaved probe's share of its `repeats`: the pipeline runs one round at a time on
    # each side in turn (None: every round, 0..repeats-1).
    rounds: tuple[int, ...] | None = None

    @property
    def deterministic(self) -> bool:
        return self.config.features.deterministic

    def param(self, name: str) -> Any:
        """A declared parameter's value (the suite's, else its declared default)."""
        return self.params[name]

    def repeat_indices(self) -> tuple[int, ...]:
        """The rounds this call measures: `rounds` when the pipeline interleaves, else all."""
        return self.rounds if self.rounds is not None else tuple(range(self.param("repeats")))


@dataclass(frozen=True)
class Across:
    """What a probe that compares the two revisions' outputs with each other (not each with
    itself) derives from both sides' samples at compare time: (base, candidate) metric pairs,
    judged like any cell's metrics, and facts about the pair (shown with the candidate's)."""

    metrics: tuple[tuple[Metric, Metric | None], ...]
    facts: dict[str, Any] = field(default_factory=dict)
    # Facts about the base side alone (a probe that compares each side with something of its
    # own revision: what the base was found to do), shown with the base's facts.
    base_facts: dict[str, Any] = field(default_factory=dict)
    # Why the pair may not read *same* whatever its metrics say (both sides fail a check alike:
    # equal metrics, the same defect): the comparison then reads *error* with this reason.
    not_same: str = ""


@dataclass(frozen=True)
class Reference:
    """The cells a configuration is compared with inside each revision (`ProbeKind.versus`): the
    reference configuration's name and its base and candidate cells (None: not in the run)."""

    config: str
    base: CellResult | None
    candidate: CellResult | None


@dataclass(frozen=True)
class Reproduction:
    """How a probe's *different* comparison is shown by requests a reviewer can post: built from
    the two cells' stored samples with harness/reproducer.py's pieces, next to what the probe
    measures; harness/reproduce.py picks the hook a comparison gets (a probe with none: the
    located difference in words)."""

    # An exact verdict: the smallest request(s) the samples prove still differ (None: they locate
    # none). A probe with it also gets a noisy verdict's largest effect (the hooks below).
    exact: Callable[[ProbeComparison, CellResult, CellResult], Reproducer | None] | None = None
    # A noisy verdict paired by prompt: the requests of prompt i (the largest paired effect, `sign`
    # its direction) and the Form that reads them; None: the prompt named, no request.
    paired_effect: Callable[[ProbeComparison, CellResult, int, float],
                            tuple[tuple[Request, ...], Form | None]] | None = None
    # A noisy verdict over each side's own samples (unpaired): from the deciding (base, candidate)
    # metrics and the effect's sign, the sample it points to, its requests whole (None: located).
    unpaired_effect: Callable[[ProbeComparison, CellResult, CellResult, tuple[Metric, Metric], float],
                              Reproducer | None] | None = None
    # A difference no request shows (a throughput level: its clients share every batch): the
    # measurement to run again, whatever the verdict's kind.
    measurement: Callable[[ProbeComparison, CellResult, CellResult], Reproducer] | None = None


@dataclass(frozen=True)
class ValueIndex:
    """What a metric's values are, one for one, in a report's words: `noun` counts them
    ("scored token"), `place(samples, i)` names value i from a cell's samples ("prompt 0, scored
    token 1")."""

    noun: str
    place: Callable[[Sequence[dict[str, Any]], int], str]
    # What the two sides' values are where they are not each side's own measurement (a
    # cross-revision metric's base side is the base against its own rerun), shown by its name.
    sides: str = ""


@dataclass(frozen=True)
class PlannedMetric:
    """A metric as a suite plans it, before anything runs: its kind and, for a noisy one, the
    samples per side (`per_unit` × the value of the parameter `key`) its rank test will get."""

    name: str
    kind: Kind
    paired: bool = False
    key: str = ""  # the parameter the sample count scales with (repeats, prompts)
    per_unit: int = 1
    # What one sample is where it is not one per unit of `key`: "hits" (a cache probe's k3 has a
    # value per prompt that hit, which no plan can know): `samples` is then an upper bound.
    counts: str = ""

    def samples(self, params: dict[str, Any], workload: WorkloadSpec, look: int = 1) -> int:
        """Per side at look `look` of a sequential comparison: rounds add `repeats` per look, a
        workload's prompts grow by WORKLOAD_GROWTH per look."""
        units = _param_or_workload(params, workload, self.key)
        grown = units * look if self.key == "repeats" else units * WORKLOAD_GROWTH ** (look - 1)
        return self.per_unit * grown


def _param_or_workload(params: dict[str, Any], workload: WorkloadSpec, key: str) -> int:
    return int(params[key]) if params.get(key) is not None else int(getattr(workload, key))


def deciding_metrics(params: dict[str, Any], metrics: Sequence[tuple[str, Kind]]) -> list[str]:
    """The metrics whose verdicts decide, of `metrics` ((name, kind), primary first): the
    suite's `verdict_metrics` when it names them (an explicit narrowing), else the primary and
    every exact metric, so a changed exact figure is never outvoted by the first metric."""
    if params["verdict_metrics"]:
        return list(params["verdict_metrics"])
    return [name for i, (name, kind) in enumerate(metrics) if i == 0 or kind == Kind.EXACT]


class FigureRole(str, Enum):
    """What a figure a probe records is to the verdict."""

    # A metric: compared base vs candidate (exact by equality, noisy against its floor); it
    # decides unless a suite's verdict_metrics narrows it out, and then shows as "changed, not
    # deciding" where it changed.
    METRIC = "metric"
    # A statistic of metric `of`'s values (its mean, p99, a share over tau): it changes only where
    # `of` does, which decides.
    SUMMARY = "summary"
    # Where metric `of` first differs (a prompt, a position): the row's words; `of` compares it.
    LOCATOR = "locator"
    # A parameter's value as the cell was measured or judged (tau, a gate's threshold).
    PARAMETER = "parameter"
    # What the run asked for or how it gathered the samples, not what a server served (the
    # workload's size, how rounds were placed), or a status the verdict reads by itself (vacuous,
    # not comparable): `of` says which.
    INPUT = "input"
    # Served, recorded to be read, never to decide: `of` says why it cannot, and `aa` names the
    # A/A test that shows it varying between two servers of the same revision (issue 44: a
    # figure stays descriptive only with that measured reason; docs/PROBES.md lists those
    # still without one).
    DESCRIPTIVE = "descriptive"


@dataclass(frozen=True)
class Figure:
    """One figure a probe records: a metric's or a fact's name (a shell pattern for a family, as
    `tok_s_c*_median`), its role, and for a summary or locator the metric it belongs to, for a
    descriptive figure why it cannot decide."""

    name: str
    role: FigureRole
    of: str = ""
    aa: str = ""  # a descriptive figure's A/A test (tests/<file>.py::<test>), where one exists

    def __post_init__(self) -> None:
        if self.role in (FigureRole.SUMMARY, FigureRole.LOCATOR, FigureRole.DESCRIPTIVE, FigureRole.INPUT) and not self.of:
            raise ValueError(f"figure {self.name!r} ({self.role.value}) must say what it is of, or why")

    def names(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.name)


def metric(name: str) -> Figure:
    return Figure(name, FigureRole.METRIC)


def summary(of: str, *names: str) -> tuple[Figure, ...]:
    return tuple(Figure(n, FigureRole.SUMMARY, of) for n in names)


def locator(of: str, *names: str) -> tuple[Figure, ...]:
    return tuple(Figure(n, FigureRole.LOCATOR, of) for n in names)


def parameter(*names: str) -> tuple[Figure, ...]:
    return tuple(Figure(n, FigureRole.PARAMETER, "the parameter") for n in names)


def descriptive(why: str, *names: str, aa: str = "") -> tuple[Figure, ...]:
    return tuple(Figure(n, FigureRole.DESCRIPTIVE, why, aa) for n in names)


def given(what: str, *names: str) -> tuple[Figure, ...]:
    return tuple(Figure(n, FigureRole.INPUT, what) for n in names)


# What the pipeline adds to every probe's facts: how an interleaved probe's rounds were placed,
# and the looks of a sequential comparison. They say how the samples were gathered, not what a
# server served.
PIPELINE_FIGURES = (
    *given("how the rounds were placed between the sides, not what was served",
           "placement", "first_side", "placement_seed"),
    *given("how many looks measured the samples; the verdict is judged at the last of them", "sequential"),
    # harness/path_proof.py: the counters' growth over the probe; its `vacuous` (a demanded
    # path not shown to have run) the verdict reads, as it reads a probe's own.
    *descriptive("which paths ran: CUDA-graph passes per mode count batches, which arrival times set; an unmet "
                 "demand makes the cell vacuous (error unless different); its exact counters decide as the "
                 "path_* metrics", "path"),
    # harness/path_proof.exact_metrics: under deterministic inference, no pressure, nothing noisy.
    metric("path_cached_tokens"), metric("path_decoded_tokens"), metric("path_verify_calls"),
    # harness/runner.py: another program's compute processes on the server's GPUs around a noisy
    # measurement; compare.py reads them as a finding on the row.
    *given("foreign GPU processes seen before or after a noisy measurement: the row's noisy figures "
           "are not judged (a finding)", "runner_foreign"),
)


def undeclared(figures: Sequence[Figure], metrics: Sequence[str], facts: Sequence[str],
               metric_roles: tuple[FigureRole, ...] = (FigureRole.METRIC,)) -> list[str]:
    """The names among `metrics` not declared in one of `metric_roles` (a compared metric: as a
    metric), and among `facts` not declared at all (a fact cannot be a metric: it is not
    compared), in words."""
    declared = (*figures, *PIPELINE_FIGURES)
    out = [f"metric {m}" for m in metrics
           if not any(f.names(m) and f.role in metric_roles for f in declared)]
    out += [f"fact {k}" for k in facts
            if not any(f.names(k) and f.role != FigureRole.METRIC for f in declared)]
    return out


@dataclass(frozen=True)
class ProbeKind:
    name: str
    run: Callable[[ProbeContext], ProbeOutput]
    summary: str
    params: tuple[Param, ...] = ()
    # Server flags the probe needs on top of the configuration's (the union over a
    # configuration's probes is passed at launch, so one server serves them all).
    server_args: tuple[str, ...] = ()
    # One line for a table cell, from a cell's facts (with what `judge` added) and primary metric.
    describe: Callable[[dict[str, Any], Metric | None], str] | None = None
    # Facts that depend on JUDGED parameters (e.g. a gate), derived from a measured cell's facts
    # when it is compared, so a stored cell is judged again under the suite's current values.
    judge: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None
    # Draws the (configuration, probe) pair's figure under out_dir; returns its path relative
    # to out_dir. matplotlib is imported inside, only when a report draws.
    plot: Callable[[str, dict[Role, CellResult], Path], str] | None = None
    # A noisy probe measured in rounds (`repeats`) that the pipeline interleaves between the
    # two sides of a configuration (A B B A …, both servers up): `run` measures the rounds in
    # `ctx.rounds`, and `merge` makes one side's output of its rounds' outputs, in order.
    merge: Callable[[list[ProbeOutput]], ProbeOutput] | None = None
    # A cross-revision probe: each side's cell holds what its server served, and the metrics
    # compared are derived from both sides' samples (base cell, candidate cell, judged
    # parameters) instead of being each cell's own. The metrics depend on the samples alone (the
    # parameters shape only its facts): a report derives them again under the probe's defaults.
    across: Callable[[CellResult, CellResult, dict[str, Any]], Across] | None = None
    # The metrics the probe will report under these parameters, primary first, on a
    # configuration that is (or is not) deterministic: what the suite's design check reads.
    planned: Callable[[dict[str, Any], WorkloadSpec, bool], tuple[PlannedMetric, ...]] | None = None
    # The pair's figure as a few lines of Markdown (a Unicode sparkline, a small table), from the
    # measured cells of both sides: what a report pasted into a PR still shows once its image
    # links break. Pure text, no matplotlib; the report puts it under the pair's name.
    text_figure: Callable[[dict[Role, CellResult]], list[str]] | None = None
    # What metric `name`'s values are, for a report's words ("prompt 3, scored token 12" rather
    # than "value 40"); None (or no hook): prompt i where a cell has one value per prompt, else
    # value i.
    values: Callable[[str], ValueIndex | None] | None = None
    # Every figure the probe records (its cells' metrics and facts, what `judge` and `across`
    # add): a metric, or a fact with its role. The pipeline fails a cell that holds one not
    # declared here, so no figure is recorded that nothing decides without saying why.
    figures: tuple[Figure, ...] = ()
    # A probe that compares a configuration with another configuration of the same revision:
    # `reference(config, params, configs)` names the configuration `config` is compared with
    # (None: none, among `configs`, the configurations that run the probe), and `versus(base,
    # cand, reference, params)` derives the compared metrics from the four cells (reference None:
    # the configuration is no other's, compared across revisions on its own).
    reference: Callable[[str, dict[str, Any], Sequence[str]], str | None] | None = None
    versus: Callable[[CellResult, CellResult, Reference | None, dict[str, Any]], Across] | None = None
    # Checks a suite's use of the probe as a whole (`check_suite(params, configs, where)`, the
    # configurations that run it): UsageError naming what is wrong (a reference not in the suite).
    suite_check: Callable[[dict[str, Any], Sequence[str], str], None] | None = None
    # A *different* comparison's reproducer: the requests that show it (`Reproduction`).
    reproduction: Reproduction | None = None

    @property
    def interleaved(self) -> bool:
        return self.merge is not None

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"probe {self.name!r} declares a parameter twice: {names}")

    def undeclared(self, output: ProbeOutput, derived: bool = False) -> list[str]:
        """The figures of `output` (a cell's; `derived`: what compare time derived, `across` and
        `judge`) this probe does not declare (empty: all are). A cross-revision probe's own
        cells hold metrics that are never compared (only those `across` derives are): they may
        be declared descriptive, or a summary of a derived metric."""
        derives = self.across is not None or self.versus is not None
        own = ((FigureRole.METRIC, FigureRole.DESCRIPTIVE, FigureRole.INPUT, FigureRole.SUMMARY) if derives and not derived
               else (FigureRole.METRIC,))
        return undeclared(self.figures, [m.name for m in output.metrics], list(output.facts), own)

    def validate(self, raw: dict[str, Any], where: str) -> dict[str, Any]:
        """Every parameter, from `raw` (a [probe.<name>] table) or its default; UsageError
        naming `where` and the key for an unknown key or a bad value."""
        return validate_params(self.params, raw, where)

    def check_design(self, params: dict[str, Any], workload: WorkloadSpec, deterministic: bool,
                     where: str) -> None:
        """UsageError when a noisy metric that decides cannot reach its share of `alpha` (alpha /
        the number of deciding noisy metrics, as compare.py judges them) with the samples the
        suite plans (an exact rank test's smallest p: 2/2^n for n pairs, 2/C(2n, n) for n
        against n), naming the key and the smallest value that works."""
        plan = self.planned
        if plan is None:
            return
        planned = plan(params, workload, deterministic)
        self._check_verdict_metrics(params, workload, deterministic, plan, planned, where)
        deciding = set(deciding_metrics(params, [(m.name, m.kind) for m in planned]))
        noisy = [m for m in planned if m.kind == Kind.NOISY and m.name in deciding]
        # compare.py splits alpha among the deciding noisy metrics (Bonferroni), and a sequential
        # comparison's last look spends its share of it on the most samples it will measure
        looks = params["max_looks"]
        alpha = look_alpha(params["alpha"], looks, looks) / max(1, len(noisy))
        for m in noisy:
            n = m.samples(params, workload, looks)
            least = verdict_stats.least_samples(alpha, m.paired)
            if n >= least:
                continue
            lowest_p = verdict_stats.min_wilcoxon_p(n) if m.paired else verdict_stats.min_mann_whitney_p(n, n)
            value = _param_or_workload(params, workload, m.key)
            unit = "pairs" if m.paired else m.counts or "samples per side"
            at_most = f"at most {n} {unit}" if m.counts else f"{n} {unit}"
            parts = [*([f"its share at the last of {looks} looks"] if looks > 1 else []),
                     *([f"over {len(noisy)} deciding noisy metrics"] if len(noisy) > 1 else [])]
            share = f" (the suite alpha {params['alpha']:g}: {', '.join(parts)})" if parts else ""
            least_value = -(-least // m.per_unit)
            least_value = -(-least_value // looks) if m.key == "repeats" else -(-least_value // WORKLOAD_GROWTH ** (looks - 1))
            raise UsageError(
                f"{where}.{m.key}: {value} gives {m.name} {at_most}{f' by look {looks}' if looks > 1 else ''}, "
                f"whose smallest two-sided p is {lowest_p:.3g}: it can never reach alpha {alpha:.3g}{share}, so "
                f"this suite could not tell a change from none; set {m.key} >= {least_value} "
                f"(or raise alpha{' or max_looks' if looks < 8 else ''})")

    def _check_verdict_metrics(self, params: dict[str, Any], workload: WorkloadSpec, deterministic: bool,
                               plan: Callable[[dict[str, Any], WorkloadSpec, bool], tuple[PlannedMetric, ...]],
                               planned: tuple[PlannedMetric, ...], where: str) -> None:
        """UsageError when `verdict_metrics` names a metric the probe never reports (a typo), or
        none of those it reports on this configuration: nothing would decide, and the verdict
        could never say *different*."""
        named = params["verdict_metrics"]
        if not named:
            return
        here = [m.name for m in planned]
        known = dict.fromkeys([*here, *(m.name for m in plan(params, workload, not deterministic))])
        unknown = [n for n in named if n not in known]
        if unknown:
            raise UsageError(f"{where}.verdict_metrics: {', '.join(map(repr, unknown))} "
                             f"{'is not a metric' if len(unknown) == 1 else 'are not metrics'} of {self.name} "
                             f"(its metrics: {', '.join(known)})")
        if not set(named) & set(here):
            raise UsageError(f"{where}.verdict_metrics: {', '.join(named)} "
                             f"{'is' if len(named) == 1 else 'are'} not reported on a "
                             f"{'' if deterministic else 'non-'}deterministic configuration, whose metrics are "
                             f"{', '.join(here)}: nothing would decide the verdict")

    def check_suite(self, params: dict[str, Any], configs: Sequence[str], where: str) -> None:
        """The probe's own check of the suite (`suite_check`), if it has one."""
        if self.suite_check is not None:
            self.suite_check(params, configs, where)

    def defaults(self) -> dict[str, Any]:
        return self.validate({}, f"[probe.{self.name}]")

    def measured(self, params: dict[str, Any]) -> dict[str, Any]:
        """The parameters that change what is measured: a stored cell's key."""
        return self._of_role(params, ParamRole.MEASURED)

    def judged(self, params: dict[str, Any]) -> dict[str, Any]:
        """The parameters that only change how stored samples are judged."""
        return self._of_role(params, ParamRole.JUDGED)

    def _of_role(self, params: dict[str, Any], role: ParamRole) -> dict[str, Any]:
        return {p.name: params[p.name] for p in self.params if p.role == role}


PROBES: dict[str, ProbeKind] = {}


def register(kind: ProbeKind) -> ProbeKind:
    """Add a probe to PROBES (a module's `PROBE = register(ProbeKind(...))`)."""
    if kind.name in PROBES and PROBES[kind.name] is not kind:
        raise UsageError(f"two probes are named {kind.name!r}")
    PROBES[kind.name] = kind
    return kind
