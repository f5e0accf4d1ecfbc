"""accept_length: speculative-decoding accept length on a shared-prefix multi-turn workload.

Turn 1 generates from each prompt; turn 2 sends prompt + turn-1 output + a short new suffix (the
start of the next prompt, as a user's follow-up), so its prefix-cache hit reaches into tokens
that decode wrote, past a track-interval boundary on a recurrent model: the draft and target
must then resume from restored state. Per request: completion tokens, `spec_verify_ct`,
`spec_accept_length` (completion tokens / verify rounds, bonus token included). Under
deterministic inference at temperature 0 the accept length is exact, request by request: the
same requests draft and verify alike on both sides, so there is no noise for a floor to absorb,
and a floor would hide a real bug inside it (0.5.16 with its fix 25015 reverted moved the
median 3 %, inside a 5 % floor, on the H200). Otherwise it is a noisy metric (median, bootstrap
CI, Mann-Whitney, the suite's floor). No logprobs are asked for: DFLASH and DSPARK reject them.
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from harness.client import Generation
from harness.errors import ProbeNotApplicable, VacuousResult
from harness.params import Param
from harness.suite import WorkloadSpec
from harness.probes.base import (PlannedMetric, ProbeContext, ProbeKind, ValueIndex, given, metric,
                                 parameter, register, summary)
from harness.probes.common import batches
from harness.probes.shared_params import (BATCH_SIZE, JUDGING, MEASURED, MIN_HIT_FRACTION, PLACEMENT_SEED,
                                          SIDES_AT_ONCE, WORKLOAD)
from harness.results import Metric, ProbeOutput
from harness.verdict_stats import Kind
from harness.textfmt import fmt


def _generate(ctx: ProbeContext, prompts: Sequence[Sequence[int]], batch: int) -> list[Generation]:
    out: list[Generation] = []
    for chunk in batches(list(prompts), batch):
        out += ctx.client.generate(list(chunk), max_new_tokens=ctx.workload.output_len,
                                   temperature=ctx.param("temperature"))
    # SGLang writes the spec_* keys only for a request that had a verify round: one answer
    # without them is 0 rounds; none with them is a server without speculative decoding.
    if all(g.spec_verify_ct is None for g in out):
        raise ProbeNotApplicable("no speculative decoding on this server "
                                 "(no answer's meta_info has spec_verify_ct)")
    return out


def _sample(turn: int, repeat: int, prompt: Sequence[int], gen: Generation) -> dict[str, Any]:
    verify = gen.spec_verify_ct or 0
    length = gen.spec_accept_length
    if length is None:  # no verify round (SGLang then omits spec_*): every token came without one
        length = gen.completion_tokens / max(verify, 1)
    return {
        "repeat": repeat,
        "turn": turn,
        "prompt_len": len(prompt),
        "cached_tokens": gen.cached_tokens,
        "completion_tokens": gen.completion_tokens,
        "spec_verify_ct": verify,
        "accept_length": float(length),
        "accept_rate": gen.spec_accept_rate,
        "correct_drafts_histogram": gen.spec_correct_drafts_histogram,
    }


def run(ctx: ProbeContext) -> ProbeOutput:
    prompts = list(ctx.workload.prompts)
    batch = ctx.param("batch_size") or len(prompts)
    suffix_len = ctx.param("suffix_len")
    rounds = ctx.repeat_indices()
    samples: list[dict[str, Any]] = []
    for done, rep in enumerate(rounds, 1):
        ctx.client.flush_cache()
        first = _generate(ctx, prompts, batch)
        samples += [_sample(1, rep, p, g) for p, g in zip(prompts, first)]
        follow = [list(p) + list(g.output_ids) + list(prompts[(i + 1) % len(prompts)][:suffix_len])
                  for i, (p, g) in enumerate(zip(prompts, first))]
        second = _generate(ctx, follow, batch)
        # A turn-2 hit that reaches past the turn-1 prompt reuses decode-written tokens.
        samples += [{**_sample(2, rep, f, g), "past_prompt": g.cached_tokens > len(p)}
                    for p, f, g in zip(prompts, follow, second)]
        ctx.advance(done, len(rounds))
    states = (ctx.client.server_info().get("internal_states") or [{}])[0]
    return _output(samples, ctx.param("min_hit_fraction"), states.get("avg_spec_accept_length"),
                   judged_exactly(ctx.deterministic, ctx.param("temperature")))


def _request_place(samples: Sequence[dict[str, Any]], i: int) -> str:
    s = samples[i] if i < len(samples) else {}
    return f"request {i}" if "turn" not in s else f"request {i} (round {s['repeat']}, turn {s['turn']})"


# accept_length's value i is one request: a (round, turn, prompt) of the workload.
REQUEST = ValueIndex("request", _request_place)
# draft_position_accept's value i is draft position i + 1, over every request's verify rounds.
DRAFT_POSITION = ValueIndex("draft position", lambda samples, i: f"draft position {i + 1} (share of the verify "
                                                                  f"rounds reaching it that accepted it)")


def merge(outputs: list[ProbeOutput]) -> ProbeOutput:
    last = outputs[-1].facts
    return _output([s for out in outputs for s in out.samples], last["min_hit_fraction"],
                   last["server_avg_accept_length"], outputs[-1].metrics[0].kind == Kind.EXACT)


def judged_exactly(deterministic: bool, temperature: float) -> bool:
    return deterministic and temperature == 0


def _output(samples: list[dict[str, Any]], floor: float, server_avg: float | None, exact: bool) -> ProbeOutput:
    turn2 = [s for s in samples if s["turn"] == 2]
    hit_fraction = sum(s["past_prompt"] for s in turn2) / len(turn2)
    if hit_fraction < floor:
        raise VacuousResult(f"{sum(s['past_prompt'] for s in turn2)}/{len(turn2)} turn-2 requests hit "
                            f"the cache past the turn-1 prompt (min_hit_fraction {floor:g}); "
                            f"raise output_len past the track interval")
    # Value i is the same (repeat, turn, prompt) on both sides: a paired design.
    metric = Metric("accept_length", Kind.EXACT if exact else Kind.NOISY, tuple(s["accept_length"] for s in samples),
                    better="higher", headline="median", paired=True)
    # Accept lengths compare only over equal token ranges (an early stop changes the ratio): both
    # sides generate output_len tokens per request (ignore_eos), and this exact metric says so; a
    # request that stopped elsewhere on one side reads *different*, never an accept length judged
    # over another span.
    tokens = Metric("request_tokens", Kind.EXACT, tuple(float(s["completion_tokens"]) for s in samples))
    facts = _facts(samples, hit_fraction)
    # Under deterministic inference at temperature 0 the acceptance of each draft position is as
    # exact as the accept length, and decides with it: a draft that now fails at position 2 and
    # succeeds at 3 moves it while the mean accept length stays put (issue 44).
    shares = facts["draft_position_accept"]
    positions = (Metric("draft_position_accept", Kind.EXACT, tuple(shares), headline=""),) if exact and shares else ()
    # So do the tokens each request found cached (turn 2's reach past its prompt, the gate's input).
    cached = (Metric("cached_tokens", Kind.EXACT, tuple(float(s.get("cached_tokens") or 0) for s in samples),
                     headline="", paired=True),) if exact else ()
    return ProbeOutput(samples=tuple(samples), metrics=(metric, tokens, *positions, *cached),
                       facts={**facts, "min_hit_fraction": floor,
                              # cumulative since the last flush, folded in at decode-log boundaries
                              "server_avg_accept_length": server_avg})


def _facts(samples: list[dict[str, Any]], hit_fraction: float) -> dict[str, Any]:
    tokens = sum(s["completion_tokens"] for s in samples)
    verifies = sum(s["spec_verify_ct"] for s in samples)
    by_turn = {t: [s["accept_length"] for s in samples if s["turn"] == t] for t in (1, 2)}
    return {
        "requests": len(samples),
        "completion_tokens": tokens,
        "verify_calls": verifies,
        "aggregate_accept_length": tokens / verifies if verifies else None,
        "requests_without_verify": sum(1 for s in samples if s["spec_verify_ct"] == 0),
        "turn1_median": statistics.median(by_turn[1]),
        "turn2_median": statistics.median(by_turn[2]),
        "turn2_hit_fraction": hit_fraction,
        "draft_position_accept": draft_position_accept(samples),
    }


def draft_position_accept(samples: Sequence[dict[str, Any]]) -> list[float] | None:
    """Per draft position j (1, 2, …): the share of verify rounds that reached draft j (its j − 1
    drafts before were correct) in which draft j was correct too, over every request's
    `spec_correct_drafts_histogram`; None where a request that verified has none."""
    found = [s.get("correct_drafts_histogram") for s in samples if s["spec_verify_ct"]]
    hists = [h for h in found if h is not None]
    if not hists or len(hists) < len(found):
        return None
    rounds = [sum(h[c] for h in hists if c < len(h)) for c in range(max(map(len, hists)))]
    reached = [sum(rounds[c:]) for c in range(len(rounds))]  # rounds with at least c correct
    return [round(reached[j] / reached[j - 1], 6) for j in range(1, len(rounds)) if reached[j - 1]]


def planned(params: dict[str, Any], workload: WorkloadSpec, deterministic: bool) -> tuple[PlannedMetric, ...]:
    """Two turns per prompt per round, paired: 2 × prompts values per round; exact under
    deterministic inference at temperature 0."""
    prompts = params["prompts"] or workload.prompts
    kind = Kind.EXACT if judged_exactly(deterministic, params["temperature"]) else Kind.NOISY
    exact = ((PlannedMetric("draft_position_accept", Kind.EXACT), PlannedMetric("cached_tokens", Kind.EXACT, paired=True))
             if kind == Kind.EXACT else ())
    return (PlannedMetric("accept_length", kind, paired=True, key="repeats", per_unit=2 * prompts),
            PlannedMetric("request_tokens", Kind.EXACT), *exact)


def describe(facts: dict[str, Any], primary: Metric | None) -> str:
    median = primary.headline_value() if primary else None
    return (f"accept {fmt(median)} (turn 1 {fmt(facts.get('turn1_median'))}, turn 2 "
            f"{fmt(facts.get('turn2_median'))}; {fmt(facts.get('verify_calls'))} verifies for "
            f"{fmt(facts.get('completion_tokens'))} tok)")


PARAMS = (
    *WORKLOAD, BATCH_SIZE, MIN_HIT_FRACTION,
    Param("temperature", float, 0.0, "sampling temperature of both turns", MEASURED, low=0.0, high=100.0),
    Param("suffix_len", int, 8, "tokens of the next prompt appended as turn 2's follow-up", MEASURED,
          low=0, high=1_000_000),
    Param("repeats", int, 1, "rounds of both turns, each on a flushed cache", MEASURED, low=1, high=1000),
    SIDES_AT_ONCE, PLACEMENT_SEED,
    *JUDGING,
)
FIGURES = (
    metric("accept_length"),
    metric("request_tokens"),
    metric("draft_position_accept"),
    metric("cached_tokens"),
    *summary("accept_length", "aggregate_accept_length", "verify_calls", "requests_without_verify",
             "turn1_median", "turn2_median", "server_avg_accept_length", "draft_position_accept"),
    *parameter("min_hit_fraction"),
    *given("the workload's size, the same on both sides", "requests"),
    *summary("request_tokens", "completion_tokens"),
    # the vacuity gate's input, from each request's cached tokens: a metric under deterministic mode
    *summary("cached_tokens", "turn2_hit_fraction"),
)

PROBE = register(ProbeKind("accept_length", run,
                           "speculative accept length, shared-prefix multi-turn (noisy)",
                           params=PARAMS, describe=describe, merge=merge, planned=planned,
                           values=lambda metric: DRAFT_POSITION if metric == "draft_position_accept" else REQUEST,
                           figures=FIGURES))
