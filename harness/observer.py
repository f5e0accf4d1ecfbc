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
