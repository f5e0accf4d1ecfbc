"""detcheck bisect: the first commit between --good and --bad where a probe stops comparing same.

Runs `git bisect run` in a worktree of its own (never your checkout) with `detcheck
bisect-step` as the predicate: each commit is one good-vs-commit run of the normal pipeline,
its cells stored by sha, so a re-run or a bisect after `detcheck run` reuses them. Ends by
reverting the culprit on bad and checking that the result compares same to good.

Exit codes: 0 found (and confirmed, or the confirmation could not run), 1 not found or the
revert still differs, 2 bad input.

With --slots K (K > 1) it bisects k-ary instead: each round evaluates K commits of the range at
once and keeps the part between the last good and the first bad of them, at most
⌈log_(K+1) N⌉ + 1 rounds for N commits (first-parent history).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.bisect import ABORT, BisectSpec, bisect, session_dir_for, step
from harness.bisect.driver import commit_sha
from harness.commands.common_args import add_env_args, add_target_arg, chosen_target, env_options_from
from harness.paths import cache_dir
from harness.revisions import Revision
from harness.slurm import BisectRounds, add_slurm_args
from harness.slurm import options_from as slurm_options_from


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bisect", help="find the first commit where a probe's verdict changes",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repo", type=Path, required=True, help="git repository (SGLang or a fixture repo)")
    p.add_argument("--good", required=True, help="a ref whose results are the reference")
    p.add_argument("--bad", required=True, help="a later ref that compares different")
    p.add_argument("--suite", type=Path, required=True, help="suite TOML file")
    p.add_argument("--probe", action="append", required=True, metavar="NAME",
                   help="probe that decides (repeatable: any differing one makes a commit bad)")
    p.add_argument("--config", action="append", default=[], metavar="NAME",
                   help="only this configuration of the suite (repeatable)")
    add_target_arg(p)
    p.add_argument("--store", type=Path, default=None,
                   help="result store (default: $DETCHECK_CACHE_DIR/store, shared with `detcheck run`)")
    p.add_argument("--python", default=None, help="interpreter that runs the servers")
    add_env_args(p)
    p.add_argument("--max-scale", type=int, default=8, metavar="K",
                   help="an unknown verdict is measured again with 2×, 4×, … the prompts up to K× "
                        "(default 8); still unknown: the commit is skipped")
    p.add_argument("--slots", type=int, default=1, metavar="K",
                   help="commits evaluated at once: K > 1 splits the range into K + 1 parts per "
                        "round, at most ⌈log_(K+1) N⌉ + 1 rounds (default 1: git bisect run)")
    add_slurm_args(p, "each round as one job (one task per commit; the endpoint and the confirmation too)")
    p.set_defaults(func=run)

    # No `help`: not one of the user's commands (`--help` lists only those given one), but the
    # predicate `bisect` hands to git bisect run.
    s = sub.add_parser("bisect-step",
                       description="Judge BISECT_HEAD (or --commit) against the session's good "
                                   "commit. Exit 0 same, 1 different, 125 cannot be tested, "
                                   "128 the good endpoint failed.")
    s.add_argument("--session", type=Path, required=True, help="the bisect session directory")
    s.add_argument("--commit", default=None, help="judge this commit instead of BISECT_HEAD")
    s.set_defaults(func=run_step)


def run(args: argparse.Namespace) -> int:
    good = Revision.resolve(args.repo, args.good)
    bad = Revision.resolve(args.repo, args.bad)
    repo = good.repo
    assert repo is not None, "Revision.resolve gives every commit its repository"
    good_sha, bad_sha = commit_sha(good), commit_sha(bad)
    spec = BisectSpec(repo=repo, good=good_sha, suite=args.suite.resolve(), probes=tuple(args.probe),
                      configs=tuple(args.config), target=chosen_target(args.target, repo),
                      store_root=(args.store or cache_dir() / "store").resolve(),
                      session_dir=session_dir_for(repo, good_sha, bad_sha),
                      max_scale=args.max_scale, python=args.python, env_options=env_options_from(args))
    slurm = slurm_options_from(args)
    out = bisect(spec, bad_sha, slots=args.slots, rounds=BisectRounds(slurm) if slurm else None)
    print(f"servers launched: {out.launches}")
    return 0 if out.ok else 1


def run_step(args: argparse.Namespace) -> int:
    # git bisect reads any code in 1..127 but 125 as "bad": a harness failure must abort instead.
    try:
        return step(args.session, args.commit)
    except Exception as exc:  # noqa: BLE001 - reported, then the bisect stops
        print(f"bisect-step: {type(exc).__name__}: {exc}", file=sys.stderr)
        return ABORT
