"""detcheck baseline: write reference values and bounds from stored runs, or gate a run on them.

    detcheck baseline populate --results RUN [--results RUN ...] --out baselines/FILE.json
    detcheck baseline check --results RUN --baseline baselines/FILE.json

populate merges into an existing --out file (entries of the same model, configuration, GPU,
probe and metric are replaced). `detcheck run --baseline FILE` gates a fresh run the same way.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness import baseline
from harness.commands.common_args import print_gate
from harness.result_files import read_run
from harness.results import Role


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("baseline", help="populate a baselines file from stored runs, or check a run",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    pop = verbs.add_parser("populate", help="derive references and bounds from stored runs")
    pop.add_argument("--results", type=Path, action="append", required=True, metavar="RUN",
                     help="a run directory or results.json (repeatable: runs are pooled)")
    pop.add_argument("--out", type=Path, required=True, help="baselines file to write (merged if it exists)")
    pop.add_argument("--side", choices=[r.value for r in Role], default=Role.CANDIDATE.value,
                     help="which revision's cells of each run (default: candidate)")
    pop.add_argument("--margin", type=float, default=0.05,
                     help="noisy metrics: relative bound on the worse side of the reference "
                          "(default 0.05, TensorRT-LLM's min = 0.95·ref); written into the file")
    pop.set_defaults(func=run_populate)

    chk = verbs.add_parser("check", help="gate a stored run's candidate cells on a baselines file")
    chk.add_argument("--results", type=Path, required=True, metavar="RUN")
    chk.add_argument("--baseline", type=Path, required=True, metavar="FILE")
    chk.set_defaults(func=run_check)


def run_populate(args: argparse.Namespace) -> int:
    runs = [(str(path), read_run(path)) for path in args.results]
    fresh = baseline.populate(runs, Role(args.side), args.margin)
    merged = baseline.load(args.out).merged(fresh) if args.out.exists() else fresh
    merged.save(args.out)
    print(f"baseline: {len(fresh.entries)} entries from {len(runs)} run(s) written to {args.out} "
          f"({len(merged.entries)} in the file)")
    for e in sorted(fresh.entries, key=lambda e: e.key):
        print(f"  {e.config}/{e.probe} {e.metric} ({e.kind}): reference {e.reference:.6g}, "
              f"bounds {e.bounds()} on {e.model}, {e.gpu}")
    return 0


def run_check(args: argparse.Namespace) -> int:
    return print_gate(args.baseline, read_run(args.results))

