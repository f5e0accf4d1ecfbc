"""detcheck selftest: known bugs as inverse controls. The suite runs with one revision as both
sides: first a control (nothing reverted, which must read same), then once per past fix the
revision registers for SGLANG_DEBUG_REVERT_PR (SGLang's srt/debug_utils/pr_fix_toggle.py), the
candidate's servers reverting it. A fix the registry lacks is named by its commit (--revert SHA):
the candidate is then the revision with that commit reverted by git (skipped, with git's reason,
where it does not revert cleanly). Each fix the suite reads as different is caught; the rest are
its false-same rate on real bugs. Exit 0 when every fix is caught, 1 when one is missed (or the
control is not same), 3 when the revision registers no fix and none is named."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

from harness.commands.common_args import (EXIT_DIFFERENT, EXIT_NOTHING_MEASURED, EXIT_SAME, add_execution_args,
                                          claim_out_dir, default_out, observer_for, request_from)
from harness.errors import UsageError
from harness.report.emit import emit
from harness.result_files import atomic_write_text
from harness.results import RunResult
from harness.revisions import Revision
from harness.selftest import (SELFTEST_FILE, SELFTEST_REPORT, markdown, registered_fixes, registry_path, revert_commit,
                              run_dirs, run_selftest, summary)
from harness.targets import get_target

def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("selftest", help="revert each past fix the revision registers and report which the suite catches",
                       description=__doc__)
    p.add_argument("--repo", type=Path, required=True, help="git checkout of SGLang (or of a reference-server fixture repo)")
    p.add_argument("--rev", required=True, help="the revision whose registered fixes are reverted, one at a time")
    p.add_argument("--suite", type=Path, required=True, help="suite TOML file (see suites/)")
    p.add_argument("--fix", action="append", type=int, default=[], metavar="PR",
                   help="revert only this registered fix (repeatable; default: every one the revision registers, "
                        "unless --revert names commits)")
    p.add_argument("--revert", action="append", default=[], metavar="SHA",
                   help="also revert this fix commit with git on top of --rev (repeatable; for fixes the registry "
                        "lacks; one that does not revert cleanly is skipped with git's reason)")
    add_execution_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.resume:
        raise UsageError("selftest has no --resume: each run's cells stay in the store, so running it again reuses them")
    revision = Revision.resolve(args.repo, args.rev)
    args.out = args.out or default_out(f"selftest-{args.suite.stem}")
    req = request_from(args, revision, revision, args.suite)
    worktree = revision.checkout()
    assert worktree is not None  # a revision of --repo, never the installed package
    registered = registered_fixes(get_target(req.target), worktree)
    unknown = [fix for fix in args.fix if fix not in registered]
    if unknown:
        raise UsageError(f"--fix {', '.join(map(str, unknown))}: not registered at {revision.short()} "
                         f"(registered: {', '.join(map(str, registered)) or 'none'})")
    fixes = tuple(args.fix) or (() if args.revert else registered)
    assert revision.sha is not None  # resolved in --repo
    reverts = tuple(revert_commit(args.repo, revision.sha, sha) for sha in dict.fromkeys(args.revert))
    if not fixes and not reverts:
        where = registry_path(get_target(req.target), worktree)
        print(f"detcheck: {revision.short()} registers no fix to revert (no registry in "
              f"{where.relative_to(worktree) if where else 'this target'})")
        return EXIT_NOTHING_MEASURED
    for out in run_dirs(req.out_dir, fixes, reverts):
        claim_out_dir(out, args.force, resumable=False)
    control, runs = run_selftest(req, fixes, observer_for(args), write_report, reverts)
    label = revision.short() if revision.ref == revision.sha else f"{revision.ref} ({revision.short()})"
    table = markdown(control, runs, label)
    atomic_write_text(req.out_dir / SELFTEST_REPORT, table)
    result = summary(control, runs)
    atomic_write_text(req.out_dir / SELFTEST_FILE, json.dumps(result, indent=1) + "\n")
    code = EXIT_SAME if result["caught"] == len(runs) else EXIT_DIFFERENT
    if args.format == "json":
        print(json.dumps({"exit_code": code, **result}, indent=1))
    else:
        print(table, end="")
        print(f"selftest: {req.out_dir / SELFTEST_REPORT}")
    return code


def write_report(result: RunResult, out: Path) -> None:
    """Each run's report.md beside its results.json, as `run` writes it."""
    emit(result, "md", out, stream=io.StringIO())
