"""Plots where a curve tells the story: SWA tokens held vs generated tokens, base vs candidate.

Drawn from stored results (the swa_peak samples keep their curves), with matplotlib's Agg
canvas and no pyplot state, so nothing needs a screen. The SVG carries no date and a fixed
hash salt, so the same result draws the same file.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from harness.results import CellResult, Role, RunResult, Status

PLOT_DIR = "plots"
COLORS = {Role.BASE: "#1f77b4", Role.CANDIDATE: "#d62728"}
_RC = {"svg.hashsalt": "detcheck"}


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def _rev_name(cell: CellResult) -> str:
    rev = cell.revision
    return rev.short if rev.sha and rev.sha.startswith(rev.ref) else f"{rev.ref} ({rev.short})"


def draw_swa(config: str, cells: dict[Role, CellResult], out_dir: Path) -> str:
    """Write <out_dir>/plots/<config>-swa_peak.{png,svg}; return the PNG path relative to out_dir."""
    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(7.0, 3.6), dpi=100)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for role, cell in cells.items():
            for i, sample in enumerate(cell.samples):
                label = (f"{role.value} {_rev_name(cell)}: peak {cell.facts.get('swa_peak')}"
                         if i == 0 else None)
                ax.plot(sample["generated"], sample["swa_tokens"], color=COLORS[role], lw=1.2,
                        alpha=0.9 if i == 0 else 0.5, label=label)
        ax.set_xlabel("generated tokens")
        ax.set_ylabel("SWA pool tokens held (#swa token)")
        ax.set_title(f"{config}: SWA tokens vs generated tokens")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
        fig.tight_layout()
        stem = f"{PLOT_DIR}/{_safe(config)}-swa_peak"  # config names may hold dots ("ratio0.1")
        (out_dir / PLOT_DIR).mkdir(parents=True, exist_ok=True)
        fig.savefig(out_dir / f"{stem}.png", format="png", metadata={"Software": None})
        fig.savefig(out_dir / f"{stem}.svg", format="svg", metadata={"Date": None})
    return f"{stem}.png"


def draw_all(result: RunResult, out_dir: Path) -> dict[tuple[str, str], str]:
    """One SWA plot per swa_peak comparison with at least one side measured."""
    plots: dict[tuple[str, str], str] = {}
    for comp in result.comparisons:
        if comp.probe != "swa_peak":
            continue
        cells = {role: cell for role in (Role.BASE, Role.CANDIDATE)
                 for cell in [result.cell(comp.config, comp.probe, role)]
                 if cell is not None and cell.status == Status.OK and cell.samples}
        if cells:
            plots[(comp.config, comp.probe)] = draw_swa(comp.config, cells, out_dir)
    return plots
