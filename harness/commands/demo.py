"""detcheck demo: build a reference-server repo with a planted regression and catch it.

Runs entirely on CPU: the reference server in fixtures/refserver stands in for SGLang.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path

from harness.commands import bisect
from harness.commands.run import observer_for
from harness.demo import SCENARIOS, build_repo, check_expected
from harness.report.emit import FORMATS, emit
from harness.revisions import Revision, cache_dir
from harness.run import RunRequest, execute
from harness.store import atomic_write_json


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run a scenario end to end on the CPU reference server",
                       description=__doc__)
    p.add_argument("--scenario", choices=sorted([*SCENARIOS, "bisect"]), default="cache",
                   help="which planted regression to catch (default: cache); bisect: find the "
                        "commit that planted it in a history of 34")
    p.add_argument("--reverse", action="store_true",
                   help="base has the regression, candidate fixes it")
    p.add_argument("--json", type=Path, default=None, help="also write the results JSON here")
    p.add_argument("--out", type=Path, default=None, help="run directory (default: a temp dir)")
    p.add_argument("--fresh", action="store_true", help="ignore stored cells from earlier demo runs")
    p.add_argument("--format", choices=FORMATS, default="console")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--seed", type=int, default=0, help="bisect: where the regression is planted")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.scenario == "bisect":
        return bisect.demo(args)
    scenario = SCENARIOS[args.scenario]
    with tempfile.TemporaryDirectory(prefix="detcheck-demo-") as tmp:
        repo = build_repo(scenario, Path(tmp), reverse=args.reverse)
        out = args.out or Path(tmp) / "run"
        req = RunRequest(
            suite_path=scenario.suite, target="refserver",
            base=Revision.resolve(repo.path, repo.base), candidate=Revision.resolve(repo.path, repo.candidate),
            out_dir=out, store_root=cache_dir() / "demo-store", fresh=args.fresh,
            command_line=shlex.join(["detcheck", *sys.argv[1:]]),
        )
        print(f"demo {scenario.name}: {scenario.summary}"
              f"{' (reversed: base broken, candidate fixed)' if args.reverse else ''}", file=sys.stderr)
        result = execute(req, observer_for(args))
        emit(result, args.format, out)
        if args.json:
            atomic_write_json(args.json, result.to_dict())
    verdicts = {(c.config, c.probe): c.verdict for c in result.comparisons}
    problems = check_expected(scenario, verdicts)
    if problems:
        print("demo: unexpected verdicts: " + "; ".join(problems), file=sys.stderr)
        return 1
    print(f"demo {scenario.name}: expected verdicts reproduced "
          f"({len(result.launches)} launches)", file=sys.stderr)
    return 0
