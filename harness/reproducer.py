"""The pieces a *different* verdict's reproducer is built of: the smallest request that shows
it, ready to post to each side's server.

A PR reviewer's next question after *different* is "show me one request that differs". A
`Reproducer` answers it from the two cells' stored samples, without a server (it counts its
re-measurements, and none is made here):

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

Each probe builds its own requests from these pieces (its `ProbeKind.reproduction` hooks, next
to what it measures); harness/reproduce.py picks which a comparison gets. Nothing here imports
a probe, so a probe module (one outside the tree too) imports this freely.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from harness.client import Logprobs, generate_body
from harness.suite import WorkloadSpec
from harness.results import CellResult, Reproducer, Request
from harness.textfmt import fmt_distinct, fmt_pair, value_label
from harness.workloads import build


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
    # (size, one side's answers in request order; a reference form: the pair of this
    # configuration's and the reference's) → observed. Any, not that union: each reader takes
    # the one shape its form gets, and a reader of one member is no reader of the union.
    read: Callable[[int, Any], Observed]
    words: Callable[[Observed, Observed], str]  # (base, candidate) → "base returned …, candidate …"
    shortest: int
    full: int
    dimension: str = ""
    direction: float = 0.0  # a noisy verdict: the sign of candidate − base its effect has; 0: exact
    # A configuration of the same revision whose server gets the same requests (the reference
    # probe's): each side's answers are then read as the pair (this configuration's, the
    # reference's), and every attempt posts to both servers of each side.
    reference: str = ""
    # What the row decided on is in the server's log (the SWA pool's `#swa token` per Decode
    # line), not in its answers: each side's answers are then read as the pair (answers, the log
    # its server wrote while they were posted).
    reads_log: bool = False
    # What it decided on depends on what the server ran before (SGLang's SWA eviction cadence
    # counts every batch since the server started): posted only to servers started for it, and
    # published as their first attempt saw it, which is what a reader's fresh servers repeat.
    fresh_servers: bool = False

    @property
    def servers_per_side(self) -> int:
        return 2 if self.reference else 1

    def reproduced(self, base: Observed, cand: Observed) -> bool:
        """An exact verdict: the sides answered differently; a noisy one: in its effect's direction."""
        if self.direction:
            return base.value is not None and cand.value is not None and \
                self.direction * (cand.value - base.value) > 0
        return base.value != cand.value



def entry_values(gen, key: str) -> tuple:
    """An answer's logprobs of `key` ("input_token_logprobs", "output_token_logprobs"), their
    top-k lists beside them: one comparable item per position."""
    if gen is None:
        return ()
    lps = gen.input_logprobs if key.startswith("input") else gen.output_logprobs
    tops = gen.input_top_logprobs if key.startswith("input") else gen.output_top_logprobs
    return tuple((lp, None if i >= len(tops) or tops[i] is None else tuple(tops[i])) for i, lp in enumerate(lps))



def across_form(requests, answer: int, key: str, place: str, shortest: int, full: int, dimension: str,
                 ids: bool = False) -> Form:
    """Base vs candidate on the same request: answer `answer`'s logprobs (`key`; with its ids
    where `ids`) compared position by position; `place` names a position ("input position {}")."""
    def read(_size: int, gens: list) -> Observed:
        gen = gens[answer]
        points = entry_values(gen, key)
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
        shown = returned_pair(x[lp], y[lp])
        token = f" (token {x[0]} vs {y[0]})" if ids and x[0] != y[0] else ""
        top = " (the same logprob, another top-k)" if x[lp] == y[lp] and not token else ""
        return f"base returned logprob {shown[0]}, candidate {shown[1]} at {place.format(at)}{token}{top}"

    return Form(requests, read, words, shortest, full, dimension)



def self_form(requests, answer: int, replay: int, shortest: int, full: int, direction: float = 0.0,
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
        pairs = [("base", b.points[at] if at < len(b.points) else None),
                 ("candidate", c.points[at] if at < len(c.points) else None)]
        return f"at output position {at}: " + sides_and_replays(name, pairs, f"the {{}} answered no output position {at}")

    return Form(requests, read, words, shortest, full, "max_new_tokens" if shortest < full else "", direction)



def ordered_ids(top: Any) -> tuple[int, ...] | None:
    """A top-k list's token ids in the order served (None where the answer had none)."""
    return None if top is None else tuple(int(entry[1]) for entry in top)



def order_form(requests, answer: int, replay: int, shortest: int, full: int) -> Form:
    """Each side's decode (request `answer`) against its own cold replay (request `replay`):
    the first output position whose top-k list, as (logprob, token id) pairs in the order
    served, differs from the replay's there (None: none does), compared across the sides. What
    kl's `topk_first_divergent` and `topk_kl` decide on: a reordered list, or an alternative's
    logprob that moved, leaves every sampled token's logprob, and so `self_form`'s gaps, as they
    were."""
    def read(_size: int, gens: list) -> Observed:
        got, cold = gens[answer], gens[replay]
        if got is None or cold is None:
            return Observed(None)
        tops = got.output_top_logprobs
        start = len(cold.input_top_logprobs) - len(tops)
        pairs = tuple((top, cold.input_top_logprobs[start + t] if start + t >= 0 else None)
                      for t, top in enumerate(tops))
        first = next((t for t, (a, r) in enumerate(pairs) if ordered_entries(a) != ordered_entries(r)), None)
        return Observed(first, pairs)

    def words(b: Observed, c: Observed) -> str:
        at = next((x.value for x in (c, b) if x.value is not None), None)
        if at is None:
            return f"on both sides each of {len(b.points)} output positions' top-k list equals its replay's, in order"
        return f"at output position {at}: " + "; ".join(order_text(side, seen.points, at)
                                                       for side, seen in (("base", b), ("candidate", c)))

    return Form(requests, read, words, shortest, full, "max_new_tokens" if shortest < full else "")



def ordered_entries(top: Any) -> list[tuple[float, int]] | None:
    """A top-k list as (logprob, token id) pairs in the order served: a fresh answer's tuples and
    a stored cell's lists compare alike (None where the answer had none)."""
    return None if top is None else [(float(e[0]), int(e[1])) for e in top]



def order_text(side: str, points: Sequence[tuple[Any, Any]], at: int) -> str:
    """At output position `at` of one side's (decode, replay) top-k lists: "the candidate's
    decode listed top-k ids [5, 9, 2], its replay [2, 9, 5] (the same entries, another order)",
    or where the ids agree, the first entry whose logprob does not."""
    if at >= len(points):
        return f"the {side} answered no output position {at}"
    mine, replay = (ordered_entries(x) for x in points[at])
    ids = [list(ordered_ids(x) or ()) for x in points[at]]
    if mine == replay:
        return f"the {side}'s decode listed top-k ids {ids[0]}, as its replay did"
    if mine is not None and replay is not None and ids[0] == ids[1]:
        k = next(k for k, (a, b) in enumerate(zip(mine, replay)) if a != b)
        shown = fmt_distinct([mine[k][0], replay[k][0]])
        return (f"the {side}'s decode listed the top-k ids of its replay, {ids[0]}, but logprob {shown[0]} for "
                f"token {mine[k][1]} where its replay has {shown[1]}")
    alike = mine is not None and replay is not None and sorted(mine) == sorted(replay)
    return (f"the {side}'s decode listed top-k ids {ids[0]}, its replay {ids[1]}"
            + (" (the same entries, another order)" if alike else ""))



def finite_form(requests, shortest: int, full: int) -> Form:
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
        shown = ["none" if at >= len(x.points) else finite_text(x.points[at]) for x in (b, c)]
        return f"base returned logprob {shown[0]}, candidate {shown[1]} at output position {at}"

    return Form(requests, read, words, shortest, full, "max_new_tokens" if shortest < full else "")



def finite_text(value: float | None) -> str:
    """A logprob as observed: a finite one at 6 significant digits, else what it is (null, NaN, inf)."""
    return f"{value:.6g}" if value is not None and math.isfinite(value) else value_label(value)



def with_form(rep: Reproducer, form: Form) -> Reproducer:
    return dataclasses.replace(rep, form=form)



def workload_prompts(cell: CellResult) -> list[list[int]] | None:
    """The cell's workload prompts, rebuilt from its recorded spec (None if they cannot be:
    a longbench file no longer there)."""
    spec = cell.metadata.get("workload")
    if not spec:
        return None
    try:
        return [list(p) for p in build(WorkloadSpec(**{**spec, "prompt_len": tuple(spec["prompt_len"])})).prompts]
    except Exception:  # the reproducer is a courtesy: a missing data set leaves it without requests
        return None



def cell_top_k(cell: CellResult) -> int:
    return int(cell.facts.get("top_k") or 0)



def decode_request(what: str, ids: Sequence[int] | Sequence[Sequence[int]], new: int, top_k: int = 0) -> Request:
    return Request(what, "/generate", generate_body(ids, max_new_tokens=new, logprobs=Logprobs(top_k=top_k)))



def score_request(what: str, ids: Sequence[int], top_k: int = 0, follows: tuple[int, int] | None = None) -> Request:
    return Request(what, "/generate", generate_body(ids, max_new_tokens=0, logprobs=Logprobs(0, top_k)), follows)



# A replay's note: its body holds one side's stored output; each side replays its own answer's.
OWN_OUTPUT = " (the body holds the {}'s stored output: on each side, put the output_ids its own answer returned)"



FLUSH = Request("start cold", "/flush_cache")


def noisy_decode(cand: CellResult, i: int) -> tuple[list[int], tuple[Request, ...]] | None:
    """A noisy verdict's prompt i, the candidate's (its largest paired effect): its stored output
    and a greedy decode of it from a cold start, a flush after it for what is scored next (None
    where the workload cannot be rebuilt)."""
    prompts = workload_prompts(cand)
    if prompts is None or i >= len(prompts):
        return None
    output = cand.samples[i]["output_ids"]
    return output, (FLUSH, decode_request("greedy decode", prompts[i], len(output), cell_top_k(cand)), FLUSH)



def divergent_side(base: CellResult, cand: CellResult) -> tuple[str, int, dict[str, Any]] | None:
    """(side, sample index, sample) of the first sample that diverged within its own side, on
    the candidate first (a regression), else the base (a fix)."""
    for side, cell in (("candidate", cand), ("base", base)):
        for i, s in enumerate(cell.samples):
            if s.get("first_divergent") is not None:
                return side, i, s
    return None



def sample_value(cell: CellResult, sample: int, key: str, position: int) -> Any:
    """A stored sample's value at `position` of its list `key` (None where it holds none)."""
    values = cell.samples[sample].get(key) if sample < len(cell.samples) else None
    return values[position] if isinstance(values, list) and 0 <= position < len(values) else None



def returned_pair(a: Any, b: Any) -> tuple[str, str]:
    """Two observed values as text: logprobs at the digits that tell them apart, token ids as
    they are."""
    return fmt_pair(a, b) if isinstance(a, float) and isinstance(b, float) else (str(a), str(b))



def across_sides(what: str, base: CellResult, cand: CellResult, sample: int, key: str, position: int,
                  where: str) -> str:
    """What each side returned at one place (`where`: "at prompt 0, input position 1"), as
    observed: "base returned logprob -13.7, candidate -14.3 at …" (one value: "both returned")."""
    b, c = sample_value(base, sample, key, position), sample_value(cand, sample, key, position)
    if b is None or c is None:
        return f"the {'base' if b is None else 'candidate'}'s samples hold no {what} {where}"
    shown = returned_pair(b, c)
    return (f"both returned {what} {shown[0]} {where}" if b == c
            else f"base returned {what} {shown[0]}, candidate {shown[1]} {where}")



def each_side(answer: tuple[str, str], base: CellResult, cand: CellResult, sample: int, position: int,
               where: str) -> str:
    """A self-check's answer (`answer`: its name, its sample key) and its cold replay at one
    output position (`where` in words), on each side as observed: "observed at prompt 0, output
    position 3: the base's decode returned -1.24, its replay -1.24 (equal); the candidate's decode returned
    -1.2399, its replay -1.2389": never a side assumed equal."""
    name, key = answer
    pairs = []
    for side, cell in (("base", base), ("candidate", cand)):
        mine, replay = sample_value(cell, sample, key, position), sample_value(cell, sample, "replay_logprobs", position)
        pairs.append((side, None if mine is None or replay is None else (mine, replay)))
    return f"observed {where}: " + sides_and_replays(name, pairs, f"the {{}}'s samples hold no output position {position}")


def sides_and_replays(name: str, pairs: Sequence[tuple[str, tuple[Any, Any] | None]], missing: str) -> str:
    """Each side's answer (`name`: "decode", "hit") and its replay at one position, all four
    values at the digits that tell apart every two that differ, across the sides too: "the
    base's hit returned -0.77745, its replay -0.77612; the candidate's hit returned -0.77749, its
    replay -0.77612" (`pairs`: (side, (answer, replay)); None where the side has no such
    position, said as `missing` with the side in it: "the {} answered no output position 3")."""
    values = [v for _, pair in pairs if pair is not None for v in pair]
    shown = iter(fmt_distinct(values) if all(isinstance(v, float) for v in values) else map(str, values))
    parts = []
    for side, pair in pairs:
        if pair is None:
            parts.append(missing.format(side))
            continue
        mine, replay = next(shown), next(shown)
        parts.append(f"the {side}'s {name} returned {mine}, its replay {replay}" + (" (equal)" if pair[0] == pair[1] else ""))
    return "; ".join(parts)
