"""One way out for every command: write report.md next to results.json, print a format."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Sequence, TextIO

from rich.console import Console

from harness import completeness
from harness.compare import overall
from harness.report.console import ConsoleReport
from harness.report.files import REPORT_FILE
from harness.report.markdown import MarkdownReport
from harness.report.rows import all_metric_sides
from harness.result_files import atomic_write_text
from harness.results import RunResult
from harness.textfmt import displayable

FORMATS = ("console", "md", "json")


def plots_for(result: RunResult, out_dir: Path | None) -> dict[tuple[str, str], str]:
    """Draw the plots a result has (SWA curves); an empty dict where there are none."""
    if out_dir is None:
        return {}
    try:
        from harness.report import plot
    except ImportError:
        return {}
    return plot.draw_all(result, out_dir)


class _DisplayableStream:
    """A text stream that takes any str (`displayable`): the report's names come from the file
    system and from results files, where they need not be UTF-8."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(displayable(text))

    def __getattr__(self, name: str):  # flush, isatty, encoding: the stream's own
        return getattr(self._stream, name)


def emit(result: RunResult, fmt: str, out_dir: Path | None = None, stream=None,
         exit_code: int | None = None, also: Sequence[str] = ()) -> None:
    """Print `result` in `fmt`; also write report.md and plots into `out_dir` where it can (a
    read-only run directory still prints, with a warning). JSON opens with the run's verdict,
    `exit_code`, the status the command exits with (or, for `report` without --check, would),
    and `gaps`, what keeps the run from being a pass (every renderer names them first). `also`:
    those found beside the record's own gaps (`completeness.gaps`): its suite's parameters."""
    stream = _DisplayableStream(stream or sys.stdout)
    sides = all_metric_sides(result)  # one derivation for report.md and the console table
    try:
        plots = plots_for(result, out_dir)
        markdown = displayable(MarkdownReport(result, plots, sides, also).render())
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(out_dir / REPORT_FILE, markdown)
    except OSError as exc:
        print(f"detcheck: warning: report.md and plots not written to {out_dir}: "
              f"{exc.strerror or exc}", file=sys.stderr)
        markdown = displayable(MarkdownReport(result, {}, sides, also).render())
    if fmt == "md":
        stream.write(markdown)
    elif fmt == "json":
        json.dump({"verdict": overall(result.comparisons).value, "exit_code": exit_code,
                   "gaps": [*completeness.gaps(result), *also], **result.to_dict()}, stream, indent=1)
        stream.write("\n")
    else:
        ConsoleReport(result, sides, also).print(Console(file=stream, width=console_width(stream)))


# Off a terminal (a CI log, a file) the table is as wide as its cells want, up to this.
PIPED_WIDTH = 200


def console_width(stream: TextIO) -> int:
    """The terminal's width where `stream` is one (a table wider than it wraps every line), else
    PIPED_WIDTH."""
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        pass
    return PIPED_WIDTH
