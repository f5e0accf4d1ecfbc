"""The one shape every probe has: run(ctx) -> ProbeOutput, with its parameters declared.

A probe module registers its ProbeKind with `register`; harness.probes imports every module
of the package, so adding a probe is adding one file (and naming it in a suite).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from harness.client import SGLangClient
from harness.errors import UsageError
from harness.params import Param, ParamRole, validate_params
from harness.plan import ServerConfig
from harness.results import CellResult, Metric, ProbeOutput, Role
from harness.server import ServerProcess
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
