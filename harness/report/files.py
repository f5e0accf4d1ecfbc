"""What a report writes into a run directory: report.md and the plots it links, by name, read
by the command that writes a run (what an earlier run left) and by the plots (where they go)."""

from __future__ import annotations

import re
from pathlib import Path

REPORT_FILE = "report.md"
PLOT_DIR = "plots"  # under the run directory; report.md links each plot drawn there


def report_files(out_dir: Path) -> list[Path]:
    """What `emit` wrote into a run directory: report.md and the plots it links (PNG and SVG
    twin); nothing else that may lie in plots/."""
    try:
        report = (out_dir / REPORT_FILE).read_text(errors="replace")
    except OSError:
        return []
    pngs = re.findall(rf"\]\(({PLOT_DIR}/[^)\s/]+)\.png\)", report)
    return [out_dir / REPORT_FILE, *(out_dir / f"{png}{ext}" for png in pngs for ext in (".png", ".svg"))]
