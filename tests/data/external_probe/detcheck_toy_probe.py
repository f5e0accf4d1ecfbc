"""toy_external: completion tokens per prompt, a probe that lives outside harness/probes/ (found
through its distribution's `detcheck.probes` entry point; tests/probes/test_registry.py runs it)."""

from harness.params import Param, ParamRole
from harness.probes.base import PlannedMetric, ProbeKind, descriptive, metric
from harness.probes.shared_params import JUDGING, WORKLOAD
from harness.results import Metric, ProbeOutput
from harness.verdict_stats import Kind


def run(ctx):
    gens = ctx.client.generate([list(p) for p in ctx.workload.prompts], max_new_tokens=ctx.param("tokens"))
    counts = tuple(float(g.completion_tokens) for g in gens)
    return ProbeOutput(samples=tuple({"completion_tokens": c} for c in counts),
                       metrics=(Metric("completion_tokens", Kind.EXACT, counts),),
                       facts={"requests": len(gens)})


PROBE = ProbeKind(
    "toy_external", run, "completion tokens per prompt", params=(
        *WORKLOAD,
        Param("tokens", int, 3, "tokens per request", ParamRole.MEASURED, low=1, high=64),
        *JUDGING),
    describe=lambda facts, primary: f"{facts['requests']} requests",
    planned=lambda params, workload, deterministic: (PlannedMetric("completion_tokens", Kind.EXACT),),
    figures=(metric("completion_tokens"), *descriptive("the workload's size", "requests")))
