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

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from harness.client import Logprobs, generate_body
from harness.suite import WorkloadSpec
from harness.probes import PROBES
from harness.probes.common import value_label
from harness.probes.determinism import batch as determinism_batch
from harness.probes.throughput import metric_name, request_metric_name
from harness.results import CellResult, Metric, ProbeComparison, Reproducer, Request, Status
from harness.stats import Kind, Verdict
from harness.textfmt import fmt_pair, plural
from harness.workloads import build

Pairs = Sequence[tuple[Metric, Metric | None]]


def reproducer(comp: ProbeComparison, base: CellResult, cand: CellResult, pairs: Pairs) -> Reproducer | None:
    """The reproducer of a *different* comparison (None for any other verdict)."""
    if comp.verdict != Verdict.DIFFERENT:
        return None
    decided = comp.metrics.get(comp.decided_by or "")
    if comp.probe in WHOLE_MEASUREMENT and decided is not None:
        return WHOLE_MEASUREMENT[comp.probe](comp, base, cand)
    builder = BUILDERS.get(comp.probe)
    if builder is not None and decided is not None and base.samples and cand.samples:
        if decided.kind == Kind.NOISY:
            return _largest_effect(comp, base, cand, pairs)
        built = builder(comp, base, cand)
        if built is not None:
            return built
    if decided is None:
        found = _finding(base, cand)
        if found is not None:
            return found
    return _located(comp, decided, base, pairs)


# The findings a decode shows (kl's, revision_kl's): a decode of one prompt is their request.
DECODE_FINDINGS = ("decode returned ", "greedy decode returned ")


def _finding(base: CellResult, cand: CellResult) -> Reproducer | None:
    """A finding on one side that a decode shows (a null, NaN or inf output logprob, named by
    prompt and position in the finding's samples): one flush and one decode of that prompt, up
    to the first bad position, against the other side's finite answer there."""
    side, cell = next(((r, c) for r, c in (("candidate", cand), ("base", base)) if c.status == Status.FINDING),
                      (None, None))
    if cell is None or not cell.reason.startswith(DECODE_FINDINGS) or "output logprobs" not in cell.reason:
        return None
    row = next((r for r in cell.samples if isinstance(r, dict) and "prompt" in r), None)
    prompts, spec = _prompts(cell), cell.metadata.get("workload") or {}
    if row is None or prompts is None or row["prompt"] >= len(prompts):
        return None
    bad = [*row.get("null_positions", ()), *(j for j, _ in row.get("non_finite_positions", ()))]
    if not bad:
        return None
    i, j, full = row["prompt"], min(bad), int(spec.get("output_len") or min(bad) + 1)

    def decode(size: int) -> tuple[Request, ...]:
        return (FLUSH, _decode(f"greedy decode of prompt {i}, {size} tokens", prompts[i], size))
    return with_form(Reproducer(
        prompts=(i,), first_divergent={"prompt": i, "position": j, "what": "non-finite output logprob",
                                       "side": side},
        requests=decode(j + 1),
        expect=f"on the {side}, output_token_logprobs[{j}] is not a finite number ({cell.reason})",
        shrink=(f"From the finding: prompt {i}, max_new_tokens {full} → {j + 1} (its first bad position, "
                f"{j})")), _finite_form(decode, j + 1, max(full, j + 1)))


# --------------------------------------------------------------------------- shared pieces


@dataclass(frozen=True)
class Observed:
    """What one side's answers to a reproducer's requests showed: `value` is compared across
    the sides (equal on both: the difference did not show), `points` per position for words."""

    value: Any
    points: tuple = ()


@dataclass(frozen=True)
class Form:
    """A reproducer's requests at each size along the one dimension it shrinks (`dimension`;
    "" for none): from `shortest` (what the stored samples say suffices) to `full` (as
    measured), how one side's answers are read, and what each side answered in words.
    harness/verify.py posts them, and grows the size back while a cut no longer shows it."""

    requests: Callable[[int], tuple[Request, ...]]
    read: Callable[[int, list], Observed]  # (size, one side's answers in request order) → observed
    words: Callable[[Observed, Observed], str]  # (base, candidate) → "base returned …, candidate …"
    shortest: int
    full: int
    dimension: str = ""
    direction: float = 0.0  # a noisy verdict: the sign of candidate − base its effect has; 0: exact
    # A configuration of the same revision whose server gets the same requests (the reference
    # probe's): each side's answers are then read as the pair (this configuration's, the
    # reference's), and every attempt posts to both servers of each side.
    reference: str = ""

    @property
    def servers_per_side(self) -> int:
        return 2 if self.reference else 1

    def reproduced(self, base: Observed, cand: Observed) -> bool:
        """An exact verdict: the sides answered differently; a noisy one: in its effect's direction."""
        if self.direction:
            return base.value is not None and cand.value is not None and \
                self.direction * (cand.value - base.value) > 0
        return base.value != cand.value


def _entry_values(gen, key: str) -> tuple:
    """An answer's logprobs of `key` ("input_token_logprobs", "output_token_logprobs"), their
    top-k lists beside them: one comparable item per position."""
    if gen is None:
        return ()
    lps = gen.input_logprobs if key.startswith("input") else gen.output_logprobs
    tops = gen.input_top_logprobs if key.startswith("input") else gen.output_top_logprobs
    return tuple((lp, None if i >= len(tops) or tops[i] is None else tuple(tops[i])) for i, lp in enumerate(lps))


def _across_form(requests, answer: int, key: str, place: str, shortest: int, full: int, dimension: str,
                 ids: bool = False) -> Form:
    """Base vs candidate on the same request: answer `answer`'s logprobs (`key`; with its ids
    where `ids`) compared position by position; `place` names a position ("input position {}")."""
    def read(_size: int, gens: list) -> Observed:
        gen = gens[answer]
        points = _entry_values(gen, key)
        if ids and gen is not None:
            points = tuple((t, *v) for t, v in zip(gen.output_ids, points))
        return Observed(points, points)

    def words(b: Observed, c: Observed) -> str:
        at = next((k for k, (x, y) in enumerate(zip(b.points, c.points)) if x != y), None)
        if at is None:
            return (f"both returned the same {len(b.points)} positions" if len(b.points) == len(c.points)
                    else f"base returned {len(b.points)} positions, candidate {len(c.points)}")
        x, y = b.points[at], c.points[at]
        lp = 1 if ids else 0
        shown = _returned(x[lp], y[lp])
        token = f" (token {x[0]} vs {y[0]})" if ids and x[0] != y[0] else ""
        top = " (the same logprob, another top-k)" if x[lp] == y[lp] and not token else ""
        return f"base returned logprob {shown[0]}, candidate {shown[1]} at {place.format(at)}{token}{top}"

    return Form(requests, read, words, shortest, full, dimension)


def _self_form(requests, answer: int, replay: int, shortest: int, full: int, direction: float = 0.0,
               name: str = "decode") -> Form:
    """Each side's answer (a decode or a cache hit: request `answer`) against its own cold
    replay (request `replay`, prompt + output scored) at each output position: the per-position
    gaps are compared across the sides (exact), or their summed size in the effect's direction
    (noisy)."""
    def read(_size: int, gens: list) -> Observed:
        got, cold = gens[answer], gens[replay]
        if got is None or cold is None:
            return Observed(None)
        start = len(cold.input_logprobs) - len(got.output_logprobs)
        pairs = tuple((a, cold.input_logprobs[start + t]) for t, a in enumerate(got.output_logprobs))
        gaps = tuple(None if a is None or r is None else a - r for a, r in pairs)
        if direction:
            return Observed(sum(abs(g) for g in gaps if g is not None), pairs)
        return Observed(gaps, pairs)

    def words(b: Observed, c: Observed) -> str:
        n = max(len(b.points), len(c.points))
        at = next((t for t in range(n) for side in (b, c)
                   if t < len(side.points) and side.points[t][0] != side.points[t][1]), None)
        if at is None:
            return f"on both sides every one of {n} output positions equals its replay"
        parts = []
        for side, seen in (("base", b), ("candidate", c)):
            if at >= len(seen.points):
                parts.append(f"the {side} answered no output position {at}")
                continue
            shown = _returned(*seen.points[at])
            parts.append(f"the {side}'s {name} returned {shown[0]}, its replay {shown[1]}"
                         + (" (equal)" if seen.points[at][0] == seen.points[at][1] else ""))
        return f"at output position {at}: " + "; ".join(parts)

    return Form(requests, read, words, shortest, full, "max_new_tokens" if shortest < full else "", direction)


def _finite_form(requests, shortest: int, full: int) -> Form:
    """A finding: the first null, NaN or inf output logprob of each side's answers (None where
    every one is finite), compared across the sides."""
    def read(_size: int, gens: list) -> Observed:
        values = tuple(v for g in gens if g is not None for v in g.output_logprobs)
        bad = next((k for k, v in enumerate(values) if v is None or not math.isfinite(v)), None)
        return Observed(bad, values)

    def words(b: Observed, c: Observed) -> str:
        at = next((x.value for x in (c, b) if x.value is not None), None)
        if at is None:
            return f"both returned finite logprobs at all {len(b.points)} output positions"
        shown = ["none" if at >= len(x.points) else _finite_text(x.points[at]) for x in (b, c)]
        return f"base returned logprob {shown[0]}, candidate {shown[1]} at output position {at}"

    return Form(requests, read, words, shortest, full, "max_new_tokens" if shortest < full else "")


def _finite_text(value: float | None) -> str:
    """A logprob as observed: a finite one at 6 significant digits, else what it is (null, NaN, inf)."""
    return f"{value:.6g}" if value is not None and math.isfinite(value) else value_label(value)


def _batch_form(requests) -> Form:
    """Determinism: prompt 0 alone vs first in a batch, on each side: equal or not."""
    def read(_size: int, gens: list) -> Observed:
        alone, batch = gens[0], gens[1]
        same = (alone.output_ids == batch.output_ids and alone.output_logprobs == batch.output_logprobs
                if alone is not None and batch is not None else None)
        return Observed(same)

    def words(b: Observed, c: Observed) -> str:
        said = {True: "the same answer alone and in the batch", False: "another answer in the batch than alone",
                None: "no answer"}
        return f"base returned {said[b.value]}; candidate {said[c.value]}"

    return Form(requests, read, words, 1, 1)


def with_form(rep: Reproducer, form: Form) -> Reproducer:
    return dataclasses.replace(rep, form=form)



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


def _score(what: str, ids: Sequence[int], top_k: int = 0, follows: tuple[int, int] | None = None) -> Request:
    return Request(what, "/generate", generate_body(ids, max_new_tokens=0, logprobs=Logprobs(0, top_k)), follows)


# A replay's note: its body holds one side's stored output; each side replays its own answer's.
OWN_OUTPUT = " (the body holds the {}'s stored output: on each side, put the output_ids its own answer returned)"


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
    """A noisy verdict: the prompt whose paired difference is largest in the effect's direction;
    unpaired (a cache probe's k3 over each side's own hits), the hit with the largest value on
    the side the effect points to."""
    b, c = next((m, o) for m, o in pairs if m.name == comp.decided_by)
    effect = comp.metrics[comp.decided_by].effect
    sign = 1.0 if effect >= 0 else -1.0
    if comp.probe in ("prefill_cache_hit", "decode_cache_hit") and c is not None:
        return _largest_hit(comp, base, cand, (b, c), sign) or _located(comp, comp.metrics[comp.decided_by], base,
                                                                        pairs)
    if not (b.paired and c is not None and len(b.values) == len(c.values)):
        return _located(comp, comp.metrics[comp.decided_by], base, pairs)
    i = max(range(len(b.values)), key=lambda k: sign * (c.values[k] - b.values[k]))
    prompts, top_k = _prompts(cand), _top_k(cand)
    requests: tuple[Request, ...] = ()
    form = None
    if comp.probe in ("kl", "revision_kl") and prompts is not None and i < len(prompts):
        output = cand.samples[i]["output_ids"]
        requests = (FLUSH, _decode("greedy decode", prompts[i], len(output), top_k), FLUSH)
        requests += ((_score("cold replay of prompt + output" + OWN_OUTPUT.format("candidate"), prompts[i] + output,
                              top_k, (1, len(prompts[i]))),)
                     if comp.probe == "kl" else
                     (_score("teacher-forced score", cand.samples[i]["input_ids"], top_k),))
        form = (_self_form(lambda _size: requests, 1, 3, len(output), len(output), sign) if comp.probe == "kl"
                else _across_form(lambda _size: requests, 3, "input_token_logprobs", "input position {}",
                                  len(output), len(output), ""))
    return dataclasses.replace(Reproducer(
        prompts=(i,), first_divergent=None, requests=requests,
        expect=(f"{comp.decided_by} of prompt {i}: base {b.values[i]:.6g}, candidate {c.values[i]:.6g} "
                f"(the largest paired difference; the verdict is over all {len(b.values)})"),
        shrink="Not shrunk (a noisy verdict): the prompt with the largest paired effect"), form=form)


def _largest_hit(comp: ProbeComparison, base: CellResult, cand: CellResult, metrics: tuple[Metric, Metric],
                 sign: float) -> Reproducer | None:
    """A noisy cache-hit verdict: the hit whose value is largest on the side the effect points
    to (the candidate for a rise), its requests whole (seed, hit, flush, cold replay)."""
    side, cell, metric = ("candidate", cand, metrics[1]) if sign > 0 else ("base", base, metrics[0])
    prompts = _prompts(cell)
    if not metric.values or prompts is None or len(cell.samples) != len(metric.values) \
            or "input_ids" not in cell.samples[0]:
        return None
    hit = max(range(len(metric.values)), key=lambda k: metric.values[k])
    s = cell.samples[hit]
    requests = _hit_requests(comp.probe, prompts[s["prompt"]], s, side)
    full = len(s["output_ids"])
    return Reproducer(
        prompts=(s["prompt"],), first_divergent=None, requests=requests(full),
        expect=(f"{comp.decided_by} of the {side}'s hit on prompt {s['prompt']}: {metric.values[hit]:.6g}, the "
                f"largest of its {len(metric.values)} hits (the verdict is over each side's hits, unpaired: "
                f"base median {comp.metrics[comp.decided_by].base.median:.6g}, candidate "
                f"{comp.metrics[comp.decided_by].candidate.median:.6g})"),
        shrink=f"Not shrunk (a noisy verdict): the {side}'s hit with the largest {comp.decided_by}",
        form=_self_form(requests, 2, 4, full, full, sign, name="hit"))


def _hit_requests(probe: str, prompt: Sequence[int], s: dict[str, Any], side: str) -> Callable[[int], tuple[Request, ...]]:
    """A cache hit's requests at `size` output tokens: flush, seed (turn 1's prefill, or its
    decode for a decode hit), the turn that hits, flush, the cold replay of its input + output."""
    turn2 = s["input_ids"]
    seed = (_decode("turn 1: its decode writes the state turn 2 hits", prompt, len(turn2) - len(prompt) - 1)
            if probe == "decode_cache_hit"
            else Request("seed the cache", "/generate", generate_body(prompt, max_new_tokens=0)))

    def hit(size: int) -> tuple[Request, ...]:
        return (FLUSH, seed, _decode("the turn that hits the cache", turn2, size), FLUSH,
                _score("cold replay of the hit's input + output" + OWN_OUTPUT.format(side), turn2 + s["output_ids"][:size],
                       follows=(2, len(turn2))))
    return hit


# --------------------------------------------------------------------------- per probe


def _revision_kl(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    facts = comp.judged.get("candidate", {})
    top_k, n = _top_k(cand), len(cand.samples)
    scored, greedy = facts.get("first_divergent"), facts.get("decode_first_divergent")
    if scored:
        i, j = scored["prompt"], scored["position"]
        seq = cand.samples[i]["input_ids"]

        def score(size: int) -> tuple[Request, ...]:
            return (_score("teacher-forced score, cut after the first divergent position" if size == j + 1
                           else f"teacher-forced score, the first {size} of {len(seq)} tokens", seq[:size], top_k),)
        return with_form(Reproducer(
            prompts=(i,), first_divergent={**scored, "what": "teacher-forced logprob"},
            requests=score(j + 1),
            expect=(f"the last input position ({j}): input_token_logprobs[{j}] or input_top_logprobs[{j}] "
                    f"differ between base and candidate; every earlier position is equal; "
                    + _across_sides("logprob", base, cand, i, "scored_logprobs", j - 1,
                                    f"at prompt {i}, input position {j}")),
            shrink=(f"From the stored samples: {n} prompts → 1 (prompt {i}, the first that differs); its "
                    f"scored sequence {len(seq)} → {j + 1} tokens (a position's logprob depends only on the "
                    f"tokens before it)")),
            _across_form(score, 0, "input_token_logprobs", "input position {}", j + 1, len(seq), "scored sequence"))
    if greedy:
        i, j = greedy["prompt"], greedy["position"]
        prompt = cand.samples[i]["input_ids"][:cand.samples[i]["prompt_len"]]
        full = len(cand.samples[i]["output_ids"])

        def decode(size: int) -> tuple[Request, ...]:
            return (FLUSH, _decode("greedy decode, up to the first divergent token" if size == j + 1
                                   else f"greedy decode, {size} tokens", prompt, size, top_k))
        return with_form(Reproducer(
            prompts=(i,), first_divergent={**greedy, "what": "greedy output"},
            requests=decode(j + 1),
            expect=(f"output token {j}: its id, logprob or top-{top_k} differ between base and candidate; "
                    + _across_sides("token", base, cand, i, "output_ids", j, f"at prompt {i}, output position {j}")
                    + "; " + _across_sides("logprob", base, cand, i, "output_logprobs", j, "there")),
            shrink=(f"From the stored samples: {n} prompts → 1 (prompt {i}); max_new_tokens "
                    f"{len(cand.samples[i]['output_ids'])} → {j + 1}; the prompt kept whole (the "
                    f"teacher-forced score agrees, and shortening the prompt would need the servers)")),
            _across_form(decode, 1, "output_token_logprobs", "output position {}", j + 1, full, "max_new_tokens",
                         ids=True))
    return None


def _kl(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    found, prompts = _divergent_side(base, cand), _prompts(cand)
    if found is None or prompts is None:
        return None
    side, i, s = found
    j, top_k = s["first_divergent"], _top_k(cand)

    def decode(size: int) -> tuple[Request, ...]:
        return (FLUSH, _decode("greedy decode", prompts[i], size, top_k), FLUSH,
                _score("cold replay of prompt + output" + OWN_OUTPUT.format(side),
                       prompts[i] + s["output_ids"][:size], top_k, (1, len(prompts[i]))))
    return with_form(Reproducer(
        prompts=(i,), first_divergent={"prompt": i, "position": j, "what": "decode vs cold replay", "side": side},
        requests=decode(j + 1),
        expect=(f"on the {side}, the decode's output_token_logprobs[{j}] differs from the replay's last "
                f"input_token_logprobs; " + _each_side(("decode", "decode_logprobs"), base, cand, i, j,
                                                       f"at prompt {i}, output position {j}")),
        shrink=(f"From the stored samples: {len(cand.samples)} prompts → 1 (prompt {i}, the first that diverges); "
                f"max_new_tokens {len(s['output_ids'])} → {j + 1} (a greedy token depends only on those before)")),
        _self_form(decode, 1, 3, j + 1, len(s["output_ids"])))


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
                + _each_side(("hit", "hit_logprobs"), base, cand, hit, j, f"at prompt {i}, output position {j}")
                + where),
        shrink=(f"From the stored samples: {len(prompts)} prompts → 1 (prompt {i}); max_new_tokens "
                f"{len(s['output_ids'])} → {j + 1}; the prompt kept whole (shortening it moves the cache's "
                f"aligned hit: it would need the servers)"),
        position_range=span), _self_form(at, 2, 4, j + 1, len(s["output_ids"]), name="hit"))


def _determinism(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    prompts = _prompts(cand)
    side = next((s for s, c in (("candidate", cand), ("base", base)) if c.facts.get("first_differing_batch_size")),
                None)
    if side is None or prompts is None:
        return None
    cell = cand if side == "candidate" else base
    size = cell.facts["first_differing_batch_size"]
    new = cell.metadata.get("workload", {}).get("output_len", 1)
    requests = (_decode("prompt 0 alone", prompts[0], new),
                _decode(f"prompt 0 in a batch of {size}", determinism_batch(prompts, size), new))
    return with_form(Reproducer(
        prompts=(0,), first_divergent={"prompt": 0, "batch_size": size, "what": "batch size", "side": side},
        requests=requests,
        expect=f"on the {side}, the first answer of the batch of {size} differs from prompt 0 alone",
        shrink=f"Batch sizes → the first that differs ({size}); prompts kept (the batch is the cause)"),
        _batch_form(lambda _size: requests))


def _reference(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    """The reference probe: the requests of the first divergent request's phase, for one prompt,
    posted to each side's server of this configuration and of its reference configuration (the
    same revision's other server, which must answer them bit for bit alike); a configuration
    compared with itself across revisions (`revision_diverging`): to each side's server of it.
    Shrunk along the divergent request's max_new_tokens only while the answers still part."""
    found = next(((side, cell, comp.judged.get(side, {})) for side, cell in (("candidate", cand), ("base", base))
                  if comp.judged.get(side, {}).get("first_divergence")), None)
    if found is None:
        return None
    side, cell, facts = found
    first = facts["first_divergence"]
    phase, request, j = first["phase"], first["request"], first["position"]
    sample = next((s for s in cell.samples if (s["phase"], s["request"]) == (phase, request)), None)
    cold = next((s for s in cell.samples if s["phase"] == "cold" and s["request"] == request), None)
    if sample is None or cold is None:
        return None
    prompt = cold["input_ids"]
    new, top_k = int(cell.metadata.get("workload", {}).get("output_len", len(cold["output_ids"]))), _top_k(cell)
    full = max(len(sample["output_ids"]), j + 1)
    across = "diverging" not in comp.metrics  # no reference configuration: base vs candidate
    reference = "" if across else str(facts["reference"])

    def requests(size: int) -> tuple[Request, ...]:
        """FLUSH, then what the phase's request needs before it: a hit the cold decode that
        seeds the cache; a next turn (`multiturn`, after a flush `multiturn_cold`) that decode's
        own output after the prompt (each server replays its own, as the probe did)."""
        cut = "up to the first divergent token" if size == j + 1 else f"{size} tokens"
        ask = _decode(f"the {phase} request, {cut}", sample["input_ids"], size, top_k)
        if phase in ("cold", "single"):
            return FLUSH, ask
        seed = _decode(f"cold decode of prompt {request}: "
                       + ("seeds the cache" if phase != "multiturn_cold" else "its output is the next turn's"),
                       prompt, new, top_k)
        if phase == "hit":
            return FLUSH, seed, ask
        turn = Request(ask.what + OWN_OUTPUT.format(side), ask.path, ask.body, follows=(1, len(prompt)))
        return (FLUSH, seed, turn) if phase == "multiturn" else (FLUSH, seed, FLUSH, turn)

    ours, theirs = first.get("served"), first.get("reference_served")
    observed = (f"; observed in the run: {facts['reference']} served {theirs}, this configuration {ours} "
                f"([token id, logprob])" if ours or theirs else "")
    other = "base" if side == "candidate" else "candidate"
    if across:
        expect = (f"output token {j} of the {phase} request (id, logprob or top-{top_k}) differs between the base's "
                  f"and the candidate's servers of this configuration{observed}")
        form = _served_form(requests, comp.config, "", j + 1, full)
    else:
        elsewhere = comp.judged.get(other, {}).get("first_divergence")
        expect = (f"on the {side}, output token {j} (id, logprob or top-{top_k}) differs from what the {reference} "
                  f"server of the same revision answers to the same requests"
                  f"{' (its input differs already: its cold output did)' if first.get('input_differs') else ''}"
                  f"{observed}; on the {other} the two servers answer {'alike' if not elsewhere else 'apart too, elsewhere'}")
        form = _served_form(requests, comp.config, reference, j + 1, full)
    return with_form(Reproducer(
        prompts=(request,), first_divergent={"prompt": request, "position": j, "what": f"{phase} vs {facts['reference']}",
                                             "side": side, "phase": phase},
        requests=requests(j + 1), expect=expect,
        shrink=(f"From the stored samples: {len(cell.samples)} requests → the {phase} phase's requests for prompt "
                f"{request}; max_new_tokens {len(sample['output_ids'])} → {j + 1} (a greedy token depends only on "
                f"those before); the prompt kept whole (shortening it moves the cache's aligned hit)")), form)


def _served(gen) -> tuple:
    """One answer as served: (token id, logprob, top-k) per output position; () for a flush."""
    if gen is None:
        return ()
    return tuple((t, *v) for t, v in zip(gen.output_ids, _entry_values(gen, "output_token_logprobs")))


def _first_apart(xs: Sequence[tuple], ys: Sequence[tuple]) -> tuple[int, int] | None:
    """(request, output position) where two servers' answers to the same requests first part (an
    answer that ends earlier parts where it ends); None where every answer is bit-identical."""
    for k, (x, y) in enumerate(zip(xs, ys)):
        at = next((p for p, (a, b) in enumerate(zip(x, y)) if a != b), None)
        if at is None and len(x) != len(y):
            at = min(len(x), len(y))
        if at is not None:
            return k, at
    return None


def _point_text(x: tuple | None, lp: str) -> str:
    return "nothing (its answer ended)" if x is None else f"token {x[0]} logprob {lp}"


def _apart_text(at: tuple[int, int], xs: Sequence[tuple], ys: Sequence[tuple], names: tuple[str, str],
                whats: Sequence[str]) -> str:
    """"at output position 3 of the answer to the hit request, …: A returned token 5 logprob
    -1.2345, B token 5 logprob -1.2351" as observed."""
    k, p = at
    x = xs[k][p] if p < len(xs[k]) else None
    y = ys[k][p] if p < len(ys[k]) else None
    shown = _returned(x[1], y[1]) if x is not None and y is not None else (
        _finite_text(x[1]) if x else "", _finite_text(y[1]) if y else "")
    same = " (the same token and logprob, another top-k)" if x and y and x[:2] == y[:2] else ""
    what = f"the answer to {whats[k]}" if k < len(whats) else f"answer {k}"
    return (f"at output position {p} of {what}: {names[0]} returned {_point_text(x, shown[0])}, "
            f"{names[1]} {_point_text(y, shown[1])}{same}")


def _served_form(requests, config: str, reference: str, shortest: int, full: int) -> Form:
    """The reference probe's answers as served (ids, logprobs, top-k), compared bit for bit.
    With `reference`: each side's answers come from its server of `config` and of `reference`;
    a side's observation is where those part (None: nowhere), and the sides differ where that
    differs (the `diverging` metric's difference). Without: base vs candidate answers."""
    def whats(size: int) -> list[str]:
        return [r.what for r in requests(size)]

    if not reference:
        def read_across(size: int, gens: list) -> Observed:
            served = tuple(_served(g) for g in gens)
            return Observed(served, (served, whats(size)))

        def words_across(b: Observed, c: Observed) -> str:
            at = _first_apart(b.points[0], c.points[0])
            if at is None:
                return f"both sides' servers of {config} returned the same answers"
            return _apart_text(at, b.points[0], c.points[0], ("the base", "the candidate"), b.points[1])

        return Form(requests, read_across, words_across, shortest, full, "max_new_tokens" if shortest < full else "")

    def read(size: int, answers: tuple[list, list]) -> Observed:
        own, ref = ([_served(g) for g in side] for side in answers)
        return Observed(_first_apart(own, ref), (own, ref, whats(size)))

    def words(b: Observed, c: Observed) -> str:
        parts = []
        for name, seen in (("base", b), ("candidate", c)):
            own, ref, said = seen.points
            if seen.value is None:
                parts.append(f"on the {name}, {config} and {reference} returned the same answers "
                             f"({plural(len(own[-1]) if own else 0, 'output position')} in the last)")
            else:
                parts.append(f"on the {name}, " + _apart_text(seen.value, own, ref, (config, reference), said))
        return "; ".join(parts)

    return Form(requests, read, words, shortest, full, "max_new_tokens" if shortest < full else "",
                reference=reference)


BUILDERS: dict[str, Callable[[ProbeComparison, CellResult, CellResult], Reproducer | None]] = {
    "revision_kl": _revision_kl, "kl": _kl, "prefill_cache_hit": _cache_hit, "decode_cache_hit": _cache_hit,
    "determinism": _determinism, "reference": _reference,
}


def _throughput(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer:
    """A throughput level: no single request shows it (its clients share the server's batches
    over every round), so its reproducer is the measurement itself: the configuration's
    throughput probe alone, at the level that decided where every deciding metric is of that
    level (else at the suite's levels), as `command` (report.md puts the run's own options before
    it), and the workload it measured."""
    levels = [int(c) for c in cand.facts.get("concurrency") or ()]
    level = next((c for c in levels if comp.decided_by in (metric_name(c), request_metric_name(c))), None)
    c = comp.metrics[comp.decided_by]
    one = level is not None and len(levels) > 1 and all(
        n in (metric_name(level), request_metric_name(level)) for n in comp.deciding)
    command = ("--config", comp.config, "--probe", comp.probe,
               *(("--set", f"{comp.probe}.concurrency=[{level}]") if one else ()))
    spec = cand.metadata.get("workload") or {}
    workload = (f"{spec.get('prompts', '?')} prompts of {'–'.join(str(n) for n in spec.get('prompt_len') or ())} "
                f"tokens, {spec.get('output_len', '?')} generated each, {cand.facts.get('repeats', '?')} rounds "
                f"{'at' if one else 'over'} concurrency {level if one else levels}")
    where = f"level {level} ({comp.decided_by})" if level is not None else comp.decided_by
    return Reproducer(
        prompts=(), first_divergent={"metric": comp.decided_by, **({"concurrency": level} if level else {})},
        requests=(), command=command,
        expect=(f"{where}: base median {c.base.median:.6g}, candidate {c.candidate.median:.6g} over "
                f"{c.base.n} paired rounds, as the run measured it ({c.note}); a run of the command measures it "
                f"again on both sides, interleaved as this one was"),
        shrink=(f"Not shrunk to a request: a throughput level is a property of a whole measurement (its clients "
                f"share the server's batches over every round); the configuration's {comp.probe} probe alone, "
                f"{'at the level that decided' if one else 'at the suite levels (the verdict reads several)'}: "
                f"{workload}"))


# Probes whose difference no request shows: their reproducer is a measurement to run again.
WHOLE_MEASUREMENT: dict[str, Callable[[ProbeComparison, CellResult, CellResult], Reproducer]] = {
    "throughput": _throughput,
}
