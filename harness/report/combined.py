"""Several runs in one Markdown report (`detcheck report D1 D2 …`): a matrix's suites, or its
entries, as one PR comment or job summary. A line per run says its verdict, then each run's
table as report.md has it; each run's own report.md keeps its details, figures and provenance.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from harness import completeness
from harness.compare import overall
from harness.report.format import portable
from harness.report.markdown import rows_table
from harness.report.rows import headline, revision_label
from harness.results import RunResult
from harness.textfmt import md_code, md_table, md_text, plural


def combined_markdown(runs: list[tuple[Path, RunResult]]) -> str:
    """`runs`: each run directory (as given) with its result, in the order given."""
    verdict = overall(tuple(c for _, result in runs for c in result.comparisons))
    # Each run's verdict counted where they differ: a run that measured nothing is no *same*
    # of the set; a run that is no pass (its record incomplete) is said first, its line says why.
    each = Counter(overall(result.comparisons).value for _, result in runs)
    shown = verdict.value + (f" ({', '.join(f'{n} {v}' for v, n in sorted(each.items()))})" if len(each) > 1 else "")
    short = sum(1 for _, result in runs if completeness.gaps(result))
    if short:
        shown = f"not a pass ({short} of {plural(len(runs), 'run')} incomplete); as recorded: {shown}"
    out = [f"## detcheck: {plural(len(runs), 'run')}: {shown}", ""]
    out += md_table(("run", "suite", "target", "base → candidate", "verdict"),
                    ((md_code(portable(str(path))), md_code(result.suite), result.target,
                      f"{revision_label(result.base)} → {revision_label(result.candidate)}", headline(result))
                     for path, result in runs))
    for path, result in runs:
        out += ["", f"### {md_code(result.suite)} on {md_text(result.target)} ({md_code(portable(str(path)))})", "",
                *rows_table(result)]
    return "\n".join(out) + "\n"
