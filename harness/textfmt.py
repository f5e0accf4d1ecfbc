"""Numbers and Markdown tables as text: one way for every layer that writes them (a probe's
table cell, a reproducer's expectation, the report). Standard library only, so any module may
import it; the report's own formatting (a cell's default line, portable paths) is
harness/report/format.py."""

from __future__ import annotations

import difflib
from typing import Any, Iterable


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


def fmt_pair(a: float, b: float, digits: int = 3) -> tuple[str, str]:
    """Two values of an exact comparison, each at the fewest significant digits (`digits` at
    least) that still tell them apart: there is no tolerance, so "0.5 → 0.5" would hide a change
    in the 7th digit, and 17 digits say nothing the first three do not."""
    for d in range(digits, 18):
        shown = fmt(a, d), fmt(b, d)
        if shown[0] != shown[1] or a == b:
            return shown
    return repr(a), repr(b)


def md_escape(text: str) -> str:
    """Text that stays inside one Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def md_table(header: Iterable[str], body: Iterable[Iterable[Any]]) -> list[str]:
    """A Markdown table's lines: the header as given, every body cell escaped."""
    header = list(header)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(md_escape(str(c)) for c in row) + " |" for row in body]
    return lines


def plural(n: int, noun: str, many: str | None = None) -> str:
    """"1 configuration", "2 configurations" ("1 value", "8 values")."""
    return f"{n:,} {noun if n == 1 else many or noun + 's'}"


def did_you_mean(given: str, known: Iterable[str]) -> str:
    """"; did you mean 'main'?" for the known name closest to a mistyped one, else "": an
    error about a name the user typed names the one they likely meant."""
    close = difflib.get_close_matches(given, list(known), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""
