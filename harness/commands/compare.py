"""detcheck compare: compare the cells of two stored runs, without launching anything.

Each side is a run directory (or its results.json). From each run the candidate revision's
cells are taken by default (two candidates measured against one base, or one candidate on two
machines); --side base takes the base revision's. Cells pair by (configuration, probe) and are
judged with the suite's floors (--suite, default: the suite the base run recorded); a pair
measured with different server configurations or workloads is reported as not comparable.
Prints through the same renderers as `detcheck run`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from harness.commands.report import load_run
from harness.commands.run import exit_code
from harness.compare import compare_run, overall
from harness.errors import UsageError
from harness.plan import load_suite
from harness.probes import known_probes
from harness.report.emit import FORMATS, emit
from harness.results import CellResult, ProbeComparison, RevisionInfo, Role, RunResult


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="compare two stored runs' results (no server)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base-results", type=Path, required=True, metavar="RUN")
    p.add_argument("--candidate-results", type=Path, required=True, metavar="RUN")
    p.add_argument("--side", choices=[r.value for r in Role], default=Role.CANDIDATE.value,
                   help="which revision's cells to take from each run (default: candidate)")
    p.add_argument("--suite", type=Path, default=None,
                   help="suite whose floors judge the pairs (default: the base run's suite)")
    p.add_argument("--out", type=Path, default=None, help="also write report.md (and plots) here")
    p.add_argument("--format", choices=FORMATS, default="console")
    p.set_defaults(func=run)


def compare_runs(base_run: RunResult, cand_run: RunResult, side: Role,
                 probe_params: dict, command: str = "") -> RunResult:
    """A RunResult whose base cells are `base_run`'s `side` cells, candidate cells `cand_run`'s."""
    base = [c.with_role(Role.BASE) for c in base_run.cells if c.role == side]
    cand = [c.with_role(Role.CANDIDATE) for c in cand_run.cells if c.role == side]
    order = list(dict.fromkeys((c.config, c.probe) for c in (*base, *cand)))
    by_key = {(c.config, c.probe, c.role): c for c in (*base, *cand)}
    comparisons = tuple(_comparable(comp, by_key.get((comp.config, comp.probe, Role.BASE)),
                                    by_key.get((comp.config, comp.probe, Role.CANDIDATE)))
                        for comp in compare_run((*base, *cand), probe_params, order))

    def revision(run: RunResult) -> RevisionInfo:
        return run.base if side == Role.BASE else run.candidate

    return RunResult(
        suite=base_run.suite, target=base_run.target, base=revision(base_run), candidate=revision(cand_run),
        cells=(*base, *cand), comparisons=comparisons, launches=(),
        metadata={"command": command, "compared_from": [base_run.metadata.get("started_at"),
                                                        cand_run.metadata.get("started_at")]},
    )


def _comparable(comp: ProbeComparison, base: CellResult | None, cand: CellResult | None) -> ProbeComparison:
    """asv's `x`: a pair measured on different configurations or workloads is not a comparison."""
    if base is None or cand is None:
        return comp
    for what, a, b in (("server configuration", base.config_fingerprint, cand.config_fingerprint),
                       ("workload", base.workload_fingerprint, cand.workload_fingerprint)):
        if a != b:
            return ProbeComparison(comp.config, comp.probe, "error",
                                   note=f"not comparable: {what} differs ({a} vs {b})")
    return comp


def run(args: argparse.Namespace) -> int:
    base_run, cand_run = load_run(args.base_results), load_run(args.candidate_results)
    suite_path = args.suite or Path(base_run.metadata.get("suite_path") or "")
    if not suite_path.is_file():
        raise UsageError(f"the base run's suite {str(suite_path)!r} is not here; pass --suite FILE")
    suite = load_suite(suite_path, known_probes())
    result = compare_runs(base_run, cand_run, Role(args.side), suite.probe_params,
                          shlex.join(["detcheck", *sys.argv[1:]]))
    emit(result, args.format, args.out)
    return exit_code(overall(result.comparisons))
