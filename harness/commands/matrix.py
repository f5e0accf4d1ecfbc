"""detcheck matrix: the hardware-matrix entries of matrix.toml, listed or run.

    detcheck matrix list [--json]
    detcheck matrix run ENTRY --repo PATH --base A --candidate B [--baseline FILE]

`run` runs every suite of the entry with its server arguments and environment, all of them in one
slot pool (every job of every suite queues for the same slots, so the suites overlap; results
are still one directory per suite), as many servers at once as the entry has slots:
gpus × servers_per_gpu (or --servers-per-gpu), each pinned to its GPU; without servers_per_gpu,
an entry with two or more GPUs starts base and candidate servers at the same time, each on its
half of the GPUs. nox's `validate(<entry>)` sessions call `matrix run`.
The target is the entry's `target`; an entry that names none runs the one the --repo checkout
holds, as `run` and `bisect` choose it.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path

from harness.commands.common_args import (EXIT_NOTHING_MEASURED, add_env_args, add_format_arg, add_python_args,
                                          add_revision_args, add_start_order_args, check_baseline_file,
                                          check_pythons, chosen_target, claim_out_dir, command_line, conclude,
                                          default_out, env_options_from, observer_for, revisions_from,
                                          role_pythons, start_order_from)
from harness.matrix import gpu_names, load_matrix
from harness.paths import PROJECT_ROOT, cache_dir
from harness.report.junit import junit_xml_runs
from harness.result_files import atomic_write_text
from harness.run import RunRequest, execute_together
from harness.errors import UsageError
from harness.matrix import MatrixEntry
from harness.suite import load_suite
from harness.pipeline.slots import Slot, entry_slots, suite_gpus_per_server
from harness.slurm import add_slurm_args
from harness.slurm import options_from as slurm_options_from
from harness.slurm import run_entry as run_on_slurm

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
    r.add_argument("entry", help="entry name. Target: the entry's `target` where it names one, "
                   "else what --repo holds (python/sglang: sglang; python/refserver, a fixture repo: "
                   "refserver), refserver without --repo; printed at the start")
    r.add_argument("--matrix", type=Path, default=DEFAULT_MATRIX, help="matrix file (default: matrix.toml)")
    add_revision_args(r)
    r.add_argument("--out", type=Path, default=None,
                   help="output directory, one subdirectory per suite (default: "
                        "$DETCHECK_CACHE_DIR/runs/<entry>-<time>, printed)")
    r.add_argument("--store", type=Path, default=None, help="result store (default: $DETCHECK_CACHE_DIR/store)")
    r.add_argument("--fresh", action="store_true", help="ignore stored cells and measure again")
    r.add_argument("--force", action="store_true", help="replace the runs an existing --out holds")
    r.add_argument("--partition", type=int, default=0, metavar="K",
                   help="only the suites of the entry's K-th CI job (1-based) of its `partitions`, split "
                        "longest-processing-time by each suite's est_time (`nox -l --json -t matrix` lists them)")
    r.add_argument("--servers-per-gpu", type=int, default=None, metavar="N",
                   help="servers at once on each GPU instead of the entry's servers_per_gpu "
                        "(fewer when host or GPU memory is short)")
    add_python_args(r, default="the entry's `python` in the matrix file, else the one running detcheck")
    add_env_args(r)
    add_start_order_args(r)
    r.add_argument("--baseline", type=Path, default=None, metavar="FILE",
                   help="also gate each candidate cell on this baselines file")
    r.add_argument("--junit-xml", type=Path, default=None, metavar="FILE",
                   help="also write the runs as JUnit XML: a test suite per suite, a test case per "
                        "(configuration, probe), failed when it differs or errs")
    add_slurm_args(r, "the entry's jobs (one per revision and configuration; one of both sides where its "
                      "probes interleave)")
    add_format_arg(r)
    r.add_argument("--no-progress", action="store_true", help="no progress bars")
    r.set_defaults(func=run_entry)


def gpus_per_server(entry: MatrixEntry) -> int:
    """GPUs one server of the entry spans: declared, else its widest configuration's flags
    (the suites' own and the entry's server_args) at the entry's target."""
    if entry.gpus_per_server is not None or entry.target is None:
        return entry.gpus_per_server or 1
    return suite_gpus_per_server([load_suite(path) for path in entry.suites], entry.target, entry.server_args)


def placement(slots: tuple[Slot, ...]) -> str:
    """Where the servers go, for the log: each role on its GPUs, or N slots over the GPUs."""
    if all(slot.role is not None for slot in slots):
        sides = ", ".join(f"{role.value} on GPU {s.env['CUDA_VISIBLE_DEVICES']}" for s in slots
                          if (role := s.role) is not None)
        return f" ({sides}, at the same time)"
    if len(slots) == 1 and slots[0].exclusive:
        return (f" (one server at a time on GPU {slots[0].env['CUDA_VISIBLE_DEVICES']}: base and candidate "
                f"in turn, noisy probes not interleaved)")
    gpus = ",".join(sorted({s.env["CUDA_VISIBLE_DEVICES"] for s in slots if "CUDA_VISIBLE_DEVICES" in s.env}))
    return f" ({len(slots)} server slot{'s' if len(slots) != 1 else ''}{f' on GPU {gpus}' if gpus else ''})"


def run_list(args: argparse.Namespace) -> int:
    matrix, here = load_matrix(args.matrix), gpu_names()
    rows = []
    for e in matrix.entries:
        try:
            width = gpus_per_server(e)
        except UsageError:  # a suite that does not load here (its models are on the GPU machine)
            width = e.gpus_per_server or 1
        try:
            slots, why_not = entry_slots(e, None, per_server=width), e.missing(here)  # wherever its GPUs are
        except UsageError as exc:  # a server wider than the entry: no machine runs it
            slots, why_not = (), str(exc)
        rows.append({"name": e.name, "gpu": e.gpu, "gpus": e.gpus, "target": e.target,
                     "suites": [str(s) for s in e.suites], "parallel": len(slots) >= 2,
                     "gpus_per_server": width, "slots": len(slots), "runner": e.runner_label,
                     "est_time": e.estimate(), "jobs": [{"id": job, "partition": part, "est_time": est}
                                                        for job, part, est in e.jobs()],
                     "runnable_here": why_not is None, "why_not": why_not})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for row in rows:
        where = "runs here" if row["runnable_here"] else f"skipped here: {row['why_not']}"
        slot_count = f"{row['slots']} server slot{'s' if row['slots'] != 1 else ''}"
        target = row["target"] or "checkout"  # none named: what --repo holds
        print(f"{row['name']:<16} {row['gpus']}× {row['gpu'] or 'CPU':<6} {target:<9} {slot_count:<15} {where}")
    return 0


def suite_folders(suites: tuple[Path, ...] | list[Path]) -> list[str]:
    """Each suite's run folder under the entry's --out: its file stem, or where two suites share
    a stem (suites/a/kl.toml, suites/b/kl.toml), the stem and its path's digest, so that no two
    suites' runs ever write one folder."""
    stems = [suite.stem for suite in suites]
    return [stem if stems.count(stem) == 1 else
            f"{stem}-{hashlib.sha256(str(suite.resolve()).encode()).hexdigest()[:8]}"
            for suite, stem in zip(suites, stems)]


def run_entry(args: argparse.Namespace) -> int:
    entry = load_matrix(args.matrix).entry(args.entry)
    if (why_not := entry.missing(gpu_names())) is not None:  # as nox's validate(<entry>) skips it
        print(f"matrix {entry.name}: skipped: {why_not}", file=sys.stderr)
        return EXIT_NOTHING_MEASURED
    check_baseline_file(args.baseline)
    slurm = slurm_options_from(args)
    target = chosen_target(entry.target, args.repo, f"`target` in {args.matrix.name}'s [[entry]] {entry.name!r}")
    entry = dataclasses.replace(entry, target=target)
    base, candidate = revisions_from(args)
    root = args.out or default_out(entry.name)
    slots = entry_slots(entry, os.environ.get("CUDA_VISIBLE_DEVICES"), args.servers_per_gpu, gpus_per_server(entry))
    env_options = env_options_from(args)
    python = args.python or entry.python
    check_pythons({"--python" if args.python else f"{entry.name}.python": python,
                   "--base-python": args.base_python, "--candidate-python": args.candidate_python})
    start_order = start_order_from(args, entry.order_from, entry.first_per_model)
    folders = dict(zip(entry.suites, suite_folders(entry.suites)))  # of every suite: partitions share --out
    if args.partition:
        entry = dataclasses.replace(entry, suites=entry.partition(args.partition))
    reqs = []
    for suite in entry.suites:
        folder = folders[suite]
        claim_out_dir(root / folder, force=args.force)
        reqs.append(RunRequest(
            suite_path=suite, target=target, base=base, candidate=candidate,
            out_dir=root / folder, store_root=args.store or cache_dir() / "store", fresh=args.fresh,
            slots=slots, start_order=start_order, extra_args=entry.server_args, extra_env=entry.env, env_options=env_options,
            python=python, role_python=role_pythons(args.base_python, args.candidate_python),
            command_line=command_line()))
    print(f"matrix {entry.name}: {', '.join(s.name for s in entry.suites)} on target {entry.target}, "
          f"in one pool{placement(slots)}", file=sys.stderr)
    if slurm is not None:
        results = run_on_slurm(entry, args.matrix, tuple(reqs), slurm)
    else:
        results = execute_together(tuple(reqs), observer_for(args))
    if args.junit_xml is not None:
        atomic_write_text(args.junit_xml, junit_xml_runs(list(results)))
    code = max(conclude(result, args.format, req.out_dir, args.baseline) for req, result in zip(reqs, results))
    # On stderr: stdout may be the runs' JSON.
    print(f"matrix {entry.name}: results and reports in {root}/ "
          f"({', '.join(req.out_dir.name + '/' for req in reqs)})", file=sys.stderr)
    return code
