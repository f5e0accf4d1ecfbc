"""kl: decode with logprobs, then flush and replay prompt+output as one prefill.

SGLang's check (test/kl_test_utils.py): greedy decode with `ignore_eos`, replay with
`max_new_tokens=0, logprob_start_len=0`, k3 on the sampled tokens' logprobs. Under
deterministic inference the two must agree bit for bit. With `top_k`, both sides also return
the top-k logprobs per position, and the KL over those distributions (the rest of the mass as
one bucket) sees a change in the alternatives that k3 on the sampled token alone misses.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Sequence

from harness import divergence
from harness.client import Logprobs
from harness.divergence import TopLogprobs
from harness.params import Param
from harness.suite import WorkloadSpec
from harness.probes.base import (PlannedMetric, ProbeContext, ProbeKind, Reproduction, descriptive, metric, parameter,
                                 register, summary)
from harness.probes.common import (KL_FIGURES, batches, cold_replay, degenerate_outputs, describe_kl, divergence_metric,
                                   judge_gate, kl_metric, require_output_logprobs, require_top_logprobs)
from harness.probes.shared_params import BATCH_SIZE, JUDGING, KL, MEASURED, WORKLOAD
from harness.reproducer import (FLUSH, OWN_OUTPUT, Form, cell_top_k, decode_request, divergent_side, each_side,
                                noisy_decode, order_form, order_text, ordered_entries, score_request, self_form,
                                with_form, workload_prompts)
from harness.results import CellResult, Metric, ProbeComparison, ProbeOutput, Reproducer, Request
from harness.verdict_stats import Kind

TOP_K = Param("top_k", int, 8, "top logprobs per position on both sides (0: sampled token only)",
              MEASURED, low=0, high=1000)


def run(ctx: ProbeContext) -> ProbeOutput:
    prompts = list(ctx.workload.prompts)
    batch = ctx.param("batch_size") or len(prompts)
    top_k = ctx.param("top_k")
    total = 2 * len(prompts)
    ctx.client.flush_cache()
    outputs, decode_lps, decode_top = [], [], []
    for chunk in batches(prompts, batch):
        for gen in ctx.client.generate(list(chunk), max_new_tokens=ctx.workload.output_len,
                                       logprobs=Logprobs(top_k=top_k)):
            outputs.append(gen.output_ids)
            decode_lps.append(gen.output_logprobs)
            decode_top.append(gen.output_top_logprobs)
        ctx.advance(len(outputs), total)
    decode_scored = require_output_logprobs(decode_lps, "decode")
    decode_tops = require_top_logprobs(decode_top, "decode") if top_k else []
    sequences = [list(p) + list(o) for p, o in zip(prompts, outputs)]
    replay = cold_replay(ctx.client, sequences, [len(o) for o in outputs], batch, top_k)
    ctx.advance(total, total)
    tau = ctx.param("tau")
    (k3, *located), facts, per = kl_metric([r.logprobs for r in replay], decode_scored,
                                           deterministic=ctx.deterministic, tau=tau, paired=True)
    facts["degenerate_prompts"] = degenerate_outputs(outputs)
    metrics = (k3, *located)
    if top_k:
        top_metric, top_facts, top_per = topk_metric([r.top for r in replay], decode_tops, top_k,
                                                     deterministic=ctx.deterministic, tau=tau)
        # Under deterministic mode the decode's top-k must be the replay's as a list, in order: a
        # top-k KL and a top-1 agreement read two lists with the same entries in another order alike.
        ordered = (ordered_topk_metric([r.top for r in replay], decode_tops),) if ctx.deterministic else ()
        metrics, facts = (k3, top_metric, *located, *ordered), {**facts, **top_facts}
        per = [{**x, **y} for x, y in zip(per, top_per)]
    samples = tuple(
        {"prompt_len": len(p), "output_ids": list(o), "decode_logprobs": d, "replay_logprobs": r.logprobs,
         **({"decode_top_logprobs": dt, "replay_top_logprobs": r.top} if top_k else {}), **x}
        for p, o, d, dt, r, x in zip(prompts, outputs, decode_scored, decode_top, replay, per)
    )
    return ProbeOutput(samples=samples, metrics=metrics, facts=facts)


def topk_metric(refs: Sequence[Sequence[TopLogprobs]], tests: Sequence[Sequence[TopLogprobs]], k: int, *,
                deterministic: bool, tau: float) -> tuple[Metric, dict[str, Any], list[dict[str, Any]]]:
    """Per-prompt mean top-k KL as a metric (exact under deterministic mode), pooled tails and
    the top-1 agreement as facts."""
    per_token = [divergence.topk_kl_per_token(r, t) for r, t in zip(refs, tests)]
    per_prompt = [sum(terms) / len(terms) for terms in per_token]
    tails = divergence.pooled_tails(per_token, tau)
    agree = [divergence.top1_agreement(r, t) for r, t in zip(refs, tests)]
    facts = {
        "top_k": k,
        "topk_kl_mean": sum(per_prompt) / len(per_prompt),
        "topk_kl_p99": tails.p99,
        "topk_kl_max": tails.max,
        "topk_frac_over_tau": tails.frac_over_tau,
        # token-weighted: every position counts once, whichever prompt it is in
        "top1_agree": sum(a * len(t) for a, t in zip(agree, per_token)) / tails.n_tokens,
    }
    metric = Metric("topk_kl", Kind.EXACT if deterministic else Kind.NOISY, tuple(per_prompt),
                    better="lower", headline="mean", paired=True)
    return metric, facts, [{"topk_kl": k_, "top1_agree": a} for k_, a in zip(per_prompt, agree)]


def ordered_topk_metric(refs: Sequence[Sequence[TopLogprobs]], tests: Sequence[Sequence[TopLogprobs]]) -> Metric:
    """Per prompt, the first output position whose top-k list, as (logprob, token id) pairs in the
    order served, differs from the replay's (the answer's length where none does)."""
    def first(ref: Sequence[TopLogprobs], test: Sequence[TopLogprobs]) -> int | None:
        return next((j for j, (r, t) in enumerate(zip(ref, test)) if _entries(r) != _entries(t)),
                    None if len(ref) == len(test) else min(len(ref), len(test)))
    return dataclasses.replace(divergence_metric([first(r, t) for r, t in zip(refs, tests)],
                                                 [len(t) for t in tests], paired=True), name="topk_first_divergent")


def _entries(top: TopLogprobs) -> list[tuple[float, int]]:
    # A fresh answer's tuples and a stored cell's lists compare alike.
    return [(float(lp), int(tid)) for lp, tid in top]


def planned(params: dict[str, Any], workload: WorkloadSpec, deterministic: bool) -> tuple[PlannedMetric, ...]:
    """k3 and (with top_k) top-k KL per prompt, paired: exact under deterministic inference,
    where each prompt's first divergent position is compared too, and with top_k the first
    position whose ordered top-k list differs."""
    kind = Kind.EXACT if deterministic else Kind.NOISY
    names = ("k3", "topk_kl") if params["top_k"] else ("k3",)
    located = (PlannedMetric("first_divergent", Kind.EXACT, paired=True),) if deterministic else ()
    ordered = (PlannedMetric("topk_first_divergent", Kind.EXACT, paired=True),) \
        if deterministic and params["top_k"] else ()
    return (*(PlannedMetric(n, kind, paired=True, key="prompts") for n in names), *located, *ordered)


FIGURES = (
    *KL_FIGURES, metric("topk_kl"), metric("topk_first_divergent"),
    *summary("topk_kl", "topk_kl_mean", "topk_kl_p99", "topk_kl_max", "topk_frac_over_tau", "top1_agree"),
    *parameter("top_k"),
    *descriptive("a warning about this side's own outputs; what the two revisions serve is compared by "
                 "revision_kl (greedy_ids)", "degenerate_prompts"),
)


# --------------------------------------------------------------------------- reproducer


def _exact_reproducer(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    if comp.decided_by in ("topk_kl", "topk_first_divergent"):
        return _topk_reproducer(comp, base, cand)
    found, prompts = divergent_side(base, cand), workload_prompts(cand)
    if found is None or prompts is None:
        return None
    side, i, s = found
    j = s["first_divergent"]
    decode = _decode_and_replay(prompts[i], s["output_ids"], side, cell_top_k(cand))
    return with_form(Reproducer(
        prompts=(i,), first_divergent={"prompt": i, "position": j, "what": "decode vs cold replay", "side": side},
        requests=decode(j + 1),
        expect=(f"on the {side}, the decode's output_token_logprobs[{j}] differs from the replay's last "
                f"input_token_logprobs; " + each_side(("decode", "decode_logprobs"), base, cand, i, j,
                                                       f"at prompt {i}, output position {j}")),
        shrink=_shrunk(cand, i, len(s["output_ids"]), j)),
        self_form(decode, 1, 3, j + 1, len(s["output_ids"])))


def _decode_and_replay(prompt: list[int], output: list[int], side: str, top_k: int) -> Callable[[int], tuple[Request, ...]]:
    """The requests at max_new_tokens `size`: a cold greedy decode of `prompt`, then the cold
    replay of prompt + what that decode returned (`output`: the `side`'s stored one)."""
    def decode(size: int) -> tuple[Request, ...]:
        return (FLUSH, decode_request("greedy decode", prompt, size, top_k), FLUSH,
                score_request("cold replay of prompt + output" + OWN_OUTPUT.format(side),
                              prompt + output[:size], top_k, (1, len(prompt))))
    return decode


def _shrunk(cand: CellResult, i: int, full: int, j: int, why: str = "a greedy token depends") -> str:
    return (f"From the stored samples: {len(cand.samples)} prompts → 1 (prompt {i}, the first that diverges); "
            f"max_new_tokens {full} → {j + 1} ({why} only on those before)")


def _topk_reproducer(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    """A row decided by a top-k list (its KL over the alternatives, or its order): the first
    prompt whose figure differs, decoded up to the first position where a side's decode top-k
    list departs from its replay's and replayed, checked as top-k lists in order (`order_form`),
    not by the sampled tokens' logprobs, which such a change leaves alone."""
    decided, prompts = comp.metrics.get(comp.decided_by or ""), workload_prompts(cand)
    i = None if decided is None else decided.first_difference
    if i is None or prompts is None or i >= min(len(base.samples), len(cand.samples), len(prompts)):
        return None

    def stored(x: CellResult) -> list[tuple[Any, Any]]:  # a side's (decode, replay) top-k lists of prompt i
        s = x.samples[i]
        return list(zip(s.get("decode_top_logprobs") or [], s.get("replay_top_logprobs") or []))

    def departure(x: CellResult) -> int | None:
        return next((t for t, (d, r) in enumerate(stored(x)) if ordered_entries(d) != ordered_entries(r)), None)

    departs = [(j, side, x) for side, x in (("candidate", cand), ("base", base)) if (j := departure(x)) is not None]
    if not departs:
        return None
    j, side, cell = min(departs, key=lambda found: found[0])  # the candidate first where both depart there
    output = cell.samples[i]["output_ids"]
    decode = _decode_and_replay(prompts[i], output, side, cell_top_k(cand))
    seen = "; ".join(order_text(name, stored(x), j) for name, x in (("base", base), ("candidate", cand)))
    return with_form(Reproducer(
        prompts=(i,), first_divergent={"prompt": i, "position": j, "what": "decode top-k list vs cold replay",
                                       "side": side},
        requests=decode(j + 1),
        expect=(f"on the {side}, the decode's output_top_logprobs[{j}] is not the replay's input_top_logprobs there "
                f"as an ordered list; observed at prompt {i}, output position {j}: {seen}"),
        shrink=_shrunk(cand, i, len(output), j, "a greedy token and its top-k list depend")),
        order_form(decode, 1, 3, j + 1, len(output)))


def _largest_effect_requests(comp: ProbeComparison, cand: CellResult, i: int,
                             sign: float) -> tuple[tuple[Request, ...], Form | None]:
    """A noisy verdict's prompt i: the candidate's decode, then the cold replay of its output."""
    found = noisy_decode(cand, i)
    if found is None:
        return (), None
    output, (flush, decode, after) = found
    assert decode.body is not None, "noisy_decode's decode is a /generate request, with its body"
    prompt = decode.body["input_ids"]
    requests = (flush, decode, after, score_request("cold replay of prompt + output" + OWN_OUTPUT.format("candidate"),
                                                    prompt + output, cell_top_k(cand), (1, len(prompt))))
    return requests, self_form(lambda _size: requests, 1, 3, len(output), len(output), sign)


REPRODUCTION = Reproduction(exact=_exact_reproducer, paired_effect=_largest_effect_requests)

PROBE = register(ProbeKind(
    "kl", run, "decode vs cold prefill replay (k3 on sampled-token logprobs, KL over the top-k)",
    params=(*WORKLOAD, BATCH_SIZE, TOP_K, *KL, *JUDGING), describe=describe_kl, judge=judge_gate,
    planned=planned, figures=FIGURES, reproduction=REPRODUCTION))
