"""Rich console output: the verdict table, and progress bars while a run is going."""

from __future__ import annotations

import threading
from typing import Callable, Sequence

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from harness import completeness
from harness.report.rows import (MISSING, Sides, gap_items, headline, launches_text, revision_label, rows,
                                 torch_change_text)
from harness.results import CellResult, Launch, RunResult, Status
from harness.textfmt import printable

VERDICT_STYLE = {"same": "green", "different": "bold red", "unknown": "yellow",
                 "n/a": "dim", "error": "bold magenta", MISSING: "bold red"}


class ConsoleReport:
    def __init__(self, result: RunResult, sides: dict[tuple[str, str], Sides] | None = None,
                 also: Sequence[str] = ()):
        self.result = result
        self.sides = sides  # rows.all_metric_sides of the result, where the caller has them
        self.also = also  # what keeps the run from being a pass beside its record's own gaps

    def table(self) -> Table:
        r = self.result
        table_rows = rows(r, self.sides)
        configs = list(dict.fromkeys(row.config for row in table_rows))
        # One configuration: named in the title, not repeated on every row (a column's width saved).
        one = configs[0] if len(configs) == 1 else None
        # Every string of the result printable: a results file's or a server's control
        # characters (a set-title, a clear-screen) never reach the terminal as such.
        t = Table(title=printable(f"detcheck {r.suite} ({r.target}{f', configuration {one}' if one else ''}): "
                                  f"base {revision_label(r.base)} → candidate {revision_label(r.candidate)}"),
                  caption=printable(f"verdict: {headline(r, self.also, listed=True)} · {launches_text(r)}"),
                  show_lines=False)
        columns = ("probe", "base", "candidate", "verdict", "comparison")
        for col in columns if one else ("configuration", *columns):
            t.add_column(col, overflow="fold")
        for row in table_rows:
            style = VERDICT_STYLE.get(row.verdict, "")
            cells = (printable(row.probe), printable(row.base), printable(row.candidate),
                     f"[{style}]{row.verdict}[/]" if style else printable(row.verdict), printable(row.note))
            t.add_row(*cells if one else (printable(row.config), *cells))
        return t

    def print(self, console: Console | None = None) -> None:
        console = console or Console()
        console.print(self.table())
        # A record that is no pass says why right under its table, before anything else.
        found = [*completeness.gaps(self.result), *self.also]
        for gap in gap_items(found):
            console.print(f"[bold red]not a pass:[/] {escape(printable(gap))}", soft_wrap=True)
        if (torch_change := torch_change_text(self.result)) is not None:
            console.print(f"[yellow]{escape(torch_change)}[/]", soft_wrap=True)
        # One line per reason and job: a launch that failed is every probe's reason, said once.
        failed: dict[tuple[str, str, str, str], list[str]] = {}
        for c in self.result.cells:
            if c.status in (Status.ERROR, Status.FINDING):
                failed.setdefault((c.status.value, c.config, c.role.value, c.reason), []).append(c.probe)
        for (status, config, role, reason), probes in failed.items():
            console.print(f"[magenta]{status}[/] {escape(printable(config))}/{escape(printable(', '.join(probes)))} "
                          f"({role}): {escape(printable(reason))}", soft_wrap=True)


class ConsoleObserver:
    """Progress while the pipeline runs: one bar for the run's cells, and one line per running
    job (its launch, then its current probe), removed when the job ends. Thread-safe: rich's
    Progress locks its tasks, and the job lines are kept under a lock of their own."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(stderr=True)
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=self.console, transient=False)
        self._overall: TaskID | None = None
        self._jobs: dict[tuple[str, str], TaskID] = {}
        # (config, role, status, reason) already said: the next probe failing alike says nothing.
        self._said: set[tuple[str, str, str, str]] = set()
        self._lock = threading.Lock()

    def begin(self, total_cells: int) -> None:
        self.progress.start()
        self._overall = self.progress.add_task("cells", total=total_cells)

    def _job_line(self, config: str, role: str, description: str, total: float | None) -> TaskID:
        """The job's line, made on its first use and reset (description, bar) on every other."""
        with self._lock:
            task = self._jobs.get((config, role))
            if task is None:
                task = self._jobs[(config, role)] = self.progress.add_task(description, total=total)
                return task
        self.progress.reset(task, description=description, total=total)
        return task

    def launching(self, config: str, role: str, ref: str) -> Callable[[float], None]:
        what = f"  launch {config} @ {role} ({ref})"
        task = self._job_line(config, role, what, None)
        return lambda elapsed: self.progress.update(task, description=f"{what} {elapsed:.0f}s")

    def launched(self, launch: Launch) -> None:
        state = f"up in {launch.startup_s:.1f}s" if launch.ok else "[red]failed[/]"
        self.progress.console.print(f"server {launch.config} @ {launch.role.value}: {state}")

    def probing(self, config: str, role: str, probe: str) -> Callable[[int, int], None]:
        task = self._job_line(config, role, f"  {probe} {config} @ {role}", 1)
        return lambda done, total: self.progress.update(task, completed=done, total=total)

    def cell_done(self, cell: CellResult, reused: bool) -> None:
        if self._overall is not None:
            self.progress.advance(self._overall)
        if reused:
            self.progress.console.print(f"reused {cell.config}/{cell.probe} @ {cell.role.value} from the store")
        elif cell.status != Status.OK:
            said = (cell.config, cell.role.value, cell.status.value, cell.reason)
            with self._lock:
                repeated = said in self._said
                self._said.add(said)
            if not repeated:  # long lines unwrapped: the terminal wraps them, a log keeps them whole
                self.progress.console.print(f"{escape(printable(cell.config))}/{escape(printable(cell.probe))} @ "
                                            f"{cell.role.value}: {cell.status.value}: "
                                            f"{escape(printable(cell.reason[:200]))}", soft_wrap=True)

    def job_done(self, config: str, role: str) -> None:
        with self._lock:
            task = self._jobs.pop((config, role), None)
        if task is not None:
            self.progress.remove_task(task)

    def end(self) -> None:
        with self._lock:
            tasks, self._jobs = list(self._jobs.values()), {}
        for task in tasks:
            self.progress.remove_task(task)
        self.progress.stop()
