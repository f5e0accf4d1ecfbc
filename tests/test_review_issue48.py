"""Review of issues 44-48 merged: what a results file's text can do to report.md's shell blocks."""

from __future__ import annotations

import json
import re

from conftest import DATA
from harness.results import RunResult

SOFTCAP = DATA / "softcap-verified.json"  # a run whose *different* rows carry verified reproducers


def outside_fences(markdown: str) -> list[str]:
    """The lines CommonMark reads as Markdown: outside every fenced code block (a fence closes
    on a line of only backticks, at least as many as opened it)."""
    out, fence = [], None
    for line in markdown.splitlines():
        found = re.fullmatch(r"\s{0,3}(`{3,})[^`]*", line)
        if fence is None and found:
            fence = found.group(1)
        elif fence is not None and re.fullmatch(r"\s{0,3}`{%d,}\s*" % len(fence), line):
            fence = None
        elif fence is None:
            out.append(line)
    return out


def test_a_recorded_value_with_a_line_of_backticks_stays_inside_its_shell_block():
    """Before: a server environment value `a\\n```\\n<img …>` (no path in it: a results file may
    set it) closed the server lines' fence from inside its quotes, and the rest rendered as
    Markdown and HTML."""
    from harness.report.markdown import MarkdownReport

    data = json.loads(SOFTCAP.read_text())
    for cell in data["cells"]:
        cell["metadata"]["server_env"] = {"SGLANG_NOTE": "a\n```\n<img src=x onerror=alert(1)>\n```"}
    report = MarkdownReport(RunResult.from_dict(data)).render()
    assert "<img src=x onerror=alert(1)>" in report  # the line is shown, quoted as it was recorded
    assert not [line for line in outside_fences(report) if "<img" in line]
