"""detcheck report: re-render stored results (no server is launched)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.commands.common_args import add_format_arg, conclude
from harness.compare import check_verdicts
from harness.result_files import read_run


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="re-render a stored run (results.json) without launching",
                       description=__doc__)
    p.add_argument("path", type=Path, help="a run directory or its results.json")
    add_format_arg(p)
    p.add_argument("--check", action="store_true",
                   help="exit with the stored run's verdict (0 same, 1 different or error, 3 nothing "
                        "measured) instead of 0: a CI job that downloads runs judges them with this")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = read_run(args.path)
    # every verdict is judged again from the stored samples: a stored one is never trusted
    check_verdicts(result, args.path, strict=args.check)
    out_dir = args.path if args.path.is_dir() else args.path.parent
    code = conclude(result, args.format, out_dir)
    return code if args.check else 0
