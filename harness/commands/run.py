"""detcheck run: base vs candidate over a suite, one server per (configuration, revision)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.commands.common_args import (add_execution_args, add_revision_args, check_baseline_file, conclude,
                                          observer_for, request_from, revisions_from)
from harness.run import execute


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="compare a candidate revision against a base over a suite",
                       description=__doc__)
    add_revision_args(p)
    p.add_argument("--suite", required=True, type=Path, help="suite TOML file (see suites/)")
    add_execution_args(p)
    p.add_argument("--baseline", type=Path, default=None, metavar="FILE",
                   help="also gate each candidate cell on this baselines file (see `detcheck baseline`)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    check_baseline_file(args.baseline)
    base, candidate = revisions_from(args)
    req = request_from(args, base, candidate, args.suite)
    result = execute(req, observer_for(args))
    code = conclude(result, args.format, req.out_dir, args.baseline)
    if args.format == "console":
        print(f"results: {req.out_dir / 'results.json'}  report: {req.out_dir / 'report.md'}")
    return code
