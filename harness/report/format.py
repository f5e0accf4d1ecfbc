"""How numbers and a cell's default one-liner read in tables."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

from harness.paths import PROJECT_ROOT
from harness.results import Metric
from harness.revisions import WORKTREES


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


def describe_default(facts: dict[str, Any], primary: Metric | None) -> str:
    """A probe without a describe hook: its primary metric's headline value."""
    if primary is None:
        return "–"
    unit = f" {primary.unit}" if primary.unit else ""
    return f"{primary.name} {fmt(primary.headline_value())}{unit}"


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


_ABSOLUTE = re.compile(r"(?<![\w.~/:-])/[^\s`'\",;:()\[\]]+")


def portable_path(path: str, project: Path = PROJECT_ROOT) -> str:
    """An absolute path as a report pasted elsewhere should show it: from the first component
    on which it is a path of this project (…/fixtures/refmodels/hybrid of any checkout reads
    fixtures/refmodels/hybrid), else its last two components after "…" (where this machine keeps
    a temp dir or its models says nothing to a reader). A file of a revision's worktree reads
    as git names it: <sha>:<path in the tree>."""
    parts = Path(path).parts[1:]
    if len(parts) < 2:  # /generate, /tmp: an HTTP route or a root folder names no machine
        return path
    if WORKTREES in parts:
        at = len(parts) - 1 - parts[::-1].index(WORKTREES)
        if len(parts) > at + 3:
            return f"{parts[at + 2]}:{'/'.join(parts[at + 3:])}"
    for i in range(len(parts) - 1):  # two components at least: a bare name matches too easily
        if project.joinpath(*parts[i:]).exists():
            return "/".join(parts[i:])
    return "…/" + "/".join(parts[-2:] if len(parts) > 2 else parts[-1:])


def portable(text: str, project: Path = PROJECT_ROOT) -> str:
    """`text` with every absolute path in it made portable (portable_path)."""
    return _ABSOLUTE.sub(lambda m: portable_path(m.group(0), project), text)
