"""detcheck report: re-render stored results (no server is launched).

`--check` exits with the run's verdict, and only a complete record judged with its suite's
parameters passes: the suite given with --suite, else the suite file the run names (its
recorded --suite, or `metadata.suite_path`), read here."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from harness.commands.common_args import add_format_arg, conclude, gap_lines, run_exit_code
from harness.compare import check_verdicts
from harness.completeness import gaps, suite_gaps
from harness.errors import CorruptResult, UsageError
from harness.paths import PROJECT_ROOT
from harness.probes import known_probes
from harness.report.combined import combined_markdown
from harness.report.junit import junit_xml
from harness.result_files import atomic_write_text, read_run
from harness.results import RunResult
from harness.suite import Suite, load_suite


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("report", help="re-render a stored run (results.json) without launching",
                       description=__doc__)
    p.add_argument("path", type=Path, nargs="+",
                   help="a run directory or its results.json; several: one combined Markdown report "
                        "(a matrix's suites or entries, for a PR comment or job summary)")
    add_format_arg(p)
    p.add_argument("--check", action="store_true",
                   help="exit with the stored run's verdict (0 same, 1 different, error, or a record that is "
                        "incomplete or not judged with its suite's parameters, 3 nothing measured) instead "
                        "of 0: a CI job that downloads runs judges them with this")
    p.add_argument("--suite", type=Path, default=None, metavar="FILE",
                   help="with --check: the suite whose parameters judge the run (default: the suite file the "
                        "run names, which must be here); parameters stored in the file that differ are named, "
                        "and no pass")
    p.add_argument("--junit-xml", type=Path, default=None, metavar="FILE",
                   help="also write the stored run as JUnit XML, as `run --junit-xml` does: a test case per "
                        "(configuration, probe), failed when it differs, errs or is missing, and a failed "
                        "`record`/`complete` case where the record is no pass (a killed run's, say)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.suite is not None and not args.check:
        raise UsageError("--suite is read by --check only (a report renders the run as stored)")
    if len(args.path) > 1:
        return combined(args)
    path = args.path[0]
    result = read_run(path)
    out_dir = path if path.is_dir() else path.parent
    if not args.check:
        check_verdicts(result, path, strict=False)
        write_junit(args.junit_xml, result)
        conclude(result, args.format, out_dir, judged=False)
        return 0
    try:
        # every verdict is judged again from the stored samples: a stored one is never trusted
        check_verdicts(result, path, strict=True)
    except CorruptResult:
        # where the suite is here, what the file changed of its parameters is said too
        with contextlib.suppress(UsageError):
            also = suite_gaps(result, suite_of(result, args.suite))
            print("\n".join(gap_lines(path, also)), end="\n" if also else "", file=sys.stderr)
        raise
    also = suite_gaps(result, suite_of(result, args.suite))
    write_junit(args.junit_xml, result, also)
    return conclude(result, args.format, out_dir, also=also)


def write_junit(path: Path | None, result: RunResult, also: list[str] | None = None) -> None:
    if path is not None:
        atomic_write_text(path, junit_xml(result, also or ()))


def suite_of(result: RunResult, given: Path | None) -> Suite:
    """The suite `--check` judges `result` with: `given`, else the file the run names, or where
    that path is not here (a run made on another machine, downloaded), the file at its end in
    this checkout (…/suites/h200/x.toml: suites/h200/x.toml here), said on stderr. Its models
    need not be here: only its parameters and pairs are read."""
    if given is not None:
        return load_suite(given, known_probes(), need_models=False)
    options = result.metadata.get("options")
    named = Path((options.get("suite") if isinstance(options, dict) else None)
                 or result.metadata.get("suite_path") or "")
    here = next((p for p in (named, *(PROJECT_ROOT.joinpath(*named.parts[i:]) for i in range(1, len(named.parts))))
                 if p.is_file()), None)
    if here is None:
        raise UsageError(f"--check judges a run with its suite's parameters: the suite the run names "
                         f"({str(named)!r}) is not here; pass --suite FILE")
    if here != named:
        print(f"detcheck: judging with {here} (the run names {named})", file=sys.stderr)
    return load_suite(here, known_probes(), need_models=False)


def combined(args: argparse.Namespace) -> int:
    """Several runs as one Markdown report on stdout; --check: the worst of their exit codes."""
    if args.format == "json":
        raise UsageError("several runs make one Markdown report: --format md (or console), not json")
    if args.junit_xml is not None:
        raise UsageError("--junit-xml writes one run: give one run directory (or run it once per run)")
    runs = [(path, read_run(path)) for path in args.path]
    for path, result in runs:
        check_verdicts(result, path, strict=args.check)
    print(combined_markdown(runs), end="")
    if not args.check:
        return 0
    codes = []
    for path, result in runs:
        found = [*gaps(result), *suite_gaps(result, suite_of(result, args.suite))]
        print("\n".join(gap_lines(path, found)), end="\n" if found else "", file=sys.stderr)
        codes.append(run_exit_code(result, found))
    return max(codes)
