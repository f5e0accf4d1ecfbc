"""determinism: one prompt at batch sizes 1..N must give one unique output (and logprobs).

The other rows of each batch are different prompts of other lengths, so a kernel whose
reduction order depends on the batch shape shows up as a second unique output.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Sequence

from harness.client import OUTPUT_LOGPROBS
from harness.errors import ServerFinding
from harness.params import Param
from harness.suite import WorkloadSpec
from harness.probes.base import (PlannedMetric, ProbeContext, ProbeKind, Reproduction, ValueIndex, locator, metric,
                                 parameter, register, summary)
from harness.probes.shared_params import JUDGING, MEASURED, WORKLOAD, non_empty
from harness.reproducer import Form, Observed, decode_request, with_form, workload_prompts
from harness.results import CellResult, Metric, ProbeComparison, ProbeOutput, Reproducer
from harness.textfmt import value_label
from harness.verdict_stats import Kind


def batch_sizes(ctx: ProbeContext) -> list[int]:
    """The suite's `batch_sizes`, else every size from 1 to `max_batch_size`: a kernel whose
    reduction order changes only at an odd size (5, 7) is missed by a sparse list."""
    return ctx.param("batch_sizes") or list(range(1, ctx.param("max_batch_size") + 1))


def batch(prompts: Sequence[Sequence[int]], size: int) -> list[Sequence[int]]:
    """The first prompt, then the others in turn (itself when alone) up to `size` rows."""
    fillers = prompts[1:] or prompts
    return [prompts[0]] + [fillers[j % len(fillers)] for j in range(size - 1)]


def run(ctx: ProbeContext) -> ProbeOutput:
    sizes = batch_sizes(ctx)
    prompts = list(ctx.workload.prompts)
    with_logprobs = ctx.param("logprobs")
    samples, signatures = [], []
    for i, size in enumerate(sizes):
        gen = ctx.client.generate(batch(prompts, size), max_new_tokens=ctx.workload.output_len,
                                  logprobs=OUTPUT_LOGPROBS if with_logprobs else None)[0]
        record = {"output_ids": list(gen.output_ids),
                  "logprobs": gen.output_logprobs if with_logprobs else None}
        signature = hashlib.sha256(json.dumps(record).encode()).hexdigest()[:16]
        signatures.append(signature)
        samples.append({"batch_size": size, "signature": signature, **record})
        ctx.advance(i + 1, len(sizes))
    if with_logprobs:
        require_finite(samples)
    unique = len(set(signatures))
    other = next((s for s in samples if s["signature"] != signatures[0]), None)
    facts = {"unique_outputs": unique, "batch_sizes": sizes,
             "first_differing_batch_size": other["batch_size"] if other else None,
             "first_difference": first_difference(samples[0], other) if other else None,
             "compares": "output ids + logprobs" if with_logprobs else "output ids"}
    metric = Metric("unique_outputs", Kind.EXACT, (float(unique),), better="lower", headline="first")
    return ProbeOutput(samples=tuple(samples), metrics=(metric, *departure_metrics(samples, with_logprobs)),
                       facts=facts)


def require_finite(samples: Sequence[dict[str, Any]]) -> None:
    """Every batch size's answer holds a finite logprob at every output position, or a
    ServerFinding naming the first batch size and position that does not: a NaN would make a
    batch "depart from itself" and the row would blame the batch."""
    broken = [(s["batch_size"], j, value_label(v)) for s in samples
              for j, v in enumerate(s["logprobs"] or []) if v is None or not math.isfinite(v)]
    if broken:
        sizes = sorted({b for b, _, _ in broken})
        size, position, label = broken[0]
        raise ServerFinding(f"decode returned {label} output logprobs at batch size {size} from output position "
                            f"{min(j for b, j, _ in broken if b == size)} of prompt 0 "
                            f"({len(sizes)} of {len(samples)} batch sizes hold one: {sizes_text(sizes)})",
                            tuple(samples))


def departure_metrics(samples: Sequence[dict[str, Any]], with_logprobs: bool) -> tuple[Metric, ...]:
    """Per batch size, the output position where the first prompt's token ids (and logprobs)
    first depart from the first batch size's: what the `first_difference` fact locates, for every size.

    They are exact figures of a fixed workload and decide, as every exact metric does by
    default: two sides with as many unique outputs, whose batches depart at other sizes or
    positions, or in their ids where the other's departed in the logprobs only, are not the
    same; `first_difference` stays a locator (the row's text), which these compare in full."""
    names = (("ids_departure", "output_ids"), *((("logprob_departure", "logprobs"),) if with_logprobs else ()))
    return tuple(Metric(name, Kind.EXACT, tuple(float(departure(samples[0][key], s[key])) for s in samples),
                        headline="min") for name, key in names)


def departure(reference: Sequence[Any], other: Sequence[Any]) -> int:
    """The first position where `other` differs from `reference`; where neither differs as far
    as both go, the shorter's length (the reference's own length when they are equal)."""
    return next((j for j, (a, b) in enumerate(zip(reference, other)) if a != b), min(len(reference), len(other)))


def first_difference(reference: dict, other: dict) -> dict:
    """Where `other`'s output first departs from the first batch size's: the prompt (the target
    is prompt 0 of the workload), the output position, and whether the token ids changed there
    or only the logprobs (the same tokens, other numbers: a reduction order that moved)."""
    ids, other_ids = reference["output_ids"], other["output_ids"]
    if ids != other_ids:
        return {"batch_size": other["batch_size"], "prompt": 0, "position": departure(ids, other_ids),
                "changed": "ids"}
    lps, other_lps = reference["logprobs"] or [], other["logprobs"] or []
    return {"batch_size": other["batch_size"], "prompt": 0, "position": departure(lps, other_lps),
            "changed": "logprobs only"}


def sizes_text(sizes: list[int] | None) -> str:
    """[1, 2, …, 8] as "1–8"; any other list as written."""
    if sizes and len(sizes) > 2 and sizes == list(range(sizes[0], sizes[-1] + 1)):
        return f"{sizes[0]}–{sizes[-1]}"
    return str(sizes)


def describe(facts: dict, primary) -> str:
    text = f"{facts.get('unique_outputs')} unique over batch sizes {sizes_text(facts.get('batch_sizes'))}"
    first = facts.get("first_difference")
    if first:
        text += (f" (first differs at batch size {first['batch_size']}: prompt {first['prompt']}, "
                 f"token {first['position']}, {first['changed']})")
    elif facts.get("first_differing_batch_size") is not None:  # a cell stored before positions were
        text += f" (first differs at {facts['first_differing_batch_size']})"
    return text


PARAMS = (
    *WORKLOAD,
    Param("batch_sizes", list[int], None, "batch sizes the first prompt is sent at "
          "(default: every size 1..max_batch_size)", MEASURED, low=1, high=100_000, check=non_empty),
    Param("max_batch_size", int, 8, "largest batch size when batch_sizes is not given", MEASURED,
          low=1, high=100_000),
    Param("logprobs", bool, True, "compare logprobs as well as output ids", MEASURED),
    *JUDGING,
)
def planned(params: dict[str, Any], workload: WorkloadSpec, deterministic: bool) -> tuple[PlannedMetric, ...]:
    """Exact metrics, on any configuration: unique outputs and where each batch size departs."""
    departures = ("ids_departure", "logprob_departure") if params["logprobs"] else ("ids_departure",)
    return tuple(PlannedMetric(name, Kind.EXACT) for name in ("unique_outputs", *departures))


def _batch_place(samples: Sequence[dict[str, Any]], i: int) -> str:
    return f"batch size {samples[i]['batch_size']}" if i < len(samples) else f"batch size {i + 1}"


VALUES = {name: ValueIndex("batch size", _batch_place) for name in ("ids_departure", "logprob_departure")}

FIGURES = (
    metric("unique_outputs"), metric("ids_departure"), metric("logprob_departure"),
    *summary("unique_outputs", "unique_outputs"),
    *locator("ids_departure", "first_differing_batch_size", "first_difference"),
    *parameter("batch_sizes", "compares"),
)

# --------------------------------------------------------------------------- reproducer


def _batch_form(requests) -> Form:
    """Determinism: prompt 0 alone vs first in a batch, on each side: equal or not."""
    def read(_size: int, gens: list) -> Observed:
        alone, batched = gens[0], gens[1]
        same = (alone.output_ids == batched.output_ids and alone.output_logprobs == batched.output_logprobs
                if alone is not None and batched is not None else None)
        return Observed(same)

    def words(b: Observed, c: Observed) -> str:
        said = {True: "the same answer alone and in the batch", False: "another answer in the batch than alone",
                None: "no answer"}
        return f"base returned {said[b.value]}; candidate {said[c.value]}"

    return Form(requests, read, words, 1, 1)


def _exact_reproducer(comp: ProbeComparison, base: CellResult, cand: CellResult) -> Reproducer | None:
    prompts = workload_prompts(cand)
    side = next((s for s, c in (("candidate", cand), ("base", base)) if c.facts.get("first_differing_batch_size")),
                None)
    if side is None or prompts is None:
        return None
    cell = cand if side == "candidate" else base
    size = cell.facts["first_differing_batch_size"]
    new = cell.metadata.get("workload", {}).get("output_len", 1)
    requests = (decode_request("prompt 0 alone", prompts[0], new),
                decode_request(f"prompt 0 in a batch of {size}", batch(prompts, size), new))
    return with_form(Reproducer(
        prompts=(0,), first_divergent={"prompt": 0, "batch_size": size, "what": "batch size", "side": side},
        requests=requests,
        expect=f"on the {side}, the first answer of the batch of {size} differs from prompt 0 alone",
        shrink=f"Batch sizes → the first that differs ({size}); prompts kept (the batch is the cause)"),
        _batch_form(lambda _size: requests))


REPRODUCTION = Reproduction(exact=_exact_reproducer)

PROBE = register(ProbeKind("determinism", run, "same prompt across batch sizes: unique outputs",
                           params=PARAMS, describe=describe, planned=planned, values=VALUES.get,
                           figures=FIGURES, reproduction=REPRODUCTION))
