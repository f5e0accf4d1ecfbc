"""The one shape every probe has: run(ctx) -> ProbeOutput."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from harness.client import SGLangClient
from harness.plan import ServerConfig
from harness.results import ProbeOutput
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
