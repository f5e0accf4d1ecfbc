"""detcheck bisect: the first commit between --good and --bad where a probe stops comparing same.

Runs `git bisect run` in a worktree of its own (never your checkout) with `detcheck
bisect-step` as the predicate: each commit is one good-vs-commit run of the normal pipeline,
its cells stored by sha, so a re-run or a bisect after `detcheck run` reuses them. Ends by
reverting the culprit on bad and checking that the result compares same to good.

Exit codes: 0 found (and confirmed, or the confirmation could not run), 1 not found or the
revert still differs, 2 bad input.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from harness.bisect import ABORT, SKIP, BisectSpec, bisect, build_demo_history, session_dir_for, step
from harness.demo import SUITES
from harness.plan import TARGETS
from harness.revisions import Revision, cache_dir

DEMO_SUITE, DEMO_CONFIG, DEMO_PROBE = SUITES / "default.toml", "deterministic", "prefill_cache_hit"


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
    p.add_argument("--target", choices=TARGETS, default="refserver")
    p.add_argument("--store", type=Path, default=None,
                   help="result store (default: $DETCHECK_CACHE_DIR/store, shared with `detcheck run`)")
    p.add_argument("--python", default=None, help="interpreter that runs the servers")
    p.add_argument("--max-scale", type=int, default=8, metavar="K",
                   help="an unknown verdict is measured again with 2×, 4×, … the prompts up to K× "
                        "(default 8); still unknown: the commit is skipped")
    p.set_defaults(func=run)

    s = sub.add_parser("bisect-step", help="the predicate `bisect` hands to git bisect run",
                       description="Judge BISECT_HEAD (or --commit) against the session's good "
                                   "commit. Exit 0 same, 1 different, 125 cannot be tested, "
                                   "128 the good endpoint failed.")
    s.add_argument("--session", type=Path, required=True, help="the bisect session directory")
    s.add_argument("--commit", default=None, help="judge this commit instead of BISECT_HEAD")
    s.set_defaults(func=run_step)


def run(args: argparse.Namespace) -> int:
    good = Revision.resolve(args.repo, args.good)
    bad = Revision.resolve(args.repo, args.bad)
    spec = BisectSpec(repo=good.repo, good=good.sha, suite=args.suite.resolve(), probes=tuple(args.probe),
                      configs=tuple(args.config), target=args.target,
                      store_root=(args.store or cache_dir() / "store").resolve(),
                      session_dir=session_dir_for(good.repo, good.sha, bad.sha),
                      max_scale=args.max_scale, python=args.python)
    out = bisect(spec, bad.sha)
    print(f"servers launched: {out.launches}")
    return 0 if out.ok else 1


def run_step(args: argparse.Namespace) -> int:
    # git bisect reads any code in 1..127 but 125 as "bad": a harness failure must abort instead.
    try:
        return step(args.session, args.commit)
    except Exception as exc:  # noqa: BLE001 - reported, then the bisect stops
        print(f"bisect-step: {type(exc).__name__}: {exc}", file=sys.stderr)
        return ABORT


def demo(args: argparse.Namespace) -> int:
    """`detcheck demo --scenario bisect`: a seeded history with a planted regression."""
    with tempfile.TemporaryDirectory(prefix="detcheck-demo-") as tmp:
        history = build_demo_history(Path(tmp), seed=args.seed)
        store = Path(tmp, "store") if args.fresh else cache_dir() / "demo-store"
        spec = BisectSpec(repo=history.path, good=history.good, suite=DEMO_SUITE, probes=(DEMO_PROBE,),
                          configs=(DEMO_CONFIG,), store_root=store,
                          session_dir=(args.out or Path(tmp, "session")).resolve())
        print(f"demo bisect: {history.path.name}, seed {args.seed}: regression planted at "
              f"{history.culprit[:12]}, unbuildable commit {history.unbuildable[:12]}", file=sys.stderr)
        out = bisect(spec, history.bad)
    print(f"servers launched: {out.launches}")
    problems = []
    if out.first_bad is None or out.first_bad[0] != history.culprit:
        problems.append(f"found {out.first_bad[0][:12] if out.first_bad else 'nothing'}, "
                        f"planted {history.culprit[:12]}")
    if len(out.steps) > out.bound:
        problems.append(f"{len(out.steps)} steps, bound {out.bound}")
    if not any(e.sha == history.unbuildable and e.exit_code == SKIP for e in out.steps):
        problems.append("the unbuildable commit was not skipped")
    if out.confirmed is not True:
        problems.append("the revert did not confirm the culprit")
    if problems:
        print("demo bisect: " + "; ".join(problems), file=sys.stderr)
        return 1
    print(f"demo bisect: planted commit found in {len(out.steps)} steps (bound {out.bound}), "
          f"unbuildable commit skipped, culprit confirmed by revert", file=sys.stderr)
    return 0
