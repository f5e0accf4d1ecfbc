"""The one shape every probe has: run(ctx) -> ProbeOutput, with its parameters declared.

A probe module registers its ProbeKind with `register`; harness.probes imports every module
of the package, so adding a probe is adding one file (and naming it in a suite).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from harness import stats
from harness.client import SGLangClient
from harness.errors import UsageError
from harness.params import Param, ParamRole, validate_params
from harness.plan import ServerConfig, WorkloadSpec
from harness.results import CellResult, Metric, ProbeOutput, Role
from harness.server import ServerProcess
from harness.stats import Kind
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

    metrics: tuple[tuple[Metric, Metric], ...]
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PlannedMetric:
    """A metric as a suite plans it, before anything runs: its kind and, for a noisy one, the
    samples per side (`per_unit` × the value of the parameter `key`) its rank test will get."""

    name: str
    kind: Kind
    paired: bool = False
    key: str = ""  # the parameter the sample count scales with (repeats, prompts)
    per_unit: int = 1

    def samples(self, params: dict[str, Any], workload: WorkloadSpec) -> int:
        return self.per_unit * _param_or_workload(params, workload, self.key)


def _param_or_workload(params: dict[str, Any], workload: WorkloadSpec, key: str) -> int:
    return int(params[key]) if params.get(key) is not None else int(getattr(workload, key))


def deciding_metrics(params: dict[str, Any], metrics: Sequence[tuple[str, Kind]]) -> list[str]:
    """The metrics whose verdicts decide, of `metrics` ((name, kind), primary first): the
    suite's `verdict_metrics` when it names them (an explicit narrowing), else the primary and
    every exact metric, so a changed exact figure is never outvoted by the first metric."""
    if params["verdict_metrics"]:
        return list(params["verdict_metrics"])
    return [name for i, (name, kind) in enumerate(metrics) if i == 0 or kind == Kind.EXACT]


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
    # parameters) instead of being each cell's own.
    across: Callable[[CellResult, CellResult, dict[str, Any]], Across] | None = None
    # The metrics the probe will report under these parameters, primary first, on a
    # configuration that is (or is not) deterministic: what the suite's design check reads.
    planned: Callable[[dict[str, Any], WorkloadSpec, bool], tuple[PlannedMetric, ...]] | None = None
    # The pair's figure as a few lines of Markdown (a Unicode sparkline, a small table), from the
    # measured cells of both sides: what a report pasted into a PR still shows once its image
    # links break. Pure text, no matplotlib; the report puts it under the pair's name.
    text_figure: Callable[[dict[Role, CellResult]], list[str]] | None = None

    @property
    def interleaved(self) -> bool:
        return self.merge is not None

    def __post_init__(self) -> None:
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"probe {self.name!r} declares a parameter twice: {names}")

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
        if self.planned is None:
            return
        planned = self.planned(params, workload, deterministic)
        deciding = set(deciding_metrics(params, [(m.name, m.kind) for m in planned]))
        noisy = [m for m in planned if m.kind == Kind.NOISY and m.name in deciding]
        # compare.py splits alpha among the deciding noisy metrics (Bonferroni)
        alpha = params["alpha"] / max(1, len(noisy))
        for m in noisy:
            n = m.samples(params, workload)
            least = stats.least_samples(alpha, m.paired)
            if n >= least:
                continue
            lowest_p = stats.min_wilcoxon_p(n) if m.paired else stats.min_mann_whitney_p(n, n)
            value = _param_or_workload(params, workload, m.key)
            raise UsageError(
                f"{where}.{m.key}: {value} gives {m.name} {n} {'pairs' if m.paired else 'samples per side'}, "
                f"whose smallest two-sided p is {lowest_p:.3g}: it can never reach alpha {alpha:.3g}"
                f"{f' (the suite alpha over {len(noisy)} deciding noisy metrics)' if len(noisy) > 1 else ''}, so "
                f"this suite could not tell a change from none; set {m.key} >= "
                f"{-(-least // m.per_unit)} (or raise alpha)")

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
