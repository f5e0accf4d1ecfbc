"""detcheck run: base vs candidate over a suite, one server per (configuration, revision)."""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
import time
from pathlib import Path

from harness.errors import UsageError
from harness.plan import TARGETS
from harness.report.console import ConsoleObserver
from harness.report.emit import FORMATS, emit
from harness.observer import QuietObserver
from harness.revisions import Revision, cache_dir
from harness.run import RunRequest, execute
from harness.compare import overall
from harness.commands.baseline import print_gate


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="compare a candidate revision against a base over a suite",
                       description=__doc__)
    add_revision_args(p)
    p.add_argument("--suite", required=True, type=Path, help="suite TOML file (see suites/)")
    add_execution_args(p)
    p.add_argument("--baseline", type=Path, default=None, metavar="FILE",
                   help="also gate each candidate cell on this baselines file (see `detcheck baseline`)")
    p.set_defaults(func=run)


def add_revision_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", type=Path, help="git checkout of SGLang (or of a reference-server "
                   "fixture repo); omit to run the installed package as both sides")
    p.add_argument("--base", default=None, help="base git ref (e.g. main)")
    p.add_argument("--candidate", default=None, help="candidate git ref (e.g. HEAD or a branch)")


def add_execution_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", choices=TARGETS, default="refserver",
                   help="server to launch: real SGLang, or the CPU reference server (default)")
    p.add_argument("--out", type=Path, default=None,
                   help="output directory for results.json, report.md, logs (default results/runs/<suite>-<time>)")
    p.add_argument("--store", type=Path, default=None,
                   help="result store reused across runs (default: $DETCHECK_CACHE_DIR/store)")
    p.add_argument("--fresh", action="store_true", help="ignore stored cells and measure again")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted run in --out: finished cells come from the store, "
                        "only the rest is launched")
    p.add_argument("--config", action="append", default=[], metavar="NAME",
                   help="run only this configuration (repeatable)")
    p.add_argument("--probe", action="append", default=[], metavar="NAME",
                   help="run only this probe (repeatable)")
    p.add_argument("--python", default=None,
                   help="interpreter that runs the servers (default: this one)")
    p.add_argument("--server-arg", action="append", default=[], metavar="ARG",
                   help="extra server argument appended to every configuration (repeatable; "
                        "use --server-arg=--flag for dashes)")
    p.add_argument("--parallel", action="store_true",
                   help="run the base and candidate servers of a configuration at the same time "
                        "(needs memory for two servers; matrix entries with 2+ GPUs give each its own)")
    p.add_argument("--format", choices=FORMATS, default="console", help="what to print at the end")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")


def revisions_from(args: argparse.Namespace) -> tuple[Revision, Revision]:
    if args.repo is None:
        if args.base or args.candidate:
            raise UsageError("--base/--candidate need --repo")
        return Revision.installed("installed"), Revision.installed("installed")
    if not args.base or not args.candidate:
        raise UsageError("--repo needs both --base and --candidate")
    return Revision.resolve(args.repo, args.base), Revision.resolve(args.repo, args.candidate)


def request_from(args: argparse.Namespace, base: Revision, candidate: Revision, suite: Path) -> RunRequest:
    if getattr(args, "resume", False):
        if args.fresh:
            raise UsageError("--resume and --fresh contradict each other")
        if args.out is None or not (args.out / "results.json").is_file():
            raise UsageError("--resume needs --out pointing at an earlier run's directory "
                             "(one with results.json)")
    if args.python and shutil.which(args.python) is None:
        raise UsageError(f"--python {args.python}: no such executable")
    out = args.out or Path("results", "runs", f"{suite.stem}-{time.strftime('%Y%m%d-%H%M%S')}")
    return RunRequest(
        suite_path=suite, target=args.target, base=base, candidate=candidate,
        out_dir=out, store_root=args.store or cache_dir() / "store", fresh=args.fresh,
        python=args.python, only_configs=tuple(args.config), only_probes=tuple(args.probe),
        extra_args=tuple(args.server_arg),
        parallel_roles=getattr(args, "parallel", False),
        command_line=shlex.join(["detcheck", *sys.argv[1:]]),
    )


def observer_for(args: argparse.Namespace):
    # Progress bars are drawn from one thread; parallel roles report through the quiet observer.
    quiet = args.no_progress or args.format == "json" or getattr(args, "parallel", False)
    return QuietObserver() if quiet else ConsoleObserver()


def exit_code(verdict: str) -> int:
    """asv continuous style: 1 when the candidate differs or a cell failed; 0 otherwise."""
    return 1 if verdict in ("different", "error") else 0


def run(args: argparse.Namespace) -> int:
    base, candidate = revisions_from(args)
    req = request_from(args, base, candidate, args.suite)
    result = execute(req, observer_for(args))
    emit(result, args.format, req.out_dir)
    if args.format == "console":
        print(f"results: {req.out_dir / 'results.json'}  report: {req.out_dir / 'report.md'}")
    code = exit_code(overall(result.comparisons))
    if args.baseline:
        code = max(code, print_gate(args.baseline, result, sys.stderr if args.format == "json" else None))
    return code
