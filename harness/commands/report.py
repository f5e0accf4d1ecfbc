"""detcheck report: re-render stored results (no server is launched)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.commands.common_args import add_format_arg, conclude, run_exit_code
from harness.compare import check_verdicts
from harness.errors import UsageError
from harness.report.combined import combined_markdown
from harness.result_files import read_run


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="re-render a stored run (results.json) without launching",
                       description=__doc__)
    p.add_argument("path", type=Path, nargs="+",
                   help="a run directory or its results.json; several: one combined Markdown report "
                        "(a matrix's suites or entries, for a PR comment or job summary)")
    add_format_arg(p)
    p.add_argument("--check", action="store_true",
                   help="exit with the stored run's verdict (0 same, 1 different or error, 3 nothing "
                        "measured) instead of 0: a CI job that downloads runs judges them with this")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if len(args.path) > 1:
        return combined(args)
    path = args.path[0]
    result = read_run(path)
    # every verdict is judged again from the stored samples: a stored one is never trusted
    check_verdicts(result, path, strict=args.check)
    out_dir = path if path.is_dir() else path.parent
    code = conclude(result, args.format, out_dir)
    return code if args.check else 0


def combined(args: argparse.Namespace) -> int:
    """Several runs as one Markdown report on stdout; --check: the worst of their exit codes."""
    if args.format == "json":
        raise UsageError("several runs make one Markdown report: --format md (or console), not json")
    runs = [(path, read_run(path)) for path in args.path]
    for path, result in runs:
        check_verdicts(result, path, strict=args.check)
    print(combined_markdown(runs), end="")
    return max(run_exit_code(result) for _, result in runs) if args.check else 0
