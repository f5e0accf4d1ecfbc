"""The one shape every probe has: run(ctx) -> ProbeOutput."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from harness.client import SGLangClient
from harness.plan import ServerConfig
from harness.results import Metric, ProbeOutput
from harness.server import ServerProcess
from harness.workloads import Workload


@dataclass
class ProbeContext:
    client: SGLangClient
    server: ServerProcess
    config: ServerConfig
    workload: Workload
    params: dict[str, Any]
    server_info: dict[str, Any]
    # advance(done, total): drives the progress bar; probes call it as requests finish.
    advance: Callable[[int, int], None] = field(default=lambda done, total: None)

    @property
    def deterministic(self) -> bool:
        return self.config.features.deterministic

    def param(self, name: str, default: Any) -> Any:
        return self.params.get(name, default)


@dataclass(frozen=True)
class ProbeKind:
    name: str
    run: Callable[[ProbeContext], ProbeOutput]
    summary: str
    # Server flags the probe needs on top of the configuration's (the union over a
    # configuration's probes is passed at launch, so one server serves them all).
    server_args: tuple[str, ...] = ()
    # One line for a table cell, from a cell's facts and primary metric.
    describe: Callable[[dict[str, Any], Metric | None], str] | None = None


def fmt(x: Any, digits: int = 3) -> str:
    """Numbers for tables: exact zero stays 0, small values in scientific notation."""
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if isinstance(x, float):
        if x == 0:
            return "0"
        if abs(x) < 1e-3 or abs(x) >= 1e6:
            return f"{x:.{digits - 1}e}"
        return f"{x:.{digits}g}" if abs(x) < 1000 else f"{x:,.0f}"
    return str(x)


def describe_default(facts: dict[str, Any], primary: Metric | None) -> str:
    if primary is None:
        return "–"
    unit = f" {primary.unit}" if primary.unit else ""
    return f"{primary.name} {fmt(primary.headline_value())}{unit}"
