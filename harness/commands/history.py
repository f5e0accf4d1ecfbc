"""detcheck history: a suite over a range of revisions, as a static dashboard.

Each revision is measured once (one server per configuration; the store serves a revision to
both pairs it belongs to, and to the next history: appending a nightly measures only it).
Exact figures are compared between neighbours by the normal comparison; noisy series
(throughput, accept length off deterministic mode, SWA peaks under load) are judged by
change-point detection (ruptures' PELT, rank cost), and each change point is confirmed by a
paired run of its two neighbours. Writes into --out: index.html (opens offline), history.json
(the series, for other tools), pairs/<older>-<newer>/ (each pair's results.json, report.md and
a differing row's reproducer.json) and runs/<sha>/ (each revision's own run).

Exit codes: 0 nothing changed, 1 something changed (an exact difference, or a change point the
paired run confirmed), 2 bad input.
"""

from __future__ import annotations

import argparse
import io
import shutil
import sys
from pathlib import Path

from harness.commands.common_args import (add_env_args, add_target_arg, chosen_target, env_options_from,
                                          parse_overrides)
from harness.errors import UsageError
from harness.history.build import build_history
from harness.history.dashboard import FEED, INDEX, write_dashboard
from harness.history.measure import HistorySpec, measure
from harness.history.model import RevisionSelection, select_revisions
from harness.paths import cache_dir
from harness.report.emit import emit
from harness.result_files import write_run
from harness.results import RunResult


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("history", help="a suite over a range of revisions: change points and a static dashboard",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repo", type=Path, required=True, help="git repository (SGLang or a fixture repo)")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--revs", default="", metavar="A..B|R1,R2,…",
                       help="A..B: A and every first-parent commit after it up to B; or a comma-separated list, oldest first")
    which.add_argument("--last", type=int, default=0, metavar="N", help="the last N first-parent commits up to --until")
    which.add_argument("--tags", default="", metavar="A..B", help="every tagged commit of A..B (A included where tagged)")
    p.add_argument("--until", default="HEAD", metavar="REF", help="where --last counts back from (default HEAD)")
    p.add_argument("--suite", type=Path, required=True, help="suite TOML file")
    p.add_argument("--out", type=Path, required=True,
                   help="the dashboard's folder (index.html, history.json, pairs/, runs/): new, empty, or an "
                        "earlier history's, which is replaced (its measurements stay in the store)")
    p.add_argument("--config", action="append", default=[], metavar="NAME", help="only this configuration (repeatable)")
    p.add_argument("--probe", action="append", default=[], metavar="NAME", help="only this probe (repeatable)")
    p.add_argument("--set", action="append", default=[], metavar="PROBE.PARAM=VALUE", dest="overrides",
                   help="a probe parameter over the suite's (repeatable, as `detcheck run --set`)")
    add_target_arg(p)
    p.add_argument("--store", type=Path, default=None,
                   help="result store (default: $DETCHECK_CACHE_DIR/store, shared with `run` and `bisect`)")
    p.add_argument("--python", default=None, help="interpreter that runs the servers")
    p.add_argument("--slots", type=int, default=1, metavar="N",
                   help="servers up at once while measuring the revisions (default 1)")
    add_env_args(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.slots < 1:
        raise UsageError(f"--slots {args.slots}: at least 1")
    revisions = select_revisions(args.repo, RevisionSelection(args.revs, args.last, args.until, args.tags))
    repo = revisions[0].repo
    assert repo is not None, "Revision.resolve gives every commit its repository"
    spec = HistorySpec(repo=repo, suite=args.suite.resolve(), target=chosen_target(args.target, repo),
                       store_root=(args.store or cache_dir() / "store").resolve(), out_dir=args.out.resolve(),
                       configs=tuple(args.config), probes=tuple(args.probe),
                       overrides=parse_overrides(args.overrides), overrides_text=tuple(args.overrides),
                       python=args.python, env_options=env_options_from(args), slots=args.slots)
    claim_history_dir(spec.out_dir)
    print(f"history: {len(revisions)} revisions, {revisions[0].short()} … {revisions[-1].short()}", file=sys.stderr)
    measured = measure(spec, revisions)
    history = build_history(spec, revisions, measured, write_pair)
    index = write_dashboard(history, spec.out_dir)
    changes = [(history.points[i].label, t.config, t.probe, what) for t in history.timelines for i, what in t.changes]
    for label, config, probe, what in changes:
        print(f"changed at {label}: {config}/{probe}: {what}")
    print(f"servers launched: {history.cost.measured_servers} to measure "
          f"({history.cost.reused_revisions} of {len(revisions)} revisions wholly from the store), "
          f"{history.cost.confirmation_servers} to confirm change points")
    print(f"dashboard: {index}")
    gaps = history.gaps()
    for gap in gaps[:MAX_GAPS_SHOWN]:
        print(f"detcheck: history: not a pass: {gap}", file=sys.stderr)
    if len(gaps) > MAX_GAPS_SHOWN:
        print(f"detcheck: history: not a pass: and {len(gaps) - MAX_GAPS_SHOWN} more (history.json)", file=sys.stderr)
    # `changes` holds a change point its paired run could not decide (unknown) too: only a
    # rejected one (the paired run read same) is left out, so either is no pass.
    return 1 if changes or gaps else 0


# The gaps a history prints; the feed and the page hold every one.
MAX_GAPS_SHOWN = 20


def claim_history_dir(out: Path) -> None:
    """`out` empty, absent, or an earlier history's folder (its files removed: a pair that is no
    longer a neighbour must not linger); anything else there is someone's, and exit 2."""
    if not out.exists():
        return
    if not out.is_dir() or out.is_symlink():
        raise UsageError(f"--out {out}: not a directory")
    entries = {p.name for p in out.iterdir()}
    if entries and FEED not in entries:
        raise UsageError(f"--out {out}: holds files that are not a history's ({', '.join(sorted(entries)[:3])}…); "
                         f"name an empty or new folder")
    for name in (INDEX, FEED):
        (out / name).unlink(missing_ok=True)
    for name in ("pairs", "runs"):
        shutil.rmtree(out / name, ignore_errors=True)


def write_pair(result: RunResult, out: Path) -> None:
    """A pair's results.json and report.md (plots included), as `detcheck run` writes them."""
    write_run(out, result)
    emit(result, "md", out, stream=io.StringIO())
