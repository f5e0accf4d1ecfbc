"""detcheck localize: the first module whose inputs agree and whose output differs, for an exact
*different* row of a stored run, from both sides' tensor dumps on its reproducer."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from harness.commands.common_args import chosen_target
from harness.errors import LaunchError, UsageError
from harness.localize import LOCALIZE_FILE, SECTION_FILE, Localization, localize, markdown, record, summary
from harness.report.format import portable
from harness.result_files import read_run
from harness.suite import load_suite
from harness.targets import get_target

# Exit status when nothing was compared: a side's server wrote no dump, no tensor was compared, or
# the reproducer's answers no longer differed on the dumping servers (README, exit 3: never a pass).
NOTHING_COMPARED = 3


def secret_arg(text: str) -> tuple[str, str]:
    """`--api-key=VALUE` → ("--api-key", "VALUE")."""
    flag, eq, value = text.partition("=")
    if not (flag.startswith("--") and eq):
        raise argparse.ArgumentTypeError(f"{text!r}: not FLAG=VALUE (e.g. --api-key=VALUE)")
    return flag, value


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("localize", help="name the module where an exact different row's sides first differ "
                                         "(SGLang's tensor dumper on its reproducer)", description=__doc__)
    p.add_argument("--out", type=Path, required=True, metavar="RUN_DIR", help="the run (its results.json)")
    p.add_argument("--row", required=True, metavar="CONFIG/PROBE", help="the exact different row to localize")
    p.add_argument("--repo", type=Path, required=True, help="the checkout the run's revisions are in")
    p.add_argument("--python", default=None,
                   help="the interpreter that runs the servers and reads the dumps (it needs torch; "
                        "default: the one running detcheck)")
    p.add_argument("--suite", type=Path, default=None,
                   help="the run's suite: a server environment variable other than CUDA_VISIBLE_DEVICES and "
                        "SGLang's SGLANG_*/SGL_* switches, or one whose value is a path (OPENSSL_CONF, "
                        "LD_PRELOAD, PYTHONPATH, …), is set only as its configuration sets it, never from "
                        "results.json alone")
    p.add_argument("--secret-arg", type=secret_arg, action="append", default=[], metavar="FLAG=VALUE",
                   help="the value of a server flag results.json records as <redacted> (repeatable)")
    p.add_argument("--startup-timeout", type=float, default=900.0, metavar="S",
                   help="seconds a dumping server may take to start (default 900)")
    p.add_argument("--request-timeout", type=float, default=600.0, metavar="S",
                   help="seconds one request may take, its tensors dumped (default 600)")
    p.set_defaults(func=run)


def section(loc: Localization) -> str:
    """A localized row's section as localize.md and the command print it: no path of this
    machine (a model directory reads as the project's, or `…/<last two parts>`)."""
    return markdown(loc, portable)


def run(args: argparse.Namespace) -> int:
    if args.python and shutil.which(args.python) is None:
        raise UsageError(f"--python {args.python}: no such executable")
    result = read_run(args.out)
    named = chosen_target(result.target, args.repo, named_by="the run's results.json")
    try:
        loc = localize(args.out, args.row, args.repo, get_target(named, args.python), args.startup_timeout,
                       args.request_timeout, load_suite(args.suite) if args.suite else None, dict(args.secret_arg))
    except LaunchError as exc:
        print(f"detcheck: localize: {exc}\n{exc.log_tail}", file=sys.stderr)
        return 1
    empty = [s for s in loc.sides if not s.files]
    if empty:
        print(f"detcheck: localize: the {empty[0].role.value}'s server wrote no tensor dump under "
              f"{args.out / empty[0].dumps}: its dumper did not run, nothing compared", file=sys.stderr)
        return NOTHING_COMPARED
    record(args.out, loc, section)
    print(section(loc), end="")
    print(f"recorded in {args.out / LOCALIZE_FILE} and {args.out / SECTION_FILE}", file=sys.stderr)
    if not loc.localized:
        print(f"detcheck: localize: {summary(loc)}", file=sys.stderr)
        return NOTHING_COMPARED
    return 0
