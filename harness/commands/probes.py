"""detcheck probes: every registered probe (this package's and those of `detcheck.probes` entry
points) with its kind (exact or noisy metrics), its parameters and their defaults, and its
one-line doc: what a suite's `probes = [...]` and `[probe.<name>]` tables may name."""

from __future__ import annotations

import argparse
from typing import Mapping

from harness.suite import WorkloadSpec
from harness.probes import known_probes
from harness.probes.base import PIPELINE_FIGURES, Figure, FigureRole, ProbeKind


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("probes", help="list the probes: kind, parameters with defaults, doc", description=__doc__)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("\n".join(listing(known_probes())))
    return 0


def listing(probes: Mapping[str, ProbeKind]) -> list[str]:
    """A block per probe, by name: `name  kind`, its doc, then `key=default` per parameter."""
    out: list[str] = []
    for name in sorted(probes):
        kind = probes[name]
        out += [f"{name}  ({metric_kinds(kind)})", f"  {kind.summary}"]
        out += [f"    {p.name}={p.default!r}  {p.role.value}: {p.doc}" for p in kind.params]
    return out


def metric_kinds(kind: ProbeKind) -> str:
    """The kinds of the metrics a probe plans under its defaults, in words: "exact", "noisy", or
    per mode where deterministic inference changes them ("exact under deterministic mode, noisy
    otherwise")."""
    if kind.planned is None:
        return "metrics not declared"
    planned = kind.planned
    params, workload = kind.defaults(), WorkloadSpec()

    def kinds(deterministic: bool) -> str:
        return " and ".join(sorted({m.kind.value for m in planned(params, workload, deterministic)}))
    det, other = kinds(True), kinds(False)
    return det if det == other else f"{det} under deterministic mode, {other} otherwise"


def docs_table(probes: Mapping[str, ProbeKind]) -> list[str]:
    """docs/PROBES.md's table of the shipped probes, one row per probe from its declarations
    (tests/probes/test_registry.py checks the file holds exactly this)."""
    rows = [f"| `{name}` | {metric_kinds(probes[name])} | {probes[name].summary} |" for name in sorted(probes)]
    return ["| probe | metrics | what it checks |", "|---|---|---|", *rows]


def _figure_row(owner: str, figure: Figure) -> str:
    role = figure.role
    if role == FigureRole.METRIC:
        decides = "decides (exact figures under deterministic mode; a noisy one against its floor)"
    elif role in (FigureRole.SUMMARY, FigureRole.LOCATOR):
        decides = f"decides through `{figure.of}` ({role.value} of it)"
    elif role == FigureRole.PARAMETER:
        decides = "input: the parameter"
    elif role == FigureRole.INPUT:
        decides = f"input: {figure.of}"
    else:
        aa = f"A/A: `{figure.aa}`" if figure.aa else "**no A/A test yet**"
        decides = f"descriptive: {figure.of}; {aa}"
    return f"| `{owner}` | `{figure.name}` | {decides} |"


def figures_table(probes: Mapping[str, ProbeKind]) -> list[str]:
    """docs/PROBES.md's table of every figure every shipped probe records (and what the pipeline
    adds to every cell), deciding or not and why, each descriptive one with its A/A test
    (tests/probes/test_registry.py checks the file holds exactly this)."""
    rows = [_figure_row(name, f) for name in sorted(probes)
            for f in sorted(probes[name].figures, key=lambda f: (f.name, f.role.value))]
    rows += [_figure_row("every probe", f) for f in sorted(PIPELINE_FIGURES, key=lambda f: (f.name, f.role.value))]
    return ["| probe | figure | decides? |", "|---|---|---|", *rows]
