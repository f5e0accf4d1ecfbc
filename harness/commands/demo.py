"""detcheck demo: build a reference-server repo with a planted regression and catch it.

Runs entirely on CPU: the reference server in fixtures/refserver stands in for SGLang.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from harness.bisect import SKIP, BisectSpec, bisect
from harness.commands.common_args import add_format_arg, claim_out_dir, command_line, observer_for
from harness.demo import (BISECT_CONFIG, BISECT_PROBE, BISECT_SUITE, HISTORY_DIR, SCENARIOS, Scenario,
                          build_demo_history, build_repo, check_expected, name_branches, repo_dir, try_commands)
from harness.errors import UsageError
from harness.fixture_repo import check_free
from harness.paths import cache_dir
from harness.report.emit import emit
from harness.result_files import atomic_write_json
from harness.revisions import Revision
from harness.run import RunRequest, execute

def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run a scenario end to end on the CPU reference server",
                       description=__doc__)
    p.add_argument("--scenario", choices=sorted([*SCENARIOS, "bisect"]), default="cache",
                   help="which planted regression to catch (default: cache); bisect: find the "
                        "commit that planted it in a history of 34")
    p.add_argument("--reverse", action="store_true",
                   help="base has the regression, candidate fixes it")
    p.add_argument("--json", type=Path, default=None, help="also write the results JSON here")
    p.add_argument("--out", type=Path, default=None,
                   help="run directory (default: DIR/run with --keep, else a temp dir)")
    p.add_argument("--keep", type=Path, default=None, metavar="DIR",
                   help="leave the demo's repo (branches base, candidate), a 34-commit history with "
                        "the regression planted in it (branches good, main) and the run in DIR, and "
                        "print the run, report and bisect commands to try on them")
    p.add_argument("--fresh", action="store_true", help="ignore stored cells from earlier demo runs")
    p.add_argument("--force", action="store_true",
                   help="replace an earlier run in the run directory (what detcheck wrote there only)")
    add_format_arg(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--seed", type=int, default=0, help="bisect: where the regression is planted")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.scenario == "bisect":
        return demo_bisect(args)
    scenario = SCENARIOS[args.scenario]
    if args.keep:
        check_keep_dir(args.keep, scenario)
    with tempfile.TemporaryDirectory(prefix="detcheck-demo-") as tmp:
        root = args.keep or Path(tmp)
        out = args.out or root / "run"
        claim_out_dir(out, force=args.force, resumable=False)  # as `run` does, before anything is made
        repo = build_repo(scenario, root, reverse=args.reverse)
        req = RunRequest(
            suite_path=scenario.suite, target="refserver",
            base=Revision.resolve(repo.path, repo.base), candidate=Revision.resolve(repo.path, repo.candidate),
            out_dir=out, store_root=cache_dir() / "demo-store", fresh=args.fresh,
            command_line=command_line(),
        )
        print(f"demo {scenario.name}: {scenario.summary}"
              f"{' (reversed: base broken, candidate fixed)' if args.reverse else ''}", file=sys.stderr)
        result = execute(req, observer_for(args))
        emit(result, args.format, out)
        if args.json:
            atomic_write_json(args.json, result.to_dict())
    if args.keep:
        keep(args.keep, scenario, repo.path, req, args.seed)
    verdicts = {(c.config, c.probe): c.verdict for c in result.comparisons}
    problems = [f"unexpected verdict {p}" for p in check_expected(scenario, verdicts)]
    code = demo_outcome(f"demo {scenario.name}", problems,
                        f"expected verdicts reproduced ({len(result.launches)} launches)")
    if not args.keep and not problems:
        print(NEXT_STEPS, file=sys.stderr)
    return code


# What a plain `detcheck demo` ends with: where to go from a demo that worked.
NEXT_STEPS = """
next:
  detcheck demo --keep /tmp/detcheck-demo     keep the demo's repos (and a history to bisect) to try run, report and bisect on
  detcheck run --repo ~/sglang --base main --candidate my-branch --suite suites/default.toml \\
      --python ~/sglang/.venv/bin/python      the same on your SGLang checkout, its servers in SGLang's environment"""


def check_keep_dir(root: Path, scenario: Scenario) -> None:
    """--keep DIR, before anything is made: a directory (or nothing yet), where the places of
    the repositories the demo leaves are free. An earlier demo's are refused, never replaced:
    they may hold the user's work, or be links to anywhere."""
    if root.is_symlink() or root.exists() and not root.is_dir():
        raise UsageError(f"--keep {root}: is {'a link' if root.is_symlink() else 'a file'}, not a directory")
    for path in (repo_dir(scenario, root), root / HISTORY_DIR):
        try:
            check_free(path)
        except UsageError as exc:
            raise UsageError(f"--keep {root}: {exc}; name another directory") from None


def keep(root: Path, scenario: Scenario, repo: Path, req: RunRequest, seed: int) -> None:
    """Name the kept repo's branches, add a history to bisect, print what to try on them."""
    assert req.base.sha and req.candidate.sha  # revisions of the demo's repo, never the installed package
    name_branches(repo, base=req.base.sha, candidate=req.candidate.sha)
    history = build_demo_history(root, seed=seed)
    name_branches(history.path, good=history.good)
    print(f"\nkept in {root}: {repo.name} (branches base, candidate), {history.path.name} (34 commits, "
          f"the regression planted in one: branches good, main) and the run. Try:", file=sys.stderr)
    for line in try_commands(scenario, repo, history.path, req.out_dir):
        print(f"  {line}", file=sys.stderr)


def demo_bisect(args: argparse.Namespace) -> int:
    """`detcheck demo --scenario bisect`: a seeded history with a planted regression."""
    with tempfile.TemporaryDirectory(prefix="detcheck-demo-") as tmp:
        history = build_demo_history(Path(tmp), seed=args.seed)
        store = Path(tmp, "store") if args.fresh else cache_dir() / "demo-store"
        spec = BisectSpec(repo=history.path, good=history.good, suite=BISECT_SUITE, probes=(BISECT_PROBE,),
                          configs=(BISECT_CONFIG,), store_root=store,
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
    return demo_outcome("demo bisect", problems,
                        f"planted commit found in {len(out.steps)} steps (bound {out.bound}), "
                        f"unbuildable commit skipped, culprit confirmed by revert")


def demo_outcome(label: str, problems: list[str], success: str) -> int:
    """A demo's last line and exit code: 1 with what went wrong, 0 with what it showed."""
    if problems:
        print(f"{label}: " + "; ".join(problems), file=sys.stderr)
        return 1
    print(f"{label}: {success}", file=sys.stderr)
    return 0
