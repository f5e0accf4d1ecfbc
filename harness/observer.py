"""What the pipeline tells the outside world while it runs (progress bars, logs).

The pipeline calls these hooks; report.console implements them with rich progress bars,
QuietObserver ignores them (tests, --format json). Several jobs run at once in threads of their
own: an observer must be thread-safe, and tells jobs apart by (configuration, role).
"""

from __future__ import annotations

from typing import Callable, Protocol

from harness.results import CellResult, Launch


class RunObserver(Protocol):
    def begin(self, total_cells: int) -> None: ...
    def launching(self, config: str, role: str, ref: str) -> Callable[[float], None]: ...
    def launched(self, launch: Launch) -> None: ...
    def probing(self, config: str, role: str, probe: str) -> Callable[[int, int], None]: ...
    def cell_done(self, cell: CellResult, reused: bool) -> None: ...
    def job_done(self, config: str, role: str) -> None: ...
    def end(self) -> None: ...


class QuietObserver:
    def begin(self, total_cells: int) -> None:
        pass

    def launching(self, config: str, role: str, ref: str) -> Callable[[float], None]:
        return lambda elapsed: None

    def launched(self, launch: Launch) -> None:
        pass

    def probing(self, config: str, role: str, probe: str) -> Callable[[int, int], None]:
        return lambda done, total: None

    def cell_done(self, cell: CellResult, reused: bool) -> None:
        pass

    def job_done(self, config: str, role: str) -> None:
        pass

    def end(self) -> None:
        pass


class SuiteObserver:
    """One suite's view of an observer that several suites share (a matrix entry's, in one slot
    pool): its configuration names carry the suite's name, since two suites may both have a
    `static`; `begin` and `end` belong to whoever runs the suites together, not to one of them."""

    def __init__(self, shared: RunObserver, suite: str):
        self.shared, self.prefix = shared, f"{suite}/"

    def begin(self, total_cells: int) -> None:
        pass

    def launching(self, config: str, role: str, ref: str) -> Callable[[float], None]:
        return self.shared.launching(self.prefix + config, role, ref)

    def launched(self, launch: Launch) -> None:
        self.shared.launched(launch)

    def probing(self, config: str, role: str, probe: str) -> Callable[[int, int], None]:
        return self.shared.probing(self.prefix + config, role, probe)

    def cell_done(self, cell: CellResult, reused: bool) -> None:
        self.shared.cell_done(cell, reused)

    def job_done(self, config: str, role: str) -> None:
        self.shared.job_done(self.prefix + config, role)

    def end(self) -> None:
        pass
