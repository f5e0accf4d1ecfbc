"""revision_kl: what the base serves against what the candidate serves, token for token.

Every other probe compares a revision with itself (decode vs replay, hit vs no hit), so a
change that moves served logprobs alike everywhere (a logits processor, a kernel that is
self-consistent) reads *same* there. Here each side's server gets the same token sequences:

* a greedy decode of every workload prompt, with the top-k logprobs of every output token;
* a teacher-forced score of one fixed sequence per prompt, the prompt followed by a fixed
  continuation (the next prompt's first tokens: real text under longbench), prefilled with
  `logprob_start_len = 0` and `top_logprobs_num`. It depends on neither side's output, so the
  positions after a first divergence stay comparable (llama.cpp's `--kl-divergence` scores a
  fixed text the same way).

Each side's cell holds only what its server served (stored on its own, as every cell); the
comparison (`across`) derives the metrics from both: under deterministic inference a refactor
must serve bit-identical values, so the scored logprobs, their top-k, the greedy ids and their
logprobs compare exactly; otherwise each side scores twice, and the KL(base ‖ candidate) and
top-1 agreement per prompt are judged, paired by prompt, against the base's own
run-to-run KL and agreement, beyond declared floors.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

from harness import divergence
from harness.client import Logprobs
from harness.params import Param
from harness.suite import WorkloadSpec
from harness.probes.base import (Across, PlannedMetric, ProbeContext, ProbeKind, Reproduction, ValueIndex, given,
                                 locator, metric, parameter, register, summary)
from harness.probes.common import (Replayed, batches, cold_replay, degenerate_outputs, require_output_logprobs,
                                   require_top_logprobs)
from harness.probes.shared_params import BATCH_SIZE, JUDGING, KL, MEASURED, WORKLOAD
from harness.reproducer import (FLUSH, Form, across_form, across_sides, cell_top_k, decode_request, noisy_decode,
                                score_request, with_form)
from harness.results import CellResult, Metric, ProbeComparison, ProbeOutput, Reproducer, Request
from harness.textfmt import fmt
from harness.verdict_stats import Kind

# The exact metrics (deterministic mode) and the noisy ones (otherwise): all decide by default.
# Off deterministic mode the greedy decode decides too (greedy_match, greedy_k3, against the base's
# own second decode): a bug of the decode path alone (a CUDA-graph replay) leaves every teacher-
# forced score, a prefill, untouched.
EXACT_METRICS = ("scored_logprobs", "scored_topk", "greedy_ids", "greedy_logprobs", "greedy_topk")
NOISY_METRICS = ("kl", "top1_agree", "greedy_match", "greedy_k3")


def _judging() -> tuple[Param, ...]:
    """The shared judging parameters, with this probe's declared floors and deciding metrics."""
    defaults = {"floors": {"kl": {"absolute": 1e-3}, "top1_agree": {"absolute": 0.02},
                           "greedy_match": {"absolute": 0.1}, "greedy_k3": {"absolute": 1e-3}},
                "verdict_metrics": [*EXACT_METRICS, *NOISY_METRICS]}
    return tuple(dataclasses.replace(p, default=defaults[p.name]) if p.name in defaults else p
                 for p in JUDGING)


PARAMS = (
    *WORKLOAD, BATCH_SIZE,
    Param("top_k", int, 8, "top logprobs per position, decoded and scored", MEASURED, low=1, high=1000),
    Param("continuation_len", int, 32, "tokens of the fixed continuation scored after each prompt",
          MEASURED, low=1, high=1_000_000),
    *KL, *_judging(),
)


def continuations(prompts: Sequence[Sequence[int]], length: int) -> list[list[int]]:
    """Prompt i's fixed continuation: the first `length` tokens of prompt i+1 (cyclic; a short
    one repeated), the same on both sides and independent of anything a server answered."""
    out = []
    for i in range(len(prompts)):
        source = list(prompts[(i + 1) % len(prompts)])
        out.append((source * (length // len(source) + 1))[:length])
    return out


# The samples' keys of each scoring pass: the first, and a noisy build's second (its noise reference).
PASSES = ("scored", "rescored")


def _lists(top: Sequence[Sequence[Sequence[float]]]) -> list[list[list[float]]]:
    # (logprob, id) pairs as the JSON lists a stored cell reads back as: fresh and stored compare alike.
    return [[list(pair) for pair in position] for position in top]


def _score(ctx: ProbeContext, sequences: list[list[int]], batch: int) -> list[Replayed]:
    """Every position after the first of each sequence, teacher-forced (cold prefill)."""
    return cold_replay(ctx.client, sequences, [len(s) - 1 for s in sequences], batch, ctx.param("top_k"))


def _greedy(ctx: ProbeContext, prompts: list[list[int]], batch: int, top_k: int, advance
            ) -> tuple[list[list[int]], list[list[float]], list[list[list[tuple[float, int]]]]]:
    """A greedy decode of every prompt on a flushed cache: ids, logprobs, top-k per position."""
    ctx.client.flush_cache()
    outputs, lps, tops = [], [], []
    for chunk in batches(prompts, batch):
        for gen in ctx.client.generate(list(chunk), max_new_tokens=ctx.workload.output_len,
                                       logprobs=Logprobs(top_k=top_k)):
            outputs.append(list(gen.output_ids))
            lps.append(gen.output_logprobs)
            tops.append(gen.output_top_logprobs)
        advance(len(outputs))
    return outputs, require_output_logprobs(lps, "greedy decode"), require_top_logprobs(tops, "greedy decode")


def run(ctx: ProbeContext) -> ProbeOutput:
    prompts = [list(p) for p in ctx.workload.prompts]
    batch = ctx.param("batch_size") or len(prompts)
    top_k = ctx.param("top_k")
    passes = 1 if ctx.deterministic else 2  # a noisy build: the second pass is the noise reference
    total = len(prompts) * 2 * passes
    outputs, lps, tops = _greedy(ctx, prompts, batch, top_k, lambda done: ctx.advance(done, total))
    # A noisy build decodes twice too: the second decode is the base's run-to-run reference.
    again = _greedy(ctx, prompts, batch, top_k, lambda done: ctx.advance(len(prompts) + done, total)) \
        if passes == 2 else None
    sequences = [p + c for p, c in zip(prompts, continuations(prompts, ctx.param("continuation_len")))]
    scores = []
    for n in range(passes):
        scores.append(_score(ctx, sequences, batch))
        ctx.advance(len(prompts) * (passes + 1 + n), total)
    nll = [-sum(s.logprobs) / len(s.logprobs) for s in scores[0]]
    samples = []
    for i, (seq, p, o, lp, top) in enumerate(zip(sequences, prompts, outputs, lps, tops)):
        sample = {"input_ids": seq, "prompt_len": len(p), "output_ids": o, "output_logprobs": lp,
                  "output_top_logprobs": _lists(top), "scored_nll": nll[i]}
        for name, score in zip(PASSES, scores):
            sample[f"{name}_logprobs"], sample[f"{name}_top_logprobs"] = score[i].logprobs, _lists(score[i].top)
        if again is not None:
            sample["redecoded_ids"], sample["redecoded_logprobs"] = again[0][i], again[1][i]
        samples.append(sample)
    facts = {"deterministic": ctx.deterministic, "prompts": len(prompts), "top_k": top_k,
             "scored_tokens": sum(len(s.logprobs) for s in scores[0]),
             "continuation_len": ctx.param("continuation_len"), "scoring_passes": passes,
             "nll_mean": sum(nll) / len(nll), "degenerate_prompts": degenerate_outputs(outputs)}
    metric = Metric("scored_nll", Kind.EXACT if ctx.deterministic else Kind.NOISY, tuple(nll),
                    better="lower", headline="mean", paired=True)
    return ProbeOutput(samples=tuple(samples), metrics=(metric,), facts=facts)


# --------------------------------------------------------------------------- across


def _flat(rows: Sequence[Sequence[Any]]) -> tuple[float, ...]:
    return tuple(float(v) for row in rows for v in row)


def _flat_top(rows: Sequence[Sequence[Sequence[Sequence[float]]]]) -> tuple[float, ...]:
    # (logprob, id) of every top-k entry in order: a changed rank or value is a changed value.
    return tuple(float(x) for row in rows for top in row for entry in top for x in entry)


def _first(pairs: Sequence[tuple[Any, Any]], offset: int = 0) -> int | None:
    return next((j + offset for j, (x, y) in enumerate(pairs) if x != y), None)


def first_divergence(base: Sequence[dict[str, Any]], cand: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per prompt, where the two sides first served something else (None where they agree
    throughout): `scored`, the teacher-forced position (its index in the input ids) whose
    logprob or top-k differs; `decode`, the greedy output position whose id, logprob or top-k
    differs; `greedy`, the first output position whose id differs."""
    return [{"scored": _first(list(zip(_served(b, "scored"), _served(c, "scored"))), offset=1),
             "decode": _first(list(zip(_served(b, "output", "output_ids"), _served(c, "output", "output_ids")))),
             "greedy": _first(list(zip(b["output_ids"], c["output_ids"])))}
            for b, c in zip(base, cand)]


def _served(sample: dict[str, Any], prefix: str, ids: str = "") -> list[tuple[Any, ...]]:
    """Per position of one pass (`prefix`: scored, output), what was served there: its logprob,
    its top-k and (`ids`) its token id."""
    return list(zip(sample[f"{prefix}_logprobs"], sample[f"{prefix}_top_logprobs"], *([sample[ids]] if ids else [])))


def _earliest(per_prompt: list[dict[str, Any]], what: str) -> dict[str, int] | None:
    """The first prompt that diverges in `what`, at its first divergent position."""
    i = next((i for i, d in enumerate(per_prompt) if d[what] is not None), None)
    return None if i is None else {"prompt": i, "position": per_prompt[i][what]}


def across(base: CellResult, cand: CellResult, params: dict[str, Any]) -> Across:
    b, c = base.samples, cand.samples
    if len(b) != len(c) or any(x["input_ids"] != y["input_ids"] for x, y in zip(b, c)):
        return Across((), {"not_comparable": "the two sides scored different sequences"})
    tau = params["tau"]
    kl = [divergence.topk_kl_per_token(x["scored_top_logprobs"], y["scored_top_logprobs"]) for x, y in zip(b, c)]
    k3 = [divergence.k3_per_token(x["scored_logprobs"], y["scored_logprobs"]) for x, y in zip(b, c)]
    agree = [divergence.top1_agreement(x["scored_top_logprobs"], y["scored_top_logprobs"]) for x, y in zip(b, c)]
    kl_tails, k3_tails = divergence.pooled_tails(kl, tau), divergence.pooled_tails(k3, tau)
    diverged = first_divergence(b, c)
    kl_per_prompt = [sum(t) / len(t) for t in kl]
    facts: dict[str, Any] = {
        "kl_mean": sum(kl_per_prompt) / len(kl_per_prompt), "kl_p99": kl_tails.p99, "kl_max": kl_tails.max,
        "kl_frac_over_tau": kl_tails.frac_over_tau,
        "k3_mean": k3_tails.mean, "k3_p99": k3_tails.p99, "k3_max": k3_tails.max,
        "k3_frac_over_tau": k3_tails.frac_over_tau, "tau": tau,
        "top1_agree": sum(a * len(t) for a, t in zip(agree, kl)) / kl_tails.n_tokens,
        "greedy_identical": all(x["output_ids"] == y["output_ids"] for x, y in zip(b, c)),
        "greedy_first_diff": _earliest(diverged, "greedy"),
        "first_divergent": _earliest(diverged, "scored"),
        "decode_first_divergent": _earliest(diverged, "decode"),
        "prompts_diverged": sum(1 for d in diverged if d["scored"] is not None or d["decode"] is not None),
    }
    exact = base.facts.get("deterministic") and cand.facts.get("deterministic")
    if exact:
        def pair(name: str, values, headline: str) -> tuple[Metric, Metric]:
            base_m, cand_m = (Metric(name, Kind.EXACT, values(cell.samples), headline=headline) for cell in (base, cand))
            return base_m, cand_m

        # Logprobs read as their mean; ids and flattened top-k lists have no telling statistic.
        metrics: tuple[tuple[Metric, Metric], ...] = (pair("scored_logprobs", lambda s: _flat([x["scored_logprobs"] for x in s]), "mean"),
                   pair("scored_topk", lambda s: _flat_top([x["scored_top_logprobs"] for x in s]), ""),
                   pair("greedy_ids", lambda s: _flat([x["output_ids"] for x in s]), ""),
                   pair("greedy_logprobs", lambda s: _flat([x["output_logprobs"] for x in s]), "mean"),
                   # the decode's top-k as served, in order: what decode_first_divergent locates too
                   pair("greedy_topk", lambda s: _flat_top([x["output_top_logprobs"] for x in s]), ""))
        return Across(metrics, facts)
    if not all("rescored_top_logprobs" in x for x in b):
        return Across((), {**facts, "not_comparable": "the base scored once: no run-to-run reference"})
    # The base against its own second pass: what the noise alone gives, prompt by prompt.
    self_kl = [divergence.topk_kl_per_token(x["scored_top_logprobs"], x["rescored_top_logprobs"]) for x in b]
    self_agree = [divergence.top1_agreement(x["scored_top_logprobs"], x["rescored_top_logprobs"]) for x in b]
    self_per_prompt = [sum(t) / len(t) for t in self_kl]
    facts["base_self_kl_mean"] = sum(self_per_prompt) / len(self_per_prompt)
    # An infinite KL (one side puts all the top-k mass where the other leaves some out) has no
    # median to test: it is a difference of kind, compared exactly.
    infinite = [i for i, v in enumerate(kl_per_prompt + self_per_prompt) if not math.isfinite(v)]
    kind = Kind.EXACT if infinite else Kind.NOISY
    if infinite:
        facts["kl_infinite_prompts"] = sorted({i % len(b) for i in infinite})
    metrics = ((Metric("kl", kind, tuple(self_per_prompt), better="lower", headline="mean", paired=True),
                Metric("kl", kind, tuple(kl_per_prompt), better="lower", headline="mean", paired=True)),
               (Metric("top1_agree", Kind.NOISY, tuple(self_agree), better="higher", headline="mean", paired=True),
                Metric("top1_agree", Kind.NOISY, tuple(agree), better="higher", headline="mean", paired=True)))
    if all("redecoded_ids" in x for x in b):  # cells stored before the base decoded twice lack it
        metrics += greedy_metrics(b, c)
    return Across(metrics, facts)


def greedy_metrics(base: Sequence[dict[str, Any]], cand: Sequence[dict[str, Any]]
                   ) -> tuple[tuple[Metric, Metric], ...]:
    """Off deterministic mode, the greedy decode judged against the noise: per prompt, the share
    of the base's output that the other decode reproduces before its ids first differ
    (`greedy_match`) and the k3 of its logprobs over that common prefix (`greedy_k3`; 0 where
    none: greedy_match holds that case), the base's own second decode on the base side, the
    candidate's decode on the other."""
    def against(ref: dict[str, Any], ids: Sequence[int], lps: Sequence[float]) -> tuple[float, float]:
        common = next((j for j, (x, y) in enumerate(zip(ref["output_ids"], ids)) if x != y),
                      min(len(ref["output_ids"]), len(ids)))
        k3 = divergence.k3(ref["output_logprobs"][:common], list(lps)[:common]) if common else 0.0
        return common / max(1, len(ref["output_ids"])), k3

    own = [against(x, x["redecoded_ids"], x["redecoded_logprobs"]) for x in base]
    other = [against(x, y["output_ids"], y["output_logprobs"]) for x, y in zip(base, cand)]
    return tuple((Metric(name, Kind.NOISY, tuple(v[i] for v in own), better=better, headline="mean", paired=True),
                  Metric(name, Kind.NOISY, tuple(v[i] for v in other), better=better, headline="mean", paired=True))
                 for i, (name, better) in enumerate((("greedy_match", "higher"), ("greedy_k3", "lower"))))


def describe(facts: dict[str, Any], primary: Metric | None) -> str:
    if "kl_mean" not in facts:  # the base's cell, or one side alone: what it served
        return (f"NLL {fmt(facts.get('nll_mean'))} over {facts.get('scored_tokens')} scored tokens, "
                f"top-{facts.get('top_k')}")
    text = (f"KL to base {fmt(facts['kl_mean'])} (p99 {fmt(facts['kl_p99'])}, max {fmt(facts['kl_max'])}), "
            f"k3 {fmt(facts['k3_mean'])}, top-1 agree {facts['top1_agree']:.0%}, "
            f"greedy {'identical' if facts['greedy_identical'] else 'differs'}")
    # The scored sequence's position is an index into its input ids; the decode's, an output's.
    first, where = ((facts["first_divergent"], "scored token") if facts.get("first_divergent")
                    else (facts.get("decode_first_divergent"), "output position"))
    if first:
        text += f", first differs at prompt {first['prompt']}, {where} {first['position']}"
    return text


def planned(params: dict[str, Any], workload: WorkloadSpec, deterministic: bool) -> tuple[PlannedMetric, ...]:
    """Deterministic: the exact metrics; otherwise KL, top-1 agreement and the greedy decode's
    two, one value per prompt, paired with the base's own second pass: what the design check needs."""
    if deterministic:
        return tuple(PlannedMetric(name, Kind.EXACT) for name in EXACT_METRICS)
    return tuple(PlannedMetric(name, Kind.NOISY, paired=True, key="prompts") for name in NOISY_METRICS)


def _flat_place(key: str, what: str, offset: int = 0):
    """Value i of a metric that lays each prompt's `key` list end to end, in words: "prompt 2,
    <what> 7" (`offset`: a scored logprob i is the input id i + 1's)."""
    def place(samples: Sequence[dict[str, Any]], i: int) -> str:
        for p, sample in enumerate(samples):
            if i < len(sample[key]):
                return f"prompt {p}, {what} {i + offset}"
            i -= len(sample[key])
        return f"{what} {i + offset} past the base's last prompt"
    return place


def _topk_place(key: str, what: str, offset: int):
    """Value i of a flattened top-k metric (each position's top-k (logprob, id) pairs end to end,
    of `key`), in words: "prompt 0, scored token 1, top-2 token id"."""
    def place(samples: Sequence[dict[str, Any]], i: int) -> str:
        for p, sample in enumerate(samples):
            for j, top in enumerate(sample[key]):
                if i < 2 * len(top):
                    rank, field = divmod(i, 2)
                    return f"prompt {p}, {what} {j + offset}, top-{rank + 1} {('logprob', 'token id')[field]}"
                i -= 2 * len(top)
        return f"top-k value {i} past the base's last prompt"
    return place


VALUES = {
    "scored_logprobs": ValueIndex("scored token", _flat_place("scored_logprobs", "scored token", offset=1)),
    "scored_topk": ValueIndex("top-k value", _topk_place("scored_top_logprobs", "scored token", offset=1)),
    "greedy_ids": ValueIndex("output token", _flat_place("output_ids", "output position")),
    "greedy_logprobs": ValueIndex("output token", _flat_place("output_logprobs", "output position")),
    "greedy_topk": ValueIndex("top-k value", _topk_place("output_top_logprobs", "output position", offset=0)),
    "greedy_match": ValueIndex("prompt", lambda samples, i: f"prompt {i}",
                               sides="the base's second decode vs the base → the candidate vs the base"),
    "greedy_k3": ValueIndex("prompt", lambda samples, i: f"prompt {i}",
                            sides="the base's second decode vs the base → the candidate vs the base"),
    "kl": ValueIndex("prompt", lambda samples, i: f"prompt {i}",
                     sides="the base's rerun vs the base → the candidate vs the base"),
    "top1_agree": ValueIndex("prompt", lambda samples, i: f"prompt {i}",
                             sides="the base's rerun with the base → the candidate with the base"),
}


FIGURES = (
    *(metric(name) for name in (*EXACT_METRICS, *NOISY_METRICS)),
    # each side's own cell: what it served, compared only through the derived metrics above
    # each side's own score, a function of its scored logprobs (compared exactly under
    # deterministic mode, by KL otherwise)
    *summary("scored_logprobs", "scored_nll", "nll_mean"),
    *parameter("deterministic", "top_k", "continuation_len", "scoring_passes", "tau"),
    *given("the workload's size, the same on both sides", "prompts", "scored_tokens"),
    *summary("greedy_ids", "degenerate_prompts"),
    *summary("kl", "kl_mean", "kl_p99", "kl_max", "kl_frac_over_tau", "base_self_kl_mean", "kl_infinite_prompts"),
    *summary("scored_logprobs", "k3_mean", "k3_p99", "k3_max", "k3_frac_over_tau", "prompts_diverged"),
    *summary("top1_agree", "top1_agree"),
    *summary("greedy_ids", "greedy_identical"),
    *locator("greedy_ids", "greedy_first_diff"), *locator("scored_logprobs", "first_divergent"),
    *locator("greedy_topk", "decode_first_divergent"),
    *given("why the sides could not be compared (the row reads error)", "not_comparable"),
)

# --------------------------------------------------------------------------- reproducer


def _exact_reproducer(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    facts = comp.judged.get("candidate", {})
    top_k, n = cell_top_k(cand), len(cand.samples)
    scored, greedy = facts.get("first_divergent"), facts.get("decode_first_divergent")
    if scored:
        i, j = scored["prompt"], scored["position"]
        seq = cand.samples[i]["input_ids"]

        def score(size: int) -> tuple[Request, ...]:
            return (score_request("teacher-forced score, cut after the first divergent position" if size == j + 1
                           else f"teacher-forced score, the first {size} of {len(seq)} tokens", seq[:size], top_k),)
        return with_form(Reproducer(
            prompts=(i,), first_divergent={**scored, "what": "teacher-forced logprob"},
            requests=score(j + 1),
            expect=(f"the last input position ({j}): input_token_logprobs[{j}] or input_top_logprobs[{j}] "
                    f"differ between base and candidate; every earlier position is equal; "
                    + across_sides("logprob", base, cand, i, "scored_logprobs", j - 1,
                                    f"at prompt {i}, input position {j}")),
            shrink=(f"From the stored samples: {n} prompts → 1 (prompt {i}, the first that differs); its "
                    f"scored sequence {len(seq)} → {j + 1} tokens (a position's logprob depends only on the "
                    f"tokens before it)")),
            across_form(score, 0, "input_token_logprobs", "input position {}", j + 1, len(seq), "scored sequence"))
    if greedy:
        i, j = greedy["prompt"], greedy["position"]
        prompt = cand.samples[i]["input_ids"][:cand.samples[i]["prompt_len"]]
        full = len(cand.samples[i]["output_ids"])

        def decode(size: int) -> tuple[Request, ...]:
            return (FLUSH, decode_request("greedy decode, up to the first divergent token" if size == j + 1
                                   else f"greedy decode, {size} tokens", prompt, size, top_k))
        return with_form(Reproducer(
            prompts=(i,), first_divergent={**greedy, "what": "greedy output"},
            requests=decode(j + 1),
            expect=(f"output token {j}: its id, logprob or top-{top_k} differ between base and candidate; "
                    + across_sides("token", base, cand, i, "output_ids", j, f"at prompt {i}, output position {j}")
                    + "; " + across_sides("logprob", base, cand, i, "output_logprobs", j, "there")),
            shrink=(f"From the stored samples: {n} prompts → 1 (prompt {i}); max_new_tokens "
                    f"{len(cand.samples[i]['output_ids'])} → {j + 1}; the prompt kept whole (the "
                    f"teacher-forced score agrees, and shortening the prompt would need the servers)")),
            across_form(decode, 1, "output_token_logprobs", "output position {}", j + 1, full, "max_new_tokens",
                         ids=True))
    return None

def _largest_effect_requests(comp: ProbeComparison, cand: CellResult, i: int,
                             sign: float) -> tuple[tuple[Request, ...], Form | None]:
    """A noisy verdict's prompt i: the candidate's decode, then the teacher-forced score both
    sides are compared on."""
    found = noisy_decode(cand, i)
    if found is None:
        return (), None
    output, decode = found
    requests = (*decode, score_request("teacher-forced score", cand.samples[i]["input_ids"], cell_top_k(cand)))
    return requests, across_form(lambda _size: requests, 3, "input_token_logprobs", "input position {}",
                                 len(output), len(output), "")


REPRODUCTION = Reproduction(exact=_exact_reproducer, paired_effect=_largest_effect_requests)

PROBE = register(ProbeKind(
    "revision_kl", run,
    "base vs candidate on the same tokens: greedy decode + teacher-forced score, KL(base ‖ candidate)",
    params=PARAMS, describe=describe, across=across, planned=planned, values=VALUES.get, figures=FIGURES, reproduction=REPRODUCTION))
