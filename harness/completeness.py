"""Whether a run's record may be read as a pass: complete, judged in full, with the suite's
parameters. A pass is proven, never what is left when nothing was found.

A record carries its plan (`RunResult.plan`): every (configuration, probe, side) cell the run
set out to measure and the judging parameters it was planned with; only the run's last step
marks it complete. `gaps` names what a record lacks against its own plan (no plan, not
complete, a planned cell or row missing, a cell of another revision, a cell or row the plan
never had); `suite_gaps` what it lacks against the suite it claims to be a run of (another
suite, pairs of the suite never planned, parameters that differ, above all ones that narrow
what decides). Every command that exits 0 on a run's verdict (`run`, `report --check`,
`matrix run`, `baseline check`, `bisect`'s steps) asks `gaps` first: any gap is no pass.
"""

from __future__ import annotations

import math
from typing import Any

from harness.probes import PROBES
from harness.results import Role, RunResult
from harness.suite import Suite

# Gaps said in full up to this many; the rest counted (a killed run of 40 pairs is one story).
SHOWN = 8


def gaps(result: RunResult) -> list[str]:
    """What keeps `result` from being a complete record of its plan, in words; empty: every
    planned cell is there and of this run's revisions, every planned pair has its row."""
    plan = result.plan
    if plan is None:
        return [f"the file records no plan (written by harness {result.metadata.get('harness_version', '?')} "
                f"before schema 4, or its plan removed): what the run set out to measure is unknown"]
    out = [] if plan.complete else [
        "the run did not finish: its last step never marked the record complete (killed, interrupted, "
        "or a Slurm job's results not all merged)"]
    sides = {role for _, _, role in plan.cells}
    if len(sides) < 2:
        out.append(f"the plan measures {' and '.join(sorted(r.value for r in sides)) or 'no'} side only: "
                   f"no pair is judged")
    out += [f"{config} / {probe}: {', '.join(lacks)}" for (config, probe), lacks in pair_lacks(result).items()]
    planned = set(plan.cells)
    out += [f"{c.config} / {c.probe}: a {c.role.value} cell the plan never had" for c in result.cells
            if (c.config, c.probe, c.role) not in planned]
    pairs = set(plan.pairs())
    out += [f"{c.config} / {c.probe}: a comparison row the plan never had" for c in result.comparisons
            if (c.config, c.probe) not in pairs]
    return out


def pair_lacks(result: RunResult) -> dict[tuple[str, str], list[str]]:
    """What each planned (configuration, probe) pair lacks of this run's evidence, in words (a
    side's cell, a cell of this run's revision, its comparison row), in plan order; a pair that
    lacks nothing is left out, and so is every pair of a record with no plan."""
    plan = result.plan
    if plan is None:
        return {}
    cells = {(c.config, c.probe, c.role): c for c in result.cells}
    planned = set(plan.cells)
    rows = {(c.config, c.probe) for c in result.comparisons}
    both_sides = len({role for _, _, role in plan.cells}) == 2
    out: dict[tuple[str, str], list[str]] = {}
    for config, probe in plan.pairs():
        lacks = []
        for side in (Role.BASE, Role.CANDIDATE):
            if (config, probe, side) not in planned:
                continue
            cell, sha = cells.get((config, probe, side)), (result.base if side == Role.BASE else result.candidate).sha
            if cell is None:
                lacks.append(f"no {side.value} cell")
            elif sha is not None and cell.revision.sha != sha:
                lacks.append(f"its {side.value} cell measured {cell.revision.short}, not the run's {side.value} "
                             f"{sha[:12]}")
        if both_sides and (config, probe) not in rows:
            lacks.append("no comparison row")
        if lacks:
            out[(config, probe)] = lacks
    return out


def suite_gaps(result: RunResult, suite: Suite) -> list[str]:
    """Where `result` is not judged as `suite` judges: another suite's run, pairs the suite
    declares that the run never planned, judging parameters that differ from the suite's (one
    that narrows what decides said so). Empty: judged with the suite's own parameters."""
    if result.suite != suite.name:
        return [f"the file is a run of suite {result.suite!r}, not of {suite.name!r} ({suite.path})"]
    stored = result.judging_params()
    if stored is None:
        return ["the file records no judging parameters: it cannot be judged with the suite's"]
    out = []
    planned = set(result.plan.pairs()) if result.plan is not None else {(c.config, c.probe) for c in result.comparisons}
    out += [f"{c.name} / {p}: in the suite, not in the run's plan" for c in suite.configs for p in c.probes
            if (c.name, p) not in planned]
    for probe in dict.fromkeys(p for _, p in planned):
        if probe not in PROBES:
            continue
        raw = stored.get(probe)
        if not isinstance(raw, dict):
            out.append(f"{probe}: the file records no parameters for it")
            continue
        theirs = PROBES[probe].validate({k: v for k, v in raw.items() if v is not None}, f"plan.probe_params.{probe}")
        ours = suite.probe_spec(probe).params
        for key in sorted(set(theirs) | set(ours)):
            if theirs.get(key) != ours.get(key):
                narrows = " (narrows what decides)" if narrower(key, theirs.get(key), ours.get(key)) else ""
                out.append(f"{probe}.{key}: the file's {theirs.get(key)!r}, the suite's {ours.get(key)!r}{narrows}")
    return out


def narrower(key: str, theirs: Any, ours: Any) -> bool:
    """Whether the file's value of a judging parameter lets fewer changes decide than the
    suite's: fewer deciding metrics, a wider floor, a smaller alpha."""
    if key == "verdict_metrics":
        return theirs is not None and (ours is None or not set(ours) <= set(theirs))
    if key in ("floor_abs", "floor_rel"):
        return _number(theirs) and _number(ours) and theirs > ours
    if key == "alpha":
        return _number(theirs) and _number(ours) and theirs < ours
    if key == "floors":
        theirs, ours = theirs or {}, ours or {}
        return any(_number(theirs.get(m, {}).get(edge)) and theirs[m][edge] > (ours.get(m, {}).get(edge) or 0.0)
                   for m in theirs for edge in ("absolute", "relative"))
    return False


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def summary(found: list[str]) -> str:
    """The gaps as one line: the first SHOWN in full, the rest counted."""
    shown = "; ".join(found[:SHOWN])
    return shown + (f"; and {len(found) - SHOWN} more" if len(found) > SHOWN else "")
