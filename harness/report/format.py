"""A cell's default one-liner, and paths as a report pasted elsewhere should show them (numbers
and Markdown tables: harness/textfmt.py, which layers below the report use too)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from harness.paths import PROJECT_ROOT
from harness.results import Metric
from harness.revisions import WORKTREES
from harness.textfmt import fmt


def describe_default(facts: dict[str, Any], primary: Metric | None) -> str:
    """A probe without a describe hook: its primary metric's headline value."""
    if primary is None:
        return "–"
    unit = f" {primary.unit}" if primary.unit else ""
    return f"{primary.name} {fmt(primary.headline_value())}{unit}"


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
