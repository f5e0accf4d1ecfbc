"""Plots where a curve tells the story, base vs candidate: each probe with a `plot` hook draws
its own figure through `figure` here.

Drawn from stored results, with matplotlib's Agg canvas and no pyplot state, so nothing needs a
screen. The SVG carries no date and a fixed hash salt, so the same result draws the same file.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import matplotlib
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness.probes import PROBES
from harness.report.files import PLOT_DIR
from harness.report.rows import figure_cells
from harness.results import CellResult, Role, RunResult

COLORS = {Role.BASE: "#1f77b4", Role.CANDIDATE: "#d62728"}


def png_path(name: str) -> str:
    """Where `figure(out_dir, name)` puts the PNG, relative to out_dir (config names may hold
    dots, e.g. "ratio0.1", and anything else a file name should not)."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)
    return f"{PLOT_DIR}/{safe}.png"


def rev_name(cell: CellResult) -> str:
    rev = cell.revision
    return rev.short if rev.sha and rev.sha.startswith(rev.ref) else f"{rev.ref} ({rev.short})"


@contextmanager
def figure(out_dir: Path, name: str) -> Iterator[Axes]:
    """Axes to draw on; on exit the figure is written as png_path(name) and its SVG twin."""
    with matplotlib.rc_context({"svg.hashsalt": "detcheck"}):
        fig = Figure(figsize=(7.0, 3.6), dpi=100)
        FigureCanvasAgg(fig)
        yield fig.add_subplot()
        fig.tight_layout()
        png = out_dir / png_path(name)
        png.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(png, format="png", metadata={"Software": None})
        fig.savefig(png.with_suffix(".svg"), format="svg", metadata={"Date": None})


def draw_all(result: RunResult, out_dir: Path) -> dict[tuple[str, str], str]:
    """One plot per comparison whose probe draws one and has at least one side measured."""
    plots: dict[tuple[str, str], str] = {}
    for comp in result.comparisons:
        kind = PROBES.get(comp.probe)
        if kind is None or kind.plot is None:
            continue
        cells = figure_cells(result, comp)
        if cells:
            plots[(comp.config, comp.probe)] = kind.plot(comp.config, cells, out_dir)
    return plots
