"""jitter: under pressure, the same prompts sent in a shuffled order at jittered times must be
answered as they are alone (upstream's `python/sglang/test/cache_consistency_jitter.py`, 0.5.18+:
the same contexts scored under shuffled batching, timing jitter, a small pool and forced
retraction, with at least 10 retracted requests so that a pass is not vacuous).

Each prompt is first decoded alone after `/flush_cache` (the reference). Then, `rounds` times,
every prompt is sent at once in its own request, in an order and at delays drawn from a seeded
generator (`jitter_seed` + the round): requests arrive while others prefill, decode and are
retracted, in batches no all-at-once request forms. Every answer must be the reference's, ids and
logprobs bit for bit (deterministic configurations; elsewhere *n/a*). The order and the delays are
recorded in the cell (`schedule`), so a finding can be replayed: the same seed draws them again.

It runs on a pressure configuration only (`retract_interval` or `max_total_tokens`; elsewhere
*n/a*); the pipeline demands its retractions there (`harness/path_proof.py`: at least
`min_retractions`, upstream's 10, during this probe, else the cell is vacuous). A configuration
whose `min_retractions` is below upstream's 10 is *n/a*: fewer vouch for nothing.
"""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

from harness import path_proof
from harness.client import OUTPUT_LOGPROBS, Generation
from harness.errors import ProbeNotApplicable
from harness.params import Param
from harness.probes.base import (PlannedMetric, ProbeContext, ProbeKind, ValueIndex, given, locator, metric,
                                 parameter, register)
from harness.probes.determinism import departure
from harness.probes.shared_params import JUDGING, MEASURED, WORKLOAD
from harness.results import Metric, ProbeOutput
from harness.suite import WorkloadSpec
from harness.verdict_stats import Kind


def schedule(seed: int, prompts: int, max_delay_s: float) -> tuple[list[int], list[float]]:
    """The order the prompts are sent in and each one's delay after the round starts (in that
    order), drawn from `seed` alone: the same seed gives the same schedule."""
    rng = random.Random(seed)
    order = list(range(prompts))
    rng.shuffle(order)
    return order, [round(rng.uniform(0.0, max_delay_s), 4) for _ in order]


def _jittered(ctx: ProbeContext, prompts: Sequence[Sequence[int]], order: list[int], delays: list[float]
              ) -> tuple[dict[int, Generation], list[float]]:
    """Each prompt in its own request, started `delays[k]` after the round began, in `order`;
    its answer by prompt, and when each request was actually sent (seconds after the start)."""
    start = time.monotonic()
    sent = [0.0] * len(order)

    def one(k: int) -> tuple[int, Generation]:
        time.sleep(max(0.0, start + delays[k] - time.monotonic()))
        sent[k] = round(time.monotonic() - start, 4)
        i = order[k]
        return i, ctx.client.generate(list(prompts[i]), max_new_tokens=ctx.workload.output_len,
                                      logprobs=OUTPUT_LOGPROBS)[0]

    with ThreadPoolExecutor(max_workers=len(order)) as pool:
        answers = dict(pool.map(one, range(len(order))))
    return answers, sent


def run(ctx: ProbeContext) -> ProbeOutput:
    features = ctx.config.features
    if not features.pressure:
        raise ProbeNotApplicable("jitter runs under pressure only (retract_interval or max_total_tokens)")
    if not ctx.deterministic:
        raise ProbeNotApplicable("under pressure without deterministic inference a retracted request may "
                                 "legitimately answer otherwise: nothing exact to compare")
    floor = path_proof.min_retractions(features)
    if floor < path_proof.MIN_RETRACTIONS:  # a suite may lower its pressure rows' floor; jitter keeps upstream's
        raise ProbeNotApplicable(f"jitter vouches only for at least {path_proof.MIN_RETRACTIONS} retractions "
                                 f"(upstream's floor); this configuration's min_retractions is {floor}")
    prompts = list(ctx.workload.prompts)
    rounds, seed, max_delay = ctx.param("rounds"), ctx.param("jitter_seed"), ctx.param("max_delay_s")
    ctx.client.flush_cache()
    reference = [ctx.client.generate(list(p), max_new_tokens=ctx.workload.output_len, logprobs=OUTPUT_LOGPROBS)[0]
                 for p in prompts]
    ctx.advance(1, rounds + 1)
    departs: list[float] = []
    schedules, first = [], None
    for r in range(rounds):
        order, delays = schedule(seed + r, len(prompts), max_delay)
        answers, sent = _jittered(ctx, prompts, order, delays)
        schedules.append({"seed": seed + r, "order": order, "delays_s": delays, "sent_s": sent})
        for i, ref in enumerate(reference):
            got = answers[i]
            at = departure(list(zip(ref.output_ids, ref.output_logprobs)), list(zip(got.output_ids, got.output_logprobs)))
            departs.append(float(at))
            if first is None and at < len(ref.output_ids):
                first = {"round": r, "prompt": i, "position": at, "seed": seed + r,
                         "retractions": got.meta.get("num_retractions")}
        ctx.advance(r + 2, rounds + 1)
    facts = {"schedule": schedules, "first_difference": first, "rounds": rounds, "max_delay_s": max_delay,
             "prompts": len(prompts)}
    samples = tuple({"prompt": i, "output_ids": list(ref.output_ids), "logprobs": ref.output_logprobs}
                    for i, ref in enumerate(reference))
    return ProbeOutput(samples=samples, metrics=(Metric("jitter_departure", Kind.EXACT, tuple(departs), headline="min",
                                                        paired=True),), facts=facts)


def describe(facts: dict[str, Any], primary: Metric | None) -> str:
    text = f"{facts.get('prompts')} prompts × {facts.get('rounds')} jittered rounds (≤ {facts.get('max_delay_s')} s)"
    first = facts.get("first_difference")
    if first:
        text += (f"; round {first['round']} (seed {first['seed']}) departs at prompt {first['prompt']}, "
                 f"token {first['position']}")
    return text


def planned(params: dict[str, Any], workload: WorkloadSpec, deterministic: bool) -> tuple[PlannedMetric, ...]:
    return (PlannedMetric("jitter_departure", Kind.EXACT, paired=True),)


def _place(samples: Sequence[dict[str, Any]], i: int) -> str:
    prompts = max(1, len(samples))
    return f"round {i // prompts}, prompt {i % prompts}"


FIGURES = (
    metric("jitter_departure"),
    *locator("jitter_departure", "first_difference"),
    *parameter("rounds", "max_delay_s"),
    *given("how the rounds were sent (seeded order and delays, and when each request went): "
           "what replays a finding, not what was served", "schedule"),
    *given("the workload's size, the same on both sides", "prompts"),
)

PARAMS = (
    *WORKLOAD,
    Param("rounds", int, 2, "jittered rounds, each of every prompt", MEASURED, low=1, high=100),
    Param("jitter_seed", int, 0, "seed of round 0's order and delays (round r: jitter_seed + r)", MEASURED,
          low=0, high=2**31),
    Param("max_delay_s", float, 0.2, "largest delay of a request after its round starts", MEASURED,
          low=0.0, high=60.0),
    *JUDGING,
)

PROBE = register(ProbeKind("jitter", run, "under pressure: prompts in a seeded shuffled order at seeded delays "
                                          "vs each alone (ids + logprobs)",
                           params=PARAMS, describe=describe, planned=planned,
                           values=lambda name: ValueIndex("answer", _place) if name == "jitter_departure" else None,
                           figures=FIGURES))
