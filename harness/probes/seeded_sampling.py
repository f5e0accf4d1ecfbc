"""seeded_sampling: sampling at temperature > 0 with a per-request `sampling_seed` must reproduce.

What RL rollouts rely on under deterministic inference (SGLang's `multinomial_with_seed`: the same
(inputs, seed) gives the same sample): each prompt is sampled alone with the first seed (the
reference), again in one batch of every prompt (another batch size, a cold cache), and alone once
more (a prefix-cache hit); each must serve the reference's tokens and logprobs bit for bit. The
other seeds must give other samples, and the `n` parallel samples of one request must differ from
each other (a downstream RL framework found deterministic mode cloning every sample of a group:
one seed for all): samples that repeat, or a (prompt, seed) that the batch or the hit does not
reproduce (a seed the server ignores), are a finding of the cell (on both sides: an error, never
*same*). The reference's own tokens and logprobs are metrics too, so the two revisions are
compared on what they sample.

Only under deterministic inference (elsewhere a seed does not make a sample reproducible across
batch shapes: *n/a*); a server whose API refuses `sampling_seed` or `n` is *n/a* with its answer.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from harness.client import Generation
from harness.errors import ProbeNotApplicable, ServerError, ServerFinding
from harness.params import Param
from harness.probes.base import (PlannedMetric, ProbeContext, ProbeKind, ValueIndex, given, locator, metric,
                                 parameter, register)
from harness.probes.determinism import departure
from harness.probes.shared_params import JUDGING, MEASURED, WORKLOAD
from harness.results import Metric, ProbeOutput
from harness.suite import WorkloadSpec
from harness.verdict_stats import Kind

# An answer that refused the request (client.py words an HTTP error `HTTP <status>: …`).
_REFUSED = re.compile(r"\bHTTP 4\d\d: ")
# The reference's departure per prompt from each variant that must reproduce it.
VARIANTS = ("batch_departure", "hit_departure")


def _sample(ctx: ProbeContext, prompts: Sequence[Sequence[int]], seeds: Sequence[int], n: int = 1) -> list[Generation]:
    """One /generate of `prompts` (a batch), prompt i sampled with seeds[i] (and `n` parallel
    samples each, prompt-major), with output logprobs. A refusal (HTTP 4xx) that names the seed or
    `n` is the revision's API lacking them: n/a; a server failing on them (5xx, a dropped
    connection) is no such answer, whatever its message names."""
    params = [{"max_new_tokens": ctx.workload.output_len, "temperature": ctx.param("temperature"),
               "ignore_eos": True, "sampling_seed": seed, **({"n": n} if n > 1 else {})} for seed in seeds]
    body = {"input_ids": [list(p) for p in prompts], "sampling_params": params, "return_logprob": True}
    try:
        return ctx.client.generate_from(body, expected=len(prompts) * n)
    except ServerError as exc:
        if _REFUSED.search(str(exc)) and ("sampling_seed" in str(exc) or "'n'" in str(exc)):
            raise ProbeNotApplicable(f"the server's API refuses seeded or parallel sampling: {exc}") from exc
        raise


def _pairs(gen: Generation) -> list[tuple[int, float | None]]:
    return list(zip(gen.output_ids, gen.output_logprobs))


def run(ctx: ProbeContext) -> ProbeOutput:
    if not ctx.deterministic:
        raise ProbeNotApplicable("a sampling_seed reproduces a sample across batch shapes only under "
                                 "deterministic inference (this configuration is not deterministic)")
    prompts = list(ctx.workload.prompts)
    first_seed, n = ctx.param("sampling_seed"), ctx.param("n")
    seeds = [first_seed + 1000 * k for k in range(ctx.param("seeds"))]
    steps = 3 + len(seeds) + len(prompts)
    ctx.client.flush_cache()
    reference = [_sample(ctx, [p], [first_seed])[0] for p in prompts]  # alone, cold
    ctx.advance(len(prompts), steps)
    ctx.client.flush_cache()
    batched = _sample(ctx, prompts, [first_seed] * len(prompts))  # every prompt at once, cold
    hit = [_sample(ctx, [p], [first_seed])[0] for p in prompts]  # alone again: the batch cached them
    ctx.advance(len(prompts) + 2, steps)
    by_seed = [[g.output_ids for g in _sample(ctx, prompts, [s] * len(prompts))] for s in seeds[1:]]
    by_seed.insert(0, [g.output_ids for g in reference])
    ctx.advance(len(prompts) + 2 + len(seeds), steps)
    parallel = [_sample(ctx, [p], [first_seed], n) for p in prompts]
    ctx.advance(steps, steps)

    departures = {name: tuple(float(departure(_pairs(ref), _pairs(other))) for ref, other in zip(reference, variant))
                  for name, variant in zip(VARIANTS, (batched, hit))}
    seed_clones = tuple(float(sum(by_seed[a][i] == by_seed[b][i] for a in range(len(seeds)) for b in range(a)))
                        for i in range(len(prompts)))
    n_clones = tuple(float(n - len({g.output_ids for g in samples})) for samples in parallel)
    cloned = clones_text(n, n_clones, seeds, seed_clones)
    first = next(({"prompt": i, "variant": name.removesuffix("_departure"), "position": int(at)}
                  for i in range(len(prompts)) for name in VARIANTS
                  for at in [departures[name][i]] if at < len(reference[i].output_ids)), None)
    samples = tuple({"prompt": i, "seed": first_seed, "output_ids": list(ref.output_ids),
                     "logprobs": ref.output_logprobs, "hit_cached_tokens": h.cached_tokens,
                     "seed_outputs": [list(outputs[i]) for outputs in by_seed],
                     "parallel_outputs": [list(g.output_ids) for g in parallel[i]]}
                    for i, (ref, h) in enumerate(zip(reference, hit)))
    # Each side must sample apart and reproduce its own samples: a server that ignores the seed
    # reproduces nothing, alike on both sides where its generator is seeded at launch (no match, an
    # error, never same).
    unseeded = unreproduced_text(departures, [len(r.output_ids) for r in reference])
    if cloned or unseeded:
        raise ServerFinding("; ".join(filter(None, (unseeded, cloned))), samples)
    metrics = (
        *(Metric(name, Kind.EXACT, values, headline="min", paired=True) for name, values in departures.items()),
        Metric("seed_clones", Kind.EXACT, seed_clones, better="lower", headline="sum", paired=True),
        Metric("n_clones", Kind.EXACT, n_clones, better="lower", headline="sum", paired=True),
        # What the revision samples: compared base vs candidate value for value.
        Metric("sampled_ids", Kind.EXACT, tuple(float(t) for g in reference for t in g.output_ids), headline="first"),
        Metric("sampled_logprobs", Kind.EXACT, tuple(float(v if v is not None else float("nan"))
                                                     for g in reference for v in g.output_logprobs), headline="first"),
        # Under deterministic mode every exact figure decides: the alone-again request's reuse too.
        Metric("hit_cached_tokens", Kind.EXACT, tuple(float(h.cached_tokens or 0) for h in hit), headline="sum"),
    )
    facts = {"seeds": seeds, "n": n, "temperature": ctx.param("temperature"), "first_difference": first,
             "prompts": len(prompts)}
    return ProbeOutput(samples=samples, metrics=metrics, facts=facts)


def clones_text(n: int, n_clones: Sequence[float], seeds: Sequence[int], seed_clones: Sequence[float]) -> str:
    """What sampled alike that must not have, in words (empty: nothing): the n samples of one
    request, or two seeds on one prompt."""
    said = []
    if any(n_clones):
        worst = max(range(len(n_clones)), key=lambda i: n_clones[i])
        said.append(f"the n={n} parallel samples of one request repeat on {sum(1 for c in n_clones if c)} of "
                    f"{len(n_clones)} prompts (prompt {worst}: {n - int(n_clones[worst])} distinct of {n})")
    if any(seed_clones):
        said.append(f"different sampling seeds ({', '.join(map(str, seeds))}) gave the same sample on "
                    f"{sum(1 for c in seed_clones if c)} of {len(seed_clones)} prompts")
    return "; ".join(said)


# What each variant is, in words.
VARIANT_WORDS = {"batch_departure": "in one batch of every prompt", "hit_departure": "alone again (a cache hit)"}


def unreproduced_text(departures: Mapping[str, Sequence[float]], lengths: Sequence[int]) -> str:
    """Where a (prompt, seed) was not served as its reference was, in words (empty: everywhere
    it was): deterministic inference promises the same sample across batch shapes and hits."""
    said = []
    for name, values in departures.items():
        off = [i for i, (at, n) in enumerate(zip(values, lengths)) if at < n]
        if off:
            said.append(f"the same prompt and sampling_seed {VARIANT_WORDS[name]} departed from its sample alone on "
                        f"{len(off)} of {len(values)} prompts (prompt {off[0]}, sampled token {int(values[off[0]])})")
    return "; ".join(said)


def describe(facts: dict[str, Any], primary: Metric | None) -> str:
    first = facts.get("first_difference")
    text = (f"{facts.get('prompts')} prompts at temperature {facts.get('temperature')}, seeds "
            f"{facts.get('seeds')}, n={facts.get('n')}")
    if first:
        text += f"; the {first['variant']} first departs at prompt {first['prompt']}, token {first['position']}"
    return text


def planned(params: dict[str, Any], workload: WorkloadSpec, deterministic: bool) -> tuple[PlannedMetric, ...]:
    """Exact, on a deterministic configuration (the probe is n/a elsewhere)."""
    return tuple(PlannedMetric(name, Kind.EXACT, paired=name not in UNPAIRED)
                 for name in (*VARIANTS, *EXACT_ACROSS_SIDES))


# Compared base vs candidate value for value (not one pair per prompt, as the departures are).
UNPAIRED = ("sampled_ids", "sampled_logprobs", "hit_cached_tokens")
EXACT_ACROSS_SIDES = ("seed_clones", "n_clones", *UNPAIRED)


def _prompt_place(samples: Sequence[dict[str, Any]], i: int) -> str:
    return f"prompt {i}"


def _token_place(samples: Sequence[dict[str, Any]], i: int) -> str:
    """Value i of the flattened reference samples: its prompt and output position."""
    for s in samples:
        if i < len(s["output_ids"]):
            return f"prompt {s['prompt']}, sampled token {i}"
        i -= len(s["output_ids"])
    return f"value {i}"


VALUES = {**{name: ValueIndex("prompt", _prompt_place)
             for name in (*VARIANTS, "seed_clones", "n_clones", "hit_cached_tokens")},
          "sampled_ids": ValueIndex("sampled token", _token_place),
          "sampled_logprobs": ValueIndex("sampled token", _token_place)}

FIGURES = (
    *(metric(name) for name in (*VARIANTS, *EXACT_ACROSS_SIDES)),
    *locator("batch_departure", "first_difference"),
    *given("the workload's size, the same on both sides", "prompts"),
    *parameter("seeds", "n", "temperature"),
)

PARAMS = (
    *WORKLOAD,
    Param("temperature", float, 1.0, "sampling temperature (> 0)", MEASURED, low=0.05, high=10.0),
    Param("sampling_seed", int, 1234, "the first sampling_seed; the others are 1000 apart", MEASURED, low=0, high=2**62),
    Param("seeds", int, 3, "how many seeds each prompt is sampled with (their samples must differ)", MEASURED,
          low=2, high=64),
    Param("n", int, 4, "parallel samples of one request (`n`): they must differ from each other", MEASURED,
          low=2, high=64),
    *JUDGING,
)

PROBE = register(ProbeKind("seeded_sampling", run,
                           "temperature > 0 with sampling_seed: the same (prompt, seed) across batch, cache hit "
                           "and revision; seeds and n samples differ",
                           params=PARAMS, describe=describe, planned=planned, values=VALUES.get, figures=FIGURES))
