"""How numbers and a cell's default one-liner read in tables."""

from __future__ import annotations

from typing import Any

from harness.results import Metric


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
    """A probe without a describe hook: its primary metric's headline value."""
    if primary is None:
        return "–"
    unit = f" {primary.unit}" if primary.unit else ""
    return f"{primary.name} {fmt(primary.headline_value())}{unit}"
