"""detcheck matrix: the hardware-matrix entries of matrix.toml, listed or run.

    detcheck matrix list [--json]
    detcheck matrix run ENTRY --repo PATH --base A --candidate B [--baseline FILE]

`run` runs every suite of the entry with its server arguments and environment; an entry with
two or more GPUs starts base and candidate servers at the same time, each on its half of the
GPUs. nox's `validate(<entry>)` sessions call `matrix run`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from harness.commands.common_args import (add_format_arg, add_revision_args, check_baseline_file, claim_out_dir,
                                          command_line, conclude, observer_for, revisions_from)
from harness.matrix import gpu_names, load_matrix
from harness.observer import QuietObserver
from harness.paths import PROJECT_ROOT, cache_dir
from harness.results import Role
from harness.run import RunRequest, execute

DEFAULT_MATRIX = PROJECT_ROOT / "matrix.toml"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("matrix", help="list or run hardware-matrix entries (matrix.toml)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    ls = verbs.add_parser("list", help="entries, and whether this machine can run them")
    ls.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help="matrix file (default: matrix.toml)")
    ls.add_argument("--json", action="store_true", help="as JSON")
    ls.set_defaults(func=run_list)

    r = verbs.add_parser("run", help="run every suite of one entry, base vs candidate")
    r.add_argument("entry", help="entry name")
    r.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help="matrix file (default: matrix.toml)")
    add_revision_args(r)
    r.add_argument("--out", type=Path, default=None,
                   help="output directory, one subdirectory per suite (default results/runs/<entry>-<time>)")
    r.add_argument("--store", type=Path, default=None, help="result store (default: $DETCHECK_CACHE_DIR/store)")
    r.add_argument("--fresh", action="store_true", help="ignore stored cells and measure again")
    r.add_argument("--force", action="store_true", help="replace the runs an existing --out holds")
    r.add_argument("--baseline", type=Path, default=None, metavar="FILE",
                   help="also gate each candidate cell on this baselines file")
    add_format_arg(r)
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    r.set_defaults(func=run_entry)


def run_list(args: argparse.Namespace) -> int:
    matrix, here = load_matrix(args.matrix), gpu_names()
    rows = [{"name": e.name, "gpu": e.gpu, "gpus": e.gpus, "target": e.target,
             "suites": [str(s) for s in e.suites], "parallel": e.parallel,
             "runnable_here": e.missing(here) is None, "why_not": e.missing(here)} for e in matrix.entries]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for row in rows:
        where = "runs here" if row["runnable_here"] else f"skipped here: {row['why_not']}"
        print(f"{row['name']:<16} {row['gpus']}× {row['gpu'] or 'CPU':<6} {row['target']:<9} "
              f"{'parallel' if row['parallel'] else 'interleaved':<11} {where}")
    return 0


def run_entry(args: argparse.Namespace) -> int:
    entry = load_matrix(args.matrix).entry(args.entry)
    check_baseline_file(args.baseline)
    base, candidate = revisions_from(args)
    root = args.out or Path("results", "runs", f"{entry.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    gpu_env = {Role(k): v for k, v in entry.gpu_env(os.environ.get("CUDA_VISIBLE_DEVICES")).items()}
    codes = []
    for suite in entry.suites:
        claim_out_dir(root / suite.stem, resume=False, force=args.force)
        req = RunRequest(
            suite_path=suite, target=entry.target, base=base, candidate=candidate,
            out_dir=root / suite.stem, store_root=args.store or cache_dir() / "store", fresh=args.fresh,
            role_env=gpu_env, extra_args=entry.server_args, extra_env=entry.env,
            parallel_roles=entry.parallel, command_line=command_line())
        side_by_side = ", ".join(f"{r.value} on GPU {e['CUDA_VISIBLE_DEVICES']}" for r, e in gpu_env.items())
        print(f"matrix {entry.name}: {suite.name}"
              f"{f' ({side_by_side}, at the same time)' if entry.parallel else ''}", file=sys.stderr)
        # Progress bars are one shared display: with two roles at once, report only at the end.
        result = execute(req, QuietObserver() if entry.parallel else observer_for(args))
        codes.append(conclude(result, args.format, req.out_dir, args.baseline))
    return max(codes)
