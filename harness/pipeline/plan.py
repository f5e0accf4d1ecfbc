"""Planning: which configurations and probes a request runs (`plan`), and
how its jobs group into units and order their cells. Pure over the suite and the request:
nothing here checks anything out or starts anything.
"""

from __future__ import annotations

import dataclasses

from harness.errors import UsageError
from harness.jobs import ConfigPlan, RunRequest
from harness.pipeline.slots import Unit, side_by_side
from harness.probes import PROBES, known_probes
from harness.results import Role
from harness.verdict_stats import Kind
from harness.suite import Suite, WorkloadSpec, check_deterministic_chunking, check_reserved, load_suite
from harness.workloads import build as build_workload


def with_references(suite: Suite, chosen: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """The configurations (and their probes) a `--config`/`--probe` choice leaves out that a
    chosen one is compared with (`ProbeKind.reference`): each runs the probe that reads it, so
    that the comparison has its cells."""
    added: dict[str, tuple[str, ...]] = {}
    for name, probes in chosen.items():
        for probe in probes:
            kind = known_probes()[probe]
            if kind.reference is None:
                continue
            running = [c.name for c in suite.configs if probe in c.probes]
            ref = kind.reference(name, suite.probe_spec(probe).params, running)
            if ref is not None and probe not in chosen.get(ref, ()) and probe not in added.get(ref, ()):
                added[ref] = (*chosen.get(ref, ()), *added.get(ref, ()), probe)
    return added


def plan_request(req: RunRequest) -> tuple[Suite, tuple[ConfigPlan, ...]]:
    """The request's suite, loaded with its `--set` overrides, and its plan: every bad input the
    suite and the request's filters hold is a UsageError here (bisect checks its input so, before
    its first run)."""
    suite = load_suite(req.suite_path, known_probes(), req.overrides)
    return suite, plan(suite, req)


def plan(suite: Suite, req: RunRequest) -> tuple[ConfigPlan, ...]:
    specs = [suite.config(n) for n in dict.fromkeys(req.only_configs)] if req.only_configs \
        else list(suite.configs)
    check_reserved(req.extra_args, "--server-arg")
    for p in req.only_probes:
        if p not in known_probes():
            raise UsageError(f"unknown probe {p!r} (known: {', '.join(sorted(known_probes()))})")
    chosen = {spec.name: tuple(p for p in spec.probes if not req.only_probes or p in req.only_probes)
              for spec in specs}
    while added := with_references(suite, chosen):  # a reference may have its own
        for name, probes in added.items():
            if name not in chosen:
                specs.append(suite.config(name))
            chosen[name] = probes
    plans = []
    for spec in specs:
        probes = chosen[spec.name]
        if not probes:
            continue
        server = suite.server_config(spec, req.target)
        server = dataclasses.replace(server, args=(*server.args, *req.extra_args),
                                     env={**server.env, **req.extra_env})
        if req.target == "sglang" and (req.extra_args or req.extra_env):
            check_deterministic_chunking(server, f"{suite.path}: [[config]] {spec.name!r} with this run's "
                                                 f"server args and environment")
        workloads = {p: build_workload(scaled(suite.workload.with_overrides(suite.probe_spec(p).params),
                                              req.workload_scale))
                     for p in probes}
        plans.append(ConfigPlan(spec, server, probes, workloads, probe_server_args(probes)))
    if not plans:
        raise UsageError(f"{suite.path}: nothing to run after --config/--probe filters")
    return tuple(plans)


def plan_units(req: RunRequest, suite: Suite, plans: tuple[ConfigPlan, ...]) -> list[Unit]:
    """The jobs in plan order, sides alternating per configuration; a configuration with an
    interleaved or a sequential probe is one unit of both jobs (its servers are up together),
    unless the run's slots hold only one server at a time (`slots.side_by_side`): then its
    sides run in turn, and its interleaved probes' cells say so (`IN_TURN`). A history's run
    (`reuse_noisy`) measures a revision alone, each point of a series, so its sides never pair."""
    units = []
    together = side_by_side(req.slots) and not req.reuse_noisy
    for i, cp in enumerate(plans):
        if together and both_sides_together(suite, cp):
            units.append(Unit(i, role_order(i)))
        else:
            units += [Unit(i, (role,)) for role in role_order(i)]
    if len(req.sides) < len(Role):  # one side's jobs only (a Slurm job, harness/slurm.py)
        if pair := next((u for u in units if len(u.roles) > 1), None):
            raise UsageError(f"config {plans[pair.config_index].spec.name!r}: its probes measure both sides "
                             f"together; it cannot run one side alone")
        units = [u for u in units if u.roles[0] in req.sides]
    return units


def both_sides_together(suite: Suite, cp: ConfigPlan) -> bool:
    """Whether a configuration's two servers are up together: an interleaved probe (its rounds
    alternate sides) or a sequential one (its looks measure both again)."""
    return any(PROBES[p].interleaved for p in cp.probes) or bool(sequential_probes(suite, cp))


def sequential_probes(suite: Suite, cp: ConfigPlan) -> set[str]:
    """The configuration's probes whose comparison may be looked at again: those with a noisy
    metric on it (by their plan), under a suite that allows more than one look."""
    return {probe for probe in cp.probes
            if suite.probe_spec(probe).params["max_looks"] >= 2 and noisy_on(suite, cp, probe)}


def noisy_on(suite: Suite, cp: ConfigPlan, probe: str) -> bool:
    """Whether the probe measures a noisy metric on this configuration (by its plan)."""
    kind = PROBES[probe]
    if kind.planned is None:
        return False
    planned = kind.planned(suite.probe_spec(probe).params, cp.workloads[probe].spec,
                           cp.server.features.deterministic)
    return any(m.kind == Kind.NOISY for m in planned)


def cell_order(plans: tuple[ConfigPlan, ...]) -> tuple[tuple[str, Role, str], ...]:
    """Where each cell goes in results.json: plan order, as a one-slot run measures them,
    whatever order concurrent jobs finish in."""
    return tuple((cp.spec.name, role, p) for i, cp in enumerate(plans) for role in role_order(i) for p in cp.probes)


def role_order(index: int) -> tuple[Role, Role]:
    """Alternate which side goes first, so drift over a run does not favour one side."""
    return (Role.BASE, Role.CANDIDATE) if index % 2 == 0 else (Role.CANDIDATE, Role.BASE)


def model_key(cp: ConfigPlan) -> str:
    """Which model a configuration's servers load: first_per_model's groups."""
    return str(cp.server.model)


def scaled(spec: WorkloadSpec, factor: int) -> WorkloadSpec:
    return spec if factor == 1 else dataclasses.replace(spec, prompts=spec.prompts * factor)


def probe_server_args(probes: tuple[str, ...]) -> tuple[str, ...]:
    """The server flags the probes need, one server serving them all."""
    return dedupe_flags(tuple(a for p in probes for a in PROBES[p].server_args))


def dedupe_flags(args: tuple[str, ...]) -> tuple[str, ...]:
    """Probe flags are a union; keep the first occurrence of each flag and its value."""
    out: list[str] = []
    seen: set[str] = set()
    i = 0
    while i < len(args):
        flag = args[i]
        has_value = i + 1 < len(args) and not args[i + 1].startswith("--")
        if flag not in seen:
            seen.add(flag)
            out += [flag, args[i + 1]] if has_value else [flag]
        i += 2 if has_value else 1
    return tuple(out)
