"""detcheck compare: compare the cells of two stored runs, without launching anything.

Each side is a run directory (or its results.json). From each run the candidate revision's
cells are taken by default (two candidates measured against one base, or one candidate on two
machines); --side base takes the base revision's. Cells pair by (configuration, probe) and are
judged with the suite's floors (--suite, default: the suite the base run recorded); a pair
measured with different server configurations or workloads is reported as not comparable.
Prints through the same renderers as `detcheck run`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.commands.common_args import add_format_arg, command_line, conclude
from harness.compare import check_verdicts, compare_runs
from harness.errors import UsageError
from harness.suite import load_suite
from harness.probes import known_probes
from harness.result_files import read_run
from harness.results import Role


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare two stored runs' results (no server)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-results", type=Path, required=True, metavar="RUN")
    p.add_argument("--candidate-results", type=Path, required=True, metavar="RUN")
    p.add_argument("--side", choices=[r.value for r in Role], default=Role.CANDIDATE.value,
                   help="which revision's cells to take from each run (default: candidate)")
    p.add_argument("--suite", type=Path, default=None,
                   help="suite whose floors judge the pairs (default: the base run's suite)")
    p.add_argument("--out", type=Path, default=None, help="also write report.md (and plots) here")
    add_format_arg(p)
    p.set_defaults(func=run)



def run(args: argparse.Namespace) -> int:
    base_run, cand_run = read_run(args.base_results), read_run(args.candidate_results)
    for path, stored in ((args.base_results, base_run), (args.candidate_results, cand_run)):
        check_verdicts(stored, path, strict=False)
    suite_path = args.suite or Path(base_run.metadata.get("suite_path") or "")
    if not suite_path.is_file():
        raise UsageError(f"the base run's suite {str(suite_path)!r} is not here; pass --suite FILE")
    suite = load_suite(suite_path, known_probes())
    result = compare_runs(base_run, cand_run, Role(args.side), suite.probe_params,
                          command_line())
    return conclude(result, args.format, args.out)
