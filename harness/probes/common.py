"""Pieces probes share: batching, cold replay and the k3 metric with its tails, the threshold
gate, and the SWA pool curve read from Decode log lines."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from harness import stats
from harness.client import Logprobs, SGLangClient
from harness.errors import ServerFinding
from harness.logparse import by_dp_rank, parse_batch_lines
from harness.report.format import fmt
from harness.results import Metric
from harness.stats import Kind


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
    the reference a decode or a cache hit must reproduce."""
    client.flush_cache()
    out: list[Replayed] = []
    broken: list[dict[str, Any]] = []
    for chunk, chunk_tails in zip(batches(sequences, batch_size), batches(tails, batch_size)):
        gens = client.generate(list(chunk), max_new_tokens=0, logprobs=Logprobs(start_len=0, top_k=top_k))
        for gen, tail in zip(gens, chunk_tails):
            lps = gen.input_logprobs[-tail:] if tail else []
            top = gen.input_top_logprobs[-tail:] if tail and top_k else []
            nulls = [i for i, v in enumerate(lps) if _unusable(v)]  # null, NaN or inf
            top_gap = any(t is None or any(_unusable(lp, allow_neg_inf=True) for lp, _ in t) for t in top)
            if len(lps) < tail or nulls or (top_k and (len(top) < tail or top_gap)):
                broken.append({"prompt": len(out) + len(broken), "returned": len(gen.input_logprobs),
                               "needed_last": tail, "null_positions_of_last": nulls})
                continue
            out.append(Replayed([float(v) for v in lps], [list(t) for t in top]))
    if broken:
        first = broken[0]
        raise ServerFinding(
            f"cold replay returned null, non-finite or missing input logprobs on {len(broken)} of {len(sequences)} "
            f"prompts (prompt {first['prompt']}: {first['returned']} returned, "
            f"{len(first['null_positions_of_last'])} of the last {first['needed_last']} null)", tuple(broken))
    return out


def degenerate_outputs(outputs: Sequence[Sequence[int]], min_len: int = 8) -> int:
    """How many outputs are one token over and over: what a server with broken state (or
    dummy weights) decodes. A fact shown beside the KL, not a failure."""
    return sum(1 for o in outputs if len(o) >= min_len and len(set(o)) == 1)


def _label(value: float | None) -> str:
    """What is wrong with a logprob no answer may hold: null, NaN or inf."""
    if value is None:
        return "null"
    return "NaN" if value != value else ("inf" if value > 0 else "-inf")


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


def _raise_broken(what: str, kind: str, broken: list[dict[str, Any]], total: int) -> None:
    first = broken[0]
    firsts = [*first["null_positions"], *(j for j, _ in first.get("non_finite_positions", []))]
    labels = sorted({"null" for b in broken if b["null_positions"]}
                    | {label for b in broken for _, label in b.get("non_finite_positions", [])},
                    key=["null", "NaN", "inf", "-inf"].index)
    raise ServerFinding(f"{what} returned {'/'.join(labels)} {kind} logprobs on {len(broken)} of {total} "
                        f"prompts (first at position {min(firsts)} of prompt {first['prompt']})", tuple(broken))


def require_output_logprobs(rows: Sequence[Sequence[float | None]], what: str) -> list[list[float]]:
    """Every output position of every answer has a finite logprob, or a ServerFinding that says
    on how many prompts, which kind (null, NaN, inf) and where (prompt, position) the first is."""
    broken = _broken_rows(rows, lambda v: _label(v) if _unusable(v) else "")
    if broken:
        _raise_broken(what, "output", broken, len(rows))
    return [[float(v) for v in row] for row in rows]


def require_top_logprobs(rows: Sequence[Sequence[Sequence[tuple[float | None, int]] | None]],
                         what: str) -> None:
    """Every output position of every answer has its top-k entries, each with a logprob that is
    not null, NaN or +inf, or a ServerFinding that says on how many prompts and where."""
    def bad(top: Sequence[tuple[float | None, int]] | None) -> str:
        if top is None:
            return "null"
        return next((_label(lp) for lp, _ in top if _unusable(lp, allow_neg_inf=True)), "")

    broken = _broken_rows(rows, bad)
    if broken:
        _raise_broken(what, "top-k", broken, len(rows))


def kl_metric(refs: Sequence[Sequence[float]], tests: Sequence[Sequence[float]], *,
              deterministic: bool, tau: float, paired: bool,
              name: str = "k3") -> tuple[Metric, dict[str, Any], list[dict[str, Any]]]:
    """Per-prompt k3 as a metric (exact under deterministic mode), pooled tails as facts.
    `paired`: value i is prompt i on both sides (every prompt kept, not a subset)."""
    per_prompt = [stats.k3(r, t) for r, t in zip(refs, tests)]
    tails = stats.pooled_tails([stats.k3_per_token(r, t) for r, t in zip(refs, tests)], tau)
    firsts = [stats.kl_tails(r, t, tau).first_divergent for r, t in zip(refs, tests)]
    diverged = [f for f in firsts if f is not None]
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
        "first_divergent": min(diverged) if diverged else None,
        # the prompt that earliest position is in: a row names (prompt, position)
        "first_divergent_prompt": firsts.index(min(diverged)) if diverged else None,
    }
    metric = Metric(name=name, kind=Kind.EXACT if deterministic else Kind.NOISY,
                    values=tuple(per_prompt), better="lower", headline="mean", paired=paired)
    per_sample = [{"k3": k, "first_divergent": f} for k, f in zip(per_prompt, firsts)]
    return metric, facts, per_sample


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
