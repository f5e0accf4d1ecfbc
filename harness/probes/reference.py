"""reference: a configuration's answers against a reference configuration's, inside each revision.

A hit is not always bit-exact against its own cold replay on a real kernel (SGLang 0.5.20/0.5.21,
Triton, tiny Inkling: kit2's README), so whether a state pool or a graph mode serves what it
should is decided against another configuration of the same revision that serves the same
requests: the unified pool against the static pool, lazy against static, CUDA graphs on
against off. Under deterministic inference the two must agree bit for bit.

Each configuration's server gets the same requests (greedy, output logprobs with top-k), in
phases: `cold` (after /flush_cache), `hit` (the same prompts again: prefix-cache hits at the
track-interval multiple below each prompt's length, so prompts of varied lengths land at
different multiples), `multiturn` (prompt + this server's cold output: a hit past the prompt), `later_turns` (turns 3
to `turns`, each the turn before's input and output, no flush: each a hit on the one cache entry
the chat grew), `multiturn_cold` (turn 2 after a flush) and `single` (prompt 0 alone after a flush). Each cell
holds what its server served; the comparison (`versus`) reads the reference configuration's cell
of the same revision too (`[probe.reference] against`, configuration → its reference; the
planner runs the reference wherever a configuration names it), and derives per side the
per-request metric `diverging`: the first output position where the configuration's answer
(id, logprob or top-k) departs from the reference's, -1 where it is bit-identical. Base vs
candidate compare it exactly: a fix (the base diverges, the candidate does not) or a regression
reads *different*, with each side's first divergent (phase, request, position) in its column.

A candidate that diverges from its reference never reads *same*: where both sides diverge alike
(the metric equal on both) the row is an *error* that says so, as the same finding on both sides
is. A reference whose cell is missing or failed makes the row an *error* with the reason.

Every configuration is also compared with itself across revisions, request by request (issue 44:
under deterministic mode every per-request figure decides): `revision_diverging` (the candidate's
answers against the base's) and `cached_tokens` (what each request found cached, every phase and
turn), so a change both configurations of a revision share, or one in reuse alone, is no *same*.
A configuration that is no other's (a reference, or one `against` does not name) has those alone.
"""

from __future__ import annotations

from typing import Any, Sequence

from harness.client import Logprobs
from harness.errors import ProbeNotApplicable, UsageError
from harness.params import Param
from harness.suite import WorkloadSpec
from harness.probes.base import (Across, PlannedMetric, ProbeContext, ProbeKind, Reference, Reproduction, ValueIndex,
                                 given, locator, metric, parameter, register, summary)
from harness.probes.common import batches, degenerate_outputs, require_output_logprobs, require_top_logprobs
from harness.probes.shared_params import BATCH_SIZE, JUDGED, JUDGING, MEASURED, WORKLOAD
from harness.reproducer import (FLUSH, OWN_OUTPUT, Form, Observed, cell_top_k, decode_request, entry_values,
                                finite_text, returned_pair, with_form)
from harness.results import CellResult, Metric, ProbeComparison, ProbeOutput, Reproducer, Request, Status
from harness.textfmt import plural
from harness.verdict_stats import Kind

PHASES = ("cold", "hit", "multiturn", "later_turns", "multiturn_cold", "single")
# A request's value where it is bit-identical to the reference's answer.
IDENTICAL = -1
GRAPH_SUFFIX = "-graphs-"  # suite.py's graph_modes names: <name>-graphs-<mode>


def _against(value: dict[str, str]) -> str | None:
    same = [k for k, v in value.items() if k == v]
    return f"{same[0]!r} is its own reference" if same else None


PARAMS = (
    *WORKLOAD, BATCH_SIZE,
    Param("top_k", int, 5, "top logprobs per output position", MEASURED, low=1, high=1000),
    Param("turns", int, 4, "the last turn of the later_turns phase: turns 3 to this, each prompt + every earlier "
          "turn's output, on the one cache entry the turns before it grew", MEASURED, low=3, high=16),
    Param("against", dict[str, str], {}, "configuration → the configuration of the same revision it is compared "
          "with (a name graph_modes expands matches each mode, with the reference's same mode)", JUDGED,
          check=_against),
    *JUDGING,
)


def _lists(top: Sequence[Sequence[Sequence[Any]]]) -> list[list[list[Any]]]:
    # (logprob, id) pairs as the JSON lists a stored cell reads back as: fresh and stored compare alike.
    return [[list(pair) for pair in position] for position in top]


def _serve(ctx: ProbeContext, phase: str, sequences: list[list[int]]) -> list[dict[str, Any]]:
    """One phase's requests, greedy, with output logprobs and top-k: a sample per request."""
    batch = ctx.param("batch_size") or len(sequences)
    answers = []
    for chunk in batches(sequences, batch):
        answers += ctx.client.generate(list(chunk), max_new_tokens=ctx.workload.output_len,
                                       logprobs=Logprobs(top_k=ctx.param("top_k")))
    lps = require_output_logprobs([g.output_logprobs for g in answers], f"the {phase} phase")
    tops = require_top_logprobs([g.output_top_logprobs for g in answers], f"the {phase} phase")
    return [{"phase": phase, "request": i, "input_ids": list(seq), "output_ids": list(g.output_ids),
             "output_logprobs": lp, "output_top_logprobs": _lists(top), "cached_tokens": g.cached_tokens}
            for i, (seq, g, lp, top) in enumerate(zip(sequences, answers, lps, tops))]


def _later_turns(ctx: ProbeContext, turn2: list[list[int]], multiturn: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turns 3 to `turns` of each prompt's chat, no flush between: turn k is turn k-1's input
    and output, a hit on the one cache entry turn k-1 left (what a chat's later turns reuse).
    Request index: (k - 3) × prompts + prompt."""
    inputs, served = turn2, multiturn
    samples: list[dict[str, Any]] = []
    for turn in range(3, ctx.param("turns") + 1):
        inputs = [seq + s["output_ids"] for seq, s in zip(inputs, served)]
        served = _serve(ctx, "later_turns", inputs)
        samples += [{**s, "request": len(samples) + i, "turn": turn, "prompt": i} for i, s in enumerate(served)]
    return samples


def run(ctx: ProbeContext) -> ProbeOutput:
    if not ctx.deterministic:
        raise ProbeNotApplicable("the reference probe compares two servers bit for bit: it needs deterministic "
                                 "inference (deterministic = true), without which batching alone moves the bits")
    prompts = [list(p) for p in ctx.workload.prompts]
    total = (ctx.param("turns") + 2) * len(prompts) + 1
    ctx.client.flush_cache()
    cold = _serve(ctx, "cold", prompts)
    ctx.advance(len(prompts), total)
    hit = _serve(ctx, "hit", prompts)
    ctx.advance(2 * len(prompts), total)
    turn2 = [p + s["output_ids"] for p, s in zip(prompts, cold)]
    multiturn = _serve(ctx, "multiturn", turn2)
    later = _later_turns(ctx, turn2, multiturn)
    ctx.advance((ctx.param("turns") + 1) * len(prompts), total)
    ctx.client.flush_cache()
    multiturn_cold = _serve(ctx, "multiturn_cold", turn2)
    ctx.advance((ctx.param("turns") + 2) * len(prompts), total)
    ctx.client.flush_cache()
    single = _serve(ctx, "single", prompts[:1])
    ctx.advance(total, total)
    samples = (*cold, *hit, *multiturn, *later, *multiturn_cold, *single)
    facts = {"deterministic": True, "prompts": len(prompts), "top_k": ctx.param("top_k"), "phases": list(PHASES),
             "requests": len(samples),
             "cached_tokens": {phase: [s["cached_tokens"] for s in samples if s["phase"] == phase] for phase in PHASES},
             "degenerate_prompts": degenerate_outputs([s["output_ids"] for s in cold])}
    return ProbeOutput(samples=samples, metrics=(), facts=facts)


# --------------------------------------------------------------------------- the comparison


def first_divergence(own: dict[str, Any], ref: dict[str, Any]) -> int:
    """The first output position where `own`'s answer (id, logprob, top-k) departs from `ref`'s
    (an answer that ends early departs where it ends; another input departs at 0), IDENTICAL
    where they are bit-identical."""
    if own["input_ids"] != ref["input_ids"]:
        return 0
    served = [list(zip(s["output_ids"], s["output_logprobs"], s["output_top_logprobs"])) for s in (own, ref)]
    first = next((j for j, (a, b) in enumerate(zip(*served)) if a != b), None)
    if first is not None:
        return first
    return IDENTICAL if len(served[0]) == len(served[1]) else min(map(len, served))


def _keys(cell: CellResult) -> list[tuple[str, int]]:
    return [(s["phase"], s["request"]) for s in cell.samples]


def divergences(own: CellResult, ref: CellResult) -> tuple[float, ...]:
    """Per request of `own` (in its order), where it departs from the same request of `ref`."""
    by_key = {(s["phase"], s["request"]): s for s in ref.samples}
    return tuple(float(first_divergence(s, by_key[(s["phase"], s["request"])])) for s in own.samples)


def _served_at(sample: dict[str, Any], position: int) -> list[Any] | None:
    """[token id, logprob] a sample served at an output position (None past its end)."""
    if position >= len(sample["output_ids"]):
        return None
    return [sample["output_ids"][position], sample["output_logprobs"][position]]


def _summary(cell: CellResult, values: Sequence[float], reference: str, ref: CellResult) -> dict[str, Any]:
    """One side's facts against its reference (`ref`, named `reference`): which requests depart,
    and where the first does, with what each served there."""
    departed = [(s, int(v)) for s, v in zip(cell.samples, values) if v != IDENTICAL]
    first = None
    if departed:
        sample, position = departed[0]
        theirs = next(r for r in ref.samples if (r["phase"], r["request"]) == (sample["phase"], sample["request"]))
        first = {"phase": sample["phase"], "request": sample["request"], "position": position,
                 "served": _served_at(sample, position), "reference_served": _served_at(theirs, position),
                 "input_differs": sample["input_ids"] != theirs["input_ids"]}
    phases = {phase: sum(1 for s, _ in departed if s["phase"] == phase) for phase in PHASES}
    return {"reference": reference, "diverging_requests": len(departed), "requests": len(values),
            "first_divergence": first, "diverging_phases": {p: n for p, n in phases.items() if n}}


def divergence_text(facts: dict[str, Any]) -> str:
    """"diverges from static at hit request 2, position 5 (3 of 40 requests: hit 3)", or
    "bit-identical to static in every phase (40 requests)"."""
    first = facts.get("first_divergence")
    if not first:
        return f"bit-identical to {facts['reference']} in every phase ({facts['requests']} requests)"
    phases = ", ".join(f"{p} {n}" for p, n in facts["diverging_phases"].items())
    return (f"diverges from {facts['reference']} at {first['phase']} request {first['request']}, "
            f"position {first['position']} ({facts['diverging_requests']} of {facts['requests']} requests: {phases})")


def _not_comparable(reference: Reference, base: CellResult, cand: CellResult) -> str:
    """Why the reference's cells cannot be read ("" where they can), side by side."""
    problems = []
    for side, own, ref in (("base", base, reference.base), ("candidate", cand, reference.candidate)):
        if ref is None:
            problems.append(f"{side}: no cell of {reference.config} in this run")
        elif ref.status != Status.OK:
            problems.append(f"{side}: {reference.config} reads {ref.status.value}"
                            f"{f' ({ref.reason})' if ref.reason else ''}")
        elif sorted(_keys(own)) != sorted(_keys(ref)) or ref.workload_fingerprint != own.workload_fingerprint:
            problems.append(f"{side}: {reference.config} served other requests (another workload or version)")
    return f"the reference configuration {reference.config}: {'; '.join(problems)}" if problems else ""


def versus(base: CellResult, cand: CellResult, reference: Reference | None, params: dict[str, Any]) -> Across:
    if reference is None:
        return _across_revisions(base, cand)
    why = _not_comparable(reference, base, cand)
    if why:
        return Across((), {"not_comparable": why})
    assert reference.base is not None and reference.candidate is not None  # _not_comparable checked
    b, c = divergences(base, reference.base), divergences(cand, reference.candidate)
    base_facts = _summary(base, b, reference.config, reference.base)
    cand_facts = _summary(cand, c, reference.config, reference.candidate)
    metrics = ((Metric("diverging", Kind.EXACT, b, headline="", paired=True),
                Metric("diverging", Kind.EXACT, c, headline="", paired=True)),
               *_revision_metrics(base, cand))
    # Both sides depart alike: equal metrics, and the candidate still serves other answers than
    # its reference. Never a *same*.
    not_same = (f"both sides diverge from {reference.config} alike ({divergence_text(cand_facts)})"
                if cand_facts["first_divergence"] else "")
    return Across(metrics, cand_facts, base_facts=base_facts, not_same=not_same)


def _across_revisions(base: CellResult, cand: CellResult) -> Across:
    """A configuration that is no other's: the candidate's answers against the base's."""
    if sorted(_keys(base)) != sorted(_keys(cand)) or base.workload_fingerprint != cand.workload_fingerprint:
        return Across((), {"not_comparable": "the two sides served other requests (another workload or version)"})
    return Across(_revision_metrics(base, cand), _summary(cand, divergences(cand, base), "the base", base))


def _revision_metrics(base: CellResult, cand: CellResult) -> tuple[tuple[Metric, Metric], ...]:
    """Base vs candidate on this configuration's own answers, per request in the base's order:
    where the candidate's answer departs from the base's (`revision_diverging`), and the tokens
    each request found cached (`cached_tokens`: under deterministic inference the same requests
    in the same order reuse the same prefix, every phase and turn)."""
    c = divergences(cand, base)
    cached = {(s["phase"], s["request"]): s.get("cached_tokens") for s in cand.samples}
    return ((Metric("revision_diverging", Kind.EXACT, (float(IDENTICAL),) * len(c), headline="", paired=True),
             Metric("revision_diverging", Kind.EXACT, c, headline="", paired=True)),
            (Metric("cached_tokens", Kind.EXACT, tuple(float(s.get("cached_tokens") or 0) for s in base.samples),
                    headline="", paired=True),
             Metric("cached_tokens", Kind.EXACT, tuple(float(cached[(s["phase"], s["request"])] or 0)
                                                      for s in base.samples), headline="", paired=True)))


def reference_of(config: str, params: dict[str, Any], configs: Sequence[str]) -> str | None:
    """The configuration `config` is compared with: `against`'s entry for it, or for a name
    graph_modes expanded (`<name>-graphs-<mode>`) the entry of `<name>`, in the same mode where
    the reference was expanded too (the mode's name where neither is among `configs`)."""
    against = params["against"]
    if config in against:
        return against[config]
    stem, sep, mode = config.rpartition(GRAPH_SUFFIX)
    if not sep or stem not in against:
        return None
    same_mode = f"{against[stem]}{GRAPH_SUFFIX}{mode}"
    return same_mode if same_mode in configs or against[stem] not in configs else against[stem]


def check_suite(params: dict[str, Any], configs: Sequence[str], where: str) -> None:
    """Every configuration `against` names, and every reference, runs this probe in the suite."""
    stems = {c.rpartition(GRAPH_SUFFIX)[0] for c in configs if GRAPH_SUFFIX in c}
    for config, ref in params["against"].items():
        if config not in configs and config not in stems:
            raise UsageError(f"{where}.against: {config!r} is no configuration that runs the reference probe "
                             f"(those that do: {', '.join(configs)})")
        for name in (c for c in configs if c == config or c.rpartition(GRAPH_SUFFIX)[0] == config):
            resolved = reference_of(name, params, configs)
            if resolved not in configs:
                raise UsageError(f"{where}.against: {name}'s reference {resolved!r} is no configuration that runs "
                                 f"the reference probe (those that do: {', '.join(configs)})")
            if resolved == name:
                raise UsageError(f"{where}.against: {name!r} is its own reference")


def describe(facts: dict[str, Any], primary: Metric | None) -> str:
    if "reference" in facts:
        return divergence_text(facts)
    return f"{facts.get('requests')} requests in {len(facts.get('phases') or ())} phases, top-{facts.get('top_k')}"


def planned(params: dict[str, Any], workload: WorkloadSpec, deterministic: bool) -> tuple[PlannedMetric, ...]:
    """Per request, where it departs from its reference (or, on a configuration that is none's
    but its own, from the base): exact."""
    return (PlannedMetric("diverging", Kind.EXACT, paired=True),
            PlannedMetric("revision_diverging", Kind.EXACT, paired=True),
            PlannedMetric("cached_tokens", Kind.EXACT, paired=True))


def _request_place(samples: Sequence[dict[str, Any]], i: int) -> str:
    if i >= len(samples):
        return f"request {i}"
    s = samples[i]
    turn = f" (turn {s['turn']} of prompt {s['prompt']})" if "turn" in s else ""
    return f"{s['phase']} request {s['request']}{turn}"


def _cached_place(samples: Sequence[dict[str, Any]], i: int) -> str:
    return f"{_request_place(samples, i)} (tokens found cached)"


def _place(samples: Sequence[dict[str, Any]], i: int) -> str:
    return f"{_request_place(samples, i)} (first divergent output position, -1: identical)"


VALUES = {"diverging": ValueIndex("request", _place,
                                  sides="the base against its reference → the candidate against its reference"),
          "revision_diverging": ValueIndex("request", _place,
                                           sides="the base against itself → the candidate against the base"),
          "cached_tokens": ValueIndex("request", _cached_place)}

FIGURES = (
    metric("diverging"), metric("revision_diverging"), metric("cached_tokens"),
    *summary("diverging", "diverging_requests", "diverging_phases"),
    *locator("diverging", "first_divergence"),
    *parameter("deterministic", "top_k", "reference"),
    *given("the workload's size and phases, the same on every configuration", "prompts", "phases", "requests"),
    # The fact is per phase, for the table; the metric of the same name (per request) decides.
    *summary("cached_tokens", "cached_tokens"),
    # a count over the cold outputs, which revision_diverging compares request by request
    *summary("revision_diverging", "degenerate_prompts"),
    *given("why the configuration could not be compared with its reference (the row reads error)",
           "not_comparable"),
)

# --------------------------------------------------------------------------- reproducer


def _exact_reproducer(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
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
    if phase == "later_turns":
        return None  # a chain of turns, each on its own server's output: located in words only
    sample = next((s for s in cell.samples if (s["phase"], s["request"]) == (phase, request)), None)
    cold = next((s for s in cell.samples if s["phase"] == "cold" and s["request"] == request), None)
    if sample is None or cold is None:
        return None
    prompt = cold["input_ids"]
    new, top_k = int(cell.metadata.get("workload", {}).get("output_len", len(cold["output_ids"]))), cell_top_k(cell)
    full = max(len(sample["output_ids"]), j + 1)
    across = "diverging" not in comp.metrics  # no reference configuration: base vs candidate
    reference = "" if across else str(facts["reference"])

    def requests(size: int) -> tuple[Request, ...]:
        """FLUSH, then every phase whose requests for this prompt wrote the cache the phase's
        request reads, as the probe sent them: a hit the cold decode that seeds the cache; a next
        turn (`multiturn`) the cold decode, whose output it continues (each server its own, as
        the probe did), and the hit phase's decode, which wrote the cache again after it; after
        a flush (`multiturn_cold`) the cold decode alone."""
        cut = "up to the first divergent token" if size == j + 1 else f"{size} tokens"
        ask = decode_request(f"the {phase} request, {cut}", sample["input_ids"], size, top_k)
        if phase in ("cold", "single"):
            return FLUSH, ask
        seed = decode_request(f"cold decode of prompt {request}: "
                       + ("seeds the cache" if phase != "multiturn_cold" else "its output is the next turn's"),
                       prompt, new, top_k)
        if phase == "hit":
            return FLUSH, seed, ask
        turn = Request(ask.what + OWN_OUTPUT.format(side), ask.path, ask.body, follows=(1, len(prompt)))
        if phase == "multiturn":
            again = decode_request(f"the hit phase: prompt {request} again, whose decode writes the cache the next "
                                   f"turn hits", prompt, new, top_k)
            return FLUSH, seed, again, turn
        return FLUSH, seed, FLUSH, turn

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
    return tuple((t, *v) for t, v in zip(gen.output_ids, entry_values(gen, "output_token_logprobs")))


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
    shown = returned_pair(x[1], y[1]) if x is not None and y is not None else (
        finite_text(x[1]) if x else "", finite_text(y[1]) if y else "")
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


REPRODUCTION = Reproduction(exact=_exact_reproducer)

PROBE = register(ProbeKind(
    "reference", run,
    "a configuration vs a reference configuration of the same revision (unified vs static, graphs on vs off): "
    "bit-identical answers in cold, hit and multi-turn phases",
    params=PARAMS, describe=describe, planned=planned, values=VALUES.get, figures=FIGURES,
    reference=reference_of, versus=versus, suite_check=check_suite, reproduction=REPRODUCTION))
