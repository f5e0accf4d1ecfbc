"""The smallest request that shows a *different* verdict, ready to post to each side's server.

A PR reviewer's next question after *different* is "show me one request that differs". A
`Reproducer` answers it from the two cells' stored samples, without a server (it counts its
re-measurements, and this module makes none):

* an exact verdict is shrunk greedily: every prompt dropped but the first that differs, then
  the prompt (or the scored sequence) shortened to where the difference first shows, wherever
  the stored samples prove the shorter request still differs (a teacher-forced logprob depends
  on the tokens before it only; a greedy token on the tokens before it only);
* a noisy verdict gets the prompt with the largest paired effect, whole (noise does not shrink);
* each side's first divergent (prompt, position), the requests (`/generate` JSON bodies, and
  `/flush_cache` where a cold start matters) with a `curl` line each (127.0.0.1), and what to
  compare in the answers, with what each side's samples returned there (observed, never a side
  assumed bit-exact);
* a decode-cache hit names the span of cached positions whose state first diverges: the
  decode-written part of the hit, from the Mamba checkpoint before it (track interval).

Each probe's requests are built by a function in `BUILDERS` (by probe name); a probe without
one gets the located difference without a request.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from harness.client import Logprobs, generate_body
from harness.plan import WorkloadSpec
from harness.probes import PROBES
from harness.probes.determinism import batch as determinism_batch
from harness.results import CellResult, Metric, ProbeComparison, Reproducer, Request
from harness.stats import Kind, Verdict
from harness.textfmt import fmt_pair
from harness.workloads import build

Pairs = Sequence[tuple[Metric, Metric | None]]


def reproducer(comp: ProbeComparison, base: CellResult, cand: CellResult, pairs: Pairs) -> Reproducer | None:
    """The reproducer of a *different* comparison (None for any other verdict)."""
    if comp.verdict != Verdict.DIFFERENT:
        return None
    decided = comp.metrics.get(comp.decided_by or "")
    builder = BUILDERS.get(comp.probe)
    if builder is not None and decided is not None and base.samples and cand.samples:
        if decided.kind == Kind.NOISY:
            return _largest_effect(comp, base, cand, pairs)
        built = builder(comp, base, cand)
        if built is not None:
            return built
    return _located(comp, decided, base, pairs)


# --------------------------------------------------------------------------- shared pieces


def _prompts(cell: CellResult) -> list[list[int]] | None:
    """The cell's workload prompts, rebuilt from its recorded spec (None if they cannot be:
    a longbench file no longer there)."""
    spec = cell.metadata.get("workload")
    if not spec:
        return None
    try:
        return [list(p) for p in build(WorkloadSpec(**{**spec, "prompt_len": tuple(spec["prompt_len"])})).prompts]
    except Exception:  # the reproducer is a courtesy: a missing data set leaves it without requests
        return None


def _top_k(cell: CellResult) -> int:
    return int(cell.facts.get("top_k") or 0)


def _decode(what: str, ids: Sequence[int], new: int, top_k: int = 0) -> Request:
    return Request(what, "/generate", generate_body(ids, max_new_tokens=new, logprobs=Logprobs(top_k=top_k)))


def _score(what: str, ids: Sequence[int], top_k: int = 0) -> Request:
    return Request(what, "/generate", generate_body(ids, max_new_tokens=0, logprobs=Logprobs(0, top_k)))


FLUSH = Request("start cold", "/flush_cache")


def _divergent_side(base: CellResult, cand: CellResult) -> tuple[str, int, dict[str, Any]] | None:
    """(side, sample index, sample) of the first sample that diverged within its own side, on
    the candidate first (a regression), else the base (a fix)."""
    for side, cell in (("candidate", cand), ("base", base)):
        for i, s in enumerate(cell.samples):
            if s.get("first_divergent") is not None:
                return side, i, s
    return None


def _value(cell: CellResult, sample: int, key: str, position: int) -> Any:
    """A stored sample's value at `position` of its list `key` (None where it holds none)."""
    values = cell.samples[sample].get(key) if sample < len(cell.samples) else None
    return values[position] if isinstance(values, list) and 0 <= position < len(values) else None


def _returned(a: Any, b: Any) -> tuple[str, str]:
    """Two observed values as text: logprobs at the digits that tell them apart, token ids as
    they are."""
    return fmt_pair(a, b) if isinstance(a, float) and isinstance(b, float) else (str(a), str(b))


def _across_sides(what: str, base: CellResult, cand: CellResult, sample: int, key: str, position: int,
                  where: str) -> str:
    """What each side returned at one place (`where`: "at prompt 0, input position 1"), as
    observed: "base returned logprob -13.7, candidate -14.3 at …" (one value: "both returned")."""
    b, c = _value(base, sample, key, position), _value(cand, sample, key, position)
    if b is None or c is None:
        return f"the {'base' if b is None else 'candidate'}'s samples hold no {what} {where}"
    shown = _returned(b, c)
    return (f"both returned {what} {shown[0]} {where}" if b == c
            else f"base returned {what} {shown[0]}, candidate {shown[1]} {where}")


def _each_side(answer: tuple[str, str], base: CellResult, cand: CellResult, sample: int, position: int,
               where: str) -> str:
    """A self-check's answer (`answer`: its name, its sample key) and its cold replay at one
    output position (`where` in words), on each side as observed: "observed at prompt 0, output
    position 3: the base's decode returned -1.24, its replay -1.24 (equal); the candidate's decode returned
    -1.2399, its replay -1.2389": never a side assumed equal."""
    name, key = answer
    parts = []
    for side, cell in (("base", base), ("candidate", cand)):
        mine, replay = _value(cell, sample, key, position), _value(cell, sample, "replay_logprobs", position)
        if mine is None or replay is None:
            parts.append(f"the {side}'s samples hold no output position {position}")
            continue
        shown = _returned(mine, replay)
        parts.append(f"the {side}'s {name} returned {shown[0]}, its replay {shown[1]}"
                     + (" (equal)" if mine == replay else ""))
    return f"observed {where}: " + "; ".join(parts)


def _located(comp: ProbeComparison, decided, base: CellResult, pairs: Pairs) -> Reproducer:
    """No request form for this probe (or its samples): where the deciding metric differs, and
    each differing exact metric's first differing value in words."""
    where = None if decided is None else decided.first_difference
    return Reproducer(
        prompts=(), first_divergent=None if where is None else {"index": where, "metric": comp.decided_by},
        requests=(), expect="; ".join(_exact_differences(comp, base, pairs)) or comp.note,
        shrink="Not shrunk: this probe's difference is a property of the whole run "
               "(rerun the configuration with the cells' server argv)")


def _exact_differences(comp: ProbeComparison, base: CellResult, pairs: Pairs) -> list[str]:
    """"swa_peak at request 0: base 117, candidate 659" for each exact metric that differs at
    a value both sides have (placed as its probe declares, `ProbeKind.values`)."""
    kind = PROBES.get(comp.probe)
    out = []
    for b, c in pairs:
        found = comp.metrics.get(b.name)
        i = None if found is None or found.kind != Kind.EXACT else found.first_difference
        if c is None or i is None or i >= min(len(b.values), len(c.values)):
            continue
        declared = kind.values(b.name) if kind is not None and kind.values is not None else None
        place = declared.place(base.samples, i) if declared is not None else f"value {i}"
        shown = fmt_pair(b.values[i], c.values[i])
        out.append(f"{b.name} at {place}: base {shown[0]}, candidate {shown[1]}")
    return out


def _largest_effect(comp: ProbeComparison, base: CellResult, cand: CellResult, pairs: Pairs) -> Reproducer:
    """A noisy verdict: the prompt whose paired difference is largest in the effect's direction."""
    b, c = next((m, o) for m, o in pairs if m.name == comp.decided_by)
    effect = comp.metrics[comp.decided_by].effect
    sign = 1.0 if effect >= 0 else -1.0
    if not (b.paired and c is not None and len(b.values) == len(c.values)):
        return _located(comp, comp.metrics[comp.decided_by], base, pairs)
    i = max(range(len(b.values)), key=lambda k: sign * (c.values[k] - b.values[k]))
    prompts, top_k = _prompts(cand), _top_k(cand)
    requests: tuple[Request, ...] = ()
    if comp.probe in ("kl", "revision_kl") and prompts is not None and i < len(prompts):
        output = cand.samples[i]["output_ids"]
        requests = (FLUSH, _decode("greedy decode", prompts[i], len(output), top_k), FLUSH)
        requests += ((_score("cold replay of prompt + the candidate's stored output", prompts[i] + output, top_k),)
                     if comp.probe == "kl" else
                     (_score("teacher-forced score", cand.samples[i]["input_ids"], top_k),))
    return Reproducer(
        prompts=(i,), first_divergent=None, requests=requests,
        expect=(f"{comp.decided_by} of prompt {i}: base {b.values[i]:.6g}, candidate {c.values[i]:.6g} "
                f"(the largest paired difference; the verdict is over all {len(b.values)})"),
        shrink="Not shrunk (a noisy verdict): the prompt with the largest paired effect")


# --------------------------------------------------------------------------- per probe


def _revision_kl(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    facts = comp.judged.get("candidate", {})
    top_k, n = _top_k(cand), len(cand.samples)
    scored, greedy = facts.get("first_divergent"), facts.get("decode_first_divergent")
    if scored:
        i, j = scored["prompt"], scored["position"]
        seq = cand.samples[i]["input_ids"]
        return Reproducer(
            prompts=(i,), first_divergent={**scored, "what": "teacher-forced logprob"},
            requests=(_score("teacher-forced score, cut after the first divergent position", seq[:j + 1], top_k),),
            expect=(f"the last input position ({j}): input_token_logprobs[{j}] or input_top_logprobs[{j}] "
                    f"differ between base and candidate; every earlier position is equal; "
                    + _across_sides("logprob", base, cand, i, "scored_logprobs", j - 1,
                                    f"at prompt {i}, input position {j}")),
            shrink=(f"From the stored samples: {n} prompts → 1 (prompt {i}, the first that differs); its "
                    f"scored sequence {len(seq)} → {j + 1} tokens (a position's logprob depends only on the "
                    f"tokens before it)"))
    if greedy:
        i, j = greedy["prompt"], greedy["position"]
        prompt = cand.samples[i]["input_ids"][:cand.samples[i]["prompt_len"]]
        return Reproducer(
            prompts=(i,), first_divergent={**greedy, "what": "greedy output"},
            requests=(FLUSH, _decode("greedy decode, up to the first divergent token", prompt, j + 1, top_k)),
            expect=(f"output token {j}: its id, logprob or top-{top_k} differ between base and candidate; "
                    + _across_sides("token", base, cand, i, "output_ids", j, f"at prompt {i}, output position {j}")
                    + "; " + _across_sides("logprob", base, cand, i, "output_logprobs", j, "there")),
            shrink=(f"From the stored samples: {n} prompts → 1 (prompt {i}); max_new_tokens "
                    f"{len(cand.samples[i]['output_ids'])} → {j + 1}; the prompt kept whole (the "
                    f"teacher-forced score agrees, and shortening the prompt would need the servers)"))
    return None


def _kl(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    found, prompts = _divergent_side(base, cand), _prompts(cand)
    if found is None or prompts is None:
        return None
    side, i, s = found
    j, top_k = s["first_divergent"], _top_k(cand)
    return Reproducer(
        prompts=(i,), first_divergent={"prompt": i, "position": j, "what": "decode vs cold replay", "side": side},
        requests=(FLUSH, _decode("greedy decode", prompts[i], j + 1, top_k), FLUSH,
                  _score("cold replay of prompt + output", prompts[i] + s["output_ids"][:j + 1], top_k)),
        expect=(f"on the {side}, the decode's output_token_logprobs[{j}] differs from the replay's last "
                f"input_token_logprobs; " + _each_side(("decode", "decode_logprobs"), base, cand, i, j,
                                                       f"at prompt {i}, output position {j}")),
        shrink=(f"From the stored samples: {len(cand.samples)} prompts → 1 (prompt {i}, the first that diverges); "
                f"max_new_tokens {len(s['output_ids'])} → {j + 1} (a greedy token depends only on those before)"))


def _track_interval(cell: CellResult) -> int | None:
    value = cell.server_flags().get("--mamba-track-interval")
    return None if value is None else int(value)


def _cache_hit(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    found, prompts = _divergent_side(base, cand), _prompts(cand)
    if found is None or prompts is None or "input_ids" not in found[2]:
        return None  # a cell stored before hit samples named their prompt
    side, hit, s = found
    i, j, turn2, cached = s["prompt"], s["first_divergent"], s["input_ids"], s["cached_tokens"]
    decode = comp.probe == "decode_cache_hit"
    seed = (_decode("turn 1: its decode writes the state turn 2 hits", prompts[i], len(turn2) - len(prompts[i]) - 1)
            if decode else Request("seed the cache", "/generate", generate_body(prompts[i], max_new_tokens=0)))
    span, where = None, ""
    if decode:
        # The hit restores the state at `cached` (a checkpoint, every track interval); the part
        # of the hit that decode wrote, within the interval before that checkpoint, is where it
        # was built.
        interval = _track_interval(cand if side == "candidate" else base)
        start = len(prompts[i]) if interval is None else max(len(prompts[i]), cached - interval)
        span = (start, cached)
        why = (f"the track interval ({interval}) before the checkpoint the hit restored" if interval
               else "the decode-written part of the hit")
        where = f"; the state first diverges in positions [{start}, {cached}): {why}"
    return Reproducer(
        prompts=(i,), first_divergent={"prompt": i, "position": j, "what": "cache hit vs cold replay",
                                       "side": side, "cached_tokens": cached},
        requests=(FLUSH, seed, _decode("the turn that hits the cache", turn2, j + 1), FLUSH,
                  _score("cold replay of the hit's input + output", turn2 + s["output_ids"][:j + 1])),
        expect=(f"on the {side}, the hit's output_token_logprobs[{j}] differs from the replay's last "
                f"input_token_logprobs (check cached_tokens > 0 on the hit); "
                + _each_side(("hit", "hit_logprobs"), base, cand, hit, j, f"at prompt {i}, output position {j}")
                + where),
        shrink=(f"From the stored samples: {len(prompts)} prompts → 1 (prompt {i}); max_new_tokens "
                f"{len(s['output_ids'])} → {j + 1}; the prompt kept whole (shortening it moves the cache's "
                f"aligned hit: it would need the servers)"),
        position_range=span)


def _determinism(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    prompts = _prompts(cand)
    side = next((s for s, c in (("candidate", cand), ("base", base)) if c.facts.get("first_differing_batch_size")),
                None)
    if side is None or prompts is None:
        return None
    cell = cand if side == "candidate" else base
    size = cell.facts["first_differing_batch_size"]
    new = cell.metadata.get("workload", {}).get("output_len", 1)
    return Reproducer(
        prompts=(0,), first_divergent={"prompt": 0, "batch_size": size, "what": "batch size", "side": side},
        requests=(_decode("prompt 0 alone", prompts[0], new),
                  _decode(f"prompt 0 in a batch of {size}", determinism_batch(prompts, size), new)),
        expect=f"on the {side}, the first answer of the batch of {size} differs from prompt 0 alone",
        shrink=f"Batch sizes → the first that differs ({size}); prompts kept (the batch is the cause)")


def _reference(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    """The reference probe: the requests of the first divergent request's phase, for one prompt,
    to each side's server of this configuration; what the reference configuration served there is
    in the row (its own server, of the same revision, answers the same requests)."""
    found = next(((side, cell, comp.judged.get(side, {})) for side, cell in (("candidate", cand), ("base", base))
                  if comp.judged.get(side, {}).get("first_divergence")), None)
    if found is None:
        return None
    side, cell, facts = found
    first = facts["first_divergence"]
    phase, request, j = first["phase"], first["request"], first["position"]
    sample = next((s for s in cell.samples if (s["phase"], s["request"]) == (phase, request)), None)
    if sample is None:
        return None
    prompt = next(s["input_ids"] for s in cell.samples if s["phase"] == "cold" and s["request"] == request)
    new, top_k = int(cell.metadata.get("workload", {}).get("output_len", len(sample["output_ids"]))), _top_k(cell)
    # A hit needs the cache seeded by the cold decode of its prompt; a multi-turn request's input
    # is that prompt + this side's cold output (in the sample).
    seed = ((_decode(f"cold decode of prompt {request}: seeds the cache", prompt, new),)
            if phase in ("hit", "multiturn") else ())
    ours, theirs = first.get("served"), first.get("reference_served")
    observed = (f"; observed there: {facts['reference']} served {theirs}, this configuration {ours} "
                f"([token id, logprob])" if ours or theirs else "")
    other = "base" if side == "candidate" else "candidate"
    return Reproducer(
        prompts=(request,), first_divergent={"prompt": request, "position": j, "what": f"{phase} vs {facts['reference']}",
                                             "side": side, "phase": phase},
        requests=(FLUSH, *seed, _decode(f"the {phase} request, up to the first divergent token", sample["input_ids"],
                                        j + 1, top_k)),
        expect=(f"on the {side}, output token {j} (id, logprob or top-{top_k}) differs from what a "
                f"{facts['reference']} server of the same revision answers to the same requests"
                f"{' (its input differs already: its cold output did)' if first.get('input_differs') else ''}"
                f"{observed}; on the {other} it is {'the same' if not comp.judged.get(other, {}).get('first_divergence') else 'different too, elsewhere'}"),
        shrink=(f"From the stored samples: {len(cell.samples)} requests → the {phase} phase's requests for prompt "
                f"{request}; max_new_tokens {len(sample['output_ids'])} → {j + 1} (a greedy token depends only on "
                f"those before); the prompt kept whole (shortening it moves the cache's aligned hit)"))


BUILDERS: dict[str, Callable[[ProbeComparison, CellResult, CellResult], Reproducer | None]] = {
    "revision_kl": _revision_kl, "kl": _kl, "prefill_cache_hit": _cache_hit, "decode_cache_hit": _cache_hit,
    "determinism": _determinism, "reference": _reference,
}
