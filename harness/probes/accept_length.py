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
from typing import Any, Callable, Sequence

from harness.client import Generation, generate_body
from harness.errors import ProbeNotApplicable, VacuousResult
from harness.params import Param
from harness.suite import WorkloadSpec
from harness.probes.base import (PlannedMetric, ProbeContext, ProbeKind, Reproduction, ValueIndex, descriptive,
                                 given, metric, parameter, register, summary)
from harness.probes.common import batches
from harness.probes.shared_params import (BATCH_SIZE, JUDGING, MEASURED, MIN_HIT_FRACTION, PLACEMENT_SEED,
                                          SIDES_AT_ONCE, WORKLOAD)
from harness.reproducer import FLUSH, OWN_OUTPUT, Form, Observed, with_form, workload_prompts
from harness.results import CellResult, Metric, ProbeComparison, ProbeOutput, Reproducer, Request
from harness.verdict_stats import Kind
from harness.textfmt import fmt, fmt_pair


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


def _sample(turn: int, repeat: int, index: int, prompt: Sequence[int], gen: Generation) -> dict[str, Any]:
    return {"repeat": repeat, "turn": turn, "prompt": index, **_served(prompt, gen)}


def _accept_length(gen: Generation) -> float:
    verify = gen.spec_verify_ct or 0
    length = gen.spec_accept_length
    if length is None:  # no verify round (SGLang then omits spec_*): every token came without one
        length = gen.completion_tokens / max(verify, 1)
    return float(length)


def _served(prompt: Sequence[int], gen: Generation) -> dict[str, Any]:
    """What one answer served, as a sample records it (and a reproducer's answer is read)."""
    verify = gen.spec_verify_ct or 0
    return {
        "prompt_len": len(prompt),
        "cached_tokens": gen.cached_tokens,
        "completion_tokens": gen.completion_tokens,
        "spec_verify_ct": verify,
        "accept_length": _accept_length(gen),
        "accept_rate": gen.spec_accept_rate,
        "correct_drafts_histogram": gen.spec_correct_drafts_histogram,
        # what turn 2 continues, and a reproducer's turn 2 carries in its curl line
        "output_ids": list(gen.output_ids),
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
        samples += [_sample(1, rep, i, p, g) for i, (p, g) in enumerate(zip(prompts, first))]
        follow = [list(p) + list(g.output_ids) + list(prompts[(i + 1) % len(prompts)][:suffix_len])
                  for i, (p, g) in enumerate(zip(prompts, first))]
        second = _generate(ctx, follow, batch)
        # A turn-2 hit that reaches past the turn-1 prompt reuses decode-written tokens.
        samples += [{**_sample(2, rep, i, f, g), "past_prompt": g.cached_tokens > len(p)}
                    for i, (p, f, g) in enumerate(zip(prompts, follow, second))]
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


# --------------------------------------------------------------------------- reproducer


# What each exact metric reads of one answer, and its name in words.
READS: dict[str, tuple[str, Callable[[Generation], float]]] = {
    "accept_length": ("accept length", _accept_length),
    "request_tokens": ("completion tokens", lambda gen: float(gen.completion_tokens)),
}


def _exact_reproducer(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    """The first request whose deciding figure (its accept length, or its length in tokens)
    differs: one prompt's turn 1 from a flushed cache, and for a turn 2 that turn after it (the
    state turn 2 hits is what turn 1's decode wrote), its answer read for that figure."""
    decided, prompts = comp.metrics.get(comp.decided_by or ""), workload_prompts(cand)
    read = READS.get(comp.decided_by or "")
    i = None if decided is None else decided.first_difference
    if read is None or i is None or prompts is None or i >= min(len(base.samples), len(cand.samples)):
        return None
    s = cand.samples[i]
    first = next((x for x in cand.samples if x.get("repeat") == s.get("repeat") and x.get("turn") == 1
                  and x.get("prompt") == s.get("prompt") and "output_ids" in x), None)
    if first is None or s["prompt"] >= len(prompts):  # a cell stored before samples named their prompt
        return None
    p, turn, new = s["prompt"], s["turn"], len(first["output_ids"])
    prompt = list(prompts[p])
    requests: tuple[Request, ...] = (FLUSH, Request(f"turn 1 of prompt {p}", "/generate",
                                                    generate_body(prompt, max_new_tokens=new)))
    if turn == 2:
        suffix = list(prompts[(p + 1) % len(prompts)][:s["prompt_len"] - len(prompt) - new])
        requests += (Request(f"turn 2: prompt {p}, turn 1's output, then {len(suffix)} tokens of the next prompt"
                             + OWN_OUTPUT.format("candidate"), "/generate",
                             generate_body(prompt + first["output_ids"] + suffix, max_new_tokens=new),
                             follows=(1, len(prompt))),)
    label, value = read
    at = len(requests) - 1

    def answered(_size: int, gens: list) -> Observed:
        gen = gens[at]
        return Observed(None if gen is None else value(gen),
                        () if gen is None else (gen.completion_tokens, gen.spec_verify_ct or 0))

    def words(b: Observed, c: Observed) -> str:
        shown = [("nothing" if x is None else t) for x, t in zip((b.value, c.value), _pair(b.value, c.value))]
        rounds = "; ".join(f"{side}: {x.points[0]} tokens in {x.points[1]} verify rounds"
                           for side, x in (("base", b), ("candidate", c)) if x.points)
        return f"turn {turn}'s {label}: base {shown[0]}, candidate {shown[1]} ({rounds})"

    place = REQUEST.place(cand.samples, i)
    stored = tuple(float(x.samples[i][comp.decided_by]) if comp.decided_by in x.samples[i]
                   else float(x.samples[i]["completion_tokens"]) for x in (base, cand))
    shown = _pair(*stored)
    return with_form(Reproducer(
        prompts=(p,), first_divergent={"prompt": p, "what": f"turn {turn}'s {label}", "request": i},
        requests=requests, expect=f"{label} of {place}, prompt {p}: base {shown[0]}, candidate {shown[1]}",
        shrink=(f"From the stored samples: {len(cand.samples)} requests → prompt {p}'s turn {turn}"
                + (" after its turn 1 (the cached state turn 2 hits is what turn 1's decode wrote)" if turn == 2
                   else ""))),
        Form(lambda _size: requests, answered, words, 1, 1))


def _pair(a: float | None, b: float | None) -> tuple[str, str]:
    return fmt_pair(a, b) if a is not None and b is not None else (fmt(a), fmt(b))


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
                           figures=FIGURES, reproduction=Reproduction(exact=_exact_reproducer)))
