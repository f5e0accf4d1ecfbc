"""Pieces probes share: batching, cold replay and the k3 metric with its tails, the threshold
gate, and the SWA pool curve read from Decode log lines."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NoReturn, Sequence

from harness import divergence
from harness.client import Logprobs, SGLangClient
from harness.errors import ServerFinding
from harness.logparse import by_dp_rank, parse_batch_lines
from harness.probes.base import Figure, given, locator, metric, parameter, summary
from harness.results import Metric
from harness.textfmt import fmt, value_label
from harness.verdict_stats import Kind


def batches(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    size = max(1, int(size))
    return [items[i:i + size] for i in range(0, len(items), size)]


@dataclass(frozen=True)
class Replayed:
    """A cold replay's last `tail` positions: the logprob of each token, and with top_k the
    top-k (logprob, token id) pairs there."""

    logprobs: list[float]
    top: list[list[tuple[float, int]]]


def cold_replay(client: SGLangClient, sequences: Sequence[Sequence[int]], tails: Sequence[int],
                batch_size: int, top_k: int = 0) -> list[Replayed]:
    """Flush, then prefill each sequence (no decode) and return its last `tail` positions:
    the reference a decode or a cache hit must reproduce. A server that answers fewer positions,
    or a null, NaN or inf among them, is a ServerFinding that names which and where."""
    client.flush_cache()
    rows: list[list[float | None]] = []
    tops: list[list[list[tuple[float | None, int]] | None]] = []
    missing: list[dict[str, Any]] = []
    for chunk, chunk_tails in zip(batches(sequences, batch_size), batches(tails, batch_size)):
        gens = client.generate(list(chunk), max_new_tokens=0, logprobs=Logprobs(start_len=0, top_k=top_k))
        for gen, tail in zip(gens, chunk_tails):
            lps = gen.input_logprobs[-tail:] if tail else []
            top = gen.input_top_logprobs[-tail:] if tail and top_k else []
            if len(lps) < tail or (top_k and len(top) < tail):
                missing.append({"prompt": len(rows), "returned": len(gen.input_logprobs), "needed_last": tail})
            rows.append(lps)
            tops.append(top)
    if missing:
        first = missing[0]
        raise ServerFinding(
            f"cold replay returned too few input logprobs on {len(missing)} of {len(sequences)} prompts "
            f"(prompt {first['prompt']}: {first['returned']} returned, the last {first['needed_last']} needed)",
            tuple(missing))
    # null, NaN and inf each named as what it is, at its position within the tail.
    scored = require_output_logprobs(rows, "cold replay", kind="input")
    # Without top_k no position has entries (each `top` above is empty).
    checked = require_top_logprobs(tops, "cold replay", kind="input top-k") if top_k else [[] for _ in tops]
    return [Replayed(lps, top) for lps, top in zip(scored, checked)]


def degenerate_outputs(outputs: Sequence[Sequence[int]], min_len: int = 8) -> int:
    """How many outputs are one token over and over: what a server with broken state (or
    dummy weights) decodes. A fact shown beside the KL, not a failure."""
    return sum(1 for o in outputs if len(o) >= min_len and len(set(o)) == 1)


def _unusable(value: float | None, allow_neg_inf: bool = False) -> bool:
    # A sampled token's logprob is finite: the model gave it mass. A top-k alternative may
    # be -inf (a masked token ranked in a short list); NaN and +inf are never a logprob.
    if value is None or value != value:
        return True
    return math.isinf(value) and not (allow_neg_inf and value < 0)


def _broken_rows(rows: Sequence[Sequence[Any]], bad_at: Any) -> list[dict[str, Any]]:
    """Per prompt with a bad position: where its nulls are and where its NaN/inf values are."""
    broken = []
    for i, row in enumerate(rows):
        labels = [(j, label) for j, item in enumerate(row) for label in [bad_at(item)] if label]
        if labels:
            broken.append({"prompt": i, "tokens": len(row),
                           "null_positions": [j for j, label in labels if label == "null"],
                           **({"non_finite_positions": [[j, label] for j, label in labels if label != "null"]}
                              if any(label != "null" for _, label in labels) else {})})
    return broken


def _raise_broken(what: str, kind: str, broken: list[dict[str, Any]], total: int) -> NoReturn:
    first = broken[0]
    firsts = [*first["null_positions"], *(j for j, _ in first.get("non_finite_positions", []))]
    labels = sorted({"null" for b in broken if b["null_positions"]}
                    | {label for b in broken for _, label in b.get("non_finite_positions", [])},
                    key=["null", "NaN", "inf", "-inf"].index)
    raise ServerFinding(f"{what} returned {'/'.join(labels)} {kind} logprobs on {len(broken)} of {total} "
                        f"prompts (first at position {min(firsts)} of prompt {first['prompt']})", tuple(broken))


def require_output_logprobs(rows: Sequence[Sequence[float | None]], what: str,
                            kind: str = "output") -> list[list[float]]:
    """Every output position of every answer has a finite logprob, or a ServerFinding that says
    on how many prompts, which kind (null, NaN, inf) and where (prompt, position) the first is.
    `kind`: what the positions are to the server ("input" for a replay's scored prompt)."""
    broken = _broken_rows(rows, lambda v: value_label(v) if _unusable(v) else "")
    if broken:
        _raise_broken(what, kind, broken, len(rows))
    # Nothing broken: no position is null, so the filter drops none; it narrows the type.
    return [[float(v) for v in row if v is not None] for row in rows]


def require_top_logprobs(rows: Sequence[Sequence[Sequence[tuple[float | None, int]] | None]],
                         what: str, kind: str = "top-k") -> list[list[list[tuple[float, int]]]]:
    """Every output position of every answer has its top-k entries, each with a logprob that is
    not null, NaN or +inf, or a ServerFinding that says on how many prompts and where. Returns
    the rows as checked: every position's entries, none null."""
    def bad(top: Sequence[tuple[float | None, int]] | None) -> str:
        if top is None:
            return "null"
        return next((value_label(lp) for lp, _ in top if _unusable(lp, allow_neg_inf=True)), "")

    broken = _broken_rows(rows, bad)
    if broken:
        _raise_broken(what, kind, broken, len(rows))
    # Nothing broken: no position or logprob is null, so the filters drop none; they narrow the type.
    return [[[(lp, t) for lp, t in top if lp is not None] for top in row if top is not None] for row in rows]


def kl_metric(refs: Sequence[Sequence[float]], tests: Sequence[Sequence[float]], *,
              deterministic: bool, tau: float, paired: bool, prompts: Sequence[int] | None = None
              ) -> tuple[tuple[Metric, ...], dict[str, Any], list[dict[str, Any]]]:
    """Per-prompt k3 as a metric (exact under deterministic mode), pooled tails as facts.
    `paired`: value i is prompt i on both sides (every prompt kept, not a subset). `prompts`:
    the workload prompt each (ref, test) pair answers (a cache probe's hits), else pair i's.
    The metrics: k3, then under deterministic mode `first_divergent` (divergence_metric)."""
    per_prompt = [divergence.k3(r, t) for r, t in zip(refs, tests)]
    tails = divergence.pooled_tails([divergence.k3_per_token(r, t) for r, t in zip(refs, tests)], tau)
    firsts = [divergence.kl_tails(r, t, tau).first_divergent for r, t in zip(refs, tests)]
    diverged = [f for f in firsts if f is not None]
    answered = list(prompts) if prompts is not None else list(range(len(firsts)))
    mean = sum(per_prompt) / len(per_prompt) if per_prompt else 0.0
    facts: dict[str, Any] = {
        "k3_mean": mean,
        "k3_median": tails.median,
        "k3_p99": tails.p99,
        "k3_max": tails.max,
        "frac_over_tau": tails.frac_over_tau,
        "tau": tau,
        "tokens": tails.n_tokens,
        "prompts": len(per_prompt),
        "prompts_diverged": len(diverged),
        # Locators: where the earliest divergence is (a row names (prompt, position)); what they
        # locate is compared per prompt, by k3 and under deterministic mode by first_divergent.
        "first_divergent": min(diverged) if diverged else None,
        "first_divergent_prompt": answered[firsts.index(min(diverged))] if diverged else None,
    }
    metric = Metric(name="k3", kind=Kind.EXACT if deterministic else Kind.NOISY,
                    values=tuple(per_prompt), better="lower", headline="mean", paired=paired)
    located = (divergence_metric(firsts, [len(t) for t in tests], paired),) if deterministic else ()
    per_sample = [{"k3": k, "first_divergent": f} for k, f in zip(per_prompt, firsts)]
    return (metric, *located), facts, per_sample


# What kl_metric and judge_gate record: k3 (with, under deterministic mode, first_divergent) and
# its summaries; the workload's size; the tail and gate parameters.
KL_FIGURES: tuple[Figure, ...] = (
    metric("k3"), metric("first_divergent"),
    *summary("k3", "k3_mean", "k3_median", "k3_p99", "k3_max", "frac_over_tau", "prompts_diverged",
             "passes_threshold"),
    *locator("k3", "first_divergent", "first_divergent_prompt"),
    *parameter("tau", "threshold"),
    *given("the workload's size: prompts and output_len, the same on both sides", "tokens", "prompts"),
)


def divergence_metric(firsts: Sequence[int | None], lengths: Sequence[int], paired: bool) -> Metric:
    """Per prompt, the output position where the answer first departs from its replay; its
    length (one past its last position) where it never does.

    Under deterministic mode this is an exact figure and decides, as every exact metric does by
    default: k3 sums each prompt's terms, so two sides whose answers depart at different
    positions by terms that sum alike (one ulp each, at equal logprobs) read the same on k3
    alone. Off deterministic mode the positions move with the noise that k3's floor judges:
    there they are locators (facts and samples), shown, not compared."""
    return Metric("first_divergent", Kind.EXACT,
                  tuple(float(n if f is None else f) for f, n in zip(firsts, lengths)),
                  headline="min", paired=paired)


def judge_gate(facts: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """SGLang's gate: a side passes when its mean k3 is below `threshold` (strict <)."""
    threshold = params["threshold"]
    if threshold is None or facts.get("k3_mean") is None:
        return {}
    return {"threshold": threshold, "passes_threshold": facts["k3_mean"] < threshold}


def describe_kl(facts: dict[str, Any], primary: Metric | None) -> str:
    text = (f"k3 {fmt(facts.get('k3_mean'))} (max {fmt(facts.get('k3_max'))}, "
            f"{fmt(facts.get('frac_over_tau', 0) * 100, 2)}% > τ)")
    if facts.get("topk_kl_mean") is not None:
        text += (f" · top-{facts['top_k']} KL {fmt(facts['topk_kl_mean'])} "
                 f"(max {fmt(facts.get('topk_kl_max'))}, top-1 agree {facts['top1_agree']:.0%})")
    if facts.get("first_divergent") is not None:
        prompt = facts.get("first_divergent_prompt")  # absent from cells stored before it was
        at = f"prompt {prompt}, " if prompt is not None else ""
        text += f", first differs from the replay at {at}output position {facts['first_divergent']}"
    if "hit_fraction" in facts:
        text += f", hit {facts['hit_fraction']:.0%}"
    if facts.get("degenerate_prompts"):
        text += f", ⚠ {facts['degenerate_prompts']}/{facts.get('prompts')} outputs one token repeated"
    if facts.get("threshold") is not None:
        mark = "✓" if facts.get("passes_threshold") else "✗"
        text += f"; gate < {fmt(facts['threshold'])} {mark}"
    return text


@dataclass(frozen=True)
class SwaCurve:
    """SWA pool occupancy per Decode line: one point per decode step (per verify round under
    speculative decoding), against the tokens generated up to and including that step."""

    generated: tuple[int, ...]
    held: tuple[int, ...]  # `#swa token`
    usage: tuple[float, ...]  # `swa token usage`

    def __bool__(self) -> bool:
        return bool(self.held)


def swa_curve(log_text: str) -> SwaCurve:
    """The `#swa token` curve of the Decode lines in `log_text` (logged at interval 1).

    The x axis counts generated tokens: one per sequence a Prefill line admits (its first
    token), then per Decode line `accept len` tokens per running request under speculative
    decoding and one without. Lines without `#swa token` (no SWA pool) are skipped. Under DP
    attention each rank has its own pool and scheduler: the curve is the lowest rank's, never a
    mix of ranks' lines.
    """
    ranks = by_dp_rank(parse_batch_lines(log_text))
    generated, held, usage, total = [], [], [], 0.0
    for line in ranks[min(ranks, key=lambda r: -1 if r is None else r)] if ranks else []:
        if line.kind == "prefill":
            total += line.get("#new-seq") or 0.0
            continue
        total += (line.get("accept len") or 1.0) * (line.get("#running-req") or 1.0)
        swa = line.get("#swa token")
        if swa is None:
            continue
        generated.append(round(total))
        held.append(int(swa))
        usage.append(line.get("swa token usage") or 0.0)
    return SwaCurve(tuple(generated), tuple(held), tuple(usage))
