"""detcheck report: re-render stored results (no server is launched)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.report.emit import FORMATS, emit
from harness.result_files import read_run


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="re-render a stored run (results.json) without launching",
                       description=__doc__)
    p.add_argument("path", type=Path, help="a run directory or its results.json")
    p.add_argument("--format", choices=FORMATS, default="console")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = read_run(args.path)
    out_dir = args.path if args.path.is_dir() else args.path.parent
    emit(result, args.format, out_dir)
    return 0
