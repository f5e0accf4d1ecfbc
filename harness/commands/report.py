"""detcheck report: re-render stored results (no server is launched)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.errors import UsageError
from harness.report.emit import FORMATS, emit
from harness.results import RunResult
from harness.run import RESULTS_FILE
from harness.store import decode, read_versioned


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="re-render a stored run (results.json) without launching",
                       description=__doc__)
    p.add_argument("path", type=Path, help="a run directory or its results.json")
    p.add_argument("--format", choices=FORMATS, default="console")
    p.set_defaults(func=run)


def load_run(path: Path) -> RunResult:
    file = path / RESULTS_FILE if path.is_dir() else path
    if not file.is_file():
        raise UsageError(f"{file}: no results here (expected a run directory with {RESULTS_FILE})")
    return decode(file, "results", read_versioned(file, "results"), RunResult.from_dict)


def run(args: argparse.Namespace) -> int:
    result = load_run(args.path)
    out_dir = args.path if args.path.is_dir() else args.path.parent
    emit(result, args.format, out_dir)
    return 0
