"""prefill_cache_hit and decode_cache_hit: a prefix-cache hit must reproduce a cold prefill.

prefill: seed the cache with each prompt (`max_new_tokens=0`), generate again (a hit), and
compare the hit's decode logprobs with a cold replay. decode: turn 1 generates; turn 2 is
prompt + turn-1 output + one suffix token, so its hit covers decode-written state.
A prompt counts only if it really hit (SGLang's rule); if fewer than `min_hit_fraction` of
prompts hit, the result is vacuous and says so rather than reporting a match.

Whether there was a cache to hit is read from the hits themselves (none with cached_tokens > 0:
vacuous), not from `/server_info`: releases report raw settings (0.5.16) or resolved ones (0.5.17
on), so a cache the server turned off itself (deterministic flashinfer) read *n/a* on one
release and vacuous on the other. Only a configuration that asks for the cache off is *n/a*.
What `/server_info` says of the prefix-cache policy (`CACHE_POLICY_KEYS`, at any depth: newer
releases group their settings) is the `cache_policy` fact; a row whose sides' policies differ
names the change (harness/compare.py), since a release's new default cache legitimately moves
exact cached_tokens.

A→B→A (`aba`, deterministic mode): before the cold replay flushes the cache, each hit's request
is sent again (A), then a request with another prefix (B, its turn reversed: a cold prefill that
writes state of its own), then A once more. The second A must reuse as many tokens as the first
and serve the same tokens and logprobs bit for bit: a cache hit compared only with a cold
prefill on a quiet cache cannot show state that another request overwrote in between (a slot
freed while the cache still points at it).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from harness.client import OUTPUT_LOGPROBS, Generation, generate_body
from harness.errors import ProbeNotApplicable, VacuousResult
from harness.suite import WorkloadSpec
from harness.params import Param
from harness.probes.base import (PlannedMetric, ProbeContext, ProbeKind, Reproduction, ValueIndex, descriptive, given,
                                 locator, metric, parameter, register, summary)
from harness.probes.determinism import departure
from harness.probes.common import (KL_FIGURES, batches, cold_replay, describe_kl, judge_gate, kl_metric,
                                   require_output_logprobs)
from harness.probes.shared_params import BATCH_SIZE, JUDGING, KL, MEASURED, MIN_HIT_FRACTION, WORKLOAD
from harness.reproducer import (FLUSH, OWN_OUTPUT, Form, Observed, decode_request, divergent_side, each_side,
                                score_request, self_form, with_form, workload_prompts)
from harness.results import CellResult, Metric, ProbeComparison, ProbeOutput, Reproducer, Request
from harness.verdict_stats import Kind, Verdict
from harness.workloads import suffix_token


# The /server_info settings that decide which prefixes a hit reuses. `radix_cache_impl` is the
# reference server's name for the prefix cache's implementation (SGLang 0.5.21's release notes:
# a Rust core by default; its key in /server_info was not read from a 0.5.21+ source here).
CACHE_POLICY_KEYS = ("disable_radix_cache", "radix_cache_impl", "page_size", "radix_eviction_policy")


def server_setting(info: Any, key: str) -> Any:
    """`key`'s value in /server_info, at the top or in a group of settings (None: absent)."""
    if not isinstance(info, dict):
        return None
    if key in info:
        return info[key]
    return next((v for group in info.values() if (v := server_setting(group, key)) is not None), None)


def cache_policy(info: dict[str, Any]) -> str:
    """The prefix-cache settings /server_info reports, as `key=value, …` ("" where none)."""
    found = ((key, server_setting(info, key)) for key in CACHE_POLICY_KEYS)
    return ", ".join(f"{key}={value}" for key, value in found if value is not None)


def _hit_run(ctx: ProbeContext, turn2: Sequence[Sequence[int]], min_hit: Sequence[int],
             total_steps: int) -> ProbeOutput:
    """Generate `turn2` (expected to hit), keep the real hits, compare them with cold replays."""
    batch = ctx.param("batch_size") or len(turn2)
    outputs, lps, cached = [], [], []
    for chunk in batches(list(turn2), batch):
        for gen in ctx.client.generate(list(chunk), max_new_tokens=ctx.workload.output_len,
                                       logprobs=OUTPUT_LOGPROBS):
            outputs.append(gen.output_ids)
            lps.append(gen.output_logprobs)
            cached.append(gen.cached_tokens)
    ctx.advance(total_steps - 1, total_steps)
    scored = require_output_logprobs(lps, "the turn that should hit the cache")
    hits = [i for i, (c, m) in enumerate(zip(cached, min_hit)) if c > m]
    fraction = len(hits) / len(turn2)
    floor = ctx.param("min_hit_fraction")
    facts = {"hit_fraction": fraction, "min_hit_fraction": floor,
             "hit_lengths": [cached[i] for i in hits]}
    if (policy := cache_policy(ctx.server_info)):
        facts["cache_policy"] = policy
    what = hit_text(cached, min_hit, len(hits), floor)
    if not hits:
        said = ("; /server_info reports disable_radix_cache: the server turned its cache off"
                if server_setting(ctx.server_info, "disable_radix_cache") else "")
        raise VacuousResult(what + said)
    if fraction < floor:
        # Too few to vouch for a match, but a difference among the hits there are is a finding:
        # compare.py reads *different* as such and anything else as an error (vacuous).
        facts["vacuous"] = what
    aba_metrics: tuple[Metric, ...] = ()
    if ctx.param("aba") and ctx.deterministic:
        aba_metrics, facts["aba"], unhit = _aba_phase(ctx, [turn2[i] for i in hits], hits, [min_hit[i] for i in hits])
        if unhit:  # the phase vouches for nothing: the row is no match unless it differs
            facts["vacuous"] = "; ".join(filter(None, (facts.get("vacuous"), unhit)))
    sequences = [list(turn2[i]) + list(outputs[i]) for i in hits]
    replay = [r.logprobs for r in cold_replay(ctx.client, sequences, [len(outputs[i]) for i in hits], batch)]
    ctx.advance(total_steps, total_steps)
    (k3, *located), kl_facts, per = kl_metric(replay, [scored[i] for i in hits],
                                              deterministic=ctx.deterministic, tau=ctx.param("tau"),
                                              paired=False,  # the hit subsets of two sides may differ
                                              prompts=hits)  # the workload's prompts, not the hits' indices
    hit_metric = Metric("hit_fraction", Kind.EXACT, (fraction,), better="higher", headline="first")
    # What each prompt's turn reused, hit or not: a fixed workload's exact figure on any
    # configuration. A change that reuses less (a shorter match, a lost checkpoint) serves the
    # same logprobs from a longer prefill, and the hit fraction alone still reads 100%.
    reused = Metric("cached_tokens", Kind.EXACT, tuple(float(c) for c in cached), unit="tokens",
                    headline="sum", paired=True)
    samples = tuple(
        # `prompt` and `input_ids` (turn 2's) let a reproducer rebuild the requests of one hit.
        {"prompt": i, "input_ids": list(turn2[i]), "prompt_len": len(turn2[i]), "cached_tokens": cached[i],
         "output_ids": list(outputs[i]),
         "hit_logprobs": scored[i], "replay_logprobs": r, **x}
        for i, r, x in zip(hits, replay, per)
    )
    return ProbeOutput(samples=samples, metrics=(k3, hit_metric, reused, *located, *aba_metrics),
                       facts={**kl_facts, **facts})


def _aba_phase(ctx: ProbeContext, turns: Sequence[Sequence[int]], prompts: Sequence[int], min_hit: Sequence[int]
               ) -> tuple[tuple[Metric, ...], dict[str, Any], str]:
    """The hits' turns (A), then each reversed (B: other prefixes, prefilled cold, writing state
    of their own), then A again, each in `batch_size` chunks as the hit was sent: per prompt, the
    second A's cached tokens and the output position where it first departs from the first A
    (its ids or logprobs; its length where it never does). Last, why the phase is vacuous ("":
    it is not): a second A that reuses no more than `min_hit` was prefilled cold (B evicted
    it), and two cold prefills agree whatever B overwrote, so too few such hits
    (`min_hit_fraction`) vouch for nothing."""
    new, size = ctx.workload.output_len, ctx.param("batch_size") or len(turns)

    def send(seqs: Sequence[Sequence[int]], logprobs: bool) -> list[Generation]:
        return [gen for chunk in batches(list(seqs), size)
                for gen in ctx.client.generate([list(s) for s in chunk], max_new_tokens=new,
                                               logprobs=OUTPUT_LOGPROBS if logprobs else None)]

    first_a = send(turns, True)
    send([list(a)[::-1] for a in turns], False)
    second_a = send(turns, True)
    departs, first = [], None
    for prompt, a1, a2 in zip(prompts, first_a, second_a):
        at = departure(list(zip(a1.output_ids, a1.output_logprobs)), list(zip(a2.output_ids, a2.output_logprobs)))
        departs.append(float(at))
        if first is None and (at < len(a1.output_ids) or a1.cached_tokens != a2.cached_tokens):
            first = {"prompt": prompt, "position": at, "cached_tokens": [a1.cached_tokens, a2.cached_tokens]}
    reused = tuple(float(a2.cached_tokens) for a2 in second_a)
    hit = sum(a2.cached_tokens > m for a2, m in zip(second_a, min_hit))
    floor = ctx.param("min_hit_fraction")
    unhit = (f"A→B→A: the second A hit the cache on {hit} of {len(turns)} prompts (at least {floor:.0%} must)"
             if not hit or hit < floor * len(turns) else "")
    return ((Metric("aba_cached_tokens", Kind.EXACT, reused, unit="tokens", headline="sum", paired=True),
             Metric("aba_first_divergent", Kind.EXACT, tuple(departs), headline="min", paired=True)),
            {"prompts": len(turns), "first_divergence": first}, unhit)


def hit_text(cached: Sequence[int], min_hit: Sequence[int], reached: int, floor: float) -> str:
    """What the cache did: how many prompts hit at all, how many hits reached far enough."""
    hit = sum(c > 0 for c in cached)
    reach = f", {reached} reached past the prompt" if any(min_hit) else " the prefix cache"
    return f"{hit}/{len(cached)} prompts hit{reach} (min_hit_fraction {floor:g}); cached_tokens={list(cached)}"


def _require_cache(ctx: ProbeContext) -> None:
    """n/a where the configuration itself turns the cache off; what the server did with its
    settings is left to the hits."""
    if ctx.config.features.disable_radix_cache or "--disable-radix-cache" in ctx.config.args:
        raise ProbeNotApplicable("the configuration disables the radix cache")


def run_prefill(ctx: ProbeContext) -> ProbeOutput:
    _require_cache(ctx)
    prompts = list(ctx.workload.prompts)
    ctx.client.flush_cache()
    for chunk in batches(prompts, ctx.param("batch_size") or len(prompts)):
        ctx.client.generate(list(chunk), max_new_tokens=0)
    ctx.advance(1, 3)
    return _hit_run(ctx, prompts, [0] * len(prompts), 3)


def run_decode(ctx: ProbeContext) -> ProbeOutput:
    _require_cache(ctx)
    prompts = list(ctx.workload.prompts)
    suffix = suffix_token(ctx.workload.spec)
    ctx.client.flush_cache()
    turn2 = []
    for chunk in batches(prompts, ctx.param("batch_size") or len(prompts)):
        for p, gen in zip(chunk, ctx.client.generate(list(chunk), max_new_tokens=ctx.workload.output_len)):
            turn2.append(list(p) + list(gen.output_ids) + [suffix])
    ctx.advance(1, 3)
    # A decode hit must reach past the prompt into tokens written by decode.
    return _hit_run(ctx, turn2, [len(p) + 1 for p in prompts], 3)


def planned(params: dict[str, Any], workload: WorkloadSpec, deterministic: bool) -> tuple[PlannedMetric, ...]:
    """k3 over each side's own hits (unpaired; at most every prompt hits), the hit fraction, and
    under deterministic inference each hit's first divergent position."""
    located = (PlannedMetric("first_divergent", Kind.EXACT),) if deterministic else ()
    aba = ((PlannedMetric("aba_cached_tokens", Kind.EXACT, paired=True),
            PlannedMetric("aba_first_divergent", Kind.EXACT, paired=True)) if deterministic and params["aba"] else ())
    return (PlannedMetric("k3", Kind.EXACT if deterministic else Kind.NOISY, key="prompts", counts="hits"),
            PlannedMetric("hit_fraction", Kind.EXACT), PlannedMetric("cached_tokens", Kind.EXACT, paired=True),
            *located, *aba)


def _hit_place(samples: Sequence[dict[str, Any]], i: int) -> str:
    # k3's value i is the i-th prompt that hit: the sample names its workload prompt (a cell
    # stored before it did: the hit's index).
    prompt = samples[i].get("prompt") if i < len(samples) else None
    return f"hit {i}" if prompt is None else f"prompt {prompt}"


VALUES = {"k3": ValueIndex("hit", _hit_place), "first_divergent": ValueIndex("hit", _hit_place),
          "cached_tokens": ValueIndex("prompt", lambda samples, i: f"prompt {i}"),
          "aba_cached_tokens": ValueIndex("hit", _hit_place), "aba_first_divergent": ValueIndex("hit", _hit_place)}

FIGURES = (
    *KL_FIGURES, metric("hit_fraction"), metric("cached_tokens"),
    *summary("hit_fraction", "hit_fraction"), *summary("cached_tokens", "hit_lengths"),
    *parameter("min_hit_fraction"),
    # A→B→A: the second A against the first, per hit; `aba` locates the first that departs.
    metric("aba_cached_tokens"), metric("aba_first_divergent"),
    *locator("aba_first_divergent", "aba"),
    *given("why too few hits vouch for no match (the verdict reads it: error unless different)", "vacuous"),
    *given("the prefix-cache settings /server_info reports (a setting, not an answer): a row names a change "
           "between the sides", "cache_policy"),
)

ABA = Param("aba", bool, True, "under deterministic mode, each hit's request again with another prefix's "
            "request between (A→B→A): the second A must reuse and serve what the first did", MEASURED)

PARAMS = (*WORKLOAD, BATCH_SIZE, MIN_HIT_FRACTION, ABA, *KL, *JUDGING)
# --------------------------------------------------------------------------- reproducer


def _track_interval(cell: CellResult) -> int | None:
    value = cell.server_flags().get("--mamba-track-interval")
    return None if value is None else int(value)


def _reuse_reproducer(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    """A row decided by what a prompt's turn reused (`cached_tokens`): that prompt's seed and the
    turn that hits, its answer's cached_tokens compared (a change that reuses less serves the same
    logprobs: no logprob shows it)."""
    found, prompts = comp.metrics.get("cached_tokens"), workload_prompts(cand)
    i = None if found is None else found.first_difference
    if i is None or prompts is None or i >= len(prompts):
        return None
    side, s = next(((name, x) for name, cell in (("candidate", cand), ("base", base)) for x in cell.samples
                    if x.get("prompt") == i and "input_ids" in x), ("candidate", None))
    if s is None and comp.probe == "decode_cache_hit":
        return None  # turn 2 continues a turn-1 output that no hit sample of either side kept
    requests = _hit_requests(comp.probe, prompts[i], s or {"input_ids": list(prompts[i]), "output_ids": []}, side)(1)[:3]
    b, c = (x.metric("cached_tokens") for x in (base, cand))
    stored = [None if m is None or i >= len(m.values) else int(m.values[i]) for m in (b, c)]

    def read(_size: int, gens: list) -> Observed:
        return Observed(None if gens[2] is None else gens[2].cached_tokens)

    def words(x: Observed, y: Observed) -> str:
        return f"the turn that hits the cache reported cached_tokens {x.value} on the base, {y.value} on the candidate"

    return with_form(Reproducer(
        prompts=(i,), first_divergent={"prompt": i, "what": "cached_tokens of the turn that hits"},
        requests=requests, expect=f"cached_tokens of prompt {i}'s hit: base {stored[0]}, candidate {stored[1]}",
        shrink=f"From the stored samples: {len(prompts)} prompts → 1 (prompt {i}), its hit decoding one token "
               f"(what it reused is fixed at its prefill)"),
        Form(lambda _size: requests, read, words, 1, 1))


def _exact_reproducer(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    """The first hit that departs from its replay; where none does (or the row was decided by
    what the hits reused), the first prompt whose cached_tokens differ, if they do: a hit that
    reuses less, or no longer hits, shows there and in no logprob."""
    built = _divergence_reproducer(comp, base, cand) if comp.decided_by != "cached_tokens" else None
    reuse = comp.metrics.get("cached_tokens")
    if built is None and reuse is not None and reuse.verdict == Verdict.DIFFERENT:
        return _reuse_reproducer(comp, base, cand)
    return built


def _divergence_reproducer(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    found, prompts = divergent_side(base, cand), workload_prompts(cand)
    if found is None or prompts is None or "input_ids" not in found[2]:
        return None  # a cell stored before hit samples named their prompt
    side, hit, s = found
    i, j, cached = s["prompt"], s["first_divergent"], s["cached_tokens"]
    decode = comp.probe == "decode_cache_hit"
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
    at = _hit_requests(comp.probe, prompts[i], s, side)
    return with_form(Reproducer(
        prompts=(i,), first_divergent={"prompt": i, "position": j, "what": "cache hit vs cold replay",
                                       "side": side, "cached_tokens": cached},
        requests=at(j + 1),
        expect=(f"on the {side}, the hit's output_token_logprobs[{j}] differs from the replay's last "
                f"input_token_logprobs (check cached_tokens > 0 on the hit); "
                + each_side(("hit", "hit_logprobs"), base, cand, hit, j, f"at prompt {i}, output position {j}")
                + where),
        shrink=(f"From the stored samples: {len(prompts)} prompts → 1 (prompt {i}); max_new_tokens "
                f"{len(s['output_ids'])} → {j + 1}; the prompt kept whole (shortening it moves the cache's "
                f"aligned hit: it would need the servers)"),
        position_range=span), self_form(at, 2, 4, j + 1, len(s["output_ids"]), name="hit"))


def _largest_hit(comp: ProbeComparison, base: CellResult, cand: CellResult, metrics: tuple[Metric, Metric],
                 sign: float) -> Reproducer | None:
    """A noisy cache-hit verdict: the hit whose value is largest on the side the effect points
    to (the candidate for a rise), its requests whole (seed, hit, flush, cold replay). `metrics`:
    the deciding metric's (base, candidate) pair."""
    side, cell, deciding = ("candidate", cand, metrics[1]) if sign > 0 else ("base", base, metrics[0])
    prompts = workload_prompts(cell)
    if not deciding.values or prompts is None or len(cell.samples) != len(deciding.values) \
            or "input_ids" not in cell.samples[0]:
        return None
    hit = max(range(len(deciding.values)), key=lambda k: deciding.values[k])
    s = cell.samples[hit]
    requests = _hit_requests(comp.probe, prompts[s["prompt"]], s, side)
    full = len(s["output_ids"])
    return Reproducer(
        prompts=(s["prompt"],), first_divergent=None, requests=requests(full),
        expect=(f"{comp.decided_by} of the {side}'s hit on prompt {s['prompt']}: {deciding.values[hit]:.6g}, the "
                f"largest of its {len(deciding.values)} hits (the verdict is over each side's hits, unpaired: "
                f"base median {comp.metrics[deciding.name].base.median:.6g}, candidate "
                f"{comp.metrics[deciding.name].candidate.median:.6g})"),
        shrink=f"Not shrunk (a noisy verdict): the {side}'s hit with the largest {comp.decided_by}",
        form=self_form(requests, 2, 4, full, full, sign, name="hit"))


def _hit_requests(probe: str, prompt: Sequence[int], s: dict[str, Any], side: str) -> Callable[[int], tuple[Request, ...]]:
    """A cache hit's requests at `size` output tokens: flush, seed (turn 1's prefill, or its
    decode for a decode hit), the turn that hits, flush, the cold replay of its input + output."""
    turn2 = s["input_ids"]
    seed = (decode_request("turn 1: its decode writes the state turn 2 hits", prompt, len(turn2) - len(prompt) - 1)
            if probe == "decode_cache_hit"
            else Request("seed the cache", "/generate", generate_body(prompt, max_new_tokens=0)))

    def hit(size: int) -> tuple[Request, ...]:
        return (FLUSH, seed, decode_request("the turn that hits the cache", turn2, size), FLUSH,
                score_request("cold replay of the hit's input + output" + OWN_OUTPUT.format(side), turn2 + s["output_ids"][:size],
                       follows=(2, len(turn2))))
    return hit


REPRODUCTION = Reproduction(exact=_exact_reproducer, unpaired_effect=_largest_hit)

PREFILL_PROBE = register(ProbeKind("prefill_cache_hit", run_prefill,
                                   "prefix-cache hit on a seeded prompt vs cold prefill",
                                   params=PARAMS, describe=describe_kl, judge=judge_gate,
                                   planned=planned, values=VALUES.get, figures=FIGURES, reproduction=REPRODUCTION))
DECODE_PROBE = register(ProbeKind("decode_cache_hit", run_decode,
                                  "turn-2 hit on decode-written tokens vs cold prefill",
                                  params=PARAMS, describe=describe_kl, judge=judge_gate,
                                  planned=planned, values=VALUES.get, figures=FIGURES, reproduction=REPRODUCTION))
